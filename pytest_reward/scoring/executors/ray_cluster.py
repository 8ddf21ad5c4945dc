"""``--reward-executor ray``: chunks of samples as Ray tasks, on a local Ray started for the run or on a cluster.

Ray is imported here only, when the executor is first used (``pip install 'pytest-reward[ray]'``).

* No ``--reward-ray-address``: a local Ray is started for the run (``ray.init(address="local")``; ``RAY_ADDRESS`` is
  not followed), every listener on 127.0.0.1, no dashboard, ``--reward-workers`` CPUs when given, and shut down at
  the end of the session. Its workers import the project from where it is on disk. Under pytest-xdist the
  controller starts it and the pytest workers join it.
* ``--reward-ray-address ADDR`` (``host:port`` of the cluster's GCS, or ``ray://host:10001`` through Ray Client):
  the driver joins that cluster with ``runtime_env={"working_dir": <rootdir>, "py_modules": [pytest_reward]}``, so
  the workers import the project's reward modules and this version of pytest-reward from the shipped copies (``.git``,
  virtualenvs, ``.reward``, caches and ``*.jsonl`` files are left out: samples are streamed by the controller). The
  cluster's Python needs pytest-reward's dependencies (pydantic, numpy).

The task is :func:`pytest_reward.scoring.executors.worker.score_chunk`, shipped by reference (``max_retries=0``: the
stream's own retry, reported, replaces Ray's silent one). A task lost with its worker or node (``WorkerCrashedError``,
``NodeDiedError``, ``ObjectLostError`` ...) is reported lost and retried by the stream; cancellation is
``ray.cancel(force=True)``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from .base import RemoteExecutor
from .worker import FunctionRef, score_chunk

__all__ = ["EXCLUDES", "RayExecutor", "start_local"]

#: Left out of the working directory shipped to a cluster.
EXCLUDES = [
    ".git",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".reward",
    ".pytest_cache",
    ".hypothesis",
    ".mypy_cache",
    ".ruff_cache",
    "__pycache__",
    "node_modules",
    "*.jsonl",
]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("--reward-executor ray needs Ray: pip install 'pytest-reward[ray]'") from None
    return ray


#: Where a local Ray of this run keeps its sessions' sockets and logs: ``<prefix><pid>-*`` in the temp directory,
#: removed when the run closes its Ray and, when the run was killed, by the next run (its pid is gone). Short: Ray's
#: socket paths inside it must stay under 108 bytes.
RAY_DIR_PREFIX = "prr-"


def _ray_temp_dir() -> str | None:
    """A directory of this run's own for a local Ray (None: the user chose one with ``RAY_TMPDIR``)."""
    if os.environ.get("RAY_TMPDIR"):
        return None
    import tempfile

    from ...atomic import remove_dead_owners

    base = tempfile.gettempdir()
    if len(base) > 40:  # Ray's socket paths would not fit: a short base of the same kind
        base = "/tmp"
    remove_dead_owners(Path(base), RAY_DIR_PREFIX)
    return tempfile.mkdtemp(prefix=f"{RAY_DIR_PREFIX}{os.getpid()}-", dir=base)


def start_local(num_cpus: int | None, temp_dir: str | None = None) -> str:
    """Start a local Ray for this process (loopback only, no dashboard) and return its address; its sessions
    live in ``temp_dir`` when given."""
    # Ray takes the node's address from a route to a public address, and binds its servers to every interface,
    # unless it is told at import that this node is no cluster member (ray_constants.ENABLE_RAY_CLUSTER, read from
    # this variable when ray is first imported): then every listener stays on 127.0.0.1. A local run must not
    # listen on the network (an open Ray runs code for anyone who reaches it), so this is forced, not defaulted.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = _ray()
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and getattr(constants, "ENABLE_RAY_CLUSTER", False):
        constants.ENABLE_RAY_CLUSTER = False  # ray was imported before (a conftest): it read the variable then
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=False,
        **({"_temp_dir": temp_dir} if temp_dir else {}),
    )
    return str(ray.get_runtime_context().gcs_address)


class RayExecutor(RemoteExecutor):
    """Ray tasks; ``workers``: chunks running at once (default: the cluster's CPUs)."""

    name = "ray"
    target = 0.25
    max_chunk = 8192

    def __init__(
        self, workers: int | None, *, address: str | None, local: bool, rootdir: Path | None
    ) -> None:
        super().__init__()
        self.workers = workers
        self.address = address
        self.local = local
        """The cluster at ``address`` runs on this machine with this project (pytest-xdist workers joining the
        controller's local Ray): nothing is shipped."""
        self.rootdir = rootdir
        self._ray: Any = None
        self._remote: Any = None
        self._owned = False
        self._refs: dict[Any, int] = {}
        self._slots = 1
        self.cluster_address: str | None = None
        self._temp_dir: str | None = None

    def start(self) -> None:
        if self._ray is not None:
            return
        ray = _ray()
        if ray.is_initialized():
            pass  # a conftest (or the test) started Ray: use it, and leave it running
        elif self.address is None:
            self._temp_dir = _ray_temp_dir()
            start_local(self.workers, self._temp_dir)
            self._owned = True
        else:
            runtime_env = None
            if not self.local and self.rootdir is not None:
                import pytest_reward

                runtime_env = {
                    "working_dir": str(self.rootdir),
                    "py_modules": [str(Path(pytest_reward.__file__).parent)],
                    "excludes": [*EXCLUDES, "jax/models"],
                }
            ray.init(
                address=self.address,
                runtime_env=runtime_env,
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
            self._owned = True
        self._ray = ray
        self.cluster_address = str(ray.get_runtime_context().gcs_address)
        self._remote = ray.remote(max_retries=0)(score_chunk)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self._slots = max(1, self.workers or cpus)

    def _capacity(self) -> int:
        return 2 * self._slots

    def _submit(self, task_id: int, ref: FunctionRef, payload: list[Any]) -> None:
        self._refs[self._remote.remote(ref, payload)] = task_id

    def _collect(self, block: bool) -> list[tuple[int, str, Any, float]]:
        ray = self._ray
        refs = list(self._refs)
        ready: list[Any] = []
        while refs:
            # A short timeout, so that Ctrl-C is seen between waits (a wait inside Ray's C++ core is not
            # interrupted by Python's signal handler).
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.5 if block else 0)
            if ready or not block:
                break
        if not ready:
            return []
        more, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ready = list(dict.fromkeys([*ready, *more]))
        answers = []
        for ref in ready:
            task_id = self._refs.pop(ref)
            try:
                status, value, seconds = ray.get(ref)
            except ray.exceptions.RayError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                answers.append((task_id, "died", f"{type(exc).__name__}: {first}"[:300], 0.0))
                continue
            answers.append((task_id, status, value, seconds))
        return answers

    def _cancel(self, task_ids: list[int]) -> None:
        wanted = set(task_ids)
        for ref, task_id in list(self._refs.items()):
            if task_id in wanted:
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # already finished, or its node is gone
                    pass
                del self._refs[ref]

    def close(self) -> None:
        if self._ray is not None and self._owned:
            self._ray.shutdown()
        self._ray = None
        self._refs.clear()
        if self._temp_dir is not None:  # the local Ray's session logs and sockets: this run's, gone with it
            import shutil

            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
