"""Issue 14.1: sandboxed code cannot reach the unix sockets of the user running it, and still runs ordinary programs.

The sandbox matters most for an ordinary user (root's sandbox runs as a uid of its own, which cannot open the
runner's 0600 sockets anyway). When the test runner is root, each test starts a real unprivileged process: a
private mount namespace makes the interpreter (under ``/root`` here) reachable, then the process drops to
``nobody`` with a home and ``$XDG_RUNTIME_DIR`` of its own and runs the scenario below, which prints JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from pytest_reward.rewards.sandbox import run_code

from .unprivileged import NOBODY, User

# The attack, run by the unprivileged user: it listens on 0600 stream sockets (one in $XDG_RUNTIME_DIR, one in
# /tmp, one in /var/run), a datagram socket and an abstract one, checks that it can reach each of them itself,
# then asks sandboxed code to connect to every one; afterwards no listener may have a connection or a datagram.
ATTACK = r"""
import json, os, socket, sys, uuid
from pytest_reward.rewards import local_code_execution_reward
from pytest_reward.rewards.sandbox import run_code, sandbox_protections

cfg = json.loads(sys.argv[1])
if cfg.get("emulate_missing"):
    import pyseccomp
    host = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    # A host without seccomp filters: what a kernel without CONFIG_SECCOMP_FILTER answers.
    host.add_rule(pyseccomp.ERRNO(22), "prctl", pyseccomp.Arg(0, pyseccomp.EQ, 22))  # PR_SET_SECCOMP: EINVAL
    host.add_rule(pyseccomp.ERRNO(22), "seccomp")
    host.load()

def listen(path, kind=socket.SOCK_STREAM):
    server = socket.socket(socket.AF_UNIX, kind)
    server.bind(path)
    if not path.startswith("\0"):
        os.chmod(path, 0o600)
    if kind == socket.SOCK_STREAM:
        server.listen(8)
    server.setblocking(False)
    return server

def waiting(server):
    count = 0
    while True:
        try:
            if server.type == socket.SOCK_STREAM:
                server.accept()[0].close()
            else:
                server.recv(64)
        except BlockingIOError:
            return count
        count += 1

abstract = "\0pytest-reward-" + uuid.uuid4().hex
streams = {path: listen(path) for path in [*cfg["stream"], abstract]}
datagram = listen(cfg["datagram"], socket.SOCK_DGRAM)

control = {}
for path, server in streams.items():
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)
    control[path] = waiting(server)
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as client:
    client.sendto(b"x", cfg["datagram"])
control[cfg["datagram"]] = waiting(datagram)

code = f'''
import json, socket
def attempt(make, use):
    try:
        sock = make()
    except OSError as exc:
        return "socket refused: " + exc.strerror
    try:
        use(sock)
    except OSError as exc:
        return "connect refused: " + exc.strerror
    return "reached"
results = {{}}
for path in {list(streams)!r}:
    results[path] = attempt(lambda: socket.socket(socket.AF_UNIX), lambda s: s.connect(path))
results["datagram"] = attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM),
                              lambda s: s.sendto(b"x", {cfg["datagram"]!r}))
results["datagram via socketpair"] = attempt(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0],
                                             lambda s: s.sendto(b"x", {cfg["datagram"]!r}))
print(json.dumps(results))
'''
result = run_code(code, limits=None)
strict = run_code(code, strict=True)
connect = f"import socket\nsocket.socket(socket.AF_UNIX).connect({cfg['stream'][0]!r})\nprint('reached')"
reward = local_code_execution_reward(
    messages=[{"role": "user", "content": "Connect."},
              {"role": "assistant", "content": "```python\n" + connect + "\n```"}],
    ground_truth="reached",
)
print(json.dumps({
    "uid": os.getuid(),
    "control": control,
    "status": result.status,
    "reason": result.reason,
    "attempts": json.loads(result.stdout) if result.ok else result.stderr,
    "strict_status": strict.status,
    "strict_reason": strict.reason,
    "reward_score": reward.score,
    "reward_reason": reward.reason,
    "reached_after": {path: waiting(server) for path, server in streams.items()} | {"datagram": waiting(datagram)},
    "gaps": sandbox_protections().get("gaps"),
    "abstract": abstract,
}))
"""

# Ordinary programs, run by the unprivileged user: printing, computing, reading its files and allowed system
# files, threads, asyncio (a socketpair), a child process; and the same under ``strict``.
ORDINARY = r"""
import json, sys
from pytest_reward.rewards.sandbox import run_code

code = '''
import asyncio, json, os, subprocess, sys, threading
async def answer():
    await asyncio.sleep(0)
    return 6 * 7
out = {}
out["computed"] = sum(i * i for i in range(1000))
out["own file"] = open("data.txt").read()
out["stdlib source"] = "def dumps" in open(json.__file__).read()
out["system file"] = len(open("/etc/passwd").read()) > 0
box = []
thread = threading.Thread(target=lambda: box.append(os.getpid()))
thread.start(); thread.join()
out["thread"] = bool(box)
out["asyncio"] = asyncio.run(answer())
out["child"] = subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True, text=True).stdout
print(json.dumps(out))
'''
runs = {}
for strict in (False, True):
    result = run_code(code, stdin="", files={"data.txt": "my input"}, strict=strict)
    runs[str(strict)] = {"status": result.status, "reason": result.reason, "stdout": result.stdout,
                         "stderr": result.stderr[-2000:], "gaps": result.protections.get("gaps")}
print(json.dumps(runs))
"""

# A host that lacks one mechanism, made real for this process with a seccomp filter of its own (installed
# before the sandbox starts, so the launcher meets the same refusals an older or locked-down kernel gives).
MISSING = r"""
import json, sys
import pyseccomp
from pytest_reward.rewards.sandbox import run_code

missing = json.loads(sys.argv[1])["missing"]
host = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
if missing == "user namespaces":  # e.g. kernel.unprivileged_userns_clone=0, or an AppArmor/SELinux policy
    host.add_rule(pyseccomp.ERRNO(1), "unshare", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, 0x10000000, 0x10000000))
elif missing == "landlock":  # kernel < 5.13 or Landlock not enabled: the syscalls do not exist
    for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
        host.add_rule(pyseccomp.ERRNO(38), name)
host.load()
code = '''
import socket
try:
    socket.socket(socket.AF_UNIX)
    print("unix socket opened")
except PermissionError:
    print("unix socket refused")
'''
out = {}
for strict in (False, True):
    result = run_code(code, strict=strict)
    out[str(strict)] = {"status": result.status, "reason": result.reason, "stdout": result.stdout,
                        "gaps": result.protections.get("gaps")}
print(json.dumps(out))
"""


def test_unix_sockets_of_an_unprivileged_user_are_unreachable(user: User) -> None:
    sockets = [str(user.runtime_dir / "bus"), str(user.tmp / "agent.sock"), str(user.var_run / "docker.sock")]
    assert sockets[2].startswith("/var/run/")
    out = user.run(ATTACK, stream=sockets, datagram=str(user.runtime_dir / "notify"))
    if os.geteuid() == 0:
        assert out["uid"] == NOBODY
    # Outside the sandbox the user reaches every socket: the test would see a hole.
    assert set(out["control"].values()) == {1}, out["control"]
    assert len(out["control"]) == 5
    gaps = out["gaps"]
    # A host without seccomp filters: the documented reason and strict's refusal instead.
    if any(gap.startswith("unix sockets:") for gap in gaps):
        assert "unix sockets: no seccomp filter" in out["reason"], out
        assert out["strict_status"] == "setup_error"
        assert "strict: refusing to run untrusted code without full isolation" in out["strict_reason"]
        return
    assert out["status"] == "ok", out
    attempts = out["attempts"]
    assert set(attempts) == {*sockets, out["abstract"], "datagram", "datagram via socketpair"}
    assert set(attempts.values()) == {"socket refused: Operation not permitted"}, attempts
    assert set(out["reached_after"].values()) == {0}, out["reached_after"]
    assert out["reward_score"] == 0.0, out["reward_reason"]
    assert "PermissionError: [Errno 1] Operation not permitted" in out["reward_reason"]
    if gaps:  # other mechanisms missing on this host: the reason names them and strict refuses
        assert out["strict_status"] == "setup_error" and all(gap in out["strict_reason"] for gap in gaps)
    else:
        assert out["strict_status"] == "ok", out["strict_reason"]


def test_an_unprivileged_user_still_runs_ordinary_programs(user: User) -> None:
    runs = user.run(ORDINARY)
    expected = {"computed": 332833500, "own file": "my input", "stdlib source": True, "system file": True,
                "thread": True, "asyncio": 42, "child": "7\n"}  # fmt: skip
    plain = runs["False"]
    assert plain["status"] == "ok", plain
    assert json.loads(plain["stdout"]) == expected
    if plain["gaps"]:
        assert plain["reason"].endswith(f"[sandbox incomplete: {'; '.join(plain['gaps'])}]")
        assert runs["True"]["status"] == "setup_error"
    else:
        assert plain["reason"] == "exited with status 0"
        assert runs["True"]["status"] == "ok", runs["True"]
        assert json.loads(runs["True"]["stdout"]) == expected


@pytest.mark.parametrize(
    ("missing", "gap"),
    [
        ("user namespaces", "network: no network namespace (no user namespace: unshare(CLONE_NEWUSER): "
                            "Operation not permitted)"),
        ("landlock", "files: no Landlock"),
    ],
)  # fmt: skip
def test_a_host_without_a_mechanism_is_named_and_strict_refuses(user: User, missing: str, gap: str) -> None:
    out = user.run(MISSING, missing=missing)
    plain, strict = out["False"], out["True"]
    assert plain["status"] == "ok", plain
    assert any(g.startswith(gap) for g in plain["gaps"]), plain["gaps"]
    assert "[sandbox incomplete: " in plain["reason"] and gap in plain["reason"]
    # seccomp needs neither user namespaces nor Landlock: unix sockets stay closed on such hosts.
    assert plain["stdout"] == "unix socket refused\n"
    assert strict["status"] == "setup_error"
    assert strict["stdout"] == ""
    assert strict["reason"].startswith("sandbox setup failed: strict: refusing to run untrusted code")
    assert gap in strict["reason"]


def test_a_host_without_seccomp_is_named_and_strict_refuses(user: User) -> None:
    sockets = [str(user.runtime_dir / "bus"), str(user.tmp / "agent.sock"), str(user.var_run / "docker.sock")]
    out = user.run(ATTACK, stream=sockets, datagram=str(user.runtime_dir / "notify"), emulate_missing=True)
    gap = "unix sockets: no seccomp filter (prctl(PR_SET_SECCOMP): Invalid argument)"
    assert gap in out["reason"], out["reason"]
    # The documented hole, reached for real: this is what strict mode exists to refuse.
    assert "reached" in out["attempts"].values()
    assert out["strict_status"] == "setup_error"
    assert "strict: refusing to run untrusted code without full isolation" in out["strict_reason"]
    assert gap in out["strict_reason"]
    assert gap in out["reward_reason"]  # the reward's reason names the missing mechanism too


def test_a_world_connectable_socket_is_unreachable_from_the_runners_sandbox() -> None:
    """Root's sandbox runs as a uid of its own, but a 0666 socket (or one of a group it shares) is open to every
    uid: the seccomp filter still refuses it."""
    directory = Path(tempfile.mkdtemp(prefix="pytest-reward-sock-", dir="/tmp"))
    directory.chmod(0o755)
    path = str(directory / "world.sock")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(path)
        os.chmod(path, 0o666)
        server.listen(1)
        server.setblocking(False)
        result = run_code(
            "import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({path!r})\n    print('reached')\nexcept OSError as exc:\n    print(exc.strerror)\n"
        )
        assert result.ok, result.reason
        if any(gap.startswith("unix sockets:") for gap in result.protections["gaps"]):
            assert "unix sockets: no seccomp filter" in result.reason  # a host without seccomp filters
            return
        assert result.stdout == "Operation not permitted\n"
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
        shutil.rmtree(directory)
