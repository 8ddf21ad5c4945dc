"""The shipped tiny-adder model: it adds, its held-out set is held out, and the training script runs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_reward.jax import InferenceJob, available_models, resolve_model

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train_tiny_model.py"


def _heldout(adder_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (adder_dir / "heldout.jsonl").read_text().splitlines()]


def test_resolve_model():
    path = resolve_model("tiny-adder")
    assert (path / "config.json").exists() and (path / "model.safetensors").exists()
    assert "tiny-adder" in available_models()
    assert resolve_model(path) == path
    with pytest.raises(FileNotFoundError, match=r"no model 'no-such-model'.*available: .*tiny-adder"):
        resolve_model("no-such-model")


def test_examples_directory_points_at_the_shipped_model():
    assert (REPO / "examples" / "models" / "tiny-adder" / "heldout.jsonl").exists()
    assert (REPO / "examples" / "models" / "tiny-adder").resolve() == resolve_model("tiny-adder")


def test_model_is_small():
    size = sum(p.stat().st_size for p in resolve_model("tiny-adder").iterdir())
    assert size < 5_000_000


def test_greedy_accuracy_on_heldout(adder, adder_dir):
    problems = _heldout(adder_dir)
    assert len(problems) == 1000
    out = adder.rollout([p["prompt"] for p in problems], max_new_tokens=6)
    correct = sum(r.text == p["answer"] for r, p in zip(out, problems, strict=True))
    assert correct / len(problems) >= 0.9
    assert sum(r.finish_reason == "eot" for r in out) / len(out) >= 0.9


def test_answers_in_heldout_are_sums(adder_dir):
    for p in _heldout(adder_dir):
        a, b = p["prompt"].removesuffix("=").split("+")
        assert int(a) + int(b) == int(p["answer"])
        assert len(a) <= 3 and len(b) <= 3


def test_heldout_file_is_the_script_heldout_draw(adder_dir):
    spec = importlib.util.spec_from_file_location("train_tiny_model", TRAIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    pairs = mod.heldout_problems(1, 1000, 3)  # the script's default seed 0 -> held-out seed 1
    assert [f"{a}+{b}=" for a, b in pairs.tolist()] == [p["prompt"] for p in _heldout(adder_dir)]


def test_loglikelihood_prefers_the_right_sum(adder):
    right, wrong = adder.loglikelihood([("12+345=", "357"), ("12+345=", "358")])
    assert right.logprob > wrong.logprob
    assert right.is_greedy and not wrong.is_greedy
    assert right.num_tokens == 3


@pytest.mark.timeout(600)
def test_training_script_smoke(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "adder"
    proc = subprocess.run(
        [sys.executable, str(TRAIN), "--smoke", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step     5" in proc.stdout
    job = InferenceJob.from_checkpoint(out)
    assert job.config.vocab_size == 257
    assert len((out / "heldout.jsonl").read_text().splitlines()) == 32
    refused = subprocess.run(
        [sys.executable, str(TRAIN), "--smoke"], env=env, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "--out" in refused.stderr
