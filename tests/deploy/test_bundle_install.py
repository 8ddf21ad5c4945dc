"""A bundle installs on a trainer node: ``pip install -r requirements.txt`` in a new virtualenv, without a package
index, then the trainer adapters score in that virtualenv.

The node is simulated offline: the bundle is copied away from the project; pip reads no configuration and no index
(``PIP_CONFIG_FILE=/dev/null``, ``--no-index``), so pytest-reward can only come from the wheel the bundle carries.
Its third-party dependencies (pytest, pydantic, numpy, rich, ...) are this environment's installed distributions,
linked into one directory that the new virtualenv has on its path (a ``.pth`` file): pip sees them installed, as it
would on a node that already has them, and pytest-reward is not among them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .conftest import BUNDLE_NAME

pytestmark = pytest.mark.timeout(600)


def runtime_dependencies(wheel: Path) -> list[importlib.metadata.Distribution]:
    """The installed distributions the wheel needs, transitively (extras left out)."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    pending = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    found: dict[str, importlib.metadata.Distribution] = {}
    while pending:
        requirement = Requirement(pending.pop())
        name = canonicalize_name(requirement.name)
        if name in found or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        assert name != "pytest-reward"
        dist = importlib.metadata.distribution(name)
        found[name] = dist
        pending.extend(dist.requires or [])
    return list(found.values())


def link_site(dists: list[importlib.metadata.Distribution], directory: Path) -> None:
    """Every top-level file and directory of ``dists`` (their modules and .dist-info) linked into ``directory``."""
    directory.mkdir()
    for dist in dists:
        base = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops - {"..", "__pycache__"}:
            if (base / top).exists() and not (directory / top).exists():
                (directory / top).symlink_to(base / top)


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{' '.join(command)}\n{out.stdout}\n{out.stderr}"
    return out.stdout


SCORE = """
    import importlib.metadata, importlib.util, json, sys
    import pytest_reward

    bundle = sys.argv[1]
    sys.path.insert(0, bundle)
    from served_rewards import trl

    spec = importlib.util.spec_from_file_location("verl_reward", bundle + "/served_rewards/verl.py")
    verl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verl)
    # verl's NaiveRewardManager: the response text, the ground truth, extra_info with the prompt
    extra = {"messages": [{"role": "user", "content": "2+2?"}], "num_turns": 2, "rollout_reward_scores": {}}
    verl_scores = [verl.compute_score(data_source="d", solution_str=r, ground_truth="4", extra_info=extra) for r in ("4", "five")]
    # TRL's GRPOTrainer: conversational prompts and completions, every column a list, trainer objects
    trl_scores = [
        f(
            prompts=[[{"role": "user", "content": "2+2?"}]] * 2,
            completions=[[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "five"}]],
            completion_ids=[[1], [2]],
            ground_truth=["4", "4"],
            trainer_state=object(),
            log_extra=lambda column, values: None,
            log_metric=lambda name, value: None,
        )
        for f in trl.REWARD_FUNCS
    ]
    print("RESULT " + json.dumps({
        "module": pytest_reward.__file__,
        "version": importlib.metadata.version("pytest-reward"),
        "verl": verl_scores,
        "trl": [trl.REWARD_FUNCS[i].__name__ for i in range(len(trl_scores))],
        "trl_scores": trl_scores,
    }))
"""


def test_a_bundle_installs_offline_in_a_new_virtualenv_and_scores_there(built_bundle, tmp_path):
    manifest = json.loads((built_bundle / BUNDLE_NAME / "manifest.json").read_text())
    runtime = manifest["runtime"]
    node = tmp_path / "node"  # away from the project
    bundle = node / built_bundle.name
    shutil.copytree(built_bundle, bundle)
    wheel = bundle / runtime["wheel"]

    env = offline_env()
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, env)
    link_site(runtime_dependencies(wheel), tmp_path / "deps")
    (Path(purelib.strip()) / "node_deps.pth").write_text(str(tmp_path / "deps") + "\n")
    absent = run(
        [python, "-c", "import importlib.util; print(importlib.util.find_spec('pytest_reward'))"], node, env
    )
    assert absent.strip() == "None"

    # from another directory: pip reads --find-links ./wheels relative to the file
    run([python, "-m", "pip", "install", "-r", str(bundle / "requirements.txt")], tmp_path, env)

    out = run([python, "-c", textwrap.dedent(SCORE), str(bundle)], node, env)
    result = json.loads(out.splitlines()[-1].removeprefix("RESULT "))
    assert result["module"].startswith(purelib.strip())  # installed from the bundle's wheel
    assert result["version"] == runtime["version"]
    # exact (weight 1) and length (weight 1): "4" -> exact 1, length 0.1; "five" -> exact 0, length 0.4
    assert [s["score"] for s in result["verl"]] == [pytest.approx(0.55), pytest.approx(0.2)]
    assert result["trl"] == ["exact", "length"]
    assert result["trl_scores"] == [[1.0, 0.0], [pytest.approx(0.1), pytest.approx(0.4)]]


def test_the_runtime_wheel_is_reproducible_and_small(tmp_path):
    from pytest_reward.deploy.wheel import runtime_wheel

    first, second = runtime_wheel(), runtime_wheel()
    assert (first.sha256, first.data) == (second.sha256, second.data)
    (tmp_path / first.filename).write_bytes(first.data)
    with zipfile.ZipFile(tmp_path / first.filename) as archive:
        names = archive.namelist()
        metadata = archive.read(f"pytest_reward-{first.version}.dist-info/METADATA").decode()
        points = archive.read(f"pytest_reward-{first.version}.dist-info/entry_points.txt").decode()
    assert "pytest_reward/deploy/adapters.py" in names and "pytest_reward/py.typed" in names
    assert not [n for n in names if "__pycache__" in n or n.startswith("pytest_reward/jax/models/")]
    hard = [
        line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert hard and not [line for line in hard if "jax" in line]
    assert "[pytest11]\nreward = pytest_reward.plugin" in points
    assert len(first.data) < 1 << 20


def test_the_projects_own_pytest_reward_line_gives_way_to_the_carried_build(tmp_path):
    from pytest_reward.deploy.bundle import BundleSpec, _requirements
    from pytest_reward.deploy.wheel import RuntimeWheel

    (tmp_path / "requirements.txt").write_text(
        "pytest-reward>=0.1\nPytest_Reward[serve]==0.0.9\npytest-reward-extras\nregex\n"
    )
    runtime = RuntimeWheel("pytest_reward-0.1.0+abc-py3-none-any.whl", "0.1.0+abc", "0" * 64, b"")
    spec = BundleSpec(name="b", functions=[], rootdir=tmp_path)
    assert _requirements(spec, runtime) == [
        "pytest-reward-extras",
        "regex",
        "pytest-reward[serve]==0.1.0+abc",
    ]
