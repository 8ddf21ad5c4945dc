"""Preference pairs in ``file`` granularity vs a plain loop calling the reward twice per pair (issue 32, part 1).

A JSONL file of ``--pairs`` preference pairs (RewardBench's shape: ``prompt``, ``chosen``, ``rejected``,
``subset``; the chosen answer boxed and right, the rejected one wrong), scored by a rule-based reward:

* pytest-reward: a whole ``pytest --reward-samples pairs.jsonl --reward-granularity file`` run with the reward's
  marker declaring ``pair_accuracy=0.9``, a fresh subprocess;
* the reference: a plain loop reading the same file line by line (``json.loads``), building each response's
  conversation (the prompt as the user turn, the response as the assistant turn), calling the raw reward function
  (``__wrapped__``: without the decorator) on the chosen and the rejected response, and counting the pairs whose
  chosen score is strictly higher.

Two rewards: the built-in ``math_reward`` (a real rule-based reward: answer extraction and numeric comparison,
~30-80 µs a call) and ``boxed``, a few-µs regex check (the worst case for the machinery's share). Median wall and
CPU of ``--runs`` interleaved runs each, after one warm-up run each. Target: the ratio ≤ 1.3× (``math_reward``).

Usage::

    .venv/bin/python bench/bench_preference.py [--pairs 100000] [--runs 3] [--results bench/RESULTS.md]

``--results`` replaces (or appends) only the "## Preference pairs (issue 32)" section of that file. The code
measured is ``pytest_reward/`` at ``--ref`` (default HEAD, exported to the work directory: others edit the
working tree).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import machine, write_section
from bench_core import PY, PYTEST, Runner, load, measure_main, project, snapshot

SECTION = "## Preference pairs (issue 32)"

REWARDS = '''\
import re

import pytest

from pytest_reward import EvaluateResult, reward_function
from pytest_reward.rewards import math_reward

_BOXED = re.compile(r"\\\\boxed\\{([^{}]*)\\}")

math_reward = pytest.mark.reward(pair_accuracy=0.9)(math_reward)


@pytest.mark.reward(pair_accuracy=0.9)
@reward_function
def boxed(messages, ground_truth=None, **kwargs):
    """1.0 when the last boxed answer is the ground truth, 0.0 otherwise."""
    found = _BOXED.findall(messages[-1]["content"])
    return EvaluateResult(score=1.0 if found and found[-1].strip() == ground_truth else 0.0, reason="boxed")
'''

PLAIN_LOOP = """\
import json
import sys

sys.path.insert(0, {reward_dir!r})
from rewards import {name}  # noqa: E402

raw = {name}.__wrapped__
n = right = 0
with open(sys.argv[1], encoding="utf-8") as fh:
    for line in fh:
        if not line.strip():
            continue
        pair = json.loads(line)
        user = {{"role": "user", "content": pair["prompt"]}}
        truth = pair["ground_truth"]
        chosen = raw(messages=[user, {{"role": "assistant", "content": pair["chosen"]}}], ground_truth=truth)
        rejected = raw(messages=[user, {{"role": "assistant", "content": pair["rejected"]}}], ground_truth=truth)
        n += 1
        right += chosen.score > rejected.score
print(n, right)
"""


def pair_line(i: int) -> str:
    a, b = 7 + (i * 37) % 990, 3 + (i * 101) % 997
    return json.dumps(
        {
            "prompt": f"What is {a} + {b}?",
            "chosen": f"{a} + {b} = {a + b}, so the answer is \\boxed{{{a + b}}}.",
            "rejected": f"{a} + {b} is about {a + b + 100 + i % 9}, so the answer is \\boxed{{{a + b + 100 + i % 9}}}.",
            "subset": ("math", "arithmetic", "sums")[i % 3],
            "ground_truth": str(a + b),
        }
    )


def write_pairs(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(pair_line(i) + "\n")


def bench(runner: Runner, reward_dir: Path, data: Path, name: str, n: int, runs: int) -> dict[str, Any]:
    loop = runner.workdir / f"loop_{name}.py"
    loop.write_text(PLAIN_LOOP.format(reward_dir=str(reward_dir), name=name))
    cases = {
        "reward": (
            [
                *PYTEST,
                "--reward-samples",
                str(data.relative_to(reward_dir)),
                "--reward-fn",
                f"rewards.py::{name}",
                "--reward-granularity",
                "file",
            ],
            reward_dir,
            "1 passed",
        ),
        "loop": ([PY, str(loop), str(data)], reward_dir, f"{n} {n}"),
    }
    before = load()
    res = runner.median_runs(cases, runs)
    return {
        "reward": res["reward"],
        "loop": res["loop"],
        "ratio": res["reward"]["wall"] / res["loop"]["wall"],
        "cpu_ratio": res["reward"]["cpu"] / res["loop"]["cpu"],
        "command": "python " + " ".join(cases["reward"][0][1:]),
        "load": (before, load()),
    }


def render(results: dict[str, Any], args: argparse.Namespace, code: str) -> str:
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        SECTION,
        "",
        f"- Date: {when}",
        f"- Machine: {machine()}, **shared with other sessions running tests and benchmarks** (load average in "
        "the table): compare the ratios of one run, not seconds across runs",
        f"- Code: `pytest_reward` at {code}",
        f"- Command: `python bench/bench_preference.py --pairs {args.pairs} --runs {args.runs}`",
        f"- Workload: {args.pairs:,} pairs (`prompt`, `chosen`, `rejected`, `subset`, `ground_truth`: a sum, the chosen "
        "answer boxed and right, the rejected one boxed and wrong) in one JSONL file; `file` granularity, marker "
        "`pair_accuracy=0.9`. Reference: a plain loop that reads the file, builds both conversations and calls the "
        "raw reward (`__wrapped__`) on each response. Median of the runs after one warm-up each, whole processes "
        "(pytest's start-up included).",
        "",
        "| reward | pytest-reward wall (CPU) | plain loop wall (CPU) | ratio wall (CPU) | target | load before → after |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        target = "≤ 1.3×" if name == "math_reward" else "–"
        lines.append(
            f"| `{name}` | {r['reward']['wall']:.2f} s ({r['reward']['cpu']:.2f} s) | {r['loop']['wall']:.2f} s "
            f"({r['loop']['cpu']:.2f} s) | {r['ratio']:.2f}× ({r['cpu_ratio']:.2f}×) | {target} | "
            f"{r['load'][0]:.1f} → {r['load'][1]:.1f} |"
        )
    lines.append("")
    lines.append(
        f"Command measured: `{next(iter(results.values()))['command']}` (and `--reward-fn rewards.py::boxed`)."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--measure":
        return measure_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--ref", default="HEAD", help="git revision of pytest_reward/ to measure ('worktree': as is)"
    )
    parser.add_argument("--only", default="math_reward,boxed", help="comma-separated rewards to run")
    parser.add_argument("--results", type=Path, help="write the section into this RESULTS.md")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench_preference_"))
    try:
        src, code = snapshot(args.ref, workdir / "src")
        runner = Runner(workdir, src)
        reward_dir = project(workdir / "project", {"rewards.py": REWARDS})
        data = reward_dir / "pairs.jsonl"
        write_pairs(data, args.pairs)
        results = {}
        for name in args.only.split(","):
            results[name] = r = bench(runner, reward_dir, data, name, args.pairs, args.runs)
            print(
                f"{name}: pytest-reward {r['reward']['wall']:.2f} s (CPU {r['reward']['cpu']:.2f} s), plain loop "
                f"{r['loop']['wall']:.2f} s (CPU {r['loop']['cpu']:.2f} s): ratio {r['ratio']:.2f}× wall, "
                f"{r['cpu_ratio']:.2f}× CPU",
                flush=True,
            )
        section = render(results, args, code)
        print(section)
        if args.results is not None:
            write_section(args.results, SECTION, section)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
