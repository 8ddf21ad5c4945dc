"""Calling a reward function on samples and turning what it returns into ``SampleOutcome``s.

The call: ``fn(messages=..., ground_truth=..., original_messages=..., **other_sample_fields)``. ``ground_truth``
is passed only when the sample has one; ``original_messages`` defaults to ``messages[:-1]`` when the function
declares it and the sample does not carry it (the reward-kit docs' convention). Async functions run on one event
loop per process; batch-mode functions get lists (``rollouts_messages`` plus one list per sample field) in
chunks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .decorator import RewardReturnError
from .models import EvaluateResult
from .results import FAIL, SampleOutcome, judge

if TYPE_CHECKING:
    from .discovery import RewardFn
    from .models import EvaluateResult
    from .samples import Sample

__all__ = ["InvalidResult", "Invoker", "run_coroutine"]

_EXCERPT = 500


class InvalidResult(Exception):
    """The reward function returned something that is not a usable result."""


_LOOP: asyncio.AbstractEventLoop | None = None


def run_coroutine(coro: Any) -> Any:
    """Run ``coro`` on this process's reward event loop (created on first use)."""
    global _LOOP
    if _LOOP is None or _LOOP.is_closed():
        _LOOP = asyncio.new_event_loop()
    return _LOOP.run_until_complete(coro)


def close_loop() -> None:
    global _LOOP
    if _LOOP is not None and not _LOOP.is_closed():
        _LOOP.close()
    _LOOP = None


def _text(message: dict[str, Any] | None) -> str | None:
    if message is None:
        return None
    content = message.get("content")
    if content is None:
        calls = message.get("tool_calls") or []
        return "[tool calls: " + ", ".join(str((c.get("function") or {}).get("name")) for c in calls) + "]"
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if len(content) <= _EXCERPT else content[:_EXCERPT] + "…"


def conversation_excerpt(sample: Sample) -> tuple[str | None, str | None]:
    """(last user turn, last assistant turn), truncated."""
    messages = sample.messages or []
    user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    last = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    if sample.prompt is not None and user is None:
        return _text({"content": sample.prompt}), None
    return _text(user), _text(last)


def to_result(value: Any, fn_name: str) -> EvaluateResult:
    """Accept our ``EvaluateResult`` or a foreign one (installed reward-kit); anything else is invalid."""
    if value.__class__ is EvaluateResult or isinstance(value, EvaluateResult):
        return value
    if value is not None and hasattr(value, "model_dump") and hasattr(value, "score"):
        try:
            return EvaluateResult.model_validate(value.model_dump())
        except Exception as exc:
            raise InvalidResult(
                f"reward function '{fn_name}' returned an unusable {type(value).__name__}: {exc}"
            ) from None
    raise invalid_return(fn_name, value)


def invalid_return(fn_name: str, value: Any, detail: str = "") -> InvalidResult:
    """The error for a return value that is not a result; the first line names what came back."""
    detail_lines = [line for line in detail.splitlines()[1:] if "errors.pydantic.dev" not in line]
    shown = "None" if value is None else f"{type(value).__name__} {_short(value)}"
    message = f"{fn_name} returned {shown}: expected EvaluateResult (or a dict with 'score')"
    return InvalidResult("\n".join([message, *detail_lines]))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_exception(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 2000 else text[:2000] + "…"


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
        spec = fn.spec
        self._wants_original = "original_messages" in spec.parameters
        self._is_async = spec.is_async
        self.batch = spec.mode == "batch"

    # -- building calls ------------------------------------------------------------------------------------

    def kwargs_for(self, sample: Sample) -> dict[str, Any]:
        kwargs = dict(sample.kwargs)
        messages = sample.messages if sample.messages is not None else []
        kwargs["messages"] = messages
        if sample.has_ground_truth:
            kwargs["ground_truth"] = sample.ground_truth
        if self._wants_original and "original_messages" not in kwargs:
            kwargs["original_messages"] = messages[:-1]
        return kwargs

    def _once(self, sample: Sample) -> EvaluateResult:
        __tracebackhide__ = True
        try:
            value = self.fn.obj(**self.kwargs_for(sample))
            if value.__class__ is EvaluateResult:  # the usual return, before the coroutine check
                return value
            if self._is_async or asyncio.iscoroutine(value):
                value = run_coroutine(value)
        except RewardReturnError as exc:
            raise invalid_return(self.fn.name, exc.value, str(exc)) from None
        return to_result(value, self.fn.name)

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

    def _batch_once(self, samples: Sequence[Sample]) -> list[EvaluateResult]:
        __tracebackhide__ = True
        keys: dict[str, None] = {}
        per_sample = [self.kwargs_for(s) for s in samples]
        for kw in per_sample:
            keys.update(dict.fromkeys(kw))
        keys.pop("messages", None)
        kwargs: dict[str, Any] = {k: [kw.get(k) for kw in per_sample] for k in keys}
        kwargs["rollouts_messages"] = [kw["messages"] for kw in per_sample]
        try:
            value = self.fn.obj(**kwargs)
            if self._is_async or asyncio.iscoroutine(value):
                value = run_coroutine(value)
        except RewardReturnError as exc:
            raise invalid_return(self.fn.name, exc.value, str(exc)) from None
        if not isinstance(value, list):
            raise InvalidResult(
                f"batch reward function '{self.fn.name}' returned {type(value).__name__}; expected a list"
            )
        if len(value) != len(samples):
            raise InvalidResult(
                f"batch reward function '{self.fn.name}' returned {len(value)} results for {len(samples)} samples"
            )
        return [to_result(v, self.fn.name) for v in value]

    def call_batch(self, samples: Sequence[Sample]) -> list[Scored]:
        """Call a batch-mode function on a chunk of samples; one result per sample, in order."""
        __tracebackhide__ = True
        runs = [self._batch_once(samples) for _ in range(self.runs)]
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
            outcome.user, outcome.response = conversation_excerpt(sample)
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
            user, response = conversation_excerpt(sample)
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
        if self._is_async:
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
                    results = []
                    for _ in range(self.runs):
                        results.append(to_result(await self.fn.obj(**self.kwargs_for(sample)), self.fn.name))
                    result, runs = self._merge(results)
                except RewardReturnError as exc:
                    error = str(invalid_return(self.fn.name, exc.value, str(exc)))
                    return self.outcome(sample, None, error=error, duration=time.perf_counter() - start)
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
