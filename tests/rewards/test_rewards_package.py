"""The package surface: cheap import, every reward-kit built-in present with reward-kit's parameters."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pytest_reward.rewards as rewards
from pytest_reward.reward.decorator import get_spec, is_reward_function
from pytest_reward.reward.models import EvaluateResult, Message

REQUIRED = object()
KW = "KEYWORD_ONLY"
POS = "POSITIONAL_OR_KEYWORD"

# reward-kit 0.4.1's signatures (read with inspect.signature from the installed wheel): name -> parameter ->
# (kind, default). Parameters before **kwargs only.
REWARD_KIT_0_4_1: dict[str, dict[str, tuple[str, Any]]] = {
    "accuracy_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, REQUIRED), "extract_fn": (POS, None), "compare_fn": (POS, None)},
    "cosine_scaled_accuracy_length_reward": {
        "messages": (POS, REQUIRED), "ground_truth": (POS, None), "extract_fn": (POS, None), "compare_fn": (POS, None),
        "max_length": (POS, 1000), "min_value_wrong": (POS, 0.0), "max_value_wrong": (POS, 0.3),
        "min_value_correct": (POS, 0.5), "max_value_correct": (POS, 1.0), "token_method": (POS, "whitespace"),
        "correctness_weight": (POS, 0.7), "length_weight": (POS, 0.3),
    },
    "format_reward": {
        "messages": (POS, REQUIRED), "ground_truth": (POS, None),
        "format_regex": (POS, r"^<think>\n.*?</think>\n<answer>\n.*?</answer>$"), "require_exact_match": (POS, True),
    },
    "tag_count_reward": {"messages": (POS, REQUIRED), "required_tags": (KW, REQUIRED), "score_per_tag": (KW, 0.25), "require_balanced": (KW, True)},
    "length_reward": {
        "messages": (POS, REQUIRED), "ground_truth": (KW, None), "target_length": (KW, None), "min_length": (KW, None),
        "max_length": (KW, None), "token_method": (KW, "whitespace"), "scaling": (KW, "linear"), "reward_range": (KW, None),
    },
    "cosine_length_reward": {
        "messages": (POS, REQUIRED), "ground_truth": (KW, None), "correctness": (KW, None), "is_correct": (KW, None),
        "max_length": (KW, 1000), "min_value_wrong": (KW, 0.0), "max_value_wrong": (KW, 0.3),
        "min_value_correct": (KW, 0.5), "max_value_correct": (KW, 1.0), "token_method": (KW, "whitespace"),
    },
    "repetition_penalty_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, None), "ngram_size": (POS, 3), "max_penalty": (POS, 0.5), "language": (POS, "en")},
    "diversity_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, None), "ngram_sizes": (POS, [1, 2, 3]), "weights": (POS, None), "language": (POS, "en")},
    "reasoning_steps_reward": {"messages": (POS, REQUIRED), "pattern": (POS, None), "min_steps": (POS, 3), "max_steps": (POS, None), "exclusive_patterns": (POS, False)},
    "sequence_reward": {"messages": (POS, REQUIRED), "sequence_terms": (POS, None), "min_matches": (POS, 3), "case_sensitive": (POS, False)},
    "language_consistency_reward": {"messages": (POS, REQUIRED), "ground_truth": (KW, REQUIRED), "target_language": (KW, None), "min_consistency": (KW, 0.6), "auto_detect": (KW, True)},
    "math_reward": {"messages": (POS, REQUIRED), "ground_truth": (KW, REQUIRED), "tolerance": (KW, 0.001), "absolute_tolerance": (KW, 1e-8), "require_units": (KW, False)},
    "list_comparison_math_reward": {"messages": (POS, REQUIRED), "ground_truth": (KW, REQUIRED), "order_matters": (KW, False)},
    "multiple_choice_math_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, REQUIRED)},
    "json_schema_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, None), "json_content": (POS, None), "expected_schema": (POS, None)},
    "exact_tool_match_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, None)},
    "schema_jaccard_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, None), "function_call": (POS, None), "expected_schema": (POS, None)},
    "llm_judge_reward": {
        "messages": (POS, REQUIRED), "ground_truth": (POS, None), "function_call": (POS, None), "expected_schema": (POS, None),
        "expected_behavior": (POS, None), "openai_api_key": (POS, None), "model": (POS, "gpt-4o-mini"), "temperature": (POS, 0.0),
    },
    "composite_function_call_reward": {
        "messages": (POS, REQUIRED), "ground_truth": (POS, None), "function_call": (POS, None), "expected_schema": (POS, None),
        "expected_behavior": (POS, None), "openai_api_key": (POS, None), "llm_model": (POS, "gpt-4o-mini"), "weights": (POS, None),
    },
    "lean_prover_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, REQUIRED)},
    "deepseek_prover_v2_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, REQUIRED)},
    "local_code_execution_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, None), "language": (POS, "python"), "timeout": (POS, 5), "max_memory_mb": (POS, 100)},
    "fractional_code_reward": {"messages": (POS, REQUIRED), "ground_truth": (POS, REQUIRED), "language": (POS, "python"), "timeout": (POS, 30), "environment": (POS, "local"), "api_key": (POS, None)},
    "deepcoder_code_reward": {
        "messages": (POS, REQUIRED), "ground_truth": (POS, REQUIRED), "language": (POS, REQUIRED), "timeout": (POS, 10),
        "environment": (POS, "local"), "api_key": (POS, None), "target_function": (POS, None),
    },
    "evaluate_apps_solution": {"messages": (POS, REQUIRED), "ground_truth": (POS, REQUIRED)},
}  # fmt: skip
# Deprecated in reward-kit (they forward to exact_tool_match_reward): every call warns.
DEPRECATED = {"schema_jaccard_reward", "llm_judge_reward", "composite_function_call_reward"}


def test_all_reward_kit_builtins_are_provided() -> None:
    assert set(rewards.BUILTIN_REWARDS) == set(REWARD_KIT_0_4_1)
    assert set(rewards.__all__) >= set(REWARD_KIT_0_4_1) | {"combine", "composite_reward"}


@pytest.mark.parametrize("name", sorted(REWARD_KIT_0_4_1))
def test_same_parameters_and_defaults_as_reward_kit(name: str) -> None:
    fn = getattr(rewards, name)
    assert is_reward_function(fn) and get_spec(fn).name == name
    params = inspect.signature(fn).parameters
    declared = [p for p in params.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert [p.name for p in declared] == list(REWARD_KIT_0_4_1[name])
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for param in declared:
        kind, default = REWARD_KIT_0_4_1[name][param.name]
        assert param.kind.name == kind, param.name
        if default is REQUIRED:
            assert param.default is inspect.Parameter.empty, param.name
        elif name == "diversity_reward" and param.name == "ngram_sizes":
            assert list(param.default) == default  # an immutable tuple here (reward-kit: a mutable list)
        else:
            assert param.default == default, param.name


@pytest.mark.parametrize("name", sorted(REWARD_KIT_0_4_1))
def test_callable_with_dict_and_message_messages(name: str) -> None:
    fn = getattr(rewards, name)
    required = {
        p.name: None for p in inspect.signature(fn).parameters.values()
        if p.default is inspect.Parameter.empty and p.name != "messages" and p.kind is not inspect.Parameter.VAR_KEYWORD
    }  # fmt: skip
    if "required_tags" in required:
        required["required_tags"] = ["answer"]
    if "language" in required:
        required["language"] = "python"
    for messages in (
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer is 42"}],
        [Message(role="user", content="q"), Message(role="assistant", content="The answer is 42")],
    ):
        if name in DEPRECATED:
            with pytest.warns(DeprecationWarning, match="exact_tool_match_reward"):
                result = fn(messages=messages, statement="s", **required)
        else:
            result = fn(messages=messages, statement="s", **required)
        assert isinstance(result, EvaluateResult)
        assert result.reason


def test_importing_the_package_is_cheap() -> None:
    code = (
        "import sys, pytest_reward.rewards as r\n"
        "heavy = [m for m in ('pydantic', 'numpy', 'pytest_reward.rewards.sandbox', 'pytest_reward.rewards.math_answers') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == ""


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        rewards.nope  # noqa: B018
