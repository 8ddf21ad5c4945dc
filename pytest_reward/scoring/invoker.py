"""Scoring samples with one reward function: samples in, ``SampleOutcome`` objects out.

How a reward function is called (keyword arguments, ``ground_truth``, ``original_messages``, async, batch mode) is
:mod:`pytest_reward.reward.call`'s business; this module adds what a test run needs on top: ``--reward-runs`` (K calls per
sample, averaged), the verdict of each sample (``judge``), worker threads for I/O-bound rewards, and chunks for
batch-mode functions. Its hot loops (a file's samples, a probe's mutations) compose the function's call built once
(:meth:`pytest_reward.reward.call.Reward.fast`) with the verdict built once (:mod:`pytest_reward.judge.verdict`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..data.samples import Bound, Expect
from ..errors import InvalidResult, RewardTimeout
from ..judge.results import FAIL, PASS, SampleOutcome, judge
from ..judge.verdict import Checked, Judged, checked_rule, verdict_rule
from ..reward.call import (
    MISSING,
    Reward,
    call_within,
    changed_error,
    describe_exception,
    each_within,
    run_coroutine,
)
from ..reward.chat import EXCERPT, conversation_excerpt, truth_excerpt
from ..reward.models import EvaluateResult

if TYPE_CHECKING:
    from ..data.samples import Sample
    from ..plugin.options import Settings
    from ..project.functions import RewardFn

__all__ = [
    "Checked",
    "DaemonPool",
    "FreshInput",
    "Invoker",
    "Passed",
    "error_outcome",
    "merge_runs",
    "spread",
]


def _truth(sample: Sample) -> str | None:
    """The sample's ground truth as reports show it, or None when it has none (a short string, the usual one,
    as it is: this runs for every outcome of a sample item)."""
    truth = sample.ground_truth
    if truth.__class__ is str and len(truth) <= EXCERPT:
        return truth
    return truth_excerpt(truth) if sample.has_ground_truth else None


def merge_runs(results: Sequence[EvaluateResult], what: str = "runs") -> EvaluateResult:
    """One result from K runs on the same sample (or K responses to the same prompt, ``what="responses"``): mean
    score, mean of each metric present in every run."""
    from ..reward.models import EvaluateResult, MetricResult

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

#: An input built for one call (:meth:`Invoker.score_fresh`): the messages, which the call owns (the list and every
#: turn built for it alone, :func:`pytest_reward.reward.call.owned_messages`), the sample's ground truth (``MISSING``: none)
#: and its other fields.
FreshInput = tuple["list[dict[str, Any]]", Any, "dict[str, Any] | None"]

#: A sample that passed, as :meth:`Invoker.sample_scorer` gives it to a caller folding scores itself (``passes=True``):
#: the sample, its score, the result's reason and the call's duration (:meth:`Invoker.passed_outcome`: its outcome).
Passed = tuple["Sample", float, "str | None", float]

# What Invoker.score_fresh says of one input is a Checked (pytest_reward.judge.verdict): the score (None: no valid
# score), whether the verdict is a pass, the result's reason, and the error when the call gave no result (it raised,
# timed out, returned something that is not a result, or changed its input in place).


class Invoker:
    """Calls one reward function on samples (``runs`` times each, averaging, for stochastic rewards)."""

    def __init__(
        self,
        fn: RewardFn,
        file_label: str,
        *,
        runs: int = 1,
        timeout: float | None = None,
        replay_tolerance: float | None = None,
        light: bool = False,
    ) -> None:
        self.fn = fn
        self.replay_tolerance = replay_tolerance
        """A recorded score (a rollout dump's) must be met within this (None: not checked)."""
        self.file_label = file_label
        self.runs = runs
        self.timeout = fn.marker.timeout if fn.marker.timeout is not None else timeout
        """Seconds one call may take (None: no limit): a longer call fails its sample with ``RewardTimeout``."""
        self.light = light
        """File granularity: leave key and excerpt empty (filled by ``complete`` for outcomes that are kept)."""
        self.reward = Reward(fn.obj, spec=fn.spec, name=fn.name)
        self.batch = self.reward.batch
        self.fast = self.reward.fast()
        """The function's call (:meth:`pytest_reward.reward.call.Reward.fast`), built once."""
        self.verdict = verdict_rule(fn.gates)
        """The verdict of a result without golden expectations (:func:`pytest_reward.judge.verdict.verdict_rule`)."""
        self.checked = checked_rule(fn.gates)
        """Its score, whether it is a pass, and the reason (:func:`pytest_reward.judge.verdict.checked_rule`)."""

    def chunk(self, session_size: int) -> int:
        """The samples a batch-mode function is called with at once: its own size when it declares one (a reward
        model's ``batch_size``), else the session's ``--reward-batch-size``."""
        return max(1, self.fn.spec.batch_size or session_size)

    # -- building calls ------------------------------------------------------------------------------------

    @classmethod
    def of(cls, fn: RewardFn, file_label: str, settings: Settings, *, light: bool = False) -> Invoker:
        """The invoker the session's settings ask for (runs, timeout, replay tolerance)."""
        return cls(
            fn,
            file_label,
            runs=settings.runs,
            timeout=settings.timeout,
            replay_tolerance=settings.replay_tolerance,
            light=light,
        )

    def kwargs_for(self, sample: Sample) -> dict[str, Any]:
        """The call's keyword arguments (:meth:`pytest_reward.reward.call.Reward.kwargs`) from a sample: private copies."""
        return self.reward.kwargs(
            sample.messages, sample.ground_truth if sample.has_ground_truth else MISSING, sample.kwargs
        )

    def check_inputs(self, kwargs: dict[str, Any], sample: Sample) -> None:
        """Fail the sample when the function changed its inputs in place (its own copies: nothing else saw it)."""
        messages, fields = sample.messages, sample.kwargs
        if kwargs["messages"] == (messages if messages is not None else []) and kwargs.get(
            "ground_truth"
        ).__class__ not in (list, dict):
            for key, value in fields.items():  # the fields a call could change: lists and dicts
                cls = value.__class__
                if (cls is list or cls is dict) and kwargs.get(key) != value:
                    break
            else:
                return  # the usual sample, unchanged (the full check below names what changed)
        changed = self.reward.changed_inputs(
            kwargs,
            sample.messages,
            sample.ground_truth if sample.has_ground_truth else MISSING,
            sample.kwargs,
        )
        if changed:
            raise changed_error(self.fn.name, changed)

    def _once(self, sample: Sample) -> EvaluateResult:
        __tracebackhide__ = True
        truth = sample.ground_truth if sample.has_ground_truth else MISSING
        if self.timeout is None:
            return self.fast(sample.messages, truth, sample.kwargs, False)  # type: ignore[no-any-return]
        return call_within(self.timeout, self.fast, sample.messages, truth, sample.kwargs, False)  # type: ignore[no-any-return]

    def _merge(self, results: list[EvaluateResult]) -> Scored:
        if len(results) == 1:
            return results[0], None
        return merge_runs(results), [r.score for r in results]

    def call(self, sample: Sample) -> Scored:
        """Call the function on one sample; user exceptions propagate, bad returns raise ``InvalidResult``."""
        __tracebackhide__ = True
        if self.runs == 1:
            return self._once(sample), None
        return self._merge([self._once(sample) for _ in range(self.runs)])

    def call_batch(self, samples: Sequence[Sample]) -> list[Scored]:
        """Call a batch-mode function on a chunk of samples; one result per sample, in order."""
        __tracebackhide__ = True
        runs = []
        for _ in range(self.runs):
            rows = [self.kwargs_for(s) for s in samples]
            if self.timeout is None:
                runs.append(self.reward.call_batch(rows))
            else:  # the budget of a batch: one call's timeout per sample
                runs.append(call_within(self.timeout * len(rows), self.reward.call_batch, rows))
            for kwargs, sample in zip(rows, samples, strict=True):
                self.check_inputs(kwargs, sample)
        return [self._merge([run[i] for run in runs]) for i in range(len(samples))]

    # -- inputs built for one call (the probes' mutated responses) --------------------------------------------

    def _fresh_one(self, item: FreshInput, tick: Callable[[], None]) -> Checked:
        messages, ground_truth, fields = item
        fast = self.fast
        try:
            results = []
            for _ in range(self.runs):
                tick()
                results.append(fast(messages, ground_truth, fields))
            result = results[0] if len(results) == 1 else merge_runs(results)
        except Exception as exc:
            return _failed(exc)
        return self.checked(result)  # type: ignore[no-any-return]

    def changed_error(self, names: list[str]) -> str:
        """The error of a call that changed its inputs ``names`` in place (as :meth:`check_inputs` words it)."""
        return describe_exception(changed_error(self.fn.name, names))

    def score_fresh(self, inputs: Iterable[FreshInput]) -> Iterator[Checked]:
        """Score inputs built for one call each (a probe's mutated responses), in order: what a sample's call gets,
        without a sample item's bookkeeping around it. The call (:attr:`fast`), ``--reward-runs`` calls per input
        (averaged), private copies of what the input shares with the sample (the ground truth, the fields; checked
        after the call), and a sample's verdict (:attr:`checked`). Without a timeout the inputs are pulled one at a
        time (each input's objects are freed before the next is built); with one, the calls run in one daemon
        thread per batch, each within the timeout (:func:`pytest_reward.reward.call.each_within`), not in a thread
        per call. Pointwise functions only (batch-mode ones are scored in chunks, :meth:`score_chunk`)."""
        if self.batch:
            raise TypeError(
                "score_fresh scores pointwise functions; a batch-mode function is scored in chunks"
            )
        if self.timeout is None:
            one = self.fresh_scorer()
            for messages, ground_truth, fields in inputs:
                yield one(messages, ground_truth, fields)
            return
        for ok, value in each_within(self.timeout, self._fresh_one, list(inputs)):
            if ok:
                yield value
            elif isinstance(value, Exception):  # a timeout (what a call raises is in its Checked already)
                yield None, False, None, describe_exception(value)
            else:
                raise value

    def fresh_scorer(self) -> Callable[[list[dict[str, Any]], Any, Any], Checked]:
        """``f(messages, ground_truth, fields) -> Checked``: one input of :meth:`score_fresh`, scored in this thread
        without a timeout (:meth:`score_fresh` applies one): the function's call
        (:meth:`pytest_reward.reward.call.Reward.fast`) judged by :attr:`checked`, an exception made the error.
        The probes' hot loop calls it once per mutated response."""
        if self.runs != 1:
            fresh_one = self._fresh_one

            def runs(messages: list[dict[str, Any]], ground_truth: Any, fields: Any) -> Checked:
                return fresh_one((messages, ground_truth, fields), _no_tick)

            return runs
        return self.reward.fast(then=self.checked, failed=_failed)

    # -- outcomes ------------------------------------------------------------------------------------------

    @staticmethod
    def fill_key(outcome: SampleOutcome) -> SampleOutcome:
        """The stable key and the response hash of a light outcome (needed for rows and stored runs)."""
        sample = outcome.sample
        if sample is not None and not outcome.key:
            outcome.key, outcome.response_hash = sample.key, sample.response_hash
        return outcome

    @staticmethod
    def complete(outcome: SampleOutcome) -> SampleOutcome:
        """Fill the key and the conversation excerpt of a light outcome (file granularity keeps few)."""
        sample = Invoker.fill_key(outcome).sample
        if sample is not None:
            outcome.user, outcome.response = conversation_excerpt(sample.messages, sample.prompt)
            outcome.ground_truth = _truth(sample)
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
        """The outcome of ``sample`` from what its call gave: a result (averaged over ``runs`` when there were
        several), or None and the ``error``; judged with the sample's golden expectations and recorded score."""
        expect = sample.expect.for_function(self.fn.name, self.fn.spec.name) if sample.expect else None
        replay = None
        if self.replay_tolerance is not None and sample.recorded is not None:
            replay = Bound(equals=sample.recorded, tol=self.replay_tolerance, replay=True)
            expect = Expect(score=replay, metrics=expect.metrics if expect else ())
        if result is not None and expect is None:
            judged = self.verdict(result)
        else:
            judged = judge(result, self.fn.gates, expect, error=error)
        extra: dict[str, Any] = {}
        if runs is not None:
            extra = {"runs": runs, "spread": spread(runs)}
        if replay is not None:  # the summary counts the samples whose reward differs from the recorded one
            score = judged[1]
            extra["replay_differs"] = score is None or replay.check(score) is not None
        if result is None:
            return self.make_outcome(sample, judged, False, None, error, duration, extra)
        return self.make_outcome(
            sample, judged, bool(result.is_score_valid), result.reason, None, duration, extra
        )

    def make_outcome(
        self,
        sample: Sample,
        judged: Judged,
        valid: bool,
        reason: str | None,
        error: str | None,
        duration: float,
        extra: dict[str, Any] | None = None,
    ) -> SampleOutcome:
        """The one place a call's outcome is built: ``sample``'s, judged ``judged`` (:data:`Judged`); a light
        invoker leaves the key and the excerpt to :meth:`complete` and keeps the sample until then."""
        verdict, score, metrics, failures, below = judged
        if self.light:
            return SampleOutcome(
                function=self.fn.name,
                file=self.file_label,
                line=sample.line,
                sample_id=sample.label,
                key="",
                response_hash=None,
                verdict=verdict,
                score=score,
                is_score_valid=valid,
                reason=reason,
                metrics=metrics,
                error=error,
                failures=failures,
                below=below,
                duration=duration,
                extra={} if extra is None else extra,
                sample=sample,
            )
        user, response = conversation_excerpt(sample.messages, sample.prompt)
        return SampleOutcome(
            function=self.fn.name,
            file=self.file_label,
            line=sample.line,
            sample_id=sample.label,
            key=sample.key,
            response_hash=sample.response_hash,
            verdict=verdict,
            score=score,
            is_score_valid=valid,
            reason=reason,
            metrics=metrics,
            error=error,
            failures=failures,
            below=below,
            duration=duration,
            user=user,
            response=response,
            ground_truth=_truth(sample),
            extra={} if extra is None else extra,
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

    def sample_scorer(self, *, passes: bool = False) -> Callable[[Sample], SampleOutcome | Passed]:
        """:meth:`score_one` for a stream of samples scored one by one in this thread (file granularity, one
        worker). The usual sample (one run, no timeout, no metric gates, no golden expectation or recorded score)
        is scored in one frame: the function's call (:meth:`pytest_reward.reward.call.Reward.fast`, on a private
        copy of the sample's inputs checked after the call; a trainer-native function's finite number judged
        without building its ``EvaluateResult``), the verdict (:attr:`verdict`) and the outcome
        (:meth:`make_outcome`); the rest takes :meth:`score_one`. Tests hold both to the same outcomes.

        ``passes`` (a light invoker whose caller folds scores itself): a sample that passes without metrics comes
        back as a :data:`Passed` tuple instead of its outcome, which :meth:`passed_outcome` makes from it when a
        caller keeps it."""
        score_one = self.score_one
        if self.runs != 1 or self.timeout is not None or self.fn.gates.metrics:
            return score_one
        fast, rule, make, outcome = (
            self.reward.fast(numbers=True),
            self.verdict,
            self.make_outcome,
            self.outcome,
        )
        replay, clock = self.replay_tolerance, time.perf_counter

        def one(sample: Sample) -> SampleOutcome | Passed:
            if sample.expect is not None or (replay is not None and sample.recorded is not None):
                return score_one(sample)
            start = clock()
            try:
                result = fast(
                    sample.messages,
                    sample.ground_truth if sample.has_ground_truth else MISSING,
                    sample.kwargs,
                    False,
                )
            except Exception as exc:
                return outcome(sample, None, error=describe_exception(exc), duration=clock() - start)
            duration = clock() - start
            judged = rule(result)
            if result.__class__ is float:
                if passes and judged[0] == PASS:
                    return sample, result, None, duration
                return make(sample, judged, True, None, None, duration)
            if passes and judged[0] == PASS and not judged[2]:
                return sample, judged[1], result.reason, duration  # type: ignore[return-value]
            return make(sample, judged, bool(result.is_score_valid), result.reason, None, duration)

        return one

    def passed_outcome(
        self, sample: Sample, score: float, reason: str | None, duration: float
    ) -> SampleOutcome:
        """The outcome of a sample that :meth:`sample_scorer` (``passes=True``) gave as a :data:`Passed` tuple:
        the outcome it would have returned instead."""
        return self.make_outcome(sample, (PASS, score, {}, [], []), True, reason, None, duration)

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
        pool = DaemonPool(workers)
        try:
            for block in _chunks(samples, workers * 16):
                yield from pool.map(self.score_one, block)
        finally:
            pool.close()

    async def _gather(self, samples: Sequence[Sample], workers: int) -> list[SampleOutcome]:
        semaphore = asyncio.Semaphore(workers)

        async def one(sample: Sample) -> SampleOutcome:
            async with semaphore:
                start = time.perf_counter()
                try:
                    results = []
                    for _ in range(self.runs):
                        kwargs = self.kwargs_for(sample)
                        if self.timeout is None:
                            results.append(await self.reward.acall(kwargs))
                        else:
                            try:
                                results.append(
                                    await asyncio.wait_for(self.reward.acall(kwargs), self.timeout)
                                )
                            except TimeoutError:
                                raise RewardTimeout(f"timed out after {self.timeout:g}s") from None
                        self.check_inputs(kwargs, sample)
                    result, runs = self._merge(results)
                except (InvalidResult, RewardTimeout) as exc:
                    return self.outcome(sample, None, error=str(exc), duration=time.perf_counter() - start)
                except Exception as exc:
                    return self.outcome(
                        sample, None, error=describe_exception(exc), duration=time.perf_counter() - start
                    )
                return self.outcome(sample, result, runs=runs, duration=time.perf_counter() - start)

        return list(await asyncio.gather(*(one(s) for s in samples)))


def _no_tick() -> None:
    pass


def _failed(exc: Exception) -> Checked:
    """The :data:`Checked` of a call that raised (or gave no result)."""
    return None, False, None, describe_exception(exc)


class DaemonPool:
    """``ThreadPoolExecutor.map`` on daemon threads. The standard pool joins its threads when the ``with`` block
    ends and again at interpreter exit, so one reward call that never returns makes the run unkillable (neither
    Ctrl-C nor pytest-timeout could end it). Here the caller waits on futures, which a signal interrupts, and a
    thread stuck in a call is left behind: it ends with the process."""

    def __init__(self, workers: int) -> None:
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"reward-{i}", daemon=True) for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            future, fn, arg = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(arg))
            except BaseException as exc:
                future.set_exception(exc)

    def map(self, fn: Any, items: Sequence[Any]) -> Iterator[Any]:
        futures: list[Future[Any]] = []
        for item in items:
            future: Future[Any] = Future()
            self._tasks.put((future, fn, item))
            futures.append(future)
        try:
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()

    def close(self) -> None:
        """Let idle threads end (threads busy in a call end when it returns, or with the process)."""
        for _ in self._threads:
            self._tasks.put(None)


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
