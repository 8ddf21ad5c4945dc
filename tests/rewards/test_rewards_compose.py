"""combine() / composite_reward(): components as metrics, weights, failures reported."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_reward.reward.decorator import get_spec, is_reward_function
from pytest_reward.reward.models import EvaluateResult, MetricResult
from pytest_reward.rewards import combine, composite_reward, format_reward, math_reward, tag_count_reward

GOOD = "<think>\nwork\n</think>\n<answer>\n\\boxed{42}\n</answer>"


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": "q"}, {"role": "assistant", "content": text}]


def constant(score: float, valid: bool = True, name: str = "constant") -> Any:
    def fn(messages: list[Any], **kwargs: Any) -> EvaluateResult:
        return EvaluateResult(
            score=score,
            reason=f"always {score}",
            is_score_valid=valid,
            metrics={"inner": MetricResult(score=0.5, reason="i")},
        )

    fn.__name__ = name
    return fn


def test_weighted_mean_and_one_metric_per_component() -> None:
    reward = combine(weights={format_reward: 0.2, math_reward: 0.8}, name="format_and_math")
    assert reward.__name__ == "format_and_math"
    assert is_reward_function(reward) and get_spec(reward).name == "format_and_math"
    right = reward(messages=conv(GOOD), ground_truth="42")
    assert right.score == pytest.approx(1.0)
    assert set(right.metrics) == {"format_reward", "math_reward"}
    wrong_answer = reward(messages=conv(GOOD.replace("42", "41")), ground_truth="42")
    assert wrong_answer.score == pytest.approx(0.2)
    assert wrong_answer.metrics["math_reward"].score == 0.0
    assert wrong_answer.is_score_valid is True


def test_named_components_kwargs_and_submetrics() -> None:
    reward = combine(
        weights={"fmt": 1.0, "tags": 3.0},
        components={"fmt": format_reward, "tags": tag_count_reward},
        component_kwargs={"tags": {"required_tags": ["think", "answer"], "score_per_tag": 0.5}},
        include_submetrics=True,
    )
    result = reward(messages=conv(GOOD))
    assert result.score == pytest.approx(1.0)
    assert {"fmt", "tags", "fmt.format_check", "tags.tag_think", "tags.overall"} <= set(result.metrics)


def test_unnormalised_weighted_sum() -> None:
    reward = combine(weights={constant(0.5, name="a"): 1.0, constant(1.0, name="b"): 1.0}, normalize=False)
    assert reward(messages=conv("x")).score == pytest.approx(1.5)


def test_component_exception_becomes_an_invalid_metric() -> None:
    def exploding(messages: list[Any], **kwargs: Any) -> EvaluateResult:
        raise RuntimeError("kaboom")

    reward = combine(weights={constant(1.0, name="steady"): 1.0, exploding: 1.0})
    result = reward(messages=conv("x"))
    assert result.is_score_valid is False
    assert result.metrics["exploding"].is_score_valid is False
    assert "RuntimeError: kaboom" in result.metrics["exploding"].reason
    assert "exploding raised RuntimeError" in (result.error or "")
    assert result.metrics["steady"].score == 1.0
    assert result.score == pytest.approx(0.5)


def test_invalid_component_invalidates_the_combination() -> None:
    reward = combine(weights={constant(1.0, name="ok"): 1.0, constant(0.0, valid=False, name="broken"): 1.0})
    result = reward(messages=conv("x"))
    assert result.is_score_valid is False
    assert "broken is not valid" in (result.error or "")


def test_out_of_range_and_nan_component_scores() -> None:
    result = combine(weights={constant(3.0, name="big"): 1.0})(messages=conv("x"))
    assert (
        result.score == 3.0
        and result.metrics["big"].score == 1.0
        and "clipped" in result.metrics["big"].reason
    )
    nan = combine(weights={constant(float("nan"), name="nan_fn"): 1.0})(messages=conv("x"))
    assert nan.is_score_valid is False


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs weights"),
        ({"weights": {"missing": 1.0}}, "not in components"),
        ({"weights": {format_reward: -1.0}}, "non-negative"),
        ({"weights": {format_reward: 0.0}}, "add up to 0"),
        ({"weights": {lambda messages, **kw: None: 1.0}}, "no usable name"),
        ({"weights": {format_reward: 1.0}, "component_kwargs": {"nope": {}}}, "unknown components"),
    ],
)
def test_configuration_mistakes_fail_at_definition(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        combine(**kwargs)


def test_composite_reward_one_off() -> None:
    result = composite_reward(
        messages=conv(GOOD),
        ground_truth="42",
        components={"fmt": format_reward, "math": math_reward},
        weights={"fmt": 1.0, "math": 1.0},
    )
    assert result.score == pytest.approx(1.0)
    assert set(result.metrics) == {"fmt", "math"}
