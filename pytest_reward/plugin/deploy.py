"""``pytest --reward-deploy``: decide whether the session earned a deploy, build the bundle, ship it.

Runs once, on the controller, at the very end of the session, from the ``pytest_reward_run_finished`` hook: all it
reads of the run is the frozen ``RunResult``, and the pytest session's status. It deploys only when the session is green
(``session.exitstatus == 0``) and complete; a partial run (``-k``, ``-m``, ``--lf``, ``--deselect``, ``--sw``,
a ``-x``/``--maxfail`` stop, a samples file only partly run) is refused with one line unless
``--reward-deploy-partial``. Only the reward functions that ran, and passed, are shipped, and only in a bundle that
imports in a fresh interpreter (``verify.check_imports``): a bundle that would fail where it is loaded is a failed
deploy. The bundle name and ini ``reward_bundle_include`` are checked when pytest starts (a usage error, before
anything runs); the bundle is built in a staging directory that is removed when the step ends, so the summary names
where the bundle went, never where it was built.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..deploy.bundle import BuiltBundle
    from ..deploy.targets import Receipt, Target, TargetRegistry
    from ..run.result import RunResult
    from .options import Settings

__all__ = ["DeployOutcome", "DeployPlugin", "partial_reasons", "resolve_target", "run_deploy"]


@dataclass
class DeployOutcome:
    """What the deploy step did, for the terminal summary."""

    status: str  # "deployed", "dry-run", "refused", "failed", "nothing"
    message: str
    lines: list[str] = field(default_factory=list)
    receipt: Receipt | None = None
    bundle: BuiltBundle | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "refused")


def partial_reasons(session: pytest.Session, result: RunResult) -> list[str]:
    opt = session.config.option
    reasons = []
    if getattr(opt, "keyword", ""):
        reasons.append(f"-k {opt.keyword!r}")
    if getattr(opt, "markexpr", ""):
        reasons.append(f"-m {opt.markexpr!r}")
    if getattr(opt, "lf", False):
        reasons.append("--lf")
    if getattr(opt, "deselect", None):
        reasons.append("--deselect")
    if getattr(opt, "stepwise", False) or getattr(opt, "stepwise_skip", False):
        reasons.append("--sw")
    if session.shouldstop or session.shouldfail:
        reasons.append("the run stopped early (-x / --maxfail)")
    incomplete = [f"{r.function} on {r.file}" for r in result.groups if not r.summary.complete]
    if incomplete:
        reasons.append("only part of the samples ran for " + ", ".join(incomplete[:3]))
    return reasons


def targets_for(config: pytest.Config) -> TargetRegistry:
    from ..deploy.targets import builtin_targets

    registry = builtin_targets()
    config.hook.pytest_reward_register_targets.call_historic(kwargs={"targets": registry})
    return registry


def _evidence(
    result: RunResult, root: Path
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]], list[str]]:
    evidence: dict[str, list[dict[str, Any]]] = {}
    metrics: dict[str, set[str]] = {}
    passed: list[str] = []
    failed: set[str] = set()
    for report in result.groups:
        s = report.summary
        path = root / report.file
        sha = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        evidence.setdefault(report.function, []).append(
            {
                "samples": report.file,
                "sha256": sha,
                "n": s.n,
                "n_pass": s.n_pass,
                "n_below": s.n_below,
                "n_fail": s.n_fail,
                "n_errors": s.n_errors,
                "mean": s.mean,
                "mean_ci": s.mean_ci,
                "p10": s.p10,
                "pass_rate": s.pass_rate,
                "complete": s.complete,
                "verdict": report.verdict,
                "gates": [g.describe() for g in report.gates],
            }
        )
        metrics.setdefault(report.function, set()).update(s.metrics)
        if report.verdict in ("FAIL", "ERROR"):
            failed.add(report.function)
        elif report.function not in passed:
            passed.append(report.function)
    return evidence, {k: sorted(v) for k, v in metrics.items()}, [f for f in passed if f not in failed]


def run_deploy(session: pytest.Session, result: RunResult) -> DeployOutcome:
    """Everything ``--reward-deploy`` does at the end of a session."""
    from .. import __version__
    from ..deploy.bundle import BundleSpec, build_bundle, bundle_name_for
    from ..deploy.targets import DeployError
    from ..deploy.verify import check_imports
    from ..errors import BundleError

    config = session.config
    settings = result.settings
    target = settings.deploy_target or "dir:.reward/deploy"
    if session.exitstatus != 0:
        return DeployOutcome(
            "refused", f"not deploying: the session is not green (exit status {int(session.exitstatus)})"
        )
    reasons = partial_reasons(session, result)
    if reasons and not settings.deploy_partial:
        return DeployOutcome(
            "refused",
            "not deploying a partial run ("
            + "; ".join(reasons)
            + "); pass --reward-deploy-partial to deploy anyway",
        )
    evidence, metrics, passed = _evidence(result, config.rootpath)
    functions = [fn for fn in result.functions if fn.name in passed]
    if not functions:
        return DeployOutcome("refused", "not deploying: no reward function ran")
    meta = result.meta
    spec = BundleSpec(
        name=bundle_name_for(config.rootpath, settings.bundle_name),
        functions=functions,
        rootdir=config.rootpath,
        evidence=evidence,
        metrics=metrics,
        meta={
            "commit": meta.get("commit"),
            "pytest_version": meta.get("pytest_version"),
            "partial": bool(reasons),
            "tested_with": meta.get("args"),
        },
        include=settings.bundle_include,
        plugin_version=__version__,
        owned=tuple(p for p in (settings.storage, settings.report_dir) if p is not None),
    )
    staging = Path(tempfile.mkdtemp(prefix="pytest-reward-bundle-"))
    try:
        try:
            bundle = build_bundle(
                spec,
                staging,
                on_manifest=lambda m: config.hook.pytest_reward_bundle_manifest(manifest=m, config=config),
            )
        except BundleError as exc:
            return DeployOutcome("failed", f"not deploying: {exc}")
        try:
            check_imports(bundle.directory, bundle.name, bundle.manifest, config.rootpath)
        except BundleError as exc:
            return DeployOutcome("failed", f"not deploying: {exc}", bundle.describe(), bundle=bundle)
        if settings.deploy_dry_run:
            return DeployOutcome(
                "dry-run", f"dry run: would deploy to {target}", bundle.describe(), bundle=bundle
            )
        try:
            receipt = config.hook.pytest_reward_deploy(bundle=bundle, target=target, config=config)
        except DeployError as exc:
            return DeployOutcome(
                "failed", f"deploy to {target} failed: {exc}", bundle.describe(), bundle=bundle
            )
        except Exception as exc:  # a target plugin's bug must still fail the session with the reason
            return DeployOutcome(
                "failed",
                f"deploy to {target} failed: {type(exc).__name__}: {exc}",
                bundle.describe(),
                bundle=bundle,
            )
        if receipt is None:
            return DeployOutcome("failed", f"deploy to {target} failed: no target handled it", bundle=bundle)
        config.hook.pytest_reward_deployed(receipt=receipt, bundle=bundle, config=config)
        verb = "already deployed (unchanged)" if receipt.unchanged else "deployed"
        return DeployOutcome(
            "deployed",
            f"{verb} {bundle.name} {bundle.version} to {receipt.target}: {receipt.id}",
            bundle.describe(receipt.location),
            receipt,
            bundle,
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_TARGETS = pytest.StashKey["TargetRegistry"]()


def resolve_target(target: str, config: pytest.Config) -> Target:
    """The target object for ``target``, by its scheme among the session's registered targets."""
    targets = config.stash.get(_TARGETS, None)
    if targets is None:
        targets = config.stash[_TARGETS] = targets_for(config)
    return targets.resolve(target, config)


def default_deploy(bundle: BuiltBundle, target: str, config: pytest.Config) -> Receipt:
    """The built-in ``pytest_reward_deploy``: resolve the target by scheme and deploy."""
    return resolve_target(target, config).deploy(bundle)


class DeployPlugin:
    """``--reward-deploy``: registered on the controller when deploying was asked for."""

    NAME = "pytest-reward-deploy"

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        # Checked now, so that a bad value is a usage error before anything runs: the bundle name, the include
        # patterns; the targets are registered now (an unknown scheme fails the deploy with the known ones).
        from ..deploy.bundle import bundle_name_for, check_include
        from ..errors import BundleError, UsageError

        try:
            bundle_name_for(config.rootpath, settings.bundle_name)
        except ValueError as exc:
            raise UsageError(f"ini reward_bundle_name: {exc}") from None
        try:
            check_include(settings.bundle_include)
        except BundleError as exc:
            raise UsageError(str(exc)) from None
        config.stash[_TARGETS] = targets_for(config)
        self.outcome: DeployOutcome | None = None

    def pytest_reward_run_finished(self, result: RunResult, session: pytest.Session) -> None:
        self.outcome = run_deploy(session, result)
        if self.outcome.failed and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            from .summary_line import DEPLOY, REFUSED_DEPLOY, count_failures

            category = REFUSED_DEPLOY if self.outcome.status == "refused" else DEPLOY
            count_failures(session.config, category, [self.outcome.message])

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.outcome is not None:
            from ..report.terminal import write_deploy

            write_deploy(terminalreporter, self.outcome)
