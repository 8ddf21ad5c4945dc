"""Where reward functions run: in this process's threads (:class:`InProcess`), in worker processes
(:mod:`.process`) or on a Ray cluster (:mod:`.ray_cluster`); the common machinery is in :mod:`.base`, the worker
side in :mod:`.worker`."""

from __future__ import annotations

from pathlib import Path

from .base import (
    EXECUTORS,
    Executor,
    InProcess,
    RemoteExecutor,
    RewardExecutorWarning,
    available_cpus,
)
from .worker import ShipError

__all__ = [
    "EXECUTORS",
    "Executor",
    "InProcess",
    "RemoteExecutor",
    "RewardExecutorWarning",
    "ShipError",
    "available_cpus",
    "make_executor",
]


def make_executor(
    kind: str,
    *,
    workers: int | None,
    ray_address: str | None = None,
    ray_local: bool = False,
    rootdir: Path | None = None,
) -> Executor:
    """The executor ``kind`` (one of :data:`EXECUTORS`); Ray is imported only when it is chosen and used."""
    if kind == "process":
        from .process import ProcessExecutor

        return ProcessExecutor(workers)
    if kind == "ray":
        from .ray_cluster import RayExecutor

        return RayExecutor(workers, address=ray_address, local=ray_local, rootdir=rootdir)
    return InProcess(workers)
