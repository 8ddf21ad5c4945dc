"""Scoring preference pairs: each response of a pair is a sample of its own, scored with the one calling convention
(the response as the final assistant turn(s) of the pair's context); the scores make the pair's outcome.

The in-process loop of a file (one thread, the usual call: :func:`pair_scorer`) scores a pair whole: both calls in
one frame, without a sample per response, into a :data:`PairScored` tuple that the file item folds (a right pair
without its outcome, as a passing sample's score). Everywhere else (worker threads, processes, Ray, ``--reward-runs``,
a timeout, metric gates) each response is a sample of its own (:func:`response_samples`): the chosen response's
sample is the pair's own sample (its ``messages`` are the context and the chosen response); each rejected response
gets a sample beside it, with the same line, id, key, ground truth and keyword arguments. All of them carry the pair
(``Sample.pair``), which is how a stream of outcomes is folded back into pairs (:class:`PairFolder`): a pair's
responses are scored consecutively, in order, by every executor.

The pair's outcome (:func:`pair_outcome`): its score is the margin (chosen minus the best rejected score), so a
preference file's mean, quantiles and histogram describe the margins; ``extra["pair"]`` holds what the accuracy
counts (:mod:`pytest_reward.judge.preference`): the credit, the responses' scores, the subset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..data.samples import Sample
from ..judge.preference import pair_verdict
from ..judge.results import BELOW, FAIL, PASS, SampleOutcome
from ..judge.verdict import checked_rule
from ..reward.call import MISSING, describe_exception

if TYPE_CHECKING:
    from ..judge.verdict import Checked
    from .invoker import Invoker

__all__ = [
    "PairFolder",
    "PairScored",
    "expand_pairs",
    "pair_outcome",
    "pair_scorer",
    "response_names",
    "response_samples",
    "right_margin",
]

#: A pair scored whole (:func:`pair_scorer`): its sample, what each response's call gave (a
#: :data:`~pytest_reward.judge.verdict.Checked` per response, the chosen one first: the score, None when the reward
#: gave no valid one; whether the response's own verdict is a pass; its reason; the error, or the failure's words, of
#: a response without a score) and the seconds the calls took. :func:`pair_outcome` makes the pair's outcome of it.
PairScored = tuple[Sample, "list[Checked]", float]

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


def expand_pairs(entries: Iterable[Any]) -> Iterator[Any]:
    """A file's entries with each pair's sample replaced by its responses' samples (:func:`response_samples`): what
    an executor that scores samples one by one (threads, processes, Ray) is handed; its outcomes are folded back
    (:class:`PairFolder`)."""
    for entry in entries:
        if entry.__class__ is Sample and entry.pair is not None:
            yield from response_samples(entry)
        else:
            yield entry


def pair_scorer(invoker: Invoker) -> Callable[[Sample], PairScored] | None:
    """``score(sample) -> PairScored``: a pair's responses scored in one frame, for the in-process loop of a file
    (one thread); None where a response must be scored as a sample of its own (``--reward-runs`` above 1, a
    timeout, metric gates, a batch-mode function: :meth:`Invoker.sample_scorer` scores none of them in its own
    frame either).

    Each response gets what its sample would get from :meth:`Invoker.sample_scorer`: the function's call
    (:meth:`pytest_reward.reward.call.Reward.fast`) on a private copy of the context and the response, compared with
    them after the call (a reward that changes its input fails the response, naming it), the ground truth and the
    fields copied and checked as for a sample; the verdict (:func:`pytest_reward.judge.verdict.checked_rule`), with,
    for a response without a valid score, the first failure the verdict words (what its outcome's error would be)."""
    if invoker.runs != 1 or invoker.timeout is not None or invoker.fn.gates.metrics or invoker.batch:
        return None
    judged = checked_rule(invoker.fn.gates, words=True)
    fast = invoker.reward.fast(numbers=True, then=judged, failed=_failed)
    clock = time.perf_counter

    def score(sample: Sample) -> PairScored:
        pair = sample.pair
        truth = sample.ground_truth if sample.has_ground_truth else MISSING
        fields = sample.kwargs
        start = clock()
        # the chosen response's conversation is the sample's own messages (the context and the chosen response)
        scored = [fast(sample.messages, truth, fields, False)]
        context = pair.context  # type: ignore[union-attr]
        for response in pair.rejected:  # type: ignore[union-attr]
            scored.append(fast([*context, *response], truth, fields, False))
        return sample, scored, clock() - start

    return score


def _failed(exc: Exception) -> Checked:
    return None, False, None, describe_exception(exc)


def right_margin(scored: list[Checked]) -> float | None:
    """The margin of a right pair (every response scored, the chosen one strictly above every rejected one: credit
    1, the outcome a pass); None for any other pair (its outcome says what it is: :func:`pair_outcome`)."""
    if len(scored) == 2:
        chosen, rejected = scored[0][0], scored[1][0]
        if chosen is not None and rejected is not None and chosen > rejected:
            return chosen - rejected
        return None
    scores = [c[0] for c in scored]
    if None in scores:
        return None
    credit, margin, _ = pair_verdict(scores, True)  # type: ignore[arg-type]
    return margin if credit == 1.0 else None


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= REASON_KEPT else text[:REASON_KEPT] + "…"


def pair_outcome(
    invoker: Invoker,
    sample: Sample,
    scored: list[Checked],
    duration: float,
) -> SampleOutcome:
    """The outcome of the pair ``sample`` from its responses' ``(score, passed, reason, error)`` (chosen first;
    score None: the reward gave no valid score, ``error`` says why). A wrong pair fails, unless the function declares a
    gate of preference files (``pair_accuracy``, ``subset_accuracy``, ``mean_margin``): then it is ``below``, left
    to the gates, as a threshold miss is left to ``pass_rate``."""
    pair = sample.pair
    assert pair is not None
    names = response_names(sample)
    scores = [c[0] for c in scored]
    broken = (
        [(name, error) for name, (score, _, _, error) in zip(names, scored, strict=True) if score is None]
        if None in scores
        else None
    )
    info: dict[str, Any] = {
        "subset": pair.subset,
        "scores": scores,
        "names": list(names),
        "reasons": [r if r is None or len(r) <= REASON_KEPT else _cut(r) for _, _, r, _ in scored],
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
    """Folds a file item's stream of outcomes back into pairs where each response was scored as a sample of its
    own (:func:`expand_pairs`): the outcome of each response of a pair is handed to :meth:`add` (the caller tells
    them from other outcomes by ``Sample.pair``), which gives the pair's outcome with its last response.
    ``chosen``: called with the pair's sample and its chosen response's score and verdict (the probes' ledger keeps
    the chosen response's score, the one they mutate)."""

    def __init__(self, invoker: Invoker, chosen: Any = None) -> None:
        self.invoker = invoker
        self.chosen = chosen
        self.held: list[Checked] = []
        self.duration = 0.0
        self.first: Sample | None = None

    def add(self, outcome: SampleOutcome) -> SampleOutcome | None:
        """Take the outcome of one response of a pair; the pair's outcome once it is the last, else None."""
        sample = outcome.sample
        error = outcome.error or (outcome.failures[0] if outcome.failures else None)
        scored: Checked = (outcome.score, outcome.verdict == PASS, outcome.reason, error)
        held = self.held
        if not held:
            self.first = sample
            if self.chosen is not None:
                self.chosen(sample, scored[0], scored[1])
        held.append(scored)
        self.duration += outcome.duration
        if len(held) <= len(sample.pair.rejected):
            return None
        done = pair_outcome(self.invoker, self.first, held, self.duration)  # type: ignore[arg-type]
        self.held, self.duration, self.first = [], 0.0, None
        return done
