"""The verdict on a preference pair, and a preference file's accuracy (overall and per subset).

A pair is correct when the chosen response scores strictly higher than every rejected one (RewardBench's
``chosen > rejected``: a tie is wrong). Best-of-n (``rejected`` given as a list): a tie at the top between the
chosen response and ``k - 1`` rejected ones earns ``1/k`` (RewardBench 2's ``1/#(scores == max)``), so accuracy is
the mean credit. The margin is the chosen score minus the best rejected one. A pair on which the reward fails
(an exception, an invalid score) earns nothing, with the reason.

Accuracy intervals are Wilson score intervals of the credit over the pairs (no continuity correction; a best-of-n
tie's fractional credit enters as it is), at 95 % for the reports and at the gates' ``confidence=`` for the gates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["PairStats", "pair_verdict"]


def pair_verdict(scores: Sequence[float], best_of_n: bool) -> tuple[float, float, int]:
    """``(credit, margin, tied)`` of a pair whose responses scored ``scores`` (the chosen response first): the
    credit in [0, 1], the chosen score minus the best rejected one, and how many rejected responses tie the chosen
    one at the top (0 when the chosen one is not at the top or is alone there)."""
    chosen = scores[0]
    best = max(scores[1:])
    margin = chosen - best
    if chosen > best:
        return 1.0, margin, 0
    if chosen < best:
        return 0.0, margin, 0
    tied = sum(1 for s in scores[1:] if s == chosen)
    return (1.0 / (tied + 1) if best_of_n else 0.0), margin, tied


class _Counts:
    __slots__ = ("credit", "n", "n_correct", "n_errors", "n_tied")

    def __init__(self) -> None:
        self.n = 0
        self.credit = 0.0
        self.n_correct = 0
        self.n_tied = 0
        self.n_errors = 0

    def add(self, credit: float, tied: bool, errored: bool) -> None:
        self.n += 1
        self.credit += credit
        self.n_correct += credit == 1.0
        self.n_tied += tied
        self.n_errors += errored

    def add_right(self) -> None:
        """:meth:`add` of a right pair: credit 1, no tie, no error."""
        self.n += 1
        self.credit += 1.0
        self.n_correct += 1

    def to_dict(self, confidence: float | None) -> dict[str, Any]:
        from .stats import wilson_interval

        credit = min(self.credit, float(self.n))  # 1/3 + 1/3 + 1/3 may round above the count
        out: dict[str, Any] = {
            "n": self.n,
            "credit": self.credit,
            "n_correct": self.n_correct,
            "n_tied": self.n_tied,
            "n_errors": self.n_errors,
            "accuracy": self.credit / self.n if self.n else None,
            "ci": wilson_interval(credit, self.n, 0.95).to_dict() if self.n else None,
            "gate_ci": None,
        }
        if confidence is not None and self.n:
            out["gate_ci"] = wilson_interval(credit, self.n, confidence).to_dict()
        return out


class PairStats:
    """A preference file's pairs, streamed: credits per subset (pairs without a subset count in the total only)."""

    def __init__(self) -> None:
        self.total = _Counts()
        self.subsets: dict[str, _Counts] = {}
        self.best_of_n = 0

    def add(self, pair: dict[str, Any]) -> None:
        """One pair's ``extra["pair"]`` (:func:`pytest_reward.scoring.pairs.pair_outcome`)."""
        credit, tied, errored = float(pair["credit"]), bool(pair["tied"]), pair["error"]
        self.total.add(credit, tied, errored)
        subset = pair.get("subset")
        if subset is not None:
            counts = self.subsets.get(subset)
            if counts is None:
                counts = self.subsets[subset] = _Counts()
            counts.add(credit, tied, errored)
        self.best_of_n += len(pair["scores"]) > 2

    def add_right(self, subset: str | None, best_of_n: bool) -> None:
        """:meth:`add` of a right pair (credit 1, no tie, no error) without its ``extra["pair"]``."""
        self.total.add_right()
        if subset is not None:
            counts = self.subsets.get(subset)
            if counts is None:
                counts = self.subsets[subset] = _Counts()
            counts.add_right()
        self.best_of_n += best_of_n

    @property
    def n(self) -> int:
        return self.total.n

    def summary(self, confidence: float | None) -> dict[str, Any]:
        """The file's accuracy with its intervals, and each subset's (``Summary.preference``)."""
        out = self.total.to_dict(confidence)
        out["n_best_of_n"] = self.best_of_n
        out["subsets"] = {name: c.to_dict(confidence) for name, c in sorted(self.subsets.items())}
        return out
