"""The reward functions of a project as the plugin knows them (:class:`RewardFn`, the session's
:class:`Registry`), and finding them in an imported module. No pytest."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..judge.gates import Gates, Marker
from ..reward.spec import is_reward_function
from .loading import is_within

if TYPE_CHECKING:
    from ..reward.spec import RewardSpec

__all__ = ["Registry", "RewardFn", "functions_in", "marks_of"]


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
    marker: Marker = field(default_factory=Marker)
    """Its ``reward`` marker resolved: the gates and the function's own settings."""
    marks: list[Any] = field(default_factory=list)
    bound_files: tuple[Path, ...] = ()
    error: str | None = None
    marker_error: bool = False
    """``error`` is its ``reward`` marker's (invalid, or naming samples files that do not exist): an error in every
    run that finds the function, samples bound or not."""
    attr: str = ""
    """The attribute of ``module`` that holds the function (how a deploy bundle finds it again)."""
    module_file: Path | None = None

    @property
    def where(self) -> str:
        return f"{self.path}::{self.qualname}"

    @property
    def gates(self) -> Gates:
        return self.marker.gates

    @property
    def is_bound(self) -> bool:
        """Whether its marker names its samples files."""
        return bool(self.marker.samples)


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

    def marker_errors(self) -> list[str]:
        """The errors of the functions whose ``reward`` marker is invalid."""
        return [f.error for f in self.functions if f.marker_error and f.error]

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
            elif explicit or self.selected or (globbed and is_within(fn.path.resolve(), path.parent)):
                out.append(fn)
        return out

    def bound_paths(self) -> list[Path]:
        seen: dict[Path, None] = {}
        for fn in self.functions:
            for p in fn.bound_files:
                seen.setdefault(p, None)
        return list(seen)



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
