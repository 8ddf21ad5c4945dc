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



def test_a_later_run_removes_the_rows_a_killed_run_left(project, tmp_path):
    """A run ended by SIGKILL leaves its rows directory in the temp dir; the next run that writes rows removes it
    (and only directories whose owning process is gone)."""
    project.file("rewards.py", SPAWNS)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(200)])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "REWARD_SLEEP": "60"}
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--reward-samples", "s.jsonl",
            "--reward-granularity", "file", "--reward-report", "out"]  # fmt: skip
    killed = subprocess.Popen(args, cwd=project.path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list((project.path / "pids").glob("*")):
            time.sleep(0.1)
        assert list((project.path / "pids").glob("*")), "the run should be scoring by now"
    finally:
        killed.kill()
        killed.wait()
    (left,) = tmp.glob("pytest-reward-rows-*")
    alive = tmp / f"pytest-reward-rows-{os.getpid()}-held"  # a live run's: kept
    alive.mkdir()
    unnamed = tmp / "pytest-reward-rows-x1y2"  # not named by a pid: not ours to judge
    unnamed.mkdir()
    project.jsonl("s.jsonl", [{"id": "s0", "messages": msgs("q", "a")}])
    proc = subprocess.run(args, cwd=project.path, env={**env, "REWARD_SLEEP": "0"}, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not left.exists()
    assert alive.exists() and unnamed.exists()
    assert sorted(p.name for p in tmp.glob("pytest-reward-rows-*")) == sorted([alive.name, unnamed.name])
