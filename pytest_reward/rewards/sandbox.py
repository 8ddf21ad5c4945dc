"""Run untrusted code (model output) in a subprocess with limits. Linux only.

``run_code(code, language="python", stdin="", limits=Limits())`` returns an ``ExecutionResult`` and never raises
for anything the program does. Each run:

* gets a fresh temporary working directory (``HOME`` and ``TMPDIR`` too), removed afterwards;
* starts in a new session with a minimal environment (``PATH``, ``LANG``, ``HOME``, ``TMPDIR`` and a few
  thread-count variables): nothing of the caller's environment, so no API keys or tokens;
* runs under ``_sandbox_launcher.py``, which puts it in new network/PID/mount/IPC namespaces (directly as root,
  in a user namespace otherwise), applies rlimits (CPU seconds, address space, file size, open files, process
  count, no core dumps), switches to an unprivileged uid of its own when started as root, sets
  ``no_new_privs`` and applies a Landlock ruleset (writes only below the working directory; reads only below
  system directories, the interpreter, the caller's ``sys.path`` and the working directory; no TCP; no signals
  or abstract unix sockets outside the sandbox where the kernel supports those);
* has a wall-clock deadline: on expiry the whole process group is killed (and with the PID namespace, every
  process the program started, even ones that called ``setsid``);
* has its stdout + stderr capped: past ``max_output_bytes`` the program is killed and the result says so.

What is and is not protected against is written down in ``docs/rewards.md`` ("Sandbox security model").
``sandbox_protections()`` reports what this machine actually provides.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import selectors
import shutil
import signal
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
    require_isolation: bool = False
    """Fail (``setup_error``) instead of running when the network/PID namespaces or Landlock are unavailable."""


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


_SYSTEM_READ_PATHS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/dev",
                      "/sys/devices/system/cpu", "/sys/fs/cgroup")  # fmt: skip


def _read_paths(executable: str) -> list[str]:
    """Where a sandboxed program may read: system directories, its interpreter and the caller's sys.path."""
    paths = set(_SYSTEM_READ_PATHS) | set(_exposed_paths(executable))
    paths |= {os.path.realpath(p) for p in sys.path if p and os.path.isabs(p) and os.path.exists(p)}
    return sorted(paths)


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
) -> ExecutionResult:
    """Run ``code`` in the sandbox, feeding it ``stdin``. Never raises for anything the program does.

    ``python``: the interpreter for Python code (default: this one, so the program sees the same installed
    packages). ``files``: extra files to write into the working directory first (name → text).
    """
    limits = limits or Limits()
    program = _program(language, limits, python)
    if isinstance(program, str):
        return ExecutionResult(status="unsupported", reason=program)
    argv, filename = program
    workdir = tempfile.mkdtemp(prefix="pytest-reward-sbx-")
    uid = _sandbox_uid()
    try:
        return _run_in(workdir, uid, code, filename, argv, stdin, limits, files or {})
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
        "require_isolation": limits.require_isolation,
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
        if proc.stdin and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass


_PROTECTIONS: dict[str, Any] | None = None
_PROTECTIONS_LOCK = threading.Lock()


def sandbox_protections() -> dict[str, Any]:
    """What the sandbox provides on this machine (probed once): namespaces entered, whether ``/proc`` is the
    sandbox's own, the uid programs run as (``None``: the caller's), the Landlock ABI (0: none)."""
    global _PROTECTIONS
    with _PROTECTIONS_LOCK:
        if _PROTECTIONS is None:
            probe = run_code("pass", limits=replace(Limits(), timeout=30))
            _PROTECTIONS = dict(probe.protections) or {"namespaces": [], "landlock_abi": 0, "uid": None}
            _PROTECTIONS["running_as_root"] = os.geteuid() == 0
        return dict(_PROTECTIONS)
