"""Load benchmark of ``pytest-reward serve`` (issue 5).

2,000 ``POST /reward`` requests from 16 concurrent keep-alive loopback clients (aiohttp) against a server scoring
the seed tutorial's keyword-overlap reward (``examples/first-reward-function/metrics/relevance/main.py``); zero
errors required (HTTP status, ``is_score_valid`` and the score itself, checked against an in-process call).
Reports req/s and p50/p99 latency for:

* ``pytest-reward serve`` with its defaults (1 process, 8 threads, access log on, to a file);
* ``pytest-reward serve --workers 2`` (one process per core);
* the OpenRLHF route (``/openrlhf/get_reward``) with the defaults;
* the same function behind reward-kit 0.4.1's own server (``reward_kit.server.create_app`` on uvicorn with its
  defaults, access log on) in a separate venv, when it can be installed (it is cached by the test suite's helper
  in ``~/.cache/pytest-reward/clients/reward-kit-0.4.1``), and the ratio.

Usage::

    python bench/bench_serve.py [--requests 2000] [--concurrency 16] [--results bench/RESULTS.md]

``--results`` replaces (or appends) only the "## Reward server (issue 5)" section of that file, re-reading it
right before writing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as _dt
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import machine, write_section

SECTION = "## Reward server (issue 5)"
ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "first-reward-function"
REWARD_FILE = SEED / "metrics" / "relevance" / "main.py"

RK_SERVER = """
import importlib.util, socket, sys
import uvicorn
from reward_kit.server import create_app

spec = importlib.util.spec_from_file_location("seed_relevance", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # as uvicorn.run's own socket
sock.bind(("127.0.0.1", 0))
sock.listen(2048)
print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
uvicorn.Server(uvicorn.Config(create_app(module.evaluate))).run(sockets=[sock])
"""


# --- workload ------------------------------------------------------------------------------------------------------


def load_samples() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (SEED / "samples.jsonl").read_text().splitlines() if line.strip()]
    return [{"messages": row["messages"]} for row in rows]


def expected_scores(samples: list[dict[str, Any]]) -> list[float]:
    """The in-process scores, to check every answer of every server."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("seed_relevance_local", REWARD_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [
        module.evaluate(messages=s["messages"], original_messages=s["messages"][:-1]).score for s in samples
    ]


def openrlhf_body(sample: dict[str, Any]) -> dict[str, Any]:
    """The sample as OpenRLHF sends it: a ChatML-templated prompt, the query = prompt + response + EOS."""
    user, reply = sample["messages"][0]["content"], sample["messages"][-1]["content"]
    prompt = f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    return {"query": [prompt + reply + "<|im_end|>"], "prompts": [prompt], "labels": [""]}


async def drive(
    url: str, route: str, samples: list[dict[str, Any]], expected: list[float], n: int, concurrency: int
) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(n))
    openrlhf = route != "/reward"
    bodies = [openrlhf_body(s) if openrlhf else s for s in samples]

    async def client(session: aiohttp.ClientSession) -> None:
        for i in counter:
            k = i % len(samples)
            started = time.perf_counter()
            try:
                async with session.post(url + route, json=bodies[k]) as response:
                    status = response.status
                    body = await response.json()
            except Exception as exc:  # every failure is counted, none is retried
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - started)
            if status != 200:
                errors.append(f"HTTP {status}: {str(body)[:200]}")
                continue
            score = body["rewards"][0] if openrlhf else body["score"]
            valid = (
                (body["extra_logs"]["evaluate_valid"][0] == 1.0)
                if openrlhf
                else body.get("is_score_valid", True)
            )
            if not valid or abs(score - expected[k]) > 1e-9:
                errors.append(f"sample {k}: score {score} (valid {valid}), expected {expected[k]}")

    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        warm = iter(range(min(100, n)))
        for _ in warm:  # warm-up: connections, imports, caches
            async with session.post(url + route, json=bodies[0]) as response:
                await response.read()
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": n,
        "errors": len(errors),
        "first_errors": errors[:5],
        "wall": wall,
        "rps": n / wall,
        "p50_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else float("nan"),
    }


# --- servers -------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def server(
    command: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start a server subprocess that prints ``listening on http://...``; yield its URL and process; stop it
    with SIGINT."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent, env=env)
        try:
            deadline = time.monotonic() + 120
            url = None
            while url is None:
                match = re.search(r"listening on (http://[\d.]+:\d+)", log.read_text(errors="replace"))
                if match:
                    url = match.group(1)
                elif proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {shlex.join(command)}\n{log.read_text()}")
                else:
                    time.sleep(0.05)
            _wait_health(url, proc, log)
            yield url, proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


def _wait_health(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server never answered /health\n{log.read_text()}")
        time.sleep(0.05)


def reward_kit_python() -> tuple[str | None, str]:
    """reward-kit 0.4.1's venv (made and cached by the test suite's helper), or None and why not."""
    sys.path.insert(0, str(ROOT))
    try:
        import pytest

        from tests.deploy.conftest import reward_kit_python as ensure
    except ImportError as exc:
        return None, f"cannot use the test helpers ({exc})"
    try:
        return ensure(), ""
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        return None, str(exc)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and its live descendants (Linux /proc)."""
    ticks = 0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        children = []
        for task in os.listdir(f"/proc/{pid}/task"):
            children += Path(f"/proc/{pid}/task/{task}/children").read_text().split()
    except (OSError, IndexError, ValueError):
        return 0.0
    return ticks / os.sysconf("SC_CLK_TCK") + sum(tree_cpu(int(c)) for c in children)


# --- report --------------------------------------------------------------------------------------------------------


def versions(python: str, modules: str) -> str:
    code = f"import importlib.metadata as m; print(', '.join(f'{{n}} {{m.version(n)}}' for n in {modules.split()!r}))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()[-200:]


def render(
    runs: list[tuple[str, dict[str, Any]]],
    peer_note: str,
    command: str,
    n: int,
    concurrency: int,
    rounds: int,
) -> str:
    lines = [
        SECTION,
        "",
        f"- Date: {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {machine()}",
        f"- Command: `{command}`",
        f"- Workload: {n} `POST` requests from {concurrency} concurrent keep-alive loopback clients (aiohttp, in the "
        "same machine, so client and server share the 2 cores), after 100 warm-up requests; the seed tutorial's "
        "keyword-overlap reward (`examples/first-reward-function`, 10 samples round-robin); every answer checked "
        f"against an in-process call. {rounds} rounds, interleaved across the servers; medians of the rounds. "
        "Server CPU: user + system time of the server's processes per request (less sensitive than req/s to "
        "other load on the machine).",
        f"- Server stack: {versions(sys.executable, 'starlette uvicorn pydantic')}.",
        "",
        "| server | route | req/s | p50 ms | p99 ms | server CPU ms/request | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in runs:
        route = r["route"]
        lines.append(
            f"| {label} | `{route}` | {r['rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['cpu_ms']:.2f} "
            f"| {r['errors']} |"
        )
    lines.append("")
    lines.append(peer_note)
    lines.append("")
    lines.append(
        "`--workers 2` does not raise throughput here: the load generator runs on the same 2 cores, and this reward "
        "costs ~20 µs of the ~0.5 ms per request (the rest is HTTP parsing, validation and JSON). Processes pay off "
        "for CPU-heavy rewards on machines with cores to spare."
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines += ["", f"Load average (1 min) when the run ended: {load:.2f} on {os.cpu_count()} cores.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--results", type=Path, default=None, help="write the section into this markdown file"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--no-peer", action="store_true", help="skip reward-kit's server")
    args = parser.parse_args(argv)
    command = "python bench/bench_serve.py " + shlex.join(sys.argv[1:] if argv is None else argv)

    samples = load_samples()
    expected = expected_scores(samples)
    logs = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    ours = [sys.executable, "-m", "pytest_reward.cli", "serve", str(REWARD_FILE), "--port", "0"]
    configs = [
        ("pytest-reward serve", ours, "/reward"),
        ("pytest-reward serve --workers 2", [*ours, "--workers", "2"], "/reward"),
        ("pytest-reward serve", ours, "/openrlhf/get_reward"),
    ]
    peer_python, why = (None, "skipped (--no-peer)") if args.no_peer else reward_kit_python()
    if peer_python:
        # The seed tutorial's own import line (it was written for reward-kit); run isolated from this repository.
        source = REWARD_FILE.read_text()
        ours_import = "from pytest_reward import EvaluateResult, Message, MetricResult, reward_function"
        assert ours_import in source, "the seed's import line changed"
        peer_file = logs / "seed_relevance_reward_kit.py"
        peer_file.write_text(source.replace(ours_import, ours_import.replace("pytest_reward", "reward_kit")))
        peer = [peer_python, "-I", "-c", RK_SERVER, str(peer_file)]
        configs.append(("reward-kit 0.4.1 `create_app`", peer, "/reward"))
    commands = {label: cmd for label, cmd, _ in configs}
    collected: dict[tuple[str, str], list[dict[str, Any]]] = {
        (label, route): [] for label, _, route in configs
    }
    with contextlib.ExitStack() as stack:
        servers = {
            label: stack.enter_context(server(cmd, logs / f"server-{i}.log"))
            for i, (label, cmd) in enumerate(commands.items())
        }
        for round_ in range(args.rounds):  # interleaved, so that a burst of load elsewhere hits every server
            for label, _, route in configs:
                url, proc = servers[label]
                cpu = tree_cpu(proc.pid)
                result = asyncio.run(drive(url, route, samples, expected, args.requests, args.concurrency))
                result["cpu_ms"] = 1000 * (tree_cpu(proc.pid) - cpu) / (args.requests + 100)
                collected[(label, route)].append(result)
                print(
                    f"round {round_ + 1}: {label:34} {route:22} {result['rps']:7.0f} req/s  "
                    f"p50 {result['p50_ms']:6.2f} ms  p99 {result['p99_ms']:6.2f} ms  "
                    f"server CPU {result['cpu_ms']:.2f} ms/req  errors {result['errors']}",
                    flush=True,
                )
                for error in result["first_errors"]:
                    print("   ", error)
    runs: list[tuple[str, dict[str, Any]]] = []
    for (label, route), results in collected.items():
        runs.append(
            (
                label,
                {
                    "route": route,
                    "rps": statistics.median(r["rps"] for r in results),
                    "p50_ms": statistics.median(r["p50_ms"] for r in results),
                    "p99_ms": statistics.median(r["p99_ms"] for r in results),
                    "cpu_ms": statistics.median(r["cpu_ms"] for r in results),
                    "errors": sum(r["errors"] for r in results),
                },
            )
        )
    failed = [label for label, r in runs if r["errors"]]
    if peer_python:
        ratio = runs[0][1]["rps"] / runs[-1][1]["rps"]
        cpu_ratio = runs[-1][1]["cpu_ms"] / runs[0][1]["cpu_ms"]
        peer_note = (
            f"Same function, same workload, one process each: pytest-reward serve answers {ratio:.2f}× the requests/s "
            f"of reward-kit 0.4.1's server and uses 1/{cpu_ratio:.2f} of its CPU time per request "
            f"({versions(peer_python, 'reward-kit fastapi uvicorn pydantic')}; it calls the reward on its event "
            "loop, so one slow or hung reward stalls every request, and logs a warning per request, as it does for "
            "every decorated function). Ours runs the sync reward in a worker thread under a per-request timeout."
        )
        print(f"ratio (pytest-reward serve / reward-kit, one process each): {ratio:.2f}x")
    else:
        peer_note = f"reward-kit 0.4.1's server was not run: {why}"
        print(peer_note)
    if args.results:
        write_section(
            args.results,
            SECTION,
            render(runs, peer_note, command, args.requests, args.concurrency, args.rounds),
        )
        print(f"wrote {SECTION!r} in {args.results}")
    if failed:
        print(f"ERRORS in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
