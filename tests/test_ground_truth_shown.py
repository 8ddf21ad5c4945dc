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


@pytest.mark.parametrize("granularity", ["sample", "file"])
@pytest.mark.parametrize("field", ["groundtruth", "ground-truth", "GroundTruth", "gt"])
def test_a_misspelt_ground_truth_field_is_one_warning_per_file(project, granularity, field):
    project.file("rewards.py", EXACT)
    project.jsonl("s.jsonl", [{"messages": msgs(f"{i}+{i}?", str(2 * i)), field: str(2 * i)} for i in range(3)])
    result = project.run("--reward-samples", "s.jsonl", "--reward-granularity", granularity)
    text = result.stdout.str()
    assert text.count(f"its samples carry {field!r} but no 'ground_truth'") == 1, text
    result.stdout.fnmatch_lines(
        [f"*RewardSampleWarning: s.jsonl: its samples carry {field!r} but no 'ground_truth', so exact receives "
         f"ground_truth=None; rename the field to 'ground_truth', or map it: "
         f"@pytest.mark.reward(sample_fields={{'ground_truth': {field!r}}})*"]
    )  # fmt: skip
    # the suggestion is accepted, and fixes it: every sample now meets its ground truth
    project.file(
        "rewards.py",
        EXACT.replace(
            "    @reward_function\n",
            f"    import pytest\n\n    @pytest.mark.reward(threshold=1, sample_fields={{'ground_truth': {field!r}}})\n"
            "    @reward_function\n",
        ),
    )
    fixed = project.run("--reward-samples", "s.jsonl", "--reward-granularity", granularity)
    assert fixed.ret == 0, fixed.stdout.str()
    assert "RewardSampleWarning" not in fixed.stdout.str()


def test_a_function_without_ground_truth_gets_no_warning(project):
    project.file("rewards.py", EXACT.replace("ground_truth=None, **kwargs", "**kwargs").replace(
        "str(ground_truth)", "'x'"))  # fmt: skip
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a"), "gt": "x"}])
    assert "RewardSampleWarning" not in project.run("--reward-samples", "s.jsonl").stdout.str()
