"""What ``pytest-reward serve`` serves: reward functions loaded from a bundle or a module, each with its calling
convention (:class:`pytest_reward.reward.call.Reward`), weight and metric keys, plus what ``/health`` and ``/manifest``
report.

``BUNDLE_OR_MODULE`` is a bundle directory, its package directory or its ``.tar.gz`` (through
:func:`pytest_reward.deploy.runtime.load_bundle`), a ``.py`` file, or ``package.module[:function]``. Anything that
cannot be served is a :class:`~pytest_reward.errors.ServeError` with a one-line reason.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import BundleError, ServeError
from ...project.functions import functions_in
from ...project.loading import import_reward_module, package_base
from ...reward.call import Reward
from ...reward.decorator import is_reward_function
from ..runtime import load_bundle

__all__ = ["ServedFunction", "ServedRewards", "load_target"]

_IMPORT_SPEC = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_.]*)?$")


@dataclass(frozen=True)
class ServedFunction:
    """One served reward function: how it is called, its weight in the combined score, and the metrics its
    OpenRLHF and slime rows carry as ``<name>/<metric>``."""

    name: str
    reward: Reward
    weight: float = 1.0
    metrics: tuple[str, ...] = ()

    @property
    def is_async(self) -> bool:
        return self.reward.is_async

    @property
    def mode(self) -> str:
        return self.reward.spec.mode


@dataclass
class ServedRewards:
    """Reward functions loaded from a bundle or a module, with what ``/health`` and ``/manifest`` report."""

    kind: str  # "bundle" or "module"
    name: str
    version: str | None
    content_hash: str | None
    manifest: dict[str, Any]
    functions: dict[str, ServedFunction]
    location: str
    """What to load again in a worker process (an extracted bundle directory, a file, an import string)."""


def _served(
    name: str, obj: Any, weight: float = 1.0, metrics: tuple[str, ...] | list[str] = ()
) -> ServedFunction:
    return ServedFunction(name, Reward(obj, name=name), float(weight), tuple(metrics))


def _select(
    functions: dict[str, ServedFunction], function: str | None, where: str
) -> dict[str, ServedFunction]:
    if not functions:
        raise ServeError(f"{where}: no reward functions found (decorate them with @reward_function)")
    if function is None:
        return functions
    if function not in functions:
        raise ServeError(
            f"{where}: no reward function named {function!r} (there are: {', '.join(functions)})"
        )
    return {function: functions[function]}


def _bundle_target(path: Path, function: str | None) -> ServedRewards:
    try:
        bundle = load_bundle(path)
    except BundleError as exc:
        raise ServeError(f"bad bundle: {exc}") from None
    except Exception as exc:
        raise ServeError(f"bad bundle: {path}: {type(exc).__name__}: {exc}") from None
    manifest = bundle.manifest
    metric_keys = bundle.metric_keys()
    try:
        functions = {
            name: _served(name, obj, bundle.weights.get(name, 1.0), metric_keys.get(name, ()))
            for name, obj in bundle.functions.items()
        }
    except (ValueError, TypeError) as exc:
        raise ServeError(f"bad bundle: {path}: {exc}") from None
    bundle_info = manifest.get("bundle") if isinstance(manifest.get("bundle"), dict) else {}
    version = manifest.get("bundle_version") or bundle_info.get("version") or manifest.get("release")
    content_hash = manifest.get("content_hash") or bundle_info.get("content_hash")
    return ServedRewards(
        kind="bundle",
        name=bundle.name,
        version=None if version is None else str(version),
        content_hash=None if content_hash is None else str(content_hash),
        manifest=manifest,
        functions=_select(functions, function, str(path)),
        location=str(bundle.root),
    )


def _module_target(module: Any, attr: str | None, function: str | None, location: str) -> ServedRewards:
    where = getattr(module, "__name__", location)
    if attr is not None:
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        if obj is None or not is_reward_function(obj):
            raise ServeError(
                f"{where}: {attr!r} is not a reward function (decorate it with @reward_function)"
            )
        found = [(attr.rsplit(".", 1)[-1], obj)]
    else:
        found = functions_in(module)
    functions: dict[str, ServedFunction] = {}
    try:
        for attr_name, obj in found:
            name = getattr(getattr(obj, "__reward_spec__", None), "id", None) or attr_name
            functions[name] = _served(name, obj)
    except (ValueError, TypeError) as exc:
        raise ServeError(f"{where}: {exc}") from None
    functions = _select(functions, function, where)
    source = Path(getattr(module, "__file__", "") or "")
    digest = hashlib.sha256(source.read_bytes()).hexdigest() if source.is_file() else None
    manifest = {
        "format": "pytest-reward-module",
        "generated": True,
        "name": where,
        "version": None,
        "content_hash": digest,
        "source": str(source) if source.is_file() else None,
        "functions": [
            {"name": f.name, "module": where, "weight": f.weight, "mode": f.mode, "async": f.is_async}
            for f in functions.values()
        ],
    }
    return ServedRewards("module", where, None, digest, manifest, functions, location)


def load_target(spec: str, function: str | None = None) -> ServedRewards:
    """Load what ``pytest-reward serve`` serves; ``ServeError`` with a one-line reason otherwise."""
    path = Path(spec)
    if path.exists():
        if path.is_dir() or path.name.endswith((".tar.gz", ".tgz")):
            return _bundle_target(path, function)
        if path.suffix != ".py":
            raise ServeError(f"{spec}: not a bundle directory, a .tar.gz bundle or a .py file")
        resolved = path.resolve()
        try:
            module = import_reward_module(resolved, package_base(resolved), "prepend")
        except Exception as exc:
            raise ServeError(f"{spec}: cannot import: {type(exc).__name__}: {exc}") from None
        return _module_target(module, None, function, str(resolved))
    if not _IMPORT_SPEC.match(spec):
        raise ServeError(f"{spec}: no such file, and not a package.module[:function] name")
    module_name, _, attr = spec.partition(":")
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ServeError(f"{spec}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    return _module_target(module, attr or None, function, spec)
