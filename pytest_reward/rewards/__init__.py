"""Built-in reward functions, reward-kit compatible (same names, parameters and defaults), plus composition.

``from pytest_reward.rewards import math_reward`` loads only the module that defines it: importing this
package is cheap. Every built-in is a ``@reward_function`` callable as ``fn(messages=[...], ground_truth=...,
**kwargs)`` with dict or ``Message`` messages, returning an ``EvaluateResult`` with metrics.
Conformance with reward-kit, and the deliberate differences, are listed in ``docs/rewards.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY: dict[str, str] = {
    "accuracy_reward": "accuracy",
    "cosine_scaled_accuracy_length_reward": "accuracy",
    "format_reward": "formatting",
    "tag_count_reward": "tags",
    "length_reward": "length",
    "cosine_length_reward": "length",
    "repetition_penalty_reward": "repetition",
    "diversity_reward": "repetition",
    "reasoning_steps_reward": "reasoning",
    "sequence_reward": "reasoning",
    "language_consistency_reward": "language",
    "math_reward": "math_answers",
    "list_comparison_math_reward": "math_answers",
    "multiple_choice_math_reward": "math_answers",
    "json_schema_reward": "json_schema",
    "exact_tool_match_reward": "tool_calls",
    "schema_jaccard_reward": "tool_calls",
    "llm_judge_reward": "tool_calls",
    "composite_function_call_reward": "tool_calls",
    "lean_prover_reward": "lean",
    "deepseek_prover_v2_reward": "lean",
    "local_code_execution_reward": "code_execution",
    "fractional_code_reward": "code_execution",
    "deepcoder_code_reward": "code_execution",
    "evaluate_apps_solution": "code_execution",
    "combine": "compose",
    "reward_model": "reward_model",
    "composite_reward": "compose",
    "run_code": "sandbox",
    "Limits": "sandbox",
    "ExecutionResult": "sandbox",
}

BUILTIN_REWARDS: tuple[str, ...] = tuple(
    name for name, module in _LAZY.items() if module not in ("compose", "sandbox", "reward_model")
)
"""The names of the reward-kit built-ins provided here (25, three of them deprecated aliases of
``exact_tool_match_reward``, as in reward-kit)."""

__all__ = [
    "BUILTIN_REWARDS",
    "ExecutionResult",
    "Limits",
    "accuracy_reward",
    "combine",
    "composite_function_call_reward",
    "composite_reward",
    "cosine_length_reward",
    "cosine_scaled_accuracy_length_reward",
    "deepcoder_code_reward",
    "deepseek_prover_v2_reward",
    "diversity_reward",
    "evaluate_apps_solution",
    "exact_tool_match_reward",
    "format_reward",
    "fractional_code_reward",
    "json_schema_reward",
    "language_consistency_reward",
    "lean_prover_reward",
    "length_reward",
    "list_comparison_math_reward",
    "llm_judge_reward",
    "local_code_execution_reward",
    "math_reward",
    "multiple_choice_math_reward",
    "reasoning_steps_reward",
    "repetition_penalty_reward",
    "reward_model",
    "run_code",
    "schema_jaccard_reward",
    "sequence_reward",
    "tag_count_reward",
]

if TYPE_CHECKING:  # pragma: no cover
    from .accuracy import accuracy_reward, cosine_scaled_accuracy_length_reward
    from .code_execution import (
        deepcoder_code_reward,
        evaluate_apps_solution,
        fractional_code_reward,
        local_code_execution_reward,
    )
    from .compose import combine, composite_reward
    from .formatting import format_reward
    from .json_schema import json_schema_reward
    from .language import language_consistency_reward
    from .lean import deepseek_prover_v2_reward, lean_prover_reward
    from .length import cosine_length_reward, length_reward
    from .math_answers import list_comparison_math_reward, math_reward, multiple_choice_math_reward
    from .reasoning import reasoning_steps_reward, sequence_reward
    from .repetition import diversity_reward, repetition_penalty_reward
    from .reward_model import reward_model
    from .sandbox import ExecutionResult, Limits, run_code
    from .tags import tag_count_reward
    from .tool_calls import (
        composite_function_call_reward,
        exact_tool_match_reward,
        llm_judge_reward,
        schema_jaccard_reward,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_reward.rewards' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
