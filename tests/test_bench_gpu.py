"""bench/bench_gpu.py (issue 19, part 3) runs only when a session is lent a GPU; its ``--smoke`` mode runs the same
code at tiny shapes on any device, so that the script works the day it is needed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "bench_gpu.py"

pytest.importorskip("transformers")


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
        ours, step, hf, ratio = float(cells[3]), float(cells[4]), float(cells[7]), cells[8]
        assert ours > 0 and step > 0 and hf > 0
        # the figures are printed rounded: the ratio lies between what their rounding allows
        assert (
            (ours - 0.5) / (hf + 0.5) - 0.01 <= float(ratio.strip("*x")) <= (ours + 0.5) / (hf - 0.5) + 0.01
        )
        assert "of the measured roofline" in cells[6]
    text = results.read_text()
    assert "## Another section\n\nkept as it is" in text
    section = text[text.index("## JAX engine on a GPU (issue 19)") :]
    assert all(row in section for row in rows) and "- command: `python " in section


def test_without_a_gpu_it_says_so_and_measures_nothing():
    if jax.devices()[0].platform == "gpu":
        pytest.skip("this machine has a GPU: the script measures it")
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "no GPU" in proc.stderr and "|" not in proc.stdout
