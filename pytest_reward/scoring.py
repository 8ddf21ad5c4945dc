"""Scoring samples with one reward function: samples in, ``SampleOutcome`` objects out.

How a reward function is called (keyword arguments, ``ground_truth``, ``original_messages``, async, batch mode) is
:mod:`pytest_reward.call`'s business; this module adds what a test run needs on top: ``--reward-runs`` (K calls per
sample, averaged), the verdict of each sample (``judge``), worker threads for I/O-bound rewards, and chunks for
batch-mode functions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .call import MISSING, Reward, describe_exception, run_coroutine
from .chat import conversation_excerpt
from .errors import InvalidResult
from .results import FAIL, SampleOutcome, judge

if TYPE_CHECKING:
    from .discovery import RewardFn
    from .models import EvaluateResult
    from .samples import Sample

__all__ = ["Invoker", "error_outcome", "merge_runs", "spread"]


def merge_runs(results: Sequence[EvaluateResult], what: str = "runs") -> EvaluateResult:
    """One result from K runs on the same sample (or K responses to the same prompt, ``what="responses"``): mean
    score, mean of each metric present in every run."""
    from .models import EvaluateResult, MetricResult

    k = len(results)
    first = results[0]
    names = set(first.metrics).intersection(*(r.metrics for r in results[1:]))
    metrics = {
        name: MetricResult(
            score=sum(r.metrics[name].score for r in results) / k,
            reason=first.metrics[name].reason,
            is_score_valid=all(r.metrics[name].is_score_valid for r in results),
        )
        for name in sorted(names)
    }
    return EvaluateResult(
        score=sum(r.score for r in results) / k,
        reason=(first.reason + " " if first.reason else "") + f"(mean of {k} {what})",
        metrics=metrics,
        is_score_valid=all(r.is_score_valid for r in results),
        error=next((r.error for r in results if r.error), None),
    )


def spread(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1) of per-run scores."""
    k = len(values)
    if k < 2:
        return 0.0
    mean = sum(values) / k
    return (sum((v - mean) ** 2 for v in values) / (k - 1)) ** 0.5


#: A result and, with ``--reward-runs`` > 1, the per-run scores it was averaged from.
Scored = tuple["EvaluateResult", "list[float] | None"]


class Invoker:
    """Calls one reward function on samples (``runs`` times each, averaging, for stochastic rewards)."""

    def __init__(self, fn: RewardFn, file_label: str, *, runs: int = 1) -> None:
        self.fn = fn
        self.file_label = file_label
        self.runs = runs
        self.light = False
        """File granularity: leave key and excerpt empty (filled by ``complete`` for outcomes that are kept)."""
        self.reward = Reward(fn.obj, spec=fn.spec, name=fn.name)
        self.batch = self.reward.batch

    # -- building calls ------------------------------------------------------------------------------------

    def kwargs_for(self, sample: Sample) -> dict[str, Any]:
        """The call's keyword arguments (:meth:`pytest_reward.call.Reward.kwargs`) from a sample."""
        return self.reward.kwargs(
            sample.messages, sample.ground_truth if sample.has_ground_truth else MISSING, sample.kwargs
        )

    def _merge(self, results: list[EvaluateResult]) -> Scored:
        if len(results) == 1:
            return results[0], None
        return merge_runs(results), [r.score for r in results]

    def call(self, sample: Sample) -> Scored:
        """Call the function on one sample; user exceptions propagate, bad returns raise ``InvalidResult``."""
        __tracebackhide__ = True
        if self.runs == 1:
            return self.reward.call(self.kwargs_for(sample)), None
        return self._merge([self.reward.call(self.kwargs_for(sample)) for _ in range(self.runs)])

    def call_batch(self, samples: Sequence[Sample]) -> list[Scored]:
        """Call a batch-mode function on a chunk of samples; one result per sample, in order."""
        __tracebackhide__ = True
        rows = [self.kwargs_for(s) for s in samples]
        runs = [self.reward.call_batch(rows) for _ in range(self.runs)]
        return [self._merge([run[i] for run in runs]) for i in range(len(samples))]

    # -- outcomes ------------------------------------------------------------------------------------------

    @staticmethod
    def fill_key(outcome: SampleOutcome) -> SampleOutcome:
        """The stable key of a light outcome (needed for rows and stored runs)."""
        if outcome.sample is not None and not outcome.key:
            outcome.key = outcome.sample.key
        return outcome

    @staticmethod
    def complete(outcome: SampleOutcome) -> SampleOutcome:
        """Fill the key and the conversation excerpt of a light outcome (file granularity keeps few)."""
        sample = outcome.sample
        if sample is not None:
            if not outcome.key:
                outcome.key = sample.key
            outcome.user, outcome.response = conversation_excerpt(sample.messages, sample.prompt)
            outcome.sample = None
        return outcome

    def outcome(
        self,
        sample: Sample,
        result: EvaluateResult | None,
        *,
        runs: list[float] | None = None,
        error: str | None = None,
        duration: float = 0.0,
    ) -> SampleOutcome:
        expect = sample.expect.for_function(self.fn.name, self.fn.spec.name) if sample.expect else None
        verdict, score, metrics, failures, below = judge(result, self.fn.gates, expect, error=error)
        if self.light:
            user = response = None
        else:
            user, response = conversation_excerpt(sample.messages, sample.prompt)
        extra: dict[str, Any] = {}
        if runs is not None:
            extra = {"runs": runs, "spread": spread(runs)}
        return SampleOutcome(
            function=self.fn.name,
            file=self.file_label,
            line=sample.line,
            sample_id=sample.label,
            key="" if self.light else sample.key,
            verdict=verdict,
            score=score,
            is_score_valid=bool(result.is_score_valid) if result is not None else False,
            reason=result.reason if result is not None else None,
            metrics=metrics,
            error=error if result is None else None,
            failures=failures,
            below=below,
            duration=duration,
            user=user,
            response=response,
            extra=extra,
            sample=sample if self.light else None,
        )

    def score_one(self, sample: Sample) -> SampleOutcome:
        """Score one sample, never raising (file mode)."""
        start = time.perf_counter()
        try:
            result, runs = self.call(sample)
        except Exception as exc:
            return self.outcome(
                sample, None, error=describe_exception(exc), duration=time.perf_counter() - start
            )
        return self.outcome(sample, result, runs=runs, duration=time.perf_counter() - start)

    def score_chunk(self, samples: Sequence[Sample]) -> list[SampleOutcome]:
        """Score a chunk with a batch-mode function, never raising."""
        start = time.perf_counter()
        try:
            scored = self.call_batch(samples)
        except Exception as exc:
            error = describe_exception(exc)
            each = (time.perf_counter() - start) / max(1, len(samples))
            return [self.outcome(s, None, error=error, duration=each) for s in samples]
        each = (time.perf_counter() - start) / max(1, len(samples))
        return [
            self.outcome(s, r, runs=runs, duration=each) for s, (r, runs) in zip(samples, scored, strict=True)
        ]

    def score_stream(
        self, samples: Iterable[Sample], *, workers: int = 1, chunk: int = 64
    ) -> Iterator[SampleOutcome]:
        """Score samples in order; ``workers`` > 1 overlaps I/O-bound calls (threads, or one event loop)."""
        if self.batch:
            for block in _chunks(samples, chunk):
                yield from self.score_chunk(block)
            return
        if workers <= 1:
            for sample in samples:
                yield self.score_one(sample)
            return
        if self.reward.is_async:
            for block in _chunks(samples, workers * 4):
                yield from run_coroutine(self._gather(block, workers))
            return
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward") as pool:
            for block in _chunks(samples, workers * 16):
                yield from pool.map(self.score_one, block)

    async def _gather(self, samples: Sequence[Sample], workers: int) -> list[SampleOutcome]:
        semaphore = asyncio.Semaphore(workers)

        async def one(sample: Sample) -> SampleOutcome:
            async with semaphore:
                start = time.perf_counter()
                try:
                    results = [await self.reward.acall(self.kwargs_for(sample)) for _ in range(self.runs)]
                    result, runs = self._merge(results)
                except InvalidResult as exc:
                    return self.outcome(sample, None, error=str(exc), duration=time.perf_counter() - start)
                except Exception as exc:
                    return self.outcome(
                        sample, None, error=describe_exception(exc), duration=time.perf_counter() - start
                    )
                return self.outcome(sample, result, runs=runs, duration=time.perf_counter() - start)

        return list(await asyncio.gather(*(one(s) for s in samples)))


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    block: list[Any] = []
    for item in items:
        block.append(item)
        if len(block) >= size:
            yield block
            block = []
    if block:
        yield block


def error_outcome(fn_name: str, file_label: str, sample_like: Any, message: str) -> SampleOutcome:
    """An outcome for a malformed line (counts as a failure of every function that meets the file)."""
    return SampleOutcome(
        function=fn_name,
        file=file_label,
        line=sample_like.line,
        sample_id=sample_like.label,
        key=f"line:{sample_like.line}",
        verdict=FAIL,
        score=None,
        is_score_valid=False,
        error=message,
        failures=[message],
    )
