"""Helpers shared by the benchmarks (run as scripts: ``bench/`` is on ``sys.path``)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name from ``lscpu``, else what ``platform`` knows."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or platform.machine() or "unknown CPU"
    found = re.search(r"^Model name:\s*(.+)$", out, re.MULTILINE)
    return found.group(1).strip() if found else platform.processor() or platform.machine()


def machine() -> str:
    """One line for RESULTS.md: CPU, cores, Python, OS."""
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def user_env(**extra: str) -> dict[str, str]:
    """The environment for timed subprocesses, as on a user's machine: Python caches bytecode (and pytest its
    assertion-rewritten modules; this sandbox sets PYTHONDONTWRITEBYTECODE, which slows every run)."""
    env = {**os.environ, **extra}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the ``heading`` section of ``path`` (or append it), leaving everything else as it is on disk now
    (others may have updated their own sections meanwhile); written atomically."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text.rstrip("\n") + "\n")
    os.replace(tmp, path)


def hf_generate_fn(hf: Any, tokens: Any, mask: Any, new: int, device: str = "cpu") -> Callable[[], object]:
    """transformers greedy ``generate`` of exactly ``new`` tokens for a left-padded batch (tokens and mask: (B, P)
    arrays or lists) on ``device`` (the model must be there), warmed up; on a GPU each call waits for the device."""
    import torch

    x = torch.tensor(tokens, dtype=torch.long, device=device)
    kw = dict(
        attention_mask=torch.tensor(mask, dtype=torch.long, device=device),
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        pad_token_id=0,
    )

    def run() -> object:
        with torch.no_grad():
            out = hf.generate(x, **kw)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    run()
    return run


def best(fn: Callable[[], object], reps: int) -> float:
    """The least wall-clock seconds of ``reps`` calls of ``fn``."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_rates(reps: int, n: int = 2048) -> tuple[float, float]:
    """GFLOP/s of one float32 ``n``^3 matmul, best of ``reps``: numpy's, and a jitted ``jnp.matmul``'s (warmed up)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = np.random.default_rng(1).random((n, n), dtype=np.float32)
    np_gf = 2 * n**3 / best(lambda: a @ b, reps) / 1e9
    mm = jax.jit(jnp.matmul)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    mm(ja, jb).block_until_ready()
    jx_gf = 2 * n**3 / best(lambda: mm(ja, jb).block_until_ready(), reps) / 1e9
    return np_gf, jx_gf


def best_interleaved(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Best-of-``reps`` seconds of each function, timed in alternation so that a burst of load from other
    processes on a shared machine hits every contender alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: min(v) for k, v in times.items()}


def per_step(
    time_long: Callable[[], float], time_short: Callable[[], float], steps: int, rounds: int = 4
) -> float | None:
    """Seconds per step from two timings of the same work, ``steps`` steps apart: ``(t_long - t_short) / steps``.

    A difference of two timings can drown in the host's noise (tiny shapes, a busy machine): while ``t_long`` is
    not above ``t_short`` another round of both is taken, each side keeping its least time, up to ``rounds``
    rounds; then ``None``: the step is not resolved, and a caller prints that instead of a figure it did not see.
    """
    t_long = t_short = float("inf")
    for _ in range(rounds):
        t_long, t_short = min(t_long, time_long()), min(t_short, time_short())
        if t_long > t_short:
            return (t_long - t_short) / steps
    return None


class Section:
    """A benchmark's RESULTS.md section: lines printed as they come and kept, then written under ``heading`` with
    the date, the jax version and the command that ran (``write``)."""

    def __init__(self, heading: str) -> None:
        self.heading = heading
        self.lines: list[str] = []

    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def write(self, path: Path) -> None:
        import sys

        import jax

        header = [
            self.heading,
            "",
            f"- date: {time.strftime('%Y-%m-%d %H:%M')}, jax {jax.__version__}",
            "- command: `python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]) + "`",
        ]
        write_section(path, self.heading, "\n".join(header + self.lines))
        print(f"wrote {path}")


def kernels_or_exit() -> Any:
    """The CPU kernels' status (``pytest_reward.jax.kernels.status()``), built and available; else the reason on
    stderr and exit status 2: a kernel benchmark has nothing to compare without them."""
    import sys

    from pytest_reward.jax import kernels

    status = kernels.status()
    if not status.available:
        print(f"the kernels are not available: {status.detail}", file=sys.stderr)
        sys.exit(2)
    return status
