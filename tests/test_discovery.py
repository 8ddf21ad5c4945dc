"""Where reward functions are found and which samples files they meet."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import msgs

FN = """
    from pytest_reward import reward_function

    @reward_function
    def {name}(messages, **kwargs):
        return {{"score": {score}}}
"""


def test_seed_layout_with_two_metric_folders(project):
    project.file("metrics/relevance/main.py", FN.format(name="evaluate", score=0.25))
    project.file("metrics/safety/main.py", FN.format(name="evaluate", score=0.75))
    project.jsonl("samples.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "samples.jsonl", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*samples.jsonl::relevance.evaluate?line-1? PASSED*",
            "*samples.jsonl::safety.evaluate?line-1? PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(["*relevance.evaluate*0.250*", "*safety.evaluate*0.750*"])


def test_functions_in_test_modules_are_found_and_imports_are_not_counted_twice(project):
    project.file("rewards.py", FN.format(name="shared", score=1.0))
    project.file(
        "tests/test_scoring.py",
        """
        from pytest_reward import reward_function
        from rewards import shared  # imported: belongs to rewards.py, not collected again here

        @reward_function
        def local_one(messages, **kwargs):
            return {"score": 0.5}

        def test_regular():
            assert shared(messages=[{"role": "user", "content": "x"}]).score == 1.0
        """,
    )
    project.pytester.makeini("[pytest]\npythonpath = .\n")
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl", ".", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["*s.jsonl::shared?line-1? PASSED*", "*s.jsonl::local_one?line-1? PASSED*", "*test_regular PASSED*"]
    )


def test_reward_fn_selects_only_the_named_functions(project):
    project.file(
        "rewards.py",
        textwrap.dedent(FN.format(name="one", score=1.0)) + textwrap.dedent(FN.format(name="two", score=0.5)),
    )
    project.file("pkg/scoring.py", FN.format(name="three", score=0.25))
    project.file("pkg/__init__.py", "")
    project.pytester.makeini("[pytest]\npythonpath = .\n")
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-fn", "rewards.py::two", "--collect-only", "-q"
    )
    result.stdout.fnmatch_lines(["s.jsonl::two?line-1?", "1 test collected*"])
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-fn", "pkg.scoring:three", "--collect-only", "-q"
    )
    result.stdout.fnmatch_lines(["s.jsonl::three?line-1?", "1 test collected*"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope.py::f", "*--reward-fn nope.py::f: file nope.py not found*"),
        ("rewards.py::missing", "*rewards has no attribute 'missing'*"),
        ("rewards.py::helper", "*'helper' is not decorated with @reward_function*"),
        ("no_such_module:f", "*No module named 'no_such_module'*"),
        ("rewards", "*expected path.py::name or package.module:name*"),
    ],
)
def test_bad_reward_fn_specs(project, spec, message):
    project.file(
        "rewards.py", textwrap.dedent(FN.format(name="one", score=1.0)) + "\n\ndef helper():\n    pass\n"
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl", "--reward-fn", spec)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_marker_bound_samples_meet_only_their_function(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(samples="data/math.jsonl")
        @reward_function
        def math_only(messages, ground_truth, **kwargs):
            return {"score": float(messages[-1]["content"] == ground_truth)}

        @reward_function
        def general(messages, **kwargs):
            return {"score": 1.0}
        """,
    )
    project.jsonl("data/math.jsonl", [{"messages": msgs("1+1", "2"), "ground_truth": "2"}])
    project.jsonl("chat.jsonl", [{"messages": msgs("hi", "hello")}])
    result = project.run("--reward-samples", "chat.jsonl", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*chat.jsonl::general?line-1? PASSED*", "*data/math.jsonl::math_only?line-1? PASSED*"]
    )
    # A plain `pytest` (no option, no ini) still runs the functions that bind samples in their marker.
    result = project.run("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*data/math.jsonl::math_only?line-1? PASSED*"])


def test_plain_pytest_reports_a_broken_samples_binding(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(samples="data/missing.jsonl")
        @reward_function
        def bound(messages, **kwargs):
            return {"score": 1.0}
        """,
    )
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*invalid reward functions:*", "*rewards.py::bound: samples file 'data/missing.jsonl' not found*"]
    )


def test_samples_glob_meets_the_functions_of_its_directory_tree(project):
    project.file("metrics/relevance/main.py", FN.format(name="relevance", score=1.0))
    project.file("metrics/safety/main.py", FN.format(name="safety", score=1.0))
    project.jsonl("metrics/relevance/evals.jsonl", [{"messages": msgs("q", "a")}])
    project.jsonl("metrics/evals.jsonl", [{"messages": msgs("q", "a")}])
    project.pytester.makeini("[pytest]\nreward_samples_glob = evals.jsonl\n")
    result = project.run("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "metrics/evals.jsonl::relevance?line-1?",
            "metrics/evals.jsonl::safety?line-1?",
            "metrics/relevance/evals.jsonl::relevance?line-1?",
            "3 tests collected*",
        ]
    )


def test_module_level_marker_and_other_marks(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        pytestmark = pytest.mark.reward(threshold=0.6)

        @reward_function
        def a(messages, **kwargs):
            return {"score": 0.5}

        @pytest.mark.reward(threshold=0.4)
        @reward_function
        def b(messages, **kwargs):
            return {"score": 0.5}

        @pytest.mark.slow
        @reward_function
        def c(messages, **kwargs):
            return {"score": 0.9}

        @pytest.mark.skip(reason="judge offline")
        @reward_function
        def d(messages, **kwargs):
            return {"score": 0.0}
        """,
    )
    project.pytester.makeini("[pytest]\nmarkers = slow: slow\n")
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl", "-rfs")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["FAILED s.jsonl::a?line-1? - score 0.5 < threshold 0.6"])
    result.stdout.fnmatch_lines(["SKIPPED*judge offline"])
    project.run("--reward-samples", "s.jsonl", "-m", "slow").assert_outcomes(passed=1, deselected=3)


def test_functions_built_at_run_time_are_collected(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function

        def make(weight):
            @reward_function(id=f"weighted_{int(weight * 10)}")
            def inner(messages, **kwargs):
                return {"score": weight}
            return inner

        half = make(0.5)
        full = make(1.0)
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["s.jsonl::weighted_5?line-1?", "s.jsonl::weighted_10?line-1?"])


REWARD_KIT_STANDIN = '''
"""A stand-in with reward-kit 0.4.1's decorator contract:
functools.wraps, the _reward_function_* attributes, its own pydantic EvaluateResult, inputs coerced by the wrapper."""
import functools
from typing import Dict, Optional
from pydantic import BaseModel


class MetricResult(BaseModel):
    is_score_valid: bool = True
    score: float
    reason: str


class EvaluateResult(BaseModel):
    score: float
    is_score_valid: bool = True
    reason: Optional[str] = None
    metrics: Dict[str, MetricResult] = {}
    error: Optional[str] = None


def reward_function(_func=None, *, mode="pointwise", id=None, requirements=None, resources=None):
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)
        wrapper._reward_function_id = id
        wrapper._reward_function_requirements = requirements or []
        wrapper._reward_function_mode = mode
        wrapper._reward_function_resources = resources
        return wrapper
    return decorate(_func) if _func is not None else decorate
'''


def test_functions_decorated_by_reward_kit_are_collected_unchanged(project):
    # The same with the real reward-kit 0.4.1 (in its own venv, its pins conflict with ours):
    # tests/deploy/test_serve_clients.py::test_functions_decorated_by_the_real_reward_kit_are_collected
    project.file("reward_kit_standin/__init__.py", REWARD_KIT_STANDIN)
    project.file(
        "rewards.py",
        """
        from reward_kit_standin import reward_function, EvaluateResult, MetricResult

        @reward_function
        def rk(messages, ground_truth=None, **kwargs):
            ok = messages[-1]["content"] == ground_truth
            return EvaluateResult(score=float(ok), reason="match", metrics={"m": MetricResult(score=float(ok), reason="x")})
        """,
    )
    project.pytester.makeini("[pytest]\npythonpath = .\n")
    project.jsonl(
        "s.jsonl",
        [
            {"messages": msgs("q", "4"), "ground_truth": "4"},
            {"messages": msgs("q", "5"), "ground_truth": "4"},
        ],
    )
    outcomes = project.outcomes("--reward-samples", "s.jsonl")
    assert [(o["score"], o["metrics"]["m"]["score"], o["reason"]) for o in outcomes] == [
        (1.0, 1.0, "match"),
        (0.0, 0.0, "match"),
    ]
