"""Memory stays bounded with many items: outcomes keep a bounded excerpt of long texts, and results.jsonl still
gets every text whole (streamed by the items, copied to the report in file order)."""

from __future__ import annotations

import json

import pytest

from pytest_reward.judge.results import TEXT_KEPT

from .conftest import msgs

LONG = """
    from pytest_reward import reward_function

    @reward_function
    def verbose(messages, **kwargs):
        n = int(messages[-1]["content"])
        return {"score": 0.1 * (n % 10), "reason": str(n) * 200_000}
"""


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_long_reasons_are_whole_in_results_and_bounded_everywhere_else(project, granularity):
    project.file("rewards.py", LONG)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", str(i))} for i in range(12)])
    result = project.result(
        "--reward-samples", "s.jsonl", "--reward-granularity", granularity, "--reward-report", "out"
    )
    (group,) = result.groups
    kept = [*group.outcomes, *group.preview_pool]
    assert kept
    limit = TEXT_KEPT + 100  # the excerpt plus its note
    assert all(o.reason is not None and len(o.reason) <= limit for o in kept)
    assert all("the whole text is in results.jsonl" in o.reason for o in kept)
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"s{i}" for i in range(12)]  # file order
    for i, row in enumerate(rows):
        assert row["reason"] == str(i) * 200_000
    summary = json.loads((project.path / "out" / "summary.json").read_text())
    shown = [s for g in summary["groups"] for kind in g["samples"].values() for s in kind]
    assert shown and all(len(s["reason"]) <= limit for s in shown)
