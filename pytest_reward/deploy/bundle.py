"""Building a reward bundle: a versioned, importable Python package of tested reward functions.

What goes in (see ``runtime.py`` for the layout and how it loads):

* a frozen copy of each reward function's module and of the project-local modules it imports (found with
  ``modulefinder`` on the project's own directories only; stdlib and installed packages are requirements, not
  copies), with the ``__init__.py`` files of their packages, plus files matched by ini ``reward_bundle_include``;
* ``requirements.txt``: every ``@reward_function(requirements=[...])``, the project's ``requirements.txt`` if it
  has one, and ``pytest-reward`` itself (the frozen modules import it);
* ``manifest.json``: functions and how to import them, entry points of the adapters, the test evidence (per
  samples file: its sha256, counts, mean with its interval, pass rate, gates), commit, versions, the sha256 of
  every file and a content hash over all of them — the version is the first 12 hex digits of that hash, so the
  same code and evidence always give the same bundle;
* generated adapters: ``trl.py`` (``REWARD_FUNCS``, ``REWARD_WEIGHTS``, one function per reward, and ``*_async``
  variants), ``verl.py`` (``compute_score``), ``openrlhf_reward.py`` (``reward_func``), ``slime.py``
  (``custom_rm``), ``serve.py`` / ``__main__.py`` (``python -m <bundle>`` serves it over HTTP).

Adapter files locate the bundle from their own path, so trainers that load a file by path (verl, OpenRLHF) work.
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
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import atomic_open, atomic_write_text
from ..discovery import package_base
from .runtime import BUNDLE_FORMAT, BUNDLE_VERSION, NAME_RE

if TYPE_CHECKING:
    from ..discovery import RewardFn

__all__ = ["BuiltBundle", "BundleSpec", "build_bundle", "bundle_name_for"]

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

    def describe(self) -> list[str]:
        lines = [f"bundle {self.name} {self.version} ({self.directory})"]
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


def _inside(path: Path, root: Path) -> bool:
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return not (set(rel.parts) & _EXCLUDED_PARTS)


def _package_inits(path: Path, root: Path) -> list[Path]:
    inits = []
    directory = path.parent
    while (directory / "__init__.py").is_file() and _inside(directory, root):
        inits.append(directory / "__init__.py")
        directory = directory.parent
    return inits


def _local_imports(module_file: Path, root: Path, search: list[Path]) -> list[Path]:
    """Project-local modules imported (transitively) by ``module_file``."""
    finder = modulefinder.ModuleFinder(path=[str(p) for p in search])
    try:
        finder.run_script(str(module_file))
    except (SyntaxError, ImportError, OSError):
        return []
    out = []
    for mod in finder.modules.values():
        file = getattr(mod, "__file__", None)
        if file and file.endswith(".py") and _inside(Path(file), root):
            out.append(Path(file).resolve())
    return out


def _requirements(spec: BundleSpec) -> list[str]:
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
    if not any(re.match(r"pytest[-_]reward\b", r) for r in reqs):
        reqs.setdefault(
            f"pytest-reward=={spec.plugin_version}" if spec.plugin_version else "pytest-reward", None
        )
    return [r for r in reqs if r]


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
    trl_lines = [
        '"""TRL ``reward_funcs``: ``GRPOTrainer(reward_funcs=REWARD_FUNCS, args=GRPOConfig(reward_weights=REWARD_WEIGHTS))``',
        f'or ``trl grpo --reward_funcs {name}.trl.<name>``. ``*_async`` variants score a batch concurrently."""',
        "",
        locate,
        "from pytest_reward.deploy.adapters import make_trl_reward",
        "",
    ]
    for fn in functions:
        ident = re.sub(r"\W", "_", fn)
        trl_lines += [
            f"{ident} = make_trl_reward(_bundle.FUNCTIONS[{fn!r}], {ident!r})",
            f"{ident}.__module__ = __name__",
            f"{ident}_async = make_trl_reward(_bundle.FUNCTIONS[{fn!r}], {ident + '_async'!r}, asynchronous=True)",
            f"{ident}_async.__module__ = __name__",
        ]
    idents = [re.sub(r"\W", "_", fn) for fn in functions]
    trl_lines += [
        "",
        f"REWARD_FUNCS = [{', '.join(idents)}]",
        f"REWARD_FUNCS_ASYNC = [{', '.join(i + '_async' for i in idents)}]",
        f"REWARD_WEIGHTS = [_bundle.WEIGHTS[n] for n in {functions!r}]",
        "",
    ]
    verl = "\n".join(
        [
            '"""verl: ``reward.custom_reward_function.path=<this file>`` and ``.name=compute_score``.',
            "Returns a dict with the same keys for every sample: score (weighted), <function>, <function>_valid,",
            '<function>/<metric>. The conversation is read from ``extra_info["messages"]`` when present."""',
            "",
            locate,
            "from pytest_reward.deploy.adapters import make_verl_compute_score",
            "",
            f"compute_score = make_verl_compute_score(_bundle.FUNCTIONS, _bundle.WEIGHTS, {keys})",
            "",
        ]
    )
    openrlhf = "\n".join(
        [
            '"""OpenRLHF: ``--reward.remote_url <this file>`` (file mode): ``reward_func(queries, prompts, labels)``."""',
            "",
            locate,
            "from pytest_reward.deploy.adapters import make_openrlhf_reward_func",
            "",
            f"reward_func = make_openrlhf_reward_func(_bundle.FUNCTIONS, _bundle.WEIGHTS, {keys})",
            "",
        ]
    )
    slime = "\n".join(
        [
            f'"""slime: ``--custom-rm-path {name}.slime.custom_rm`` (async, one sample)."""',
            "",
            locate,
            "from pytest_reward.deploy.adapters import make_slime_custom_rm",
            "",
            "custom_rm = make_slime_custom_rm(_bundle.FUNCTIONS, _bundle.WEIGHTS)",
            "",
        ]
    )
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
        "trl.py": "\n".join(trl_lines),
        "verl.py": verl,
        "openrlhf_reward.py": openrlhf,
        "slime.py": slime,
        "serve.py": serve,
        "__main__.py": main,
    }


# --- building --------------------------------------------------------------------------------------------------


def _collect_sources(spec: BundleSpec) -> tuple[dict[str, bytes], list[dict[str, Any]], list[str]]:
    """Files under ``src/`` (relative path -> bytes), manifest function entries, ``sys_path`` entries."""
    root = spec.rootdir.resolve()
    files: dict[str, bytes] = {}
    entries: list[dict[str, Any]] = []
    sys_path: dict[str, None] = {}

    def add_file(path: Path) -> str:
        rel = path.resolve().relative_to(root).as_posix()
        files[f"src/{rel}"] = path.read_bytes()
        return f"src/{rel}"

    for fn in spec.functions:
        module_file = fn.module_file
        source = None
        if module_file is not None and _inside(module_file, root):
            source = add_file(module_file)
            for init in _package_inits(module_file, root):
                add_file(init)
            base = package_base(module_file)
            for directory in (root, base):
                rel = directory.resolve().relative_to(root).as_posix()
                sys_path.setdefault("src" if rel == "." else f"src/{rel}", None)
            for dep in _local_imports(module_file, root, [root, base]):
                add_file(dep)
                for init in _package_inits(dep, root):
                    add_file(init)
        entries.append(
            {
                "name": fn.name,
                "module": fn.module,
                "attr": fn.attr,
                "source": source,
                "mode": fn.spec.mode,
                "async": fn.spec.is_async,
                "weight": 1.0,
                "requirements": list(fn.spec.requirements),
                "gates": fn.gates.to_dict(),
                "metrics": spec.metrics.get(fn.name, []),
                "evidence": spec.evidence.get(fn.name, []),
            }
        )
    for pattern in spec.include:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and _inside(path, root):
                add_file(path)
    return files, entries, list(sys_path)


def build_bundle(
    spec: BundleSpec, staging: Path, *, on_manifest: Callable[[dict[str, Any]], Any] | None = None
) -> BuiltBundle:
    """Write the bundle directory and its ``.tar.gz`` under ``staging`` (a fresh directory)."""
    if not NAME_RE.match(spec.name):
        raise ValueError(f"invalid bundle name {spec.name!r}")
    sources, entries, sys_path = _collect_sources(spec)
    requirements = _requirements(spec)
    names = [e["name"] for e in entries]
    metric_keys = {e["name"]: e["metrics"] for e in entries}
    # The version is a hash of everything but the generated files (which depend on the version string).
    digest = hashlib.sha256()
    for rel in sorted(sources):
        digest.update(rel.encode() + b"\0" + _sha256_bytes(sources[rel]).encode() + b"\n")
    digest.update(json.dumps({"functions": entries, "requirements": requirements}, sort_keys=True).encode())
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
        "entry_points": {
            "trl": f"{spec.name}.trl:REWARD_FUNCS",
            "verl": f"{spec.name}/verl.py:compute_score",
            "openrlhf": f"{spec.name}/openrlhf_reward.py:reward_func",
            "slime": f"{spec.name}.slime.custom_rm",
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
    (directory / "requirements.txt").write_text("\n".join(requirements) + "\n", encoding="utf-8")
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
