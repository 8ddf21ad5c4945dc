"""Property tests: scorers stay in [0, 1] and never raise on arbitrary text (unicode, LaTeX, huge input)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_reward.reward.models import EvaluateResult
from pytest_reward.rewards import (
    accuracy_reward,
    cosine_scaled_accuracy_length_reward,
    deepseek_prover_v2_reward,
    diversity_reward,
    exact_tool_match_reward,
    format_reward,
    json_schema_reward,
    language_consistency_reward,
    lean_prover_reward,
    length_reward,
    list_comparison_math_reward,
    math_reward,
    multiple_choice_math_reward,
    reasoning_steps_reward,
    repetition_penalty_reward,
    sequence_reward,
    tag_count_reward,
)

SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "string"}}}

# name -> (function, extra keyword arguments)
SCORERS: dict[str, tuple[Callable[..., EvaluateResult], dict[str, Any]]] = {
    "format_reward": (format_reward, {}),
    "tag_count_reward": (tag_count_reward, {"required_tags": ["think", "answer"]}),
    "length_reward": (length_reward, {"target_length": 20}),
    "repetition_penalty_reward": (repetition_penalty_reward, {}),
    "diversity_reward": (diversity_reward, {}),
    "reasoning_steps_reward": (reasoning_steps_reward, {}),
    "sequence_reward": (sequence_reward, {}),
    "language_consistency_reward": (language_consistency_reward, {"ground_truth": None}),
    "math_reward": (math_reward, {"ground_truth": "\\boxed{42}"}),
    "list_comparison_math_reward": (list_comparison_math_reward, {"ground_truth": "1, 2, 3"}),
    "multiple_choice_math_reward": (
        multiple_choice_math_reward,
        {"ground_truth": [{"role": "assistant", "content": "(C)"}]},
    ),
    "accuracy_reward": (accuracy_reward, {"ground_truth": [{"role": "assistant", "content": "42"}]}),
    "cosine_scaled_accuracy_length_reward": (cosine_scaled_accuracy_length_reward, {"ground_truth": "42"}),
    "json_schema_reward": (json_schema_reward, {"expected_schema": SCHEMA}),
    "exact_tool_match_reward": (exact_tool_match_reward, {"ground_truth": {"tool_calls": []}}),
    "lean_prover_reward": (lean_prover_reward, {"ground_truth": "by simp", "statement": "1 = 1"}),
    "deepseek_prover_v2_reward": (
        deepseek_prover_v2_reward,
        {"ground_truth": "by simp", "statement": "1 = 1"},
    ),
}

FRAGMENTS = [
    "<think>\n", "</think>\n", "<answer>\n", "</answer>", "\\boxed{", "}", "\\frac{1}{2}", "$", "42", "-3.5", "1,000",
    " or ", "(B)", " a ", "Step 1: ", "\n1. ", "\n- ", "First, ", "Then ", "Finally, ", "```json\n", "```", '{"a": 1}',
    "<tool_call>", "</tool_call>", "theorem t : 1 = 1 := by simp", "sorry", "le ", "der ", "的", "ё", "😀", " ", "\n",
]  # fmt: skip
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=25).map("".join)


def _check(result: EvaluateResult, name: str) -> None:
    assert isinstance(result, EvaluateResult)
    assert 0.0 <= result.score <= 1.0, (name, result.score)
    for metric_name, metric in result.metrics.items():
        assert 0.0 <= metric.score <= 1.0, (name, metric_name)
    assert result.reason


@pytest.mark.parametrize("name", sorted(SCORERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_scores_stay_in_unit_interval(name: str, text: str) -> None:
    fn, kwargs = SCORERS[name]
    messages = [
        {"role": "user", "content": "Answer in English please."},
        {"role": "assistant", "content": text},
    ]
    _check(fn(messages=messages, **kwargs), name)


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_empty_and_missing_responses(name: str) -> None:
    fn, kwargs = SCORERS[name]
    for messages in ([], [{"role": "user", "content": "q"}], [{"role": "assistant", "content": ""}]):
        result = fn(messages=messages, **kwargs)
        assert 0.0 <= result.score <= 1.0
        if not messages or messages[-1]["role"] != "assistant":
            assert result.is_score_valid is False or name == "exact_tool_match_reward", name


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_huge_input(name: str) -> None:
    fn, kwargs = SCORERS[name]
    text = ("Step 1: compute 12 + 30 = 42. Le résultat est 42 ✓. " * 20_000) + "\\boxed{42}"
    _check(
        fn(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": text}], **kwargs),
        name,
    )


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.integers(min_value=0, max_value=400),
    target=st.one_of(st.none(), st.integers(min_value=0, max_value=300)),
    low=st.one_of(st.none(), st.integers(min_value=0, max_value=200)),
    span=st.integers(min_value=0, max_value=200),
    cosine=st.booleans(),
)
def test_length_reward_in_range_for_any_bounds(
    tokens: int, target: int | None, low: int | None, span: int, cosine: bool
) -> None:
    messages = [{"role": "assistant", "content": " ".join(["w"] * tokens) or "."}]
    high = None if low is None else low + span
    result = length_reward(
        messages=messages,
        target_length=target,
        min_length=low,
        max_length=high,
        scaling="cosine" if cosine else "linear",
    )
    _check(result, "length_reward")


@settings(max_examples=100, deadline=None)
@given(actual=texts, expected=texts)
def test_compare_outputs_in_unit_interval(actual: str, expected: str) -> None:
    from pytest_reward.rewards.code_execution import compare_outputs

    score = compare_outputs(actual, expected)
    assert 0.0 <= score <= 1.0
    assert compare_outputs(expected, expected) == 1.0


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(texts, st.from_regex(r"-?\d{1,6}(\.\d{1,4})?(/[1-9]\d{0,3})?", fullmatch=True)))
def test_parse_number_is_finite_or_none(text: str) -> None:
    import math

    from pytest_reward.rewards._numbers import parse_number

    value = parse_number(text)
    assert value is None or math.isfinite(value)


@settings(max_examples=100, deadline=None)
@given(a=st.integers(-10_000, 10_000), b=st.integers(1, 1000))
def test_math_reward_fractions_round_trip(a: int, b: int) -> None:
    messages = [{"role": "assistant", "content": f"\\boxed{{\\frac{{{a}}}{{{b}}}}}"}]
    assert math_reward(messages=messages, ground_truth=repr(a / b)).score == 1.0
