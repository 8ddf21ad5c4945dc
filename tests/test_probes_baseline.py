"""Probes and baselines: stored runs keep each probe's verdict; a comparison lists them, a probe that
passed in the stored run and fails now fails the comparison, one that passes again is an improvement, and a probe
on one side only is shown, never a failure."""

from __future__ import annotations

import json

import pytest

from pytest_reward import cli
from pytest_reward.run.baseline import compare_probes, probe_regressions

from .conftest import msgs

REWARD = """
    import re
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    @pytest.mark.reward(threshold=0.5, pass_rate=0.6{probes})
    @reward_function
    def grader(messages, ground_truth=None, **kwargs):
        text = messages[-1]["content"]
        {body}
        return EvaluateResult(score=1.0 if ok else 0.0, reason="right" if ok else "wrong")
"""
# reads the last \\boxed{}: keeps every default probe
ROBUST = 'found = re.findall(r"\\\\boxed\\{([^{}]*)\\}", text); ok = bool(found) and found[-1].strip() == str(ground_truth)'
# the answer anywhere in the response: listing candidates pays (a hole the stuffing probe finds)
HOLE = "ok = str(ground_truth) in text"

SAMPLES = [
    {"id": "q1", "messages": msgs("6*7?", "6*7 = 42, so \\boxed{42}"), "ground_truth": "42"},
    {"id": "q2", "messages": msgs("2+2?", "It is \\boxed{5}"), "ground_truth": "4"},
    {"id": "q3", "messages": msgs("10-3?", "\\boxed{7}"), "ground_truth": "7"},
]


def write(project, body: str, probes: str = ', probes=["stuffing", "empty"]') -> None:
    project.file("rewards.py", REWARD.format(body=body, probes=probes))
    project.jsonl("s.jsonl", SAMPLES)


def summary(project) -> dict:
    return json.loads((project.path / "rep" / "summary.json").read_text())


def test_a_probe_that_passed_in_the_baseline_and_fails_now_fails_the_comparison(project):
    write(project, ROBUST)
    base = project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    assert base.ret == 0
    stored = json.loads(next((project.path / ".reward").glob("0001_base.json")).read_text())
    assert {(p["probe"], p["verdict"]) for p in stored["probes"]} == {("stuffing", "PASS"), ("empty", "PASS")}

    write(project, HOLE)  # the reward now pays for the answer anywhere: stuffing breaks it
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare", "base", "--reward-report", "rep")
    assert result.ret == 1
    line = (
        "FAIL grader on s.jsonl: probe stuffing regressed vs 0001_base: PASS (0 of 3 broke) → FAIL (3 of 3 broke) "
        '(rule "not pass")'
    )
    result.stdout.fnmatch_lines(["*probes compared with stored run 0001_base*", "*stuffing*regressed*", line])
    assert "probes: 1 with the same verdict as in stored run 0001_base" in result.stdout.str()
    data = summary(project)
    assert (data["verdict"], data["exitstatus"]) == ("FAIL", 1)
    assert line.removeprefix("FAIL ") in data["comparison"]["failures"]
    changes = {c["probe"]: c for c in data["comparison"]["probes"]}
    assert (changes["stuffing"]["status"], changes["stuffing"]["before"], changes["stuffing"]["after"]) == (
        "regressed",
        "PASS",
        "FAIL",
    )
    assert changes["empty"]["status"] == "unchanged"
    html = (project.path / "rep" / "report.html").read_text()
    assert html.count('class="probe-change-row"') == 1 and 'data-status="regressed"' in html


def test_a_probe_marked_xfail_is_absent_from_the_run_not_a_regression(project):
    """An expected failure counts in no aggregate (as a sample's): the known hole is shown as absent."""
    write(project, ROBUST)
    assert project.run("--reward-samples", "s.jsonl", "--reward-save=base").ret == 0
    project.file(
        "conftest.py",
        """
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                if "probe:stuffing" in item.name:
                    item.add_marker(pytest.mark.xfail(reason="a known hole"))
        """,
    )
    write(project, HOLE)
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare", "base", "--reward-report", "rep")
    assert (result.parseoutcomes().get("xfailed"), result.ret) == (1, 0)
    assert {c["probe"]: c["status"] for c in summary(project)["comparison"]["probes"]} == {
        "stuffing": "absent",
        "empty": "unchanged",
    }
    assert summary(project)["comparison"]["failures"] == []


def test_a_probe_that_passes_again_is_an_improvement(project):
    write(project, HOLE)
    assert project.run("--reward-samples", "s.jsonl", "--reward-save=holed").ret == 1
    write(project, ROBUST)
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare", "holed", "--reward-report", "rep")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*stuffing*FAIL (3 of 3 broke)*PASS (0 of 3 broke)*improved*"])
    data = summary(project)
    assert (data["verdict"], data["exitstatus"], data["comparison"]["failures"]) == ("PASS", 0, [])
    assert {c["probe"]: c["status"] for c in data["comparison"]["probes"]} == {
        "stuffing": "improved",
        "empty": "unchanged",
    }


def test_probes_on_one_side_only_are_shown_never_failures(project):
    write(project, ROBUST, probes="")  # a stored run without probes
    assert project.run("--reward-samples", "s.jsonl", "--reward-save=plain").ret == 0
    write(project, ROBUST, probes=', probes=["empty"]')
    assert project.run("--reward-samples", "s.jsonl", "--reward-save=one").ret == 0
    write(project, ROBUST, probes=', probes=["stuffing"]')
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare", "one", "--reward-report", "rep")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*empty*PASS (0 of 3 broke)*–*absent*", "*stuffing*–*PASS (0 of 3 broke)*new*"]
    )
    assert {c["probe"]: c["status"] for c in summary(project)["comparison"]["probes"]} == {
        "empty": "absent",
        "stuffing": "new",
    }
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare", "plain", "--reward-report", "rep")
    assert result.ret == 0
    assert [c["status"] for c in summary(project)["comparison"]["probes"]] == ["new"]
    assert summary(project)["comparison"]["failures"] == []


def test_pytest_reward_compare_exits_1_on_a_probe_regression(project, capsys, monkeypatch):
    write(project, ROBUST)
    assert project.run("--reward-samples", "s.jsonl", "--reward-save=base").ret == 0
    write(project, HOLE)
    assert project.run("--reward-samples", "s.jsonl", "--reward-save=holed").ret == 1
    monkeypatch.chdir(project.path)
    capsys.readouterr()
    assert cli.main(["compare", "base", "holed"]) == 1
    out = capsys.readouterr().out
    assert "regressed" in out
    assert "FAIL grader on s.jsonl: probe stuffing regressed vs 0001_base: PASS (0 of 3 broke) → FAIL" in out
    assert cli.main(["compare", "holed", "base"]) == 0  # the other way round: an improvement
    out = capsys.readouterr().out
    assert "improved" in out and "FAIL" not in out.replace("FAIL (3 of 3 broke)", "")


def _record(*probes: tuple[str, str, int, int], name: str = "0001_base") -> dict:
    return {
        "name": name,
        "probes": [
            {
                "function": "f",
                "file": "s.jsonl",
                "probe": p,
                "rule": "<= floor",
                "verdict": v,
                "checked": c,
                "broken": b,
            }
            for p, v, c, b in probes
        ],
    }


@pytest.mark.parametrize(
    ("before", "after", "status"),
    [
        ("PASS", "FAIL", "regressed"),
        ("PASS", "ERROR", "regressed"),
        ("FAIL", "PASS", "improved"),
        ("ERROR", "PASS", "improved"),
        ("PASS", "PASS", "unchanged"),
        ("FAIL", "FAIL", "unchanged"),
        ("SKIP", "FAIL", "changed"),
        ("PASS", "SKIP", "changed"),
        ("INFO", "INFO", "unchanged"),
    ],
)
def test_probe_verdict_changes(before, after, status):
    (change,) = compare_probes(_record(("empty", after, 3, 1)), _record(("empty", before, 3, 0)))
    assert change.status == status
    assert bool(probe_regressions([change])) == (status == "regressed")


def test_probes_on_one_side_and_records_without_probes():
    changes = compare_probes(_record(("echo", "FAIL", 2, 2)), _record(("empty", "PASS", 2, 0)))
    assert [(c.probe, c.status) for c in changes] == [("echo", "new"), ("empty", "absent")]
    assert probe_regressions(changes) == []
    assert compare_probes({"groups": []}, {"groups": []}) == []
    (only,) = compare_probes(_record(("empty", "FAIL", 2, 2)), {"name": "old", "groups": []})
    assert (only.status, only.baseline) == ("new", "old")
