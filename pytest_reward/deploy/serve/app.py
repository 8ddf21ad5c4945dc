"""The reward server's ASGI application: request bodies, the scorer, and one handler per wire format.

* reward-kit: ``POST /reward`` (``{messages, ground_truth?, **kwargs}``) and ``POST /evaluate`` (``{messages,
  ground_truth?, tools?, kwargs?}``, the Fireworks remote shim's body) -> ``EvaluateResult`` JSON; one handler,
  they differ only in where the keyword arguments come from;
* OpenRLHF: ``POST /openrlhf/get_reward`` and ``POST /get_reward`` (``{query, prompts, labels}`` ->
  ``{rewards, scores, extra_logs}``), converted by :mod:`pytest_reward.trainers.openrlhf`;
* slime: ``POST /slime`` (``{prompt, response, label}`` -> a number, or a dict with ``?format=dict``), converted by
  :mod:`pytest_reward.trainers.slime`;
* ``GET /``, ``/health``, ``/manifest``; every POST route again under ``/functions/{name}/...``.

Reward functions are called through :class:`pytest_reward.reward.call.Reward` (``Reward.safe`` in a thread pool for sync
functions, ``Reward.asafe`` on the event loop for async ones), so a request is scored exactly as a sample of the
test run with the same fields. Starlette and pydantic are imported when an app is built.

The event loop stays free for other requests (``/health``) whatever a request carries: a body nesting deeper than
:data:`MAX_DEPTH` gets 400 and a batch over ``--max-batch`` samples 413; large bodies are decoded, and large
answers built, in a worker thread (not the reward pool, which hung rewards may hold); a batch's calls are started
a chunk at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ... import __version__
from ...reward.call import Reward, describe_exception, failed_result
from ...trainers import openrlhf, slime
from ...trainers.adapter import flat_scores, is_valid, result_json
from .guard import Guard
from .loading import ServedFunction, ServedRewards
from .options import ServeOptions

__all__ = ["MAX_DEPTH", "create_app", "log"]

log = logging.getLogger("pytest_reward.serve")

MAX_DEPTH = 100
"""Deepest nesting of lists and objects in a request body (the body itself is level 1). Copying or comparing
deeper data would exhaust Python's recursion limit, inside the server or inside the reward function."""
_LARGE_BODY = 64 << 10
"""Bodies of more bytes are decoded in a worker thread."""
_LARGE_BATCH = 256
"""Answers for more samples are built in a worker thread."""
_CHUNK = 64
"""Samples whose calls are started between two yields to the event loop."""

# --- JSON ----------------------------------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN or Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _dumps(value: Any) -> bytes:
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except ValueError:  # a NaN or an infinity somewhere: null instead
        text = json.dumps(_finite(value), allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return text.encode()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# --- requests ------------------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """A malformed request: answered with 422 and the offending fields."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors


def _error(loc: Sequence[Any], msg: str, kind: str = "value_error") -> dict[str, Any]:
    return {"loc": list(loc), "msg": msg, "type": kind}


def _invalid_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    names = ["/".join(str(p) for p in e["loc"]) or "body" for e in errors]
    summary = "; ".join(f"{n}: {e['msg']}" for n, e in zip(names, errors, strict=True))
    return {"detail": errors, "error": f"invalid request: {summary}"}


@functools.cache
def _request_models() -> dict[str, Any]:
    """The pydantic models of request bodies (built on first use: pydantic is not imported before)."""
    from pydantic import BaseModel, ConfigDict, StrictStr

    class WireMessage(BaseModel):
        model_config = ConfigDict(extra="allow", strict=True)
        role: StrictStr
        content: StrictStr | list[dict[str, Any]] | None = None

    class RewardBody(BaseModel):
        model_config = ConfigDict(extra="allow", strict=True)
        messages: list[WireMessage]
        ground_truth: Any = None

    class EvaluateBody(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        messages: list[WireMessage]
        ground_truth: Any = None
        tools: list[Any] | None = None
        kwargs: dict[str, Any] | None = None

    class OpenRLHFBody(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        query: list[StrictStr]
        prompts: list[StrictStr] | None = None
        labels: list[Any] | None = None

    class SlimeBody(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        prompt: StrictStr | list[WireMessage] | None = None
        response: StrictStr
        label: Any = None

    return {"reward": RewardBody, "evaluate": EvaluateBody, "openrlhf": OpenRLHFBody, "slime": SlimeBody}


def _too_deep(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels in ``value`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _batch_size(kind: str, data: Any) -> int:
    """How many samples a decoded body carries (its longest list of samples; 1 for single-sample routes)."""
    if kind != "openrlhf" or not isinstance(data, dict):
        return 1
    return max(
        (len(v) for k in ("query", "prompts", "labels") if isinstance(v := data.get(k), list)), default=0
    )


def _decode(raw: bytes, kind: str, max_batch: int) -> tuple[Any, Any]:
    """A body's JSON and its validated model; 400 when it nests too deep, 413 when its batch is too large, 422
    when it is not valid JSON or not a valid request of ``kind``."""
    from starlette.exceptions import HTTPException

    too_deep = f"request body nests lists and objects deeper than {MAX_DEPTH} levels (the server's limit, counting the body itself)"
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise HTTPException(400, too_deep) from None
    except ValueError as exc:
        raise _Invalid([_error(["body"], f"invalid JSON: {exc}", "json_invalid")]) from None
    if isinstance(data, (dict, list)) and _too_deep(data, MAX_DEPTH):
        raise HTTPException(400, too_deep)
    size = _batch_size(kind, data)
    if size > max_batch:
        raise HTTPException(
            413, f"a batch of {size} samples is over the server's limit of {max_batch} (--max-batch)"
        )
    return data, _validate(kind, data)


async def _maybe_in_thread(large: bool, func: Callable[..., Any], *args: Any) -> Any:
    """``func(*args)``: in a worker thread when ``large`` (so the event loop keeps serving), else here."""
    return await asyncio.to_thread(func, *args) if large else func(*args)


def _validate(kind: str, data: Any) -> Any:
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise _Invalid([_error(["body"], f"expected a JSON object, got {type(data).__name__}", "type_error")])
    try:
        return _request_models()[kind].model_validate(data)
    except ValidationError as exc:
        errors = [
            _error(["body", *e["loc"]], e["msg"], e["type"])
            for e in exc.errors(include_url=False, include_context=False, include_input=False)
        ]
        raise _Invalid(errors) from None


def _reward_fields(data: dict[str, Any], body: Any) -> dict[str, Any]:
    """``/reward``: every top-level field but ``messages`` and ``ground_truth`` is a keyword argument."""
    return {k: v for k, v in data.items() if k not in ("messages", "ground_truth")}


def _evaluate_fields(data: dict[str, Any], body: Any) -> dict[str, Any]:
    """``/evaluate``: ``kwargs``, and ``tools`` when not null; a ``kwargs`` key repeating a top-level field is a
    422; other top-level fields are ignored (as in reward-kit's generic server)."""
    fields = dict(data.get("kwargs") or {})
    clash = [k for k in ("messages", "ground_truth", "tools") if k in fields]
    if clash:
        raise _Invalid([_error(["body", "kwargs", k], "already a top-level field") for k in clash])
    if body.tools is not None:
        fields["tools"] = data["tools"]
    return fields


# --- scoring -------------------------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One sample of a request, as :meth:`Reward.kwargs` takes it."""

    messages: list[dict[str, Any]]
    ground_truth: Any
    """``None`` when absent: not passed, so the function's own default applies."""
    fields: dict[str, Any] = field(default_factory=dict)


def _timeout_result(name: str, seconds: float) -> Any:
    error = f"TimeoutError: {name} did not finish within the server's {seconds:g} s request timeout"
    return failed_result(error, reason="reward function timed out")


class _Scorer:
    """Runs reward calls: sync functions in a thread pool, async ones on the loop, under one deadline."""

    def __init__(self, target: ServedRewards, options: ServeOptions) -> None:
        self.target = target
        self.options = options
        self.pool = ThreadPoolExecutor(max_workers=options.threads, thread_name_prefix="reward")
        self._lock = threading.Lock()
        self.busy = 0

    def functions(self, name: str | None) -> dict[str, ServedFunction]:
        from starlette.exceptions import HTTPException

        if name is None:
            return self.target.functions
        fn = self.target.functions.get(name)
        if fn is None:
            known = ", ".join(self.target.functions)
            raise HTTPException(404, f"no reward function named {name!r} (served: {known})")
        return {name: fn}

    def _in_thread(self, reward: Reward, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            self.busy += 1
        try:
            return reward.safe(kwargs)
        finally:
            with self._lock:
                self.busy -= 1

    async def _one(self, fn: ServedFunction, call: _Call) -> Any:
        kwargs = fn.reward.kwargs(call.messages, call.ground_truth, call.fields)
        if fn.is_async:
            return await fn.reward.asafe(kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self._in_thread, fn.reward, kwargs)

    async def score(
        self, functions: Mapping[str, ServedFunction], calls: Sequence[_Call]
    ) -> list[dict[str, Any]]:
        """One ``{function name: EvaluateResult}`` per call; calls unfinished at the deadline time out."""
        timeout = self.options.timeout
        out: list[dict[str, Any]] = [{} for _ in calls]
        if len(calls) == 1 and len(functions) == 1:  # the common case, without a task
            ((name, fn),) = functions.items()
            try:
                async with asyncio.timeout(timeout):
                    result = await self._one(fn, calls[0])
            except TimeoutError:
                result = _timeout_result(name, timeout)
            except Exception as exc:  # outside the reward function (e.g. the pool is shutting down)
                result = failed_result(describe_exception(exc), reason="reward call failed")
            out[0][name] = self._noted(name, result)
            return out
        # Functions of one sample run at the same time: each gets its own copy of the (JSON) data.
        isolate = copy.deepcopy if len(functions) > 1 else (lambda call: call)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        tasks: dict[tuple[int, str], asyncio.Future[Any]] = {}
        for i, call in enumerate(calls):
            for name, fn in functions.items():
                tasks[(i, name)] = asyncio.ensure_future(self._one(fn, isolate(call)))
            if i % _CHUNK == _CHUNK - 1:
                await asyncio.sleep(0)  # let other requests in between chunks of a large batch
        if tasks:
            await asyncio.wait(tasks.values(), timeout=max(0.0, deadline - loop.time()))
        for (i, name), task in tasks.items():
            if not task.done():
                task.cancel()
                result = _timeout_result(name, timeout)
            elif task.exception() is not None:
                result = failed_result(describe_exception(task.exception()), reason="reward call failed")
            else:
                result = task.result()
            out[i][name] = self._noted(name, result)
        return out

    @staticmethod
    def _noted(name: str, result: Any) -> Any:
        if result.error:
            log.warning("reward function %s failed: %s", name, result.error)
        return result

    @staticmethod
    def rows(functions: Mapping[str, ServedFunction], results: Mapping[str, Any]) -> dict[str, float]:
        """The :func:`~pytest_reward.deploy.adapters.flat_scores` row of one sample."""
        weights = {name: fn.weight for name, fn in functions.items()}
        return flat_scores(results, weights, {name: fn.metrics for name, fn in functions.items()})

    @staticmethod
    def combined(functions: Mapping[str, ServedFunction], results: Mapping[str, Any]) -> Any:
        """The single function's result, or the weighted mean of several (invalid ones count 0)."""
        from ...reward.models import EvaluateResult, MetricResult

        if len(results) == 1:
            return next(iter(results.values()))
        weights = {name: fn.weight for name, fn in functions.items()}
        flat = flat_scores(results, weights, {})
        metrics: dict[str, Any] = {}
        for name, result in results.items():
            raw = flat[name]
            metrics[name] = MetricResult(
                score=min(1.0, max(0.0, raw)),
                is_score_valid=is_valid(result),
                reason=f"score {raw:g}, weight {weights[name]:g}"
                + (f": {result.reason}" if result.reason else ""),
            )
            for metric, value in result.metrics.items():
                metrics[f"{name}/{metric}"] = value
        errors = [f"{name}: {r.error}" for name, r in results.items() if r.error]
        parts = ", ".join(f"{name} (weight {weights[name]:g})" for name in results)
        return EvaluateResult(
            score=flat["score"],
            is_score_valid=all(is_valid(r) for r in results.values()),
            reason=f"weighted mean of {parts}",
            metrics=metrics,
            error="; ".join(errors) or None,
        )


# --- the app -------------------------------------------------------------------------------------------------------


def create_app(target: ServedRewards, options: ServeOptions | None = None) -> Any:
    """The ASGI application serving ``target`` (see the package docstring for routes and rules)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    options = options or ServeOptions()
    scorer = _Scorer(target, options)

    def respond(body: Any, status: int = 200) -> Response:
        return Response(_dumps(body), status_code=status, media_type="application/json")

    async def parse(request: Request, kind: str) -> tuple[dict[str, Any], Any]:
        raw = await request.body()
        decoded: tuple[dict[str, Any], Any] = await _maybe_in_thread(
            len(raw) > _LARGE_BODY, _decode, raw, kind, options.max_batch
        )
        return decoded

    def reward_kit(kind: str, fields: Callable[[dict[str, Any], Any], dict[str, Any]]) -> Callable[..., Any]:
        """The handler of ``/reward`` (``kind="reward"``) or ``/evaluate``: one sample -> ``EvaluateResult``."""

        async def handler(request: Request) -> Response:
            functions = scorer.functions(request.path_params.get("name"))
            data, body = await parse(request, kind)
            call = _Call(data["messages"], data.get("ground_truth"), fields(data, body))
            results = (await scorer.score(functions, [call]))[0]
            return respond(result_json(scorer.combined(functions, results)))

        return handler

    async def openrlhf_route(request: Request) -> Response:
        functions = scorer.functions(request.path_params.get("name"))
        data, _ = await parse(request, "openrlhf")
        large = len(data["query"]) > _LARGE_BATCH
        samples, problems = await _maybe_in_thread(
            large, openrlhf.request_samples, data["query"], data.get("prompts"), data.get("labels")
        )
        if problems:
            raise _Invalid([_error(["body", key], problem) for key, problem in problems])
        results = await scorer.score(functions, [_Call(messages, label) for messages, label in samples])

        def answer() -> bytes:
            return _dumps(openrlhf.openrlhf_answer([scorer.rows(functions, r) for r in results]))

        return Response(await _maybe_in_thread(large, answer), media_type="application/json")

    async def slime_route(request: Request) -> Response:
        shape = request.query_params.get("format", "number")
        if shape not in slime.SHAPES:
            raise _Invalid([_error(["query", "format"], "expected 'number' or 'dict'")])
        functions = scorer.functions(request.path_params.get("name"))
        data, _ = await parse(request, "slime")
        call = _Call(*slime.request_sample(data.get("prompt"), data["response"], data.get("label")))
        results = (await scorer.score(functions, [call]))[0]
        row = scorer.rows(functions, results)
        combined = scorer.combined(functions, results) if shape == "dict" else None
        return respond(slime.slime_answer(row, shape, combined))

    handlers = {
        "/reward": reward_kit("reward", _reward_fields),
        "/evaluate": reward_kit("evaluate", _evaluate_fields),
        **dict.fromkeys(openrlhf.ROUTES, openrlhf_route),
        slime.ROUTE: slime_route,
    }

    def description() -> dict[str, Any]:
        fns = target.functions
        return {
            "name": target.name,
            "kind": target.kind,
            "version": target.version,
            "content_hash": target.content_hash,
            "functions": [
                {
                    "name": f.name,
                    "weight": f.weight,
                    "async": f.is_async,
                    "mode": f.mode,
                    "metrics": list(f.metrics),
                }
                for f in fns.values()
            ],
            "combined": len(fns) > 1,
        }

    async def health(request: Request) -> Response:
        return respond(
            {
                "status": "ok",
                **description(),
                "pid": os.getpid(),
                "threads": {"size": options.threads, "busy": scorer.busy},
                "timeout": options.timeout,
                "pytest_reward": __version__,
            }
        )

    async def root(request: Request) -> Response:
        per_function = [f"/functions/{{name}}{r}" for r in handlers]
        return respond({"status": "ok", "endpoints": ["/health", "/manifest", *handlers, *per_function]})

    async def manifest(request: Request) -> Response:
        return respond(target.manifest)

    async def on_invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _Invalid)
        return respond(_invalid_body(exc.errors), 422)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        response = respond({"detail": exc.detail}, exc.status_code)
        response.headers.update(exc.headers or {})
        return response

    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return respond({"detail": f"internal server error: {type(exc).__name__}: {exc}"}, 500)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        scorer.pool.shutdown(wait=False, cancel_futures=True)
        if scorer.busy:
            # A hung sync reward cannot be interrupted; the interpreter would wait for its thread at exit.
            log.warning("exiting with %d reward call(s) still running in threads", scorer.busy)
            logging.shutdown()
            sys.stderr.flush()
            os._exit(0)

    routes = [
        Route("/", root, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/manifest", manifest, methods=["GET"]),
    ]
    for path, handler in handlers.items():
        routes.append(Route(path, handler, methods=["POST"]))
        routes.append(Route("/functions/{name}" + path, handler, methods=["POST"]))
    app = Starlette(
        routes=routes,
        exception_handlers={_Invalid: on_invalid, HTTPException: on_http, Exception: on_error},
        lifespan=lifespan,
    )
    app.state.scorer = scorer
    return Guard(
        app,
        token=options.token,
        max_body=options.max_body,
        read_timeout=options.read_timeout,
        access_log=options.access_log,
    )
