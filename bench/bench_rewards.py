"""Benchmark of the built-in rewards (issue 6).

* samples/s of ``math_reward`` and ``format_reward`` on the same 10,000 generated samples, ours and, when
  ``--peer-python`` points at a Python with ``reward-kit==0.4.1`` installed, reward-kit's (run in a subprocess of
  that interpreter, on the same samples file), with the ratios and the share of samples both score alike;
* sandboxed executions/s of a trivial program (``print(1)``), sequential and with two threads.

Usage::

    python bench/bench_rewards.py --peer-python /tmp/rk-venv/bin/python [--results bench/RESULTS.md]

The peer venv is a throwaway one outside the repository:
``python3.11 -m venv /tmp/rk-venv && /tmp/rk-venv/bin/pip install reward-kit==0.4.1 "mcp<2"``.
``--results`` replaces (or appends) only the "## Built-in rewards (issue 6)" section of that file.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import machine, write_section

SECTION = "## Built-in rewards (issue 6)"
ROOT = Path(__file__).resolve().parents[1]


# --- samples ---------------------------------------------------------------------------------------------


def make_samples(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` deterministic samples: a math-style response, its ground truth, and a format-style response."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        truth = a + b
        answer = truth if rng.random() < 0.7 else truth + rng.randint(1, 9)
        style = i % 5
        if style == 0:
            text = f"We add {a} and {b}. The answer is \\boxed{{{answer}}}."
        elif style == 1:
            text = f"Adding the numbers gives {answer}"
        elif style == 2:
            text = f"<think>\n{a} + {b}\n</think>\n<answer>\n{answer}\n</answer>"
        elif style == 3:
            text = f"First {a}, then {b}.\n#### {answer}"
        else:
            text = f"$\\frac{{{2 * answer}}}{{2}}$ is the result, i.e. \\boxed{{\\frac{{{2 * answer}}}{{2}}}}"
        formatted = (
            f"<think>\nReason about {a} + {b} step by step.\n</think>\n<answer>\n{answer}\n</answer>"
            if rng.random() < 0.6
            else f"The answer is {answer}."
        )
        samples.append(
            {
                "math": [
                    {"role": "user", "content": f"What is {a} + {b}?"},
                    {"role": "assistant", "content": text},
                ],
                "ground_truth": str(truth),
                "format": [
                    {"role": "user", "content": "Think, then answer."},
                    {"role": "assistant", "content": formatted},
                ],
            }
        )
    return samples


# --- timing (runs in either interpreter: stdlib only) -----------------------------------------------------


def time_rewards(math_fn: Any, format_fn: Any, samples: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    """Best-of-``repeats`` wall time over all samples for each function, and the scores of the last pass."""
    out: dict[str, Any] = {}
    for name, call in (
        ("math_reward", lambda s: math_fn(messages=s["math"], ground_truth=s["ground_truth"])),
        ("format_reward", lambda s: format_fn(messages=s["format"])),
    ):
        times, scores = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            scores = [float(call(s).score) for s in samples]
            times.append(time.perf_counter() - start)
        out[name] = {"seconds": min(times), "median_seconds": statistics.median(times), "scores": scores}
    return out


def peer_main(samples_path: str, repeats: int) -> None:
    """Entry point inside the peer interpreter: time reward-kit's functions, print JSON."""
    import warnings

    warnings.simplefilter("ignore")
    import reward_kit  # noqa: F401  (import cost is not timed)
    from reward_kit.rewards.format import format_reward
    from reward_kit.rewards.math import math_reward

    samples = [json.loads(line) for line in Path(samples_path).read_text().splitlines()]
    result = time_rewards(math_reward, format_reward, samples, repeats)
    result["version"] = __import__("importlib.metadata").metadata.version("reward-kit")
    print(json.dumps(result))


# --- our side ----------------------------------------------------------------------------------------------


def sandbox_rate(runs: int) -> dict[str, float]:
    from pytest_reward.rewards.sandbox import run_code, sandbox_protections

    sandbox_protections()  # warm up (probe run)
    start = time.perf_counter()
    for _ in range(runs):
        assert run_code("print(1)").stdout == "1\n"
    sequential = runs / (time.perf_counter() - start)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        outputs = list(pool.map(lambda _: run_code("print(1)").stdout, range(runs)))
    assert outputs == ["1\n"] * runs
    threaded = runs / (time.perf_counter() - start)
    return {"sequential": sequential, "two_threads": threaded}


def agreement(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) < 1e-9 for x, y in zip(a, b, strict=True)) / len(a)


def render(report: dict[str, Any], command: str) -> str:
    ours, peer = report["ours"], report.get("peer")
    n = report["samples"]
    lines = [
        SECTION,
        "",
        f"- Date: {report['date']}",
        f"- Machine: {report['machine']}",
        f"- Command: `{command}`",
        f"- Samples: {n} generated (seed 0; boxed, plain, tagged, GSM8K and LaTeX-fraction answers, 70 % correct);"
        f" best of {report['repeats']} passes, dict messages, through each package's own decorator.",
        "",
        "| reward | pytest-reward samples/s | reward-kit 0.4.1 samples/s | speed-up | same score |",
        "|---|---|---|---|---|",
    ]
    for name in ("math_reward", "format_reward"):
        our_rate = n / ours[name]["seconds"]
        if peer:
            peer_rate = n / peer[name]["seconds"]
            same = agreement(ours[name]["scores"], peer[name]["scores"])
            lines.append(
                f"| `{name}` | {our_rate:,.0f} | {peer_rate:,.0f} | {our_rate / peer_rate:.2f}× | {same:.1%} |"
            )
        else:
            lines.append(f"| `{name}` | {our_rate:,.0f} | n/a | n/a | n/a |")
    if not peer:
        lines += ["", f"reward-kit not measured: {report.get('peer_error', 'no --peer-python given')}"]
    sb = report["sandbox"]
    lines += [
        "",
        f"Sandboxed executions of `print(1)` (full isolation: namespaces {', '.join(report['protections'].get('namespaces', []))},"
        f" Landlock ABI {report['protections'].get('landlock_abi')}, uid switch "
        f"{'yes' if report['protections'].get('uid') is not None else 'no'}): "
        f"{sb['sequential']:.1f}/s sequential, {sb['two_threads']:.1f}/s with two threads ({report['sandbox_runs']} runs each).",
        "",
    ]
    if peer:
        lines.append(
            '"same score": share of samples both implementations score identically. Samples scored differently,'
            " by answer style: "
            + (_differences(report) or "none")
            + " (see docs/rewards.md for the deliberate differences)."
        )
        lines.append("")
    lines += [f"Load average (1 min) when the run ended: {report['load']:.2f} on {os.cpu_count()} cores.", ""]
    return "\n".join(lines)


STYLES = ("boxed", "plain", "answer-tag", "GSM8K ####", "LaTeX fraction")


def _differences(report: dict[str, Any]) -> str:
    parts = []
    for name in ("math_reward", "format_reward"):
        ours, peer = report["ours"][name]["scores"], report["peer"][name]["scores"]
        counts: dict[str, int] = {}
        for i, (a, b) in enumerate(zip(ours, peer, strict=True)):
            if abs(a - b) > 1e-9:
                counts[STYLES[i % 5]] = counts.get(STYLES[i % 5], 0) + 1
        if counts:
            parts.append(f"`{name}`: " + ", ".join(f"{style} {n}" for style, n in sorted(counts.items())))
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sandbox-runs", type=int, default=100)
    parser.add_argument("--peer-python", help="python of a venv with reward-kit==0.4.1 (and mcp<2) installed")
    parser.add_argument("--results", type=Path, help="markdown file whose issue-6 section is replaced")
    parser.add_argument("--as-peer", metavar="SAMPLES_JSONL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.as_peer:
        peer_main(args.as_peer, args.repeats)
        return 0

    sys.path.insert(0, str(ROOT))
    from pytest_reward.rewards import format_reward, math_reward
    from pytest_reward.rewards.sandbox import sandbox_protections

    samples = make_samples(args.samples)
    report: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "samples": len(samples),
        "repeats": args.repeats,
        "sandbox_runs": args.sandbox_runs,
    }
    report["ours"] = time_rewards(math_reward, format_reward, samples, args.repeats)
    if args.peer_python:
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
            fh.write("\n".join(json.dumps(s) for s in samples))
        try:
            proc = subprocess.run(
                [
                    args.peer_python,
                    str(Path(__file__).resolve()),
                    "--as-peer",
                    fh.name,
                    "--repeats",
                    str(args.repeats),
                ],
                capture_output=True,
                text=True,
                cwd=tempfile.gettempdir(),  # never import this repository from the peer
                timeout=3600,
            )
            if proc.returncode == 0:
                report["peer"] = json.loads(proc.stdout.strip().splitlines()[-1])
            else:
                report["peer_error"] = f"peer run failed: {proc.stderr.strip().splitlines()[-1:]}"
        finally:
            os.unlink(fh.name)
    report["sandbox"] = sandbox_rate(args.sandbox_runs)
    report["protections"] = sandbox_protections()
    report["load"] = os.getloadavg()[0]

    for name in ("math_reward", "format_reward"):
        ours = len(samples) / report["ours"][name]["seconds"]
        line = f"{name:15s} ours {ours:10,.0f} samples/s"
        if "peer" in report:
            peer = len(samples) / report["peer"][name]["seconds"]
            same = agreement(report["ours"][name]["scores"], report["peer"][name]["scores"])
            line += (
                f" | reward-kit {peer:10,.0f} samples/s | ratio {ours / peer:5.2f}x | same score {same:.1%}"
            )
        print(line)
    if "peer_error" in report:
        print(report["peer_error"])
    print(
        f"sandbox print(1): {report['sandbox']['sequential']:.1f}/s sequential, {report['sandbox']['two_threads']:.1f}/s two threads"
    )
    if args.results:
        command = "python bench/bench_rewards.py " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
        )
        write_section(args.results, SECTION, render(report, command))
        print(f"wrote {SECTION!r} to {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
