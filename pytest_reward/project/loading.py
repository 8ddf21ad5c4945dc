"""A user's project on disk, without pytest: importing reward modules under unique names, walking its files the
way pytest does, and recognising what the plugin itself wrote (deploy bundles, report directories) so that it is
never collected or bundled again. Used by discovery, deploy bundles, the server and executor workers."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

from ..errors import DiscoveryError

__all__ = [
    "BUNDLE_FORMAT",
    "import_reward_module",
    "is_within",
    "package_base",
    "walk_files",
    "written_by_plugin",
]


def is_within(path: Path, parent: Path) -> bool:
    try:
        path.relative_to(parent)
    except ValueError:
        return False
    return True


# --- what the plugin wrote ------------------------------------------------------------------------------------

#: The ``format`` of a deploy bundle's ``manifest.json`` (``pytest_reward.deploy.runtime`` reads bundles by it).
BUNDLE_FORMAT = "pytest-reward-bundle"
#: Every JSON file the plugin writes names its ``format`` with this prefix (bundles: ``manifest.json``; reports:
#: ``summary.json``); a directory holding such a file is the plugin's output.
_FORMAT_PREFIX = "pytest-reward-"
_STAMPED = ("manifest.json", "summary.json")
_STAMP_LIMIT = 64 * 1024 * 1024


def _stamped(directory: Path) -> bool:
    for name in _STAMPED:
        path = directory / name
        try:
            if not path.is_file() or path.stat().st_size > _STAMP_LIMIT:
                continue
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and str(data.get("format", "")).startswith(_FORMAT_PREFIX):
            return True
    return False


def written_by_plugin(
    directory: Path, owned: Iterable[Path | None] = (), rootdir: Path | None = None
) -> bool:
    """Whether ``directory`` is something the plugin wrote, never to be collected or bundled again.

    * A deploy bundle or its package, and a report directory: they hold a ``manifest.json`` / ``summary.json``
      whose ``format`` is ``pytest-reward-*``. They are recognised wherever they are, whichever run wrote them: a
      bundle deployed with ``dir:deploy`` stays out of the runs that deploy elsewhere.
    * One of the ``owned`` directories of this run (the storage directory of stored runs, the report directory). An
      owned directory that is the ``rootdir`` or holds it is not skipped: that would skip everything.

    A ``dir:`` deploy target is recognised by the bundles inside it, not by name: a target that also holds the
    project's own files (``dir:tests``) keeps them collected."""
    if _stamped(directory):
        return True
    resolved = None
    for path in owned:
        if path is None:
            continue
        resolved = resolved or directory.resolve()
        owned_dir = path.resolve()
        if resolved == owned_dir and (rootdir is None or not is_within(rootdir.resolve(), owned_dir)):
            return True
    return False


# --- walking ----------------------------------------------------------------------------------------------


def _in_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta" / "history").is_file()


def walk_files(
    roots: Iterable[Path],
    norecursedirs: Sequence[str],
    owned: Sequence[Path] = (),
    rootdir: Path | None = None,
) -> Iterator[Path]:
    """Files under ``roots`` in sorted order, pruning like pytest does (``norecursedirs``, virtualenvs) and never
    entering what the plugin wrote (:func:`written_by_plugin`: deploy bundles, ``owned`` directories)."""
    seen: set[Path] = set()

    def walk(directory: Path) -> Iterator[Path]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        subdirs = []
        for entry in entries:
            try:
                if entry.is_dir():
                    subdirs.append(entry)
                elif entry.is_file():
                    yield Path(entry.path)
            except OSError:
                continue
        for entry in subdirs:
            if entry.name == "__pycache__" or any(fnmatch.fnmatch(entry.name, pat) for pat in norecursedirs):
                continue
            sub = Path(entry.path)
            if _in_venv(sub) or written_by_plugin(sub, owned, rootdir):
                continue
            yield from walk(sub)

    for root in roots:
        root = root.resolve()
        if root in seen:
            continue
        seen.add(root)
        if root.is_file():
            yield root
        elif root.is_dir():
            yield from walk(root)


# --- importing --------------------------------------------------------------------------------------------


def _dotted_name(path: Path, root: Path) -> str:
    try:
        rel = path.resolve().relative_to(root.resolve())
        parts = list(rel.with_suffix("").parts)
    except ValueError:
        parts = ["_pytest_reward_ext", *path.resolve().with_suffix("").parts[-2:]]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(p if p.isidentifier() else "".join(c if c.isalnum() else "_" for c in p) for p in parts)


def package_base(path: Path) -> Path:
    """The first directory upwards that is not a regular package (what pytest's prepend mode puts on sys.path)."""
    directory = path.parent
    while (directory / "__init__.py").is_file():
        directory = directory.parent
    return directory


def import_reward_module(path: Path, root: Path, importmode: str) -> ModuleType:
    """Import a reward module (not a test module) under a unique dotted name; sibling imports keep working."""
    path = path.resolve()
    name = _dotted_name(path, root)
    existing = sys.modules.get(name)
    if (
        existing is not None
        and getattr(existing, "__file__", None)
        and Path(existing.__file__).resolve() == path
    ):
        return existing
    base = str(package_base(path))
    if importmode != "importlib" and base not in sys.path:
        if importmode == "append":
            sys.path.append(base)
        else:
            sys.path.insert(0, base)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DiscoveryError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
