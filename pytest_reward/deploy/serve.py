"""``pytest-reward serve``: tested reward functions over HTTP, in the wire formats RL trainers already speak.

What is served (``BUNDLE_OR_MODULE``): a bundle directory, its package directory or its ``.tar.gz`` (through
``runtime.load_bundle``), a ``.py`` file, or ``package.module[:function]``. ``--function NAME`` keeps one function.

Routes (``docs/serve.md`` has request and response examples):

* ``GET /``, ``GET /health`` (functions, bundle name, version and content hash, thread pool use), ``GET /manifest``
  (the bundle's manifest, or one generated for a module);
* reward-kit: ``POST /reward`` (``{messages, ground_truth?, **kwargs}``) and ``POST /evaluate`` (``{messages,
  ground_truth?, tools?, kwargs?}``, the Fireworks remote shim's body) -> ``EvaluateResult`` JSON;
* OpenRLHF: ``POST /openrlhf/get_reward`` and ``POST /get_reward`` (``{query, prompts, labels}`` ->
  ``{rewards, scores, extra_logs}``, the same keys for every sample);
* slime: ``POST /slime`` (``{prompt, response, label}`` -> a bare number, or a dict with ``?format=dict``);
* every POST route again under ``/functions/{name}/...`` for one function of several.

Decisions:

* With several functions, the un-prefixed routes score their weighted mean (the bundle's weights; 1.0 each for a
  module), exactly as the generated OpenRLHF/verl adapters do: a function whose result is invalid counts 0.
* A reward function that raises, returns something unusable or a non-finite score gives HTTP 200 with score 0,
  ``is_score_valid: false`` and ``error`` (reward-kit's convention): every trainer client retries non-2xx answers
  (OpenRLHF 5 times, slime 10 times over ~3 minutes), which would only repeat a deterministic failure.
* A reward call still running when the per-request ``--timeout`` expires gives the same 200 invalid result with
  a ``TimeoutError`` (not a 504): a hang is a property of the sample, and a retry would start the same hang again
  in another worker thread. The abandoned call keeps its thread until it returns; ``/health`` counts busy threads.
* A missing or ``null`` ``ground_truth`` is not passed at all, so the function's own default applies (reward-kit's
  server substitutes ``messages[:-1]``; its client already does so before sending, so its calls are unaffected).
  ``original_messages`` defaults to ``messages[:-1]`` when the function declares it, as in the test run.
* Malformed requests get 422 naming the field; never NaN or Infinity in a response (a non-finite score is invalid).
* Auth: with ``--token`` or ``PYTEST_REWARD_TOKEN``, every route needs ``Authorization: Bearer T``, ``X-Api-Key: T``
  or ``?token=T`` (OpenRLHF and slime post to the URL as given, without headers); constant-time comparison; 401.
* Limits: bodies over ``--max-body`` get 413; request headers and body must each arrive within ``--read-timeout``
  (slow clients get 408 or a closed connection); ``--max-connections`` (503 beyond).
* Concurrency: sync reward functions run in a thread pool of ``--threads`` per process, async ones on the event
  loop; ``--workers N`` > 1 starts N uvicorn worker processes sharing the socket (CPU-bound rewards need processes:
  threads share the GIL). Each process loads the target itself.
* One access-log line per request on stderr (client, method, path without the query string, status, duration).
* Request content is data only: it is passed to the reward functions as arguments, never imported or executed.

Starlette, uvicorn and pydantic are imported only when a server is built; importing this module is cheap.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import functools
import hashlib
import hmac
import inspect
import json
import logging
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

__all__ = [
    "ServeError",
    "ServeOptions",
    "ServedFunction",
    "Target",
    "app_from_env",
    "configure",
    "create_app",
    "load_target",
    "run",
]

ENV_TOKEN = "PYTEST_REWARD_TOKEN"
ENV_CONFIG = "PYTEST_REWARD_SERVE_CONFIG"
DEFAULT_MAX_BODY = 8 << 20
ROUTES = ("/reward", "/evaluate", "/openrlhf/get_reward", "/get_reward", "/slime")
_IMPORT_SPEC = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_.]*)?$")

log = logging.getLogger("pytest_reward.serve")
access_log = logging.getLogger("pytest_reward.serve.access")


class ServeError(Exception):
    """A target that cannot be served, or options that cannot work; the message says why."""


# --- what is served ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedFunction:
    name: str
    obj: Callable[..., Any]
    """Called as ``obj(messages=..., ground_truth=..., **kwargs)``; batch-mode functions are wrapped to that."""
    weight: float = 1.0
    is_async: bool = False
    wants_original: bool = False
    metrics: tuple[str, ...] = ()
    mode: str = "pointwise"


@dataclass
class Target:
    """Reward functions loaded from a bundle or a module, with what ``/health`` and ``/manifest`` report."""

    kind: str  # "bundle" or "module"
    name: str
    version: str | None
    content_hash: str | None
    manifest: dict[str, Any]
    functions: dict[str, ServedFunction]
    location: str
    """What to load again in a worker process (an extracted bundle directory, a file, an import string)."""


def _batch_as_pointwise(fn: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    """A batch-mode function called on a batch of one: lists in, the single result out."""

    def listed(kwargs: dict[str, Any]) -> dict[str, Any]:
        out = {k: [v] for k, v in kwargs.items() if k != "messages"}
        out["rollouts_messages"] = [kwargs.get("messages", [])]
        return out

    def single(value: Any) -> Any:
        if not isinstance(value, list) or len(value) != 1:
            raise TypeError(
                f"batch reward function returned {type(value).__name__}, expected a list of 1 result"
            )
        return value[0]

    if is_async:

        async def call_async(**kwargs: Any) -> Any:
            return single(await fn(**listed(kwargs)))

        return call_async

    def call(**kwargs: Any) -> Any:
        return single(fn(**listed(kwargs)))

    return call


def _served(name: str, obj: Any, weight: float = 1.0, metrics: Sequence[str] = ()) -> ServedFunction:
    from ..decorator import get_spec

    spec = get_spec(obj)
    is_async = bool(spec.is_async or inspect.iscoroutinefunction(obj))
    call = _batch_as_pointwise(obj, is_async) if spec.mode == "batch" else obj
    return ServedFunction(
        name=name,
        obj=call,
        weight=float(weight),
        is_async=is_async,
        wants_original="original_messages" in spec.parameters,
        metrics=tuple(metrics),
        mode=spec.mode,
    )


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _select(
    functions: dict[str, ServedFunction], function: str | None, where: str
) -> dict[str, ServedFunction]:
    if not functions:
        raise ServeError(f"{where}: no reward functions found (decorate them with @reward_function)")
    if function is None:
        return functions
    if function not in functions:
        raise ServeError(
            f"{where}: no reward function named {function!r} (there are: {', '.join(functions)})"
        )
    return {function: functions[function]}


def _load_bundle_target(path: Path, function: str | None) -> Target:
    from .runtime import BundleError, load_bundle

    try:
        bundle = load_bundle(path)
    except BundleError as exc:
        raise ServeError(f"bad bundle: {exc}") from None
    except Exception as exc:
        raise ServeError(f"bad bundle: {path}: {type(exc).__name__}: {exc}") from None
    manifest = bundle.manifest
    metric_keys = bundle.metric_keys()
    try:
        functions = {
            name: _served(name, obj, bundle.weights.get(name, 1.0), metric_keys.get(name, ()))
            for name, obj in bundle.functions.items()
        }
    except (ValueError, TypeError) as exc:
        raise ServeError(f"bad bundle: {path}: {exc}") from None
    bundle_info = manifest.get("bundle") if isinstance(manifest.get("bundle"), dict) else {}
    version = manifest.get("bundle_version") or bundle_info.get("version") or manifest.get("release")
    content_hash = manifest.get("content_hash") or bundle_info.get("content_hash")
    return Target(
        kind="bundle",
        name=bundle.name,
        version=None if version is None else str(version),
        content_hash=None if content_hash is None else str(content_hash),
        manifest=manifest,
        functions=_select(functions, function, str(path)),
        location=str(bundle.root),
    )


def _module_target(module: Any, attr: str | None, function: str | None, location: str) -> Target:
    from ..discovery import _functions_in, is_reward_function

    where = getattr(module, "__name__", location)
    if attr is not None:
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        if obj is None or not is_reward_function(obj):
            raise ServeError(
                f"{where}: {attr!r} is not a reward function (decorate it with @reward_function)"
            )
        found = [(attr.rsplit(".", 1)[-1], obj)]
    else:
        found = _functions_in(module)
    functions: dict[str, ServedFunction] = {}
    try:
        for attr_name, obj in found:
            name = getattr(getattr(obj, "__reward_spec__", None), "id", None) or attr_name
            functions[name] = _served(name, obj)
    except (ValueError, TypeError) as exc:
        raise ServeError(f"{where}: {exc}") from None
    functions = _select(functions, function, where)
    source = Path(getattr(module, "__file__", "") or "")
    digest = _sha256_file(source) if source.is_file() else None
    manifest = {
        "format": "pytest-reward-module",
        "generated": True,
        "name": where,
        "version": None,
        "content_hash": digest,
        "source": str(source) if source.is_file() else None,
        "functions": [
            {"name": f.name, "module": where, "weight": f.weight, "mode": f.mode, "async": f.is_async}
            for f in functions.values()
        ],
    }
    return Target("module", where, None, digest, manifest, functions, location)


def load_target(spec: str, function: str | None = None) -> Target:
    """Load what ``pytest-reward serve`` serves; ``ServeError`` with a one-line reason otherwise."""
    import importlib

    path = Path(spec)
    if path.exists():
        if path.is_dir() or path.name.endswith((".tar.gz", ".tgz")):
            return _load_bundle_target(path, function)
        if path.suffix != ".py":
            raise ServeError(f"{spec}: not a bundle directory, a .tar.gz bundle or a .py file")
        from ..discovery import _package_base, import_reward_module

        resolved = path.resolve()
        try:
            module = import_reward_module(resolved, _package_base(resolved), "prepend")
        except Exception as exc:
            raise ServeError(f"{spec}: cannot import: {type(exc).__name__}: {exc}") from None
        return _module_target(module, None, function, str(resolved))
    if not _IMPORT_SPEC.match(spec):
        raise ServeError(f"{spec}: no such file, and not a package.module[:function] name")
    module_name, _, attr = spec.partition(":")
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ServeError(f"{spec}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    return _module_target(module, attr or None, function, spec)


# --- options -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeOptions:
    token: str | None = None
    timeout: float = 20.0
    """Seconds a request's reward calls may take; later ones become invalid results with a TimeoutError."""
    read_timeout: float = 10.0
    """Seconds within which a request's headers, and then its body, must arrive."""
    max_body: int = DEFAULT_MAX_BODY
    threads: int = 8
    access_log: bool = True

    def __post_init__(self) -> None:
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ServeError(f"--timeout must be a positive number of seconds, not {self.timeout}")
        if not (self.read_timeout > 0 and math.isfinite(self.read_timeout)):
            raise ServeError(f"--read-timeout must be a positive number of seconds, not {self.read_timeout}")
        if self.max_body < 1:
            raise ServeError(f"--max-body must be at least 1 byte, not {self.max_body}")
        if self.threads < 1:
            raise ServeError(f"--threads must be at least 1, not {self.threads}")


# --- JSON helpers ----------------------------------------------------------------------------------------------


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


# --- scoring ----------------------------------------------------------------------------------------------------


@dataclass
class _Call:
    messages: list[dict[str, Any]]
    ground_truth: Any
    """``None`` when absent: the function's own default applies."""
    kwargs: dict[str, Any] = field(default_factory=dict)


def _timeout_result(name: str, seconds: float) -> Any:
    from ..models import EvaluateResult

    return EvaluateResult(
        score=0.0,
        is_score_valid=False,
        reason="reward function timed out",
        error=f"TimeoutError: {name} did not finish within the server's {seconds:g} s request timeout",
    )


def _failed(exc: BaseException) -> Any:
    """A call that failed outside the reward function (e.g. the thread pool is shutting down)."""
    from ..models import EvaluateResult

    return EvaluateResult(
        score=0.0, is_score_valid=False, reason="reward call failed", error=f"{type(exc).__name__}: {exc}"
    )


def _valid(result: Any) -> bool:
    return bool(result.is_score_valid and result.error is None)


class _Scorer:
    """Runs reward calls: sync functions in a thread pool, async ones on the loop, under one deadline."""

    def __init__(self, target: Target, options: ServeOptions) -> None:
        from concurrent.futures import ThreadPoolExecutor

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

    def _in_thread(self, fn: Callable[..., Any], messages: list[dict[str, Any]], gt: tuple[Any, ...]) -> Any:
        from .adapters import call_reward

        with self._lock:
            self.busy += 1
        try:
            return call_reward(fn, messages, *gt)
        finally:
            with self._lock:
                self.busy -= 1

    async def _one(self, fn: ServedFunction, call: _Call) -> Any:
        from .adapters import acall_reward

        kwargs = dict(call.kwargs)
        if fn.wants_original and "original_messages" not in kwargs:
            kwargs["original_messages"] = call.messages[:-1]
        # Extra fields are bound here so that no request key can collide with call_reward's own parameters.
        bound = functools.partial(fn.obj, **kwargs) if kwargs else fn.obj
        gt = () if call.ground_truth is None else (call.ground_truth,)
        if fn.is_async:
            return await acall_reward(bound, call.messages, *gt)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self._in_thread, bound, call.messages, gt)

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
            except Exception as exc:
                result = _failed(exc)
            out[0][name] = self._noted(name, result)
            return out
        # Functions of one sample run at the same time: each gets its own copy of the (JSON) data.
        isolate = copy.deepcopy if len(functions) > 1 else (lambda call: call)
        tasks = {
            (i, name): asyncio.ensure_future(self._one(fn, isolate(call)))
            for i, call in enumerate(calls)
            for name, fn in functions.items()
        }
        if tasks:
            await asyncio.wait(tasks.values(), timeout=timeout)
        for (i, name), task in tasks.items():
            if not task.done():
                task.cancel()
                result = _timeout_result(name, timeout)
            elif task.exception() is not None:
                result = _failed(task.exception())
            else:
                result = task.result()
            out[i][name] = self._noted(name, result)
        return out

    @staticmethod
    def _noted(name: str, result: Any) -> Any:
        if result.error:
            log.warning("reward function %s failed: %s", name, result.error)
        return result

    def combined(self, functions: Mapping[str, ServedFunction], results: Mapping[str, Any]) -> Any:
        """The single function's result, or the weighted mean of several (invalid ones count 0)."""
        from ..models import EvaluateResult, MetricResult
        from .adapters import _flat_scores

        if len(results) == 1:
            return next(iter(results.values()))
        weights = {name: fn.weight for name, fn in functions.items()}
        flat = _flat_scores(results, weights, {})
        metrics: dict[str, Any] = {}
        for name, result in results.items():
            valid = _valid(result)
            raw = flat[name]
            metrics[name] = MetricResult(
                score=min(1.0, max(0.0, raw)),
                is_score_valid=valid,
                reason=f"score {raw:g}, weight {weights[name]:g}"
                + (f": {result.reason}" if result.reason else ""),
            )
            for metric, value in result.metrics.items():
                metrics[f"{name}/{metric}"] = value
        errors = [f"{name}: {r.error}" for name, r in results.items() if r.error]
        parts = ", ".join(f"{name} (weight {weights[name]:g})" for name in results)
        return EvaluateResult(
            score=flat["score"],
            is_score_valid=all(_valid(r) for r in results.values()),
            reason=f"weighted mean of {parts}",
            metrics=metrics,
            error="; ".join(errors) or None,
        )


# --- the ASGI app ------------------------------------------------------------------------------------------------


async def _send_json(
    send: Callable[..., Any],
    status: int,
    body: Any,
    *,
    close: bool = False,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    payload = _dumps(body)
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    if close:
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


class _Guard:
    """Outermost ASGI layer: access log, auth, body size limit and body read timeout, before any routing."""

    def __init__(self, app: Any, options: ServeOptions) -> None:
        self.app = app
        self.options = options
        self.token = options.token.encode() if options.token else None

    def _authorized(self, scope: Mapping[str, Any]) -> bool:
        assert self.token is not None
        offered: list[bytes] = []
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                scheme, _, credential = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    offered.append(credential.strip())
            elif key == b"x-api-key":
                offered.append(value.strip())
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        offered.extend(v.encode("latin-1") for v in query.get("token", []))
        ok = False
        for candidate in offered:  # no early exit: the time taken does not depend on which one matched
            ok |= hmac.compare_digest(candidate, self.token)
        return ok

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        logged = not self.options.access_log

        def log_line() -> None:
            nonlocal logged
            logged = True
            client = scope.get("client")
            who = f"{client[0]}:{client[1]}" if client else "-"
            ms = (time.perf_counter() - started) * 1000
            access_log.info('%s "%s %s" %s %.1fms', who, scope["method"], scope["path"], status or "-", ms)

        async def send_logged(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif not logged and not message.get("more_body", False):
                log_line()  # before the last bytes go out: a client that has its answer finds the line written
            await send(message)

        try:
            await self._handle(scope, receive, send_logged)
        finally:
            if not logged:  # no complete response (the client went away, or an error)
                log_line()

    async def _handle(
        self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if self.token is not None and not self._authorized(scope):
            await _send_json(
                send,
                401,
                {"detail": "missing or invalid token (Authorization: Bearer, X-Api-Key or ?token=)"},
                headers=[(b"www-authenticate", b"Bearer")],
            )
            return
        limit = self.options.max_body
        for key, value in scope.get("headers", ()):
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                await _send_json(
                    send, 413, {"detail": f"request body over the {limit}-byte limit"}, close=True
                )
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.read_timeout
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                detail = f"request body not received within {self.options.read_timeout:g} s"
                await _send_json(send, 408, {"detail": detail}, close=True)
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _send_json(
                    send, 413, {"detail": f"request body over the {limit}-byte limit"}, close=True
                )
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(target: Target, options: ServeOptions | None = None) -> Any:
    """The ASGI application serving ``target`` (see the module docstring for routes and rules)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from .. import __version__
    from .adapters import _flat_scores, conversation, response_from_query, result_json

    options = options or ServeOptions()
    scorer = _Scorer(target, options)

    def respond(body: Any, status: int = 200) -> Response:
        return Response(_dumps(body), status_code=status, media_type="application/json")

    async def parse(request: Request, kind: str) -> tuple[dict[str, Any], Any]:
        raw = await request.body()
        try:
            data = json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise _Invalid([_error(["body"], f"invalid JSON: {exc}", "json_invalid")]) from None
        return data, _validate(kind, data)

    def name_of(request: Request) -> str | None:
        return request.path_params.get("name")

    async def reward(request: Request) -> Response:
        functions = scorer.functions(name_of(request))
        data, _ = await parse(request, "reward")
        extra = {k: v for k, v in data.items() if k not in ("messages", "ground_truth")}
        call = _Call(data["messages"], data.get("ground_truth"), extra)
        results = (await scorer.score(functions, [call]))[0]
        return respond(result_json(scorer.combined(functions, results)))

    async def evaluate(request: Request) -> Response:
        functions = scorer.functions(name_of(request))
        data, body = await parse(request, "evaluate")
        extra = dict(data.get("kwargs") or {})
        clash = [k for k in ("messages", "ground_truth", "tools") if k in extra]
        if clash:
            raise _Invalid([_error(["body", "kwargs", k], "already a top-level field") for k in clash])
        if body.tools is not None:
            extra["tools"] = data["tools"]
        call = _Call(data["messages"], data.get("ground_truth"), extra)
        results = (await scorer.score(functions, [call]))[0]
        return respond(result_json(scorer.combined(functions, results)))

    async def openrlhf(request: Request) -> Response:
        functions = scorer.functions(name_of(request))
        data, body = await parse(request, "openrlhf")
        n = len(body.query)
        prompts = data.get("prompts")
        labels = data.get("labels")
        errors = [
            _error(["body", key], f"has {len(value)} items, query has {n}")
            for key, value in (("prompts", prompts), ("labels", labels))
            if value is not None and len(value) != n
        ]
        if errors:
            raise _Invalid(errors)
        prompts = prompts if prompts is not None else [""] * n
        labels = labels if labels is not None else [None] * n
        calls = [
            _Call(conversation(prompt, response_from_query(query, prompt)), label)
            for query, prompt, label in zip(data["query"], prompts, labels, strict=True)
        ]
        weights = {name: fn.weight for name, fn in functions.items()}
        metric_keys = {name: fn.metrics for name, fn in functions.items()}
        rewards: list[float] = []
        extra_logs: dict[str, list[float]] = {}
        for results in await scorer.score(functions, calls):
            flat = _flat_scores(results, weights, metric_keys)
            rewards.append(flat.pop("score"))
            for key, value in flat.items():
                extra_logs.setdefault(key, []).append(value)
        scores = [min(1.0, max(0.0, r)) for r in rewards]
        return respond({"rewards": rewards, "scores": scores, "extra_logs": extra_logs})

    async def slime(request: Request) -> Response:
        shape = request.query_params.get("format", "number")
        if shape not in ("number", "dict"):
            raise _Invalid([_error(["query", "format"], "expected 'number' or 'dict'")])
        functions = scorer.functions(name_of(request))
        data, _ = await parse(request, "slime")
        call = _Call(conversation(data.get("prompt"), data["response"]), data.get("label"))
        results = (await scorer.score(functions, [call]))[0]
        weights = {name: fn.weight for name, fn in functions.items()}
        flat = _flat_scores(results, weights, {name: fn.metrics for name, fn in functions.items()})
        if shape == "number":
            return respond(flat["score"])
        combined = scorer.combined(functions, results)
        return respond(
            {**flat, "is_score_valid": _valid(combined), "reason": combined.reason, "error": combined.error}
        )

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
        per_function = [f"/functions/{{name}}{r}" for r in ROUTES]
        return respond({"status": "ok", "endpoints": ["/health", "/manifest", *ROUTES, *per_function]})

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
    handlers = {
        "/reward": reward,
        "/evaluate": evaluate,
        "/openrlhf/get_reward": openrlhf,
        "/get_reward": openrlhf,
        "/slime": slime,
    }
    for path, handler in handlers.items():
        routes.append(Route(path, handler, methods=["POST"]))
        routes.append(Route("/functions/{name}" + path, handler, methods=["POST"]))
    app = Starlette(
        routes=routes,
        exception_handlers={_Invalid: on_invalid, HTTPException: on_http, Exception: on_error},
        lifespan=lifespan,
    )
    app.state.scorer = scorer
    return _Guard(app, options)


# --- the HTTP protocol: a deadline on request headers ---------------------------------------------------------------


@functools.cache
def _guarded_protocol() -> type:
    """uvicorn's h11 protocol with a deadline on receiving a request's headers (uvicorn has none: a client that
    trickles header bytes would hold its connection forever). The deadline runs from the first moment the
    connection waits for a request and is not extended by each byte; when it passes, the connection is closed."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _header_deadline(self) -> None:
            if self.conn.their_state is h11.IDLE:
                if self._header_timer is None:
                    seconds = getattr(self.config, "pytest_reward_read_timeout", 10.0)
                    self._header_timer = self.loop.call_later(seconds, self._headers_too_slow)
            elif self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            if sock is not None:  # responses go out in two writes (head, body): never wait for an ACK between
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._header_deadline()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self.transport.is_closing():
                self._header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

    GuardedH11Protocol.__module__ = __name__
    GuardedH11Protocol.__qualname__ = "GuardedH11Protocol"
    return GuardedH11Protocol


def __getattr__(name: str) -> Any:
    if name == "GuardedH11Protocol":  # for uvicorn's import string (worker processes)
        return _guarded_protocol()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- running -----------------------------------------------------------------------------------------------------


def _configure_logging(level: str) -> None:
    """Server messages at ``level`` and access lines (always INFO) on stderr, through one handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(getattr(logging, level.upper(), logging.INFO))
    access_log.setLevel(logging.INFO)


def app_from_env() -> Any:
    """App factory of worker processes (``--workers`` > 1): the parent passes its settings in the environment."""
    settings = json.loads(os.environ[ENV_CONFIG])
    _configure_logging(settings.pop("log_level", "info"))
    target = load_target(settings.pop("location"), settings.pop("function"))
    return create_app(target, ServeOptions(**settings))


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP. Without it, Nagle's
    # algorithm holds the response body until the client's delayed ACK of the headers (~40 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(
    target_spec: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    function: str | None = None,
    options: ServeOptions | None = None,
    max_connections: int | None = 1024,
    log_level: str = "info",
) -> int:
    """Load ``target_spec`` and serve it until interrupted. Returns the exit code."""
    import uvicorn

    options = options or ServeOptions()
    if workers < 1:
        raise ServeError(f"--workers must be at least 1, not {workers}")
    _configure_logging(log_level)
    target = load_target(target_spec, function)
    sock = _bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    names = ", ".join(target.functions)
    print(
        f"pytest-reward serve: {target.kind} {target.name} ({names}) listening on http://{shown}:{bound_port} "
        f"(workers={workers}, threads={options.threads}, timeout={options.timeout:g}s, "
        f"auth={'token' if options.token else 'off'})",
        file=sys.stderr,
        flush=True,
    )
    if not options.token and not _is_loopback(host):
        print(
            f"pytest-reward serve: warning: listening on {host} without a token (set --token or ${ENV_TOKEN})",
            file=sys.stderr,
            flush=True,
        )
    common: dict[str, Any] = {
        "http": f"{__name__}:GuardedH11Protocol",
        "lifespan": "on",
        "access_log": False,
        "log_level": "warning" if log_level == "info" else log_level,
        "timeout_keep_alive": 5,
        "timeout_graceful_shutdown": 5,
        "limit_concurrency": max_connections,
        "proxy_headers": False,
        "server_header": False,
        "h11_max_incomplete_event_size": 16 * 1024,
    }
    if workers == 1:
        config = uvicorn.Config(create_app(target, options), **common)
        config.pytest_reward_read_timeout = options.read_timeout  # type: ignore[attr-defined]
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it shut down for
            uvicorn.Server(config).run(sockets=[sock])
        return 0
    from uvicorn.supervisors import Multiprocess

    settings = {**asdict(options), "location": target.location, "function": function, "log_level": log_level}
    os.environ[ENV_CONFIG] = json.dumps(settings)
    config = uvicorn.Config(f"{__name__}:app_from_env", factory=True, workers=workers, **common)
    config.pytest_reward_read_timeout = options.read_timeout  # type: ignore[attr-defined]
    Multiprocess(config, sockets=[sock]).run()  # type: ignore[call-arg]
    return 0


# --- the command line ----------------------------------------------------------------------------------------------


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)i?[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (bytes, or with a K/M/G suffix)")
    return int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[match.group(2).lower()]


_DESCRIPTION = """\
Serve tested reward functions over HTTP, in the formats RL trainers speak:

  GET  /health  /manifest
  POST /reward               reward-kit: {messages, ground_truth?, **kwargs} -> EvaluateResult
  POST /evaluate             reward-kit generic server / Fireworks shim: {messages, ground_truth?, tools?, kwargs?}
  POST /openrlhf/get_reward  OpenRLHF --reward.remote_url: {query, prompts, labels} -> {rewards, scores, extra_logs}
  POST /get_reward           the same
  POST /slime                slime --rm-url: {prompt, response, label} -> number (?format=dict: a dict)

With several functions these score their weighted mean; /functions/NAME/<route> scores one.
A failing or timed-out reward answers 200 with score 0 and is_score_valid false. See docs/serve.md.
"""


def configure(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Add ``pytest-reward serve``'s arguments to ``parser``; returns its handler."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = _DESCRIPTION
    parser.add_argument(
        "target",
        metavar="BUNDLE_OR_MODULE",
        help="a bundle directory or .tar.gz (pytest --reward-deploy), a .py file, or package.module[:function]",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"require this token (Authorization: Bearer, X-Api-Key or ?token=); default: ${ENV_TOKEN} if set",
    )
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--threads", type=int, default=8, help="threads per process for sync reward functions (default 8)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        help="seconds a request's reward calls may take; later: score 0, is_score_valid false (default 20)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        help="seconds within which request headers, then the body, must arrive (default 10)",
    )
    parser.add_argument(
        "--max-body", type=_size, default=DEFAULT_MAX_BODY, help="largest request body, e.g. 8M (default 8M)"
    )
    parser.add_argument(
        "--max-connections", type=int, default=1024, help="concurrent connections before 503 (default 1024)"
    )
    parser.add_argument("--function", default=None, metavar="NAME", help="serve only this reward function")
    parser.add_argument("--no-access-log", action="store_true", help="no access-log line per request")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="(default info)"
    )

    def handle(args: argparse.Namespace) -> int:
        token = args.token if args.token is not None else os.environ.get(ENV_TOKEN) or None
        try:
            options = ServeOptions(
                token=token,
                timeout=args.timeout,
                read_timeout=args.read_timeout,
                max_body=args.max_body,
                threads=args.threads,
                access_log=not args.no_access_log,
            )
            return run(
                args.target,
                host=args.host,
                port=args.port,
                workers=args.workers,
                function=args.function,
                options=options,
                max_connections=args.max_connections,
                log_level=args.log_level,
            )
        except ServeError as exc:
            print(f"pytest-reward serve: error: {exc}", file=sys.stderr)
            return 2
        except ImportError as exc:
            print(
                f"pytest-reward serve: error: {exc}; install the server: pip install 'pytest-reward[serve]'",
                file=sys.stderr,
            )
            return 2

    return handle
