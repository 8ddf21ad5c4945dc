"""Atomic file writes: readers see the old file or the new one, never half of one.

Write to a temporary file in the destination's directory, flush and fsync it, then ``os.replace`` it over the
destination (atomic on POSIX and Windows within one filesystem). On any error the temporary file is removed and
the destination is left untouched.

A set of files (a report directory) is written the same way, one level up: into a staging directory beside the
target, which then takes the target's place in one step (:func:`replace_directory`: Linux ``renameat2`` with
``RENAME_EXCHANGE`` swaps the two; elsewhere, two renames, whose one gap — a kill between them — the next write
repairs). Leftovers of killed writers are removed by the next writer (:func:`clean_leftovers`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "TEXT_ERRORS",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "clean_leftovers",
    "pid_alive",
    "remove_dead_owners",
    "replace_directory",
    "staging_directory",
]

#: How every text file and terminal line the plugin writes encodes what UTF-8 cannot (a lone surrogate, such as
#: the JSON escape ``"\ud83d"`` decodes to): as a backslash escape, which inside a JSON string is the same escape.
TEXT_ERRORS = "backslashreplace"


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; it replaces ``path`` when the block exits cleanly."""
    if mode not in ("w", "wb"):
        raise ValueError("atomic_open writes whole files: mode must be 'w' or 'wb'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "w":
        kwargs.setdefault("encoding", "utf-8")
        kwargs.setdefault("errors", TEXT_ERRORS)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


# --- a directory as one set of files ----------------------------------------------------------------------------

_STAGING, _OLD = "staging", "old"


def _sibling(target: Path, kind: str) -> Path:
    return target.parent / f".{target.name}.{kind}-{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_owners(directory: Path, prefix: str) -> None:
    """Remove the directories ``<prefix><pid>-*`` in ``directory`` (this user's) whose owning process is gone: what
    runs ended by SIGKILL or ``os._exit`` left behind, which nothing else would ever remove."""
    for path in directory.glob(f"{prefix}*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
            continue
        try:
            if not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)


def clean_leftovers(target: Path) -> None:
    """Remove what killed writers of ``target`` left beside it; if one was killed between the two renames of the
    fallback swap (no ``target``, its previous version parked beside it), put the previous version back."""
    for kind in (_OLD, _STAGING):
        for path in sorted(target.parent.glob(f".{target.name}.{kind}-*")):
            pid = path.name.rsplit("-", 1)[-1]
            if not pid.isdigit() or (pid_alive(int(pid)) and int(pid) != os.getpid()):
                continue
            if kind == _OLD and not target.exists():
                os.rename(path, target)  # the previous complete set, back in place
            else:
                shutil.rmtree(path, ignore_errors=True)


def staging_directory(target: Path) -> Path:
    """A new empty directory beside ``target`` (same filesystem) to write the next set into."""
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(target)
    staging = _sibling(target, _STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: this filesystem or kernel cannot exchange
        return False
    raise OSError(errno, os.strerror(errno), str(b))


def replace_directory(staging: Path, target: Path) -> None:
    """Put the complete set in ``staging`` at ``target`` in one step: a reader (or a kill at any moment) finds the
    previous set or the new one, never a mix."""
    for path in staging.iterdir():  # the set is on disk before it becomes visible
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
    if not target.exists():
        os.rename(staging, target)
        return
    if _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now the previous set
        return
    old = _sibling(target, _OLD)
    os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
