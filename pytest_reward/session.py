"""Per-session state of the plugin (one object on ``config.stash``): settings, the registry of reward
functions, and — on the controller — the aggregation of outcomes into summaries and gate verdicts."""

from __future__ import annotations

import fnmatch
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from .options import Settings

if TYPE_CHECKING:
    from .baseline import Comparison
    from .discovery import Registry, RewardFn
    from .results import GateResult, GroupAccumulator, SampleOutcome, Summary
    from .thresholds import Gates

__all__ = ["REWARD_DATA", "GroupReport", "RewardSession", "session_key"]


@dataclass
class GroupReport:
    """Everything known about one reward function × samples file at the end of a run."""

    function: str
    file: str
    summary: Summary
    gates: list[GateResult] = field(default_factory=list)
    outcomes: list[SampleOutcome] = field(default_factory=list)
    """Every sample's outcome (sample granularity), or the failing and lowest-scoring ones (file granularity)."""
    complete_outcomes: bool = True
    preview_pool: list[SampleOutcome] = field(default_factory=list)
    """A seeded random sample of outcomes (file granularity) to draw previews from."""
    flaky: list[SampleOutcome] = field(default_factory=list)
    rows_file: Path | None = None
    record: dict[str, list[Any]] | None = None
    """Per-sample key/score/verdict/id/line columns shipped by file-granularity items (for stored runs)."""
    comparison: Comparison | None = None

    def samples_record(self) -> dict[str, dict[str, Any]]:
        """``{key: {score, verdict, id, line}}`` of every sample, for stored runs and comparisons."""
        if not self.complete_outcomes and self.record is not None:
            c = self.record
            return {
                k: {"score": s, "verdict": v, "id": i, "line": n}
                for k, s, v, i, n in zip(c["key"], c["score"], c["verdict"], c["id"], c["line"], strict=True)
            }
        return {
            row["key"]: {
                "score": row["score"],
                "verdict": row["verdict"],
                "id": row["id"],
                "line": row["line"],
            }
            for row in self.rows()
        }

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if g.evaluated and not g.passed]

    @property
    def verdict(self) -> str:
        if self.summary.n_fail or self.failed_gates:
            return "FAIL"
        if not self.summary.complete:
            return "partial"
        return "PASS"

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every sample's ``results.jsonl`` row, in file order."""
        if self.complete_outcomes:
            for outcome in sorted(self.outcomes, key=lambda o: o.line):
                yield outcome.row(text=False)
        elif self.rows_file is not None:
            with open(self.rows_file, encoding="utf-8") as fh:
                for line in fh:
                    yield json.loads(line)

    def write_rows(self, fh: IO[str]) -> None:
        """Write every row as JSON lines; file-granularity rows are copied as they were streamed (no re-encoding)."""
        if self.complete_outcomes:
            from .results import row_json

            for outcome in sorted(self.outcomes, key=lambda o: o.line):
                fh.write(row_json(outcome) + "\n")
        elif self.rows_file is not None:
            import shutil

            with open(self.rows_file, encoding="utf-8") as src:
                shutil.copyfileobj(src, fh, 1 << 20)

    def failing(self, limit: int = 20) -> list[SampleOutcome]:
        return sorted((o for o in self.outcomes if o.verdict == "fail"), key=lambda o: o.line)[:limit]

    def worst(self, limit: int = 20) -> list[SampleOutcome]:
        """Lowest scores first; errored samples count as lowest."""
        return sorted(self.outcomes, key=_worst_key)[:limit]

    def preview(self, n: int, seed: int) -> list[SampleOutcome]:
        """``n`` samples to show: the worst half first, then a seeded random pick of the rest."""
        if n <= 0:
            return []
        worst = self.worst((n + 1) // 2)
        chosen = {(o.line, o.key) for o in worst}
        pool = self.outcomes if self.complete_outcomes else self.preview_pool
        rest = sorted((o for o in pool if (o.line, o.key) not in chosen), key=lambda o: o.line)
        rng = random.Random(repr((seed, self.function, self.file)))
        pick = rng.sample(rest, min(len(rest), n - len(worst)))
        return worst + sorted(pick, key=lambda o: o.line)


def _worst_key(outcome: SampleOutcome) -> tuple[int, float, int]:
    if outcome.score is None:
        return (0, 0.0, outcome.line)
    return (1, outcome.score, outcome.line)


class RewardSession:
    """State shared by the plugin's hooks."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.registry: Registry | None = None
        self.explicit_files: set[Path] = set(settings.samples)
        self.is_worker = hasattr(config, "workerinput")
        #: Not asked for on the command line or in ini, but reward functions bind samples files in markers.
        self.bound_only = False
        # controller-side aggregation
        self._accumulators: dict[tuple[str, str], GroupAccumulator] = {}
        self._outcomes: dict[tuple[str, str], list[SampleOutcome]] = {}
        self._file_groups: dict[tuple[str, str], tuple[Summary, dict[str, Any]]] = {}
        self._expected: dict[tuple[str, str], int] = {}
        self.reports: list[GroupReport] | None = None
        self.parts_dir: Path | None = None
        self.baseline: tuple[Path, dict[str, Any]] | None = None
        self.comparisons: list[Comparison] = []
        self.compare_failures: list[str] = []
        self.saved_path: Path | None = None
        self.report_paths: list[Path] = []
        self.output_errors: list[str] = []
        self._meta: dict[str, Any] | None = None
        self._record: dict[str, Any] | None = None
        self.targets: Any = None
        self._job: Any = None
        self._reported_gates: dict[str, Gates] = {}
        self._rollouts: Any = None
        self.rollout_calls = 0
        self.rollout_seconds = 0.0
        """Model calls made for prompt-only samples, summed over every process from the items' reports."""
        self.deploy_outcome: Any = None

    # -- discovery ---------------------------------------------------------------------------------------

    def note_explicit(self, args: list[str]) -> None:
        """Remember JSONL files named as positional arguments (they meet every unbound function)."""
        base = self.config.invocation_params.dir
        for arg in args:
            path = Path(arg.split("::", 1)[0])
            if not path.is_absolute():
                path = base / path
            if path.suffix == ".jsonl" and path.is_file():
                self.explicit_files.add(path.resolve())

    @property
    def active(self) -> bool:
        """Reward testing was asked for (options, ini, or a ``.jsonl`` path argument)."""
        return self.settings.active or bool(self.explicit_files)

    @property
    def collecting(self) -> bool:
        return self.active or self.bound_only

    def discover(self, session: pytest.Session, *, light: bool = False) -> Registry:
        """Find the reward functions once (both on workers and on the controller).

        ``light``: for runs that did not ask for reward testing — only reward modules under pytest's own
        arguments, no test modules; used to find functions whose marker binds samples files.
        """
        if self.registry is not None:
            return self.registry
        from .discovery import DiscoveryOptions, discover

        config = self.config
        roots: list[Path] = []
        for arg in config.args:
            path = Path(arg.split("::", 1)[0])
            if not path.is_absolute():
                path = config.invocation_params.dir / path
            if path.is_dir() or (path.is_file() and path.suffix == ".py"):
                roots.append(path)
        if not light and (self.explicit_files or not roots):
            # Named samples files meet every reward function of the project.
            roots.append(config.rootpath)
        roots = list(dict.fromkeys(p.resolve() for p in roots))
        opts = DiscoveryOptions(
            roots=roots,
            rootdir=config.rootpath,
            importmode=config.getoption("importmode"),
            reward_modules=self.settings.reward_modules,
            python_files=tuple(config.getini("python_files")),
            norecursedirs=tuple(config.getini("norecursedirs")),
            fn_specs=self.settings.fn_specs,
            defaults=self.settings.defaults,
            invocation_dir=config.invocation_params.dir,
            test_modules=not light,
        )
        self.registry = discover(opts, config)
        if light:
            self.registry.import_errors.clear()  # not asked for: never break an unrelated run
            self.bound_only = any(fn.gates.samples for fn in self.registry.functions)
        return self.registry

    def check_found(self) -> None:
        """Usage error when reward testing was asked for but no reward function exists."""
        registry = self.registry
        if registry is None or not self.active or registry.functions:
            return
        if registry.selected and registry.import_errors:
            raise pytest.UsageError("\n".join(f"{where}: {msg}" for where, msg in registry.import_errors))
        lines = ["pytest-reward: no reward functions found."]
        if not registry.selected:
            lines.append("  Looked in: " + ", ".join(registry.looked_in))
            lines.append(
                "  for modules matching "
                + " ".join(registry.patterns)
                + " (ini reward_modules) and test modules "
                "mentioning @reward_function."
            )
            lines.append(
                "  Decorate a function with @reward_function, or name one with --reward-fn path.py::name."
            )
        for where, msg in registry.import_errors:
            lines.append(f"  Could not import {where}: {msg}")
        raise pytest.UsageError("\n".join(lines))

    def check_reportable(self) -> None:
        """Invalid reward functions are reported by the first samples file collected; with none, here."""
        registry = self.registry
        if registry is None or self.explicit_files or registry.bound_paths() or self.settings.samples_glob:
            return
        errors = registry.errors()
        if errors:
            raise pytest.UsageError(
                "pytest-reward: invalid reward functions:\n" + "\n".join(f"  {e}" for e in errors)
            )

    def wants_file(self, path: Path) -> tuple[bool, bool, bool]:
        """(collect?, explicit?, glob-matched?) for a ``.jsonl`` file met during collection."""
        resolved = path.resolve()
        explicit = resolved in self.explicit_files
        globbed = any(fnmatch.fnmatch(path.name, pat) for pat in self.settings.samples_glob)
        bound = self.registry is not None and resolved in set(self.registry.bound_paths())
        return explicit or globbed or bound, explicit, globbed

    def functions_for(self, path: Path, *, explicit: bool, globbed: bool) -> list[RewardFn]:
        assert self.registry is not None
        return self.registry.for_file(path, explicit=explicit, globbed=globbed)

    def listed_evaluations(self, session: pytest.Session, known: set[str]) -> list[pytest.Item]:
        """Items of the ``Evaluation`` classes listed in ini ``reward_evaluations`` (those not already collected
        from a test module), collected through pytest's own reporting so that they count and show as usual."""
        if not self.settings.evaluations:
            return []
        from .discovery import DiscoveryError, load_evaluation_spec
        from .items import EvaluationsModule

        config = self.config
        by_module: dict[str, tuple[Any, list[tuple[str, type]]]] = {}
        for spec in self.settings.evaluations:
            try:
                module, cls = load_evaluation_spec(
                    spec, config.rootpath, config.invocation_params.dir, config.getoption("importmode")
                )
            except DiscoveryError as exc:
                raise pytest.UsageError(str(exc)) from None
            entry = by_module.setdefault(module.__name__, (module, []))
            if (cls.__name__, cls) not in entry[1]:
                entry[1].append((cls.__name__, cls))
        items: list[pytest.Item] = []
        for module, classes in by_module.values():
            path = Path(module.__file__ or config.rootpath / module.__name__)
            collector = EvaluationsModule.from_parent(session, path=path, module=module, classes=classes)
            items.extend(i for i in session.genitems(collector) if i.nodeid not in known)
        return items

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.config.rootpath.resolve()).as_posix()
        except ValueError:
            return str(path)

    # -- controller-side aggregation -----------------------------------------------------------------------

    def _gates(self, name: str) -> Gates:
        from .thresholds import Gates

        fn = self._function(name)
        if fn is not None:
            return fn.gates
        return self._reported_gates.get(name, Gates())

    def _function(self, name: str) -> RewardFn | None:
        if self.registry is None:
            return None
        return next((f for f in self.registry.functions if f.name == name), None)

    def add_report(self, report: pytest.TestReport) -> None:
        """Fold the reward data of one test report into the session's aggregates (controller side)."""
        from .results import GroupAccumulator, SampleOutcome, Summary
        from .thresholds import Gates

        data: dict[str, Any] | None = getattr(report, "reward", None)
        if not data:
            return
        for group in data.get("groups", []):
            key = (group["function"], group["file"])
            self._expected[key] = max(self._expected.get(key, 0), int(group.get("total", 0)))
        if data.get("gates") is not None and data.get("groups"):
            # Items that are not reward functions (evaluations) carry their gates: the xdist controller has
            # not collected them.
            from .thresholds import Gates, validate_marker

            name = data["groups"][0]["function"]
            if name not in self._reported_gates:
                self._reported_gates[name] = Gates().merged(
                    validate_marker((), data["gates"], "marker"), "marker"
                )
        rollouts = data.get("rollouts")
        if rollouts:
            self.rollout_calls += int(rollouts[0])
            self.rollout_seconds += float(rollouts[1])
        for raw in data.get("outcomes", []):
            outcome = SampleOutcome.from_dict(raw)
            key = (outcome.function, outcome.file)
            acc = self._accumulators.get(key)
            if acc is None:
                acc = self._accumulators[key] = GroupAccumulator(
                    outcome.function,
                    outcome.file,
                    self._gates(outcome.function),
                    flaky_spread=self.settings.flaky_spread,
                )
            acc.add(outcome)
            self._outcomes.setdefault(key, []).append(outcome)
        if "summary" in data:
            summary = Summary.from_dict(data["summary"])
            self._file_groups[(summary.function, summary.file)] = (summary, data)

    # -- models (prompt-only samples, Evaluation items) -----------------------------------------------------

    def inference_job(self) -> Any:
        """Build the session's InferenceJob from the settings, once (the ``inference_job`` fixture's default)."""
        if self._job is not None:
            return self._job
        settings = self.settings
        if not settings.model:
            pytest.fail(MODEL_MISSING, pytrace=False)
        located = _locate_model(settings.model)
        if located is None:  # checked before importing jax: a typo should not cost a jax import
            pytest.fail(
                f"--reward-model {settings.model}: not a model directory (no config.json) and not a shipped example "
                f"model (available: {', '.join(_shipped_models()) or 'none'})",
                pytrace=False,
            )
        try:
            from .jax import InferenceJob, load_tokenizer, resolve_model

            path = resolve_model(located)
            tokenizer: Any = load_tokenizer(settings.tokenizer) if settings.tokenizer else "auto"
            cache = settings.jax_cache_dir
            job = InferenceJob.from_checkpoint(
                path,
                tokenizer=tokenizer,
                per_device_batch_size=settings.max_batch,
                compilation_cache_dir=cache,
            )
        except ImportError as exc:
            pytest.fail(
                f"--reward-model needs the jax extra: pip install 'pytest-reward[jax]' ({exc})", pytrace=False
            )
        except Exception as exc:
            pytest.fail(f"--reward-model {settings.model}: {type(exc).__name__}: {exc}", pytrace=False)
        vocab = getattr(job.tokenizer, "vocab_size", None)
        if vocab is not None and vocab > job.config.vocab_size:
            pytest.fail(
                f"--reward-tokenizer: the tokenizer has {vocab} tokens but the model's vocabulary has "
                f"{job.config.vocab_size}: they do not belong together",
                pytrace=False,
            )
        self._job = job
        return job

    def rollout_settings(self, overrides: dict[str, Any]) -> Any:
        from .rollouts import RolloutSettings

        return RolloutSettings(**{**self.settings.rollout, **overrides})

    @property
    def rollouts(self) -> Any:
        if self._rollouts is None:
            from .rollouts import RolloutPool

            self._rollouts = RolloutPool(self.settings.max_batch, progress=self.progress)
        return self._rollouts

    def progress(self, label: str, total: int) -> Any:
        from .report.progress import Progress

        return Progress(self.config, label, total)

    @property
    def has_results(self) -> bool:
        """Whether any reward item reported (unrelated runs skip all the end-of-run work)."""
        return bool(self._accumulators or self._file_groups)

    def finish(self) -> list[GroupReport]:
        """Summaries and gate verdicts of every group (computed once, on the controller)."""
        if self.reports is not None:
            return self.reports
        from .results import SampleOutcome, evaluate_gates

        settings = self.settings
        reports: list[GroupReport] = []
        for key, acc in self._accumulators.items():
            summary = acc.summary(
                seed=settings.seed, n_resamples=settings.n_resamples, expected=self._expected.get(key)
            )
            reports.append(
                GroupReport(
                    key[0],
                    key[1],
                    summary,
                    evaluate_gates(summary, self._gates(key[0])),
                    self._outcomes[key],
                    flaky=acc.flaky,
                )
            )
        for key, (summary, data) in self._file_groups.items():

            def outcomes(name: str, data: dict[str, Any] = data) -> list[SampleOutcome]:
                return [SampleOutcome.from_dict(o) for o in data.get(name, [])]

            rows_file = data.get("rows_file")
            reports.append(
                GroupReport(
                    key[0],
                    key[1],
                    summary,
                    evaluate_gates(summary, self._gates(key[0])),
                    outcomes("worst"),
                    complete_outcomes=False,
                    preview_pool=outcomes("preview"),
                    flaky=outcomes("flaky"),
                    rows_file=Path(rows_file) if rows_file else None,
                    record=data.get("record"),
                )
            )
        reports.sort(key=lambda r: (r.function, r.file))
        self.reports = reports
        return reports

    # -- rows of file-granularity items (they cannot travel in reports) -------------------------------------

    def setup_parts_dir(self) -> None:
        """Where file-granularity items stream their per-sample rows for the controller (when needed)."""
        if self.is_worker:
            value = self.config.workerinput.get("reward_parts_dir")  # type: ignore[attr-defined]
            self.parts_dir = Path(value) if value else None
        elif self.settings.needs_rows:
            import tempfile

            self.parts_dir = Path(tempfile.mkdtemp(prefix="pytest-reward-rows-"))

    def open_rows_part(self, function: str, file: str) -> IO[str] | None:
        if self.parts_dir is None:
            return None
        import uuid

        return open(self.parts_dir / f"{uuid.uuid4().hex}.jsonl", "w", encoding="utf-8")

    def cleanup(self) -> None:
        if self.parts_dir is not None and not self.is_worker:
            import shutil

            shutil.rmtree(self.parts_dir, ignore_errors=True)

    # -- after the run: comparison, stored runs, result files (controller) -----------------------------------

    def run_record(self) -> dict[str, Any]:
        """What ``--reward-save`` stores and comparisons read: aggregates and every sample's score by key."""
        if self._record is None:
            self._record = self._build_record()
        return self._record

    def _build_record(self) -> dict[str, Any]:
        from .baseline import FORMAT, VERSION

        record: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        record.update(self.meta())
        groups = []
        for report in self.finish():
            samples = report.samples_record()
            groups.append(
                {
                    "function": report.function,
                    "file": report.file,
                    "verdict": report.verdict,
                    "summary": {
                        k: v
                        for k, v in report.summary.to_dict().items()
                        if k
                        in (
                            "n",
                            "n_errors",
                            "n_pass",
                            "n_below",
                            "n_fail",
                            "mean",
                            "min",
                            "max",
                            "p10",
                            "pass_rate",
                            "mean_ci",
                        )
                    },
                    "samples": samples,
                }
            )
        record["groups"] = groups
        return record

    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            from .meta import run_meta

            self._meta = run_meta(
                self.config.rootpath, list(self.config.invocation_params.args), self.settings.seed
            )
        return self._meta

    def load_baseline(self) -> tuple[Path, dict[str, Any]] | None:
        """Resolve and validate ``--reward-compare`` (called early, so a bad baseline is a usage error)."""
        if not self.settings.compare:
            return None
        from .baseline import Storage

        storage = Storage(self.settings.storage)
        path = storage.resolve(self.settings.compare)
        self.baseline = (path, storage.load(path))
        return self.baseline

    def compare(self) -> list[str]:
        """Compare with the baseline; returns the failure lines of ``--reward-compare-fail`` rules."""
        if self.baseline is None:
            return []
        from .baseline import compare_runs, evaluate_rules, parse_rules

        _path, base = self.baseline
        rules = parse_rules(self.settings.compare_fail)
        self.comparisons = compare_runs(
            self.run_record(),
            base,
            seed=self.settings.seed,
            n_resamples=self.settings.n_resamples,
            strict_confidence=self.settings.compare_confidence,
        )
        by_key = {(c.function, c.file): c for c in self.comparisons}
        for report in self.finish():
            report.comparison = by_key.get((report.function, report.file))
        self.compare_failures = evaluate_rules(self.comparisons, rules, strict=self.settings.compare_strict)
        return self.compare_failures

    def write_outputs(self) -> list[str]:
        """Store the run and write result files. Returns error lines (never raises for I/O problems)."""
        errors: list[str] = []
        settings = self.settings
        if settings.save is not None or settings.autosave:
            from .baseline import Storage

            meta = self.meta()
            commit = (meta.get("commit") or {}).get("short")
            if settings.save:
                name = settings.save
            elif settings.autosave and settings.save is None:
                stamp = meta["generated_at"].replace("-", "").replace(":", "").replace("T", "_")[:15]
                name = f"{commit or 'nocommit'}_{stamp}"
            else:
                name = commit or "run"
            try:
                self.saved_path = Storage(settings.storage).save(self.run_record(), name)
            except pytest.UsageError as exc:
                errors.append(str(exc))
            except OSError as exc:
                errors.append(f"could not store the run in {settings.storage}: {exc}")
        if settings.report_dir is not None:
            from .report.files import write_report_dir

            try:
                self.report_paths = write_report_dir(self, settings.report_dir)
            except OSError as exc:
                errors.append(f"could not write the report to {settings.report_dir}: {exc}")
        import os

        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_path:
            from .report.github import append_step_summary

            try:
                append_step_summary(self, Path(summary_path))
            except OSError as exc:
                errors.append(f"could not append to GITHUB_STEP_SUMMARY {summary_path}: {exc}")
        self.output_errors = errors
        return errors


_SHIPPED_MODELS = Path(__file__).resolve().parent / "jax" / "models"


def _shipped_models() -> list[str]:
    if not _SHIPPED_MODELS.is_dir():
        return []
    return sorted(p.name for p in _SHIPPED_MODELS.iterdir() if (p / "config.json").is_file())


def _locate_model(name: str) -> Path | None:
    """A model directory by path or shipped name, found without importing jax."""
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    candidate = _SHIPPED_MODELS / name
    return candidate if (candidate / "config.json").is_file() else None


MODEL_MISSING = (
    "no model to roll out prompt-only samples or run evaluations: pass --reward-model PATH_OR_NAME (a Hugging Face "
    "model directory, or a shipped example such as tiny-adder), set ini reward_model, or define an "
    "inference_job fixture in conftest.py"
)
session_key = pytest.StashKey[RewardSession]()
#: Reward data of an item's call phase, copied onto its report (``report.reward``) by the plugin.
REWARD_DATA = pytest.StashKey[dict[str, Any]]()
