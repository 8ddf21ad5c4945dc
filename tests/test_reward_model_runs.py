"""``reward_model(...)`` scored through the engine: its scores, and whole pytest runs that collect, gate, compare,
report and refuse to deploy it, in both granularities and under ``-n 2``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from pytest_reward import EvaluateResult, reward_model
from pytest_reward.rewards.reward_model import locate_model

from .conftest import msgs

pytest.importorskip("jax")

SHIPPED = "tiny-sum-rm"
CORRECT = [("12+345=", "357"), ("58+66=", "124"), ("7+8=", "15"), ("999+1=", "1000")]
WRONG = [("12+345=", "358"), ("58+66=", "114"), ("7+8=", "51"), ("999+1=", "900")]


@pytest.fixture(scope="module")
def rm():
    return reward_model(SHIPPED)


@pytest.fixture(scope="module")
def scores(rm):
    """The shipped model's scores of CORRECT then WRONG, through the reward function's own call."""
    results = rm(rollouts_messages=[msgs(p, a) for p, a in CORRECT + WRONG])
    assert all(isinstance(r, EvaluateResult) and r.is_score_valid for r in results)
    return [r.score for r in results]


def test_the_function_scores_what_the_engine_and_transformers_score(rm, scores):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from pytest_reward.jax import RewardModel

    path = locate_model(SHIPPED)
    engine = RewardModel.from_checkpoint(path)
    conversations = [msgs(p, a) for p, a in CORRECT + WRONG]
    np.testing.assert_allclose(engine.score_conversations(conversations), scores, atol=1e-5)
    model = transformers.GPT2ForSequenceClassification.from_pretrained(path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    expected = []
    for conversation in conversations:
        text = tokenizer.apply_chat_template(conversation, tokenize=False)
        assert text == engine.render(conversation)
        ids = tokenizer(text, return_tensors="pt")["input_ids"]
        assert ids[0, 0].item() == 256  # the start token, once
        with torch.no_grad():
            expected.append(model(input_ids=ids).logits[0, 0].item())
    np.testing.assert_allclose(scores, expected, atol=1e-4)


def test_heldout_pair_accuracy_is_the_model_cards(rm):
    """The held-out pairs' accuracy, recomputed through the reward function, is the number the card records."""
    path = locate_model(SHIPPED)
    rows = [json.loads(line) for line in (path / "heldout.jsonl").read_text().splitlines()]
    chosen = rm(rollouts_messages=[msgs(r["prompt"], r["chosen"]) for r in rows])
    rejected = rm(rollouts_messages=[msgs(r["prompt"], r["rejected"]) for r in rows])
    accuracy = sum(c.score > r.score for c, r in zip(chosen, rejected, strict=True)) / len(rows)
    assert f"| all | {len(rows)} | **{accuracy:.3f}** |" in (path / "README.md").read_text()
    assert accuracy >= 0.85


def _project(project, threshold: float = 0.0) -> None:
    """A project whose reward module only builds the reward model (threshold 0: the model's calibrated "correct"),
    and samples: CORRECT then WRONG."""
    project.file(
        "rewards.py",
        f"""
        import pytest
        from pytest_reward import reward_model

        rm = pytest.mark.reward(threshold={threshold!r})(reward_model("tiny-sum-rm", batch_size=3))
        """,
    )
    project.jsonl(
        "s.jsonl", [{"id": f"s{i}", "messages": msgs(p, a)} for i, (p, a) in enumerate(CORRECT + WRONG)]
    )


def _verdicts(scores) -> list[str]:
    return ["pass" if s >= 0.0 else "fail" for s in scores]


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_collected_scored_in_chunks_and_gated(project, scores, granularity):
    """Every sample's verdict is its score against the threshold, whichever way the items are built (the
    function is called on chunks of 3: 8 samples are 3 calls)."""
    _project(project)
    expected = _verdicts(scores)
    assert "pass" in expected and "fail" in expected  # the run below shows both verdicts
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-granularity", granularity, "--reward-report", "out", "-v"
    )
    assert result.ret == 1
    if granularity == "sample":
        result.assert_outcomes(passed=expected.count("pass"), failed=expected.count("fail"))
        first = "PASSED" if expected[0] == "pass" else "FAILED"
        result.stdout.fnmatch_lines([f"*s.jsonl::tiny_sum_rm?s0? {first}*"])
        # reports point at the line of the user's module that builds it, not into the package
        result.stdout.fnmatch_lines(["*function*tiny_sum_rm  (rewards.py:4)"])
    else:
        result.assert_outcomes(failed=1)
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["verdict"] for r in rows] == expected
    np.testing.assert_allclose([r["score"] for r in rows], scores, atol=1e-4)
    assert rows[0]["reason"].startswith("reward model tiny-sum-rm: ")
    summary = json.loads((project.path / "out" / "summary.json").read_text())
    (group,) = summary["groups"]
    assert group["function"] == "tiny_sum_rm" and group["summary"]["n"] == 8


def test_xdist_two_workers_give_the_same_outcomes(project, scores):
    _project(project)
    expected = _verdicts(scores)
    result = project.run_subprocess("--reward-samples", "s.jsonl", "-n", "2", "--reward-report", "out")
    assert result.ret == 1
    result.assert_outcomes(passed=expected.count("pass"), failed=expected.count("fail"))
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([r["score"] for r in rows], scores, atol=1e-4)


def test_selected_by_reward_fn_and_compared_with_a_baseline(project, scores):
    _project(project, threshold=min(scores) - 1.0)  # a green run
    result = project.run("--reward-samples", "s.jsonl", "--reward-fn", "rewards.py::rm", "--reward-save=base")
    assert result.ret == 0, result.stdout.str()
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-fn", "rewards.py::rm", "--reward-compare=base",
        "--reward-compare-fail=mean:0.0001",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*tiny_sum_rm*s.jsonl*"])


def test_deploy_is_refused_with_the_reason(project, scores):
    _project(project, threshold=min(scores) - 1.0)  # a green run
    result = project.run("--reward-samples", "s.jsonl", "--reward-deploy=dir:out")
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        [
            "*not deploying: tiny_sum_rm cannot be deployed: it scores with the learned reward model tiny-sum-rm, and a "
            "deploy bundle ships reward functions' code, not model weights*"
        ]
    )
    assert not (project.path / "out").exists()


def test_the_refusal_names_the_selection_that_deploys_the_other_functions(project, scores):
    """The refusal's suggestion is one the tool accepts: the other functions, as --reward-fn selectors, deploy."""
    _project(project, threshold=min(scores) - 1.0)
    project.file(
        "metrics/sums/main.py",
        """
        from pytest_reward import EvaluateResult, reward_function

        @reward_function
        def any_answer(messages, **kwargs):
            return EvaluateResult(score=1.0, reason="answered")
        """,
    )
    result = project.run("--reward-samples", "s.jsonl", "--reward-deploy=dir:out")
    assert result.ret != 0
    suggestion = "deploy the other reward functions by selecting them: --reward-fn metrics/sums/main.py::any_answer"
    result.stdout.fnmatch_lines([f"*tiny_sum_rm cannot be deployed*; {suggestion}"])
    assert not (project.path / "out").exists()
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-deploy=dir:out", "--reward-fn", "metrics/sums/main.py::any_answer"
    )
    assert result.ret == 0, result.stdout.str()
    assert (project.path / "out").is_dir()


def test_probed_like_any_reward(project, scores):
    """A reward model meets the reward-hacking probes: the mutated responses are scored in chunks, and the probe's
    verdict names what the model paid for (here: several candidate answers listed as one)."""
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_model

        rm = pytest.mark.reward(threshold=0.0, probes=["stuffing"])(reward_model("tiny-sum-rm"))
        """,
    )
    rows = [{"id": f"s{i}", "messages": msgs(p, a), "ground_truth": a} for i, (p, a) in enumerate(CORRECT)]
    project.jsonl("s.jsonl", rows)  # the ground truth names the answer that stuffing lists among others
    result = project.run("--reward-samples", "s.jsonl", "-k", "probe", "-rA")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1 and "error" not in outcomes
    result.stdout.fnmatch_lines(["*tiny_sum_rm?probe:stuffing?*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_non_finite_score_is_an_invalid_result_naming_it(tmp_path):
    from safetensors.numpy import load_file, save_file

    broken = tmp_path / "nan-rm"
    shutil.copytree(locate_model(SHIPPED), broken)
    tensors = load_file(str(broken / "model.safetensors"))
    tensors["score.weight"] = np.full_like(tensors["score.weight"], np.nan)
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    (result,) = reward_model(broken)(rollouts_messages=[msgs("1+2=", "3")])
    assert not result.is_score_valid and result.score == 0.0
    assert result.error == f"the reward model {broken} scored sample 0 of its chunk nan"


HITS = """
    from pytest_reward.jax import persistent_cache_hits

    def pytest_sessionfinish(session):
        print(f"\\npersistent cache hits: {persistent_cache_hits()}")
"""


def _entries(directory) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file()) if directory.is_dir() else 0


def test_a_reward_model_compiles_through_the_sessions_compilation_cache(project):
    """The ini's ``reward_jax_cache_dir`` is the session's persistent XLA cache for reward models too, as for the
    ``--reward-model`` job: the first run fills it, the next loads its programs from it."""
    _project(project)
    project.file("conftest.py", HITS)
    cache = project.path / ".reward" / "jax-cache"
    first = project.run_subprocess("--reward-samples", "s.jsonl", "-s")
    assert first.ret == 1 and _entries(cache) > 0, first.stdout.str()
    first.stdout.fnmatch_lines(["*persistent cache hits: 0*"])
    filled = _entries(cache)
    again = project.run_subprocess("--reward-samples", "s.jsonl", "-s")
    assert again.ret == 1
    hits = int(again.stdout.str().split("persistent cache hits: ")[1].split()[0])
    assert hits >= 1 and _entries(cache) == filled  # loaded, nothing new compiled


def test_scoring_workers_use_the_sessions_compilation_cache(project, scores):
    """A ``process`` executor's worker loads the model itself: it is told the session's cache with the function."""
    _project(project)
    project.pytester.makeini("[pytest]\nreward_jax_cache_dir = worker-cache\n")
    result = project.run_subprocess(
        "--reward-samples", "s.jsonl", "--reward-executor", "process", "--reward-workers", "1",
        "--reward-report", "out",
    )  # fmt: skip
    assert result.ret == 1, result.stdout.str()
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([r["score"] for r in rows], scores, atol=1e-4)
    assert _entries(project.path / "worker-cache") > 0
    assert not (project.path / ".reward" / "jax-cache").exists()


def test_an_empty_cache_setting_compiles_without_a_cache(project):
    _project(project)
    project.pytester.makeini("[pytest]\nreward_jax_cache_dir =\n")
    result = project.run_subprocess("--reward-samples", "s.jsonl")
    assert result.ret == 1, result.stdout.str()
    assert not (project.path / ".reward" / "jax-cache").exists()


def test_a_cache_directory_that_cannot_be_made_is_an_error_naming_the_option(project, scores):
    _project(project)
    project.file("blocker", "a file where the cache's parent directory should be")
    project.pytester.makeini("[pytest]\nreward_jax_cache_dir = blocker/cache\n")
    result = project.run_subprocess("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*reward_jax_cache_dir: cannot use */blocker/cache as XLA's compilation cache (Not a directory); set the "
            "ini option to a directory that can be written, or leave it empty to compile without a cache*"
        ]
    )
    project.pytester.makeini("[pytest]\nreward_jax_cache_dir =\n")  # the suggestion, taken
    result = project.run_subprocess("--reward-samples", "s.jsonl")
    assert "reward_jax_cache_dir" not in result.stdout.str()
    expected = _verdicts(scores)
    result.assert_outcomes(passed=expected.count("pass"), failed=expected.count("fail"))
