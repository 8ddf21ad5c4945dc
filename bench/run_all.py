"""``make bench``: every benchmark of ``bench/``, one after the other (never in parallel: they time wall clocks on a
shared machine), each printing its own comparison against the reference it measures in the same run.

    python bench/run_all.py                 # all, default sizes (tens of minutes on 2 cores)
    python bench/run_all.py --quick         # smoke sizes, to check that every benchmark still runs
    python bench/run_all.py --only core,prompt_only
    python bench/run_all.py --results bench/RESULTS.md   # benchmarks that keep a section there update it

Exit status: non-zero when a benchmark fails to run or reports a missed hard check (a benchmark's own exit code).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> (script, default args, --quick args, writes a RESULTS.md section with --results)
BENCHMARKS: dict[str, tuple[str, list[str], list[str], bool]] = {
    "core": ("bench_core.py", [], ["--quick"], True),
    "rewards": (
        "bench_rewards.py",
        [],
        ["--samples", "1000", "--repeats", "1", "--sandbox-runs", "10"],
        True,
    ),
    "serve": ("bench_serve.py", ["--no-peer"], ["--no-peer", "--requests", "200", "--rounds", "1"], True),
    "gating": ("bench_gating.py", [], ["--trials", "100", "--resamples", "200"], False),
    "reports": ("bench_reports.py", [], ["--n", "2000", "--repeat", "1"], False),
    "rollout": ("bench_rollout.py", [], ["--quick", "--reps", "1"], True),
    "attention": ("bench_attention.py", [], ["--reps", "3"], True),
    "prompt_only": ("bench_prompt_only.py", [], ["--n", "64", "--repeat", "1"], False),
    "probes": ("bench_probes.py", [], ["--quick"], True),
    "executors": ("bench_executors.py", [], ["--quick"], True),
    "parquet": ("bench_parquet.py", [], ["--quick"], True),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes")
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument(
        "--results", type=Path, help="RESULTS.md whose sections the benchmarks that keep one update"
    )
    args = parser.parse_args(argv)

    names = list(BENCHMARKS) if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(BENCHMARKS)})")
    failed: list[str] = []
    for name in names:
        script, default, quick, keeps_section = BENCHMARKS[name]
        cmd = [sys.executable, str(HERE / script), *(quick if args.quick else default)]
        if args.results and keeps_section and not args.quick:
            cmd += ["--results", str(args.results)]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        start = time.perf_counter()
        code = subprocess.call(cmd)
        print(f"=== {name}: exit code {code} in {time.perf_counter() - start:.0f}s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"\nbenchmarks that failed or missed a hard check: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"\n{len(names)} benchmark(s) ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
