"""@reward_function: reward-kit's rules, with the signature analysed once."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import warnings
from typing import Any, List, Optional  # noqa: UP035

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward import (
    EvaluateResult,
    Message,
    MetricResult,
    MetricRewardOutput,
    RewardOutput,
    reward_function,
)
from pytest_reward.reward.decorator import RewardInputError, RewardReturnError, get_spec

MSGS = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def test_requires_kwargs_at_decoration_time():
    with pytest.raises(ValueError, match=r"Function 'f' must accept \*\*kwargs parameter"):

        @reward_function
        def f(messages):
            return EvaluateResult(score=1)


def test_invalid_mode_rejected_at_decoration_time():
    with pytest.raises(ValueError, match="Invalid mode 'foo'"):
        reward_function(mode="foo")(lambda messages, **kw: None)


def test_bare_and_called_forms_keep_the_function_identity():
    def raw(messages, **kwargs):
        """doc"""
        return EvaluateResult(score=1)

    for deco in (reward_function, reward_function(id="x", requirements=["numpy>=1"])):
        fn = deco(raw)
        assert fn.__name__ == "raw" and fn.__doc__ == "doc" and fn.__wrapped__ is raw
        assert inspect.signature(fn) == inspect.signature(raw)
    fn = reward_function(id="x", requirements=["numpy>=1"])(raw)
    assert fn._reward_function_id == "x"
    assert fn._reward_function_requirements == ["numpy>=1"]
    assert fn._reward_function_mode == "pointwise"


def test_list_message_annotation_coerces_dicts_without_mutating_input():
    seen = {}

    @reward_function
    def f(messages: List[Message], **kwargs) -> EvaluateResult:  # noqa: UP006
        seen["types"] = {type(m) for m in messages}
        return EvaluateResult(score=1)

    data = [dict(m) for m in MSGS]
    f(messages=data)
    assert seen["types"] == {Message}
    assert data == MSGS  # not mutated
    f(data)  # positional
    assert seen["types"] == {Message}


def test_pep585_optional_and_string_annotations_coerce_too():
    @reward_function
    def a(messages: list[Message], ground_truth: Optional[List[Message]] = None, **kwargs):  # noqa: UP006, UP045
        assert all(isinstance(m, Message) for m in messages + (ground_truth or []))
        return EvaluateResult(score=1)

    a(messages=MSGS, ground_truth=[{"role": "assistant", "content": "x"}])
    a(messages=MSGS)

    @reward_function
    def b(messages: "List[Message]", **kwargs):  # noqa: UP006, UP037
        assert isinstance(messages[0], Message)
        return EvaluateResult(score=1)

    b(messages=MSGS)


def test_unannotated_messages_stay_dicts():
    @reward_function
    def f(messages, **kwargs):
        assert isinstance(messages[0], dict)
        return EvaluateResult(score=1)

    f(messages=MSGS)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (
            "hello",
            r"Input 'messages' failed Pydantic validation: Expected a list for 'messages', got <class 'str'>",
        ),
        ([{"content": "x"}], r"Input 'messages' failed Pydantic validation: Role is required"),
        ([1], r"Unexpected type for item 0 in 'messages': <class 'int'>"),
    ],
)
def test_bad_messages_give_reward_kit_errors(value, match):
    @reward_function
    def f(messages: List[Message], **kwargs):  # noqa: UP006
        return EvaluateResult(score=1)

    with pytest.raises(RewardInputError, match=match) as info:
        f(messages=value)
    assert isinstance(info.value, ValueError)


def test_ground_truth_coerced_only_when_annotated():
    @reward_function
    def typed(messages, ground_truth: List[Message] = None, **kwargs):  # noqa: UP006, RUF013
        return EvaluateResult(score=float(isinstance(ground_truth[0], Message)))

    @reward_function
    def untyped(messages, ground_truth=None, **kwargs):
        return EvaluateResult(score=float(isinstance(ground_truth, str)))

    assert typed(messages=MSGS, ground_truth=[{"role": "assistant", "content": "x"}]).score == 1
    assert untyped(messages=MSGS, ground_truth="42").score == 1
    with pytest.raises(ValueError, match="ground_truth"):
        typed(messages=MSGS, ground_truth="not a list")


def test_returned_dict_is_validated_and_evaluate_result_passed_through():
    result = EvaluateResult(score=2.0)

    @reward_function
    def same(messages, **kwargs):
        return result

    @reward_function
    def as_dict(messages, **kwargs):
        return {"score": 0.3, "reason": "r", "metrics": {"a": {"score": 0.2, "reason": "x"}}}

    assert same(messages=MSGS) is result
    out = as_dict(messages=MSGS)
    assert isinstance(out, EvaluateResult) and out["metrics"]["a"]["score"] == 0.2


@pytest.mark.parametrize(
    "value",
    [
        0.5,
        None,
        {"reason": "no score"},
        {"score": 0.1, "metrics": {"a": {"score": 2.0, "reason": "x"}}},
    ],
)
def test_other_returns_rejected_with_reward_kit_wording(value):
    @reward_function
    def f(messages, **kwargs):
        return value

    with pytest.raises(
        RewardReturnError,
        match=r"Return value from function 'f' failed Pydantic validation for mode 'pointwise':\n1 validation error for EvaluateResult",
    ) as info:
        f(messages=MSGS)
    assert isinstance(info.value, ValueError) and info.value.value is value


def test_user_exceptions_propagate_unchanged():
    @reward_function
    def f(messages, **kwargs):
        raise RuntimeError("kaboom")

    with pytest.raises(RuntimeError, match="kaboom"):
        f(messages=MSGS)


def test_legacy_reward_output_converted_with_one_warning_per_function():
    @reward_function
    def legacy(messages, **kwargs):
        return RewardOutput(score=0.4, metrics={"m": MetricRewardOutput(score=0.5)})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = legacy(messages=MSGS)
        legacy(messages=MSGS)
    assert isinstance(first, EvaluateResult) and first.metrics["m"].score == 0.5
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "RewardOutput" in str(caught[0].message)


def test_async_functions_are_awaited():
    @reward_function
    async def f(messages: List[Message], **kwargs):  # noqa: UP006
        await asyncio.sleep(0)
        return {"score": len(messages)}

    assert inspect.iscoroutinefunction(f)
    assert asyncio.run(f(messages=MSGS)).score == 2
    assert get_spec(f).is_async


def test_batch_mode_takes_lists_and_returns_a_list():
    @reward_function(mode="batch")
    def f(rollouts_messages: List[List[Message]], **kwargs):  # noqa: UP006
        return [{"score": len(r)} for r in rollouts_messages]

    out = f(rollouts_messages=[MSGS, MSGS[:1]])
    assert [r.score for r in out] == [2, 1]

    @reward_function(mode="batch")
    def single(rollouts_messages, **kwargs):
        return EvaluateResult(score=1)

    with pytest.raises(ValueError, match="expected a list of EvaluateResult"):
        single(rollouts_messages=[MSGS])

    @reward_function(mode="batch")
    def bad(rollouts_messages, **kwargs):
        return [None]

    with pytest.raises(ValueError, match=r"1 validation error for list\[EvaluateResult\]"):
        bad(rollouts_messages=[MSGS])


def test_spec_is_analysed_once():
    @reward_function
    def f(messages: List[Message], original_messages: List[Message] = [], **kwargs: Any):  # noqa: B006, UP006
        return EvaluateResult(score=1)

    spec = get_spec(f)
    assert spec.parameters == ("messages", "original_messages")
    assert spec.coerce_messages and not spec.coerce_ground_truth
    assert spec.messages_index == 0 and spec.accepts("anything")


# --- the legacy (score, {metric: score | MetricResult}) tuple -----------------------------------------------------


@contextlib.contextmanager
def strict_about_our_module():
    """Record warnings, but make one attributed to pytest_reward itself an error (as pyproject's filter does)."""
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", category=DeprecationWarning, module="pytest_reward")
        yield log


def test_legacy_tuple_converted_with_one_warning_per_function_at_the_functions_line():
    @reward_function
    def legacy(messages, **kwargs):
        return 0.75, {"overlap": 0.5, "tone": MetricResult(score=1.0, reason="polite")}

    with strict_about_our_module() as log:
        first = legacy(messages=MSGS)
        legacy(messages=MSGS)
    assert isinstance(first, EvaluateResult) and first.score == 0.75
    assert first.metrics["overlap"].score == 0.5 and first.metrics["overlap"].reason == "overlap score"
    assert first.metrics["tone"].reason == "polite"
    assert [w.category for w in log] == [DeprecationWarning]  # once per function
    assert log[0].filename == __file__
    assert log[0].lineno == legacy.__wrapped__.__code__.co_firstlineno
    assert "reward function 'legacy' returned a legacy (score, {metric: score | MetricResult}) tuple" in str(
        log[0].message
    )


def test_legacy_tuples_in_batch_and_async_functions():
    @reward_function(mode="batch")
    def batch(rollouts_messages, **kwargs):
        return [(0.25, {"m": 1}) for _ in rollouts_messages]

    @reward_function
    async def slow(messages, **kwargs):
        return 1, {}

    with strict_about_our_module() as log:
        out = batch(rollouts_messages=[MSGS, MSGS])
        assert asyncio.run(slow(messages=MSGS)).score == 1.0
    assert [r.score for r in out] == [0.25, 0.25] and out[0].metrics["m"].score == 1.0
    assert len(log) == 2 and {w.filename for w in log} == {__file__}


@given(
    score=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**6), 10**6),
    metrics=st.dictionaries(st.text(max_size=8), st.floats(0, 1) | st.integers(0, 1), max_size=4),
)
def test_any_well_formed_legacy_tuple_keeps_its_score_and_metrics(score, metrics):
    @reward_function
    def legacy(messages, **kwargs):
        return score, metrics

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = legacy(messages=MSGS)
    assert out.score == score
    assert {k: m.score for k, m in out.metrics.items()} == metrics


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ((), "got 0 items"),
        ((0.5,), "got 1 items"),
        ((0.5, {}, "x"), "got 3 items"),
        ((True, {}), "the score is bool, not a number"),
        (("0.5", {}), "the score is str, not a number"),
        ((0.5, [("m", 0.5)]), "the metrics are list, not a dict"),
        ((0.5, {1: 0.5}), "metric name 1 is not a string"),
        ((0.5, {"m": "high"}), "metric 'm' is str, not a number or a MetricResult"),
        ((0.5, {"m": {"score": 0.5}}), "metric 'm' is dict, not a number or a MetricResult"),
    ],
)
def test_other_tuples_are_rejected_saying_why(value, why):
    @reward_function
    def f(messages, **kwargs):
        return value

    with pytest.raises(RewardReturnError) as info:
        f(messages=MSGS)
    assert str(info.value) == (
        "Return value from function 'f' failed validation for mode 'pointwise':\n"
        f"a tuple is accepted only in the deprecated legacy form (score, {{metric: score | MetricResult}}): {why}"
    )
    assert info.value.value is value


def test_a_legacy_metric_out_of_range_is_reward_kits_validation_error():
    @reward_function
    def f(messages, **kwargs):
        return 0.5, {"m": 1.5}

    with pytest.raises(
        RewardReturnError, match=r"failed Pydantic validation for mode 'pointwise':\n1 validation error"
    ):
        f(messages=MSGS)
