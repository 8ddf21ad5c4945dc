"""--reward-executor ray: a local Ray started for the run (loopback only), pytest-xdist workers sharing it, and a
real two-node cluster that loses a node mid-run — the same verdicts and files as an in-process run.

Opt-in (marker ``ray``; ``make test-ray``, or ``pytest -m ray tests/test_executors_ray.py``): Ray is an optional
extra of ~240 MB, and each test starts Ray processes (seconds, and about a GB of memory). Every Ray process of a
test lives in a short temporary directory of its own, is found by that directory (or as a child of the run that
started it) and is killed by PID at the end; nothing listens on anything but 127.0.0.1 (checked)."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import msgs
from .test_executors import make_project, normalized_files, run_args

pytestmark = pytest.mark.ray


def _ray_env(tmp: Path) -> dict[str, str]:
    """The environment of every Ray process and driver of a test: loopback only, no usage stats, its own temp
    directory and auth token, never a cluster it did not start."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # Ray takes 127.0.0.1 as the node's address and binds only there
        RAY_USAGE_STATS_ENABLED="0",
        RAY_TMPDIR=str(tmp),
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(16),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


@pytest.fixture
def ray_tmp():
    """A short directory for Ray's sockets (their paths must stay under 108 bytes); every process whose command
    line names it is killed afterwards."""
    if importlib.util.find_spec("ray") is None:  # opted in without the extra: a failure, never a skip
        pytest.fail("the ray extra is not installed: make test-ray (pip install -e '.[dev,ray]')")
    tmp = Path(tempfile.mkdtemp(prefix="prr-", dir="/tmp"))
    (tmp / "ray").mkdir()
    yield tmp
    _kill_all(_processes_naming(str(tmp)))
    shutil.rmtree(tmp, ignore_errors=True)


# --- processes and sockets, from /proc ---------------------------------------------------------------------


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _ppid(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    seen, todo = set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def _processes_naming(needle: str) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if needle.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.add(int(entry))
            except OSError:
                continue
    return _descendants(found)


def _kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


LISTENERS = '''
import os
from pathlib import Path

def _ppid(pid):
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None

def _address(hexaddr):
    host, port = hexaddr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1]), int(port, 16)
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    data = b"".join(words)
    if data[:12] == b"\\0" * 10 + b"\\xff\\xff":
        return "::ffff:" + ".".join(str(b) for b in data[12:]), int(port, 16)
    return data.hex(), int(port, 16)

def pytest_sessionfinish(session):
    """Every TCP listener of this run's process tree (Ray's processes are its children), before Ray stops."""
    if hasattr(session.config, "workerinput"):
        return
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(_ppid(int(entry)), []).append(int(entry))
    tree, todo = {os.getpid()}, [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    inodes = {}
    for pid in tree:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:
                found.append([inodes[parts[9]], *_address(parts[1])])
    Path(__file__).with_name("listeners.json").write_text(__import__("json").dumps(found))
'''


def _loopback(host: str) -> bool:
    return host.startswith("127.") or host == "::ffff:127.0.0.1" or host == "0" * 31 + "1"


def _run(project, env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project.path, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_a_local_ray_writes_the_files_of_an_in_process_run_and_listens_on_loopback_only(project, ray_tmp):
    make_project(project)
    project.file("conftest.py", LISTENERS)
    env = _ray_env(ray_tmp)
    reference = _run(project, env, *run_args("out-thread", "thread"))
    assert reference.returncode == 1, reference.stdout + reference.stderr
    expected = normalized_files(project.path, "out-thread", "thread")
    for name, extra in [
        ("ray", ["--reward-executor", "ray", "--reward-workers", "2"]),
        ("ray-n2", ["--reward-executor", "ray", "--reward-workers", "2", "-n", "2"]),
    ]:
        (project.path / "listeners.json").unlink(missing_ok=True)
        result = _run(project, env, *run_args(f"out-{name}", name), *extra)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "10 failed" in result.stdout, result.stdout
        got = normalized_files(project.path, f"out-{name}", name)
        for file, text in expected.items():
            assert got[file] == text, f"{name}: {file} differs from the in-process run's"
        listeners = json.loads((project.path / "listeners.json").read_text())
        assert len(listeners) >= 3, listeners  # Ray's GCS, raylet, workers ... were seen
        assert [entry for entry in listeners if not _loopback(entry[1])] == [], listeners
    # The run stopped its Ray: nothing of it is left.
    assert not _processes_naming(str(ray_tmp)) - {os.getpid()}


@pytest.mark.parametrize("imported_first", [False, True], ids=["fresh", "ray-imported-by-a-conftest"])
def test_a_local_ray_listens_on_loopback_only_in_a_users_environment(project, ray_tmp, imported_first):
    """Without the test environment's RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (a user's shell has none), and also when a
    conftest imported ray before the run started it: every listener of the embedded Ray is on 127.0.0.1."""
    make_project(project)
    project.file("conftest.py", ("import ray  # noqa: F401\n" if imported_first else "") + LISTENERS)
    env = {k: v for k, v in _ray_env(ray_tmp).items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    result = _run(project, env, *run_args("out-ray", "ray"), "--reward-executor", "ray", "--reward-workers", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    listeners = json.loads((project.path / "listeners.json").read_text())
    assert len(listeners) >= 3, listeners
    assert [entry for entry in listeners if not _loopback(entry[1])] == [], listeners
    assert not _processes_naming(str(ray_tmp)) - {os.getpid()}


def test_a_local_ray_leaves_no_session_logs_and_removes_a_killed_runs(project, ray_tmp):
    """Without RAY_TMPDIR, the embedded Ray keeps its sessions in a directory of the run's own, removed when the
    run closes it; one left by a killed run (its pid gone) is removed by the next run, a live run's is kept."""
    make_project(project)
    env = {k: v for k, v in _ray_env(ray_tmp).items() if k != "RAY_TMPDIR"}
    env["TMPDIR"] = str(ray_tmp)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = ray_tmp / f"prr-{dead.pid}-left"
    (stale / "session_latest" / "logs").mkdir(parents=True)
    live = ray_tmp / f"prr-{os.getpid()}-held"
    live.mkdir()
    result = _run(project, env, *run_args("out-ray", "ray"), "--reward-executor", "ray", "--reward-workers", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "10 failed" in result.stdout, result.stdout
    assert not stale.exists()
    assert sorted(p.name for p in ray_tmp.glob("prr-*")) == [live.name]  # the run's own is gone too


CLUSTER = """
import json, sys
from ray.cluster_utils import Cluster

cluster = Cluster(
    initialize_head=True,
    connect=False,
    head_node_args={"num_cpus": 1, "include_dashboard": False},  # RAY_TMPDIR: the test's directory
)
worker = cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
print(json.dumps({"address": cluster.address, "worker_raylet": worker.all_processes["raylet"][0].process.pid}),
      flush=True)
sys.stdin.read()  # until the test is done with it
cluster.shutdown()
"""

SLOW_PARITY = """
import os, pathlib, time
from pytest_reward import reward_function

MARKS = pathlib.Path({marks!r})

@reward_function
def parity(messages, **kwargs):
    MARKS.mkdir(exist_ok=True)
    (MARKS / str(os.getppid())).touch()  # the raylet of the node this worker runs on
    time.sleep(0.02)
    n = int(messages[-1]["content"])
    return {{"score": float(n % 2), "reason": f"{{n}} is {{'odd' if n % 2 else 'even'}}"}}
"""


def test_a_cluster_that_loses_a_node_mid_run_still_scores_every_sample(project, ray_tmp):
    """A head and a worker node (separate raylets, one CPU each; Ray's own test cluster, because ``ray start
    --address`` refuses to join a loopback-only cluster), a run against it by address (the project shipped as the
    tasks' working_dir), the worker node killed (raylet and its workers, SIGKILL) while it scores."""
    marks = project.path / "marks"
    project.file("rewards.py", SLOW_PARITY.format(marks=str(marks)))
    project.jsonl("s.jsonl", [{"id": f"n{i}", "messages": msgs("odd?", str(i))} for i in range(400)])
    env = _ray_env(ray_tmp)
    cluster = subprocess.Popen(
        [sys.executable, "-c", CLUSTER],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        line = cluster.stdout.readline() if cluster.stdout else ""
        assert line, "the test cluster did not start"
        info = json.loads(line)
        args = ["--reward-samples", "s.jsonl", "--reward-threshold", "0.5", "--reward-report"]
        reference = _run(project, env, *args, "out-thread", "--reward-granularity", "file")
        assert "1 failed" in reference.stdout, reference.stdout

        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, "out-cluster",
             "--reward-executor", "ray", "--reward-ray-address", info["address"]],
            cwd=project.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 240
        victim = marks / str(info["worker_raylet"])
        while not victim.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert victim.exists(), "the worker node never scored a sample"
        assert run.poll() is None, "the run ended before the node could be lost"
        _kill_all(_descendants({info["worker_raylet"]}))  # the machine is gone: its raylet and its workers
        out, _ = run.communicate(timeout=300)
    finally:
        for proc in (cluster,):
            if proc.poll() is None and proc.stdin:
                proc.stdin.close()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert run.returncode == 1, out
    assert "1 failed" in out, out
    assert "ray workers died" in out and "retried once" in out, out
    got = {
        r["id"]: r
        for r in map(json.loads, (project.path / "out-cluster" / "results.jsonl").read_text().splitlines())
    }
    assert len(got) == 400
    assert all(r["verdict"] == ("pass" if int(r["id"][1:]) % 2 else "fail") for r in got.values())
    a = normalized_files_of(project.path / "out-thread")
    b = normalized_files_of(project.path / "out-cluster")
    assert a == b


def normalized_files_of(out: Path) -> dict[str, object]:
    import re

    results = re.sub(r'"duration": [0-9.e-]+', "", (out / "results.jsonl").read_text())
    summary = json.loads((out / "summary.json").read_text())
    for key in ("generated_at", "args"):
        summary.pop(key, None)
    return {"results.jsonl": results, "summary.json": _drop_durations(summary)}


def _drop_durations(value: object) -> object:
    if isinstance(value, dict):
        return {k: _drop_durations(v) for k, v in value.items() if k != "duration"}
    if isinstance(value, list):
        return [_drop_durations(v) for v in value]
    return value


SLOW = """
import os, pathlib, time
from pytest_reward import reward_function

MARKS = pathlib.Path({marks!r})

@reward_function
def slow(messages, **kwargs):
    MARKS.mkdir(exist_ok=True)
    (MARKS / str(os.getpid())).touch()
    time.sleep(0.2)
    return {{"score": 1.0}}
"""


def test_ctrl_c_cancels_the_ray_tasks_and_stops_the_local_ray(project, ray_tmp):
    marks = project.path / "marks"
    project.file("rewards.py", SLOW.format(marks=str(marks)))
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(2000)])
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--reward-samples", "s.jsonl",
         "--reward-executor", "ray", "--reward-workers", "2"],
        cwd=project.path, env=_ray_env(ray_tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(list(marks.glob("*")) if marks.exists() else []) < 2:
            assert run.poll() is None, run.stdout.read() if run.stdout else ""
            time.sleep(0.1)
        workers = {int(p.name) for p in marks.glob("*")}
        assert len(workers) == 2, "both Ray workers should be scoring by now"
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        _processes_naming(str(ray_tmp)) or any(_alive(p) for p in workers)
    ):
        time.sleep(0.2)
    assert not _processes_naming(str(ray_tmp)), "the run's Ray outlived it"
    assert not any(_alive(p) for p in workers)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
