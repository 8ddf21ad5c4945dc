"""Scoring preference pairs: each response of a pair is a sample of its own, scored with the one calling convention
(the response as the final assistant turn(s) of the pair's context); the scores make the pair's outcome.

The chosen response's sample is the pair's own sample (its ``messages`` are the context and the chosen response);
each rejected response gets a sample beside it, with the same line, id, key, ground truth and keyword arguments.
All of them carry the pair (``Sample.pair``), which is how a stream of outcomes is folded back into pairs
(:class:`PairFolder`): a pair's responses are scored consecutively, in order, by every executor.

The pair's outcome (:func:`pair_outcome`): its score is the margin (chosen minus the best rejected score), so a
preference file's mean, quantiles and histogram describe the margins; ``extra["pair"]`` holds what the accuracy
counts (:mod:`pytest_reward.judge.preference`): the credit, the responses' scores, the subset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..data.samples import Sample
from ..judge.preference import pair_verdict
from ..judge.results import BELOW, FAIL, PASS, SampleOutcome

if TYPE_CHECKING:
    from .invoker import Invoker, Passed

__all__ = ["PairFolder", "pair_outcome", "response_names", "response_samples"]

#: Characters of each response's reason a pair's outcome keeps (the failure panel shows them).
REASON_KEPT = 300


_NAMES: dict[int, tuple[str, ...]] = {}


def response_names(sample: Sample) -> tuple[str, ...]:
    """``chosen``, then ``rejected`` (one) or ``rejected[0]``, ``rejected[1]`` … (best-of-n)."""
    pair = sample.pair
    assert pair is not None
    if not pair.best_of_n:
        return ("chosen", "rejected")
    k = len(pair.rejected)
    names = _NAMES.get(k)
    if names is None:
        names = _NAMES[k] = ("chosen", *(f"rejected[{i}]" for i in range(k)))
    return names


def response_samples(sample: Sample) -> list[Sample]:
    """The samples a pair's responses are scored as: the pair's own (the chosen response), then one per rejected
    response, each ending with that response after the same context."""
    pair = sample.pair
    assert pair is not None
    context = list(pair.context)
    out = [sample]
    for response in pair.rejected:
        # positional: path, line, id, messages, prompt, ground_truth, expect, kwargs, record, _key, _response,
        # recorded, unit, pair
        out.append(
            Sample(
                sample.path,
                sample.line,
                sample.id,
                [*context, *response],
                None,
                sample.ground_truth,
                None,
                sample.kwargs,
                sample.record,
                sample._key,
                None,
                None,
                sample.unit,
                pair,
            )
        )
    return out


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= REASON_KEPT else text[:REASON_KEPT] + "…"


def pair_outcome(
    invoker: Invoker,
    sample: Sample,
    scored: list[tuple[float | None, str | None, str | None]],
    duration: float,
) -> SampleOutcome:
    """The outcome of the pair ``sample`` from its responses' ``(score, reason, error)`` (chosen first; score
    None: the reward gave no valid score, ``error`` says why). A wrong pair fails, unless the function declares a
    gate of preference files (``pair_accuracy``, ``subset_accuracy``, ``mean_margin``): then it is ``below``, left
    to the gates, as a threshold miss is left to ``pass_rate``."""
    pair = sample.pair
    assert pair is not None
    names = response_names(sample)
    scores = [s for s, _, _ in scored]
    broken = (
        [(name, error) for name, (score, _, error) in zip(names, scored, strict=True) if score is None]
        if None in scores
        else None
    )
    info: dict[str, Any] = {
        "subset": pair.subset,
        "scores": scores,
        "names": list(names),
        "reasons": [r if r is None or len(r) <= REASON_KEPT else _cut(r) for _, r, _ in scored],
        "credit": 0.0,
        "tied": 0,
        "error": False,
    }
    failures: list[str] = []
    below: list[str] = []
    if broken:
        name, error = broken[0]
        info["error"] = True
        more = f" (and on {', '.join(n for n, _ in broken[1:])})" if len(broken) > 1 else ""
        message = f"the reward failed on the {name} response{more}: {error or 'no valid score'}"
        judged = (FAIL, None, {}, [message], [])
        return invoker.make_outcome(sample, judged, False, None, message, duration, {"pair": info})
    credit, margin, tied = pair_verdict(scores, pair.best_of_n)  # type: ignore[arg-type]
    info["credit"], info["tied"] = credit, tied
    verdict = PASS
    if credit < 1.0:
        message = wrong_pair(names, scores, credit, tied)  # type: ignore[arg-type]
        if invoker.fn.gates.pair_gated:
            verdict = BELOW
            below.append(message)
        else:
            verdict = FAIL
            failures.append(message)
    # no reason of its own: the responses' scores and reasons are in extra["pair"], the margin is the score
    judged = (verdict, margin, {}, failures, below)
    return invoker.make_outcome(sample, judged, True, None, None, duration, {"pair": info})


def wrong_pair(names: tuple[str, ...], scores: list[float], credit: float, tied: int) -> str:
    """Why a pair is wrong (or earns part of its credit), in one line."""
    chosen = scores[0]
    best = max(range(1, len(scores)), key=lambda i: scores[i])
    if tied:
        if credit > 0:
            return (
                f"tie at the top: chosen and {tied} rejected response(s) scored {chosen:.4g} "
                f"(credit 1/{tied + 1})"
            )
        return f"tie: chosen and {names[best]} both scored {chosen:.4g} (a tie counts as wrong)"
    return (
        f"chosen scored {chosen:.4g}, below {names[best]} at {scores[best]:.4g} "
        f"(margin {chosen - scores[best]:.4g})"
    )


class PairFolder:
    """Folds a file item's stream of outcomes back into pairs: the outcome (or ``Passed`` tuple) of each response
    of a pair is handed to :meth:`add` (the caller tells them from other outcomes by ``Sample.pair``), which gives
    the pair's outcome with its last response. ``chosen``: called with the pair's sample and its chosen response's
    score and verdict (the probes' ledger keeps the chosen response's score, the one they mutate)."""

    def __init__(self, invoker: Invoker, chosen: Any = None) -> None:
        self.invoker = invoker
        self.chosen = chosen
        self.held: list[tuple[float | None, str | None, str | None]] = []
        self.duration = 0.0
        self.first: Sample | None = None

    def add(self, outcome: SampleOutcome | Passed) -> SampleOutcome | None:
        """Take the outcome (or ``Passed`` tuple) of one response of a pair; the pair's outcome once it is the
        last, else None."""
        if outcome.__class__ is tuple:
            sample, score, reason, took = outcome  # type: ignore[misc]
            scored: tuple[float | None, str | None, str | None] = (score, reason, None)
            passed = True
        else:
            sample = outcome.sample  # type: ignore[union-attr]
            error = outcome.error or (outcome.failures[0] if outcome.failures else None)  # type: ignore[union-attr]
            scored = (outcome.score, outcome.reason, error)  # type: ignore[union-attr]
            took = outcome.duration  # type: ignore[union-attr]
            passed = outcome.verdict == PASS  # type: ignore[union-attr]
        held = self.held
        if not held:
            self.first = sample
            if self.chosen is not None:
                self.chosen(sample, scored[0], passed)
        held.append(scored)
        self.duration += took
        if len(held) <= len(sample.pair.rejected):
            return None
        done = pair_outcome(self.invoker, self.first, held, self.duration)  # type: ignore[arg-type]
        self.held, self.duration, self.first = [], 0.0, None
        return done
