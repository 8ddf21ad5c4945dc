"""Evaluator (results layout, ``done``, atomic writes, construction from a trainer or a checkpoint in the seed's
positional forms and the keyword forms), ``find_accumulation_steps``, and the shipped tiny-adder evaluated end to
end."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.evaluation import (
    Evaluation,
    EvaluationError,
    Evaluator,
    EvaluatorConfig,
    ExecutionSpec,
    PerplexityEvaluation,
    RolloutEvaluation,
)
from pytest_reward.jax import ByteTokenizer, InferenceJob
from pytest_reward.reward.decorator import reward_function
from pytest_reward.reward.models import EvaluateResult

TEXTS = ["hello world", "the cat sat on the mat", "abc"]


class _Ppl(PerplexityEvaluation):
    def __init__(self, texts=TEXTS, name="ppl"):
        self.texts = list(texts)
        self._name = name

    @property
    def name(self):
        return self._name

    def __len__(self):
        return len(self.texts)

    def get(self, i):
        return self.texts[i]


class _Sums(RolloutEvaluation):
    """The tiny-adder's held-out sums: ``"12+345="`` -> ``"357"``."""

    name = "sums"

    def __init__(self, rows, **kwargs):
        super().__init__(**kwargs)
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def get(self, i):
        return self.rows[i]["prompt"], self.rows[i]["answer"]

    def max_new_tokens(self, inference):
        return 6

    def check(self, y, y_hat):
        return y == y_hat


# ---------------------------------------------------------------------------------------------- find_accumulation_steps
def test_bug_find_accumulation_steps_reads_the_per_device_size_as_the_seed_does():
    """Regression: in the Evaluation API ``max_batch_size`` is the largest *per-device* batch size, so
    (1000, 32, 2) is 25 rows per device x 2 replicas x 20 steps = 1000. Ours treated it as the global size and
    returned (20, 50) and (32, 3) for (96, 32, 4)."""
    find = Evaluation.find_accumulation_steps
    assert find(1000, 32, 2) == (25, 20)
    assert find(1000, 32, 1) == (25, 40)
    assert find(96, 32, 4) == (24, 1)
    assert find(1021, 32, 1) == (1, 1021)  # a prime size degenerates to one row per device
    assert find(1021, 32, 2) == (None, None)  # 2 replicas cannot split 1021 rows evenly
    assert find(7, 8, 1) == (7, 1)
    assert find(6, 3, 4) == (None, None)
    assert find(12, 3, 4) == (3, 1)
    for bad in ((0, 8, 1), (8, 0, 1), (8, 8, 0), (8.0, 8, 1), (True, 8, 1)):
        with pytest.raises(ValueError, match="must be a positive integer"):
            find(*bad)


@given(st.integers(1, 5000), st.integers(1, 300), st.integers(1, 16))
def test_find_accumulation_steps_properties(dataset_size, max_batch_size, dp_replicate):
    batch_size, steps = Evaluation.find_accumulation_steps(dataset_size, max_batch_size, dp_replicate)
    fits = [b for b in range(1, max_batch_size + 1) if dataset_size % (b * dp_replicate) == 0]
    if batch_size is None:
        assert steps is None and not fits
        assert dataset_size % dp_replicate != 0  # batch size 1 per device always fits otherwise
    else:
        assert 1 <= batch_size <= max_batch_size
        assert batch_size * dp_replicate * steps == dataset_size  # the dataset exactly, every replica equal
        assert batch_size == max(fits)  # the largest per-device size


# ---------------------------------------------------------------------------------------------- Evaluator
@pytest.fixture
def evaluator(random_gpt, tmp_path) -> Evaluator:
    return Evaluator(
        random_gpt, [_Ppl(), _Ppl(TEXTS[:1], name="ppl_one")], results_dir=tmp_path / "results", name="run1"
    )


def test_run_writes_the_seed_layout(evaluator, tmp_path):
    assert not evaluator.done
    results = evaluator.run()  # the missing results directory is created
    path = tmp_path / "results" / "general" / "default" / "run1" / "results.json"
    assert evaluator.results_path == path and evaluator.done
    data = json.loads(path.read_text())
    assert data == {"job": "run1", "project": "general", "group": "default", "results": results}
    assert list(results) == ["ppl", "ppl_one"]
    assert results["ppl"] == pytest.approx(_Ppl()(evaluator.inference))
    assert all(isinstance(v, float) and v > 1 for v in results.values())
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temporary files left behind


def test_call_runs_once_then_reads_the_saved_results(evaluator):
    first = evaluator()
    stats = evaluator.inference.stats
    scored = stats.score_calls
    saved = json.loads(evaluator.results_path.read_text())
    saved["results"]["ppl"] = 1234.5  # what a second call returns comes from the file
    evaluator.results_path.write_text(json.dumps(saved))
    assert evaluator() == {**first, "ppl": 1234.5}
    assert stats.score_calls == scored  # done: the model was not run again


def test_results_are_written_atomically(evaluator, monkeypatch):
    import os

    evaluator.run()
    before = evaluator.results_path.read_bytes()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)  # the disk fills up as the new file replaces the old
    with pytest.raises(OSError, match=r"cannot write evaluation results to .*results\.json: .*No space left"):
        evaluator.run()
    monkeypatch.undo()
    assert evaluator.results_path.read_bytes() == before  # the old file is intact
    assert sorted(p.name for p in evaluator.results_path.parent.iterdir()) == ["results.json"]


def test_a_failing_evaluation_writes_nothing(random_gpt, tmp_path):
    class _Boom(_Ppl):
        def get(self, i):
            raise RuntimeError("dataset went away")

    ev = Evaluator(random_gpt, [_Ppl(), _Boom(name="boom")], results_dir=tmp_path)
    with pytest.raises(EvaluationError, match=r"evaluation 'boom': get\(0\) raised RuntimeError"):
        ev.run()
    assert not ev.done and not (tmp_path / "general").exists()


def test_unwritable_results_directory_is_a_clear_error(random_gpt, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the results directory should be")
    ev = Evaluator(random_gpt, [_Ppl()], results_dir=blocker, project="p", group="g", name="n")
    with pytest.raises(
        OSError, match=r"cannot write evaluation results to .*not-a-directory/p/g/n/results\.json"
    ):
        ev.run()
    assert not ev.done


def test_evaluate_reductions_and_intermediates(evaluator):
    means = evaluator.evaluate()
    sums = evaluator.evaluate(reduce="sum")
    per_sample = evaluator.evaluate(reduce="none")
    for name in ("ppl", "ppl_one"):
        assert means[name] == pytest.approx(per_sample[name].mean())
        assert sums[name] == pytest.approx(per_sample[name].sum())
    results, inters = evaluator.evaluate(return_intermediates=True, temperature=0.7)  # unused kwargs ignored
    assert results == pytest.approx(means)
    assert [len(i) for i in inters] == [3, 1]
    with pytest.raises(ValueError, match="reduce must be one of"):
        evaluator.evaluate(reduce="avg")


def test_evaluator_arguments_are_checked(random_gpt):
    with pytest.raises(ValueError, match="evaluation names must be distinct; repeated: ppl"):
        Evaluator(random_gpt, [_Ppl(), _Ppl()])
    with pytest.raises(EvaluationError, match="no evaluations"):
        Evaluator(random_gpt, []).evaluate()


def test_an_evaluation_accepts_the_evaluator_as_its_inference(evaluator):
    assert _Ppl()(evaluator) == pytest.approx(_Ppl()(evaluator.inference))


# ---------------------------------------------------------------------------------------------- construction
def test_from_trainer_accepts_a_job_or_an_evaluator(random_gpt, tmp_path):
    config = {"results_dir": tmp_path, "project": "p", "group": "g", "name": "n", "evaluations": [_Ppl()]}
    ev = Evaluator.from_trainer(random_gpt, config=config)
    assert ev.inference is random_gpt and ev.results_path == tmp_path / "p" / "g" / "n" / "results.json"
    assert [e.name for e in ev.evaluations] == ["ppl"]
    again = Evaluator.from_trainer(ev, SimpleNamespace(name="m"), evaluations=[_Ppl(name="other")])
    assert again.inference is random_gpt and again.name == "m" and again.results_dir == Path("results")
    assert [e.name for e in again.evaluations] == ["other"]  # the keyword wins over the config
    listed = Evaluator.from_trainer(random_gpt, [_Ppl(name="listed")])  # a list: the evaluations themselves
    assert [e.name for e in listed.evaluations] == ["listed"]
    with pytest.raises(TypeError, match=r"needs an InferenceJob.*got str"):
        Evaluator.from_trainer("not a trainer")


def test_bug_from_trainer_takes_the_seeds_positional_config(random_gpt, tmp_path):
    """Regression: the API's ``from_trainer(trainer, cfg)`` put ``cfg`` into ``evaluations`` and
    failed with AttributeError. The second positional argument is the config, as the API has it."""
    cfg = EvaluatorConfig(evaluations=[_Ppl()], results_dir=tmp_path)
    evaluator = Evaluator.from_trainer(random_gpt, cfg)
    assert evaluator.inference is random_gpt and evaluator.config.evaluations == cfg.evaluations
    assert evaluator.run() == {"ppl": pytest.approx(_Ppl()(random_gpt))}
    assert evaluator.results_path == tmp_path / "general" / "default" / "evaluation" / "results.json"


def test_from_trainer_follows_the_trainers_params(random_gpt):
    """A training loop that replaces its params is evaluated on the new ones (theseus's docstring promised it,
    but its TrainState is reassigned, not mutated)."""
    params = random_gpt.params
    trainer = SimpleNamespace(
        config=random_gpt.config, params=params, tokenizer=ByteTokenizer(), per_device_batch_size=8
    )
    ev = Evaluator.from_trainer(trainer, [_Ppl()])
    assert ev.inference is not random_gpt
    assert ev.evaluate()["ppl"] == pytest.approx(_Ppl()(random_gpt), rel=1e-5)
    import jax

    trainer.params = jax.tree_util.tree_map(np.zeros_like, params)  # zero weights: uniform over 257 tokens
    assert ev.evaluate()["ppl"] == pytest.approx(257.0, rel=1e-5)
    with pytest.raises(ValueError, match="do not have the model's tree and shapes"):
        ev.update_params({"embed": np.zeros((3, 3))})
    state_trainer = SimpleNamespace(model_config=random_gpt.config, state=SimpleNamespace(params=params))
    assert Evaluator.from_trainer(state_trainer, [_Ppl()]).evaluate()["ppl"] == pytest.approx(
        _Ppl()(random_gpt), rel=1e-5
    )


def test_from_checkpoint_keyword_form(random_gpt, tmp_path):
    directory = random_gpt.save(tmp_path / "model")
    ev, config = Evaluator.from_checkpoint(
        directory, evaluations=[_Ppl()], results_dir=tmp_path / "out", per_device_batch_size=8
    )
    assert ev.name == "model" and ev.inference.config == random_gpt.config
    assert ev.inference.per_device_batch_size == 8
    assert config is ev.config and config.checkpoint == directory and config.model == random_gpt.config
    assert ev.run()["ppl"] == pytest.approx(_Ppl()(random_gpt), rel=1e-5)
    assert (tmp_path / "out" / "general" / "default" / "model" / "results.json").exists()
    with pytest.raises(TypeError, match=r"spec must be an ExecutionSpec.*evaluations="):
        Evaluator.from_checkpoint(directory, [_Ppl()])  # the old positional evaluations: a clear error


def test_bug_from_checkpoint_in_the_seeds_positional_form(random_gpt, tmp_path):
    """Regression: the API's ``from_checkpoint(suffix, spec, runtime_cfg, resume) -> (evaluator,
    config)``; ours took ``(path, evaluations)`` and returned the evaluator alone, so ``evaluator, cfg = ...``
    failed."""
    import jax

    directory = random_gpt.save(tmp_path / "model")
    spec = ExecutionSpec(name="tiny-eval", project="proj", group="grp", devices=jax.devices(), replicas=1,
                         per_device_batch_size=4)  # fmt: skip
    cfg = EvaluatorConfig(evaluations=[_Ppl()], results_dir=tmp_path / "results")
    evaluator, config = Evaluator.from_checkpoint(directory, spec, cfg, False)
    assert isinstance(evaluator, Evaluator) and isinstance(config, EvaluatorConfig)
    assert config.evaluations == cfg.evaluations and config.checkpoint == directory
    assert evaluator.spec == spec and evaluator.inference.per_device_batch_size == 4
    assert evaluator.inference.replicas == 1
    results = evaluator()
    assert results == {"ppl": pytest.approx(_Ppl()(random_gpt), rel=1e-5)}
    path = tmp_path / "results" / "proj" / "grp" / "tiny-eval" / "results.json"
    assert json.loads(path.read_text()) == {
        "job": "tiny-eval",
        "project": "proj",
        "group": "grp",
        "results": results,
    }


def test_resume_reuses_saved_results_and_a_fresh_evaluation_replaces_them(random_gpt, tmp_path):
    directory = random_gpt.save(tmp_path / "model")
    cfg = EvaluatorConfig(evaluations=[_Ppl()], results_dir=tmp_path / "results")
    first, _ = Evaluator.from_checkpoint(directory, ExecutionSpec(name="e"), cfg)
    saved = first()
    data = json.loads(first.results_path.read_text())
    data["results"]["ppl"] = -1.0  # so a result read back from the file is told apart from a fresh one
    first.results_path.write_text(json.dumps(data))
    resumed, _ = Evaluator.from_checkpoint(directory, ExecutionSpec(name="e"), cfg, resume=True)
    scored = resumed.inference.stats.score_calls
    assert resumed() == {"ppl": -1.0} and resumed.inference.stats.score_calls == scored  # not run again
    fresh, _ = Evaluator.from_checkpoint(
        directory, ExecutionSpec(name="e"), cfg
    )  # resume=False: the seed default
    assert (
        fresh() == pytest.approx(saved) and json.loads(fresh.results_path.read_text())["results"] == fresh()
    )


def test_evaluator_from_a_spec_gets_its_model_later(random_gpt, tmp_path):
    """The seed's ``Evaluator(spec)``: the topology first, the model from ``restore_from_path``."""
    evaluator = Evaluator(
        ExecutionSpec(name="later", per_device_batch_size=2), config={"results_dir": tmp_path}
    )
    evaluator.evaluations = [_Ppl()]
    with pytest.raises(
        EvaluationError, match="evaluator 'later' has no model: load one with restore_from_path"
    ):
        evaluator.evaluate()
    evaluator.restore_from_path(random_gpt.save(tmp_path / "model"))
    assert (
        evaluator.inference.per_device_batch_size == 2 and evaluator.encoding is evaluator.inference.tokenizer
    )
    assert evaluator.run() == {"ppl": pytest.approx(_Ppl()(random_gpt), rel=1e-5)}


def test_execution_spec_and_config_are_checked():
    for bad in ({"per_device_batch_size": 0}, {"replicas": 0}, {"devices": []}, {"name": ""},
                {"devices": ["cpu0"], "replicas": 2}):  # fmt: skip
        with pytest.raises(ValueError, match="ExecutionSpec"):
            ExecutionSpec(**bad)
    with pytest.raises(ValueError, match="replicas=64 but there are"):
        ExecutionSpec(replicas=64).job_kwargs()
    assert ExecutionSpec(per_device_batch_size=3).job_kwargs() == {"per_device_batch_size": 3}
    with pytest.raises(ValueError, match="repeated: ppl"):
        EvaluatorConfig(evaluations=[_Ppl(), _Ppl()])
    with pytest.raises(TypeError, match="must be Evaluation instances"):
        EvaluatorConfig(evaluations=["ppl"])
    assert EvaluatorConfig(results_dir="x").results_dir == Path("x")


# ---------------------------------------------------------------------------------------------- tiny-adder end to end
@pytest.fixture(scope="module")
def heldout(adder_dir) -> list[dict]:
    lines = (adder_dir / "heldout.jsonl").read_text().splitlines()[:200]
    return [json.loads(line) for line in lines]


def test_tiny_adder_accuracy_on_heldout(adder: InferenceJob, heldout, tmp_path):
    calls = adder.stats.rollout_calls
    ev = Evaluator(adder, [_Sums(heldout)], results_dir=tmp_path, name="tiny-adder")
    accuracy = ev.run()["sums"]
    assert accuracy >= 0.9
    assert adder.stats.rollout_calls == calls + 1  # 200 prompts, one batched rollout call
    samples = _Sums(heldout).evaluate_samples(adder)
    assert np.mean([s.score for s in samples]) == pytest.approx(accuracy)
    right = next(s for s in samples if s.score == 1.0)
    assert right.output == right.target == heldout[right.index]["answer"]
    assert right.input == heldout[right.index]["prompt"] and right.metrics == {"correct": 1.0}


def test_tiny_adder_scored_by_a_reward_function(adder, heldout):
    @reward_function
    def close_enough(messages, ground_truth=None, **kwargs):
        """1 for the exact sum, partial credit by relative error, an error for a non-number."""
        got = int(messages[-1]["content"])  # raises ValueError on garbage
        want = int(ground_truth)
        return EvaluateResult(score=max(0.0, 1.0 - abs(got - want) / max(want, 1)), reason=f"{got} vs {want}")

    samples = _Sums(heldout[:64], reward=close_enough).evaluate_samples(adder)
    exact = _Sums(heldout[:64]).evaluate_samples(adder)
    assert np.mean([s.score for s in samples]) > np.mean([s.score for s in exact]) >= 0.8  # partial credit
    for s, e in zip(samples, exact, strict=True):
        assert s.error is None and s.reason.endswith(f"vs {e.target}")
        if e.score == 1.0:
            assert s.score == 1.0
