"""One reward function cannot change what the next one sees (issue: inputs mutated in place)."""

from __future__ import annotations

import json

import pytest

from .conftest import msgs

REWARDS = """
    from pytest_reward import reward_function

    @reward_function
    def a_mutates(messages, ground_truth=None, **kwargs):
        messages[-1]["content"] = "TAMPERED"
        messages.append({"role": "user", "content": "extra"})
        if isinstance(ground_truth, list):
            ground_truth.clear()
        return {"score": 1.0}

    @reward_function
    def b_reads(messages, ground_truth=None, **kwargs):
        ok = messages[-1]["content"] == "the answer" and len(messages) == 2 and ground_truth == ["x", "y"]
        return {"score": 1.0 if ok else 0.0, "reason": repr((messages, ground_truth))}

    @reward_function
    def c_tags(messages, tags=None, **kwargs):
        tags.append("mine")
        return {"score": 1.0}
"""


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_a_function_that_mutates_its_inputs_fails_and_the_next_sees_the_original(project, granularity):
    project.file("rewards.py", REWARDS)
    row = {"messages": msgs("q", "the answer"), "ground_truth": ["x", "y"], "tags": ["t"]}
    project.jsonl("s.jsonl", [row, row])
    result = project.result(
        "--reward-samples", "s.jsonl", "--reward-granularity", granularity, "--reward-report", "out"
    )
    by_fn = {g.function: g for g in result.groups}
    assert by_fn["b_reads"].verdict == "NO GATE"  # no gate, no failure: it saw the sample as written, both times
    assert by_fn["b_reads"].summary.mean == 1.0
    assert by_fn["a_mutates"].verdict == "FAIL"
    assert by_fn["c_tags"].verdict == "FAIL"
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    a_rows = [r for r in rows if r["function"] == "a_mutates"]
    assert len(a_rows) == 2
    assert all("a_mutates changed its input 'messages', 'ground_truth' in place" in r["error"] for r in a_rows)
    c_rows = [r for r in rows if r["function"] == "c_tags"]
    assert all("changed its input 'tags' in place" in r["error"] for r in c_rows)
    # the two identical samples keep one key each run, whatever a function did to its copy
    keys = {r["function"]: [] for r in rows}
    for r in rows:
        keys[r["function"]].append(r["key"])
    assert keys["a_mutates"] == keys["b_reads"] == keys["c_tags"]


def test_the_report_shows_the_conversation_as_written(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "the answer"), "ground_truth": ["x", "y"], "tags": []}])
    result = project.result("--reward-samples", "s.jsonl")
    for group in result.groups:
        for outcome in group.outcomes:
            assert outcome.response == "the answer", group.function
