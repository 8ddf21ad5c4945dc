"""The sandbox's seccomp filter: libseccomp's build and the built-in BPF make the same decisions, on real calls
(unix sockets and the ways around them, and the kernel keyring calls)."""

from __future__ import annotations

import base64
import json
import platform
import signal
import subprocess
import sys
from pathlib import Path

import pyseccomp  # the 'sandbox' extra, part of the dev install
import pytest

from pytest_reward.rewards import local_code_execution_reward, sandbox
from pytest_reward.rewards.sandbox import run_code

LAUNCHER_DIR = str(Path(sandbox.__file__).parent)
MACHINE = platform.machine()

# Runs in a fresh interpreter: installs the filter given as base64 (none when empty) the way the launcher does,
# then makes each call directly (libc's syscall(), so no wrapper hides an argument) and prints its errno name.
PROBE = r"""
import base64, ctypes, errno, json, sys
sys.path.insert(0, sys.argv[1])
import _sandbox_launcher as launcher

numbers = json.loads(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
fds = (ctypes.c_int * 2)()

def call(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(numbers[name]), *(ctypes.c_long(a) for a in args))
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]

program = base64.b64decode(sys.argv[2])
if program:
    assert libc.prctl(launcher.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    assert launcher._seccomp(program) == "", "the filter was not installed"
AF_UNIX, AF_INET, STREAM, DGRAM, RAW, SEQPACKET = 1, 2, 1, 2, 3, 5
CLOEXEC, NONBLOCK = 0o2000000, 0o4000
pair = ctypes.addressof(fds)
print(json.dumps({
    "socket(AF_UNIX, SOCK_STREAM)": call("socket", AF_UNIX, STREAM, 0),
    "socket(AF_UNIX | 1 << 32, SOCK_STREAM)": call("socket", AF_UNIX | 1 << 32, STREAM, 0),
    "socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC)": call("socket", AF_UNIX, DGRAM | CLOEXEC, 0),
    "socket(AF_INET, SOCK_STREAM)": call("socket", AF_INET, STREAM, 0),
    "socketpair(AF_UNIX, SOCK_STREAM)": call("socketpair", AF_UNIX, STREAM, 0, pair),
    "socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)": call("socketpair", AF_UNIX, SEQPACKET | CLOEXEC, 0, pair),
    "socketpair(AF_UNIX, SOCK_DGRAM)": call("socketpair", AF_UNIX, DGRAM, 0, pair),
    "socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK)": call("socketpair", AF_UNIX, DGRAM | NONBLOCK, 0, pair),
    "socketpair(AF_UNIX, SOCK_RAW)": call("socketpair", AF_UNIX, RAW, 0, pair),
    "socketpair(AF_UNIX | 1 << 32, SOCK_DGRAM | 1 << 32)":
        call("socketpair", AF_UNIX | 1 << 32, DGRAM | 1 << 32, 0, pair),
    "io_uring_setup(1, NULL)": call("io_uring_setup", 1, 0),
    "io_uring_enter(-1)": call("io_uring_enter", -1, 0, 0, 0, 0, 0),
    "io_uring_register(-1)": call("io_uring_register", -1, 0, 0, 0),
    "pidfd_getfd(-1, 0)": call("pidfd_getfd", -1, 0, 0),
    "ptrace(PTRACE_PEEKDATA, 0)": call("ptrace", 2, 0, 0, 0),
    "process_vm_readv(0)": call("process_vm_readv", 0, 0, 1, 0, 1, 0),
    "process_vm_writev(0)": call("process_vm_writev", 0, 0, 1, 0, 1, 0),
    "keyctl(9999)": call("keyctl", 9999, 0, 0, 0, 0),
    "add_key(NULL)": call("add_key", 0, 0, 0, 0, 0),
    "request_key(NULL)": call("request_key", 0, 0, 0, 0),
}))
"""

REFUSED = {
    "socket(AF_UNIX, SOCK_STREAM)", "socket(AF_UNIX | 1 << 32, SOCK_STREAM)",
    "socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC)", "socketpair(AF_UNIX, SOCK_DGRAM)",
    "socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK)", "socketpair(AF_UNIX, SOCK_RAW)",
    "socketpair(AF_UNIX | 1 << 32, SOCK_DGRAM | 1 << 32)", "io_uring_setup(1, NULL)", "io_uring_enter(-1)",
    "io_uring_register(-1)", "pidfd_getfd(-1, 0)", "ptrace(PTRACE_PEEKDATA, 0)", "process_vm_readv(0)",
    "process_vm_writev(0)", "keyctl(9999)", "add_key(NULL)", "request_key(NULL)",
}  # fmt: skip
ALLOWED = {"socket(AF_INET, SOCK_STREAM)", "socketpair(AF_UNIX, SOCK_STREAM)",
           "socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)"}  # fmt: skip

COMPILERS = {
    "libseccomp": sandbox._libseccomp_filter,
    "built-in BPF": lambda: sandbox._builtin_filter(MACHINE),
}


def _probe(program: bytes) -> dict[str, str]:
    numbers = sandbox._BUILTIN_ARCHES[MACHINE][1]
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, LAUNCHER_DIR, base64.b64encode(program).decode(),
         json.dumps(numbers)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_built_in_tables_match_libseccomp() -> None:
    arches = {"x86_64": pyseccomp.Arch.X86_64, "aarch64": pyseccomp.Arch.AARCH64}
    assert set(sandbox._BUILTIN_ARCHES) == set(arches)
    for machine, (audit_arch, numbers) in sandbox._BUILTIN_ARCHES.items():
        assert audit_arch == arches[machine]
        assert set(numbers) == {name for name, _ in sandbox._SECCOMP_RULES}
        assert numbers == {name: pyseccomp.resolve_syscall(arches[machine], name) for name in numbers}


def test_both_compilers_refuse_unix_sockets_and_the_ways_around_them() -> None:
    assert MACHINE in sandbox._BUILTIN_ARCHES, f"the built-in filter does not cover {MACHINE}"
    unfiltered = _probe(b"")
    assert set(unfiltered) == REFUSED | ALLOWED
    # Without a filter none of these calls fails with EPERM, so an EPERM below is the filter's doing.
    assert "EPERM" not in unfiltered.values(), unfiltered
    decisions = {}
    for name, compile_filter in COMPILERS.items():
        filtered = _probe(compile_filter())
        assert {call for call, outcome in filtered.items() if outcome == "EPERM"} == REFUSED, (name, filtered)
        assert {call: filtered[call] for call in ALLOWED} == {call: "ok" for call in ALLOWED}, (
            name,
            filtered,
        )
        decisions[name] = filtered
    assert decisions["libseccomp"] == decisions["built-in BPF"]


@pytest.mark.skipif(MACHINE != "x86_64", reason="x32 and i386 calls exist only on x86_64")
def test_x32_calls_are_killed_by_both_filters() -> None:
    x32_socket = 0x4000_0000 | sandbox._BUILTIN_ARCHES["x86_64"][1]["socket"]
    code = (
        "import base64, ctypes, sys\n"
        f"sys.path.insert(0, {LAUNCHER_DIR!r})\n"
        "import _sandbox_launcher as launcher\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.prctl(launcher.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)\n"
        "assert launcher._seccomp(base64.b64decode(sys.argv[1])) == ''\n"
        f"libc.syscall(ctypes.c_long({x32_socket}), 1, 1, 0)\n"
        "print('survived')\n"
    )
    for name, compile_filter in COMPILERS.items():
        program = base64.b64encode(compile_filter()).decode()
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, program], capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == -signal.SIGSYS, (name, proc.returncode, proc.stdout, proc.stderr)
        assert "survived" not in proc.stdout


def test_no_built_in_filter_for_other_machines() -> None:
    with pytest.raises(ValueError, match="no built-in seccomp filter for riscv64"):
        sandbox._builtin_filter("riscv64")


def test_a_run_with_the_built_in_filter_cannot_open_a_unix_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "_SECCOMP", ("built-in BPF", sandbox._builtin_filter(MACHINE)))
    result = run_code(
        "import socket, asyncio\n"
        "try:\n    socket.socket(socket.AF_UNIX)\n    print('opened')\nexcept PermissionError as exc:\n"
        "    print('refused', exc.strerror)\n"
        "async def main():\n    return 6 * 7\n"
        "print(asyncio.run(main()))\n"
    )
    assert result.ok, result.reason
    assert result.protections["seccomp"] == "built-in BPF"
    assert result.stdout.splitlines() == ["refused Operation not permitted", "42"]


def test_without_a_filter_the_reason_says_so_and_strict_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "_SECCOMP", "pyseccomp/libseccomp unavailable (test); no built-in filter")
    result = run_code("print('ran')")
    assert result.ok, result.reason
    assert result.protections["seccomp"] == ""
    assert "[sandbox incomplete: " in result.reason
    assert "unix sockets: no seccomp filter (pyseccomp/libseccomp unavailable (test)" in result.reason
    refused = run_code("print('ran')", strict=True)
    assert refused.status == "setup_error"
    assert refused.stdout == ""
    assert "strict: refusing to run untrusted code without full isolation" in refused.reason
    assert "unix sockets: no seccomp filter" in refused.reason
    messages = [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "```python\nprint('hi')\n```"},
    ]
    lenient = local_code_execution_reward(messages=messages, ground_truth="hi")
    assert lenient.score == 1.0
    assert "unix sockets: no seccomp filter" in lenient.reason
    strict = local_code_execution_reward(messages=messages, ground_truth="hi", strict=True)
    assert strict.score == 0.0
    assert not strict.is_score_valid
    assert "strict: refusing to run untrusted code without full isolation" in strict.reason
