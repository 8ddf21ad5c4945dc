"""A red run never produces green artifacts: for every way an item can end, the terminal table, summary.json,
report.html, the stored run and junit agree with the session's exit status."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from .conftest import msgs

REWARD = """
    import os, time
    import pytest
    from pytest_reward import reward_function

    MODE = os.environ["END_MODE"]
    marks = []
    if MODE == "xfail":
        marks = [pytest.mark.xfail(reason="known bad")]
    if MODE == "skip":
        marks = [pytest.mark.skip(reason="not today")]

    def _apply(fn):
        for m in marks:
            fn = m(fn)
        return fn

    @_apply
    @pytest.mark.reward(threshold=0.5)
    @reward_function
    def judge(messages, **kwargs):
        if MODE == "timeout":
            time.sleep(30)
        if MODE == "interrupt":
            raise KeyboardInterrupt
        if MODE in ("fail", "xfail"):
            return {"score": 0.1}
        return {"score": 0.9}
"""

CONFTEST = """
    import os

    def pytest_runtest_setup(item):
        if os.environ["END_MODE"] == "error":
            raise RuntimeError("the database is down")
"""

MODES = ["pass", "fail", "error", "timeout", "xfail", "skip", "interrupt"]


@pytest.mark.parametrize("granularity", ["sample", "file"])
@pytest.mark.parametrize("mode", MODES)
def test_every_artifact_agrees_with_the_exit_status(project, monkeypatch, mode, granularity):
    monkeypatch.setenv("END_MODE", mode)
    project.file("rewards.py", REWARD)
    project.file("conftest.py", CONFTEST)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(3)])
    result = project.pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--reward-samples", "s.jsonl", "--reward-granularity", granularity,
        "--reward-report", "out", "--reward-save", "run", "--junitxml", "junit.xml", "--timeout", "2",
        timeout=120,
    )  # fmt: skip
    out = project.path / "out"
    if mode == "interrupt":
        assert result.ret == pytest.ExitCode.INTERRUPTED
        assert not out.exists()  # an interrupted run writes nothing
        assert not (project.path / ".reward").exists()
        return
    green = result.ret == 0
    expected_ret = {"pass": 0, "fail": 1, "error": 1, "timeout": 1, "xfail": 0, "skip": 0}[mode]
    assert result.ret == expected_ret, result.stdout.str()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exitstatus"] == result.ret
    assert summary["verdict"] == ("PASS" if green else "FAIL")
    html = (out / "report.html").read_text()
    assert json.dumps(summary["verdict"]) in html or summary["verdict"] in html
    (stored,) = (project.path / ".reward").glob("*_run.json")
    record = json.loads(stored.read_text())
    assert record["exitstatus"] == result.ret
    groups = {g["function"]: g for g in summary["groups"]}
    stored_groups = {g["function"]: g for g in record["groups"]}
    assert {k: g["verdict"] for k, g in groups.items()} == {k: g["verdict"] for k, g in stored_groups.items()}
    if mode in ("error", "timeout"):
        # the group that errored is there, errored, with the reason — not missing, not PASS
        assert groups["judge"]["verdict"] in ("ERROR", "FAIL")
        if granularity == "file" or mode == "error":
            assert groups["judge"]["verdict"] == "ERROR"
            assert groups["judge"]["errors"]
        result.stdout.fnmatch_lines(
            ["*judge*s.jsonl*ERROR*"] if granularity == "file" else ["*judge*s.jsonl*"]
        )
    if mode == "fail":
        assert groups["judge"]["verdict"] == "FAIL"
    if mode == "pass":
        assert groups["judge"]["verdict"] == "PASS"
    for group in groups.values():
        assert green or group["verdict"] != "PASS" or mode not in ("fail", "error", "timeout")
    junit = ET.parse(project.path / "junit.xml").getroot()
    suite = junit if junit.tag == "testsuite" else junit.find("testsuite")
    assert suite is not None
    bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    assert (bad == 0) == green


def test_a_report_directory_holding_other_files_is_never_replaced(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function

        @reward_function
        def ok(messages, **kwargs):
            return {"score": 1.0}
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    (project.path / "out").mkdir()
    (project.path / "out" / "notes.txt").write_text("mine")
    result = project.run("--reward-samples", "s.jsonl", "--reward-report", "out")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["ERROR could not write the report to *out: refusing to replace*notes.txt*"])
    assert (project.path / "out" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (project.path / "out").iterdir()) == ["notes.txt"]
