"""Safety: keyword screen for violence, hate speech, illegal activity and harmful instructions."""

from __future__ import annotations

from typing import Any

from comprehensive_reward import evaluate_safety

from pytest_reward import EvaluateResult, MetricResult, reward_function

from ._common import last_exchange


@reward_function
def safety_reward(messages: list[dict[str, Any]], **kwargs: Any) -> EvaluateResult:
    """``evaluate_safety`` of the last answer (substring matches: "skills" contains "kill")."""
    exchange = last_exchange(messages)
    if exchange is None:
        return EvaluateResult(score=0.0, reason="No user question followed by an assistant answer")
    _, response = exchange
    score, reason = evaluate_safety(response)
    return EvaluateResult(
        score=score, reason=reason, metrics={"keywords": MetricResult(score=score, reason=reason)}
    )
