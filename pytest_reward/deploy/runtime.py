"""Loading a reward bundle (the importable package ``pytest --reward-deploy`` writes).

Layout of a bundle directory ``<name>-<version>/``::

    requirements.txt              ``pip install -r`` it: the functions' requirements and the pinned runtime below
    wheels/pytest_reward-<v>.whl  the pytest-reward that ran the tests (``deploy.wheel``)
    manifest.json                 (a copy, for tools that do not import the package)
    <name>/                       the importable package
        __init__.py               MANIFEST, FUNCTIONS {name: callable}, WEIGHTS {name: float}
        manifest.json             functions, entry points, requirements, test evidence, file hashes
        src/...                   frozen copies of the project's reward modules and the local modules they import
        trl.py verl.py openrlhf_reward.py slime.py serve.py __main__.py     generated adapters

``load_bundle`` accepts the bundle directory, its package directory, or the ``.tar.gz`` (extracted with
:func:`extract_tarball` to a temporary directory that is removed when the interpreter exits; the reward server
extracts into a directory it removes itself on every exit, signals included).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import json
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BundleError
from ..project.loading import BUNDLE_FORMAT

__all__ = [
    "BUNDLE_FORMAT",
    "BundleError",
    "LoadedBundle",
    "extract_tarball",
    "is_tarball",
    "load_bundle",
    "load_package",
]

BUNDLE_VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


@dataclass
class LoadedBundle:
    name: str
    root: Path
    """The directory to put on ``sys.path`` (it contains the package directory)."""
    manifest: dict[str, Any]
    functions: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)

    def metric_keys(self) -> dict[str, list[str]]:
        return {f["name"]: list(f.get("metrics", [])) for f in self.manifest.get("functions", [])}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _inside(base: Path, relative: str) -> Path:
    if relative.startswith(("/", "\\")) or ".." in Path(relative).parts:
        raise BundleError(f"{base}: manifest path {relative!r} leaves the bundle")
    path = (base / relative).resolve()
    if not str(path).startswith(str(base.resolve())):
        raise BundleError(f"{base}: manifest path {relative!r} leaves the bundle")
    return path


def read_manifest(package_dir: Path) -> dict[str, Any]:
    path = package_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{package_dir}: no manifest.json (not a pytest-reward bundle)") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path}: unreadable manifest ({exc})") from None
    if manifest.get("format") != BUNDLE_FORMAT or manifest.get("version") != BUNDLE_VERSION:
        raise BundleError(f"{path}: not a version-{BUNDLE_VERSION} pytest-reward bundle manifest")
    if not NAME_RE.match(str(manifest.get("name", ""))):
        raise BundleError(f"{path}: invalid bundle name {manifest.get('name')!r}")
    return manifest


def verify_files(package_dir: Path, manifest: dict[str, Any]) -> None:
    """Check every file listed in the manifest against its sha256 (tampering or a broken copy)."""
    for relative, digest in manifest.get("files", {}).items():
        path = _inside(package_dir, relative)
        if not path.is_file():
            raise BundleError(f"{package_dir}: {relative} is missing")
        if _sha256(path) != digest:
            raise BundleError(f"{package_dir}: {relative} does not match its sha256 in manifest.json")


def load_package(
    init_file: str | Path, *, verify: bool = True
) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
    """Called by a bundle's ``__init__``: put its sources on ``sys.path`` and import its reward functions."""
    package_dir = Path(init_file).resolve().parent
    manifest = read_manifest(package_dir)
    if verify:
        verify_files(package_dir, manifest)
    for relative in manifest.get("sys_path", []):
        entry = str(_inside(package_dir, relative))
        if entry not in sys.path:
            sys.path.insert(0, entry)
    from ..reward.decorator import is_reward_function

    functions: dict[str, Any] = {}
    weights: dict[str, float] = {}
    for entry in manifest.get("functions", []):
        try:
            module = importlib.import_module(entry["module"])
        except Exception as exc:
            raise BundleError(
                f"{package_dir}: cannot import {entry['module']} for {entry['name']}: {type(exc).__name__}: {exc}"
            ) from exc
        obj: Any = module
        for part in entry["attr"].split("."):
            obj = getattr(obj, part, None)
        if obj is None or not is_reward_function(obj):
            raise BundleError(f"{package_dir}: {entry['module']}:{entry['attr']} is not a reward function")
        if entry.get("source"):
            expected = _inside(package_dir, entry["source"])
            actual = Path(getattr(module, "__file__", "") or "").resolve()
            if actual != expected:
                raise BundleError(
                    f"{package_dir}: {entry['module']} was imported from {actual}, not from the bundle's frozen copy "
                    f"{expected} (another module of that name is already imported)"
                )
        functions[entry["name"]] = obj
        weights[entry["name"]] = float(entry.get("weight", 1.0))
    return manifest, functions, weights


def _package_dir(path: Path) -> Path:
    if (path / "manifest.json").is_file() and (path / "__init__.py").is_file():
        return path
    # a bundle directory (<name>-<version>/<name>/) or an extracted tarball (<tmp>/<name>-<version>/<name>/)
    candidates = [
        p.parent
        for pattern in ("*/manifest.json", "*/*/manifest.json")
        for p in path.glob(pattern)
        if (p.parent / "__init__.py").is_file()
    ]
    if len(candidates) != 1:
        raise BundleError(
            f"{path}: expected one bundle package inside (a directory with manifest.json and __init__.py)"
        )
    return candidates[0]


def is_tarball(path: Path) -> bool:
    return path.is_file() and path.name.endswith((".tar.gz", ".tgz"))


def extract_tarball(path: Path, target: Path) -> Path:
    """Extract a bundle's ``.tar.gz`` into the directory ``target`` with tarfile's ``data`` filter (no absolute
    paths, no ``..``, no links out, no devices); returns ``target``."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            tar.extractall(target, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"{path}: cannot extract ({exc})") from None
    return target


def load_bundle(path: str | Path, *, verify: bool = True) -> LoadedBundle:
    """Load a bundle directory, its package directory, or its ``.tar.gz`` (extracted to a temporary directory that
    is removed at interpreter exit)."""
    path = Path(path)
    if is_tarball(path):
        target = Path(tempfile.mkdtemp(prefix="pytest-reward-bundle-"))
        atexit.register(shutil.rmtree, target, ignore_errors=True)
        path = extract_tarball(path, target)
    if not path.is_dir():
        raise BundleError(f"{path}: not a bundle directory or .tar.gz")
    package_dir = _package_dir(path.resolve())
    root = package_dir.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    name = package_dir.name
    manifest = read_manifest(package_dir)
    if manifest["name"] != name:
        raise BundleError(
            f"{package_dir}: directory name does not match the manifest's bundle name {manifest['name']!r}"
        )
    try:
        package = importlib.import_module(name)
    except BundleError:
        raise
    except Exception as exc:
        raise BundleError(
            f"{package_dir}: cannot import the bundle package: {type(exc).__name__}: {exc}"
        ) from exc
    if Path(package.__file__).resolve().parent != package_dir:
        raise BundleError(
            f"{package_dir}: another package named {name!r} is already imported from {package.__file__}"
        )
    return LoadedBundle(name, root, package.MANIFEST, dict(package.FUNCTIONS), dict(package.WEIGHTS))
