"""Executors benchmark (issue 16): where ``file`` items score their samples — in the pytest process (``thread``), in
worker processes (``process``) or on a local Ray (``ray``) — each against the in-process run measured in the same
run, cases interleaved run by run.

1. A CPU-bound reward (a pure-Python loop calibrated to ~5 ms per sample in this process), 400 and 4,000 samples,
   ``--reward-workers 2``: the time of the scoring item (its call phase, timed by a ``pytest_runtest_call`` wrapper
   in the project's conftest) in-process vs ``process`` vs ``ray``. Targets: ``process`` ≥ 1.8×, ``ray`` ≥ 1.6×
   (2 cores). Ray is started by the conftest before the session (``start_local(2)``, what the executor itself does
   without an address), so the item times the scoring of a running cluster; that start is reported on its own, and
   the whole wall of each run is shown too (pytest start-up, collection, and for ``process`` the workers' start).
2. A trivial reward, 1,000,000 samples, ``file`` mode: the overhead per sample of ``process`` and ``ray`` over the
   in-process run (µs/sample of item time), and the controller's rate: samples per second of the pytest process's
   own CPU time during the item (reading the file, sending chunks, decoding rows, folding) — the most samples per
   second one controller can feed to any number of workers.
3. ``-n 2`` (pytest-xdist, ``sample`` items: the row of bench_core.py's benchmark 5) vs ``--reward-executor process``
   (file items, 2 workers) on the 400 × ~5 ms project: whole wall, both against the plain ``-n 0`` run.

Every pytest run is a fresh subprocess in a temporary project (``python -m pytest -q -p no:cacheprovider``).

Usage::

    .venv/bin/python bench/bench_executors.py [--quick] [--runs 3] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, write_section
from bench_core import (
    BUSY_REWARDS,
    TRIVIAL_REWARDS,
    calibrate_loops,
    clean_env,
    load,
    snapshot,
    write_samples,
)

SECTION = "## Executors (issue 16)"
ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]

CONFTEST = '''\
"""Times the call phase of each item (wall and this process's CPU) into $BENCH_OUT; starts Ray first when asked."""
import json, os, time

import pytest

_ray_start = {}


def pytest_configure(config):
    cpus = os.environ.get("BENCH_RAY_PRESTART")
    if cpus and not hasattr(config, "workerinput"):
        start = time.perf_counter()
        from pytest_reward.scoring.executors.ray_cluster import start_local

        start_local(int(cpus))
        _ray_start["ray_start"] = time.perf_counter() - start


def pytest_unconfigure(config):
    if _ray_start:
        import ray

        ray.shutdown()


def _tree_cpu():
    """CPU seconds of each process under this one (workers, Ray's processes), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    tree, todo = set(), [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                todo.append(pid)
    return {pid: stats[pid][1] for pid in tree}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    before = _tree_cpu()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        record = {"item": item.nodeid, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
        after = _tree_cpu()
        record["others"] = sorted((t - before.get(pid, 0.0) for pid, t in after.items()), reverse=True)[:8]
        with open(os.environ["BENCH_OUT"], "a") as out:
            out.write(json.dumps({**record, **_ray_start}) + "\\n")
'''


def make_project(directory: Path, rewards: str, sizes: list[int]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pytest.ini").write_text("[pytest]\n")
    (directory / "rewards.py").write_text(rewards)
    (directory / "conftest.py").write_text(CONFTEST)
    for n in sizes:
        write_samples(directory / f"samples_{n}.jsonl", n)
    return directory


#: The code measured: ``pytest_reward/`` exported at ``--ref`` (others edit the working tree meanwhile), set by main.
SOURCE: dict[str, Any] = {"src": None, "workdir": None}


def run(directory: Path, args: list[str], *, ray_prestart: int | None = None) -> dict[str, Any]:
    """One pytest run: its whole wall, and the call phase of its item (wall, CPU of the pytest process)."""
    out = directory / f"timing-{os.getpid()}-{time.monotonic_ns()}.jsonl"
    env = clean_env(SOURCE["workdir"] or directory, SOURCE["src"])  # workers and Ray's inherit it
    env.update(BENCH_OUT=str(out), RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    if ray_prestart:
        env["BENCH_RAY_PRESTART"] = str(ray_prestart)
    start = time.perf_counter()
    # A session of its own, as a run started from a shell has: where the kernel schedules by session (autogroup,
    # as on this machine), every case gets its own share, whatever else runs.
    proc = subprocess.run(
        [*PYTEST, *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        start_new_session=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1) or "passed" not in proc.stdout:
        raise RuntimeError(
            f"{shlex.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    out.unlink(missing_ok=True)
    item = {
        "wall": sum(r["wall"] for r in records),
        "cpu": sum(r["cpu"] for r in records),
        # the busiest process's CPU during the item (the pytest process or a worker): what the item would take on
        # an idle machine with a core per process
        "critical": max(max([r["cpu"], *r["others"]]) for r in records) if records else 0.0,
    }
    return {"wall": wall, "item": item, "ray_start": records[0].get("ray_start") if records else None}


def median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wall": statistics.median(r["wall"] for r in results),
        "item": statistics.median(r["item"]["wall"] for r in results),
        "item_cpu": statistics.median(r["item"]["cpu"] for r in results),
        "critical": statistics.median(r["item"]["critical"] for r in results),
        "ray_start": statistics.median(r["ray_start"] for r in results) if results[0]["ray_start"] else None,
        "runs": len(results),
    }


EXECUTORS = {
    "in-process": [],
    "process": ["--reward-executor", "process", "--reward-workers", "2"],
    "ray": ["--reward-executor", "ray", "--reward-workers", "2"],
}


def bench_cpu_bound(work: Path, sizes: list[int], ms: float, runs: int) -> dict[str, Any]:
    loops = calibrate_loops(ms)
    directory = make_project(work / "cpu", BUSY_REWARDS.format(loops=loops, ms=ms), sizes)
    out: dict[str, Any] = {"ms": ms, "loops": loops, "sizes": {}, "load": [load()]}
    for n in sizes:
        base = [
            "--reward-samples",
            f"samples_{n}.jsonl",
            "--reward-granularity",
            "file",
            "--reward-threshold",
            "0.5",
        ]
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in EXECUTORS}
        for _ in range(runs):  # interleaved: each round runs every executor once
            for name, extra in EXECUTORS.items():
                results[name].append(run(directory, base + extra, ray_prestart=2 if name == "ray" else None))
                print(f"  cpu-bound {n}: {name} item {results[name][-1]['item']['wall']:.2f} s", flush=True)
        out["sizes"][n] = {name: median_of(rs) for name, rs in results.items()}
    out["load"].append(load())
    return out


def bench_trivial(work: Path, n: int, runs: int) -> dict[str, Any]:
    directory = make_project(work / "trivial", TRIVIAL_REWARDS, [n])
    base = [
        "--reward-samples",
        f"samples_{n}.jsonl",
        "--reward-granularity",
        "file",
        "--reward-threshold",
        "0.5",
    ]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in EXECUTORS}
    out: dict[str, Any] = {"n": n, "load": [load()]}
    for _ in range(runs):
        for name, extra in EXECUTORS.items():
            results[name].append(run(directory, base + extra, ray_prestart=2 if name == "ray" else None))
            print(f"  trivial {n}: {name} item {results[name][-1]['item']['wall']:.2f} s", flush=True)
    out["cases"] = {name: median_of(rs) for name, rs in results.items()}
    out["load"].append(load())
    return out


def bench_xdist(work: Path, n: int, ms: float, runs: int) -> dict[str, Any]:
    directory = work / "cpu"
    base = ["--reward-samples", f"samples_{n}.jsonl", "--reward-threshold", "0.5"]
    cases = {
        "-n 0 (sample items, in-process)": ["--reward-granularity", "sample"],
        "-n 2 (sample items, pytest-xdist)": ["--reward-granularity", "sample", "-n", "2"],
        "--reward-executor process (file item, 2 workers)": [
            "--reward-executor",
            "process",
            "--reward-workers",
            "2",
        ],
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, extra in cases.items():
            results[name].append(run(directory, base + extra))
            print(f"  xdist {n}: {name} wall {results[name][-1]['wall']:.2f} s", flush=True)
    return {"n": n, "ms": ms, "cases": {name: median_of(rs) for name, rs in results.items()}}


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def render(report: dict[str, Any], command: str) -> str:
    lines = [
        SECTION,
        "",
        f"- Date: {report['date']}",
        f"- Machine: {report['machine']} (shared with other engineers' jobs while it ran: load average before → "
        f"after each part: {report['loads']}; wall-clock figures are noisy, compare the ratios of one run)",
        f"- Code measured: `pytest_reward` at {report['code']}",
        f"- Command: `{command}`",
        "- Every run a fresh `python -m pytest -q -p no:cacheprovider` in a temporary project; cases interleaved run "
        'by run; medians of the runs. "item": the scoring item\'s call phase (a `pytest_runtest_call` wrapper in the '
        'project\'s conftest); "wall": the whole pytest run. Ray: a local Ray of 2 CPUs started by the conftest '
        "before the session (the executor's own `start_local`), so the item times the scoring, and its start is "
        "shown apart.",
        "",
    ]
    cpu = report["cpu"]
    lines += [
        f"### 1. CPU-bound reward (~{cpu['ms']:g} ms per sample, {cpu['loops']} loop iterations), 2 workers",
        "",
        "| samples | executor | item | speed-up vs in-process (item) | whole wall | target | | busiest process's CPU "
        "(speed-up) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, cases in cpu["sizes"].items():
        base = cases["in-process"]
        for name, case in cases.items():
            ratio = base["item"] / case["item"]
            target = {"process": 1.8, "ray": 1.6}.get(name)
            extra = f" (+ Ray start {case['ray_start']:.1f} s)" if case["ray_start"] else ""
            goal = f"≥ {target:.1f}×" if target else ""
            crit = (
                f"{case['critical']:.2f} s ({base['critical'] / case['critical']:.2f}×)"
                if case["critical"]
                else ""
            )
            lines.append(
                f"| {int(n):,} | `{name}` | {case['item']:.2f} s | {ratio:.2f}× | {case['wall']:.2f} s{extra} | "
                f"{goal} | {verdict(ratio >= target) if target else ''} | {crit} |"
            )
    triv = report["trivial"]
    base = triv["cases"]["in-process"]
    n = triv["n"]
    lines += [
        "",
        f"### 2. Trivial reward, {n:,} samples, `file` item, 2 workers",
        "",
        "| executor | item | µs/sample | overhead vs in-process | controller CPU during the item | controller rate |",
        "|---|---|---|---|---|---|",
    ]
    for name, case in triv["cases"].items():
        per = case["item"] / n * 1e6
        over = (case["item"] - base["item"]) / n * 1e6
        rate = n / case["item_cpu"] if case["item_cpu"] else float("nan")
        lines.append(
            f"| `{name}` | {case['item']:.2f} s | {per:.1f} | {'–' if name == 'in-process' else f'{over:+.1f} µs/sample'} | "
            f"{case['item_cpu']:.2f} s ({case['item_cpu'] / n * 1e6:.1f} µs/sample) | {rate:,.0f} samples/s |"
        )
    xd = report["xdist"]
    base = xd["cases"]["-n 0 (sample items, in-process)"]
    lines += [
        "",
        f"### 3. `-n 2` vs `--reward-executor process`, {xd['n']} samples × ~{xd['ms']:g} ms (auto granularity)",
        "",
        "| run | whole wall | speed-up vs `-n 0` |",
        "|---|---|---|",
    ]
    for name, case in xd["cases"].items():
        lines.append(f"| {name} | {case['wall']:.2f} s | {base['wall'] / case['wall']:.2f}× |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test of the script)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trivial-runs", type=int, default=1)
    parser.add_argument("--results", type=Path, help="RESULTS.md whose executors section is replaced")
    parser.add_argument("--only", default="1,2,3", help="comma-separated parts (default all)")
    parser.add_argument(
        "--ref", default="HEAD", help="git revision of pytest_reward/ to measure, or 'worktree'"
    )
    args = parser.parse_args(argv)
    sizes = [40, 400] if args.quick else [400, 4000]
    trivial_n = 20_000 if args.quick else 1_000_000
    runs = 1 if args.quick else args.runs
    parts = set(args.only.split(","))
    report: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
    }
    loads = []
    with tempfile.TemporaryDirectory(prefix="bench-executors-") as tmp:
        work = Path(tmp)
        SOURCE["workdir"] = work
        SOURCE["src"], report["code"] = snapshot(args.ref, work / "src")
        if "1" in parts or "3" in parts:
            report["cpu"] = bench_cpu_bound(work, sizes, 5.0, runs)
            loads.append("cpu-bound {:.1f} → {:.1f}".format(*report["cpu"]["load"]))
        if "2" in parts:
            report["trivial"] = bench_trivial(work, trivial_n, 1 if args.quick else args.trivial_runs)
            loads.append("trivial {:.1f} → {:.1f}".format(*report["trivial"]["load"]))
        if "3" in parts:
            before = load()
            report["xdist"] = bench_xdist(work, sizes[0], 5.0, runs)
            loads.append(f"-n 2 {before:.1f} → {load():.1f}")
    report["loads"] = ", ".join(loads) + f" on {os.cpu_count()} cores"
    command = "python bench/bench_executors.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if {"1", "2", "3"} <= parts:
        text = render(report, command.strip())
        print(text)
        if args.results:
            write_section(args.results, SECTION, text)
    else:
        print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
