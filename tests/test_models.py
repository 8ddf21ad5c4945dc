"""reward-kit compatible data models."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pytest_reward import (
    EvaluateResult,
    Message,
    MetricResult,
    MetricRewardOutput,
    RewardOutput,
    StepOutput,
)


def test_message_requires_role_and_accepts_any_role_string():
    with pytest.raises(ValidationError, match="Field required"):
        Message(content="hi")
    with pytest.raises(ValueError, match="Role is required"):
        Message.model_validate({"content": "hi"})
    assert Message(role="custom_role", content="x").role == "custom_role"
    assert Message(role="user").content == ""
    assert Message(role="assistant", content=None).content is None


def test_message_tool_calls_and_multipart_content():
    m = Message.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    )
    assert m.tool_calls[0].function.name == "f"
    parts = Message(
        role="user",
        content=[{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}],
    )
    assert parts.text == "ab"
    with pytest.raises(ValidationError):
        Message(role="assistant", tool_calls=[{"foo": 1}])
    with pytest.raises(ValidationError):
        Message(role=1, content="x")


def test_message_ignores_unknown_fields():
    assert Message(role="user", content="x", foo="bar").model_dump(exclude_none=True) == {
        "role": "user",
        "content": "x",
    }


def test_metric_result_bounds_reason_and_legacy_success():
    assert MetricResult(score=0.5, reason="r", success=True).is_score_valid is True
    for bad in (1.5, -0.1):
        with pytest.raises(ValidationError):
            MetricResult(score=bad, reason="r")
    with pytest.raises(ValidationError, match="reason"):
        MetricResult(score=0.5)
    assert MetricResult(score="0.25", reason="r").score == 0.25


def test_evaluate_result_score_is_unbounded_and_dumps_like_reward_kit():
    assert EvaluateResult(score=-3).score == -3
    assert EvaluateResult(score=1.5).score == 1.5
    assert math.isnan(EvaluateResult(score=float("nan")).score)
    r = EvaluateResult(score=0.5, reason="r", metrics={"a": {"score": 0.3, "reason": "m"}})
    assert list(r.model_dump()) == ["score", "is_score_valid", "reason", "metrics", "step_outputs", "error"]
    assert json.loads(r.model_dump_json()) == {
        "score": 0.5,
        "is_score_valid": True,
        "reason": "r",
        "metrics": {"a": {"is_score_valid": True, "score": 0.3, "reason": "m"}},
        "step_outputs": None,
        "error": None,
    }


def test_dict_style_access():
    r = EvaluateResult(score=0.5, reason="r", metrics={"x": MetricResult(score=0.2, reason="m")})
    assert r["score"] == 0.5
    assert r["metrics"]["x"]["score"] == 0.2
    assert "score" in r and "nope" not in r
    assert r.get("nope", 7) == 7
    assert r.get("reason") == "r"
    assert r.keys() == ["score", "is_score_valid", "reason", "metrics", "step_outputs", "error"]
    assert list(r) == r.keys()
    assert dict(r.items())["score"] == 0.5
    assert dict(r)["reason"] == "r"
    with pytest.raises(KeyError):
        r["nope"]
    with pytest.raises(KeyError):
        r["metrics"]["x"]["nope"]
    assert r == EvaluateResult(score=0.5, reason="r", metrics={"x": {"score": 0.2, "reason": "m"}})


def test_step_outputs():
    r = EvaluateResult(
        score=1,
        step_outputs=[{"step_index": 0, "base_reward": -2.5}, StepOutput(step_index="s", base_reward=1)],
    )
    assert r.step_outputs[0].base_reward == -2.5
    assert r.step_outputs[1].step_index == "s"


def test_legacy_reward_output_round_trip_and_conversion():
    legacy = RewardOutput(
        score=0.7, metrics={"a": MetricRewardOutput(score=0.5), "b": MetricRewardOutput(0.1, "why")}
    )
    assert legacy.to_dict() == {
        "score": 0.7,
        "metrics": {"a": {"score": 0.5, "reason": None}, "b": {"score": 0.1, "reason": "why"}},
    }
    assert RewardOutput.from_dict(legacy.to_dict()) == legacy
    assert json.loads(str(legacy)) == legacy.to_dict()
    converted = legacy.to_evaluate_result()
    assert (
        converted.score == 0.7
        and converted.metrics["a"].reason == ""
        and converted.metrics["b"].reason == "why"
    )
    assert converted.to_reward_output().score == 0.7
    assert RewardOutput.from_dict({}).score == 0.0


@given(st.floats(0, 1), st.text())
def test_metric_result_accepts_every_unit_score(score, reason):
    m = MetricResult(score=score, reason=reason)
    assert m["score"] == score and m["reason"] == reason


@given(
    st.floats(allow_nan=False, allow_infinity=False),
    st.dictionaries(st.text(min_size=1), st.floats(0, 1), max_size=4),
)
def test_evaluate_result_json_round_trip(score, metrics):
    r = EvaluateResult(score=score, metrics={k: MetricResult(score=v, reason=k) for k, v in metrics.items()})
    assert EvaluateResult.model_validate_json(r.model_dump_json()) == r
