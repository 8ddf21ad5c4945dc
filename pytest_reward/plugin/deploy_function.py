"""``fn.deploy(...)``: test one reward function on its samples with pytest, in-process, and deploy it if green.

reward-kit's decorated functions documented a ``.deploy(name=..., ...)`` method that uploaded code without testing
it. Here the same call runs the function's samples and thresholds through a real pytest session first and ships
only a green result; it returns the deployed id, or raises ``RewardDeployError`` with the failing summary.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ..errors import RewardDeployError
from ..rewards.reward_model import model_of

__all__ = ["RewardDeployError", "deploy_function"]


class _Recorder:
    """Collects what the in-process session did."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.receipt: Any = None
        self.outcome: Any = None
        self.gate_failures: list[str] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            first = (report.longreprtext or "").strip().splitlines()
            self.failures.append(f"{report.nodeid}: {first[0] if first else 'failed'}")

    def pytest_reward_deployed(self, receipt: Any, bundle: Any, config: Any) -> None:
        self.receipt = receipt

    @pytest.hookimpl(trylast=True)  # after the deploy step (pytest_reward.plugin.deploy.DeployPlugin)
    def pytest_reward_run_finished(self, result: Any, session: Any) -> None:
        self.gate_failures = [f"{r.function} on {r.file}: {g.describe()}" for r, g in result.failed_gates]
        self.gate_failures += list(result.compare_failures)
        deploy = session.config.pluginmanager.get_plugin("pytest-reward-deploy")
        self.outcome = getattr(deploy, "outcome", None)


def _locate(fn: Any) -> tuple[Path, str]:
    module = sys.modules.get(getattr(fn, "__module__", ""))
    file = getattr(module, "__file__", None)
    if module is None or not file:
        raise RewardDeployError(
            f"cannot find the module file of {getattr(fn, '__name__', fn)!r} (defined interactively?)"
        )
    for attr, value in vars(module).items():
        if value is fn:
            return Path(file).resolve(), attr
    raise RewardDeployError(f"{fn.__name__!r} is not a module-level attribute of {module.__name__}")


def deploy_function(
    fn: Any,
    name: str | None = None,
    *,
    target: str | None = None,
    samples: str | Path | Sequence[str | Path] | None = None,
    description: str | None = None,
    force: bool = False,
    rootdir: str | Path | None = None,
    pytest_args: Sequence[str] = (),
    **_ignored: Any,
) -> str:
    """Test ``fn`` on ``samples`` (default: its marker's ``samples=``) and deploy it to ``target`` if green.

    ``name`` becomes the bundle's package name. ``description``, ``force`` and reward-kit's ``providers`` are
    accepted for compatibility (a bundle always replaces an older one with different content).
    """
    source = model_of(fn)
    if source is not None:
        raise RewardDeployError(f"{fn.__name__} cannot be deployed: {source.deploy_refusal}")
    path, attr = _locate(fn)
    if isinstance(samples, (str, Path)):
        samples = [samples]
    args = [
        "-p",
        "no:cacheprovider",
        "-q",
        "--reward-fn",
        f"{path}::{attr}",
        "--reward-deploy" + (f"={target}" if target else ""),
    ]
    for sample in samples or []:
        args += ["--reward-samples", str(sample)]
    if name:
        args += ["-o", f"reward_bundle_name={name}"]
    if rootdir is not None:
        args += ["--rootdir", str(rootdir)]
    recorder = _Recorder()
    code = pytest.main([*args, *pytest_args], plugins=[recorder])
    if recorder.receipt is not None and int(code) == 0:
        return str(recorder.receipt.id)
    lines = [f"{getattr(fn, '__name__', fn)} was not deployed (pytest exit code {int(code)})"]
    if recorder.outcome is not None:
        lines.append(f"  deploy: {recorder.outcome.message}")
    lines += [f"  {f}" for f in recorder.failures[:20]]
    lines += [f"  FAIL {g}" for g in recorder.gate_failures]
    if not samples and not recorder.failures:
        lines.append("  (no samples: pass samples=... or bind them with @pytest.mark.reward(samples=...))")
    raise RewardDeployError("\n".join(lines))
