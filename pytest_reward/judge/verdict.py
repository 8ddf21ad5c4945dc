"""The verdict rule (:func:`pytest_reward.judge.results.judge`) built once per gates object, for callers that judge
many results with the same gates and no golden expectation (a file's samples, a probe's mutated responses).

What is judged is what :meth:`pytest_reward.reward.call.Reward.fast` gives: an ``EvaluateResult``, or a ``float``
that stands for a valid result with that (finite) score and nothing else (a trainer-native function's number).
Both rules give what ``judge(result, gates, None)`` gives for that result; tests hold them to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..reward.models import EvaluateResult
from .gates import Gates
from .results import BELOW, FAIL, PASS, _metric_scores, judge

__all__ = ["Checked", "Judged", "checked_rule", "verdict_rule"]

#: ``(verdict, score, metrics, failures, below)``, as :func:`pytest_reward.judge.results.judge` returns them.
Judged = tuple[str, "float | None", "dict[str, dict[str, Any]]", "list[str]", "list[str]"]

#: ``(score, passed, reason, error)``: what :func:`checked_rule` gives (error None), or a call that gave no result.
Checked = tuple["float | None", bool, "str | None", "str | None"]


def _as_result(number: float) -> Any:
    return EvaluateResult(score=number, is_score_valid=True, reason=None, metrics={}, error=None)


def verdict_rule(gates: Gates) -> Callable[[Any], Judged]:
    """``rule(result) -> Judged``: ``judge(result, gates, None)`` for a result (not None) or a finite float. Without
    metric gates, a valid result with a finite score is judged in the rule's own frame; everything else by
    ``judge`` itself."""
    if gates.metrics:

        def general(result: Any) -> Judged:
            return judge(_as_result(result) if result.__class__ is float else result, gates, None)

        return general
    threshold, tolerated = gates.threshold, gates.tolerates_misses
    isfinite, metric_scores = math.isfinite, _metric_scores

    def rule(result: Any) -> Judged:
        if result.__class__ is float:
            score = result
            metrics: dict[str, dict[str, Any]] = {}
        else:
            score = float(result.score)
            if not (isfinite(score) and result.is_score_valid) or result.error:
                return judge(result, gates, None)
            metrics = metric_scores(result) if result.metrics else {}
        if threshold is not None and score < threshold:
            message = f"score {score:.4g} < threshold {threshold:g}"
            if tolerated:
                return BELOW, score, metrics, [], [message]
            return FAIL, score, metrics, [message], []
        return PASS, score, metrics, [], []

    return rule


def checked_rule(gates: Gates, *, words: bool = False) -> Callable[[Any], Checked]:
    """``rule(result) -> (score, passed, reason, None)``: the score :func:`verdict_rule` gives (None: no valid
    score), whether its verdict is a pass, and the result's reason, without the words of a failure (what the probes
    read of a mutated response; the last item is the error of a call that gave no result, here none). ``words``:
    a result without a valid score has the first failure ``judge`` words for it as its last item (what its
    sample's outcome would say: a preference pair's response, :func:`pytest_reward.scoring.pairs.pair_scorer`)."""
    if gates.metrics:
        full = verdict_rule(gates)

        def general(result: Any) -> Checked:
            verdict, score, _, failures, _ = full(result)
            error = failures[0] if words and score is None and failures else None
            return score, verdict == PASS, None if result.__class__ is float else result.reason, error

        return general
    threshold = gates.threshold
    isfinite, result_class = math.isfinite, EvaluateResult

    def rule(result: Any) -> Checked:
        cls = result.__class__
        # our own result's fields read from its __dict__: one attribute lookup instead of four (the probes' hot loop)
        if cls is result_class:
            values = result.__dict__
        elif cls is float:
            return result, threshold is None or result >= threshold, None, None
        else:
            values = _fields(result)
        score = float(values["score"])
        if isfinite(score) and values["is_score_valid"] and not values["error"]:
            return score, threshold is None or score >= threshold, values["reason"], None
        if words:
            failures = judge(result, gates, None)[3]
            return None, False, values["reason"], failures[0] if failures else None
        return None, False, values["reason"], None

    return rule


def _fields(result: Any) -> dict[str, Any]:
    """What :func:`checked_rule` reads of a result that is not exactly our ``EvaluateResult``."""
    return {
        "score": result.score,
        "reason": result.reason,
        "is_score_valid": result.is_score_valid,
        "error": result.error,
    }
