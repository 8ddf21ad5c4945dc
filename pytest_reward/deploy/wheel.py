"""The pytest-reward runtime as a wheel, built from the files of the package this process imported, for a bundle to
carry: a trainer node installs exactly the code that ran the tests, from the bundle, without a package index.

* Built here with the standard library (no build backend, no network, so an editable install or a checkout on
  ``PYTHONPATH`` works as well as a regular one): every file of the package except ``__pycache__``, compiled files
  and the shipped example models (``jax/models/``: data for evaluations in a test session, megabytes no reward
  function needs).
* Metadata from the project's ``pyproject.toml`` when the package sits in its source tree, else from the installed
  distribution; runtime dependencies as declared (jax and the other extras stay extras).
* The version is the package's ``__version__`` with a local label of the files' hash (``0.1.0+3f2a9c1d4e5b``):
  pinned with ``==`` it can only be this build (package indexes refuse local versions), and ``==0.1.0`` elsewhere
  still accepts it.
* Reproducible: the same files give the same bytes (sorted entries, fixed times and modes).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import re
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .. import __version__
from ..errors import BundleError

__all__ = ["DISTRIBUTION", "RuntimeWheel", "describe", "runtime_wheel"]

DISTRIBUTION = "pytest-reward"
_PACKAGE = Path(__file__).resolve().parents[1]
_LEFT_OUT = ("jax/models/",)
_COMPILED = (".pyc", ".pyo", ".so", ".pyd")
_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class RuntimeWheel:
    """A built wheel: its file name, exact version, sha256 and bytes."""

    filename: str
    version: str
    sha256: str
    data: bytes

    @property
    def requirement(self) -> str:
        return f"{DISTRIBUTION}=={self.version}"


def _package_files(package: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package).as_posix()
        if (
            not path.is_file()
            or "__pycache__" in path.parts
            or path.suffix in _COMPILED
            or relative.startswith(_LEFT_OUT)
        ):
            continue
        files[f"{package.name}/{relative}"] = path.read_bytes()
    return files


def _with_extra(requirement: str, extra: str) -> str:
    name, _, marker = requirement.partition(";")
    condition = f'extra == "{extra}"'
    return (
        f"{name.strip()}; ({marker.strip()}) and {condition}"
        if marker.strip()
        else f"{name.strip()}; {condition}"
    )


def _from_pyproject(pyproject: Path) -> tuple[list[str], dict[str, dict[str, str]]] | None:
    """METADATA headers and entry points from ``[project]``; None when the file is another project's."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    if re.sub(r"[-_.]+", "-", str(project.get("name", ""))).lower() != DISTRIBUTION:
        return None
    headers = [f"Summary: {project['description']}"] if project.get("description") else []
    if project.get("requires-python"):
        headers.append(f"Requires-Python: {project['requires-python']}")
    headers += [f"Requires-Dist: {r}" for r in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        headers.append(f"Provides-Extra: {extra}")
        headers += [f"Requires-Dist: {_with_extra(r, extra)}" for r in requirements]
    entry_points = {"console_scripts": dict(project.get("scripts", {}))}
    entry_points.update({group: dict(points) for group, points in project.get("entry-points", {}).items()})
    return headers, entry_points


def _from_distribution() -> tuple[list[str], dict[str, dict[str, str]]]:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise BundleError(
            f"cannot build the pytest-reward wheel a bundle carries: {_PACKAGE} is neither in its source tree "
            f"(no pyproject.toml beside it) nor installed (pip install pytest-reward)"
        ) from None
    if dist.version.split("+")[0] != __version__.split("+")[0]:
        raise BundleError(
            f"cannot build the pytest-reward wheel a bundle carries: the installed distribution is {dist.version} "
            f"but the imported package ({_PACKAGE}) is {__version__}"
        )
    meta = dist.metadata
    headers = [f"{key}: {value}" for key in ("Summary", "Requires-Python") if (value := meta.get(key))]
    headers += [f"Provides-Extra: {v}" for v in meta.get_all("Provides-Extra") or []]
    headers += [f"Requires-Dist: {v}" for v in meta.get_all("Requires-Dist") or []]
    entry_points: dict[str, dict[str, str]] = {}
    for point in dist.entry_points:
        entry_points.setdefault(point.group, {})[point.name] = point.value
    return headers, entry_points


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def runtime_wheel(package: Path = _PACKAGE) -> RuntimeWheel:
    """The wheel of the pytest-reward package at ``package`` (the imported one); ``BundleError`` when its
    metadata cannot be found."""
    files = _package_files(package)
    found = _from_pyproject(package.parent / "pyproject.toml")
    headers, entry_points = found if found is not None else _from_distribution()
    digest = hashlib.sha256()
    for name, data in files.items():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).hexdigest().encode() + b"\n")
    digest.update("\n".join(headers).encode())
    version = f"{__version__}{'.' if '+' in __version__ else '+'}{digest.hexdigest()[:12]}"
    stem = f"{DISTRIBUTION.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {DISTRIBUTION}", f"Version: {version}", *headers])
    points = "".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in sorted(items.items())) + "\n"
        for group, items in sorted(entry_points.items())
        if items
    )
    wheel = f"Wheel-Version: 1.0\nGenerator: pytest-reward {__version__}\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/METADATA"] = (metadata + "\n").encode()
    files[f"{info}/WHEEL"] = wheel.encode()
    files[f"{info}/entry_points.txt"] = points.encode()
    files[f"{info}/top_level.txt"] = f"{package.name}\n".encode()
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            entry = zipfile.ZipInfo(str(PurePosixPath(name)), date_time=_DATE)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    data = buffer.getvalue()
    return RuntimeWheel(f"{stem}-py3-none-any.whl", version, hashlib.sha256(data).hexdigest(), data)


def describe(wheel: RuntimeWheel) -> dict[str, Any]:
    """The manifest's record of the wheel (``runtime``)."""
    return {
        "distribution": DISTRIBUTION,
        "version": wheel.version,
        "wheel": f"wheels/{wheel.filename}",
        "sha256": wheel.sha256,
    }
