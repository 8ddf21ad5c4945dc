"""Sandboxed code cannot reach the user's kernel keyrings, terminals or shared memory.

Keyrings are not namespaced: a child inherits its caller's session keyring and, with the caller's uid, its user
keyring. The seccomp filter refuses ``keyctl``, ``add_key`` and ``request_key``, the launcher joins a fresh session
keyring, and ``/proc/keys`` is blanked in the sandbox's ``/proc``. Below ``/dev`` only ``null``, ``zero``,
``random`` and ``urandom`` may be opened, and ``/dev/shm`` is a private tmpfs. Each attack runs as an unprivileged
user (``nobody`` when the runner is root) and, for keyrings, as root too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .unprivileged import NOBODY, User

# The caller keeps an API token in a session keyring of its own (what `keyctl add user NAME VALUE @s` does), then
# runs code that tries every way at it: search and read, revoke, plant keys, request_key, and /proc/keys.
KEYRING_ATTACK = r"""
import ctypes, json, os, sys, uuid
from pytest_reward.rewards.sandbox import run_code

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ADD_KEY, REQUEST_KEY, KEYCTL = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[os.uname().machine]
SESSION, USER = -3, -4
if libc.syscall(KEYCTL, 1, b"pytest-reward-test") < 0:  # KEYCTL_JOIN_SESSION_KEYRING
    print(json.dumps({"refused": os.strerror(ctypes.get_errno())}))
    sys.exit(0)
description = ("api-token-" + uuid.uuid4().hex).encode()
key = libc.syscall(ADD_KEY, b"user", description, b"s3cret-value", 12, ctypes.c_int(SESSION))
assert key > 0, os.strerror(ctypes.get_errno())

code = f'''
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {{}}
def attempt(what, *args):
    result = libc.syscall(*args)
    out[what] = "succeeded" if result >= 0 else os.strerror(ctypes.get_errno())
    return result
attempt("search the session keyring", {KEYCTL}, 10, ctypes.c_int({SESSION}), b"user", {description!r}, 0)
buf = ctypes.create_string_buffer(64)
attempt("read the key by id", {KEYCTL}, 11, {key}, buf, 64)
out["payload read"] = buf.raw.rstrip(b"\\0").decode(errors="replace")
attempt("revoke the key", {KEYCTL}, 3, {key})
attempt("plant a key in the session keyring", {ADD_KEY}, b"user", b"planted", b"x", 1, ctypes.c_int({SESSION}))
attempt("plant a key in the user keyring", {ADD_KEY}, b"user", b"planted", b"x", 1, ctypes.c_int({USER}))
attempt("request_key", {REQUEST_KEY}, b"user", {description!r}, None, 0)
try:
    out["/proc/keys"] = open("/proc/keys").read()
except OSError as exc:
    out["/proc/keys"] = type(exc).__name__
print(json.dumps(out))
'''
result = run_code(code)
buf = ctypes.create_string_buffer(64)
intact = libc.syscall(KEYCTL, 11, key, buf, 64)
print(json.dumps({
    "uid": os.getuid(),
    "status": result.status,
    "reason": result.reason,
    "attempts": json.loads(result.stdout) if result.ok else result.stderr[-2000:],
    "gaps": result.protections.get("gaps"),
    "description": description.decode(),
    "intact": buf.raw[: max(intact, 0)].decode(),
}))
"""

# The user has typed a line on a terminal of theirs (mode 0600) that nothing has read yet, and keeps a private
# file in /dev/shm; sandboxed code tries both, and must still get the devices and the shared memory it needs.
DEVICE_ATTACK = r"""
import json, os, uuid
from pytest_reward.rewards.sandbox import run_code

master, slave = os.openpty()
terminal = os.ttyname(slave)
os.chmod(terminal, 0o600)
os.write(master, b"my password is hunter2\n")
private = f"/dev/shm/pytest-reward-{uuid.uuid4().hex}"
fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, b"private notes")
os.close(fd)

code = f'''
import json, multiprocessing, os
out = {{}}
def attempt(what, action):
    try:
        out[what] = action()
    except OSError as exc:
        out[what] = type(exc).__name__
attempt("read the terminal", lambda: open({terminal!r}, "rb", buffering=0).read(64).decode())
attempt("list /dev/pts", lambda: sorted(os.listdir("/dev/pts")))
attempt("read the private /dev/shm file", lambda: open({private!r}).read())
attempt("list /dev/shm", lambda: sorted(os.listdir("/dev/shm")))
attempt("list /dev", lambda: sorted(os.listdir("/dev")))
attempt("urandom", lambda: len(open("/dev/urandom", "rb").read(16)))
attempt("zero", lambda: open("/dev/zero", "rb").read(4).hex())
attempt("null", lambda: open("/dev/null", "w").write("discarded"))
def shared():
    with open("/dev/shm/mine", "w") as f:
        f.write("own")
    lock = multiprocessing.Lock()
    with lock:
        return open("/dev/shm/mine").read()
attempt("own shared memory and a semaphore", shared)
print(json.dumps(out))
'''
result = run_code(code)
os.set_blocking(slave, False)
try:
    unread = os.read(slave, 64).decode()
except BlockingIOError:
    unread = ""
os.unlink(private)
print(json.dumps({
    "uid": os.getuid(),
    "status": result.status,
    "reason": result.reason,
    "attempts": json.loads(result.stdout) if result.ok else result.stderr[-2000:],
    "gaps": result.protections.get("gaps"),
    "private_shm": result.protections.get("private_shm"),
    "unread": unread,
}))
"""

DENIED = {"PermissionError", "FileNotFoundError"}


def _check_keyrings(out: dict) -> None:
    if "refused" in out:
        pytest.skip(f"this host refuses keyctl to every process ({out['refused']}): no keyring to protect")
    assert out["status"] == "ok", out
    attempts = out["attempts"]
    payload, proc_keys = attempts.pop("payload read"), attempts.pop("/proc/keys")
    assert set(attempts.values()) == {"Operation not permitted"}, attempts
    assert len(attempts) == 6
    assert payload == ""
    assert out["description"] not in proc_keys
    assert out["intact"] == "s3cret-value"  # not revoked
    assert not any(gap.startswith("keyrings:") for gap in out["gaps"]), out["gaps"]


def test_an_unprivileged_users_keyrings_are_out_of_reach(user: User) -> None:
    out = user.run(KEYRING_ATTACK)
    if os.geteuid() == 0 and "refused" not in out:
        assert out["uid"] == NOBODY
    _check_keyrings(out)


@pytest.mark.skipif(os.geteuid() != 0, reason="the runner is not root (the unprivileged test covers it)")
def test_roots_keyrings_are_out_of_reach(tmp_path) -> None:
    script = tmp_path / "attack.py"
    script.write_text(KEYRING_ATTACK)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    if "refused" not in out:
        assert out["uid"] == 0
    _check_keyrings(out)


def test_the_users_terminal_and_shared_memory_are_out_of_reach(user: User) -> None:
    if not os.path.isdir("/dev/pts") or not os.path.isdir("/dev/shm"):
        pytest.skip("this host has no /dev/pts or /dev/shm")
    out = user.run(DEVICE_ATTACK)
    assert out["status"] == "ok", out
    attempts = out["attempts"]
    if any(gap.startswith("files:") for gap in out["gaps"]):
        pytest.skip(f"no Landlock on this host: files are not confined ({out['gaps']})")
    assert attempts["read the terminal"] in DENIED, attempts
    assert attempts["list /dev/pts"] in DENIED, attempts
    assert attempts["list /dev"] in DENIED, attempts
    assert attempts["read the private /dev/shm file"] in DENIED, attempts
    assert out["unread"] == "my password is hunter2\n"  # still waiting for the user's own program
    assert attempts["urandom"] == 16
    assert attempts["zero"] == "00000000"
    assert attempts["null"] == len("discarded")
    if out["private_shm"]:
        assert attempts["list /dev/shm"] == [], attempts
        assert attempts["own shared memory and a semaphore"] == "own", attempts
    else:  # no mount namespace: the host's /dev/shm is denied, not shared
        assert attempts["list /dev/shm"] in DENIED, attempts


def test_the_threat_model_lists_these_boundaries_with_their_tests() -> None:
    from pytest_reward.rewards import sandbox

    doc = sandbox.__doc__ or ""
    assert "keyrings" in doc and "devices" in doc
    for test in (
        "test_an_unprivileged_users_keyrings_are_out_of_reach",
        "test_roots_keyrings_are_out_of_reach",
        "test_the_users_terminal_and_shared_memory_are_out_of_reach",
    ):
        assert test in doc

