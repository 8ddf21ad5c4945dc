"""What a run leaves behind: after Ctrl-C, or at the end of a run, no process started for it remains (the process
executor's workers and the programs its rewards started)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import msgs

# Each call starts a child program that would run for five minutes and records both pids.
SPAWNS = """
    import os, pathlib, subprocess, sys, time
    from pytest_reward import reward_function

    HERE = pathlib.Path(__file__).parent

    @reward_function
    def spawns(messages, **kwargs):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        (HERE / "pids").mkdir(exist_ok=True)
        (HERE / "pids" / f"{os.getpid()}-{child.pid}").touch()
        time.sleep(float(os.environ.get("REWARD_SLEEP", "0")))
        return {"score": 1.0}
"""


def _gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":  # exited, not yet reaped
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.1)
    return False


def _pids(project) -> tuple[list[int], list[int]]:
    pairs = [name.split("-") for name in (p.name for p in (project.path / "pids").glob("*"))]
    return [int(w) for w, _ in pairs], [int(c) for _, c in pairs]


def _pytest(project, *args: str, sleep: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--reward-samples", "s.jsonl",
         "--reward-executor", "process", "--reward-workers", "2", *args],
        cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "REWARD_SLEEP": sleep},
    )  # fmt: skip


def test_ctrl_c_ends_the_workers_and_the_programs_their_rewards_started(project):
    project.file("rewards.py", SPAWNS)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(200)])
    proc = _pytest(project, sleep="60")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list((project.path / "pids").glob("*"))) < 2:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
        workers, children = _pids(project)
        assert len(children) == 2, "both workers should be in a call by now"
        assert not any(_gone(pid, within=0) for pid in children)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert all(_gone(pid) for pid in workers), "a worker outlived the interrupted run"
    assert all(_gone(pid) for pid in children), "a program a reward started outlived the interrupted run"


def test_programs_a_reward_left_running_end_with_the_run(project):
    project.file("rewards.py", SPAWNS)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(4)])
    proc = _pytest(project, "--reward-granularity", "file", sleep="0")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    _workers, children = _pids(project)
    assert len(children) == 4
    assert all(_gone(pid) for pid in children), "a program a reward started outlived the run"
