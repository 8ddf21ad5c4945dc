"""Thresholds and aggregate gates, declared in markers, ini and on the command line."""

from __future__ import annotations

import json

import pytest

from .conftest import msgs

# score = the number in the assistant turn, so each test states its data exactly.
SCORE_IS_CONTENT = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult, MetricResult

    @pytest.mark.reward({marker})
    @reward_function
    def number(messages, **kwargs):
        text = messages[-1]["content"]
        if text == "boom":
            raise RuntimeError("boom")
        x = float(text)
        return EvaluateResult(score=x, reason="as written",
                              metrics={{"half": MetricResult(score=x / 2, reason="half")}})
"""


def scores_project(project, marker: str, scores: list) -> None:
    project.file("rewards.py", SCORE_IS_CONTENT.format(marker=marker))
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", str(s))} for i, s in enumerate(scores)])


def test_mean_gate_fails_the_session_with_one_clear_line(project):
    scores_project(project, "mean=0.7", [0.5, 0.6, 0.7])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=3)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on s.jsonl: mean 0.6 < 0.7"])
    scores_project(project, "mean=0.6", [0.5, 0.6, 0.7])
    assert project.run("--reward-samples", "s.jsonl").ret == 0


def test_pass_rate_tolerates_individual_misses(project):
    scores_project(project, "threshold=0.5, pass_rate=0.75", [0.9, 0.8, 0.7, 0.2])
    result = project.run("--reward-samples", "s.jsonl", "-rA")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*3 passed, 1 below threshold*"])
    result.stdout.fnmatch_lines(["*number*s.jsonl*4*75.0%*PASS*"])
    scores_project(project, "threshold=0.5, pass_rate=0.8", [0.9, 0.8, 0.7, 0.2])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on s.jsonl: pass_rate 0.75 < 0.8"])


def test_threshold_without_pass_rate_fails_each_miss(project):
    scores_project(project, "threshold=0.5", [0.9, 0.2])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=1, failed=1)


def test_quantile_gate(project):
    # type-7 quantile of [0.1, 0.6, 0.7, 0.8, 0.9] at 0.25 is 0.6: the gate at 0.5 passes, at 0.65 fails.
    scores_project(project, "quantile={0.25: 0.5}", [0.1, 0.6, 0.7, 0.8, 0.9])
    assert project.run("--reward-samples", "s.jsonl").ret == 0
    scores_project(project, "quantile={0.25: 0.65}", [0.1, 0.6, 0.7, 0.8, 0.9])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on s.jsonl: quantile(0.25) 0.6 < 0.65"])


def test_confidence_gates_on_the_interval_lower_bound(project):
    # mean 0.8 passes a point gate at 0.7, but with 5 noisy samples the bootstrap lower bound is below 0.7.
    data = [1.0, 1.0, 0.4, 1.0, 0.6]
    scores_project(project, "mean=0.7", data)
    assert project.run("--reward-samples", "s.jsonl").ret == 0
    scores_project(project, "mean=0.7, confidence=0.95", data)
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["FAIL number on s.jsonl: mean 0.8 (CI lower bound 0.*, 95% bootstrap (B=2000, seed=0)) < 0.7"]
    )


def test_confidence_on_pass_rate_uses_wilson(project):
    scores_project(project, "threshold=0.5, pass_rate=0.5, confidence=0.95", [0.9] * 9 + [0.1])
    result = project.run("--reward-samples", "s.jsonl")
    # 9/10 passes; Wilson 95 % lower bound 0.5958 >= 0.5.
    assert result.ret == 0
    scores_project(project, "threshold=0.5, pass_rate=0.7, confidence=0.95", [0.9] * 9 + [0.1])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["FAIL number on s.jsonl: pass_rate 0.9 (CI lower bound 0.5958, 95% Wilson score) < 0.7"]
    )


def test_metric_gates(project):
    scores_project(project, "metrics={'half': {'mean': 0.4}}", [0.6, 0.8])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on s.jsonl: metric 'half' mean 0.35 < 0.4"])
    scores_project(project, "metrics={'half': {'threshold': 0.35}}", [0.6, 0.8])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED s.jsonl::number?s0? - metric 'half' 0.3 < threshold 0.35"])


def test_missing_gated_metric_fails_the_sample(project):
    scores_project(project, "metrics={'nope': {'mean': 0.1}}", [0.6])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*metric 'nope' is missing from the result (it has gates)"])


def test_errors_count_as_failures_in_every_aggregate(project):
    scores_project(project, "mean=0.5, pass_rate=0.5, threshold=0.1", [0.9, 0.9, "boom", "boom"])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*number*s.jsonl*4 (2 err)*0.450*0.000*50.0%*FAIL*", "FAIL number on s.jsonl: mean 0.45 < 0.5"]
    )


def test_defaults_from_ini_and_command_line_with_marker_precedence(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        @reward_function
        def plain(messages, **kwargs):
            return {"score": float(messages[-1]["content"])}

        @pytest.mark.reward(threshold=0.1)
        @reward_function
        def lenient(messages, **kwargs):
            return {"score": float(messages[-1]["content"])}
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "0.3")}])
    project.pytester.makeini("[pytest]\nreward_threshold = 0.2\n")
    project.run("--reward-samples", "s.jsonl").assert_outcomes(passed=2)
    result = project.run("--reward-samples", "s.jsonl", "--reward-threshold", "0.5")
    result.assert_outcomes(passed=1, failed=1)  # CLI beats ini; the marker beats both
    result.stdout.fnmatch_lines(["FAILED s.jsonl::plain?line-1? - score 0.3 < threshold 0.5"])


def test_cli_gates_apply_to_every_function(project):
    scores_project(project, "", [0.2, 0.4])
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-mean", "0.5", "--reward-quantile", "0.5:0.35"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["FAIL number on s.jsonl: mean 0.3 < 0.5", "FAIL number on s.jsonl: quantile(0.5) 0.3 < 0.35"]
    )


def test_expect_golden_values(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function, EvaluateResult, MetricResult

        @reward_function
        def number(messages, **kwargs):
            x = float(messages[-1]["content"])
            return EvaluateResult(score=x, metrics={"half": MetricResult(score=x / 2, reason="")})
        """,
    )
    project.jsonl(
        "s.jsonl",
        [
            {"id": "ok", "messages": msgs("q", "0.67"), "expect": {"score": 0.67, "tol": 0.01}},
            {"id": "off", "messages": msgs("q", "0.5"), "expect": {"score": 0.67, "tol": 0.01}},
            {"id": "min", "messages": msgs("q", "0.4"), "expect": {"min": 0.5}},
            {"id": "max", "messages": msgs("q", "0.1"), "expect": {"max": 0.2}},
            {"id": "metric", "messages": msgs("q", "0.8"), "expect": {"metrics": {"half": {"min": 0.5}}}},
            {"id": "nometric", "messages": msgs("q", "0.8"), "expect": {"metrics": {"whole": {"min": 0.5}}}},
        ],
    )
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=2, failed=4)
    result.stdout.fnmatch_lines(
        [
            "FAILED s.jsonl::number?off? - expect score: expected 0.67 ± 0.01, got 0.5",
            "FAILED s.jsonl::number?min? - expect score: expected ≥ 0.5, got 0.4",
            "FAILED s.jsonl::number?metric? - expect metric 'half': expected ≥ 0.5, got 0.4",
            "FAILED s.jsonl::number?nometric? - expect metric 'whole': the result has no such metric",
        ]
    )


def test_partial_runs_do_not_judge_aggregates(project):
    scores_project(project, "mean=0.9", [0.1, 0.95, 0.95])
    result = project.run("--reward-samples", "s.jsonl", "-k", "s1 or s2")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["SKIP number on s.jsonl: mean ≥ 0.9 not evaluated: partial run (2 of 3 samples ran)"]
    )


def test_every_sample_errored_never_passes_a_gate(project):
    scores_project(project, "mean=-1.0, pass_rate=0.0", ["boom", "boom"])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*number*s.jsonl*2 (2 err)*FAIL*"])


def test_expect_can_target_one_function(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function, EvaluateResult, MetricResult

        @reward_function
        def safety(messages, **kwargs):
            return EvaluateResult(score=1.0, metrics={"safe": MetricResult(score=1.0, reason="")})

        @reward_function
        def relevance(messages, **kwargs):
            return EvaluateResult(score=0.4)
        """,
    )
    project.jsonl(
        "s.jsonl",
        [
            {
                "id": "a",
                "messages": msgs("q", "a"),
                "expect": {
                    "min": 0.3,
                    "functions": {
                        "safety": {"metrics": {"safe": {"min": 0.9}}},
                        "relevance": {"score": 0.4, "tol": 0.01},
                    },
                },
            },
            {"id": "b", "messages": msgs("q", "b"), "expect": {"functions": {"relevance": {"min": 0.5}}}},
        ],
    )
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["FAILED s.jsonl::relevance?b? - expect score: expected ≥ 0.5, got 0.4"])


def test_expect_functions_must_be_an_object(project):
    project.file("rewards.py", SCORE_IS_CONTENT.format(marker=""))
    project.jsonl("s.jsonl", [{"messages": msgs("q", "0.5"), "expect": {"functions": ["number"]}}])
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines(
        ["*s.jsonl:1: 'expect.functions' must be an object mapping reward function names to expectations"]
    )


def test_max_mean_is_an_upper_bound(project):
    scores_project(project, "max_mean=1.4", [1.2, 1.4, 1.9])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on s.jsonl: mean 1.5 > 1.4"])
    scores_project(project, "max_mean=1.6", [1.2, 1.4, 1.9])
    assert project.run("--reward-samples", "s.jsonl").ret == 0
    scores_project(project, "max_mean=1.6, confidence=0.95", [1.2, 1.4, 1.9])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["FAIL number on s.jsonl: mean 1.5 (CI upper bound 1.*, 95% bootstrap (B=2000, seed=0)) > 1.6"]
    )


def test_a_session_failed_only_by_a_gate_ends_on_a_red_line_naming_it(project):
    scores_project(project, "mean=0.7", [0.5, 0.6, 0.7])
    result = project.run("--reward-samples", "s.jsonl", "--color=yes")
    assert result.ret == 1
    last = result.stdout.lines[-1]
    assert last.startswith("\x1b[31m") and "1 gate failed\x1b[0m" in last, repr(last)
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*= 3 passed, 1 gate failed in *"])


def test_nothing_gated_is_no_gate_in_every_artifact_and_fails_nothing(project, monkeypatch):
    # Two of three answers score 0: without a threshold or gate, no artifact may call that a pass.
    scores_project(project, "", [1, 0, 0])
    step = project.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["number * s.jsonl * 3 * 0.333 * 0.000 * 0.000 * – * NO GATE"])
    data = json.loads((project.path / "out" / "summary.json").read_text())
    (group,) = data["groups"]
    assert group["verdict"] == "NO GATE" and group["summary"]["pass_rate"] is None
    assert group["summary"]["mean"] == pytest.approx(1 / 3)
    page = (project.path / "out" / "report.html").read_text()
    assert ">NO GATE<" in page and "100.0%" not in page
    table = step.read_text()
    assert "| 3 | 0 | 0.333 |" in table and "| – | NO GATE |" in table and "PASS |" not in table
    # declared, the same scores get a verdict
    scores_project(project, "threshold=0.5", [1, 0, 0])
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines(["number * s.jsonl * 3 * 0.333 * 0.000 * 0.000 * 33.3% * FAIL*"])
