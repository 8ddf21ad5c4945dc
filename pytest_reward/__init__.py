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
}

__all__ = [
    "EvaluateResult",
    "FunctionCall",
    "Message",
    "MetricResult",
    "MetricRewardOutput",
    "RewardOutput",
    "StepOutput",
    "ToolCall",
    "__version__",
    "is_reward_function",
    "reward_function",
]

if TYPE_CHECKING:  # pragma: no cover
    from .api import reward_function
    from .decorator import is_reward_function
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
