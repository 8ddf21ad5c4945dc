"""Helpfulness: does the answer take up the question, answer and explain it, at a reasonable length?"""

from __future__ import annotations

from typing import Any

from comprehensive_reward import evaluate_conciseness, evaluate_helpfulness

from pytest_reward import EvaluateResult, MetricResult, reward_function

from ._common import last_exchange


@reward_function
def helpfulness_reward(messages: list[dict[str, Any]], **kwargs: Any) -> EvaluateResult:
    """``evaluate_helpfulness`` and ``evaluate_conciseness`` of the last answer, weighted 3:1.

    (3:1 is the ratio of their default weights in ``comprehensive_evaluator``: 0.3 and 0.1.)
    """
    exchange = last_exchange(messages)
    if exchange is None:
        return EvaluateResult(score=0.0, reason="No user question followed by an assistant answer")
    query, response = exchange
    answer_score, answer_reason = evaluate_helpfulness(query, response)
    length_score, length_reason = evaluate_conciseness(response)
    score = 0.75 * answer_score + 0.25 * length_score
    return EvaluateResult(
        score=score,
        reason=f"0.75 × answer {answer_score:.2f} + 0.25 × conciseness {length_score:.2f}",
        metrics={
            "answer": MetricResult(score=answer_score, reason=answer_reason),
            "conciseness": MetricResult(score=length_score, reason=length_reason),
        },
    )
