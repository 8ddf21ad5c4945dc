"""Start N local processes of one ``jax.distributed`` run (coordinator on 127.0.0.1, a free port, two CPU devices
per process), wait for them within a deadline, and kill every process group that is still there afterwards."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Finished:
    returncode: int | None  # None: still running at the deadline (then killed)
    stdout: str
    stderr: str
    seconds: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(
    process: int | None, count: int, port: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "SLURM_", "PYTEST_REWARD_"))}
    env.update(
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        PYTHONUNBUFFERED="1",
    )
    if process is not None:
        env.update(
            JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
            JAX_NUM_PROCESSES=str(count),
            JAX_PROCESS_ID=str(process),
        )
    env.update(extra or {})
    return env


def run_processes(
    argv: Sequence[str],
    workdir: Path,
    *,
    count: int = 2,
    deadline: float = 120.0,
    env: dict[str, str] | None = None,
    alone: bool = False,
    during: Callable[[list[subprocess.Popen]], None] | None = None,
    cwds: Sequence[Path] | None = None,
) -> list[Finished]:
    """Run ``argv`` as processes 0..count-1 of one run (``alone``: one process without a coordinator), each in its
    own process group, output to files under ``workdir``. ``during(processes)`` runs while they run (to signal
    them). ``cwds``: each process's working directory (default ``workdir``: one host's disk for all). Every process
    group still alive at the end is killed with SIGKILL."""
    port = free_port()
    ids: list[int | None] = [None] if alone else list(range(count))
    procs, files = [], []
    started = time.monotonic()
    try:
        for i in ids:
            tag = "alone" if i is None else str(i)
            out = open(workdir / f"stdout-{tag}.txt", "w")  # noqa: SIM115
            err = open(workdir / f"stderr-{tag}.txt", "w")  # noqa: SIM115
            files += [out, err]
            procs.append(
                subprocess.Popen(
                    list(argv),
                    cwd=workdir if cwds is None else cwds[len(procs)],
                    env=environment(i, count, port, env),
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            )
        if during is not None:
            during(procs)
        finished: list[float | None] = [None] * len(procs)
        while time.monotonic() - started < deadline and None in finished:
            for k, p in enumerate(procs):
                if finished[k] is None and p.poll() is not None:
                    finished[k] = time.monotonic() - started
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait(timeout=30)
        for f in files:
            f.close()
    results = []
    for k, i in enumerate(ids):
        tag = "alone" if i is None else str(i)
        results.append(
            Finished(
                None if finished[k] is None else procs[k].returncode,
                (workdir / f"stdout-{tag}.txt").read_text(errors="replace"),
                (workdir / f"stderr-{tag}.txt").read_text(errors="replace"),
                finished[k] if finished[k] is not None else deadline,
            )
        )
    return results


PYTHON = sys.executable
