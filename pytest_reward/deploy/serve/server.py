"""Running the reward server: bind the socket, start uvicorn with one process or ``--workers N``.

Worker processes share the parent's socket and load the target themselves: the parent passes its settings in the
environment (:data:`~.options.ENV_CONFIG`) to :func:`app_from_env`, uvicorn's app factory. uvicorn is imported
when a server starts.

A ``.tar.gz`` bundle is extracted once, by the parent, into a temporary directory that is removed on every exit:
a normal return, an error, Ctrl-C (SIGINT) and SIGTERM, whether the signal comes while the bundle loads, while it
is served, or while uvicorn shuts down. uvicorn stops gracefully on both signals and then raises the signal again
with the handler it found installed; for SIGTERM that handler is ours (:func:`_stop_on_sigterm`), which unwinds
like Ctrl-C does instead of letting the default action kill the process before the directory is removed. Stopped
by a signal, the server exits with status 0. Only SIGKILL leaves the directory behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...errors import BundleError, ServeError
from ..runtime import extract_tarball, is_tarball
from .app import create_app, log
from .guard import access_log
from .loading import load_target
from .options import ENV_CONFIG, ENV_TOKEN, ServeOptions

__all__ = ["app_from_env", "bind", "run"]


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


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), inheritable by worker processes;
    ``ServeError`` naming the address when it cannot listen."""
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
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Stopped(BaseException):
    """SIGTERM: unwind to :func:`run` (a ``BaseException``, like ``KeyboardInterrupt``, so no handler swallows it)."""


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped(signum)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`_Stopped` in the main thread (uvicorn installs its own handler while it serves and
    puts this one back before raising the signal again)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _unpacked(target_spec: str) -> Iterator[str]:
    """``target_spec``, or for a ``.tar.gz`` the directory it is extracted to, removed when the block exits."""
    path = Path(target_spec)
    if not is_tarball(path):
        yield target_spec
        return
    with tempfile.TemporaryDirectory(prefix="pytest-reward-serve-") as directory:
        try:
            extract_tarball(path, Path(directory))
        except BundleError as exc:
            raise ServeError(f"bad bundle: {exc}") from None
        yield directory


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
    """Load ``target_spec`` and serve it until interrupted (SIGINT, SIGTERM). Returns the exit code."""
    options = options or ServeOptions()
    if workers < 1:
        raise ServeError(f"--workers must be at least 1, not {workers}")
    try:
        with _stop_on_sigterm(), _unpacked(target_spec) as spec:
            return _serve(
                spec,
                host=host,
                port=port,
                workers=workers,
                function=function,
                options=options,
                max_connections=max_connections,
                log_level=log_level,
            )
    except (KeyboardInterrupt, _Stopped):  # uvicorn re-raises the signal it shut down for
        return 0


def _serve(
    target_spec: str,
    *,
    host: str,
    port: int,
    workers: int,
    function: str | None,
    options: ServeOptions,
    max_connections: int | None,
    log_level: str,
) -> int:
    import uvicorn

    _configure_logging(log_level)
    target = load_target(target_spec, function)
    sock = bind(host, port)
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
        "http": "pytest_reward.deploy.serve.guard:GuardedH11Protocol",
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
        uvicorn.Server(config).run(sockets=[sock])
        return 0
    from uvicorn.supervisors import Multiprocess

    settings = {**asdict(options), "location": target.location, "function": function, "log_level": log_level}
    os.environ[ENV_CONFIG] = json.dumps(settings)
    config = uvicorn.Config(f"{__name__}:app_from_env", factory=True, workers=workers, **common)
    config.pytest_reward_read_timeout = options.read_timeout  # type: ignore[attr-defined]
    Multiprocess(config, sockets=[sock]).run()  # type: ignore[call-arg]
    return 0
