"""jax is only imported with ``pytest_reward.jax``: not by the package, the plugin, or the Evaluation API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _engine_modules(code: str) -> list[str]:
    """The jax and ``pytest_reward.jax`` modules a fresh interpreter has loaded after running ``code``."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'jax' or m.startswith('pytest_reward.jax'))))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_package_and_plugin_do_not_import_jax():
    assert _engine_modules("import pytest_reward") == []
    assert _engine_modules("import pytest_reward.plugin") == []


def test_the_evaluation_api_does_not_import_jax():
    """Every public name of ``pytest_reward.evaluation``, and defining an evaluation, without the engine."""
    code = """
from pytest_reward.evaluation import *
from pytest_reward.evaluation import RolloutEvaluation, __all__

class Sums(RolloutEvaluation):
    name = "sums"
    def __len__(self): return 1
    def get(self, i): return "1+1=", "2"
    def max_new_tokens(self, inference): return 4
    def check(self, y, y_hat): return y == y_hat

assert len(__all__) >= 12 and len(Sums()) == 1
"""
    assert _engine_modules(code) == []


def test_the_jax_subpackage_does():
    modules = _engine_modules("import pytest_reward.jax")
    assert "jax" in modules and "pytest_reward.jax.inference" in modules
    assert "jax" in _engine_modules("import pytest_reward.jax.evaluation")  # the alias lives in the engine
