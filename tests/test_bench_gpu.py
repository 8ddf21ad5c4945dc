"""bench/bench_gpu.py runs only when a session is lent a GPU; its ``--smoke`` mode runs the same
code at tiny shapes on any device, so that the script works the day it is needed."""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "bench_gpu.py"


def _common():
    spec = importlib.util.spec_from_file_location("bench_common", REPO / "bench" / "_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timings(*values):
    it = iter(values)
    return lambda: next(it)


def test_per_step_is_the_difference_over_the_steps_when_it_is_resolved():
    per_step = _common().per_step
    assert per_step(timings(1.0), timings(0.25), 3) == pytest.approx(0.25)


def test_per_step_takes_more_rounds_keeping_each_sides_least_time():
    per_step = _common().per_step
    # round 1: 0.30 vs 0.31 (noise); round 2: long 0.50 (worse, its best stays 0.30), short 0.10 -> resolved
    assert per_step(timings(0.30, 0.50), timings(0.31, 0.10), 4) == pytest.approx((0.30 - 0.10) / 4)


def test_per_step_says_unresolved_rather_than_a_negative_or_zero_step():
    per_step = _common().per_step
    calls = itertools.count()

    def counted(value):
        def timer():
            next(calls)
            return value

        return timer

    assert per_step(counted(0.2), counted(0.2), 7, rounds=3) is None
    assert next(calls) == 6  # three rounds of both, then it gave up
    assert per_step(timings(0.1, 0.1), timings(0.3, 0.3), 1, rounds=2) is None


needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is a test extra"
)


@needs_transformers
def test_smoke_run_measures_both_engines_and_writes_its_section(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Another section\n\nkept as it is\n")
    args = ["--smoke", "--models", "gpt2,llama1b", "--dtypes", "bfloat16", "--batches", "2"]
    args += ["--prompt", "8", "--new", "4", "--reps", "1", "--results", str(results)]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"\| (gpt2|llama1b) \| bfloat16 \| 2 \|", ln)]
    assert len(rows) == 2, proc.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        ours, hf, ratio = float(cells[3]), float(cells[7]), cells[8]
        assert ours > 0 and hf > 0
        # at smoke shapes on a busy host the step may drown in timing noise: then the row says so, never a
        # figure it did not see (a negative step once reached this table)
        if cells[4] == "unresolved":
            assert "within timing noise" in cells[6]
        else:
            assert float(cells[4]) > 0 and "of the measured roofline" in cells[6]
        # the figures are printed rounded: the ratio lies between what their rounding allows
        assert (
            (ours - 0.5) / (hf + 0.5) - 0.01 <= float(ratio.strip("*x")) <= (ours + 0.5) / (hf - 0.5) + 0.01
        )
    text = results.read_text()
    assert "## Another section\n\nkept as it is" in text
    section = text[text.index("## JAX engine on a GPU (issue 19)") :]
    assert all(row in section for row in rows) and "- command: `python " in section


@needs_transformers
def test_without_a_gpu_it_says_so_and_measures_nothing():
    if jax.devices()[0].platform == "gpu":
        pytest.skip("this machine has a GPU: the script measures it")
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "no GPU" in proc.stderr and "|" not in proc.stdout
