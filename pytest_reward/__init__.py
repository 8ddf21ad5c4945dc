"""pytest-reward: reward functions as test suites.

The public API keeps reward-kit's names (``reward_function``, ``EvaluateResult``, ``MetricResult``, ``Message``,
...). Importing this package is cheap: the models (pydantic) load on first use, and nothing here imports jax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Message": "models",
    "MetricResult": "models",
    "EvaluateResult": "models",
    "StepOutput": "models",
    "ToolCall": "models",
    "FunctionCall": "models",
    "RewardOutput": "models",
    "MetricRewardOutput": "models",
    "reward_function": "api",
    "is_reward_function": "decorator",
    "probe": "probes",
    "ProbeSample": "probes",
    "BaselineError": "errors",
    "BundleError": "errors",
    "DeployError": "errors",
    "DiscoveryError": "errors",
    "EvaluationError": "errors",
    "GateError": "errors",
    "InvalidResult": "errors",
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
]

if TYPE_CHECKING:  # pragma: no cover
    from .api import reward_function
    from .decorator import is_reward_function
    from .errors import (
        BaselineError,
        BundleError,
        DeployError,
        DiscoveryError,
        EvaluationError,
        GateError,
        InvalidResult,
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
    from .models import (
        EvaluateResult,
        FunctionCall,
        Message,
        MetricResult,
        MetricRewardOutput,
        RewardOutput,
        StepOutput,
        ToolCall,
    )
    from .probes import ProbeSample, probe


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
