"""The table of gate kinds: marker validation, verdicts, reports and the marker's help all read it, so that a gate
kind added to the table (here a test-only one) is validated, judged and reported with no other change."""

from __future__ import annotations

import json

import pytest

from pytest_reward.judge import gates as gates_module
from pytest_reward.judge.gates import (
    AT_LEAST,
    AT_MOST,
    GATE_KINDS,
    GateError,
    GateKind,
    Gates,
    Marker,
    marker_doc,
    validate_marker,
)
from pytest_reward.judge.stats import wilson_interval

from .conftest import msgs

# score = the number in the assistant turn; metric "half" = score / 2.
SCORE_IS_CONTENT = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult, MetricResult

    @pytest.mark.reward({marker})
    @reward_function
    def number(messages, **kwargs):
        x = float(messages[-1]["content"])
        return EvaluateResult(score=x, reason="as written",
                              metrics={{"half": MetricResult(score=x / 2, reason="half")}})
"""

MIN_SCORE = GateKind(
    "min_score", "min", AT_LEAST, "number", None, True, "the lowest score must be at least this"
)


def scores_project(project, marker: str, scores: list[float]) -> None:
    project.file("rewards.py", SCORE_IS_CONTENT.format(marker=marker))
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", str(s))} for i, s in enumerate(scores)])


@pytest.fixture
def min_score(monkeypatch):
    """The table with one more kind: a lower bound on the lowest score (the summaries already have ``min``)."""
    monkeypatch.setattr(gates_module, "GATE_KINDS", (*GATE_KINDS, MIN_SCORE))


def test_the_unknown_key_error_lists_the_table(project):
    scores_project(project, "max_meen=0.5", [0.5])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret != 0
    allowed = ", ".join(kind.key for kind in GATE_KINDS)
    result.stdout.fnmatch_lines(
        [f"*unknown key 'max_meen' (did you mean 'max_mean'?); allowed: {allowed}, *"]
    )
    assert "INTERNALERROR" not in result.stdout.str()


def test_every_kind_round_trips_through_its_dict():
    values = {
        "threshold": 0.5,
        "mean": 0.4,
        "max_mean": 0.9,
        "pass_rate": 0.5,
        "quantile": {0.1: 0.2},
        "pair_accuracy": 0.8,
        "subset_accuracy": {"safety": 0.9, "chat": 0.7},
        "mean_margin": 0.1,
    }
    assert set(values) == {kind.key for kind in GATE_KINDS}  # a new kind: add it here
    values |= {"confidence": 0.9, "metrics": {"m": {"mean": 0.3, "threshold": 0.1, "pass_rate": 0.5}}}
    gates = Gates().merged(validate_marker((), values, "w"), "marker")
    assert Gates.from_dict(json.loads(json.dumps(gates.to_dict())), "w") == gates
    assert gates.quantile == ((0.1, 0.2),) and gates.metric_map["m"].pass_rate == 0.5
    assert gates.subset_accuracy == (("chat", 0.7), ("safety", 0.9)) and gates.pair_gated


def test_the_marker_settings_are_apart_from_the_gates():
    marker = Marker().merged(
        validate_marker((), {"mean": 0.5, "samples": "a.jsonl", "timeout": 2, "rollout": {"n": 2}}, "w"),
        "marker",
    )
    assert marker.gates == Gates(mean=0.5)
    assert (marker.samples, marker.timeout, marker.rollout_map) == (("a.jsonl",), 2.0, {"n": 2})
    assert marker.to_dict() == {"mean": 0.5, "samples": ["a.jsonl"], "rollout": {"n": 2}, "timeout": 2.0}
    with pytest.raises(GateError, match="unknown gate key 'samples'"):
        Gates.from_dict(marker.to_dict(), "w")


def test_a_row_is_checked_when_the_table_is_written():
    with pytest.raises(ValueError, match="no 'wilson' interval of the min"):
        GateKind("x", "min", AT_LEAST, "number", "wilson", False, "")


def test_a_new_row_is_in_the_help_and_checked(project, min_score):
    assert (
        "min_score=None" in marker_doc()
        and "min_score: the lowest score must be at least this" in marker_doc()
    )
    result = project.run("--markers")
    result.stdout.fnmatch_lines(["*min_score=None*min_score: the lowest score must be at least this*"])
    scores_project(project, "min_score='low'", [0.5])
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines(["*min_score must be a number, got str 'low'*"])
    scores_project(project, "metrics={'half': {'min_score': float('nan')}}", [0.5])
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines(["*metrics?'half'?: min_score must be finite, got nan*"])


def test_a_new_row_is_judged_and_reported(project, min_score, monkeypatch):
    step_summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    scores_project(project, "min_score=0.3, metrics={'half': {'min_score': 0.05}}", [0.2, 0.6, 0.9])
    result = project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on s.jsonl: min 0.2 < 0.3"])
    assert "metric 'half'" not in "".join(line for line in result.stdout.lines if line.startswith("FAIL"))
    # Markdown-escaped, as every user-controlled text in the step summary is
    assert "number on s\\.jsonl\\: min 0\\.2 &lt; 0\\.3" in step_summary.read_text()
    gates = json.loads((project.path / "out" / "summary.json").read_text())["groups"][0]["gates"]
    assert [(g["target"], g["gate"], g["value"], g["passed"]) for g in gates] == [
        ("score", "min_score", 0.2, False),
        ("metric 'half'", "min_score", 0.1, True),
    ]
    html = (project.path / "out" / "report.html").read_text()
    assert "min_score" in html and "metric &#x27;half&#x27; min_score" in html

    scores_project(project, "min_score=0.2", [0.2, 0.6, 0.9])
    assert project.run("--reward-samples", "s.jsonl").ret == 0


def test_a_new_upper_bound_row_is_judged_on_its_interval(project, monkeypatch):
    """A row's direction and interval method are all it takes: an upper bound on the pass rate, judged on the upper
    edge of the Wilson interval when ``confidence=`` is set."""
    max_pass_rate = GateKind(
        "max_pass_rate", "pass_rate", AT_MOST, "rate", "wilson", False, "at most this share may pass"
    )
    monkeypatch.setattr(gates_module, "GATE_KINDS", (*GATE_KINDS, max_pass_rate))
    scores_project(project, "threshold=0.5, max_pass_rate=0.7", [0.2, 0.6, 0.9])
    assert project.run("--reward-samples", "s.jsonl").ret == 0
    scores_project(project, "threshold=0.5, max_pass_rate=0.7, confidence=0.9", [0.2, 0.6, 0.9])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    high = wilson_interval(2, 3, 0.9).high
    result.stdout.fnmatch_lines(
        [f"FAIL number on s.jsonl: pass_rate 0.6667 (CI upper bound {high:.4g}, 90% Wilson score) > 0.7"]
    )
