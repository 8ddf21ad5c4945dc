"""reward-kit's metrics folders as pytest sessions: ``pytest-reward preview`` / ``preview_evaluation`` and
``pytest-reward deploy`` / ``create_evaluation``.

A metrics folder is given as ``NAME=PATH``: a directory whose ``main.py`` defines reward functions. The session is
an ordinary reward session, run in-process with ``pytest.main`` (as ``fn.deploy`` does), so the items, verdicts,
gates, tables and deploy step are the plugin's own; in-process, so the per-sample results and the deploy receipt
come back as Python objects. The folders' functions are found when pytest configures (their ``main.py`` imported
under the session's rootdir, as discovery imports it) and become the session's ``--reward-fn`` list.

Samples: the preview takes a samples file; the deploy takes one, or uses the samples bound to the functions
(``@pytest.mark.reward(samples=...)``) or matched by ini ``reward_samples_glob`` in the project; with none it
refuses before anything runs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..errors import DeployError, RewardDeployError, UsageError

__all__ = [
    "DEFAULT_TARGET",
    "MetricsFolder",
    "PreviewResult",
    "deploy_folders",
    "parse_folders",
    "preview_folders",
]

DEFAULT_TARGET = "dir:.reward/deploy"
_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class MetricsFolder:
    name: str
    path: Path
    given: str
    """``NAME=PATH`` as the user wrote it (errors quote it)."""


@dataclass
class PreviewResult:
    """What a preview ran: one dict per sample and reward function (``metric`` is the folder's NAME)."""

    exit_code: int
    results: list[dict[str, Any]] = field(default_factory=list)
    total_runtime_ms: int = 0

    @property
    def total_samples(self) -> int:
        return len({(r["file"], r["line"]) for r in self.results})

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def parse_folders(specs: Sequence[str] | str, source: str) -> list[MetricsFolder]:
    """``NAME=PATH`` specs, checked: each PATH a directory with a ``main.py``; names unique. ``source`` names the
    option or argument in errors."""
    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise UsageError(
            f"{source}: give at least one metrics folder as NAME=PATH (e.g. relevance=./metrics/relevance)"
        )
    folders: list[MetricsFolder] = []
    for spec in specs:
        name, eq, raw = str(spec).partition("=")
        name, raw = name.strip(), raw.strip()
        if not eq or not name or not raw:
            raise UsageError(f"{source} {spec!r}: expected NAME=PATH, e.g. relevance=./metrics/relevance")
        path = Path(raw).expanduser()
        if not path.exists():
            raise UsageError(f"{source} {spec!r}: folder {raw} not found")
        if not path.is_dir():
            raise UsageError(f"{source} {spec!r}: {raw} is not a directory (a metrics folder holds main.py)")
        if not (path / "main.py").is_file():
            raise UsageError(
                f"{source} {spec!r}: {raw} has no main.py (a metrics folder holds main.py defining a "
                "@reward_function)"
            )
        if any(f.name == name for f in folders):
            raise UsageError(f"{source} {spec!r}: the name {name!r} is given twice")
        folders.append(MetricsFolder(name, path.resolve(), str(spec)))
    return folders


def _check_samples(samples: str | Path, source: str) -> Path:
    from ..data.samples import not_a_regular_file

    path = Path(samples).expanduser()
    if not path.exists():
        raise UsageError(f"{source} {samples}: file not found")
    problem = not_a_regular_file(path)
    if problem:
        raise UsageError(f"{source} {samples}: {problem}")
    return path.resolve()


def _within(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
    except ValueError:
        return False
    return True


class _FolderSession:
    """The plugin object of one metrics-folder session (passed to ``pytest.main``)."""

    def __init__(
        self,
        folders: list[MetricsFolder],
        *,
        no_samples_hint: str,
        max_samples: int = 0,
        deployment: dict[str, Any] | None = None,
        force: bool = False,
        force_hint: str = "--force",
    ) -> None:
        self.folders = folders
        self.no_samples_hint = no_samples_hint
        self.max_samples = max_samples
        self.deployment = deployment
        self.force = force
        self.force_hint = force_hint
        self.folder_of: dict[str, str] = {}
        self.results: list[dict[str, Any]] = []
        self.receipt: Any = None
        self.bundle = ""
        self.outcome: Any = None
        self.failures: list[str] = []
        self.gate_failures: list[str] = []
        self.usage_error: str | None = None

    def _refuse(self, message: str) -> pytest.UsageError:
        self.usage_error = message
        return pytest.UsageError(message)

    def check_usage(self) -> None:
        """After the session: a usage error this plugin raised in it, again as the caller's exception (pytest
        printed it already)."""
        if self.usage_error is not None:
            exc = UsageError(self.usage_error)
            exc.shown = True  # type: ignore[attr-defined]
            raise exc

    # -- which functions -----------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before the plugin resolves its settings from the options
    def pytest_configure(self, config: pytest.Config) -> None:
        from ..project.functions import functions_in
        from ..project.loading import import_reward_module

        specs: list[str] = []
        for folder in self.folders:
            main = folder.path / "main.py"
            try:
                module = import_reward_module(main, config.rootpath, config.getoption("importmode"))
            except Exception as exc:
                raise self._refuse(
                    f"{folder.given}: could not import {main}: {type(exc).__name__}: {exc}"
                ) from None
            found = functions_in(module)
            if not found:
                raise self._refuse(
                    f"{folder.given}: {main} defines no reward function (decorate one with @reward_function)"
                )
            specs += [f"{main}::{attr}" for attr, _ in found]
        config.option.reward_fn = specs

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        """Without a samples file, the project's files matching ini ``reward_samples_glob`` are collected too."""
        from .session import session_key

        rs = session.config.stash[session_key]
        if rs.settings.samples or not rs.settings.samples_glob:
            return
        import fnmatch

        from ..project.loading import walk_files

        config = session.config
        for path in walk_files([config.rootpath], tuple(config.getini("norecursedirs")), rs.owned_dirs):
            matched = any(fnmatch.fnmatch(path.name, pat) for pat in rs.settings.samples_glob)
            if matched and str(path) not in config.args:
                config.args.append(str(path))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        tested: set[str] = set()
        for item in items:
            for fn in _functions_of(item):
                for folder in self.folders:
                    if _within(fn.module_file or fn.path, folder.path):
                        self.folder_of[fn.name] = folder.name
                        tested.add(folder.name)
        missing = [f.given for f in self.folders if f.name not in tested]
        if missing:
            # refused before anything ran: the deploy step has nothing to say
            if config.pluginmanager.has_plugin("pytest-reward-deploy"):
                config.pluginmanager.unregister(name="pytest-reward-deploy")
            raise self._refuse(f"no samples to test {', '.join(missing)} on: {self.no_samples_hint}")
        if self.max_samples > 0:
            kept, dropped = _first_samples(items, self.max_samples)
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = kept

    # -- what happened -------------------------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            first = (report.longreprtext or "").strip().splitlines()
            self.failures.append(f"{report.nodeid}: {first[0] if first else 'failed'}")
        data = getattr(report, "reward", None)
        if report.when != "call" or not isinstance(data, dict):
            return
        from ..judge.wire import outcome_from_wire

        for wire in data.get("outcomes", ()):
            o = outcome_from_wire(wire)
            self.results.append(
                {
                    "metric": self.folder_of.get(o.function, o.function),
                    "function": o.function,
                    "file": o.file,
                    "line": o.line,
                    "id": o.sample_id,
                    "score": o.score,
                    "reason": o.reason,
                    "metrics": {k: dict(v) for k, v in o.metrics.items()},
                    "verdict": o.verdict,
                    "success": o.passed,
                    "error": o.error,
                    "failures": list(o.failures),
                }
            )

    def pytest_reward_bundle_manifest(self, manifest: dict[str, Any], config: pytest.Config) -> None:
        if self.deployment is not None:
            manifest["deployment"] = dict(self.deployment)

    def pytest_reward_deploy(self, bundle: Any, target: str, config: pytest.Config) -> Any:
        """Deploy under the evaluator id: an existing deployment with it is replaced only when forced."""
        if self.deployment is None:
            return None
        from ..deploy.targets import DeploymentExists, deploy_as
        from .deploy import resolve_target

        evaluator_id = self.deployment["id"]
        if target == "fireworks":
            target = f"fireworks:{evaluator_id}"
        try:
            return deploy_as(resolve_target(target, config), bundle, evaluator_id, force=self.force)
        except DeploymentExists as exc:
            raise DeployError(f"{exc}; pass {self.force_hint} to replace it") from None

    def pytest_reward_deployed(self, receipt: Any, bundle: Any, config: pytest.Config) -> None:
        self.receipt = receipt
        self.bundle = f"{bundle.name}-{bundle.version}"

    @pytest.hookimpl(trylast=True)  # after the deploy step
    def pytest_reward_run_finished(self, result: Any, session: pytest.Session) -> None:
        self.gate_failures = [f"{r.function} on {r.file}: {g.describe()}" for r, g in result.failed_gates]
        deploy = session.config.pluginmanager.get_plugin("pytest-reward-deploy")
        self.outcome = getattr(deploy, "outcome", None)


def _functions_of(item: pytest.Item) -> Iterator[Any]:
    fn = getattr(item, "fn", None)
    if fn is not None and hasattr(fn, "module_file"):
        yield fn
    yield from getattr(item, "functions", ())


def _line_of(item: pytest.Item) -> int | None:
    sample = getattr(item, "sample", None)
    if sample is not None:
        return int(sample.line)
    error = getattr(item, "error", None)
    line = getattr(error, "line", None)
    return int(line) if isinstance(line, int) else None


def _first_samples(items: list[pytest.Item], n: int) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """The items of the first ``n`` samples of each samples file (items of no sample are kept)."""
    lines: dict[Path, set[int]] = {}
    for item in items:
        line = _line_of(item)
        if line is not None:
            lines.setdefault(item.path, set()).add(line)
    first = {path: set(sorted(found)[:n]) for path, found in lines.items()}
    kept, dropped = [], []
    for item in items:
        line = _line_of(item)
        (kept if line is None or line in first[item.path] else dropped).append(item)
    return kept, dropped


def _session(folders: list[MetricsFolder], args: list[str], plugin: _FolderSession) -> int:
    quiet = [
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore:Module already imported:pytest.PytestAssertRewriteWarning",
    ]
    return int(pytest.main([*(str(f.path) for f in folders), *quiet, *args], plugins=[plugin]))


def preview_folders(
    specs: Sequence[str] | str,
    samples: str | Path,
    *,
    max_samples: int = 5,
    source: str = "--metrics-folders",
    samples_source: str = "--samples",
    pytest_args: Sequence[str] = (),
) -> PreviewResult:
    """Run the folders' reward functions on the first ``max_samples`` samples (0: all) and show the preview."""
    folders = parse_folders(specs, source)
    path = _check_samples(samples, samples_source)
    if max_samples < 0:
        raise UsageError(f"max samples must be 0 (all) or more, got {max_samples}")
    if max_samples > 0:
        shown = max_samples
    else:
        from ..data.samples import count_lines

        shown = max(1, count_lines(path))
    plugin = _FolderSession(folders, no_samples_hint=f"{samples_source} {samples}", max_samples=max_samples)
    args = ["--reward-samples", str(path), f"--reward-preview={shown}", "--reward-granularity=sample"]
    start = time.perf_counter()
    code = _session(folders, [*args, *pytest_args], plugin)
    elapsed = int((time.perf_counter() - start) * 1000)
    plugin.check_usage()
    return PreviewResult(code, plugin.results, elapsed)


def deploy_folders(
    evaluator_id: str,
    specs: Sequence[str] | str,
    *,
    display_name: str | None = None,
    description: str | None = None,
    force: bool = False,
    target: str | None = None,
    samples: str | Path | None = None,
    source: str = "--metrics-folders",
    hints: dict[str, str] | None = None,
    pytest_args: Sequence[str] = (),
) -> dict[str, Any]:
    """Test the folders' reward functions on their samples and, if green, deploy them as ``evaluator_id``.

    Returns reward-kit's result shape (``name`` ends with the id). Raises :class:`UsageError` for bad input and
    :class:`RewardDeployError` when the run is not green or the deploy is refused or fails. ``hints`` name the
    caller's own spelling of ``id``, ``samples``, ``force`` and ``target`` in errors."""
    hint = {
        "id": "--id",
        "samples": "--samples FILE",
        "force": "--force",
        "target": "--target",
        **(hints or {}),
    }
    if not isinstance(evaluator_id, str) or not _ID_RE.match(evaluator_id):
        raise UsageError(
            f"{hint['id']} {evaluator_id!r}: an evaluator id starts with a letter and has only letters, digits, "
            "'-' and '_' (at most 63)"
        )
    folders = parse_folders(specs, source)
    args = [
        "-q",
        "--reward-deploy" + (f"={target}" if target else ""),
        "-o",
        f"reward_bundle_name={_bundle(evaluator_id)}",
    ]
    if samples is not None:
        args += ["--reward-samples", str(_check_samples(samples, hint["samples"].split()[0]))]
    deployment = {
        "id": evaluator_id,
        "display_name": display_name or evaluator_id,
        "description": description or "",
        "metrics": {f.name: str(f.path) for f in folders},
    }
    plugin = _FolderSession(
        folders,
        no_samples_hint=f"pass {hint['samples']}, bind them with @pytest.mark.reward(samples=...) on the "
        "function, or list them in ini reward_samples_glob",
        deployment=deployment,
        force=force,
        force_hint=hint["force"],
    )
    code = _session(folders, [*args, *pytest_args], plugin)
    plugin.check_usage()
    receipt = plugin.receipt
    if receipt is None or code != 0:
        lines = [f"{evaluator_id} was not deployed (pytest exit code {code})"]
        if plugin.outcome is not None:
            lines.append(f"  deploy: {plugin.outcome.message}")
        lines += [f"  {f}" for f in plugin.failures[:20]]
        lines += [f"  FAIL {g}" for g in plugin.gate_failures]
        raise RewardDeployError("\n".join(lines))
    name = str(receipt.id)
    if not name.endswith(f"/{evaluator_id}"):
        name = f"{receipt.target.rstrip('/')}/{evaluator_id}"
    return {
        "name": name,
        "id": evaluator_id,
        "displayName": deployment["display_name"],
        "description": deployment["description"],
        "target": receipt.target,
        "location": receipt.location,
        "bundle": plugin.bundle,
        "unchanged": bool(receipt.unchanged),
    }


def _bundle(evaluator_id: str) -> str:
    """The bundle's package name for an evaluator id (``relevance-evaluator`` -> ``relevance_evaluator``)."""
    return evaluator_id.replace("-", "_")
