"""Building a reward bundle: a versioned, importable Python package of tested reward functions.

What goes in (see ``runtime.py`` for the layout and how it loads):

* a frozen copy of each reward function's module and of the project-local modules it imports (found with
  ``modulefinder`` on the project's own directories only; stdlib and installed packages are requirements, not
  copies), with the ``__init__.py`` files of their packages, plus files matched by ini ``reward_bundle_include``
  (checked when pytest starts: no absolute path, no ``..``). A file is frozen with the bytes it really has (a
  symlink's target); a reward module outside the project comes with the modules beside it (:class:`_Freezer`).
  Nothing the plugin wrote is ever frozen: deploy bundles, stored runs, reports (``discovery.written_by_plugin``);
* ``requirements.txt``: every ``@reward_function(requirements=[...])``, the project's ``requirements.txt`` if it
  has one, and ``pytest-reward`` itself pinned to the exact build that ran the tests, which the bundle carries as a
  wheel (``wheels/``, :mod:`.wheel`; a ``--find-links ./wheels`` line, which pip reads relative to the file):
  ``pip install -r requirements.txt`` works on a node that no package index serves pytest-reward to. A
  ``pytest-reward`` line of the project's own is replaced by that pin (its extras kept);
* ``manifest.json``: functions and how to import them, entry points of the adapters, the test evidence (per
  samples file: its sha256, counts, mean with its interval, pass rate, gates), commit, versions, the sha256 of
  every file and a content hash over all of them (the runtime wheel's sha256 included, recorded under
  ``runtime`` with its exact version) — the version is the first 12 hex digits of that hash, so the same code and
  evidence always give the same bundle;
* generated adapters, one file per trainer (its template is in its module under ``trainers/``): ``trl.py``
  (``REWARD_FUNCS``, ``REWARD_WEIGHTS``, one function per reward, and ``*_async`` variants), ``verl.py``
  (``compute_score``), ``openrlhf_reward.py`` (``reward_func``), ``slime.py`` (``custom_rm``); ``serve.py`` /
  ``__main__.py`` (``python -m <bundle>`` serves it over HTTP).

Adapter files locate the bundle from their own path, so trainers that load a file by path (verl, OpenRLHF) work;
their callables pickle as that path (``adapters.BundleSource``). Before a bundle ships, the deploy step imports it
in a fresh interpreter (``verify.check_imports``).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import modulefinder
import os
import re
import shutil
import sys
import sysconfig
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PureWindowsPath
from typing import TYPE_CHECKING, Any

from ..atomic import atomic_open, atomic_write_text
from ..errors import BundleError
from ..project.loading import package_base, written_by_plugin
from ..rewards.reward_model import model_of
from ..trainers import TRAINERS
from .runtime import BUNDLE_FORMAT, BUNDLE_VERSION, NAME_RE
from .wheel import RuntimeWheel, describe, runtime_wheel

if TYPE_CHECKING:
    from ..project.functions import RewardFn

__all__ = ["BuiltBundle", "BundleSpec", "build_bundle", "bundle_name_for", "check_include"]

_EXCLUDED_PARTS = {".git", ".venv", "venv", "site-packages", "__pycache__", ".tox", ".nox", "node_modules"}


@dataclass
class BundleSpec:
    """What to put in a bundle (assembled by the plugin from a green session)."""

    name: str
    functions: list[RewardFn]
    rootdir: Path
    evidence: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Per function name: one entry per samples file it was tested on."""
    metrics: dict[str, list[str]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    plugin_version: str = ""
    owned: tuple[Path, ...] = ()
    """Directories the plugin owns (stored runs, the report): nothing in them is bundled."""


@dataclass
class BuiltBundle:
    """A bundle written to disk: ``directory`` (``<name>-<version>/``) and its ``tarball``."""

    name: str
    version: str
    directory: Path
    tarball: Path
    manifest: dict[str, Any]

    @property
    def package_dir(self) -> Path:
        return self.directory / self.name

    @property
    def content_hash(self) -> str:
        return str(self.manifest["content_hash"])

    def describe(self, location: str | None = None) -> list[str]:
        """What the bundle holds, for the deploy summary; ``location``: where it now is (a built bundle's own
        directory is a staging directory, removed when the deploy step ends, so it is never shown)."""
        lines = [f"bundle {self.name} {self.version}" + (f" ({location})" if location else "")]
        for fn in self.manifest["functions"]:
            files = ", ".join(
                f"{e['samples']} n={e['n']} mean={_fmt(e.get('mean'))}" for e in fn.get("evidence", [])
            )
            lines.append(f"  {fn['name']}: {fn['module']}:{fn['attr']}  tested on {files or 'nothing'}")
        if self.manifest.get("requirements"):
            lines.append("  requirements: " + ", ".join(self.manifest["requirements"]))
        lines.append(f"  {len(self.manifest['files'])} files, content hash {self.content_hash[:16]}")
        return lines


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


def bundle_name_for(rootdir: Path, override: str | None = None) -> str:
    """A valid package name: the ini ``reward_bundle_name``, else ``rewards_<project directory>``."""
    if override:
        if not NAME_RE.match(override):
            raise ValueError(f"bundle name {override!r} must be a Python identifier (letters, digits, '_')")
        return override
    stem = re.sub(r"\W+", "_", rootdir.resolve().name).strip("_").lower() or "project"
    return f"rewards_{stem}"[:100]


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_include(patterns: tuple[str, ...] | list[str]) -> None:
    """``BundleError`` naming the first ini ``reward_bundle_include`` pattern that cannot select project files: an
    absolute path, a ``..`` component, an empty pattern, or a ``**`` that is not a whole path component."""
    for pattern in patterns:
        where = f"ini reward_bundle_include: pattern {pattern!r}"
        parts = PurePath(pattern).parts
        if not pattern.strip():
            raise BundleError(f"{where} is empty")
        if PurePath(pattern).is_absolute() or PureWindowsPath(pattern).anchor:
            raise BundleError(
                f"{where} is an absolute path; patterns are relative to the rootdir (data/*.json)"
            )
        if ".." in parts:
            raise BundleError(f"{where} leaves the rootdir ('..'); a bundle holds project files only")
        if any("**" in part and part != "**" for part in parts):
            raise BundleError(
                f"{where} has '**' inside a path component; '**' must be a whole one (data/**/*.json)"
            )


def _installed(path: Path) -> bool:
    """Part of the Python installation or an installed package (a requirement, never a frozen copy)."""
    parts = set(path.parts)
    if parts & {"site-packages", "dist-packages"}:
        return True
    paths = sysconfig.get_paths()
    return any(
        _is_under(path, Path(paths[key]).resolve()) for key in ("stdlib", "platstdlib") if key in paths
    )


def _is_under(path: Path, directory: Path) -> bool:
    try:
        path.relative_to(directory)
    except ValueError:
        return False
    return True


def _dotted(relative: PurePath) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class _Freezer:
    """The files of a bundle's ``src/``: every module a reward function imports, placed where the bundle imports it
    the way the test run did, holding the bytes of the file it really is (a symlink's target).

    * A project file is frozen at its path in the project as the import found it (``src/metrics/main.py``, even
      when ``metrics`` is a symlink to a directory outside the project), with the ``__init__.py`` of its packages;
      ``src`` and each reward module's package base (what pytest's prepend mode put on ``sys.path``) are the
      bundle's ``sys_path``.
    * A reward module whose file lies outside the project (a symlinked file, ``--reward-fn /elsewhere/x.py::f``) is
      frozen under ``src/_external/<n>/`` at its module name (``_pytest_reward_ext/shared/rewards.py``), with the
      modules its directory provides (``words.py`` beside it), and that directory is on the bundle's ``sys_path``.
    * Installed packages and the standard library are requirements, never copies.
    * Nothing the plugin wrote is frozen (``discovery.written_by_plugin``: deploy bundles, stored runs, reports); a
      reward module or an import found there refuses the deploy with the path.
    """

    def __init__(self, root: Path, owned: tuple[Path, ...]) -> None:
        self.roots = list(dict.fromkeys([Path(os.path.abspath(root)), root.resolve()]))
        self.root = self.roots[-1]
        self.owned = owned
        self.files: dict[str, bytes] = {}
        self.origin: dict[str, Path] = {}
        self.sys_path: dict[str, None] = {}
        self.external: dict[Path, str] = {}

    # -- where a file is ---------------------------------------------------------------------------------------

    def project_path(self, path: Path) -> PurePath | None:
        """``path`` relative to the project as the import found it (symlinks not followed), or None outside it or
        in a virtualenv, ``.git``, ``__pycache__`` ...."""
        absolute = Path(os.path.abspath(path))
        for root in self.roots:
            try:
                relative = absolute.relative_to(root)
            except ValueError:
                continue
            return None if set(relative.parts) & _EXCLUDED_PARTS else relative
        return None

    def written_by_plugin(self, relative: PurePath) -> Path | None:
        """The directory the plugin wrote that holds the project file ``relative``, if any."""
        directory = self.root
        for part in relative.parts[:-1]:
            directory = directory / part
            if written_by_plugin(directory, self.owned, self.root):
                return directory
        return None

    # -- adding files ------------------------------------------------------------------------------------------

    def add(self, destination: PurePath, real: Path) -> str:
        key = f"src/{destination.as_posix()}"
        data = real.read_bytes()
        if key in self.files and self.files[key] != data:
            raise BundleError(
                f"two different files would be frozen as {key}: {self.origin[key]} and {real.resolve()}"
            )
        self.files[key] = data
        self.origin.setdefault(key, real.resolve())
        return key

    def add_project_file(self, path: Path, relative: PurePath, what: str) -> str:
        owner = self.written_by_plugin(relative)
        if owner is not None:
            raise BundleError(
                f"{what} {relative.as_posix()} is inside {owner}, which pytest-reward wrote (a deployed bundle, "
                "stored runs or a report); deploy the project's own module"
            )
        key = self.add(relative, path)
        directory = relative.parent
        while directory.parts and (self.root / directory / "__init__.py").is_file():
            self.add(directory / "__init__.py", self.root / directory / "__init__.py")
            directory = directory.parent
        return key

    def add_import(self, path: Path, search: list[tuple[Path, str]]) -> None:
        """A module found by ``modulefinder``: a project file, or a file of an external directory on ``search``."""
        relative = self.project_path(path)
        if relative is not None:
            self.add_project_file(path, relative, "imported module")
            return
        for directory, prefix in search:
            try:
                inner = Path(os.path.abspath(path)).relative_to(directory)
            except ValueError:
                continue
            self.add(PurePath(prefix) / inner, path)
            package = inner.parent
            while package.parts and (directory / package / "__init__.py").is_file():
                self.add(PurePath(prefix) / package / "__init__.py", directory / package / "__init__.py")
                package = package.parent
            return

    # -- one reward function -----------------------------------------------------------------------------------

    def function(self, module: str, module_file: Path | None) -> str | None:
        """Freeze a reward function's module and what it imports; the module's path in the bundle (None for a
        module that is installed, or has no file: the fresh-interpreter import check decides about those)."""
        if module_file is None:
            return None
        relative = self.project_path(module_file)
        if relative is not None:
            source = self.add_project_file(module_file, relative, "reward module")
            base = package_base(self.root / relative)
            for directory in (self.root, base):
                rel = directory.relative_to(self.root).as_posix()
                self.sys_path.setdefault("src" if rel == "." else f"src/{rel}", None)
            self.add_imports(self.root / relative, [self.root, base], [])
            return source
        real = module_file.resolve()
        if _installed(real):
            return None
        if not all(part.isidentifier() for part in module.split(".")):
            raise BundleError(
                f"reward module {real} was imported as {module!r}, which a bundle cannot import"
            )
        base = package_base(real)
        prefix = self.external.setdefault(base, f"_external/{len(self.external)}")
        self.sys_path.setdefault(f"src/{prefix}", None)
        by_name = PurePath(*module.split("."))
        by_name = by_name / "__init__.py" if real.name == "__init__.py" else by_name.with_suffix(".py")
        source = self.add(PurePath(prefix) / by_name, real)
        if _dotted(real.relative_to(base)) == module:  # imported under its own name: its packages come too
            self.add_import(base / real.relative_to(base), [(base, prefix)])
        self.add_imports(real, [self.root, base], [(base, prefix)])
        return source

    def add_imports(self, module_file: Path, path: list[Path], external: list[tuple[Path, str]]) -> None:
        finder = modulefinder.ModuleFinder(path=[str(p) for p in path])
        try:
            finder.run_script(str(module_file))
        except (SyntaxError, ImportError, OSError):
            return
        for mod in finder.modules.values():
            file = getattr(mod, "__file__", None)
            if file and file.endswith(".py") and mod.__name__ != "__main__":
                self.add_import(Path(file), external)

    def include(self, pattern: str) -> None:
        """Project files matching an ini ``reward_bundle_include`` glob (nothing the plugin wrote)."""
        for path in sorted(self.roots[0].glob(pattern)):
            relative = self.project_path(path)
            if path.is_file() and relative is not None and self.written_by_plugin(relative) is None:
                self.add(relative, path)


def _requirements(spec: BundleSpec, runtime: RuntimeWheel) -> list[str]:
    """The functions' requirements, the project's ``requirements.txt`` lines (not its options), and the exact
    pytest-reward the bundle carries, in place of any other pytest-reward line (whose extras it keeps)."""
    reqs: dict[str, None] = {}
    for fn in spec.functions:
        for req in fn.spec.requirements:
            reqs.setdefault(req.strip(), None)
    project = spec.rootdir / "requirements.txt"
    if project.is_file():
        for line in project.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                reqs.setdefault(line, None)
    kept: list[str] = []
    extras: dict[str, None] = {}
    for req in reqs:
        ours = _OURS.match(req)
        if ours is None:
            kept.append(req)
        else:  # its extras stay (pytest-reward[serve]: the server's dependencies)
            extras.update(dict.fromkeys(e.strip() for e in (ours.group(1) or "").split(",") if e.strip()))
    pin = runtime.requirement
    if extras:
        name, _, version = pin.partition("==")
        pin = f"{name}[{','.join(extras)}]=={version}"
    return [*kept, pin]


_OURS = re.compile(r"pytest[-_.]reward(?![\w.-])\s*(?:\[([^\]]*)\])?", re.IGNORECASE)


# --- generated files -----------------------------------------------------------------------------------------

_LOCATE = """import importlib
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
_bundle = importlib.import_module({name!r})
"""

_INIT = '''"""Reward bundle {name} {version}, built by pytest-reward {plugin} from a green test session.

MANIFEST: what is inside and the test evidence; FUNCTIONS: {{name: reward function}}; WEIGHTS: {{name: weight}}.
Adapters: {name}.trl (TRL reward_funcs), {name}.verl (compute_score), {name}.openrlhf_reward (reward_func),
{name}.slime (custom_rm); `python -m {name}` serves the functions over HTTP (pytest-reward serve).
"""

from pytest_reward.deploy.runtime import load_package as _load_package

MANIFEST, FUNCTIONS, WEIGHTS = _load_package(__file__)
__version__ = MANIFEST["bundle_version"]
'''


def _generated_files(
    name: str, version: str, plugin_version: str, functions: list[str], metric_keys: dict[str, list[str]]
) -> dict[str, str]:
    locate = _LOCATE.format(name=name)
    keys = json.dumps(metric_keys, sort_keys=True)
    # one adapter file per trainer, from the template in its module
    adapters = {t.BUNDLE_FILE: t.bundle_file(name, functions, keys, locate) for t in TRAINERS}
    serve = "\n".join(
        [
            f'"""``python -m {name}.serve [--port N] [--token T]``: serve this bundle (pytest-reward serve)."""',
            "",
            "import os",
            "import sys",
            "",
            "",
            "def main(argv=None):",
            "    from pytest_reward.cli import main as cli",
            "",
            "    bundle_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))",
            "    return cli(['serve', bundle_dir, *(sys.argv[1:] if argv is None else argv)])",
            "",
            "",
            'if __name__ == "__main__":',
            "    sys.exit(main())",
            "",
        ]
    )
    main = "\n".join(["import sys", "", "from .serve import main", "", "sys.exit(main())", ""])
    return {
        "__init__.py": _INIT.format(name=name, version=version, plugin=plugin_version),
        **adapters,
        "serve.py": serve,
        "__main__.py": main,
    }


# --- building --------------------------------------------------------------------------------------------------


def _selector(fn: RewardFn, rootdir: Path) -> str:
    """``--reward-fn``'s spelling of a function: ``path.py::attr`` relative to the rootdir, else ``module:attr``."""
    attr = fn.attr or fn.qualname
    if fn.module_file is not None:
        try:
            return f"{Path(os.path.relpath(fn.module_file, rootdir)).as_posix()}::{attr}"
        except ValueError:  # another drive (Windows)
            pass
    return f"{fn.module}:{attr}"


def _collect_sources(spec: BundleSpec) -> tuple[dict[str, bytes], list[dict[str, Any]], list[str]]:
    """Files under ``src/`` (relative path -> bytes), manifest function entries, ``sys_path`` entries."""
    check_include(spec.include)
    models = [(fn.name, source) for fn in spec.functions if (source := model_of(fn.obj)) is not None]
    if models:
        refusal = "; ".join(f"{name} cannot be deployed: {source.deploy_refusal}" for name, source in models)
        others = [_selector(fn, spec.rootdir) for fn in spec.functions if model_of(fn.obj) is None]
        if others:
            refusal += "; deploy the other reward functions by selecting them: " + " ".join(
                f"--reward-fn {selector}" for selector in others
            )
        raise BundleError(refusal)
    freezer = _Freezer(spec.rootdir, spec.owned)
    entries: list[dict[str, Any]] = []
    for fn in spec.functions:
        entries.append(
            {
                "name": fn.name,
                "module": fn.module,
                "attr": fn.attr,
                "source": freezer.function(fn.module, fn.module_file),
                "mode": fn.spec.mode,
                "async": fn.spec.is_async,
                "weight": 1.0,
                "requirements": list(fn.spec.requirements),
                "gates": fn.marker.to_dict(),  # the gates and the marker's settings it was tested with
                "metrics": spec.metrics.get(fn.name, []),
                "evidence": spec.evidence.get(fn.name, []),
            }
        )
    for pattern in spec.include:
        freezer.include(pattern)
    return freezer.files, entries, list(freezer.sys_path)


def build_bundle(
    spec: BundleSpec, staging: Path, *, on_manifest: Callable[[dict[str, Any]], Any] | None = None
) -> BuiltBundle:
    """Write the bundle directory and its ``.tar.gz`` under ``staging`` (a fresh directory)."""
    if not NAME_RE.match(spec.name):
        raise ValueError(f"invalid bundle name {spec.name!r}")
    sources, entries, sys_path = _collect_sources(spec)
    runtime = runtime_wheel()
    requirements = _requirements(spec, runtime)
    names = [e["name"] for e in entries]
    metric_keys = {e["name"]: e["metrics"] for e in entries}
    # The version is a hash of everything but the generated files (which depend on the version string).
    digest = hashlib.sha256()
    for rel in sorted(sources):
        digest.update(rel.encode() + b"\0" + _sha256_bytes(sources[rel]).encode() + b"\n")
    digest.update(json.dumps({"functions": entries, "requirements": requirements}, sort_keys=True).encode())
    digest.update(runtime.sha256.encode())
    content_hash = digest.hexdigest()
    version = content_hash[:12]
    generated = _generated_files(spec.name, version, spec.plugin_version, names, metric_keys)
    package_files: dict[str, bytes] = {rel: data for rel, data in sources.items()}
    package_files.update({rel: text.encode("utf-8") for rel, text in generated.items()})
    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "name": spec.name,
        "bundle_version": version,
        "content_hash": content_hash,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "plugin_version": spec.plugin_version,
        "python": sys.version.split()[0],
        "functions": entries,
        "sys_path": sys_path,
        "requirements": requirements,
        "runtime": describe(runtime),
        "entry_points": {
            **{t.NAME: t.entry_point(spec.name) for t in TRAINERS},
            "serve": f"python -m {spec.name}",
        },
        "files": {rel: _sha256_bytes(data) for rel, data in sorted(package_files.items())},
    }
    manifest.update({k: v for k, v in spec.meta.items() if k not in manifest})
    if on_manifest is not None:
        on_manifest(manifest)
    directory = staging / f"{spec.name}-{version}"
    package_dir = directory / spec.name
    for rel, data in package_files.items():
        target = package_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    manifest_text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (package_dir / "manifest.json").write_text(manifest_text, encoding="utf-8")
    (directory / "manifest.json").write_text(manifest_text, encoding="utf-8")
    (directory / "wheels").mkdir()
    (directory / "wheels" / runtime.filename).write_bytes(runtime.data)
    lines = ["--find-links ./wheels", *requirements]  # pip reads the path relative to this file
    (directory / "requirements.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tarball = staging / f"{spec.name}-{version}.tar.gz"
    _write_tarball(directory, tarball)
    return BuiltBundle(spec.name, version, directory, tarball, manifest)


def _write_tarball(directory: Path, tarball: Path) -> None:
    """A reproducible .tar.gz: sorted entries, fixed times and owners, no extended attributes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(directory.rglob("*")):
            if path.is_dir():
                continue
            info = tarfile.TarInfo(str(Path(directory.name) / path.relative_to(directory)))
            data = path.read_bytes()
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    with atomic_open(tarball, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(buffer.getvalue())


def copy_bundle(bundle: BuiltBundle, destination: Path) -> tuple[BuiltBundle, bool]:
    """Install ``bundle`` under ``destination`` atomically: staged next to it, then renamed into place.

    Returns the installed bundle and whether it was already there (same content hash: nothing written)."""
    destination.mkdir(parents=True, exist_ok=True)
    final_dir = destination / bundle.directory.name
    final_tar = destination / bundle.tarball.name
    if final_dir.is_dir() and (final_dir / "manifest.json").is_file():
        existing = json.loads((final_dir / "manifest.json").read_text(encoding="utf-8"))
        if existing.get("content_hash") == bundle.content_hash and final_tar.is_file():
            return BuiltBundle(bundle.name, bundle.version, final_dir, final_tar, existing), True
    stage = destination / f".staging-{bundle.directory.name}-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        shutil.copytree(bundle.directory, stage)
        if final_dir.exists():
            shutil.rmtree(final_dir)
        os.replace(stage, final_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    with atomic_open(final_tar, "wb") as fh:
        fh.write(bundle.tarball.read_bytes())
    atomic_write_text(destination / "LATEST", bundle.directory.name + "\n")
    return BuiltBundle(bundle.name, bundle.version, final_dir, final_tar, bundle.manifest), False
