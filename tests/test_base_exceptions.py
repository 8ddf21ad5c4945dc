"""A reward that raises a ``BaseException`` that is not an ``Exception`` (Math-Verify's ``TimeoutException``): that
sample's error, in every executor and granularity, never the end of the item, the file, a worker or the session
(before: sample items ended without a verdict, a file item lost every sample, a process worker died twice)."""

from __future__ import annotations

import pytest

from pytest_reward.errors import RewardAborted
from pytest_reward.reward.call import describe_exception, escaped

from .conftest import msgs
from .test_executors_ray import _ray_env, _run, ray_tmp  # noqa: F401  (ray_tmp: the fixture of the ray test)

REWARDS = """
    import asyncio
    import signal

    import pytest
    from pytest_reward import EvaluateResult, reward_function

    class TimeoutException(BaseException):  # Math-Verify's errors.py
        pass

    @pytest.mark.reward(threshold=0.5)
    @reward_function
    def verifier(messages, ground_truth=None, **kwargs):
        if "slow" in messages[-1]["content"]:
            raise TimeoutException("Operation timed out!")
        return EvaluateResult(score=1.0, reason="ok")

    @pytest.mark.reward(threshold=0.5)
    @reward_function
    async def async_verifier(messages, ground_truth=None, **kwargs):
        await asyncio.sleep(0)
        if "slow" in messages[-1]["content"]:
            raise TimeoutException("Operation timed out!")
        return EvaluateResult(score=1.0, reason="ok")

    @pytest.mark.reward(threshold=0.5)
    @reward_function(mode="batch")
    def batch_verifier(rollouts_messages, **kwargs):
        if any("slow" in m[-1]["content"] for m in rollouts_messages):
            raise TimeoutException("Operation timed out!")
        return [EvaluateResult(score=1.0, reason="ok") for _ in rollouts_messages]

    @pytest.mark.reward(threshold=0.5)
    @reward_function
    def alarmed(messages, **kwargs):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        return EvaluateResult(score=1.0, reason="ok")
"""

SAMPLES = [
    {"id": "a", "messages": msgs("q", "42")},
    {"id": "b", "messages": msgs("q", "slow 42")},
    {"id": "c", "messages": msgs("q", "42")},
]

MODES = {
    "sample items": (),
    "file items": ("--reward-granularity", "file"),
    "threads": ("--reward-workers", "2"),
    "timeout": ("--reward-timeout", "5"),
    "processes": ("--reward-executor", "process"),
    "processes, file items": ("--reward-executor", "process", "--reward-granularity", "file"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("function", ["verifier", "async_verifier"])
def test_a_base_exception_is_the_sample_error_and_the_others_are_scored(project, mode, function):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", SAMPLES)
    result = project.result(
        "--reward-samples", "s.jsonl", "--reward-fn", f"rewards.py::{function}", *MODES[mode]
    )
    (group,) = result.groups
    assert group.verdict == "FAIL"  # a failed sample, not an item that ended without a verdict (ERROR)
    assert group.summary.n == 3
    errors = {o.sample_id: o.error for o in group.outcomes if o.error}
    assert list(errors) == ["b"]
    assert errors["b"].startswith(
        "TimeoutException: Operation timed out! (TimeoutException is a BaseException"
    )
    assert [o.score for o in group.outcomes if not o.error] == [1.0, 1.0]


def test_a_batch_that_raises_one_errors_its_chunk_only(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", SAMPLES)
    result = project.result(
        "--reward-samples", "s.jsonl", "--reward-fn", "rewards.py::batch_verifier", "--reward-batch-size", "1"
    )
    (group,) = result.groups
    errors = {o.sample_id: o.error for o in group.outcomes if o.error}
    assert list(errors) == ["b"] and "TimeoutException is a BaseException" in errors["b"]


def test_signal_in_a_worker_thread_says_why(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", SAMPLES)
    result = project.result(
        "--reward-samples", "s.jsonl", "--reward-fn", "rewards.py::alarmed", "--reward-timeout", "5"
    )
    (group,) = result.groups
    errors = {o.error for o in group.outcomes}
    assert len(errors) == 1
    (error,) = errors
    assert error.startswith("ValueError: signal only works in main thread")
    assert "signal.alarm, as Math-Verify's, works only in the main thread" in error
    assert "verify(..., timeout_seconds=None)" in error


def test_ctrl_c_and_pytest_outcomes_are_not_the_sample_errors():
    class Custom(BaseException):
        pass

    assert escaped(Custom()) and escaped(SystemExit(1))
    assert not escaped(KeyboardInterrupt()) and not escaped(ValueError()) and not escaped(GeneratorExit())
    with pytest.raises(pytest.skip.Exception) as info:
        pytest.skip("x")
    assert not escaped(info.value)
    assert describe_exception(RewardAborted(Custom("late"))).startswith(
        "Custom: late (Custom is a BaseException"
    )


@pytest.mark.ray
def test_on_ray_too(project, ray_tmp):  # noqa: F811

    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", SAMPLES)
    args = ("--reward-samples", "s.jsonl", "--reward-fn", "rewards.py::verifier", "-p", "no:cacheprovider")
    result = _run(project, _ray_env(ray_tmp), *args, "--reward-executor", "ray", "--reward-workers", "2")
    assert "s.jsonl:2 [b]  TimeoutException: Operation timed out! (TimeoutException is a BaseException" in (
        result.stdout
    ), result.stdout + result.stderr
    assert "1 of 3 samples failed (verifier on s.jsonl)" in result.stdout
