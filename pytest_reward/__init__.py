"""pytest-reward: reward functions as test suites.

The public API keeps reward-kit's names (``reward_function``, ``EvaluateResult``, ``MetricResult``, ``Message``,
...). Importing this package is cheap: the models (pydantic) load on first use, and nothing here imports jax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Message": "reward.models",
    "MetricResult": "reward.models",
    "EvaluateResult": "reward.models",
    "StepOutput": "reward.models",
    "ToolCall": "reward.models",
    "FunctionCall": "reward.models",
    "RewardOutput": "reward.models",
    "MetricRewardOutput": "reward.models",
    "reward_function": "reward.decorator",
    "is_reward_function": "reward.decorator",
    "reward_model": "rewards.reward_model",
    "probe": "probes",
    "ProbeSample": "probes",
    "BaselineError": "errors",
    "BundleError": "errors",
    "DeployError": "errors",
    "DiscoveryError": "errors",
    "EvaluationError": "errors",
    "GateError": "errors",
    "InvalidResult": "errors",
    "RewardAborted": "errors",
    "RewardCallError": "errors",
    "RewardDeployError": "errors",
    "RewardError": "errors",
    "RewardInputError": "errors",
    "RewardReturnError": "errors",
    "RewardTimeout": "errors",
    "SampleFormatError": "errors",
    "ServeError": "errors",
    "UsageError": "errors",
}

__all__ = [
    "BaselineError",
    "BundleError",
    "DeployError",
    "DiscoveryError",
    "EvaluateResult",
    "EvaluationError",
    "FunctionCall",
    "GateError",
    "InvalidResult",
    "Message",
    "MetricResult",
    "MetricRewardOutput",
    "ProbeSample",
    "RewardAborted",
    "RewardCallError",
    "RewardDeployError",
    "RewardError",
    "RewardInputError",
    "RewardOutput",
    "RewardReturnError",
    "RewardTimeout",
    "SampleFormatError",
    "ServeError",
    "StepOutput",
    "ToolCall",
    "UsageError",
    "__version__",
    "is_reward_function",
    "probe",
    "reward_function",
    "reward_model",
]

if TYPE_CHECKING:  # pragma: no cover
    from .errors import (
        BaselineError,
        BundleError,
        DeployError,
        DiscoveryError,
        EvaluationError,
        GateError,
        InvalidResult,
        RewardAborted,
        RewardCallError,
        RewardDeployError,
        RewardError,
        RewardInputError,
        RewardReturnError,
        RewardTimeout,
        SampleFormatError,
        ServeError,
        UsageError,
    )
    from .probes import ProbeSample, probe
    from .reward.decorator import is_reward_function, reward_function
    from .reward.models import (
        EvaluateResult,
        FunctionCall,
        Message,
        MetricResult,
        MetricRewardOutput,
        RewardOutput,
        StepOutput,
        ToolCall,
    )
    from .rewards.reward_model import reward_model


# --- moved modules ----------------------------------------------------------------------------------------------
# The package was laid out in layers (one folder each) after 0.1.0. Every module path of the flat layout keeps
# importing, as the very same module object, for user code, conftests and the deploy bundles built before: the
# finder below answers only for these names. It comes first on ``sys.meta_path``: a moved package's old name must
# not let the path finder load its submodules a second time under old names.
_MOVED = {
    "pytest_reward.api": "pytest_reward.reward.decorator",
    "pytest_reward.aggregate": "pytest_reward.run.fold",
    "pytest_reward.baseline": "pytest_reward.run.baseline",
    "pytest_reward.call": "pytest_reward.reward.call",
    "pytest_reward.chat": "pytest_reward.reward.chat",
    "pytest_reward.collect": "pytest_reward.plugin.collect",
    "pytest_reward.controller": "pytest_reward.plugin.controller",
    "pytest_reward.decorator": "pytest_reward.reward.decorator",
    "pytest_reward.deploy.api": "pytest_reward.plugin.deploy_function",
    "pytest_reward.deploy.flow": "pytest_reward.plugin.deploy",
    "pytest_reward.discovery": "pytest_reward.plugin.discovery",
    "pytest_reward.executors": "pytest_reward.scoring.executors",
    "pytest_reward.executors.process": "pytest_reward.scoring.executors.process",
    "pytest_reward.executors.ray_cluster": "pytest_reward.scoring.executors.ray_cluster",
    "pytest_reward.executors.worker": "pytest_reward.scoring.executors.worker",
    "pytest_reward.failure": "pytest_reward.plugin.failure",
    "pytest_reward.fixtures": "pytest_reward.plugin.fixtures",
    "pytest_reward.hookspecs": "pytest_reward.plugin.hookspecs",
    "pytest_reward.items": "pytest_reward.plugin.items",
    "pytest_reward.meta": "pytest_reward.plugin.meta",
    "pytest_reward.jax.evaluation": "pytest_reward.evaluation",
    "pytest_reward.models": "pytest_reward.reward.models",
    "pytest_reward.options": "pytest_reward.plugin.options",
    "pytest_reward.outputs": "pytest_reward.report.outputs",
    "pytest_reward.probe_items": "pytest_reward.plugin.probe_items",
    "pytest_reward.pytest_private": "pytest_reward.plugin.pytest_private",
    "pytest_reward.results": "pytest_reward.judge.results",
    "pytest_reward.rollouts": "pytest_reward.scoring.rollouts",
    "pytest_reward.samples": "pytest_reward.data.samples",
    "pytest_reward.session": "pytest_reward.plugin.session",
    "pytest_reward.sources": "pytest_reward.data.sources",
    "pytest_reward.spec": "pytest_reward.reward.spec",
    "pytest_reward.stats": "pytest_reward.judge.stats",
    "pytest_reward.styles": "pytest_reward.trainers.styles",
    "pytest_reward.thresholds": "pytest_reward.judge.gates",
    "pytest_reward.wire": "pytest_reward.judge.wire",
}


class _MovedModules:
    """A meta path finder and loader that hands out the module at a moved path's new home."""

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _MovedModules)

    @staticmethod
    def create_module(spec: Any) -> Any:
        import importlib

        module = importlib.import_module(_MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    @staticmethod
    def exec_module(module: Any) -> None:
        # The import system set ``__spec__`` to the old name's spec: give the module its own back.
        module.__spec__ = module.__spec__.loader_state


if not any(finder is _MovedModules for finder in __import__("sys").meta_path):
    __import__("sys").meta_path.insert(0, _MovedModules)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_reward' has no attribute {name!r}")
    import importlib

    # Not cached in globals(): the submodule in sys.modules stays the single source of truth (pytester's
    # in-process runs re-import submodules; a cached class would then differ from the one isinstance uses).
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted(__all__)
