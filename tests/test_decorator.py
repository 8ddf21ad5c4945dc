"""@reward_function: reward-kit's rules, with the signature analysed once."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from typing import Any, List, Optional  # noqa: UP035

import pytest

from pytest_reward import EvaluateResult, Message, MetricRewardOutput, RewardOutput, reward_function
from pytest_reward.decorator import RewardInputError, RewardReturnError, get_spec

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
        (0.5, {}),
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
