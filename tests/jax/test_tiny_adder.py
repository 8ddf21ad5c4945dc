"""The shipped tiny-adder model: it adds, its held-out set is held out, it is scored under the convention it was
trained with (teacher forcing, perplexity and greedy rollouts agree), and the training script runs."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_reward.evaluation import EncodingEvaluation, PerplexityEvaluation, RolloutEvaluation
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


# ---------------------------------------------------------------------------------------------- start-token convention
class _Rows:
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)


class _Greedy(_Rows, RolloutEvaluation):
    name = "greedy"

    def get(self, i):
        return self.rows[i]["prompt"], self.rows[i]["answer"]

    def max_new_tokens(self, inference):
        return 6

    def check(self, y, y_hat):
        return y == y_hat


class _TeacherForced(_Rows, EncodingEvaluation):
    """The whole problem read at once: the argmax at every answer position (and at its end) must be right."""

    name = "teacher_forced"

    def get(self, i):
        return self.rows[i]["prompt"] + self.rows[i]["answer"] + "<|endoftext|>"

    def clean(self, y_hat):
        return y_hat

    def check(self, x, y_hat):
        return y_hat.endswith(x.split("=")[1])


class _Problems(_Rows, PerplexityEvaluation):
    name = "problems"

    def get(self, i):
        return self.rows[i]["prompt"] + self.rows[i]["answer"]


def test_the_model_declares_the_start_token_it_was_trained_with(adder, adder_dir):
    """It was trained on ``<|endoftext|>12+345=357<|endoftext|>``: its tokenizer declares ``<|endoftext|>`` as the
    start token, so our job and transformers' own tokenizer both read every text after it."""
    config = json.loads((adder_dir / "tokenizer_config.json").read_text())
    assert config["add_bos_token"] is True and adder.start_token == 256
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(adder_dir)
    assert hf("12+345=").input_ids == [256, *b"12+345="]
    [r] = adder.rollout(["12+345="], max_new_tokens=6)
    assert r.prompt_tokens == (256, *b"12+345=") and r.text == "357"


def test_bug_teacher_forced_and_greedy_accuracy_agree(adder, adder_dir):
    """Regression: scoring read every text after ``<|endoftext|>`` while rollouts read the bare prompt,
    and the model had been trained bare: teacher-forced answers were 0.000 right while greedy ones were 0.937.
    Now one convention, the trained one, for both: they agree within a few points."""
    problems = _heldout(adder_dir)
    greedy = _Greedy(problems)(adder)
    teacher = _TeacherForced(problems)(adder)
    assert greedy >= 0.9
    assert abs(teacher - greedy) <= 0.03


def _optimal_nll(prompt: str) -> float:
    """-log p(problem) under the training distribution: a digit count uniform in 1..3, then a value uniform among
    those with that many digits, for each operand; ``+``, ``=`` and the sum are then certain."""
    counts = {1: 10, 2: 90, 3: 900}
    return sum(math.log(3 * counts[len(x)]) for x in prompt.removesuffix("=").split("+"))


def test_problem_perplexity_is_close_to_what_the_task_allows(adder, adder_dir):
    """The demo's perplexity, per token over every character of ``"a+b=sum"`` (each after the start token), is a
    number a person can check: the operands are random, so no model can beat the entropy of the data; a trained
    one comes close to it. Regression: 1.756e5 before, above the 257-token vocabulary."""
    problems = _heldout(adder_dir)
    samples = _Problems(problems).evaluate_samples(adder)
    tokens = [len(p["prompt"]) + len(p["answer"]) for p in problems]
    assert [s.metrics["tokens"] for s in samples] == tokens  # every character is scored
    model = _Problems.corpus_perplexity(samples)
    best = math.exp(sum(_optimal_nll(p["prompt"]) for p in problems) / sum(tokens))
    assert best * 0.97 <= model <= best * 1.15
    assert (
        1.0 < _Problems(problems)(adder) < 10.0
    )  # the mean of per-problem perplexities, what the demo gates
