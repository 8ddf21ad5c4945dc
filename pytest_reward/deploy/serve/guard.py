"""The outermost layer of the reward server: what a server on a shared network must refuse before any routing.

* Auth: with a token, every request needs ``Authorization: Bearer T``, ``X-Api-Key: T`` or ``?token=T`` (OpenRLHF
  and slime post to the URL as given, without headers); compared in constant time; 401 otherwise.
* Limits: a body over ``max_body`` bytes gets 413 (as soon as ``Content-Length`` says so, or when the streamed
  body passes it); a body not received within ``read_timeout`` gets 408; both close the connection.
* Request headers must arrive within ``read_timeout`` too: :func:`guarded_protocol` is uvicorn's h11 protocol with
  that deadline (uvicorn has none) and ``TCP_NODELAY`` on every connection.
* One access-log line per request (client, method, path without the query string, status, duration).

Plain ASGI and the standard library; h11 and uvicorn are imported by :func:`guarded_protocol` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

__all__ = ["Guard", "access_log", "guarded_protocol"]

access_log = logging.getLogger("pytest_reward.serve.access")


async def _send_json(
    send: Callable[..., Any],
    status: int,
    body: dict[str, str],
    *,
    close: bool = False,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    if close:
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


class Guard:
    """ASGI middleware: access log, auth, body size limit and body read timeout, before ``app`` sees a request
    (which then gets the whole body in one message)."""

    def __init__(
        self, app: Any, *, token: str | None, max_body: int, read_timeout: float, access_log: bool = True
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.log_requests = access_log

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
        logged = not self.log_requests

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
        too_large = {"detail": f"request body over the {self.max_body}-byte limit"}
        for key, value in scope.get("headers", ()):
            if key == b"content-length" and value.isdigit() and int(value) > self.max_body:
                await _send_json(send, 413, too_large, close=True)
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                detail = f"request body not received within {self.read_timeout:g} s"
                await _send_json(send, 408, {"detail": detail}, close=True)
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _send_json(send, 413, too_large, close=True)
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


# --- the HTTP protocol: a deadline on request headers ---------------------------------------------------------------


@functools.cache
def guarded_protocol() -> type:
    """uvicorn's h11 protocol with a deadline on receiving a request's headers (uvicorn has none: a client that
    trickles header bytes would hold its connection forever). The deadline, ``config.pytest_reward_read_timeout``
    seconds, runs from the first moment the connection waits for a request and is not extended by each byte; when
    it passes, the connection is closed."""
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
        return guarded_protocol()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
