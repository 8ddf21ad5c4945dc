"""XLA compilation bookkeeping: process-wide compile counters and the persistent compilation cache."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import jax

_BACKEND_COMPILE_EVENT = (
    "/jax/core/compile/backend_compile_duration"  # fired per compile request past jit's cache
)
_CACHE_HIT_EVENT = (
    "/jax/compilation_cache/cache_hits"  # fired when the persistent cache supplies the executable
)
_lock = threading.Lock()
_requests: Counter[str] = Counter()
_hits = 0
_installed = False


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    if event == _BACKEND_COMPILE_EVENT:
        with _lock:
            _requests[str(kwargs.get("fun_name", "?"))] += 1


def _on_event(event: str, **kwargs: Any) -> None:
    global _hits
    if event == _CACHE_HIT_EVENT:
        with _lock:
            _hits += 1


def install_compile_counter() -> None:
    """Start counting compiles in this process (idempotent; :class:`InferenceJob` calls it)."""
    global _installed
    with _lock:
        if _installed:
            return
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _installed = True


def backend_compile_count(fun_name: str | None = None) -> int:
    """Executables that had to be built since :func:`install_compile_counter`: requests that missed jit's
    in-memory cache, in total minus those the persistent cache answered, or (for one ``fun_name`` such as
    ``"jit(rollout)"``) including persistent-cache answers."""
    with _lock:
        if fun_name is not None:
            return _requests[fun_name]
        return sum(_requests.values()) - _hits


def persistent_cache_hits() -> int:
    """Executables loaded from the persistent compilation cache since :func:`install_compile_counter`."""
    with _lock:
        return _hits


def enable_compilation_cache(directory: str | Path) -> Path:
    """Turn on jax's persistent compilation cache in ``directory`` (process-wide; every compile is cached).

    A new process then loads executables instead of recompiling them (``tests/jax/test_data_parallel.py``
    checks that a second process builds nothing). Returns the directory.
    """
    path = Path(directory).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
