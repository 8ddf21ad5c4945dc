"""Parquet samples in ``file`` granularity vs a plain pyarrow loop (issue 17, "Speed and docs").

A verl-schema Parquet file (``data_source``, ``prompt`` as a list of ``{role, content}`` structs, ``ability``,
``reward_model: {style, ground_truth}``, ``extra_info: {split, index}``, plus a ``response`` column: the answers to
score) of 100,000 and 1,000,000 rows, written in row groups of ``--row-group`` rows, is scored by a verl-style
``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``:

* pytest-reward: a whole ``pytest --reward-samples data.parquet --reward-fn verl:rewards.py::compute_score
  --reward-granularity file --reward-threshold 0.5`` run (ini ``reward_sample_fields = response=response``), a fresh
  subprocess;
* the reference: a plain loop over ``pyarrow.parquet.ParquetFile.iter_batches`` calling the raw function on every
  row with the row's ``data_source``, ``response``, ``reward_model.ground_truth`` and ``extra_info``, counting the
  rows that score ≥ 0.5.

Median wall (and CPU) of ``--runs`` interleaved runs each, after one warm-up run each; peak RSS of each process
(read with ``getrusage(RUSAGE_CHILDREN)`` by a small measuring process, as in ``bench_core.py``). Targets: the 1M
ratio ≤ 3×, and RSS flat (1M about the same as 100k).

Usage::

    .venv/bin/python bench/bench_parquet.py [--quick] [--results bench/RESULTS.md]

``--results`` replaces (or appends) only the "## Parquet samples (issue 17)" section of that file. The code measured
is ``pytest_reward/`` at ``--ref`` (default HEAD, exported to the work directory: others edit the working tree).
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

SECTION = "## Parquet samples (issue 17)"

REWARDS = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl-style: 1.0 when the answer after the last '####' is the ground truth."""
    return 1.0 if solution_str.rpartition("####")[2].strip() == ground_truth else 0.0
'''

PYTEST_INI = "[pytest]\nreward_sample_fields = response=response\n"

PLAIN_LOOP = """\
import sys
import pyarrow.parquet as pq
sys.path.insert(0, {reward_dir!r})
from rewards import compute_score

n = passed = 0
for batch in pq.ParquetFile(sys.argv[1]).iter_batches(batch_size=4096):
    for row in batch.to_pylist():
        n += 1
        score = compute_score(
            data_source=row["data_source"],
            solution_str=row["response"],
            ground_truth=row["reward_model"]["ground_truth"],
            extra_info=row["extra_info"],
        )
        passed += score >= 0.5
print(n, passed)
"""


def write_parquet(path: Path, n: int, row_group: int) -> None:
    """``n`` verl rows, answered right; written one row group at a time (constant memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    try:
        for start in range(0, n, row_group):
            rows = []
            for i in range(start, min(n, start + row_group)):
                a, b = 7 + (i * 37) % 990, 3 + (i * 101) % 997
                answer = a + b
                rows.append(
                    {
                        "data_source": "openai/gsm8k",
                        "prompt": [{"role": "user", "content": f"What is {a} + {b}? Answer after ####."}],
                        "ability": "math",
                        "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                        "extra_info": {"split": "test", "index": i},
                        "response": f"{a} + {b} = {answer}.\n#### {answer}",
                    }
                )
            table = pa.Table.from_pylist(rows)
            if writer is None:
                writer = pq.ParquetWriter(str(path), table.schema)
            writer.write_table(table, row_group_size=row_group)
    finally:
        if writer is not None:
            writer.close()


def bench(runner: Runner, reward_dir: Path, sizes: list[int], runs: int, row_group: int) -> dict[str, Any]:
    loop = runner.workdir / "plain_loop.py"
    loop.write_text(PLAIN_LOOP.format(reward_dir=str(reward_dir)))
    out: dict[str, Any] = {"runs": runs, "row_group": row_group, "sizes": {}}
    for n in sorted(sizes):
        data = reward_dir / "data" / f"verl_{n}.parquet"
        write_parquet(data, n, row_group)
        cmd = [
            *PYTEST,
            "--reward-samples",
            str(data.relative_to(reward_dir)),
            "--reward-fn",
            "verl:rewards.py::compute_score",
            "--reward-granularity",
            "file",
            "--reward-threshold",
            "0.5",
        ]
        cases = {
            "reward": (cmd, reward_dir, "1 passed"),
            "loop": ([PY, str(loop), str(data)], reward_dir, f"{n} {n}"),
        }
        before = load()
        print(f"  {n:,} rows ({data.stat().st_size / 2**20:.1f} MiB) ...", flush=True)
        res = runner.median_runs(cases, runs)
        out["sizes"][n] = {
            "reward": res["reward"],
            "loop": res["loop"],
            "ratio": res["reward"]["wall"] / res["loop"]["wall"],
            "cpu_ratio": res["reward"]["cpu"] / res["loop"]["cpu"],
            "load": (before, load()),
            "file_mb": data.stat().st_size / 2**20,
        }
        out["command"] = " ".join(["python", *cmd[1:]])
        data.unlink()
    return out


def section(report: dict[str, Any]) -> str:
    r = report["parquet"]
    lines = [
        SECTION,
        "",
        f"- Date: {report['date']}",
        f"- Machine: {report['machine']} (shared: others' jobs run alongside; load below)",
        f"- Code measured: `pytest_reward` at {report['code']}",
        f"- Command: `{report['argv']}`",
        f"- Each pytest run: `{r['command']}` in a project whose `pytest.ini` says "
        "`reward_sample_fields = response=response`, a fresh subprocess; the reference: a plain loop over "
        "`pyarrow.parquet.ParquetFile(path).iter_batches(batch_size=4096)` calling the raw `compute_score` on each "
        "row's `data_source`, `response`, `reward_model.ground_truth`, `extra_info`.",
        f"- Data: verl's schema (`data_source`, `prompt` as a list of structs, `ability`, `reward_model` struct, "
        f"`extra_info` struct) plus a `response` column, row groups of {r['row_group']:,} rows; every answer "
        "right (the item passes; the loop counts the same passes).",
        f"- Median of {r['runs']} interleaved runs per case after one warm-up run each; peak RSS: the largest of "
        "the runs.",
        "",
        "| rows | pytest-reward `file` item | plain pyarrow loop | ratio (wall) | ratio (CPU) | peak RSS pytest | "
        "peak RSS loop | load (1 min) before → after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, s in sorted(r["sizes"].items()):
        rw, lp = s["reward"], s["loop"]
        lines.append(
            f"| {n:,} ({s['file_mb']:.1f} MiB) | {rw['wall']:.2f} s ({rw['wall'] / n * 1e6:.1f} µs/row; CPU "
            f"{rw['cpu']:.2f} s) | {lp['wall']:.2f} s ({lp['wall'] / n * 1e6:.1f} µs/row; CPU {lp['cpu']:.2f} s) | "
            f"{s['ratio']:.2f}× | {s['cpu_ratio']:.2f}× | {rw['rss_mb']:.0f} MB | {lp['rss_mb']:.0f} MB | "
            f"{s['load'][0]:.1f} → {s['load'][1]:.1f} |"
        )
    sizes = sorted(r["sizes"])
    small, big = r["sizes"][sizes[0]], r["sizes"][sizes[-1]]
    ratio = big["ratio"]
    grow = big["reward"]["rss_mb"] - small["reward"]["rss_mb"]
    per_row = grow * 2**20 / max(1, sizes[-1] - sizes[0])
    target = (
        f"Target ≤ 3× at {sizes[-1]:,} rows: {ratio:.2f}× (CPU {big['cpu_ratio']:.2f}×), "
        f"**{'met' if ratio <= 3 else 'missed'}**."
    )
    if len(sizes) > 1:  # flat memory needs two sizes to be judged
        target += (
            f" RSS from {sizes[0]:,} to {sizes[-1]:,} rows: pytest {small['reward']['rss_mb']:.0f} → "
            f"{big['reward']['rss_mb']:.0f} MB ({grow:+.0f} MB, {per_row:.1f} B per extra row), the loop "
            f"{small['loop']['rss_mb']:.0f} → {big['loop']['rss_mb']:.0f} MB: "
            f"**{'flat' if per_row < 64 else 'not flat'}** (< 64 B per extra row: nothing kept per row)."
        )
    else:
        target += (
            " (One size: run two, e.g. the default 100,000 and 1,000,000, to judge whether RSS is flat.)"
        )
    lines += ["", target]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--measure"]:
        return measure_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 5,000 and 20,000 rows, one run each")
    parser.add_argument("--sizes", help="rows, comma-separated (default 100000,1000000)")
    parser.add_argument("--runs", type=int, help="runs per case (default 3; quick 1)")
    parser.add_argument("--row-group", type=int, default=50_000, help="rows per row group (default 50,000)")
    parser.add_argument("--ref", default="HEAD", help="git revision of pytest_reward/ (or 'worktree')")
    parser.add_argument("--workdir", type=Path, help="where data and projects go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--results", type=Path, help="markdown file whose issue-17 section is replaced")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.sizes or ("5000,20000" if args.quick else "100000,1000000")).split(",")]
    runs = args.runs or (1 if args.quick else 3)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-parquet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    src, code = snapshot(args.ref, workdir / "src")
    # bench_core's Runner measures through its own script's --measure, which this script answers too
    runner = Runner(workdir, src)
    reward_dir = project(workdir / "reward", {"rewards.py": REWARDS, "pytest.ini": PYTEST_INI})
    (reward_dir / "data").mkdir(exist_ok=True)
    report: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "code": code,
        "argv": " ".join([".venv/bin/python", "bench/bench_parquet.py", *argv]),
    }
    print(f"machine: {report['machine']}; code: {code}; work dir {workdir}; load {load():.2f}", flush=True)
    try:
        report["parquet"] = bench(runner, reward_dir, sizes, runs, args.row_group)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    text = section(report)
    print(text)
    print(json.dumps({str(n): round(s["ratio"], 3) for n, s in report["parquet"]["sizes"].items()}))
    if args.results:
        write_section(args.results, SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
