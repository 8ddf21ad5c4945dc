"""THE calling convention of a reward function: one implementation for test runs, evaluations, the trainer adapters
and the reward server.

A reward function is called with keyword arguments only::

    fn(messages=[...], ground_truth=..., original_messages=..., **other_fields)

* ``messages``: the conversation, ending with the response to score (plain dicts; the decorator coerces them to
  ``Message`` when the function's annotation asks for it);
* ``ground_truth``: passed only when there is one — a missing or ``null`` ground truth is not passed at all, so the
  function's own default applies (reward-kit's server behaves the same way);
* ``original_messages``: ``messages[:-1]`` (the conversation before the response), passed when the function declares
  the parameter and the caller did not give it (the reward-kit docs' convention);
* every other input field of the sample (or request body, or dataset column) as a keyword argument of its own.

Each call gets its own copy of every mutable input (lists and dicts, recursively; strings and numbers are shared):
a function that changes ``messages`` or ``ground_truth`` in place cannot change what the next function sees, the
conversation a report shows, or a sample's baseline key. :meth:`Reward.changed_inputs` tells a test run which
inputs a call changed (the plugin fails that sample: reward functions run in trainers that do not copy).

Batch-mode functions (``@reward_function(mode="batch")``) get lists instead: ``rollouts_messages`` (one conversation
per sample) and, for every other keyword, one list aligned with it (``None`` where a sample lacks the field); they
return one result per sample. Called on a single sample they get lists of one.

Async functions run on one event loop per thread (:func:`run_coroutine`); :meth:`Reward.acall` awaits them directly,
for callers that are themselves async.

What comes back becomes an ``EvaluateResult`` (:func:`to_result`): our own, a dict with ``score``, or the
``EvaluateResult`` of an installed reward-kit. Anything else is an :class:`~pytest_reward.errors.InvalidResult`
whose first line names what came back. :meth:`Reward.safe` never raises: an exception becomes an invalid result with
the error kept (score 0, ``is_score_valid=False``), as trainers need (a broken sample must not stall a step).
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .decorator import RewardSpec, get_spec
from .errors import InvalidResult, RewardReturnError, RewardTimeout
from .models import EvaluateResult, RewardOutput

__all__ = [
    "MISSING",
    "Reward",
    "batch_kwargs",
    "call_within",
    "close_loop",
    "describe_exception",
    "failed_result",
    "invalid_return",
    "private_copy",
    "run_coroutine",
    "to_result",
]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: "No ground truth given" (distinct from ``None``, which is not passed either).
MISSING: Any = _Missing()

# --- event loops ---------------------------------------------------------------------------------------------

_LOOPS = threading.local()


def run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion on this thread's reward event loop (created on first use, reused after)."""
    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOOPS.loop = asyncio.new_event_loop()
    return loop.run_until_complete(coro)


def close_loop() -> None:
    """Close this thread's reward event loop (the next :func:`run_coroutine` makes a new one)."""
    loop = getattr(_LOOPS, "loop", None)
    if loop is not None and not loop.is_closed():
        loop.close()
    _LOOPS.loop = None


def call_within(seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a daemon thread, waited for at most ``seconds``; ``RewardTimeout`` when it takes longer.

    A Python thread cannot be killed: a call that never returns goes on in its daemon thread (holding what it
    holds, using the CPU it uses) until the process ends; its result is dropped. Where that matters (CPU-bound
    rewards that may spin forever), run them in a process of their own."""
    box: list[Any] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as exc:
            box.append((False, exc))
        finally:
            close_loop()  # the thread's own event loop, if the call made one
            done.set()

    threading.Thread(target=target, name="reward-call", daemon=True).start()
    if not done.wait(seconds):
        raise RewardTimeout(
            f"timed out after {seconds:g}s (the call was abandoned; it ends with the process)"
        )
    ok, value = box[0]
    if ok:
        return value
    raise value.with_traceback(value.__traceback__)


# --- results -------------------------------------------------------------------------------------------------


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, at most 2000 characters."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 2000 else text[:2000] + "…"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def invalid_return(fn_name: str, value: Any, detail: str = "") -> InvalidResult:
    """The error for a return value that is not a result; the first line names what came back."""
    detail_lines = [line for line in detail.splitlines()[1:] if "errors.pydantic.dev" not in line]
    shown = "None" if value is None else f"{type(value).__name__} {_short(value)}"
    message = f"{fn_name} returned {shown}: expected EvaluateResult (or a dict with 'score')"
    return InvalidResult("\n".join([message, *detail_lines]))


def to_result(value: Any, fn_name: str) -> EvaluateResult:
    """Our ``EvaluateResult`` as it is; a dict with ``score`` or a foreign ``EvaluateResult`` (an installed
    reward-kit's) validated into one; a legacy ``RewardOutput`` converted. Anything else: ``InvalidResult``."""
    if value.__class__ is EvaluateResult or isinstance(value, EvaluateResult):
        return value
    if isinstance(value, RewardOutput):
        return value.to_evaluate_result()
    if isinstance(value, dict) or (hasattr(value, "model_dump") and hasattr(value, "score")):
        data = value if isinstance(value, dict) else value.model_dump()
        try:
            return EvaluateResult.model_validate(data)
        except Exception as exc:
            raise invalid_return(fn_name, value, str(exc)) from None
    raise invalid_return(fn_name, value)


def failed_result(error: str, reason: str = "reward function failed") -> EvaluateResult:
    """The result of a call that did not produce one (score 0, not valid, the error kept): reward-kit's convention
    for callers that must not raise."""
    return EvaluateResult(score=0.0, is_score_valid=False, reason=reason, error=error)


def _finite(result: EvaluateResult) -> EvaluateResult:
    if math.isfinite(result.score):
        return result
    return result.model_copy(
        update={"score": 0.0, "is_score_valid": False, "error": f"score is {result.score}"}
    )


# --- private copies -----------------------------------------------------------------------------------------


def private_copy(value: Any) -> Any:
    """A copy of the mutable parts of a JSON-like value: lists and dicts, recursively; everything else shared."""
    cls = value.__class__
    if cls is list:
        return [private_copy(v) for v in value]
    if cls is dict:
        return {k: private_copy(v) for k, v in value.items()}
    return value


def _copy_messages(messages: list[Any]) -> list[Any]:
    # The hot path of a test run: the usual message is {"role": str, "content": str}, copied in C; anything with
    # nested lists or dicts (tool calls, multimodal parts) is copied all the way down.
    out = []
    for m in messages:
        if m.__class__ is dict:
            if len(m) == 2 and m.get("content").__class__ is str:
                out.append(m.copy())
                continue
            c = m.copy()
            for k, v in m.items():
                if v.__class__ is list or v.__class__ is dict:
                    c[k] = private_copy(v)
            out.append(c)
        else:
            out.append(private_copy(m))
    return out


# --- batches -------------------------------------------------------------------------------------------------


def batch_kwargs(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A batch-mode call from per-sample keyword arguments: ``rollouts_messages`` plus one aligned list per other
    keyword (``None`` where a sample lacks it)."""
    keys: dict[str, None] = {}
    for kw in rows:
        keys.update(dict.fromkeys(kw))
    keys.pop("messages", None)
    kwargs: dict[str, Any] = {k: [kw.get(k) for kw in rows] for k in keys}
    kwargs["rollouts_messages"] = [kw["messages"] for kw in rows]
    return kwargs


# --- the call ------------------------------------------------------------------------------------------------


class Reward:
    """A reward function ready to call, its signature analysed once.

    ``fn`` is a ``@reward_function`` (ours or an installed reward-kit's); a ``functools.partial`` of one is accepted
    too (its bound keywords are never passed again). ``name`` is what errors call it (default: the function's)."""

    __slots__ = ("batch", "fn", "is_async", "name", "spec", "wants_original")

    def __init__(
        self, fn: Callable[..., Any], *, spec: RewardSpec | None = None, name: str | None = None
    ) -> None:
        inner, bound = fn, ()
        while isinstance(inner, functools.partial):
            bound += tuple(inner.keywords)
            inner = inner.func
        self.fn = fn
        self.spec = spec if spec is not None else get_spec(inner)
        self.name = name or self.spec.name
        self.wants_original = "original_messages" in self.spec.parameters and "original_messages" not in bound
        self.is_async = self.spec.is_async or asyncio.iscoroutinefunction(inner)
        self.batch = self.spec.mode == "batch"

    # -- arguments -------------------------------------------------------------------------------------------

    def kwargs(
        self,
        messages: list[dict[str, Any]] | None,
        ground_truth: Any = MISSING,
        fields: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The keyword arguments of one call (see the module docstring), every mutable input a private copy."""
        kwargs: dict[str, Any] = {}
        if fields:
            for key, value in fields.items():
                cls = value.__class__
                kwargs[key] = private_copy(value) if cls is list or cls is dict else value
        messages = _copy_messages(messages) if messages else []
        kwargs["messages"] = messages
        if ground_truth is not MISSING and ground_truth is not None:
            cls = ground_truth.__class__
            kwargs["ground_truth"] = (
                private_copy(ground_truth) if cls is list or cls is dict else ground_truth
            )
        if self.wants_original and "original_messages" not in kwargs:
            kwargs["original_messages"] = messages[:-1]
        return kwargs

    @staticmethod
    def changed_inputs(
        kwargs: Mapping[str, Any],
        messages: list[dict[str, Any]] | None,
        ground_truth: Any = MISSING,
        fields: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """The inputs a call changed in place: its private copies in ``kwargs`` no longer equal the originals."""
        changed = []
        if kwargs["messages"] != (messages or []):
            changed.append("messages")
        gt = kwargs.get("ground_truth")
        if gt.__class__ in (list, dict) and gt != ground_truth:
            changed.append("ground_truth")
        if fields:
            changed += [k for k, v in fields.items() if v.__class__ in (list, dict) and kwargs.get(k) != v]
        return changed

    # -- synchronous calls: user exceptions propagate, unusable returns raise InvalidResult --------------------

    def call(self, kwargs: dict[str, Any]) -> EvaluateResult:
        """Call on one sample's keyword arguments (from :meth:`kwargs`)."""
        __tracebackhide__ = True
        if self.batch:
            return self.call_batch([kwargs])[0]
        try:
            value = self.fn(**kwargs)
            if value.__class__ is EvaluateResult:  # the usual return, before the coroutine check
                return value
            if self.is_async or asyncio.iscoroutine(value):
                value = run_coroutine(value)
        except RewardReturnError as exc:
            raise invalid_return(self.name, exc.value, str(exc)) from None
        return to_result(value, self.name)

    def call_batch(self, rows: Sequence[dict[str, Any]]) -> list[EvaluateResult]:
        """Call a batch-mode function on several samples' keyword arguments; one result per sample, in order."""
        __tracebackhide__ = True
        try:
            value = self.fn(**batch_kwargs(rows))
            if self.is_async or asyncio.iscoroutine(value):
                value = run_coroutine(value)
        except RewardReturnError as exc:
            raise invalid_return(self.name, exc.value, str(exc)) from None
        return self._batch_results(value, len(rows))

    def _batch_results(self, value: Any, n: int) -> list[EvaluateResult]:
        if not isinstance(value, list):
            raise InvalidResult(
                f"batch reward function '{self.name}' returned {type(value).__name__}; expected a list"
            )
        if len(value) != n:
            raise InvalidResult(
                f"batch reward function '{self.name}' returned {len(value)} results for {n} samples"
            )
        return [to_result(v, self.name) for v in value]

    # -- for async callers -------------------------------------------------------------------------------------

    async def acall(self, kwargs: dict[str, Any]) -> EvaluateResult:
        """:meth:`call` for async callers: async functions are awaited here, sync ones run in a worker thread."""
        if not self.is_async:
            return await asyncio.to_thread(self.call, kwargs)
        try:
            if self.batch:
                return self._batch_results(await self.fn(**batch_kwargs([kwargs])), 1)[0]
            value = await self.fn(**kwargs)
        except RewardReturnError as exc:
            raise invalid_return(self.name, exc.value, str(exc)) from None
        return to_result(value, self.name)

    # -- callers that must not raise (trainers, the server) -----------------------------------------------------

    def safe(self, kwargs: dict[str, Any]) -> EvaluateResult:
        """:meth:`call`, but every failure is an invalid result with the error kept, and a non-finite score is
        invalid (score 0): what a training step can consume."""
        try:
            return _finite(self.call(kwargs))
        except Exception as exc:
            return failed_result(describe_exception(exc))

    async def asafe(self, kwargs: dict[str, Any]) -> EvaluateResult:
        """:meth:`safe` for async callers."""
        try:
            return _finite(await self.acall(kwargs))
        except Exception as exc:
            return failed_result(describe_exception(exc))

    def __repr__(self) -> str:
        return f"Reward({self.name!r}, mode={self.spec.mode!r})"
