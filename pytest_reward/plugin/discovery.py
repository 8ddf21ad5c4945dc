"""Finding reward functions and deciding which samples files each one meets.

Sources, in this order:

1. ``--reward-fn path.py::name`` / ``--reward-fn package.module:name`` (or ``STYLE:`` before either, for a
   trainer's function), else ini ``reward_functions`` (one such entry per line, paths relative to the rootdir) —
   when given, only these functions are used (they select);
2. modules matching ini ``reward_modules`` (default ``main.py reward_*.py *_reward.py rewards.py``) under the
   scan roots that use the API (their text mentions ``reward_function`` or ``pytest_reward``: a module that only
   builds ``reward_model(...)`` or ``combine(...)`` functions counts), imported under a dotted name derived from
   their path relative to the rootdir, so two ``main.py`` files never shadow each other; one that fails to import
   is a collection error naming the error;
3. test modules (ini ``python_files``) under the scan roots that use the API (the same test), imported exactly as
   pytest imports them (same module objects, assertion rewriting intact; pytest reports their import errors).

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
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import DiscoveryError
from ..judge.gates import GateError, Gates, Marker, validate_marker
from ..project.functions import Registry, RewardFn, functions_in, marks_of
from ..project.loading import import_reward_module, walk_files
from ..reward.spec import is_reward_function

if TYPE_CHECKING:
    pass

__all__ = ["DiscoveryOptions", "discover"]


_NEEDLES = (b"reward_function", b"pytest_reward")
"""A module is imported only when its text mentions one of these: a reward-kit ``@reward_function``, or this package
(``from pytest_reward import reward_model``). Other ``main.py`` files under the roots are never executed."""


def _matches(path: Path, patterns: Sequence[str]) -> bool:
    name = path.name
    return any(fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(str(path), pat) for pat in patterns)


def _uses_api(path: Path) -> bool:
    try:
        text = path.read_bytes()
    except OSError:
        return False
    return any(needle in text for needle in _NEEDLES)


def _format_import_error(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}"


_PACKAGE = Path(__file__).resolve().parents[1]


def _source_location(obj: Any, module: ModuleType | None, attr: str = "") -> tuple[Path, int]:
    """Where a reward function is defined. One the package built at run time (``reward_model(...)``,
    ``combine(...)``: its code is ours) is located where the user's module assigns it, ``attr = ...`` (line 1 when
    no such line is found): that is what reports point at and what its ``samples=`` are relative to."""
    inner = inspect.unwrap(getattr(obj, "__trainer_native__", obj))
    try:
        file = inspect.getsourcefile(inner) or inspect.getfile(inner)
        lineno = inner.__code__.co_firstlineno
    except (TypeError, AttributeError):
        file = getattr(module, "__file__", None) or "<unknown>"
        lineno = 0
    home = getattr(module, "__file__", None)
    if (
        home
        and Path(file).resolve().is_relative_to(_PACKAGE)
        and not Path(home).resolve().is_relative_to(_PACKAGE)
    ):
        return Path(home), _assignment_line(Path(home), attr)
    return Path(file), int(lineno)


def _assignment_line(path: Path, attr: str) -> int:
    """The first line of ``path`` that assigns ``attr`` at module level (1 when none does)."""
    if attr:
        pattern = re.compile(rf"^{re.escape(attr)}\s*(:[^=]*)?=[^=]")
        try:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.match(line):
                    return number
        except (OSError, UnicodeDecodeError):
            pass
    return 1


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
    fn_source: str = "--reward-fn"
    """Where ``fn_specs`` come from, as errors name it: ``--reward-fn`` or ``ini reward_functions``."""
    fn_base: Path | None = None
    """The directory a ``path.py::name`` spec is relative to: the rootdir for ini entries, else (None) the
    invocation directory."""


def _load_fn_spec(spec: str, opts: DiscoveryOptions, config: Any) -> tuple[Any, ModuleType | None]:
    from ..trainers.styles import StyleError, native_reward, split_style, unknown_prefix

    given = f"{opts.fn_source} {spec}"
    style, spec_ = split_style(spec)
    if style is None:
        typo = unknown_prefix(spec)  # verll:path.py::f: a misspelt style, not a file named "verll:path.py"
        if typo is not None and not ("::" in spec and _spec_file(spec, opts).is_file()):
            raise DiscoveryError(f"{given}: {typo}")
    obj, module = _load_object(spec_, given, opts, config)
    if style is None and is_reward_function(obj):
        return obj, module
    # A trainer-native function: its style named by the prefix, or read from its parameters (see styles.py).
    try:
        return native_reward(obj, style), module
    except StyleError as exc:
        raise DiscoveryError(f"{given}: {exc}") from None


def _spec_file(spec: str, opts: DiscoveryOptions) -> Path:
    """The file of a ``path.py::name`` spec."""
    path = Path(spec.partition("::")[0])
    return path if path.is_absolute() else (opts.fn_base or opts.invocation_dir) / path


def _load_object(spec: str, given: str, opts: DiscoveryOptions, config: Any) -> tuple[Any, ModuleType]:
    if "::" in spec:
        file_part, _, attr = spec.partition("::")
        path = _spec_file(spec, opts).resolve()
        if not path.is_file():
            raise DiscoveryError(f"{given}: file {file_part} not found")
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
            f"{given}: expected path.py::name or package.module:name (a trainer-native function: "
            f"STYLE:path.py::name)"
        )
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DiscoveryError(f"{given}: {module.__name__} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise DiscoveryError(f"{given}: {attr!r} is {type(obj).__name__}, not a function")
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
    from ..reward.decorator import RewardSpec, get_spec

    path, lineno = _source_location(obj, module, attr)
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
    marker = Marker(gates=opts.defaults)
    other_marks = []
    where = f"@pytest.mark.reward on {_relative(path, opts.rootdir)}::{qualname}"
    reward_marks = []
    for mark in marks_of(module) + marks_of(obj):
        if getattr(mark, "name", None) == "reward":
            reward_marks.append(mark)
        else:
            other_marks.append(mark)
    marker_error = False
    for mark in reward_marks:
        try:
            marker = marker.merged(validate_marker(tuple(mark.args), dict(mark.kwargs), where), "marker")
        except GateError as exc:
            error, marker_error = str(exc), True
    bound: tuple[Path, ...] = ()
    if error is None and marker.samples:
        bound, problem = _resolve_bound(marker.samples, path, opts.rootdir)
        if problem:
            error, marker_error = f"{where}: {problem}", True
    return RewardFn(
        obj=obj,
        spec=spec,
        name=spec.id or getattr(obj, "__name__", "reward"),
        qualname=qualname,
        module=getattr(module, "__name__", "?"),
        path=path,
        lineno=lineno,
        marker=marker,
        marks=other_marks,
        bound_files=bound,
        error=error,
        marker_error=marker_error,
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
        registry.looked_in = [f"{opts.fn_source} {s}" for s in opts.fn_specs]
        for spec in opts.fn_specs:
            try:
                obj, module = _load_fn_spec(spec, opts, config)
            except DiscoveryError as exc:
                where, _, msg = str(exc).partition(": ")
                registry.import_errors.append((where, msg))
                continue
            except Exception as exc:
                registry.import_errors.append((f"{opts.fn_source} {spec}", _format_import_error(exc)))
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
        if not (is_reward_module or is_test_module) or not _uses_api(path):
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
        for attr, obj in sorted(
            functions_in(module), key=lambda kv: _source_location(kv[1], module, kv[0])[1]
        ):
            add(obj, module, attr)
    _disambiguate(registry.functions, opts.rootdir)
    return registry
