"""``Evaluation`` subclasses as test items: gates from their marker, table rows, reports, xdist, ini listing, bad
input; and the shipped example project (the tiny model) end to end."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from .conftest import EXAMPLES

# A direct Evaluation subclass scoring fixed numbers, and a stand-in job: the plugin side needs no model.
HALVES = """
    import pytest
    from pytest_reward.evaluation import Evaluation, EvaluationSample

    @pytest.fixture(scope="session")
    def inference_job():
        return object()

    class Fixed(Evaluation):
        scores = [1.0, 1.0, 0.0, 0.0]
        def __len__(self):
            return len(self.scores)
        def evaluate_samples(self, inference, encoding=None, **kwargs):
            return [
                EvaluationSample(index=i, input=f"q{{i}}", target="1", output=str(s), score=s,
                                 metrics={{"correct": s, "tokens": 7.0}})
                for i, s in enumerate(self.scores)
            ]

    @pytest.mark.reward({marker})
    class Halves(Fixed):
        name = "halves"
"""


def halves(project, marker: str, extra: str = "") -> None:
    text = textwrap.dedent(HALVES.format(marker=marker)) + textwrap.dedent(extra)
    project.file("test_evals.py", text)


def test_an_evaluation_is_an_item_and_a_table_row(project):
    halves(project, "mean=0.5")
    result = project.run("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["halves * test_evals.py * 4 * 0.500 * 0.000 *PASS*"])


def test_an_evaluation_written_against_the_engine_alias_still_runs(project):
    """``pytest_reward.jax.evaluation`` is kept as an alias for existing code: the same classes, collected and
    run the same way."""
    pytest.importorskip("jax")
    old = HALVES.replace("from pytest_reward.evaluation import", "from pytest_reward.jax.evaluation import")
    assert old != HALVES
    project.file("test_evals.py", old.format(marker="mean=0.5"))
    result = project.run("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["halves * test_evals.py * 4 * 0.500 * 0.000 *PASS*"])


def test_the_class_marker_gates_the_mean_and_fails_the_session(project):
    halves(project, "mean=0.8")
    result = project.run()
    result.assert_outcomes(passed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL halves on test_evals.py: mean 0.5 < 0.8"])


def test_per_sample_threshold_fails_the_item_naming_the_samples(project):
    halves(project, "threshold=0.5")
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*2 of 4 samples failed (halves)*", "*halves?2?: score 0 < threshold 0.5*", "*halves?3?: *"]
    )


def test_metric_gates_apply_to_evaluation_metrics_unbounded_ones_too(project):
    halves(project, 'metrics={"correct": {"mean": 0.75}, "tokens": {"mean": 7.0}}')
    result = project.run()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL halves on test_evals.py: metric 'correct' mean 0.5 < 0.75"])
    assert "tokens" not in "\n".join(line for line in result.stdout.lines if line.startswith("FAIL"))


def test_max_mean_gates_lower_is_better_evaluations(project):
    halves(project, "max_mean=0.4")
    result = project.run()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL halves on test_evals.py: mean 0.5 > 0.4"])


def test_gates_are_judged_once_on_the_xdist_controller(project):
    halves(project, "mean=0.8")
    result = project.run_subprocess("-n", "2", "-p", "xdist")
    assert result.ret == 1
    assert result.stdout.str().count("FAIL halves on test_evals.py: mean 0.5 < 0.8") == 1
    result.stdout.fnmatch_lines(["halves * test_evals.py * 4 * 0.500 *FAIL*"])


def test_repeated_indices_keep_separate_rows_in_reports_and_baselines(project):
    extra = """
    class Repeated(Fixed):
        name = "repeated"
        def evaluate_samples(self, inference, encoding=None, **kwargs):
            return [EvaluationSample(index=i // 2, input="q", output="a", score=float(i % 2)) for i in range(4)]
    """
    halves(project, "", extra)
    assert project.run("--reward-report", "out", "--reward-save", "first").ret == 0
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    keys = sorted(r["key"] for r in rows if r["function"] == "repeated")
    assert keys == ["eval:0", "eval:0#1", "eval:1", "eval:1#1"]
    halves_rows = [r for r in rows if r["function"] == "halves"]
    assert [r["score"] for r in sorted(halves_rows, key=lambda r: r["key"])] == [1.0, 1.0, 0.0, 0.0]
    result = project.run("--reward-compare", "first")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*halves*test_evals.py*4*"])


def test_an_empty_evaluation_fails_with_the_reason(project):
    halves(project, "", "\nclass Empty(Fixed):\n    name = 'empty'\n    scores = ()\n")
    result = project.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*empty: the evaluation has no samples (len() is 0)*"])


def test_an_evaluation_error_is_a_clean_failure(project):
    extra = """
    from pytest_reward.evaluation import EvaluationError

    class TooLong(Fixed):
        name = "too_long"
        def evaluate_samples(self, inference, encoding=None, **kwargs):
            raise EvaluationError("too_long: sample 3: the prompt has 90 tokens, the context holds 64")
    """
    halves(project, "", extra)
    result = project.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*too_long: sample 3: the prompt has 90 tokens, the context holds 64*"])
    assert "Traceback" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()


def test_an_evaluation_that_needs_arguments_says_so(project):
    extra = """
    class NeedsRows(Fixed):
        name = "needs_rows"
        def __init__(self, rows):
            self.rows = rows
    """
    halves(project, "", extra)
    result = project.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*NeedsRows: cannot construct the evaluation without arguments*"])


def test_private_and_abstract_evaluations_are_not_collected(project):
    extra = """
    from pytest_reward.evaluation import RolloutEvaluation

    class _Helper(Fixed):
        name = "helper"

    class StillAbstract(RolloutEvaluation):
        name = "abstract"
    """
    halves(project, "", extra)
    result = project.run("--collect-only", "-q")
    assert "test_evals.py::Halves" in result.stdout.str()
    assert "_Helper" not in result.stdout.str() and "StillAbstract" not in result.stdout.str()


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        # the README's own placeholder: nothing implemented
        (
            """
            @pytest.mark.reward(max_mean=8.0)
            class ProblemPerplexity(PerplexityEvaluation): ...
            """,
            "ProblemPerplexity: the Evaluation class is abstract (it does not implement __len__, get, name)*",
        ),
        # a misspelled method
        (
            """
            @pytest.mark.reward(max_mean=8.0)
            class ProblemPerplexity(PerplexityEvaluation):
                name = "ppl"
                def __len__(self):
                    return 1
                def gett(self, index):
                    return "text"
            """,
            "ProblemPerplexity: the Evaluation class is abstract (it does not implement get)*",
        ),
        # named like a test class: pytest collects it, so it was meant to run
        (
            """
            class TestPerplexity(PerplexityEvaluation):
                name = "ppl"
                def __len__(self):
                    return 1
            """,
            "TestPerplexity: the Evaluation class is abstract (it does not implement get)*",
        ),
    ],
)
def test_an_abstract_evaluation_meant_to_run_is_a_collection_error(project, source, missing):
    project.file("conftest.py", CONFTEST_JOB)
    project.file(
        "test_evals.py",
        "import pytest\nfrom pytest_reward.evaluation import PerplexityEvaluation\n"
        + textwrap.dedent(source)
        + "\ndef test_plain():\n    pass\n",
    )
    result = project.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ERROR collecting test_evals.py*", f"test_evals.py::{missing}"])


def test_a_marked_abstract_base_class_shares_its_gates_with_its_subclasses(project):
    project.file("conftest.py", CONFTEST_JOB)
    project.file(
        "test_evals.py",
        """
        import pytest
        from pytest_reward.evaluation import Evaluation, EvaluationSample

        @pytest.mark.reward(mean=0.9)
        class Base(Evaluation):
            def __len__(self):
                return 2

        class Ones(Base):
            name = "ones"
            def evaluate_samples(self, inference, encoding=None, **kwargs):
                return [EvaluationSample(index=i, input="q", score=1.0) for i in range(2)]
        """,
    )
    result = project.run("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_evals.py::Ones PASSED*"])


def test_without_a_model_an_evaluation_is_a_usage_error(project):
    project.file(
        "test_evals.py",
        """
        from pytest_reward.evaluation import Evaluation

        class Lonely(Evaluation):
            name = "lonely"
            def __len__(self):
                return 1
            def evaluate_samples(self, inference, encoding=None, **kwargs):
                return []
        """,
    )
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*test_evals.py::Lonely: no model to roll out prompt-only samples or run evaluations*"]
    )


EVALS_MODULE = """
    from pytest_reward.evaluation import Evaluation, EvaluationSample

    class Listed(Evaluation):
        name = "listed"
        def __len__(self):
            return 2
        def evaluate_samples(self, inference, encoding=None, **kwargs):
            return [EvaluationSample(index=i, input="q", score=1.0) for i in range(2)]

    class NotAnEvaluation:
        pass
"""

CONFTEST_JOB = """
    import pytest

    @pytest.fixture(scope="session")
    def inference_job():
        return object()
"""


def test_evaluations_listed_in_ini_are_collected_by_path_or_by_module(project):
    project.file("evals/checks.py", EVALS_MODULE)
    project.file("mypkg/__init__.py", "")
    project.file("mypkg/more.py", EVALS_MODULE.replace('"listed"', '"listed_by_name"'))
    project.file("conftest.py", CONFTEST_JOB)
    project.pytester.makeini(
        "[pytest]\npythonpath = .\nreward_evaluations =\n    evals/checks.py::Listed\n    mypkg.more:Listed\n"
    )
    result = project.run("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*evals/checks.py::Listed PASSED*", "*mypkg/more.py::Listed PASSED*"], consecutive=False
    )
    result.stdout.fnmatch_lines(
        ["listed * evals/checks.py * 2 *NO GATE*", "listed_by_name * mypkg/more.py * 2 *NO GATE*"]
    )
    # -k deselects listed evaluations like any item
    result = project.run("-k", "checks")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("evals/checks.py::Missing", "*evals/checks.py::Missing*checks has no attribute 'Missing'*"),
        ("evals/checks.py::NotAnEvaluation", "*'NotAnEvaluation' is not a subclass of *Evaluation*"),
        ("evals/nowhere.py::Listed", "*file evals/nowhere.py not found*"),
        ("no_such_module:Listed", "*import failed: ModuleNotFoundError*no_such_module*"),
        ("Listed", "*expected package.module:Class or path/to/file.py::Class*"),
    ],
)
def test_a_bad_ini_evaluation_entry_is_a_usage_error(project, entry, message):
    project.file("evals/checks.py", EVALS_MODULE)
    project.file("conftest.py", CONFTEST_JOB)
    project.pytester.makeini(f"[pytest]\nreward_evaluations = {entry}\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*ini reward_evaluations entry*{message}"])


# --- the shipped example: the tiny model, rollouts, perplexity, comparison, prompt-only samples -------------


def _example(project) -> None:
    pytest.importorskip("jax")
    src = EXAMPLES / "tiny-model-eval"
    for path in src.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            dest = project.path / path.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest)
    (project.path / "tox.ini").unlink()  # the example's own pyproject.toml is its configuration


@pytest.mark.parametrize("workers", [[], ["-n", "2", "-p", "xdist"]], ids=["serial", "xdist"])
def test_tiny_model_eval_example_is_green(project, workers):
    _example(project)
    result = project.run_subprocess("--reward-report", "out", *workers)
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "digits_only * prompts.jsonl * 32 * 1.000 *PASS*",
            "exact_sum * prompts.jsonl * 32 *PASS*",
            "heldout_accuracy * test_evaluations.py * 200 *PASS*",
            "problem_perplexity * test_evaluations.py * 64 *PASS*",
            "right_over_wrong * test_evaluations.py * 200 *PASS*",
        ],
        consecutive=False,
    )
    assert "exact_sum on prompts.jsonl: 4 responses per prompt: pass@1" in out
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    by_fn: dict[str, list[dict]] = {}
    for row in rows:
        by_fn.setdefault(row["function"], []).append(row)
    accuracy = by_fn["heldout_accuracy"]
    assert len(accuracy) == 200 and 0.88 <= sum(r["score"] for r in accuracy) / 200 <= 1.0
    # every prompt-only sample carries its 4 generated responses
    assert all(len(r["responses"]) == 4 for r in by_fn["exact_sum"])
    comparison = by_fn["right_over_wrong"]
    assert sum(r["score"] for r in comparison) / len(comparison) >= 0.85
    if not workers:
        # one session, one compiled model: the prompt-only samples cost one rollout call
        result.stdout.fnmatch_lines(["reward: rollouts: 1 call(s) to the model, *"])


def test_tiny_model_eval_fails_when_the_accuracy_gate_is_out_of_reach(project):
    _example(project)
    path = project.path / "test_evaluations.py"
    path.write_text(
        path.read_text().replace(
            "@pytest.mark.reward(mean=0.85, confidence=0.95)", "@pytest.mark.reward(mean=0.99)"
        )
    )
    result = project.run_subprocess("-k", "HeldoutAccuracy")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL heldout_accuracy on test_evaluations.py: mean 0.93 < 0.99"])


def test_a_prompt_longer_than_the_context_fails_the_evaluation_naming_the_sample(project):
    pytest.importorskip("jax")
    project.file(
        "test_long.py",
        """
        from pytest_reward.evaluation import RolloutEvaluation

        class Long(RolloutEvaluation):
            name = "long"
            def __len__(self):
                return 2
            def get(self, indx):
                return ("1+1=" if indx == 0 else "1" * 100 + "+1="), "2"
            def max_new_tokens(self, inference):
                return 4
            def check(self, y, y_hat):
                return y == y_hat
        """,
    )
    result = project.run_subprocess("--reward-model", "tiny-adder")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*long*sample 1*"])
    assert "INTERNALERROR" not in result.stdout.str()
