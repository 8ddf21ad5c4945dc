"""The layered package keeps what users and shipped bundles rely on: every module path of the flat layout still
imports (the very same module object), and a bundle built before the move loads and scores."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

# The flat layout's module paths (0.1.0), and where each module lives now.
OLD_PATHS = {
    "pytest_reward.api": "pytest_reward.reward.decorator",
    "pytest_reward.aggregate": "pytest_reward.run.fold",
    "pytest_reward.baseline": "pytest_reward.run.baseline",
    "pytest_reward.call": "pytest_reward.reward.call",
    "pytest_reward.chat": "pytest_reward.reward.chat",
    "pytest_reward.collect": "pytest_reward.plugin.collect",
    "pytest_reward.controller": "pytest_reward.plugin.controller",
    "pytest_reward.decorator": "pytest_reward.reward.decorator",
    "pytest_reward.deploy.api": "pytest_reward.plugin.deploy_function",
    "pytest_reward.deploy.flow": "pytest_reward.plugin.deploy",
    "pytest_reward.discovery": "pytest_reward.plugin.discovery",
    "pytest_reward.executors": "pytest_reward.scoring.executors",
    "pytest_reward.executors.process": "pytest_reward.scoring.executors.process",
    "pytest_reward.executors.ray_cluster": "pytest_reward.scoring.executors.ray_cluster",
    "pytest_reward.executors.worker": "pytest_reward.scoring.executors.worker",
    "pytest_reward.failure": "pytest_reward.plugin.failure",
    "pytest_reward.fixtures": "pytest_reward.plugin.fixtures",
    "pytest_reward.hookspecs": "pytest_reward.plugin.hookspecs",
    "pytest_reward.items": "pytest_reward.plugin.items",
    "pytest_reward.jax.evaluation": "pytest_reward.evaluation",
    "pytest_reward.meta": "pytest_reward.plugin.meta",
    "pytest_reward.models": "pytest_reward.reward.models",
    "pytest_reward.options": "pytest_reward.plugin.options",
    "pytest_reward.outputs": "pytest_reward.report.outputs",
    "pytest_reward.probe_items": "pytest_reward.plugin.probe_items",
    "pytest_reward.pytest_private": "pytest_reward.plugin.pytest_private",
    "pytest_reward.results": "pytest_reward.judge.results",
    "pytest_reward.rollouts": "pytest_reward.scoring.rollouts",
    "pytest_reward.samples": "pytest_reward.data.samples",
    "pytest_reward.session": "pytest_reward.plugin.session",
    "pytest_reward.sources": "pytest_reward.data.sources",
    "pytest_reward.spec": "pytest_reward.reward.spec",
    "pytest_reward.stats": "pytest_reward.judge.stats",
    "pytest_reward.styles": "pytest_reward.trainers.styles",
    "pytest_reward.thresholds": "pytest_reward.judge.gates",
    "pytest_reward.wire": "pytest_reward.judge.wire",
}

# Modules that were modules and are packages now: their old names import from the package.
OLD_NAMES = {
    "pytest_reward.run": ["RunResult", "GroupResult", "ProbeResult", "ProbeExample"],
    "pytest_reward.scoring": ["Invoker", "DaemonPool", "merge_runs", "error_outcome"],
    "pytest_reward.probes": ["parse_rule", "passes", "ProbeRegistry", "ProbeSample", "probe", "DEFAULT_PROBES"],
    "pytest_reward.plugin": ["pytest_configure", "pytest_addoption", "inference_job"],
}

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_module_path_is_the_module_at_its_new_home(old: str) -> None:
    if old.startswith(("pytest_reward.jax", "pytest_reward.executors.ray_cluster")):
        pytest.importorskip("jax" if "jax" in old else "ray")
    assert importlib.import_module(old) is importlib.import_module(OLD_PATHS[old])


@pytest.mark.parametrize("module", sorted(OLD_NAMES))
def test_names_of_modules_that_became_packages(module: str) -> None:
    imported = importlib.import_module(module)
    for name in OLD_NAMES[module]:
        assert getattr(imported, name) is not None


def test_old_paths_import_in_a_fresh_interpreter_without_loading_twice() -> None:
    """``from pytest_reward.decorator import ...`` as the first import of a process: one module object under both
    names, its own spec kept, and no second copy of a moved package's submodules under the old name."""
    code = (
        "import sys\n"
        "from pytest_reward.decorator import reward_function\n"
        "import pytest_reward.executors.worker as old\n"
        "import pytest_reward.scoring.executors.worker as new\n"
        "import pytest_reward.reward.decorator as d\n"
        "assert old is new and d.reward_function is reward_function\n"
        "assert d.__spec__.name == 'pytest_reward.reward.decorator', d.__spec__.name\n"
        "copies = [n for n, m in sys.modules.items() if n.startswith('pytest_reward')\n"
        "          and getattr(m, '__name__', n) != n and sys.modules.get(m.__name__) is not m]\n"
        "assert not copies, copies\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


def test_a_bundle_built_before_the_layout_loads_and_scores(tmp_path: Path) -> None:
    """A deploy bundle built by 0.1.0 with the flat layout (its adapters import ``pytest_reward.deploy.adapters``
    and ``pytest_reward.deploy.runtime``), extracted somewhere else and scored through its verl and TRL adapters in
    a fresh interpreter."""
    with tarfile.open(DATA / "bundle-0.1.0-before-layout.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(bundle)!r})\n"
        "import rewards_oldbundle.verl as verl, rewards_oldbundle.trl as trl\n"
        "conversation = {'messages': [{'role': 'user', 'content': '2+2?'}]}\n"
        "right = verl.compute_score('d', '4', '4', conversation)\n"
        "wrong = verl.compute_score('d', '5', '4', conversation)\n"
        "prompts = [[{'role': 'user', 'content': '2+2?'}]] * 2\n"
        "completions = [[{'role': 'assistant', 'content': '4'}], [{'role': 'assistant', 'content': '3'}]]\n"
        "batch = trl.REWARD_FUNCS[0](prompts=prompts, completions=completions, ground_truth=['4', '4'])\n"
        "print(json.dumps({'right': right['score'], 'wrong': wrong['score'], 'trl': batch}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"right": 1.0, "wrong": 0.0, "trl": [1.0, 0.0]}
