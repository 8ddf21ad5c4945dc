"""The last step of building a bundle: import it in a fresh interpreter, as a trainer would, before it ships.

A bundle that imports in the test session can still fail where it is used: a reward module the session found through
the project's ``sys.path`` (``pythonpath = .``, the current directory, a symlink out of the project) may not be in the
bundle. So the deploy step runs a new ``python`` (``sys.executable``) that knows nothing of the project:

* its working directory is an empty temporary directory, ``PYTHONSAFEPATH=1`` keeps it off ``sys.path``, and the
  ``PYTHONPATH`` entries inside the project (or relative, which point into it when pytest runs there) are dropped;
  installed packages and ``PYTHONPATH`` entries outside the project stay, as they would in the trainer's environment;
* it imports the bundle package (every frozen file is checked against its sha256 and every reward function is
  imported from the frozen copy, ``runtime.load_package``), ``<name>.trl`` and ``<name>.slime`` as TRL and slime
  import them, and ``verl.py`` and ``openrlhf_reward.py`` by file path as verl and OpenRLHF load them;
* it reports where each reward function's module came from: a module that is not frozen must not come from the
  project (it would be missing wherever the project is not).

Anything else is a ``BundleError`` with the interpreter's last lines: the deploy fails and ships nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import BundleError

__all__ = ["IMPORT_TIMEOUT", "check_imports"]

#: Seconds the fresh interpreter may take to import the bundle (reward modules may import large libraries).
IMPORT_TIMEOUT = 300.0

_SCRIPT = r"""
import importlib, importlib.util, json, os, sys
bundle_dir, name = sys.argv[1], sys.argv[2]
sys.path.insert(0, bundle_dir)
package = importlib.import_module(name)
for adapter in ("trl", "slime"):
    importlib.import_module(name + "." + adapter)
for stem, attr in (("verl", "compute_score"), ("openrlhf_reward", "reward_func")):
    path = os.path.join(bundle_dir, name, stem + ".py")
    spec = importlib.util.spec_from_file_location("pytest_reward_check_" + stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, attr, None)):
        raise SystemExit(path + ": no callable " + attr)
modules = {}
for fn_name, fn in package.FUNCTIONS.items():
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    modules[fn_name] = getattr(module, "__file__", None)
print("PYTEST_REWARD_CHECK " + json.dumps({"package": package.__file__, "modules": modules}))
"""


def _environment(rootdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    root = rootdir.resolve()
    kept = []
    for entry in env.get("PYTHONPATH", "").split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        path = Path(entry).resolve()
        if path != root and root not in path.parents:
            kept.append(entry)
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    env["PYTHONSAFEPATH"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the checked directory is the one that ships
    env.pop("PYTHONSTARTUP", None)
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def check_imports(bundle_dir: Path, name: str, manifest: dict, rootdir: Path) -> None:
    """Import the bundle at ``bundle_dir`` (``<name>-<version>/``) in a fresh interpreter; ``BundleError`` with the
    reason when it does not import, or when a reward module it imports is one the bundle lacks."""
    with tempfile.TemporaryDirectory(prefix="pytest-reward-check-") as cwd:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _SCRIPT, str(bundle_dir.resolve()), name],
                cwd=cwd,
                env=_environment(rootdir),
                capture_output=True,
                text=True,
                timeout=IMPORT_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise BundleError(
                f"the bundle did not import in a fresh interpreter within {IMPORT_TIMEOUT:g} s"
            ) from None
    reports = [line for line in proc.stdout.splitlines() if line.startswith("PYTEST_REWARD_CHECK ")]
    if proc.returncode != 0 or not reports:
        raise BundleError(
            "the bundle does not import in a fresh interpreter (as a trainer loads it): "
            + (_last_line(proc.stderr) or _last_line(proc.stdout) or f"exit status {proc.returncode}")
        )
    report = json.loads(reports[-1].split(" ", 1)[1])
    root = rootdir.resolve()
    sources = {f["name"]: f.get("source") for f in manifest.get("functions", [])}
    for fn_name, file in report["modules"].items():
        if sources.get(fn_name) or not file:
            continue  # frozen: runtime.load_package checked it came from the bundle
        path = Path(file).resolve()
        if path == root or root in path.parents:
            raise BundleError(
                f"{fn_name}: its module was imported from the project ({path}), not from the bundle; "
                "the bundle would not import where the project is not"
            )
