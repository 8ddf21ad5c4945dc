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
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidResult, RewardAborted, RewardReturnError, RewardTimeout
from .decorator import RewardSpec, coerce_result, get_spec
from .models import EvaluateResult, RewardOutput

__all__ = [
    "MISSING",
    "FastCall",
    "Reward",
    "batch_kwargs",
    "call_within",
    "changed_error",
    "close_loop",
    "describe_exception",
    "each_within",
    "failed_result",
    "invalid_return",
    "owned_messages",
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


def _no_tick() -> None:
    pass


class _Runner:
    """One daemon thread calling ``fn(item, tick)`` for ``items[start:]`` in order (see :func:`each_within`).

    The lock orders two things only: the runner adding a result (and so leaving a call) and the watchdog giving up
    on it. After the watchdog has stopped a runner, the runner adds nothing more and starts no other item."""

    __slots__ = ("done", "fn", "items", "lock", "results", "start", "started", "stopped")

    def __init__(
        self, fn: Callable[[Any, Callable[[], None]], Any], items: Sequence[Any], start: int
    ) -> None:
        self.fn = fn
        self.items = items
        self.start = start
        self.results: list[tuple[bool, Any]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.started: float | None = None
        """When the call in progress began (``time.monotonic``); None between calls."""
        self.stopped = False

    def tick(self) -> None:
        if self.stopped:  # abandoned: the item's next call (another of its --reward-runs) is not made
            raise RewardTimeout("abandoned")
        self.started = time.monotonic()

    def run(self) -> None:
        fn, items, tick, lock, results = self.fn, self.items, self.tick, self.lock, self.results
        try:
            for i in range(self.start, len(items)):
                if self.stopped:
                    return
                try:
                    value = (True, fn(items[i], tick))
                except BaseException as exc:
                    value = (False, exc)
                with lock:
                    if self.stopped:  # the watchdog gave up on this call: its result is dropped
                        return
                    results.append(value)
                    self.started = None
        finally:
            close_loop()  # the thread's own event loop, if a call made one
            self.done.set()

    def watch(self, seconds: float) -> bool:
        """Wait for the runner; True when it finished every item, False when a call ran past ``seconds`` (the
        runner is stopped and :attr:`results` holds the items before that call)."""
        try:
            while True:
                started = self.started
                wait = seconds if started is None else started + seconds - time.monotonic()
                if self.done.wait(max(wait, 0.0)):
                    return True
                with self.lock:
                    started = self.started  # None: between two calls (the last one ended in time)
                    if started is not None and time.monotonic() - started >= seconds:
                        self.stopped = True
                        return False
        except BaseException:  # Ctrl-C while waiting: the runner starts nothing more
            self.stopped = True
            raise


def each_within(
    seconds: float | None, fn: Callable[[Any, Callable[[], None]], Any], items: Sequence[Any]
) -> list[tuple[bool, Any]]:
    """``fn(item, tick)`` for every item, in order, each call of a reward function within ``seconds``: ``fn``
    calls ``tick()`` as each call begins, and a call still running ``seconds`` later is abandoned, like
    :func:`call_within`'s: its item gets ``(False, RewardTimeout)``, its daemon thread goes on until the call
    returns or the process ends (the result dropped; ``tick()`` raises there, so the item makes no further call) and
    the items after it go on in a fresh thread. ``(True, value)`` or ``(False, exception)`` per item.

    One thread and one watchdog (the caller, waiting) per batch of items instead of a thread per call: the watchdog
    wakes only when a call's deadline passes. ``seconds`` None: no limit, the items run in the calling thread."""
    if seconds is None:
        out: list[tuple[bool, Any]] = []
        for item in items:
            try:
                out.append((True, fn(item, _no_tick)))
            except Exception as exc:
                out.append((False, exc))
        return out
    out = []
    start, n = 0, len(items)
    while start < n:
        runner = _Runner(fn, items, start)
        threading.Thread(target=runner.run, name="reward-call", daemon=True).start()
        finished = runner.watch(seconds)
        with runner.lock:
            out += runner.results
        start += len(runner.results)
        if finished:
            break
        out.append(
            (
                False,
                RewardTimeout(
                    f"timed out after {seconds:g}s (the call was abandoned; it ends with the process)"
                ),
            )
        )
        start += 1
    return out


# --- results -------------------------------------------------------------------------------------------------


def escaped(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a reward call, is a ``BaseException`` that is not an ``Exception`` and is the
    call's own failure (so :class:`RewardAborted` carries it as the sample's error): not Ctrl-C, a generator or
    task being closed or cancelled, or pytest's own outcomes (``pytest.skip``, ``pytest.fail``: subclasses of its
    ``OutcomeException``, found by name, as this layer imports no pytest)."""
    if isinstance(exc, (Exception, KeyboardInterrupt, GeneratorExit, asyncio.CancelledError)):
        return False
    return not any(cls.__name__ == "OutcomeException" for cls in type(exc).__mro__)


_SIGNAL_IN_THREAD = "signal only works in main thread"


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, at most 2000 characters; a :class:`RewardAborted`'s own message (it names what was
    raised); a ``signal`` call outside the main thread (``signal.alarm`` timeouts, as Math-Verify's) says why."""
    if isinstance(exc, RewardAborted):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}".strip()
        if isinstance(exc, ValueError) and _SIGNAL_IN_THREAD in text:
            text += (
                " (the reward ran in a worker thread, as --reward-timeout, --reward-workers and trainers run it: "
                "a timeout made with signal.alarm, as Math-Verify's, works only in the main thread; turn it off (math_verify: "
                "parse(..., parsing_timeout=None), verify(..., timeout_seconds=None)) and let --reward-timeout "
                "or the marker's timeout= bound the call)"
            )
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


def changed_error(fn_name: str, changed: Sequence[str]) -> InvalidResult:
    """The error of a call that changed its inputs ``changed`` in place (the names in the order
    :meth:`Reward.changed_inputs` gives them)."""
    what = ", ".join(repr(name) for name in changed)
    return InvalidResult(
        f"{fn_name} changed its input {what} in place: a reward function must not modify its "
        "inputs (trainers pass the same objects to every reward function); copy them first"
    )


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
    if cls is dict:  # copied in C; only the values that are themselves lists or dicts copied again
        out = value.copy()
        for k, v in value.items():
            if v.__class__ is dict or v.__class__ is list:
                out[k] = private_copy(v)
        return out
    if cls is list:
        return [private_copy(v) if v.__class__ is dict or v.__class__ is list else v for v in value]
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


def owned_messages(messages: list[Any], text: str) -> list[Any]:
    """A private copy of ``messages`` (copied as every call's inputs are) whose last turn's content is ``text``: a
    conversation built for one call alone (a probe's mutated response), which :meth:`Reward.kwargs_owned` passes as
    it is. The last turn must be a dict."""
    out = _copy_messages(messages)
    out[-1]["content"] = text
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


#: :meth:`Reward.fast`: ``f(messages, ground_truth=MISSING, fields=None, owned=True)``.
FastCall = Callable[..., Any]


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
        return self._assemble(_copy_messages(messages) if messages else [], ground_truth, fields)

    def kwargs_owned(
        self,
        messages: list[dict[str, Any]],
        ground_truth: Any = MISSING,
        fields: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """:meth:`kwargs` for a call that owns ``messages`` (built for it alone, the list and every turn: see
        :func:`owned_messages`): passed as they are, nothing else can see what the call does to them. The ground
        truth and the fields are the sample's, shared: copied as :meth:`kwargs` copies them."""
        if fields or self.wants_original or ground_truth.__class__ in (list, dict):
            return self._assemble(messages, ground_truth, fields)
        if ground_truth is MISSING or ground_truth is None:
            return {"messages": messages}
        return {"messages": messages, "ground_truth": ground_truth}

    def _assemble(
        self, messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The keyword arguments around ``messages`` (already the call's own): private copies of the fields and
        the ground truth that are lists or dicts, ``original_messages`` when the function takes it."""
        kwargs: dict[str, Any] = {}
        if fields:
            for key, value in fields.items():
                cls = value.__class__
                kwargs[key] = private_copy(value) if cls is list or cls is dict else value
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
        except RewardReturnError as exc:
            raise invalid_return(self.name, exc.value, str(exc)) from None
        except BaseException as exc:
            if not escaped(exc):
                raise
            raise RewardAborted(exc) from exc
        if value.__class__ is EvaluateResult:  # the usual return, before the coroutine check
            return value
        return self.finish(value)

    def finish(self, value: Any) -> EvaluateResult:
        """What :meth:`call` makes of what the function returned when it is not an ``EvaluateResult``: a coroutine
        is run to its end first; then :func:`to_result` (``InvalidResult`` for anything that is not a result)."""
        __tracebackhide__ = True
        try:
            if self.is_async or asyncio.iscoroutine(value):
                value = run_coroutine(value)
        except RewardReturnError as exc:
            raise invalid_return(self.name, exc.value, str(exc)) from None
        except BaseException as exc:
            if not escaped(exc):
                raise
            raise RewardAborted(exc) from exc
        return to_result(value, self.name)

    @property
    def plain(self) -> bool:
        """Whether a call on messages and a ground truth alone is ``fn(messages=...)`` or ``fn(messages=...,
        ground_truth=...)`` (pointwise, no ``original_messages`` to add): the call :meth:`fast` makes in its own
        frame."""
        return not self.batch and not self.wants_original

    def fast(
        self,
        *,
        numbers: bool = False,
        then: Callable[[Any], Any] | None = None,
        failed: Callable[[Exception], Any] | None = None,
    ) -> FastCall:
        """The call for a caller making many, built once per function: ``f(messages, ground_truth=MISSING,
        fields=None, owned=True)``, what :meth:`call` on :meth:`kwargs` gives, raising what it raises, plus the
        check that the call left its inputs as they were (``InvalidResult`` naming the inputs it changed in
        place, :func:`changed_error`).

        ``owned``: ``messages`` were built for this call alone (:func:`owned_messages`) and are passed as they
        are, unchecked; else they are the caller's (a sample's): the call gets a private copy, compared with them
        after it. The ground truth (``MISSING`` or None: none) and the fields are copied and checked as
        :meth:`kwargs` copies them. The usual call (a :attr:`plain` function, no fields, a ground truth that is not
        a list or dict) is made in the closure's own frame; every other goes through :meth:`call`.

        ``then``: what the closure returns is ``then(result)`` (a verdict, say) instead of the result. ``failed``:
        an exception (the function's, an unusable return, a changed input) is returned as ``failed(exception)``
        instead of raised. Both are applied in the closure's own frame: a hot loop makes one call per input.

        ``numbers``: a trainer-native function with a pointwise adapter step (``__reward_scalar__``, see
        :class:`pytest_reward.trainers.styles.ScalarStep`) is called through its step, on the caller's own objects
        when the step hands the function none that could change, and a finite number it returns comes back as a
        ``float`` (what the adapter makes a valid result of, with no reason nor metrics) instead of the
        ``EvaluateResult``: :func:`pytest_reward.judge.verdict.verdict_rule` judges both."""
        name, call, assemble = self.name, self.call, self._assemble

        def general(
            messages: list[Any] | None,
            ground_truth: Any = MISSING,
            fields: Mapping[str, Any] | None = None,
            owned: bool = True,
        ) -> EvaluateResult:
            __tracebackhide__ = True
            given = messages if owned else (_copy_messages(messages) if messages else [])
            kwargs = assemble(given, ground_truth, fields)  # type: ignore[arg-type]
            result = call(kwargs)
            changed = self.changed_inputs(
                kwargs, given if owned else messages, ground_truth, fields  # type: ignore[arg-type]
            )
            if changed:
                raise changed_error(name, changed)
            return result

        fn, finish, copy = self.fn, self.finish, _copy_messages
        missing, result_class = MISSING, EvaluateResult
        scalar = getattr(fn, "__reward_scalar__", None) if numbers and self.plain else None
        if scalar is not None:
            usual = self._scalar_call(scalar, general)
        elif not self.plain:
            usual = general
        else:
            usual = None
        if usual is not None:
            if then is None and failed is None:
                return usual

            def wrapped(
                messages: list[Any] | None,
                ground_truth: Any = MISSING,
                fields: Mapping[str, Any] | None = None,
                owned: bool = True,
            ) -> Any:
                __tracebackhide__ = True
                try:
                    value = usual(messages, ground_truth, fields, owned)
                except Exception as exc:
                    if failed is None:
                        raise
                    return failed(exc)
                return value if then is None else then(value)

            return wrapped

        # our own decorator's plain wrapper: its function called here, what it returns coerced as the wrapper would
        # (one frame less per call; the same results, the same errors)
        direct = getattr(fn, "__reward_direct__", None)
        if direct is not None and direct[0] is fn:
            fn, spec = direct[1], direct[2]

            def finish(value: Any) -> EvaluateResult:
                __tracebackhide__ = True
                return coerce_result(spec, value)

        def plain(
            messages: list[Any] | None,
            ground_truth: Any = MISSING,
            fields: Mapping[str, Any] | None = None,
            owned: bool = True,
        ) -> Any:
            __tracebackhide__ = True
            try:
                cls = ground_truth.__class__
                if fields or cls is list or cls is dict:
                    value = general(messages, ground_truth, fields, owned)
                else:
                    given = messages if owned else (copy(messages) if messages else [])
                    if ground_truth is missing or ground_truth is None:
                        value = fn(messages=given)
                    else:
                        value = fn(messages=given, ground_truth=ground_truth)
                    if value.__class__ is not result_class:
                        value = finish(value)
                    if not owned and given != (messages or []):
                        raise changed_error(name, ["messages"])
            except RewardReturnError as exc:
                error = invalid_return(name, exc.value, str(exc))
                if failed is None:
                    raise error from None
                return failed(error)
            except Exception as exc:
                if failed is None:
                    raise
                return failed(exc)
            except BaseException as exc:
                if not escaped(exc):
                    raise
                if failed is None:
                    raise RewardAborted(exc) from exc
                return failed(RewardAborted(exc))
            return value if then is None else then(value)

        return plain

    def _scalar_call(self, scalar: Any, general: FastCall) -> FastCall:
        """:meth:`fast` ``(numbers=True)`` of a trainer-native function with an adapter step."""
        raw, to_result, direct, shared = scalar
        name, kwargs_owned, changed_inputs = self.name, self.kwargs_owned, self.changed_inputs
        isfinite = math.isfinite

        def step(
            messages: list[Any] | None,
            ground_truth: Any = MISSING,
            fields: Mapping[str, Any] | None = None,
            owned: bool = True,
        ) -> Any:
            __tracebackhide__ = True
            truth = None if ground_truth is MISSING else ground_truth
            given = messages or []
            try:
                # the caller's own objects, when nothing the step hands on can change; else private copies
                value = direct(given, truth, fields or {})
                kwargs = None
                if value is shared:
                    # the step reads the response's text from the messages and hands them to nothing: no copy;
                    # what it passes on (the ground truth, the fields) is copied, and checked after the call
                    kwargs = kwargs_owned(given, truth, fields)
                    value = raw(**kwargs)
            except RewardReturnError as exc:
                raise invalid_return(name, exc.value, str(exc)) from None
            except BaseException as exc:
                if not escaped(exc):
                    raise
                raise RewardAborted(exc) from exc
            result = None
            if value.__class__ is float or value.__class__ is int:
                result = float(value)
                if not isfinite(result):
                    result = None
            if result is None:
                result = to_result(value)
            if kwargs is not None:
                changed = changed_inputs(kwargs, given, truth, fields)
                if changed:
                    raise changed_error(name, changed)
            return result

        return step

    def call_batch(self, rows: Sequence[dict[str, Any]]) -> list[EvaluateResult]:
        """Call a batch-mode function on several samples' keyword arguments; one result per sample, in order."""
        __tracebackhide__ = True
        try:
            value = self.fn(**batch_kwargs(rows))
            if self.is_async or asyncio.iscoroutine(value):
                value = run_coroutine(value)
        except RewardReturnError as exc:
            raise invalid_return(self.name, exc.value, str(exc)) from None
        except BaseException as exc:
            if not escaped(exc):
                raise
            raise RewardAborted(exc) from exc
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
        except BaseException as exc:
            if not escaped(exc):
                raise
            raise RewardAborted(exc) from exc
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
