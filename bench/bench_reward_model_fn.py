"""Cost of a learned reward model as a reward function (issue 32, plugin side), against the engine alone.

One workload: N held-out answers of the shipped ``tiny-sum-rm`` (as conversations), scored three ways, each in a
fresh interpreter (so each pays the same jax import, model load and compilation), interleaved, median of ``--runs``:

1. ``engine``: ``RewardModel.from_checkpoint(...).score_conversations(all N)`` — the floor;
2. ``pytest chunk=B``: ``pytest --reward-samples answers.jsonl --reward-granularity file`` with
   ``rm = reward_model("tiny-sum-rm", batch_size=B)``: the plugin's path, one call (one forward) per B samples;
3. ``pytest chunk=1``: the same with ``batch_size=1``: one forward per sample, what a pointwise reward would cost.

The plugin's overhead is (2) - (1); what batching buys is (3) / (2).

Usage::

    .venv/bin/python bench/bench_reward_model_fn.py [--n 1024] [--batch 64] [--runs 3] [--results bench/RESULTS.md]

``--results`` replaces (or appends) only the "## Reward model as a reward function (issue 32)" section of that file.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _common import machine, user_env, write_section

REPO = Path(__file__).resolve().parents[1]
HEADING = "## Reward model as a reward function (issue 32)"
ENGINE = """
import json, sys
from pytest_reward.jax import RewardModel, resolve_model
rows = [json.loads(line) for line in open(sys.argv[1])]
scores = RewardModel.from_checkpoint(resolve_model("tiny-sum-rm")).score_conversations([r["messages"] for r in rows])
assert len(scores) == len(rows)
"""

WARM = """
import json, sys, time
from pytest_reward import reward_model
from pytest_reward.rewards.reward_model import model_of
rows = [json.loads(line)["messages"] for line in open(sys.argv[1])]
out = {}
for chunk in (int(sys.argv[2]), 1):
    rm = reward_model("tiny-sum-rm", batch_size=chunk)  # one loaded model for both (same checkpoint and settings)
    def run():
        for i in range(0, len(rows), chunk):
            rm(rollouts_messages=rows[i : i + chunk])
    run()  # compiles every shape the chunks need
    start = time.perf_counter()
    run()
    out[f"function chunk={chunk}"] = time.perf_counter() - start
engine = model_of(rm).load()
engine.score_conversations(rows)
start = time.perf_counter()
engine.score_conversations(rows)
out["engine, all at once"] = time.perf_counter() - start
print(json.dumps(out))
"""


def answers(n: int) -> list[dict]:
    held = REPO / "pytest_reward" / "jax" / "models" / "tiny-sum-rm" / "heldout.jsonl"
    rows = [json.loads(line) for line in held.read_text().splitlines()]
    out = []
    for i in range(n):
        row = rows[i % len(rows)]
        answer = row["chosen"] if i % 2 == 0 else row["rejected"]
        out.append({"id": f"a{i}", "messages": [{"role": "user", "content": row["prompt"]},
                                                {"role": "assistant", "content": answer}]})  # fmt: skip
    return out


def project(root: Path, batch: int) -> Path:
    d = root / f"chunk{batch}"
    d.mkdir()
    (d / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (d / "rewards.py").write_text(
        textwrap.dedent(f"""
        from pytest_reward import reward_model

        rm = reward_model("tiny-sum-rm", batch_size={batch})
        """)
    )
    return d


def timed(cmd: list[str], cwd: Path) -> float:
    env = user_env(PYTHONPATH=str(REPO))
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: some wrong answers fail their samples, as they should
        raise SystemExit(
            f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--results", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rm-") as tmp:
        root = Path(tmp)
        samples = root / "answers.jsonl"
        samples.write_text("".join(json.dumps(r) + "\n" for r in answers(args.n)))
        pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--reward-samples", str(samples),
                       "--reward-granularity", "file"]  # fmt: skip
        ways = {
            "engine": ([sys.executable, "-c", ENGINE, str(samples)], root),
            f"pytest chunk={args.batch}": ([sys.executable, *pytest_args], project(root, args.batch)),
            "pytest chunk=1": ([sys.executable, *pytest_args], project(root, 1)),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.runs):
            for name, (cmd, cwd) in ways.items():
                times[name].append(timed(cmd, cwd))
        done = subprocess.run(
            [sys.executable, "-c", WARM, str(samples), str(args.batch)],
            env=user_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, check=True,
        )  # fmt: skip
        warm = json.loads(done.stdout.strip().splitlines()[-1])
    median = {name: statistics.median(t) for name, t in times.items()}
    rows = [
        f"| {name} | {median[name]:.2f} | {args.n / median[name]:,.0f} | "
        f"{', '.join(f'{t:.2f}' for t in times[name])} |"
        for name in ways
    ]
    batched, single = median[f"pytest chunk={args.batch}"], median["pytest chunk=1"]
    load = os.getloadavg()[0]
    section = "\n".join(
        [
            HEADING,
            "",
            f"- Date: {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC",
            f"- Machine: {machine()} (shared with other jobs: load average {load:.2f} when the run ended)",
            f"- Command: `python bench/bench_reward_model_fn.py --n {args.n} --batch {args.batch} --runs {args.runs}`",
            f"- Workload: {args.n} answers (half correct, half near misses) scored by `tiny-sum-rm`, float32 on CPU;"
            " each way in a fresh interpreter (jax import, model load and compilation included), interleaved, "
            f"median of {args.runs}.",
            "",
            "| way | seconds (median) | samples/s | runs |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Cold runs: the plugin's path costs {batched - median['engine']:+.2f} s over the engine alone "
            f"({batched / median['engine']:.2f}x), chunks of 1 {single / batched:.2f}x chunks of {args.batch}: at this "
            "size compilation dominates (the engine compiles one program per (rows, length bucket), and a chunk's "
            "partial buckets are padded to powers of two: up to 7 row counts per bucket, against 1 for chunks of "
            "1 and a few for the engine's one call).",
            "",
            "Warm (one interpreter, every shape compiled by a first pass; the function called directly, as the "
            "plugin calls it, then the engine's one call):",
            "",
            "| way | seconds | samples/s |",
            "|---|---|---|",
            *(f"| {name} | {t:.3f} | {args.n / t:,.0f} |" for name, t in warm.items()),
            "",
            f"Warm, a chunk of {args.batch} scores {warm['function chunk=1'] / warm[f'function chunk={args.batch}']:.1f}x "
            "faster than one forward per sample.",
        ]
    )
    print(section)
    if args.results:
        write_section(args.results, HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
