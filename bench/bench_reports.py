"""What writing every report costs: a file-granularity run of N samples without reports, with
``--reward-report DIR`` (results.jsonl with every row, summary.json, report.html) and with ``--reward-save`` too,
medians of interleaved runs in fresh pytest subprocesses (issue 8 target: reports add <= 10 %).

    python bench/bench_reports.py [--n 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import user_env

REWARD = """
from pytest_reward import reward_function, EvaluateResult, MetricResult

@reward_function
def overlap(messages, **kwargs):
    user = set(messages[0]["content"].split())
    answer = set(messages[-1]["content"].split())
    s = len(user & answer) / max(1, len(user))
    return EvaluateResult(score=s, reason="overlap", metrics={"overlap": MetricResult(score=s, reason="words")})
"""


def make_project(root: Path, n: int) -> None:
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "rewards.py").write_text(REWARD)
    with open(root / "samples.jsonl", "w") as fh:
        for i in range(n):
            fh.write(
                json.dumps(
                    {
                        "id": f"s{i}",
                        "messages": [
                            {"role": "user", "content": f"what is {i % 97} plus {i % 13}"},
                            {"role": "assistant", "content": f"it is {i % 97 + i % 13} plus"},
                        ],
                    }
                )
                + "\n"
            )


def run(root: Path, extra: list[str]) -> float:
    for d in ("out", ".reward"):
        shutil.rmtree(root / d, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--reward-samples",
        "samples.jsonl",
        "--reward-granularity",
        "file",
        *extra,
    ]
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=user_env())
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(out.stdout[-3000:] + out.stderr[-3000:])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-reports-"))
    try:
        make_project(root, args.n)
        arms: dict[str, list[str]] = {
            "without reports": [],
            "--reward-report": ["--reward-report", "out"],
            "--reward-report --reward-save": ["--reward-report", "out", "--reward-save=bench"],
        }
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.repeat):  # interleaved, so drifting machine load hits every arm alike
            for name, extra in arms.items():
                times[name].append(run(root, extra))
        sizes = {p.name: p.stat().st_size for p in (root / "out").iterdir()}
        base = statistics.median(times["without reports"])
        print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}")
        print(f"file granularity, {args.n} samples, median of {args.repeat} interleaved runs")
        for name, values in times.items():
            med = statistics.median(values)
            added = "" if name == "without reports" else f"  added {100 * (med / base - 1):+.1f}%"
            print(f"  {name:<32} {med:6.2f}s  {[round(x, 2) for x in values]}{added}")
        print("  target: --reward-report adds <= +10%")
        print("  report files: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(sizes.items())))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
