"""The ground truth is shown wherever the response is: the failure panel, the preview, report.html and the
sample rows of summary.json; bounded like the other texts."""

from __future__ import annotations

import json

import pytest

from .conftest import msgs

EXACT = """
    from pytest_reward import reward_function

    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        ok = messages[-1]["content"] == str(ground_truth)
        return {"score": float(ok), "reason": "equal" if ok else "differs"}
"""

LONG = "x" * 3000


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_the_ground_truth_is_shown_beside_the_response(project, granularity):
    project.file("rewards.py", EXACT)
    project.jsonl(
        "s.jsonl",
        [
            {"id": "wrong", "messages": msgs("6*7?", "41"), "ground_truth": "42"},
            {"id": "listed", "messages": msgs("pick", "a"), "ground_truth": {"answers": ["b", "c"]}},
            {"id": "long", "messages": msgs("say x", "y"), "ground_truth": LONG},
        ],
    )
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-threshold", "1", "--reward-granularity", granularity,
        "--reward-preview", "--reward-report", "out",
    )  # fmt: skip
    assert result.ret == 1
    out = result.stdout.str()
    if granularity == "sample":  # the failure panel of a sample item
        result.stdout.fnmatch_lines(["*assistant  41*", "*truth      42*"])
    assert 'answers": ["b", "c"]' in out  # a structured ground truth, as compact JSON
    summary = json.loads((project.path / "out" / "summary.json").read_text())
    rows = {r["id"]: r for r in summary["groups"][0]["samples"]["failing"]}
    assert rows["wrong"]["ground_truth"] == "42"
    assert rows["listed"]["ground_truth"] == '{"answers": ["b", "c"]}'
    assert rows["long"]["ground_truth"] == "x" * 500 + "…"  # bounded like the conversation excerpts
    html = (project.path / "out" / "report.html").read_text()
    assert "<th>ground truth</th>" in html or ">ground truth<" in html
    assert "answers&quot;: [&quot;b&quot;, &quot;c&quot;]" in html or 'answers": ["b", "c"]' in html


def test_no_ground_truth_shows_none(project):
    project.file("rewards.py", EXACT)
    project.jsonl("s.jsonl", [{"id": "bare", "messages": msgs("hi", "hello")}])
    result = project.run("--reward-samples", "s.jsonl", "--reward-threshold", "1", "--reward-report", "out")
    assert result.ret == 1
    assert "truth      " not in result.stdout.str()
    summary = json.loads((project.path / "out" / "summary.json").read_text())
    assert summary["groups"][0]["samples"]["failing"][0]["ground_truth"] is None
