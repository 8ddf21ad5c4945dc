"""Finding reward functions and deciding which samples files each one meets.

Sources, in this order:

1. ``--reward-fn path.py::name`` / ``--reward-fn package.module:name`` — when given, only these functions are
   used (the flag selects);
2. modules matching ini ``reward_modules`` (default ``main.py reward_*.py *_reward.py rewards.py``) under the
   scan roots, imported under a dotted name derived from their path relative to the rootdir, so two
   ``main.py`` files never shadow each other;
3. test modules (ini ``python_files``) under the scan roots that mention ``reward_function``, imported exactly as
   pytest imports them (same module objects, assertion rewriting intact).

Scan roots are the directories (and ``.py`` files) among pytest's arguments plus the directories of the samples
files named on the command line; the rootdir when there are none. A module contributes the reward functions it
defines (``fn.__module__`` is the module) and reward functions built at run time (``combine(...)``), never the
ones it merely imports.

Which files a function meets: its marker's ``samples=`` when given (paths relative to its module's directory,
then to the rootdir; globs allowed); otherwise every samples file named on the command line
(``--reward-samples`` or a positional ``.jsonl``) and every ``reward_samples_glob`` file whose directory
contains the function's module.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .errors import DiscoveryError
from .spec import is_reward_function
from .thresholds import GateError, Gates, validate_marker

if TYPE_CHECKING:
    from .spec import RewardSpec

__all__ = [
    "BUNDLE_FORMAT",
    "DiscoveryError",
    "Registry",
    "RewardFn",
    "discover",
    "functions_in",
    "import_reward_module",
    "marks_of",
    "package_base",
    "written_by_plugin",
]


_NEEDLE = b"reward_function"


@dataclass
class RewardFn:
    """A discovered reward function and everything the plugin needs to know about it."""

    obj: Callable[..., Any]
    spec: RewardSpec
    name: str
    qualname: str
    module: str
    path: Path
    lineno: int
    gates: Gates = field(default_factory=Gates)
    marks: list[Any] = field(default_factory=list)
    bound_files: tuple[Path, ...] = ()
    error: str | None = None
    attr: str = ""
    """The attribute of ``module`` that holds the function (how a deploy bundle finds it again)."""
    module_file: Path | None = None

    @property
    def where(self) -> str:
        return f"{self.path}::{self.qualname}"

    @property
    def is_bound(self) -> bool:
        return bool(self.gates.samples)


@dataclass
class Registry:
    """The reward functions of a session."""

    functions: list[RewardFn] = field(default_factory=list)
    import_errors: list[tuple[Path | str, str]] = field(default_factory=list)
    looked_in: list[str] = field(default_factory=list)
    patterns: tuple[str, ...] = ()
    selected: bool = False
    """True when ``--reward-fn`` chose the functions."""
    _errors_reported: bool = False

    def usable(self) -> list[RewardFn]:
        return [f for f in self.functions if f.error is None]

    def errors(self) -> list[str]:
        """Import errors and invalid reward functions (bad marker, missing bound samples)."""
        return [f"{where}: {msg}" for where, msg in self.import_errors] + [
            f.error for f in self.functions if f.error
        ]

    def pop_errors(self) -> list[str]:
        """``errors()``, handed out once (the first samples-file collector reports them)."""
        if self._errors_reported:
            return []
        self._errors_reported = True
        return self.errors()

    def for_file(self, path: Path, *, explicit: bool, globbed: bool) -> list[RewardFn]:
        """Functions (usable or not) that meet the samples file ``path``."""
        path = path.resolve()
        out = []
        for fn in self.functions:
            if fn.is_bound or fn.bound_files:
                if path in fn.bound_files:
                    out.append(fn)
            elif explicit or self.selected or (globbed and _is_relative_to(fn.path.resolve(), path.parent)):
                out.append(fn)
        return out

    def bound_paths(self) -> list[Path]:
        seen: dict[Path, None] = {}
        for fn in self.functions:
            for p in fn.bound_files:
                seen.setdefault(p, None)
        return list(seen)


def _is_relative_to(path: Path, parent: Path) -> bool:
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
        if resolved == owned_dir and (rootdir is None or not _is_relative_to(rootdir.resolve(), owned_dir)):
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


def _matches(path: Path, patterns: Sequence[str]) -> bool:
    name = path.name
    return any(fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(str(path), pat) for pat in patterns)


def _mentions_reward_function(path: Path) -> bool:
    try:
        return _NEEDLE in path.read_bytes()
    except OSError:
        return False


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


def _format_import_error(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}"


# --- collecting functions from modules ----------------------------------------------------------------------


def _owned(obj: Any, module: ModuleType) -> bool:
    obj_module = getattr(obj, "__module__", None)
    if obj_module == module.__name__:
        return True
    home = sys.modules.get(obj_module or "")
    # Built at run time (e.g. combine(...)): not reachable under its own name in its defining module.
    return getattr(home, getattr(obj, "__name__", ""), None) is not obj


def functions_in(module: ModuleType) -> list[tuple[str, Any]]:
    found = []
    for attr, obj in list(vars(module).items()):
        if attr.startswith("__") or not is_reward_function(obj) or not _owned(obj, module):
            continue
        found.append((attr, obj))
    return found


def marks_of(obj: Any) -> list[Any]:
    marks = getattr(obj, "pytestmark", [])
    if not isinstance(marks, list):
        marks = [marks]
    return [getattr(m, "mark", m) for m in marks]


def _source_location(obj: Any, module: ModuleType | None) -> tuple[Path, int]:
    inner = inspect.unwrap(getattr(obj, "__trainer_native__", obj))
    try:
        file = inspect.getsourcefile(inner) or inspect.getfile(inner)
        lineno = inner.__code__.co_firstlineno
    except (TypeError, AttributeError):
        file = getattr(module, "__file__", None) or "<unknown>"
        lineno = 0
    return Path(file), int(lineno)


@dataclass
class DiscoveryOptions:
    roots: list[Path]
    rootdir: Path
    importmode: str
    reward_modules: tuple[str, ...]
    python_files: tuple[str, ...]
    norecursedirs: tuple[str, ...]
    fn_specs: tuple[str, ...]
    defaults: Gates
    invocation_dir: Path
    test_modules: bool = True
    """Search test modules too (off for the light discovery of runs that did not ask for reward testing)."""
    owned_dirs: tuple[Path, ...] = ()
    """Directories the plugin owns (stored runs, the report): never searched (:func:`written_by_plugin`)."""


def _load_fn_spec(spec: str, opts: DiscoveryOptions, config: Any) -> tuple[Any, ModuleType | None]:
    from .styles import StyleError, native_reward, split_style

    style, spec_ = split_style(spec)
    obj, module = _load_object(spec_, spec, opts, config)
    if style is None and is_reward_function(obj):
        return obj, module
    # A trainer-native function: its style named by the prefix, or read from its parameters (see styles.py).
    try:
        return native_reward(obj, style), module
    except StyleError as exc:
        raise DiscoveryError(f"--reward-fn {spec}: {exc}") from None


def _load_object(spec: str, given: str, opts: DiscoveryOptions, config: Any) -> tuple[Any, ModuleType]:
    if "::" in spec:
        file_part, _, attr = spec.partition("::")
        path = Path(file_part)
        if not path.is_absolute():
            path = (opts.invocation_dir / path).resolve()
        if not path.is_file():
            raise DiscoveryError(f"--reward-fn {given}: file {file_part} not found")
        if _matches(path, opts.python_files) and config is not None:
            from .pytest_private import import_test_module

            module = import_test_module(path, config)
        else:
            module = import_reward_module(path, opts.rootdir, opts.importmode)
    elif ":" in spec:
        mod_name, _, attr = spec.partition(":")
        module = importlib.import_module(mod_name)
    else:
        raise DiscoveryError(
            f"--reward-fn {given}: expected path.py::name or package.module:name (a trainer-native function: "
            f"STYLE:path.py::name)"
        )
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DiscoveryError(f"--reward-fn {given}: {module.__name__} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise DiscoveryError(f"--reward-fn {given}: {attr!r} is {type(obj).__name__}, not a function")
    return obj, module


def _resolve_bound(
    patterns: Sequence[str], fn_path: Path, rootdir: Path
) -> tuple[tuple[Path, ...], str | None]:
    files: dict[Path, None] = {}
    for pattern in patterns:
        matched: list[Path] = []
        for base in (fn_path.parent, rootdir):
            p = Path(pattern)
            if p.is_absolute():
                candidates = (
                    [p] if not any(c in pattern for c in "*?[") else sorted(Path(p.anchor).glob(str(p)[1:]))
                )
            elif any(c in pattern for c in "*?["):
                candidates = sorted(base.glob(pattern))
            else:
                candidates = [base / pattern]
            matched = [c.resolve() for c in candidates if c.is_file()]
            if matched:
                break
        if not matched:
            return (), (
                f"samples file {pattern!r} not found (looked relative to {fn_path.parent} and to the rootdir {rootdir})"
            )
        for m in matched:
            files.setdefault(m, None)
    return tuple(files), None


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _make_entry(obj: Any, module: ModuleType | None, opts: DiscoveryOptions, attr: str = "") -> RewardFn:
    from .decorator import RewardSpec, get_spec

    path, lineno = _source_location(obj, module)
    qualname = getattr(obj, "__qualname__", getattr(obj, "__name__", "reward"))
    error = None
    try:
        spec = get_spec(obj)
    except (ValueError, TypeError) as exc:  # a foreign function whose signature we cannot use
        spec = RewardSpec(
            name=getattr(obj, "__name__", "reward"),
            mode="pointwise",
            is_async=False,
            parameters=(),
            accepts_var_kwargs=True,
            messages_index=None,
            coerce_messages=False,
            coerce_ground_truth=False,
            coerce_rollouts=False,
        )
        error = str(exc)
    gates = opts.defaults
    other_marks = []
    where = f"@pytest.mark.reward on {_relative(path, opts.rootdir)}::{qualname}"
    reward_marks = []
    for mark in marks_of(module) + marks_of(obj):
        if getattr(mark, "name", None) == "reward":
            reward_marks.append(mark)
        else:
            other_marks.append(mark)
    for mark in reward_marks:
        try:
            gates = gates.merged(validate_marker(tuple(mark.args), dict(mark.kwargs), where), "marker")
        except GateError as exc:
            error = str(exc)
    bound: tuple[Path, ...] = ()
    if error is None and gates.samples:
        bound, problem = _resolve_bound(gates.samples, path, opts.rootdir)
        if problem:
            error = f"{where}: {problem}"
    return RewardFn(
        obj=obj,
        spec=spec,
        name=spec.id or getattr(obj, "__name__", "reward"),
        qualname=qualname,
        module=getattr(module, "__name__", "?"),
        path=path,
        lineno=lineno,
        gates=gates,
        marks=other_marks,
        bound_files=bound,
        error=error,
        attr=attr or getattr(obj, "__name__", ""),
        module_file=Path(module.__file__).resolve()
        if module is not None and getattr(module, "__file__", None)
        else None,
    )


def _disambiguate(functions: list[RewardFn], rootdir: Path) -> None:
    """Give same-named functions distinct names: ``relevance.evaluate`` / ``safety.evaluate``."""
    by_name: dict[str, list[RewardFn]] = {}
    for fn in functions:
        by_name.setdefault(fn.name, []).append(fn)
    for name, group in by_name.items():
        if len(group) < 2:
            continue
        depth = 1
        while True:
            labels = []
            for fn in group:
                try:
                    parts = fn.path.resolve().relative_to(rootdir.resolve()).with_suffix("").parts
                except ValueError:
                    parts = fn.path.with_suffix("").parts
                parents = [p for p in parts[:-1]] if parts[-1] in ("main", "__init__") else list(parts)
                labels.append(".".join([*parents[-depth:], name]) if parents else name)
            if len(set(labels)) == len(labels) or depth > 8:
                break
            depth += 1
        for fn, label in zip(group, labels, strict=True):
            fn.name = label


def discover(opts: DiscoveryOptions, config: Any = None) -> Registry:
    """Find the reward functions of a session (see the module docstring)."""
    registry = Registry(patterns=opts.reward_modules)
    seen: set[int] = set()

    def add(obj: Any, module: ModuleType | None, attr: str) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        registry.functions.append(_make_entry(obj, module, opts, attr))

    if opts.fn_specs:
        registry.selected = True
        registry.looked_in = [f"--reward-fn {s}" for s in opts.fn_specs]
        for spec in opts.fn_specs:
            try:
                obj, module = _load_fn_spec(spec, opts, config)
            except DiscoveryError as exc:
                where, _, msg = str(exc).partition(": ")
                registry.import_errors.append((where, msg))
                continue
            except Exception as exc:
                registry.import_errors.append((f"--reward-fn {spec}", _format_import_error(exc)))
                continue
            add(obj, module, spec.rpartition(":")[2])
        _disambiguate(registry.functions, opts.rootdir)
        return registry

    registry.looked_in = [str(r) for r in opts.roots]
    for path in walk_files(opts.roots, opts.norecursedirs, opts.owned_dirs, opts.rootdir):
        if path.suffix != ".py" or path.name == "conftest.py":
            continue
        # A test module is always imported the way pytest imports it, even if it also matches reward_modules.
        is_test_module = _matches(path, opts.python_files)
        is_reward_module = not is_test_module and _matches(path, opts.reward_modules)
        if is_test_module and not opts.test_modules:
            continue
        if not (is_reward_module or is_test_module) or not _mentions_reward_function(path):
            continue
        try:
            if is_test_module and config is not None:
                from .pytest_private import import_test_module

                module = import_test_module(path, config)
            else:
                module = import_reward_module(path, opts.rootdir, opts.importmode)
        except Exception as exc:
            if is_test_module:
                continue  # pytest reports it when it collects the module
            registry.import_errors.append((path, _format_import_error(exc)))
            continue
        for attr, obj in sorted(functions_in(module), key=lambda kv: _source_location(kv[1], module)[1]):
            add(obj, module, attr)
    _disambiguate(registry.functions, opts.rootdir)
    return registry
