"""Atomic file writes: readers see the old file or the new one, never half of one.

Write to a temporary file in the destination's directory, flush and fsync it, then ``os.replace`` it over the
destination (atomic on POSIX and Windows within one filesystem). On any error the temporary file is removed and
the destination is left untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "atomic_write_bytes", "atomic_write_text"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; it replaces ``path`` when the block exits cleanly."""
    if mode not in ("w", "wb"):
        raise ValueError("atomic_open writes whole files: mode must be 'w' or 'wb'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "w":
        kwargs.setdefault("encoding", "utf-8")
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
