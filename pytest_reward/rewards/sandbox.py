"""Run untrusted code (model output) in a subprocess with limits. Linux only.

``run_code(code, language="python", stdin="", limits=Limits(), strict=False)`` returns an ``ExecutionResult``
and never raises for anything the program does. Each run gets a fresh working directory (also ``HOME`` and
``TMPDIR``, removed afterwards) and starts ``_sandbox_launcher.py``, which sets up the mechanisms below and then
becomes the program.

Threat model: each boundary, the mechanism that holds it, what it falls back to, and the test that proves it
(``S`` = tests/rewards/test_rewards_sandbox.py, ``U`` = tests/rewards/test_sandbox_unix_sockets.py,
``F`` = tests/rewards/test_sandbox_seccomp.py, ``D`` = tests/rewards/test_sandbox_devices_keyrings.py):

files
    Landlock: writes only below the working directory (and ``/dev/null``); reads only below system directories
    (``/usr``, ``/lib*``, ``/bin``, ``/sbin``, ``/etc``, ``/proc``, CPU/cgroup info in ``/sys``), the
    interpreter's installation, the caller's ``sys.path`` and the working directory. Started as root, the program
    also runs as an unprivileged uid of its own, and a root-only directory holding the interpreter (``/root``) is
    hidden behind an empty tmpfs with just the interpreter bound back read-only. Without Landlock: what the uid
    may touch. S::test_writing_outside_the_working_directory_is_denied,
    S::test_reading_private_files_outside_the_allowed_paths_is_denied
devices
    Below ``/dev`` Landlock allows only ``null``, ``zero``, ``random`` and ``urandom``: no terminal (``/dev/pts/N``,
    ``/dev/tty``: what the user types), no listing. ``/dev/shm`` is an empty tmpfs of the sandbox's own (POSIX
    shared memory and semaphores work; the user's files there are not visible); without a mount namespace the
    host's ``/dev/shm`` is denied instead. D::test_the_users_terminal_and_shared_memory_are_out_of_reach
keyrings
    Kernel keyrings are not namespaced. The seccomp filter refuses ``keyctl``, ``add_key`` and ``request_key``
    (search, read, revoke, plant: all EPERM), the launcher joins a fresh, empty session keyring, and
    ``/proc/keys`` and ``/proc/key-users`` read empty in the sandbox's ``/proc``.
    D::test_an_unprivileged_users_keyrings_are_out_of_reach, D::test_roots_keyrings_are_out_of_reach,
    F::test_both_compilers_refuse_unix_sockets_and_the_ways_around_them
network
    A new network namespace (only a down loopback) for TCP, UDP and DNS; Landlock also denies TCP bind/connect
    (ABI >= 4). S::test_no_network_access
unix sockets (pathname)
    A seccomp filter: ``socket(AF_UNIX, ...)`` and datagram ``socketpair(AF_UNIX, ...)`` fail with EPERM, so the
    program has no unix socket to ``connect()`` or ``sendto()`` the user's ssh agent, session bus or docker
    socket with; the ways around it (io_uring, ``pidfd_getfd``, ``ptrace``, ``process_vm_*``) fail too, and so
    does any call of another ABI (x32, i386: the process is killed). Stream and seqpacket socketpairs stay
    (asyncio, multiprocessing). Landlock cannot help (connecting is not a file access) and an empty tmpfs over
    ``/tmp``, ``/run`` and ``$XDG_RUNTIME_DIR`` would need a mount namespace, which an ordinary user only gets
    where user namespaces are allowed, and would leave sockets elsewhere (``~/.gnupg``, a project directory)
    reachable; seccomp needs neither, only a kernel with ``CONFIG_SECCOMP_FILTER`` (every distribution's since
    3.5). The filter is compiled by libseccomp through ``pyseccomp`` (the ``sandbox`` extra) or, without it, by
    ``_builtin_filter`` (x86_64 and aarch64; the same table of rules, the same decisions).
    U::test_unix_sockets_of_an_unprivileged_user_are_unreachable,
    U::test_a_world_connectable_socket_is_unreachable_from_the_runners_sandbox,
    F::test_both_compilers_refuse_unix_sockets_and_the_ways_around_them,
    F::test_x32_calls_are_killed_by_both_filters
unix sockets (abstract)
    The network namespace (abstract names belong to it), the seccomp filter, Landlock scoping (ABI >= 6).
    U::test_unix_sockets_of_an_unprivileged_user_are_unreachable
processes
    A new PID namespace with its own ``/proc``: the program runs under an init of its own and every process it
    starts (``setsid`` daemons too) dies with it; ``RLIMIT_NPROC``; ``PR_SET_NO_NEW_PRIVS``; signals cannot
    name the caller's processes (PID namespace; Landlock signal scoping, ABI >= 6; a uid of its own as root).
    S::test_sleeping_children_that_escape_the_session_are_killed_too,
    S::test_fork_bomb_is_bounded_and_the_session_survives, S::test_signals_cannot_reach_the_test_session
memory
    ``RLIMIT_AS`` (``Limits.memory_mb``; V8's heap size for JavaScript).
    S::test_memory_hog_is_stopped_with_a_memory_reason
time
    A wall-clock deadline (the process group and PID namespace are killed) and ``RLIMIT_CPU``.
    S::test_infinite_loop_is_killed_at_the_timeout
output
    stdout + stderr capped at ``Limits.max_output_bytes``. S::test_huge_output_is_capped_and_the_program_killed
environment
    A minimal environment (``PATH``, ``LANG``, ``HOME``, ``TMPDIR``, thread counts): nothing of the caller's,
    so no API keys; the caller's ``/proc/<pid>/environ`` is out of reach.
    S::test_environment_secrets_are_not_visible

Missing mechanisms. Each is best effort: a host without user namespaces (for an ordinary user), without
Landlock or with an old ABI, or without seccomp filters still runs the program, and the result's ``reason`` ends
with ``[sandbox incomplete: ...]`` naming each boundary left without its mechanism and why
(``protections["gaps"]``; ``sandbox_protections()`` reports this host's). ``strict=True`` (also a keyword of
the code-execution rewards) refuses instead: ``setup_error``, the reason listing the same gaps.
U::test_a_host_without_a_mechanism_is_named_and_strict_refuses (no user namespaces, no Landlock),
U::test_a_host_without_seccomp_is_named_and_strict_refuses, S::test_strict_runs_only_with_full_isolation.

Not protected against: kernel exploits (this is process isolation on the host kernel, not a VM), reading
world-readable files inside the read allowlist, CPU and memory contention between processes (no cgroup),
timing side channels. ``docs/rewards.md`` ("Sandbox security model") says more.
"""

from __future__ import annotations

import base64
import json
import math
import os
import platform
import secrets
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "ExecutionResult",
    "Limits",
    "node_available",
    "run_code",
    "sandbox_protections",
]

Status = Literal["ok", "error", "timeout", "memory", "cpu", "output_limit", "setup_error", "unsupported"]

INCOMPLETE = "[sandbox incomplete: "
"""How the note on a run without full isolation starts (``ExecutionResult.isolation_note``)."""
_LAUNCHER = str(Path(__file__).with_name("_sandbox_launcher.py"))
_SANDBOX_UID_BASE = 200_000  # uids 200000..1199999 are used for sandboxes started as root
_SANDBOX_UID_SPAN = 1_000_000


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    timeout: float = 5.0
    """Wall-clock seconds before the process group is killed."""
    memory_mb: int | None = 256
    """Address-space limit (``RLIMIT_AS``) in MiB. ``None``: no limit. For JavaScript it sets V8's heap size
    instead (V8 reserves far more address space than it uses)."""
    cpu_seconds: int | None = None
    """CPU-time limit per process; default: the timeout rounded up, plus one."""
    max_output_bytes: int = 1_000_000
    """Cap on stdout + stderr together; past it the program is killed."""
    max_processes: int = 32
    """``RLIMIT_NPROC``: processes (and threads) the program may have at once."""
    max_file_bytes: int = 16 * 1024 * 1024
    """``RLIMIT_FSIZE``: largest file the program may write."""
    max_open_files: int = 64
    restrict_reads: bool = True
    """Allow reads only below system directories (``/usr``, ``/etc``, ``/proc``...), the interpreter's
    installation, the caller's ``sys.path`` and the working directory, so a program cannot read e.g. ``~/.ssh``
    or the caller's project files outside ``sys.path`` (Landlock; without it reads are not restricted)."""


@dataclass
class ExecutionResult:
    """What happened to one sandboxed run."""

    status: Status
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    reason: str = ""
    duration: float = 0.0
    truncated: bool = False
    pid: int | None = None
    protections: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The program ran to completion and exited with status 0."""
        return self.status == "ok"

    @property
    def isolation_note(self) -> str:
        """``" [sandbox incomplete: ...]"``, naming each boundary this host left without its mechanism (see
        the module docstring), or ``""`` under full isolation. Ends ``reason``; rewards add it to theirs."""
        gaps = self.protections.get("gaps")
        return f" {INCOMPLETE}{'; '.join(gaps)}]" if gaps else ""


def node_available() -> str | None:
    """Path of the ``node`` executable, or ``None``."""
    return shutil.which("node")


_LANGUAGES = {"python": "python", "py": "python", "python3": "python", "javascript": "javascript", "js": "javascript",
              "node": "javascript"}  # fmt: skip


def _program(language: str, limits: Limits, python: str | None) -> tuple[list[str], str] | str:
    """argv and file name for ``language``, or an explanation of why it cannot run."""
    lang = _LANGUAGES.get(language.lower())
    if lang == "python":
        return [python or sys.executable, "-I", "-B", "main.py"], "main.py"
    if lang == "javascript":
        node = node_available()
        if node is None:
            return "JavaScript needs the 'node' executable, which is not on PATH"
        argv = [node]
        if limits.memory_mb:
            argv.append(f"--max-old-space-size={int(limits.memory_mb)}")
        return [*argv, "main.js"], "main.js"
    return f"Unsupported language: {language!r} (supported: python, javascript)"


def _environment(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NODE_OPTIONS": "",
    }


def _exposed_paths(executable: str) -> list[str]:
    """Directories the program's interpreter needs (made reachable when running as another uid)."""
    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    resolved = os.path.realpath(shutil.which(executable) or executable)
    paths.add(os.path.dirname(resolved))
    return sorted(paths)


_SYSTEM_READ_PATHS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc",
                      "/dev/null", "/dev/zero", "/dev/random", "/dev/urandom",
                      "/sys/devices/system/cpu", "/sys/fs/cgroup")  # fmt: skip
"""Below ``/dev`` only the four devices programs use: not ``/dev/pts`` or ``/dev/tty`` (what the user types), not
the host's ``/dev/shm`` (the launcher mounts a private one)."""


def _read_paths(executable: str) -> list[str]:
    """Where a sandboxed program may read: system directories, its interpreter and the caller's sys.path."""
    paths = set(_SYSTEM_READ_PATHS) | set(_exposed_paths(executable))
    paths |= {os.path.realpath(p) for p in sys.path if p and os.path.isabs(p) and os.path.exists(p)}
    return sorted(paths)


# The seccomp filter. One table of rules, compiled by libseccomp (``pyseccomp``, the optional ``sandbox`` extra)
# or, without it, by ``_builtin_filter`` for x86_64 and aarch64. A rule refuses its syscall with EPERM when every
# condition ``(argument index, mask, value)`` holds, comparing the argument's low 32 bits: the kernel reads these
# arguments as ``int``, so a caller setting the high bits must not slip past (libseccomp's 64-bit compare would
# let it).
_AF_UNIX = 1
_LOW32, _SOCK_TYPE_MASK = 0xFFFF_FFFF, 0xF
_SOCK_DGRAM, _SOCK_RAW = 2, 3  # AF_UNIX treats SOCK_RAW as SOCK_DGRAM
_SECCOMP_RULES: tuple[tuple[str, tuple[tuple[int, int, int], ...]], ...] = (
    # No unix socket of its own, so nothing to connect() to a path (or an abstract name) with.
    ("socket", ((0, _LOW32, _AF_UNIX),)),
    # A datagram end of a socketpair can still sendto() any path: refuse those (stream and seqpacket pairs, which
    # ignore addresses, stay: asyncio and multiprocessing use them).
    ("socketpair", ((0, _LOW32, _AF_UNIX), (1, _SOCK_TYPE_MASK, _SOCK_DGRAM))),
    ("socketpair", ((0, _LOW32, _AF_UNIX), (1, _SOCK_TYPE_MASK, _SOCK_RAW))),
    # Ways around socket(): io_uring creates and connects sockets itself (IORING_OP_SOCKET); a process outside the
    # sandbox could lend a connected socket (pidfd_getfd) or make the call for us (ptrace, process_vm_writev).
    ("io_uring_setup", ()), ("io_uring_enter", ()), ("io_uring_register", ()),
    ("pidfd_getfd", ()), ("ptrace", ()), ("process_vm_readv", ()), ("process_vm_writev", ()),
    # Kernel keyrings are not namespaced: the caller's session and user keyrings (API tokens, Kerberos caches,
    # filesystem keys) would be searchable, readable and revocable. Container runtimes refuse the same three.
    ("keyctl", ()), ("add_key", ()), ("request_key", ()),
)  # fmt: skip
_EPERM = 1
_SECCOMP_RET_KILL_PROCESS, _SECCOMP_RET_ERRNO, _SECCOMP_RET_ALLOW = 0x8000_0000, 0x0005_0000, 0x7FFF_0000

# For the built-in compiler: audit arch and syscall numbers (a test checks them against libseccomp's tables).
_BUILTIN_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000_003E, {"socket": 41, "socketpair": 53, "ptrace": 101, "process_vm_readv": 310,
                             "process_vm_writev": 311, "io_uring_setup": 425, "io_uring_enter": 426,
                             "io_uring_register": 427, "pidfd_getfd": 438, "add_key": 248, "request_key": 249,
                             "keyctl": 250}),
    "aarch64": (0xC000_00B7, {"socket": 198, "socketpair": 199, "ptrace": 117, "process_vm_readv": 270,
                              "process_vm_writev": 271, "io_uring_setup": 425, "io_uring_enter": 426,
                              "io_uring_register": 427, "pidfd_getfd": 438, "add_key": 217, "request_key": 218,
                              "keyctl": 219}),
}  # fmt: skip
_X32_SYSCALL_BIT = 0x4000_0000


def _libseccomp_filter() -> bytes:
    """``_SECCOMP_RULES`` compiled by libseccomp for this machine's architecture (other architectures, such as
    i386 calls from an x86_64 process, kill the process). Raises ``ImportError``/``OSError``/``RuntimeError``
    when ``pyseccomp`` or the ``libseccomp.so.2`` it loads is missing."""
    import pyseccomp  # the optional 'sandbox' extra: a ctypes binding of the system's libseccomp

    sfilter = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    sfilter.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)
    for name, conditions in _SECCOMP_RULES:
        args = [pyseccomp.Arg(index, pyseccomp.MASKED_EQ, mask, value) for index, mask, value in conditions]
        sfilter.add_rule(pyseccomp.ERRNO(_EPERM), name, *args)
    with tempfile.TemporaryFile() as out:
        sfilter.export_bpf(out)
        out.seek(0)
        return out.read()


def _builtin_filter(machine: str) -> bytes:
    """``_SECCOMP_RULES`` compiled to classic BPF by hand, for when libseccomp is not installed: the same
    decisions (a test runs both on the same calls), x86_64 and aarch64 only. ``ValueError`` for others.

    Reads ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4, argument ``i`` at ``16 + 8 i``, low word
    first on these little-endian machines). Every jump is forward: a rule's block ends in ``ret ERRNO`` and any
    failed test jumps past it to the next rule; the last instruction kills a call of another architecture.
    """
    if machine not in _BUILTIN_ARCHES:
        raise ValueError(f"no built-in seccomp filter for {machine}")
    audit_arch, numbers = _BUILTIN_ARCHES[machine]
    ld, jeq, jge, and_, ret = (
        0x20,
        0x15,
        0x35,
        0x54,
        0x06,
    )  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JGE, BPF_ALU|AND|K, RET
    # Instructions as (code, k, jump-if-true target, jump-if-false target); targets are "next", "kill" or "skip"
    # (past the end of the current rule's block), resolved to relative offsets below.
    blocks: list[list[tuple[int, int, str, str]]] = [[(ld, 4, "next", "next"), (jeq, audit_arch, "next", "kill"),
                                                      (ld, 0, "next", "next")]]  # fmt: skip
    if machine == "x86_64":  # x32 calls are the x86_64 numbers with bit 30 set
        blocks[0].append((jge, _X32_SYSCALL_BIT, "kill", "next"))
    for name, conditions in _SECCOMP_RULES:
        block = [(ld, 0, "next", "next"), (jeq, numbers[name], "next", "skip")]
        for index, mask, value in conditions:
            block.append((ld, 16 + 8 * index, "next", "next"))
            if mask != _LOW32:
                block.append((and_, mask, "next", "next"))
            block.append((jeq, value, "next", "skip"))
        block.append((ret, _SECCOMP_RET_ERRNO | _EPERM, "next", "next"))
        blocks.append(block)
    blocks.append(
        [(ret, _SECCOMP_RET_ALLOW, "next", "next"), (ret, _SECCOMP_RET_KILL_PROCESS, "next", "next")]
    )
    total = sum(len(block) for block in blocks)
    program, position = bytearray(), 0
    for block in blocks:
        block_end = position + len(block)
        for code, k, *targets in block:
            offsets = []
            for target in targets:
                to = {"next": position + 1, "skip": block_end, "kill": total - 1}[target]
                offsets.append(to - position - 1)
            program += struct.pack("=HBBI", code, offsets[0], offsets[1], k)
            position += 1
    return bytes(program)


_SECCOMP: tuple[str, bytes] | str | None = None
_SECCOMP_LOCK = threading.Lock()


def _seccomp_filter() -> tuple[str, bytes] | str:
    """The filter program and what compiled it (``"libseccomp"`` or ``"built-in BPF"``), or why there is none.
    Built once per process."""
    global _SECCOMP
    with _SECCOMP_LOCK:
        if _SECCOMP is None:
            try:
                _SECCOMP = "libseccomp", _libseccomp_filter()
            except (ImportError, OSError, RuntimeError, ValueError) as exc:
                why = f"pyseccomp/libseccomp unavailable ({type(exc).__name__}: {exc})"
                try:
                    _SECCOMP = "built-in BPF", _builtin_filter(platform.machine())
                except ValueError as builtin_exc:
                    _SECCOMP = f"{why}; {builtin_exc}"
        return _SECCOMP


def _sandbox_uid() -> int | None:
    """A fresh unprivileged uid for a run started as root (so its ``RLIMIT_NPROC`` count is its own)."""
    if os.geteuid() != 0:
        return None
    return _SANDBOX_UID_BASE + secrets.randbelow(_SANDBOX_UID_SPAN)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the run: ask the launcher to kill and reap the sandbox's init (so nothing is left as a zombie for the
    system to reap), then kill whatever is left in the process group and reap the launcher."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=2)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    _kill_group(proc.pid)
    proc.wait()


def _kill_uid(uid: int) -> None:
    """Kill every process running as ``uid`` (used when there was no PID namespace to do it for us)."""
    try:
        subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[], env={},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        pass


def _status_lines(data: bytes) -> dict[str, str]:
    lines: dict[str, str] = {}
    for raw in data.decode("utf-8", "replace").splitlines():
        key, _, value = raw.partition(" ")
        lines.setdefault(key, value)
    return lines


def _describe(result: ExecutionResult, limits: Limits, wait_status: int | None) -> None:
    """Fill in ``status``/``returncode``/``reason`` from the wait status and the program's stderr."""
    if wait_status is None or wait_status < 0:
        result.status, result.reason = "error", "the program's exit status is unknown"
        return
    tail = result.stderr[-4000:]
    if any(marker in tail for marker in _MEMORY_MARKERS):
        result.returncode = (
            -os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.WEXITSTATUS(wait_status)
        )
        result.status = "memory"
        result.reason = f"memory limit exceeded ({limits.memory_mb} MiB)"
        return
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        result.returncode = -sig
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        if sig in (signal.SIGXCPU, signal.SIGKILL) and _cpu_exhausted(result, limits):
            result.status = "cpu"
            result.reason = f"CPU time limit exceeded ({_cpu_limit(limits)} s)"
        else:
            result.status, result.reason = "error", f"killed by signal {name}"
        return
    code = os.WEXITSTATUS(wait_status)
    result.returncode = code
    if code == 0:
        result.status, result.reason = "ok", "exited with status 0"
        return
    last = next((line for line in reversed(tail.strip().splitlines()) if line.strip()), "")
    result.status = "error"
    result.reason = f"exited with status {code}" + (f": {last.strip()[:300]}" if last else "")


_MEMORY_MARKERS = ("MemoryError", "heap out of memory", "Cannot allocate memory", "std::bad_alloc")


def _cpu_limit(limits: Limits) -> int:
    return limits.cpu_seconds if limits.cpu_seconds is not None else math.ceil(limits.timeout) + 1


def _cpu_exhausted(result: ExecutionResult, limits: Limits) -> bool:
    return result.duration >= _cpu_limit(limits) * 0.9


def _rmtree(path: str) -> None:
    def onerror(func: Any, failed: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(failed) or failed, 0o700)
            os.chmod(failed, 0o700)
            func(failed)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def run_code(
    code: str,
    language: str = "python",
    stdin: str = "",
    limits: Limits | None = None,
    *,
    python: str | None = None,
    files: dict[str, str] | None = None,
    strict: bool = False,
) -> ExecutionResult:
    """Run ``code`` in the sandbox, feeding it ``stdin``. Never raises for anything the program does.

    ``python``: the interpreter for Python code (default: this one, so the program sees the same installed
    packages). ``files``: extra files to write into the working directory first (name → text). ``strict``:
    refuse to run (``setup_error``, the reason listing what is missing) unless every boundary of the threat
    model has its mechanism on this host; without it such a run goes ahead and its ``reason`` ends with
    ``[sandbox incomplete: ...]`` naming each missing mechanism.
    """
    limits = limits or Limits()
    program = _program(language, limits, python)
    if isinstance(program, str):
        return ExecutionResult(status="unsupported", reason=program)
    argv, filename = program
    workdir = tempfile.mkdtemp(prefix="pytest-reward-sbx-")
    uid = _sandbox_uid()
    try:
        return _run_in(workdir, uid, code, filename, argv, stdin, limits, files or {}, strict)
    finally:
        _rmtree(workdir)


def _run_in(
    workdir: str,
    uid: int | None,
    code: str,
    filename: str,
    argv: list[str],
    stdin: str,
    limits: Limits,
    files: dict[str, str],
    strict: bool,
) -> ExecutionResult:
    for name, text in {**files, filename: code}.items():
        target = Path(workdir, name)
        if target.resolve().parent != Path(workdir).resolve():
            return ExecutionResult(
                status="setup_error", reason=f"refusing to write {name!r} outside the sandbox"
            )
        target.write_text(text, encoding="utf-8")
    if uid is not None:
        for path in [workdir, *(str(Path(workdir, n)) for n in {**files, filename: ""})]:
            os.chown(path, uid, uid)
    os.chmod(workdir, 0o700)

    seccomp = _seccomp_filter()
    status_r, status_w = os.pipe()
    config = {
        "argv": [shutil.which(argv[0]) or argv[0], *argv[1:]],
        "workdir": workdir,
        "status_fd": status_w,
        "uid": uid,
        "cpu_seconds": _cpu_limit(limits),
        "memory_bytes": limits.memory_mb * 1024 * 1024
        if limits.memory_mb and filename == "main.py"
        else None,
        "file_size_bytes": limits.max_file_bytes,
        "open_files": limits.max_open_files,
        "processes": limits.max_processes,
        "strict": strict,
        "seccomp": base64.b64encode(seccomp[1]).decode() if isinstance(seccomp, tuple) else None,
        "seccomp_source": seccomp[0] if isinstance(seccomp, tuple) else None,
        "seccomp_missing": seccomp if isinstance(seccomp, str) else None,
        "expose": _exposed_paths(argv[0]) if uid is not None else [],
        "read_paths": _read_paths(argv[0]) if limits.restrict_reads else None,
    }
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", _LAUNCHER, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=_environment(workdir),
            start_new_session=True,
            pass_fds=(status_w,),
        )
    except OSError as exc:
        os.close(status_r)
        os.close(status_w)
        return ExecutionResult(status="setup_error", reason=f"cannot start the sandbox: {exc}")
    os.close(status_w)
    result = ExecutionResult(status="error", pid=proc.pid)
    killed_for: str | None = None
    out, err, status_data = bytearray(), bytearray(), bytearray()
    try:
        killed_for = _communicate(
            proc, stdin.encode("utf-8"), status_r, out, err, status_data, limits, started
        )
    finally:
        _stop(proc)
        os.close(status_r)
        result.duration = time.monotonic() - started
    lines = _status_lines(bytes(status_data))
    if "protections" in lines:
        result.protections = json.loads(lines["protections"])
    if uid is not None and "pid" not in result.protections.get("namespaces", []):
        _kill_uid(uid)
    result.stdout = out.decode("utf-8", "replace")
    result.stderr = err.decode("utf-8", "replace")
    result.truncated = killed_for == "output_limit"
    if "setup-error" in lines:
        result.status, result.reason = "setup_error", f"sandbox setup failed: {lines['setup-error']}"
    elif killed_for == "timeout":
        result.status, result.reason = "timeout", f"wall-clock timeout after {limits.timeout:g} s"
    elif killed_for == "output_limit":
        result.status = "output_limit"
        result.reason = f"output exceeded {limits.max_output_bytes} bytes; the program was killed"
    else:
        _describe(result, limits, int(lines["exit"]) if "exit" in lines else None)
    if result.status != "setup_error":
        result.reason += result.isolation_note
    return result


def _communicate(
    proc: subprocess.Popen[bytes],
    data: bytes,
    status_r: int,
    out: bytearray,
    err: bytearray,
    status_data: bytearray,
    limits: Limits,
    started: float,
) -> str | None:
    """Pump stdin/stdout/stderr/status until all close or a limit is hit. Returns the limit hit, if any."""
    assert proc.stdin and proc.stdout and proc.stderr
    deadline = started + limits.timeout
    sel = selectors.DefaultSelector()
    try:
        if data:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        sel.register(status_r, selectors.EVENT_READ, status_data)
        offset = 0
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in sel.select(min(remaining, 0.5)):
                if key.fileobj is proc.stdin:
                    try:
                        offset += os.write(proc.stdin.fileno(), data[offset : offset + 65536])
                    except (BrokenPipeError, OSError):
                        offset = len(data)
                    if offset >= len(data):
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is not status_data and len(out) + len(err) > limits.max_output_bytes:
                    excess = len(out) + len(err) - limits.max_output_bytes
                    del key.data[len(key.data) - excess :]
                    return "output_limit"
        return None
    finally:
        sel.close()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):  # every way out: EOF, a limit, the timeout
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except OSError:  # stdin with unwritten data and the program gone
                    pass


_PROTECTIONS: dict[str, Any] | None = None
_PROTECTIONS_LOCK = threading.Lock()


def sandbox_protections() -> dict[str, Any]:
    """What the sandbox provides on this machine (probed once): namespaces entered, whether ``/proc`` is the
    sandbox's own, the uid programs run as (``None``: the caller's), the Landlock ABI (0: none), the seccomp
    filter's compiler (``""``: none, ``seccomp_error`` says why) and ``gaps``, each boundary left without its
    mechanism (empty: full isolation, what ``strict=True`` requires)."""
    global _PROTECTIONS
    with _PROTECTIONS_LOCK:
        if _PROTECTIONS is None:
            probe = run_code("pass", limits=replace(Limits(), timeout=30))
            _PROTECTIONS = dict(probe.protections) or {
                "namespaces": [], "landlock_abi": 0, "uid": None, "seccomp": "",
                "gaps": [f"unknown: the probe run did not start ({probe.reason})"],
            }  # fmt: skip
            _PROTECTIONS["running_as_root"] = os.geteuid() == 0
        return dict(_PROTECTIONS)
