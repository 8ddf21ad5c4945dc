"""An unprivileged user for the sandbox's tests: ``nobody`` when the runner is root (a private mount namespace makes
the interpreter under ``/root`` reachable, then the process drops to ``nobody`` for good), otherwise the runner
itself; with a home, a ``$XDG_RUNTIME_DIR`` and a directory below ``/var/run`` of its own. ``User.run`` runs a
scenario script as that user and returns the JSON of its last line of output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest_reward
from pytest_reward.rewards import sandbox

NOBODY = 65534
REPO = Path(pytest_reward.__file__).resolve().parents[1]

# Run as root: new mount namespace, the interpreter and the project made reachable (the launcher's own
# ``_expose``: an empty tmpfs over a directory like /root with just those paths bound back), then drop to the
# unprivileged uid for good and exec the scenario.
DROP_PRIVILEGES = r"""
import ctypes, json, os, sys
cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["launcher_dir"])
import _sandbox_launcher as launcher
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
if libc.unshare(launcher.CLONE_NEWNS) != 0:
    raise OSError(ctypes.get_errno(), "cannot make a mount namespace")
if libc.mount(None, b"/", None, launcher.MS_REC | launcher.MS_PRIVATE, None) != 0:
    raise OSError(ctypes.get_errno(), "cannot make a private mount namespace")
launcher._expose(cfg["expose"])
os.setgroups([])
os.setgid(cfg["uid"])
os.setuid(cfg["uid"])
os.execve(sys.executable, [sys.executable, *cfg["argv"]], os.environ)
"""

@dataclass
class User:
    """An unprivileged user with a home, a ``$XDG_RUNTIME_DIR`` and a directory of its own below ``/var/run``."""

    uid: int
    home: Path
    runtime_dir: Path
    var_run: Path
    tmp: Path

    def run(self, scenario: str, **cfg: object) -> dict:
        script = self.tmp / f"scenario-{uuid.uuid4().hex}.py"
        script.write_text(scenario)
        script.chmod(0o644)
        argv = [str(script), json.dumps(cfg)]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8",
               "XDG_RUNTIME_DIR": str(self.runtime_dir)}  # fmt: skip
        if os.geteuid() == 0:
            # the package directory, not the checkout: a checkout only root may enter (a clone in `mktemp -d`,
            # mode 0700) is itself the directory the tmpfs covers, so only paths below it can be bound back
            drop = {"launcher_dir": str(Path(sandbox.__file__).parent), "uid": self.uid, "argv": argv,
                    "expose": sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
                                      str(REPO / "pytest_reward")})}  # fmt: skip
            command = [sys.executable, "-I", "-c", DROP_PRIVILEGES, json.dumps(drop)]
        else:
            command = [sys.executable, *argv]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout.splitlines()[-1])


@contextmanager
def unprivileged_user() -> Iterator[User]:
    """``nobody`` when the runner is root (directories created for it), otherwise the runner itself."""
    made: list[Path] = []

    def directory(parent: str, prefix: str, uid: int) -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        made.append(path)
        os.chown(path, uid, uid)
        path.chmod(0o700)
        return path

    try:
        if os.geteuid() == 0:
            uid = NOBODY
            os.makedirs("/run/user", mode=0o755, exist_ok=True)
            runtime = directory("/run/user", f"{uid}-pytest-reward-", uid)
            var_run = directory("/var/run", "pytest-reward-", uid)
        else:
            uid = os.getuid()
            # Directories of the test's own inside the real ones: never the user's real sockets.
            runtime = directory(os.environ.get("XDG_RUNTIME_DIR") or "/tmp", "pytest-reward-xdg-", uid)
            var_run = directory(os.path.join("/var/run/user", str(uid)), "pytest-reward-", uid)
        home = directory("/tmp", "pytest-reward-home-", uid)
        tmp = directory("/tmp", "pytest-reward-sock-", uid)
        tmp.chmod(0o755)  # the scenario scripts are read by the user's interpreter
        yield User(uid, home, runtime, var_run, tmp)
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
