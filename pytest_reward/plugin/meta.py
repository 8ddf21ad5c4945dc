"""Facts about a run recorded with its results: versions, platform, time, git commit."""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["git_commit", "run_meta"]


def git_commit(directory: Path) -> dict[str, Any] | None:
    """``{"id", "short", "branch", "dirty"}`` of the git checkout containing ``directory``, or None."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=directory, capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "id": commit,
        "short": commit[:10],
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(status),
    }


def run_meta(rootdir: Path, args: list[str], seed: int) -> dict[str, Any]:
    import pytest

    from .. import __version__

    return {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "plugin_version": __version__,
        "pytest_version": pytest.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": sys.executable,
        "commit": git_commit(rootdir),
        "seed": seed,
        "args": list(args),
    }
