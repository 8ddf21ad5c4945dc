"""Hung rewards end: a per-call timeout fails the one sample, and Ctrl-C / pytest-timeout end a run whose reward
never returns, in every granularity and with worker threads. Runs are subprocesses with a generous bound: a
regression shows up as a hang cut off by that bound, never as a timing assertion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import msgs

HANGS = """
    import asyncio, time
    from pytest_reward import reward_function

    @reward_function
    def sync_hang(messages, **kwargs):
        if messages[-1]["content"] == "hang":
            time.sleep(10**6)
        return {"score": 1.0}

    @reward_function
    async def async_hang(messages, **kwargs):
        if messages[-1]["content"] == "hang":
            await asyncio.sleep(10**6)
        return {"score": 1.0}
"""

ROWS = [
    {"id": "ok1", "messages": msgs("q", "fine")},
    {"id": "stuck", "messages": msgs("q", "hang")},
    {"id": "ok2", "messages": msgs("q", "fine")},
]


@pytest.mark.parametrize(
    "extra",
    [
        ("--reward-granularity", "sample"),
        ("--reward-granularity", "file"),
        ("--reward-granularity", "file", "--reward-workers", "4"),
    ],
    ids=["sample", "file", "file-workers"],
)
def test_a_call_over_the_timeout_fails_its_sample_and_the_run_goes_on(project, extra):
    project.file("rewards.py", HANGS)
    project.jsonl("s.jsonl", ROWS)
    result = project.pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--reward-samples",
        "s.jsonl",
        "--reward-timeout",
        "0.5",
        "--reward-report",
        "out",
        *extra,
        timeout=120,
    )
    assert result.ret == 1
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    for fn in ("sync_hang", "async_hang"):
        got = {r["id"]: r for r in rows if r["function"] == fn}
        assert got["ok1"]["verdict"] == got["ok2"]["verdict"] == "pass", fn
        assert got["stuck"]["verdict"] == "fail", fn
        assert "timed out after 0.5s" in got["stuck"]["error"], fn


def test_the_marker_timeout_overrides_the_option(project):
    project.file(
        "rewards.py",
        """
        import time
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(timeout=0.3)
        @reward_function
        def patient(messages, **kwargs):
            time.sleep(1.0 if messages[-1]["content"] == "hang" else 0)
            return {"score": 1.0}
        """,
    )
    project.jsonl("s.jsonl", ROWS)
    result = project.pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--reward-samples", "s.jsonl", "--reward-timeout", "30", timeout=120
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*timed out after 0.3s*"])


def test_a_bad_timeout_is_a_usage_error(project):
    project.file("rewards.py", HANGS)
    project.jsonl("s.jsonl", ROWS)
    result = project.run("--reward-samples", "s.jsonl", "--reward-timeout", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reward-timeout: a reward timeout must be > 0 seconds, got 0*"])


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_pytest_timeout_ends_a_run_whose_reward_never_returns(project, granularity):
    project.file("rewards.py", HANGS)
    project.jsonl("s.jsonl", ROWS)
    result = project.pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--reward-samples",
        "s.jsonl",
        "--reward-fn",
        "rewards.py::sync_hang",
        "--reward-granularity",
        granularity,
        "--reward-workers",
        "4",
        "--timeout",
        "3",
        timeout=120,
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*Timeout*"])


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_ctrl_c_ends_a_run_whose_reward_never_returns(project, granularity):
    project.file("rewards.py", HANGS)
    project.jsonl("s.jsonl", ROWS)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = project.path / "run.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--reward-samples", "s.jsonl",
                "--reward-fn", "rewards.py::sync_hang", "--reward-granularity", granularity,
                "--reward-workers", "4", "-p", "no:timeout", "-v",
            ],
            cwd=project.path, stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        # Wait until the run is inside the hung call (bounded), then press Ctrl-C.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "s.jsonl::sync_hang" not in log.read_text():
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == pytest.ExitCode.INTERRUPTED, log.read_text()
