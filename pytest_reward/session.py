"""Per-session state of the plugin (one object on ``config.stash``): settings, the registry of reward
functions, and — on the controller — the aggregation of outcomes into summaries and gate verdicts."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .options import Settings

if TYPE_CHECKING:
    from .discovery import Registry, RewardFn
    from .results import GateResult, GroupAccumulator, SampleOutcome, Summary

__all__ = ["REWARD_DATA", "GroupReport", "RewardSession", "session_key"]


@dataclass
class GroupReport:
    """Everything known about one reward function × samples file at the end of a run."""

    function: str
    file: str
    summary: Summary
    gates: list[GateResult] = field(default_factory=list)
    outcomes: list[SampleOutcome] = field(default_factory=list)
    """Per-sample outcomes when the controller has them (sample granularity); worst ones in file granularity."""

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
        self._file_summaries: dict[tuple[str, str], tuple[Summary, list[SampleOutcome]]] = {}
        self._expected: dict[tuple[str, str], int] = {}
        self.reports: list[GroupReport] | None = None

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

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.config.rootpath.resolve()).as_posix()
        except ValueError:
            return str(path)

    # -- controller-side aggregation -----------------------------------------------------------------------

    def _function(self, name: str) -> RewardFn | None:
        if self.registry is None:
            return None
        return next((f for f in self.registry.functions if f.name == name), None)

    def add_report(self, report: pytest.TestReport) -> None:
        """Fold the reward data of one test report into the session's aggregates (controller side)."""
        from .results import GroupAccumulator, SampleOutcome, Summary

        data: dict[str, Any] | None = getattr(report, "reward", None)
        if not data:
            return
        for group in data.get("groups", []):
            key = (group["function"], group["file"])
            self._expected[key] = max(self._expected.get(key, 0), int(group.get("total", 0)))
        for raw in data.get("outcomes", []):
            outcome = SampleOutcome.from_dict(raw)
            key = (outcome.function, outcome.file)
            acc = self._accumulators.get(key)
            if acc is None:
                fn = self._function(outcome.function)
                from .thresholds import Gates

                acc = self._accumulators[key] = GroupAccumulator(
                    outcome.function, outcome.file, fn.gates if fn else Gates()
                )
            acc.add(outcome)
            self._outcomes.setdefault(key, []).append(outcome)
        if "summary" in data:
            summary = Summary.from_dict(data["summary"])
            worst = [SampleOutcome.from_dict(o) for o in data.get("worst", [])]
            self._file_summaries[(summary.function, summary.file)] = (summary, worst)

    def finish(self) -> list[GroupReport]:
        """Summaries and gate verdicts of every group (computed once, on the controller)."""
        if self.reports is not None:
            return self.reports
        from .results import evaluate_gates
        from .thresholds import Gates

        settings = self.settings
        reports: list[GroupReport] = []
        for key, acc in self._accumulators.items():
            expected = self._expected.get(key)
            summary = acc.summary(seed=settings.seed, n_resamples=settings.n_resamples, expected=expected)
            fn = self._function(key[0])
            gates = fn.gates if fn else Gates()
            reports.append(
                GroupReport(key[0], key[1], summary, evaluate_gates(summary, gates), self._outcomes[key])
            )
        for key, (summary, worst) in self._file_summaries.items():
            fn = self._function(key[0])
            gates = fn.gates if fn else Gates()
            reports.append(GroupReport(key[0], key[1], summary, evaluate_gates(summary, gates), worst))
        reports.sort(key=lambda r: (r.function, r.file))
        self.reports = reports
        return reports


session_key = pytest.StashKey[RewardSession]()
#: Reward data of an item's call phase, copied onto its report (``report.reward``) by the plugin.
REWARD_DATA = pytest.StashKey[dict[str, Any]]()
