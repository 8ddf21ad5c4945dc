"""Granularity, batch and async reward functions, and what a reward function receives."""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import msgs

LENGTH = """
    import pytest
    from pytest_reward import reward_function

    @pytest.mark.reward(threshold=0.5)
    @reward_function
    def length(messages, **kwargs):
        return {"score": min(1.0, len(messages[-1]["content"]) / 10)}
"""


def test_file_granularity_one_item_per_function_listing_failures(project):
    project.file("rewards.py", LENGTH)
    rows = [{"id": f"s{i}", "messages": msgs("q", "x" * i)} for i in (12, 2, 15, 3)]
    project.jsonl("s.jsonl", [*rows[:2], "not json", *rows[2:]])
    result = project.run("--reward-samples", "s.jsonl", "--reward-granularity", "file")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "3 of 5 samples failed (length on s.jsonl)",
            "  s.jsonl:2 ?s2?  score 0.2 < threshold 0.5",
            "  s.jsonl:3 ?line-3?  invalid JSON: Expecting value at column 1",
            "  s.jsonl:5 ?s3?  score 0.3 < threshold 0.5",
            "*length*s.jsonl*5 (1 err)*FAIL*",
        ]
    )
    collected = project.run(
        "--reward-samples", "s.jsonl", "--reward-granularity", "file", "--collect-only", "-q"
    )
    collected.stdout.fnmatch_lines(["s.jsonl::length"])


def test_file_granularity_scores_in_segments_keeping_file_order(project):
    # More samples than one scoring segment (4096), with bad lines on both sides of the segment boundary: every
    # row is still in file order, and each bad line is a row of its own.
    project.file("rewards.py", LENGTH)
    n = 4200
    rows: list = [{"id": f"s{i}", "messages": msgs("q", "x" * (i % 11))} for i in range(n)]
    rows[4094] = "not json"
    rows[4100] = "not json either"
    rows.append({"id": "s2", "messages": msgs("q", "dup")})
    project.jsonl("s.jsonl", rows)
    project.run("--reward-samples", "s.jsonl", "--reward-granularity", "file", "--reward-report", "out")
    out = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["line"] for r in out] == list(range(1, n + 2))
    good = [i for i in range(n) if i not in (4094, 4100)]
    assert [r["score"] for r in out if r["error"] is None] == [min(1.0, (i % 11) / 10) for i in good]
    assert out[4094]["error"].startswith("invalid JSON") and out[4100]["error"].startswith("invalid JSON")
    assert out[n]["error"].startswith("duplicate id 's2'")


def test_auto_granularity_switches_above_the_cap(project):
    project.file("rewards.py", LENGTH)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "long enough answer")}] * 3)
    project.run("--reward-samples", "s.jsonl").assert_outcomes(passed=3)
    project.pytester.makeini("[pytest]\nreward_max_items_per_file = 2\n")
    project.run("--reward-samples", "s.jsonl").assert_outcomes(passed=1)


BATCH = """
    import json, os
    from typing import List
    from pytest_reward import reward_function, Message

    @reward_function(mode="batch")
    def batch_len(rollouts_messages: List[List[Message]], ground_truth=None, **kwargs):
        with open(os.path.join(os.path.dirname(__file__), "calls.txt"), "a") as fh:
            fh.write(json.dumps({"n": len(rollouts_messages), "gt": ground_truth}) + "\\n")
        assert all(isinstance(m, Message) for r in rollouts_messages for m in r)
        return [{"score": min(1.0, len(r[-1].content) / 10)} for r in rollouts_messages]
"""


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_batch_functions_are_scored_in_chunks(project, granularity):
    project.file("rewards.py", BATCH)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "x" * i), "ground_truth": str(i)} for i in range(1, 8)])
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-batch-size", "3", "--reward-granularity", granularity
    )
    assert result.ret == 0
    calls = [json.loads(line) for line in (project.path / "calls.txt").read_text().splitlines()]
    assert [c["n"] for c in calls] == [3, 3, 1]
    assert calls[0]["gt"] == ["1", "2", "3"]
    result.stdout.fnmatch_lines(["*batch_len*s.jsonl*7*0.400*0.100*NO GATE*"])


def test_batch_function_returning_the_wrong_count(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function

        @reward_function(mode="batch")
        def short(rollouts_messages, **kwargs):
            return [{"score": 1.0}]
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}] * 2)
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*batch reward function 'short' returned 1 results for 2 samples*"])


ASYNC = """
    import asyncio, threading
    from pytest_reward import reward_function

    state = {"in_flight": 0, "peak": 0}
    lock = threading.Lock()

    @reward_function
    async def slow(messages, **kwargs):
        with lock:
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        await asyncio.sleep(0.01)
        with lock:
            state["in_flight"] -= 1
        return {"score": 1.0, "reason": f"peak {state['peak']}"}
"""


def test_async_functions_run_in_both_granularities(project):
    project.file("rewards.py", ASYNC)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}] * 4)
    project.run("--reward-samples", "s.jsonl").assert_outcomes(passed=4)
    project.run("--reward-samples", "s.jsonl", "--reward-granularity", "file").assert_outcomes(passed=1)


@pytest.mark.parametrize("kind", ["async", "thread"])
def test_workers_overlap_calls_in_file_granularity(project, kind):
    source = (
        ASYNC
        if kind == "async"
        else ASYNC.replace("async def", "def").replace("await asyncio.sleep", "__import__('time').sleep")
    )
    project.file("rewards.py", source)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(40)])
    outcomes_1 = project.outcomes("--reward-samples", "s.jsonl", "--reward-granularity", "file")
    result = project.result(
        "--reward-samples", "s.jsonl", "--reward-granularity", "file", "--reward-workers", "8"
    )
    (group,) = result.groups
    assert group.verdict == "NO GATE"  # no gate declared; nothing failed
    assert group.summary.n == 40 and group.summary.n_pass == 40
    peaks = [int(o.reason.split()[-1]) for o in group.worst()]
    assert max(peaks) > 1  # calls overlapped
    assert outcomes_1 == []  # file items report a summary, not per-sample outcomes


def test_what_the_function_receives(project):
    project.file(
        "rewards.py",
        """
        import json
        from pytest_reward import reward_function

        @reward_function
        def spy(messages, original_messages=None, ground_truth=None, **kwargs):
            seen = {"n": len(messages), "orig": len(original_messages), "gt": ground_truth, "extra": sorted(kwargs)}
            return {"score": 1.0, "reason": json.dumps(seen)}
        """,
    )
    project.jsonl(
        "s.jsonl",
        [
            {
                "messages": [{"role": "system", "content": "s"}, *msgs("q", "a")],
                "ground_truth": "42",
                "metadata": {"k": 1},
                "difficulty": 3,
            },
            {
                "messages": msgs("q", "a"),
                "ground_truth_for_eval": "7",
                "original_messages": [{"role": "user", "content": "q"}] * 2,
            },
            {"messages": msgs("q", "a"), "expect": {"min": 0.5}},
        ],
    )
    outcomes = project.outcomes("--reward-samples", "s.jsonl")
    seen = [json.loads(o["reason"]) for o in outcomes]
    assert seen[0] == {"n": 3, "orig": 2, "gt": "42", "extra": ["difficulty", "metadata"]}
    assert seen[1] == {"n": 2, "orig": 2, "gt": "7", "extra": []}
    assert seen[2] == {"n": 2, "orig": 1, "gt": None, "extra": []}  # no ground truth, no "expect" forwarded


def test_legacy_reward_output_is_accepted_with_a_deprecation_warning(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function, RewardOutput, MetricRewardOutput

        @reward_function
        def legacy(messages, **kwargs):
            return RewardOutput(score=0.8, metrics={"m": MetricRewardOutput(score=0.5, reason="ok")})
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}] * 2)
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        ["*DeprecationWarning: reward function 'legacy' returned the legacy RewardOutput*"]
    )


def test_prompt_only_sample_without_a_model_is_a_usage_error(project):
    project.file("rewards.py", LENGTH)
    project.jsonl("s.jsonl", [{"prompt": "2+2="}, {"messages": msgs("only a question")}])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*s.jsonl::length?line-1?: no model to roll out prompt-only samples*--reward-model*"]
    )


@pytest.mark.parametrize(
    ("ini", "cache"),
    [
        ("", ".reward/jax-cache"),
        ("reward_jax_cache_dir =\n", None),
        ("reward_jax_cache_dir = cache\n", "cache"),
    ],
    ids=["default", "empty-turns-it-off", "set"],
)
def test_the_jax_compilation_cache_is_where_the_ini_says_and_off_when_empty(project, ini, cache):
    # In a subprocess: jax's compilation cache is process-wide, and it must not follow the test run.
    project.pytester.makeini(f"[pytest]\n{ini}")
    project.file(
        "test_model.py",
        """
        import jax

        def test_roll_out(inference_job):
            inference_job.rollout(["1+2="], 4)
            print("CACHE DIR", jax.config.jax_compilation_cache_dir)
        """,
    )
    from pytest_reward.jax import resolve_model

    # the shipped model, copied into the project: a path outside it would move pytest's rootdir
    shutil.copytree(resolve_model("tiny-adder"), project.path / "model")
    result = project.run_subprocess("--reward-model", "model", "-s")
    result.assert_outcomes(passed=1)
    for place in (".reward/jax-cache", "cache"):
        used = (project.path / place).is_dir() and any((project.path / place).iterdir())
        assert used == (place == cache), place  # compiled programs are written there, and only there
    if cache is None:
        result.stdout.fnmatch_lines(["*CACHE DIR None*"])
    else:
        result.stdout.fnmatch_lines([f"*CACHE DIR {project.path / cache}*"])


def test_a_jax_cache_directory_that_cannot_be_made_fails_the_model_naming_the_option(project):
    project.pytester.makeini("[pytest]\nreward_jax_cache_dir = blocker/cache\n")
    project.file("blocker", "a file where the cache's parent directory should be")
    project.file("test_model.py", "def test_roll_out(inference_job):\n    pass\n")
    from pytest_reward.jax import resolve_model

    shutil.copytree(resolve_model("tiny-adder"), project.path / "model")
    result = project.run_subprocess("--reward-model", "model")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*--reward-model model: OSError: reward_jax_cache_dir: cannot use */blocker/cache as XLA's compilation cache*"]
    )
