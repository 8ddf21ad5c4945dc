"""--reward-report, --reward-preview, junitxml properties, the GitHub step summary, --reward-runs."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.judge.results import SampleOutcome, row_json

from .conftest import msgs

VALUE = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult, MetricResult

    @pytest.mark.reward(threshold=0.3, mean=0.2)
    @reward_function
    def value(messages, **kwargs):
        x = float(messages[-1]["content"])
        return EvaluateResult(score=x, reason=f"read {x}", metrics={"half": MetricResult(score=x / 2, reason="half")})
"""


def value_project(project, n=12, values=None):
    project.file("rewards.py", VALUE)
    values = values or [round((i % 10) / 10 + 0.05, 2) for i in range(n)]
    rows = [{"id": f"s{i:03d}", "messages": msgs(f"question {i}", str(v))} for i, v in enumerate(values)]
    project.jsonl("s.jsonl", rows)
    return values


def read_rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_report_files(project, granularity):
    values = value_project(project)
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-report", "out", "--reward-granularity", granularity
    )
    assert result.ret == 1  # samples below 0.3 fail
    out = project.path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "results.jsonl", "summary.json"]
    rows = read_rows(out / "results.jsonl")
    assert [r["id"] for r in rows] == [f"s{i:03d}" for i in range(12)]
    assert [r["score"] for r in rows] == values
    first = rows[0]
    assert set(first) >= {
        "id",
        "file",
        "line",
        "score",
        "metrics",
        "reason",
        "verdict",
        "error",
        "duration",
        "key",
    }
    assert (first["file"], first["line"], first["metrics"], first["reason"]) == (
        "s.jsonl",
        1,
        {"half": 0.025},
        "read 0.05",
    )
    assert [r["verdict"] for r in rows[:4]] == ["fail", "fail", "fail", "pass"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "pytest-reward-summary" and summary["plugin_version"]
    assert summary["pytest_version"] == pytest.__version__ and summary["python"]
    (group,) = summary["groups"]
    assert group["function"] == "value" and group["file"] == "s.jsonl" and group["verdict"] == "FAIL"
    assert group["summary"]["n"] == 12 and group["summary"]["mean"] == pytest.approx(sum(values) / 12)
    assert group["summary"]["mean_ci"]["method"].startswith("bootstrap")
    assert [g["gate"] for g in group["gates"]] == ["mean"] and group["gates"][0]["passed"]
    assert sum(group["histogram"]["counts"]) + group["histogram"]["errors"] == 12
    assert summary["verdict"] == "FAIL"
    result.stdout.fnmatch_lines(
        [
            "reward: wrote *out/results.jsonl",
            "reward: wrote *out/summary.json",
            "reward: wrote *out/report.html",
        ]
    )


def test_report_dir_problems_are_errors_not_crashes(project):
    value_project(project, values=[0.9, 0.8])
    (project.path / "out").write_text("a file, not a directory")
    result = project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["ERROR could not write the report to *out: *"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_previous_report_is_replaced_whole(project):
    value_project(project, values=[0.9, 0.8])
    project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    value_project(project, values=[0.5])
    project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    out = project.path / "out"
    assert [r["score"] for r in read_rows(out / "results.jsonl")] == [0.5]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left behind


def test_preview_shows_worst_first_then_seeded_random(project):
    value_project(project, values=[0.9, 0.15, 0.7, 0.35, 0.6, 0.55, 0.45, 0.95, 0.85, 0.75])
    result = project.run("--reward-samples", "s.jsonl", "--reward-preview=4", "--reward-seed", "1")
    out = result.stdout.str().split("reward preview")[1]
    lines = [line for line in out.splitlines() if line.startswith("| s0")]
    ids = [line.split("|")[1].strip() for line in lines]
    assert ids[:2] == ["s001", "s003"]  # the two lowest scores
    assert len(ids) == 4
    again = project.run(
        "--reward-samples", "s.jsonl", "--reward-preview=4", "--reward-seed", "1"
    ).stdout.str()
    assert [
        line for line in again.split("reward preview")[1].splitlines() if line.startswith("| s0")
    ] == lines
    assert "question 1" in out and "read 0.15" in out


def test_preview_defaults_to_five(project):
    value_project(project, n=12)
    out = (
        project.run("--reward-samples", "s.jsonl", "--reward-preview").stdout.str().split("reward preview")[1]
    )
    assert sum(1 for line in out.splitlines() if line.startswith("| s0")) == 5


def test_junitxml_carries_scores_as_properties_under_xdist(project):
    value_project(project, values=[0.9, 0.1])
    project.run_subprocess("--reward-samples", "s.jsonl", "--junitxml", "junit.xml", "-n", "2", "-p", "xdist")
    tree = ET.parse(project.path / "junit.xml")
    props = {}
    for case in tree.iter("testcase"):
        props[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["value[s000]"] == {
        "reward.score": "0.9",
        "reward.metric.half": "0.45",
        "reward.verdict": "pass",
    }
    assert props["value[s001]"]["reward.verdict"] == "fail"


def test_github_step_summary_is_appended(project, monkeypatch):
    value_project(project, values=[0.9, 0.1])
    summary = project.path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    project.run("--reward-samples", "s.jsonl")
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert "| `value` | `s.jsonl` | 2 | 0 | 0.500 |" in text and "❌ FAIL" in text


def test_github_step_summary_written_once_under_xdist(project, monkeypatch):
    value_project(project, values=[0.9, 0.8, 0.7, 0.6])
    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    project.run_subprocess("--reward-samples", "s.jsonl", "-n", "2", "-p", "xdist")
    assert summary.read_text().count("### pytest-reward") == 1


STOCHASTIC = """
    import json, os, pathlib
    from pytest_reward import reward_function

    COUNTER = pathlib.Path(__file__).with_name("calls.txt")

    @reward_function
    def judge(messages, spread=0.0, **kwargs):
        # A deterministic "noisy judge": the k-th call on a sample adds +spread, -spread, +spread, ...
        with open(COUNTER, "a") as fh:
            fh.write(messages[-1]["content"] + "\\n")
        calls = COUNTER.read_text().splitlines().count(messages[-1]["content"])
        base = float(messages[-1]["content"])
        return {"score": base + (spread if calls % 2 else -spread)}
"""


def test_runs_average_each_sample_and_flag_flaky_ones(project):
    project.file("rewards.py", STOCHASTIC)
    project.jsonl(
        "s.jsonl",
        [
            {"id": "steady", "messages": msgs("q", "0.5"), "spread": 0.0},
            {"id": "wobbly", "messages": msgs("q", "0.6"), "spread": 0.3},
        ],
    )
    result = project.run("--reward-samples", "s.jsonl", "--reward-runs", "4", "--reward-report", "out")
    assert (project.path / "calls.txt").read_text().splitlines().count("0.6") == 4
    rows = {r["id"]: r for r in read_rows(project.path / "out" / "results.jsonl")}
    assert rows["steady"]["runs"] == [0.5] * 4 and rows["steady"]["spread"] == 0
    assert rows["wobbly"]["runs"] == pytest.approx([0.9, 0.3, 0.9, 0.3])
    assert rows["wobbly"]["score"] == pytest.approx(0.6)
    assert rows["wobbly"]["spread"] == pytest.approx(0.34641, abs=1e-4)  # sd (ddof=1) of ±0.3 around 0.6
    result.stdout.fnmatch_lines(
        ["FLAKY judge on s.jsonl: 1 samples vary across runs by more than sd 0.1: wobbly (sd 0.346)"]
    )


def test_commit_is_recorded_when_in_a_git_checkout(project):
    value_project(project, values=[0.9])
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], cwd=project.path, check=True)
    subprocess.run([*git, "add", "rewards.py", "s.jsonl"], cwd=project.path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=project.path, check=True)
    project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    commit = json.loads((project.path / "out" / "summary.json").read_text())["commit"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project.path, capture_output=True, text=True
    ).stdout.strip()
    assert commit["id"] == head and commit["dirty"] is False
    (project.path / "s.jsonl").write_text((project.path / "s.jsonl").read_text() + "\n")
    project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    assert json.loads((project.path / "out" / "summary.json").read_text())["commit"]["dirty"] is True


def test_a_terminal_too_narrow_for_the_table_gets_one_block_per_group(project, monkeypatch):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function

        @reward_function
        def value(messages, **kwargs):
            return {"score": float(messages[-1]["content"])}
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", str(v))} for v in (0.5, 0.6, 0.7, 123456.0)])
    monkeypatch.setenv("COLUMNS", "80")
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines(  # wrapped between words, within the 80 columns
        [
            "NO GATE value on s.jsonl: n=4 mean 3.086e+04 (95% CI [0.550, 9.259e+04]) min",
            "  0.500 p10 0.530 pass rate –",
        ]
    )
    assert "| samples" not in result.stdout.str()
    monkeypatch.setenv("COLUMNS", "240")
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines(
        ["value * s.jsonl * 4 * 3.086e+04 * 0.500 * 0.530 * – * [[]0.550, 9.259e+04] * NO GATE*"]
    )


_finite = st.floats(allow_nan=False, allow_infinity=False)
_any_float = st.floats()  # NaN and infinities too: they must take the generic path, not break it


@given(
    st.builds(
        SampleOutcome,
        function=st.text(),
        file=st.text(),
        line=st.integers(0, 10**9) | st.booleans(),
        sample_id=st.text() | st.none(),
        key=st.text(),
        verdict=st.sampled_from(["pass", "below", "fail"]),
        score=st.none() | _finite | _any_float | st.integers(-5, 5),
        reason=st.none() | st.text(),
        metrics=st.dictionaries(st.text(), st.fixed_dictionaries({"score": _finite | _any_float})),
        error=st.none() | st.text(),
        failures=st.lists(st.text(), max_size=3),
        duration=st.floats(0, 1e6),
        extra=st.just({}) | st.fixed_dictionaries({"responses": st.lists(st.text(), max_size=2)}),
    )
)
def test_fast_row_encoding_is_the_row_as_json(outcome):
    assert row_json(outcome) == json.dumps(outcome.row(text=False), ensure_ascii=False)
