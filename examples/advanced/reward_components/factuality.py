"""Factuality: confident, evidence-citing language (a stand-in for a fact-checking model)."""

from __future__ import annotations

from typing import Any

from comprehensive_reward import evaluate_accuracy

from pytest_reward import EvaluateResult, MetricResult, reward_function

from ._common import last_exchange


@reward_function
def factuality_reward(messages: list[dict[str, Any]], **kwargs: Any) -> EvaluateResult:
    """``evaluate_accuracy`` of the last answer: 0.6 × confidence (no hedging) + 0.4 × factual language."""
    exchange = last_exchange(messages)
    if exchange is None:
        return EvaluateResult(score=0.0, reason="No user question followed by an assistant answer")
    _, response = exchange
    score, reason = evaluate_accuracy(response)
    return EvaluateResult(
        score=score, reason=reason, metrics={"language": MetricResult(score=score, reason=reason)}
    )
