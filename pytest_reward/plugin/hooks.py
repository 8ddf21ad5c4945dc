"""pytest hooks of pytest-reward. Wiring only: every hook delegates, and none imports pydantic, numpy, rich or
jax unless reward testing is actually in use."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..data.formats import is_samples_file
from ..errors import UsageError
from ..judge.gates import marker_doc
from ..rewards.reward_model import configure_engine
from . import options
from .fixtures import inference_job  # noqa: F401  (a fixture: pytest finds it on the plugin module)
from .multihost import MultihostHooks, launch_of
from .session import MODEL_MISSING, REWARD_DATA, RewardSession, session_key

if TYPE_CHECKING:
    from .controller import RunController

def _state(config: pytest.Config) -> RewardSession | None:
    return config.stash.get(session_key, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_reward_deploy(bundle: Any, target: str, config: pytest.Config) -> Any:
    from .deploy import default_deploy

    return default_deploy(bundle, target, config)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", marker_doc())
    settings = options.resolve(config)
    rs = RewardSession(config, settings)
    # the reward models this process (or a scoring worker) loads compile through the session's cache too
    configure_engine(compilation_cache_dir=settings.jax_cache_dir)
    rs.note_explicit(list(config.args))
    config.stash[session_key] = rs
    rs.setup_parts_dir()
    launch = None if rs.is_worker else launch_of(rs)
    if launch is not None:
        hosts = MultihostHooks(rs, launch)
        config.pluginmanager.register(hosts, MultihostHooks.NAME)
        if not hosts.writer:  # only process 0 writes reports, baselines and deploys: the others just run items
            config.pluginmanager.register(RewardHooks(rs, None), "pytest-reward-session")
            _collect_samples_files(config, settings)
            return
    if rs.is_worker:
        # One model per worker: JAX must not grab most of an accelerator's memory in each of them.
        import os

        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        config.pluginmanager.register(RewardHooks(rs, None), "pytest-reward-session")
        return
    from .controller import RunController

    controller = RunController(settings, rs.gates_of)
    try:
        # Bad baselines, compare rules and deploy targets are usage errors, before anything runs.
        if settings.compare_fail or settings.compare:
            controller.load_baseline()
        if settings.deploy:
            from .deploy import DeployPlugin

            config.pluginmanager.register(DeployPlugin(config, settings), DeployPlugin.NAME)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(RewardHooks(rs, controller), "pytest-reward-session")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(rs), "pytest-reward-xdist")
    _collect_samples_files(config, settings)


def _collect_samples_files(config: pytest.Config, settings: options.Settings) -> None:
    """Named samples files become collection arguments (pytest de-duplicates overlaps)."""
    for path in settings.samples:
        if str(path) not in config.args:
            config.args.append(str(path))


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    rs = _state(config)
    if rs is None or not rs.collecting:
        return None
    s = rs.settings
    if s.granularity == "auto":
        gran = f"sample items up to {s.max_items_per_file} lines per file, one item per function above"
    else:
        gran = f"{s.granularity} items"
    return [f"reward: {gran}; seed {s.seed}"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    rs = _state(session.config)
    if rs is None:
        return
    if rs.active:
        registry = rs.discover(session)
        rs.check_found()
    else:
        # Light look for reward modules whose functions bind samples files in their marker. A marker that is
        # invalid may have meant to bind some: it is an error here too, never a function dropped in silence.
        registry = rs.discover(session, light=True)
        if not (rs.bound_only or registry.marker_errors()):
            return
    rs.check_reportable()
    for path in registry.bound_paths():
        if str(path) not in session.config.args:
            session.config.args.append(str(path))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Adds the evaluations listed in ini (before ``-k``/``-m`` deselection, hence ``tryfirst``); without a
    model, items that need one are a usage error up front (not N fixture errors)."""
    rs = _state(config)
    if rs is None:
        return
    if rs.settings.evaluations:
        from .collect import listed_evaluations

        items.extend(listed_evaluations(rs, session, {item.nodeid for item in items}))
    if rs.settings.model or not items:
        return
    from .fixtures import overrides_inference_job

    for item in items:
        if "inference_job" in getattr(item, "fixturenames", ()) and not overrides_inference_job(
            config, getattr(item, "module", None)
        ):
            raise pytest.UsageError(f"{item.nodeid}: {MODEL_MISSING}")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Deploy bundles, stored runs and reports are the plugin's output, never tests."""
    rs = _state(config)
    return True if rs is not None and rs.wrote(collection_path) else None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not is_samples_file(file_path.name):
        return None
    rs = _state(parent.config)
    if rs is None:
        return None
    if not rs.collecting and not parent.session.isinitpath(file_path):
        return None
    if parent.session.isinitpath(file_path):
        rs.explicit_files.add(file_path.resolve())
    collect, _, _ = rs.wants_file(file_path)
    if not collect:
        return None
    from .collect import SamplesFile

    return SamplesFile.from_parent(parent, path=file_path)


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> list[Any] | None:
    """Reward functions are scored on samples; pytest must not collect them as plain tests. ``Evaluation``
    subclasses defined in a collected module become evaluation items."""
    if isinstance(obj, type):
        # Only when the user's module imported the evaluation API (a cheap check; no import here).
        evaluation = sys.modules.get("pytest_reward.evaluation.base")
        if evaluation is not None and _is_evaluation_class(obj, evaluation, collector):
            from .collect import module_evaluation

            return module_evaluation(collector, name, obj)
        return None
    if callable(obj) and (hasattr(obj, "__reward_spec__") or hasattr(obj, "_reward_function_mode")):
        return []
    return None


def _is_evaluation_class(obj: type, evaluation: Any, collector: pytest.Collector) -> bool:
    module = getattr(collector, "obj", None)
    return (
        issubclass(obj, evaluation.Evaluation)
        and not obj.__name__.startswith("_")
        and obj.__module__ == getattr(module, "__name__", None)
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if not hasattr(item, "crash_data") or hasattr(report, "wasxfail"):
        return report  # not ours; or an expected failure, which no aggregate counts
    data = item.stash.get(REWARD_DATA, None)
    if call.when == "call" and data is not None:
        report.reward = data
        item.stash[_REPORTED] = True
    elif report.failed:
        # Ended without a verdict of its own (a fixture error, pytest-timeout, a crash), or failed in teardown
        # after it: its groups are errored groups, so no artifact can call them passed.
        reason = f"{call.when}: {call.excinfo.typename}: {call.excinfo.value}" if call.excinfo else call.when
        reason = reason.splitlines()[0][:500] if reason else call.when
        crash = item.crash_data(reason)
        if item.stash.get(_REPORTED, False):
            crash["outcomes"] = []  # its samples were counted already
        report.reward = crash
        item.stash[_REPORTED] = True
    return report


_REPORTED = pytest.StashKey[bool]()


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    if getattr(report, "reward", None) is None:
        return None
    from .failure import below_status

    return below_status(report)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Plain ``pytest`` in a reward project: say which reward functions went without samples, and how to give some."""
    rs = _state(config)
    if rs is None or (rs.registry is not None and rs.registry.marker_errors()):
        return  # an invalid marker failed the run already: its function did not merely lack samples
    for line in rs.idle_note():
        terminalreporter.write_line(line, yellow=True)


class RewardHooks:
    """Hooks that need the session state but are not handed a config (registered per session). ``controller`` is
    None on xdist workers: they only run items and report."""

    def __init__(self, rs: RewardSession, controller: RunController | None) -> None:
        self.rs = rs
        self.controller = controller

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "reward", None)
        if data is not None and self.controller is not None:
            self.controller.add(data)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        # Aggregate gates are judged once, here, on the controller (pytest-cov's --cov-fail-under pattern).
        result = yield
        controller = self.controller
        if controller is None or session.config.option.collectonly:
            return result
        if not (controller.has_results or self.rs.collecting):
            return result  # an unrelated run: no reward work at all
        run = controller.conclude(self._meta(), self._functions())
        failed = len(run.failed_gates) + len(run.compare_failures) + len(run.replay_failures)
        if failed:
            session.testsfailed += failed
        from .summary_line import COMPARISON, GATE, REPLAY, count_failures

        gates = [f"{group.function} on {group.file}: {gate.describe()}" for group, gate in run.failed_gates]
        count_failures(session.config, GATE, gates)
        count_failures(session.config, COMPARISON, list(run.compare_failures))
        count_failures(session.config, REPLAY, list(run.replay_failures))
        return result

    def _meta(self) -> dict[str, Any]:
        from .meta import run_meta

        config = self.rs.config
        return run_meta(config.rootpath, list(config.invocation_params.args), self.rs.settings.seed)

    def _functions(self) -> list[Any]:
        return self.rs.registry.usable() if self.rs.registry is not None else []

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        controller = self.controller
        if controller is None or controller.result is None:
            return
        if not (controller.result.groups or controller.result.probes):
            return
        from ..report.terminal import write_summary

        write_summary(
            terminalreporter, controller.result, controller.written, dist=config.getoption("dist", "no")
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # The result files name the session's final exit status, so they are written here, in two steps around
        # the run_finished hook (deploy may still fail the session): staged first (a run whose files cannot be
        # written is not green, so nothing deploys), then put in place. An interrupted run writes nothing.
        controller = self.controller
        if (
            controller is not None
            and (controller.result is not None or self.rs.collecting or self.rs.settings.deploy)
            and not session.config.option.collectonly
        ):
            interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
            if controller.result is not None and not interrupted and controller.stage():
                _fail_session(session, "the result files could not be staged")
            result = controller.result or controller.empty_result(self._meta(), self._functions())
            try:
                session.config.hook.pytest_reward_run_finished(result=result, session=session)
            finally:
                if session.exitstatus == pytest.ExitCode.INTERRUPTED:
                    controller.discard()
                elif controller.commit(int(session.exitstatus)).errors:
                    _fail_session(session, "the result files could not be written")
        call = sys.modules.get("pytest_reward.reward.call")
        if call is not None:
            call.close_loop()


def _fail_session(session: pytest.Session, why: str) -> None:
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    from .summary_line import RESULT_FILES, count_failures

    count_failures(session.config, RESULT_FILES, [why])


class XdistHooks:
    """Registered only when pytest-xdist is loaded: controller → worker settings."""

    def __init__(self, rs: RewardSession) -> None:
        self.rs = rs

    def pytest_configure_node(self, node: Any) -> None:
        if self.rs.parts_dir is not None:
            node.workerinput["reward_parts_dir"] = str(self.rs.parts_dir)


def pytest_unconfigure(config: pytest.Config) -> None:
    rs = _state(config)
    if rs is not None:
        rs.cleanup()
        configure_engine(compilation_cache_dir=None)
    for name in ("pytest-reward-session", "pytest-reward-xdist", "pytest-reward-deploy", MultihostHooks.NAME):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)
