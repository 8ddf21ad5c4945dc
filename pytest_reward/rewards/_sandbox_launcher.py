"""Sandbox launcher: runs as ``python -I -S -B _sandbox_launcher.py CONFIG_JSON`` and then becomes the program.

Stdlib only, imported by nothing: ``sandbox.py`` starts it in a new session with a minimal environment. In order:

1. new namespaces: network (nothing but a down loopback), PID (the program is PID 1 of its own namespace, so
   every process it starts dies with it), mount (a fresh ``/proc`` that shows only the sandbox), IPC and UTS.
   As root directly; otherwise inside a new user namespace. Each is best effort and reported;
2. fork: this process stays outside and waits; the child is the sandbox's init (PID 1 of the new namespace);
3. in the init: rlimits (CPU, address space, file size, open files, core dumps), then, when started as root,
   a switch to an unprivileged uid/gid of its own (so ``RLIMIT_NPROC`` applies and nothing root-owned is
   writable), ``PR_SET_NO_NEW_PRIVS``, ``PR_SET_PDEATHSIG`` and a Landlock ruleset that allows writes only below
   the working directory (and to ``/dev/null``), reads only below the system directories, the interpreter's
   installation and the working directory (when the parent passes ``read_paths``), denies TCP bind/connect
   and, where the kernel supports it, signals and abstract unix sockets outside the sandbox; then the seccomp
   filter the parent built (``seccomp``: a BPF program, base64) that refuses unix sockets. With ``strict`` the
   init refuses to go on when any boundary lacks its mechanism (``_gaps``);
4. the init forks the program (so the program is an ordinary process, not a namespace init that ignores
   default-action signals), ``execve``s it with the environment this launcher was given, waits for it and
   reports its wait status. When the init exits, the kernel kills whatever is left in the PID namespace.

Status lines on the status fd: ``protections <json>`` once set up (``gaps`` in it lists each boundary left without
its mechanism on this host), ``setup-error <text>`` if the program could not be started, ``exit <wait status>``
when it ends.
"""

import base64
import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8

PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_SET_NO_NEW_PRIVS = 38

# keyctl(2): the syscall number by machine, and joining a new anonymous session keyring.
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
KEYCTL_JOIN_SESSION_KEYRING = 1
# What a program may open below /dev: the four character devices programs read or write, nothing else (no
# terminals: /dev/pts/N would hand it what the user types). /dev/shm is a private tmpfs of the sandbox's own.
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on x86_64 and aarch64.
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_ALL = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _errno_text() -> str:
    return os.strerror(ctypes.get_errno())


def _unshare(flags: int) -> bool:
    return _libc.unshare(ctypes.c_int(flags)) == 0


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _enter_namespaces(as_root: bool) -> tuple[list[str], str]:
    """Unshare what this kernel and these privileges allow; return the names of the namespaces entered and, when
    some are missing, why."""
    wanted = [("net", CLONE_NEWNET), ("pid", CLONE_NEWPID), ("mnt", CLONE_NEWNS), ("ipc", CLONE_NEWIPC)]
    if not as_root:
        uid, gid = os.getuid(), os.getgid()
        if not _unshare(CLONE_NEWUSER):
            return [], f"no user namespace: unshare(CLONE_NEWUSER): {_errno_text()}"
        try:  # map ourselves to ourselves, so files we create keep our uid
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError:
            pass
        entered = ["user"]
    else:
        entered = []
    all_flags = sum(flag for _, flag in wanted) | CLONE_NEWUTS
    if _unshare(all_flags):
        return [*entered, *(name for name, _ in wanted), "uts"], ""
    why = f"unshare: {_errno_text()}"
    for name, flag in wanted:  # fall back one at a time
        if _unshare(flag):
            entered.append(name)
    return entered, why


def _mount_fresh_proc() -> bool:
    mount = _libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    return mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0


def _private_shm() -> bool:
    """An empty tmpfs of the sandbox's own over ``/dev/shm`` (in our private mount namespace): the program gets
    working POSIX shared memory and semaphores, and never sees the user's."""
    mount = _libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if not os.path.isdir("/dev/shm"):
        return False
    options = b"mode=1777,size=64m"
    return mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) == 0


def _hide_key_lists() -> bool:
    """``/proc/keys`` and ``/proc/key-users`` list the descriptions of keys the uid may view (principal names,
    token labels): bind ``/dev/null`` over both in the sandbox's own ``/proc``."""
    mount = _libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    hidden = True
    for path in (b"/proc/keys", b"/proc/key-users"):
        if os.path.exists(path) and mount(b"/dev/null", path, None, MS_BIND, None) != 0:
            hidden = False
    return hidden


def _fresh_session_keyring() -> bool:
    """Leave the caller's session keyring (API tokens stored with keyctl, Kerberos caches) for a new, empty one."""
    if SYS_KEYCTL is None:
        return False
    return _libc.syscall(SYS_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None) >= 0


def _blocking_ancestor(path: str) -> str | None:
    """The first ancestor directory of ``path`` that other users cannot traverse (e.g. ``/root``), if any."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        ancestor = "/" + "/".join(parts[:i])
        try:
            if not os.stat(ancestor).st_mode & 0o001:
                return ancestor
        except OSError:
            return None
    return None


def _expose(paths: list[str]) -> list[str]:
    """Make ``paths`` reachable for an unprivileged uid inside our private mount namespace.

    An interpreter installed below a directory only root may enter (pyenv under ``/root``) would be unusable
    after the uid switch. For each such directory: keep a handle on the needed paths, mount an empty tmpfs over
    the directory (which also hides the rest of it, e.g. ``/root/.ssh``), recreate the needed paths and bind
    them back read-only. Returns the paths exposed.
    """
    mount = _libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    by_ancestor: dict[str, list[str]] = {}
    for path in paths:
        ancestor = _blocking_ancestor(path)
        if ancestor is not None and os.path.exists(path):
            by_ancestor.setdefault(ancestor, []).append(path)
    exposed = []
    for ancestor, needed in by_ancestor.items():
        handles = [(p, os.open(p, os.O_PATH)) for p in needed]
        try:
            if mount(b"tmpfs", ancestor.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m") != 0:
                continue
            for path, fd in handles:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(path, mode=0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                    open(path, "a").close()
                target = path.encode()
                if mount(f"/proc/self/fd/{fd}".encode(), target, None, MS_BIND | MS_REC, None) == 0:
                    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
                    exposed.append(path)
        finally:
            for _, fd in handles:
                os.close(fd)
    return exposed


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(workdir: str, read_paths: list[str] | None, shm: bool = False) -> int:
    """Restrict writes to ``workdir`` and, with ``shm``, the private ``/dev/shm`` (and reads, with ``read_paths``,
    to those paths and ``workdir``); deny TCP; return the Landlock ABI used (0: not available)."""
    abi = _libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION
    )
    if abi < 1:
        return 0
    write = FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_ALL
    if abi >= 2:
        write |= FS_REFER
    if abi >= 3:
        write |= FS_TRUNCATE
    read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR if read_paths is not None else 0
    fs = write | read
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)  # fmt: skip
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return 0
    file_rights = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
    try:
        rules = [(workdir, fs), ("/dev/null", (FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)) | read)]
        if shm:
            rules.append(("/dev/shm", fs))
        rules += [(path, read) for path in read_paths or ()]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a read path that does not exist on this system
            try:
                if not os.path.isdir(f"/proc/self/fd/{fd}"):
                    access &= file_rights
                rule = _PathBeneathAttr(access & fs, fd)
                if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH,
                                 ctypes.byref(rule), 0) != 0:  # fmt: skip
                    return 0
            finally:
                os.close(fd)
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            return 0
        return abi
    finally:
        os.close(ruleset)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp(program: bytes) -> str:
    """Install a seccomp BPF program (an array of 8-byte ``struct sock_filter``) on this process and, through
    fork and exec, on everything it starts. Needs ``no_new_privs``. Returns ``""`` or why it failed."""
    if not program or len(program) % 8:
        return "no filter program"
    code = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(code, ctypes.c_void_p))
    if _libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                   ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:  # fmt: skip
        return f"prctl(PR_SET_SECCOMP): {_errno_text()}"
    return ""


def _gaps(protections: dict, cfg: dict) -> list[str]:
    """Each boundary of the threat model (``sandbox.py``'s docstring) that this run leaves without its mechanism,
    named with what is missing. Empty: full isolation. Memory, time and environment are always held (rlimits,
    the deadline, the minimal environment), so they never appear."""
    namespaces, abi = set(protections["namespaces"]), protections["landlock_abi"]
    why_ns = f" ({protections['namespace_error']})" if protections.get("namespace_error") else ""
    seccomp = bool(protections.get("seccomp"))
    gaps = []
    if "net" not in namespaces:
        reachable = (
            "UDP and DNS reachable, TCP denied by Landlock"
            if abi >= 4
            else (f"TCP, UDP and DNS reachable (Landlock ABI {abi} < 4 has no TCP rule)")
        )
        gaps.append(f"network: no network namespace{why_ns}: {reachable}")
    if not seccomp:
        gaps.append(f"unix sockets: no seccomp filter ({protections.get('seccomp_error') or 'none built'}): "
                    "the user's pathname unix sockets are reachable")  # fmt: skip
        if "net" not in namespaces and abi < 6:
            gaps.append(
                f"abstract unix sockets: no network namespace, no seccomp filter, Landlock ABI {abi} < 6"
            )
    if "pid" not in namespaces or not protections.get("fresh_proc"):
        outlive = "" if protections.get("uid") is not None else " and a daemonised child may outlive the run"
        gaps.append(f"processes: no PID namespace with its own /proc{why_ns}: the host's processes are "
                    f"visible{outlive}")  # fmt: skip
        if protections.get("uid") is None and abi < 6:
            gaps.append(
                f"signals: same uid as the caller and Landlock ABI {abi} < 6: the caller can be signalled"
            )
    if not seccomp and not (protections.get("fresh_keyring") and protections.get("uid") is not None):
        keyring = "a fresh session keyring" if protections.get("fresh_keyring") else "no fresh session keyring"
        gaps.append(f"keyrings: no seccomp filter and {keyring}: the caller's keys are reachable with keyctl")
    if not abi:
        gaps.append("files: no Landlock (kernel < 5.13 or disabled): reads and writes are not confined")
    elif cfg.get("read_paths") is None:
        gaps.append("files: reads are not restricted (Limits(restrict_reads=False))")
    return gaps


class _Refused(Exception):
    """A strict run that the host cannot isolate fully."""


def _count_processes(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _set_limits(cfg: dict) -> None:
    def limit(which: int, value: int | None) -> None:
        if value is not None:
            value = int(value)
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                _soft, hard = resource.getrlimit(which)
                if hard == resource.RLIM_INFINITY or value <= hard:
                    resource.setrlimit(which, (value, hard))

    limit(resource.RLIMIT_CPU, cfg["cpu_seconds"])
    if cfg.get("memory_bytes"):
        limit(resource.RLIMIT_AS, cfg["memory_bytes"])
    limit(resource.RLIMIT_FSIZE, cfg["file_size_bytes"])
    limit(resource.RLIMIT_NOFILE, cfg["open_files"])
    limit(resource.RLIMIT_CORE, 0)


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return -1


def _close_stdio() -> None:
    for fd in (0, 1, 2):
        try:
            os.close(fd)
        except OSError:
            pass


def _init(cfg: dict, status_fd: int, protections: dict) -> None:
    """The sandbox's init (PID 1 of the new PID namespace when there is one): set up, start the program, wait
    for it, report its wait status. When this process exits the kernel kills everything left in the namespace.
    Never returns."""
    try:
        if "mnt" in protections["namespaces"] and "pid" in protections["namespaces"]:
            protections["fresh_proc"] = _mount_fresh_proc()
        if "mnt" in protections["namespaces"]:
            protections["private_shm"] = _private_shm()
            if protections["fresh_proc"]:
                protections["key_lists_hidden"] = _hide_key_lists()
        if cfg.get("uid") is not None and "mnt" in protections["namespaces"]:
            protections["exposed"] = _expose(cfg.get("expose", []))
        _set_limits(cfg)
        uid = cfg.get("uid")
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            protections["uid"] = uid
        protections["fresh_keyring"] = _fresh_session_keyring()
        nproc = int(cfg["processes"])
        if uid is None:  # RLIMIT_NPROC counts every process of the uid: leave room for the ones that exist
            nproc += _count_processes(os.getuid())
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        protections["landlock_abi"] = _landlock(
            cfg["workdir"], cfg.get("read_paths"), shm=bool(protections.get("private_shm"))
        )
        protections["reads_restricted"] = (
            bool(protections["landlock_abi"]) and cfg.get("read_paths") is not None
        )
        if cfg.get("seccomp"):
            protections["seccomp_error"] = _seccomp(base64.b64decode(cfg["seccomp"]))
            protections["seccomp"] = "" if protections["seccomp_error"] else cfg["seccomp_source"]
        else:
            protections["seccomp_error"] = cfg.get("seccomp_missing") or "no filter for this machine"
        protections["gaps"] = _gaps(protections, cfg)
        if cfg.get("strict") and protections["gaps"]:
            raise _Refused("strict: refusing to run untrusted code without full isolation: "
                           + "; ".join(protections["gaps"]))  # fmt: skip
        pid = os.fork()
    except BaseException as exc:  # report any setup failure to the parent, then exit
        why = str(exc) if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
        try:
            os.write(status_fd, f"setup-error {why}\n".encode())
        finally:
            os._exit(126)
    if pid == 0:  # the program
        try:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.write(status_fd, f"protections {json.dumps(protections)}\n".encode())
            os.set_inheritable(status_fd, False)  # closed by a successful exec, still ours if it fails
            os.execve(cfg["argv"][0], cfg["argv"], os.environ)
        except BaseException as exc:
            try:
                os.write(status_fd, f"setup-error cannot start {cfg['argv'][0]}: {exc}\n".encode())
            finally:
                os._exit(126)
    _close_stdio()
    status = _wait(pid)
    os.write(status_fd, f"exit {status}\n".encode())
    os._exit(0)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    status_fd = int(cfg["status_fd"])
    as_root = os.geteuid() == 0
    namespaces, namespace_error = _enter_namespaces(as_root)
    protections = {"namespaces": namespaces, "namespace_error": namespace_error, "fresh_proc": False,
                   "uid": None, "landlock_abi": 0, "seccomp": ""}  # fmt: skip
    try:
        pid = os.fork()
    except OSError as exc:
        os.write(status_fd, f"setup-error fork failed: {exc}\n".encode())
        os._exit(126)
    if pid == 0:
        _init(cfg, status_fd, protections)
    # Outside the namespaces: wait for the sandbox's init, so the parent's process group holds it until the end.
    # SIGTERM from the parent means "stop now": kill the init (and with it the PID namespace), reap it, exit.
    signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(pid, signal.SIGKILL))
    _close_stdio()
    os.close(status_fd)
    _wait(pid)
    os._exit(0)


if __name__ == "__main__":
    main()
