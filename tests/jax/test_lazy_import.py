"""jax is only imported with ``pytest_reward.jax``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _imports_jax(code: str) -> bool:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = f"{code}\nimport sys\nprint('jax' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1] == "True"


def test_package_and_plugin_do_not_import_jax():
    assert not _imports_jax("import pytest_reward")
    if importlib.util.find_spec("pytest_reward.plugin") is not None:
        assert not _imports_jax("import pytest_reward.plugin")


def test_the_jax_subpackage_does():
    assert _imports_jax("import pytest_reward.jax")
