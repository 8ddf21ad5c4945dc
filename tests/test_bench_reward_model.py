"""bench/bench_reward_model.py: its ``--smoke`` mode runs the CPU and the GPU comparisons at tiny shapes on any
device, so that the script works the day a session is lent a GPU (the full CPU run is recorded in RESULTS.md)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is a test extra"
)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "bench_reward_model.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def test_cpu_smoke_run_compares_both_engines_and_writes_its_section(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Another section\n\nkept as it is\n")
    proc = run("--smoke", "--device", "cpu", "--reps", "1", "--rounds", "2", "--results", str(results))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rounds = re.findall(
        r"- round \d: transformers .* whole rows .*\*\*(\d+\.\d+)x\*\*.* shared prompts .*\*\*(\d+\.\d+)x",
        proc.stdout,
    )
    assert len(rounds) == 2, proc.stdout
    differences = re.findall(r"max \|score - transformers\| (\S+)", proc.stdout)
    assert len(differences) == 2 and all(float(d) < 1e-4 for d in differences), proc.stdout
    assert (
        "programs [(4, 32)]" in proc.stdout and "programs [(2, 16, 4, 16)]" in proc.stdout
    )  # shared: 2 prompts
    assert re.search(r"\*\*median \d+ %\*\* \(quartiles \d+-\d+ %\) over the 2 alternations", proc.stdout)
    text = results.read_text()
    assert "## Another section\n\nkept as it is" in text
    assert "## Learned reward models on the engine (issue 32): CPU" in text and "- command: `python " in text


def test_gpu_smoke_run_fills_the_table_on_any_device():
    proc = run("--smoke", "--device", "gpu", "--reps", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"\| (bfloat16|float32) \| (1|64) \|", ln)]
    assert len(rows) == 4, proc.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert (
            float(cells[2]) > 0
            and float(cells[5]) > 0
            and float(cells[6]) > 0
            and "% of measured" in cells[4]
        )
        assert float(cells[8]) < (0.1 if cells[0] == "bfloat16" else 1e-4)  # the same scores as transformers


def test_without_a_gpu_the_gpu_run_says_so_and_measures_nothing():
    import jax

    if jax.devices()[0].platform == "gpu":
        pytest.skip("this machine has a GPU: the script measures it")
    proc = run("--device", "gpu")
    assert proc.returncode == 2
    assert "no GPU" in proc.stderr and "|" not in proc.stdout
