"""What runs in a scoring worker (a process of the ``process`` executor, a Ray worker): load a reward function by
its import path, score a chunk of samples, send back plain rows.

Nothing here is pickled by value: a worker receives a :class:`FunctionRef` (names and paths, the function's gates)
and the samples of one chunk as tuples of JSON values, imports the function from the project itself (once per
process), and answers with each outcome's fields as a list (:func:`pytest_reward.judge.wire.outcome_to_wire`), verdict
included, so the controller only folds. A function the worker cannot import is a :class:`ShipError` naming it,
never a pickled closure.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...data.samples import Sample
from ...errors import RewardError
from ...judge.gates import Gates, Marker
from ...judge.wire import outcome_to_wire
from ...project.functions import RewardFn
from ...project.loading import import_reward_module
from ...reward.spec import is_reward_function
from ...rewards.reward_model import configure_engine, engine_settings
from ..invoker import Invoker

if TYPE_CHECKING:
    from multiprocessing.connection import Connection


__all__ = [
    "FunctionRef",
    "ModuleRef",
    "ShipError",
    "decode_samples",
    "encode_samples",
    "main",
    "preload",
    "score_chunk",
    "serve",
]


class ShipError(RewardError):
    """A reward function that a worker cannot load by its import path (the message names it and says why)."""


@dataclass(frozen=True)
class ModuleRef:
    """Where a worker imports a reward function's module from (what :func:`preload` and :func:`load` share)."""

    module: str
    module_file: str | None
    """Absolute path of the module on the controller (None: import ``module`` by name)."""
    rel_file: str | None
    """The same path relative to the rootdir: where a worker finds it in a shipped working directory."""
    rootdir: str
    sys_path: tuple[str, ...] = ()
    """The controller's ``sys.path`` entries under the rootdir (for the module's own imports)."""

    @classmethod
    def of(cls, fn: RewardFn, rootdir: Path) -> ModuleRef:
        module_file = str(fn.module_file) if fn.module_file is not None else None
        root = str(rootdir.resolve())
        rel = None
        if module_file is not None:
            try:
                rel = Path(module_file).relative_to(root).as_posix()
            except ValueError:
                rel = None
        paths = tuple(p for p in sys.path if p and (p == root or p.startswith(root + os.sep)))
        return cls(module=fn.module, module_file=module_file, rel_file=rel, rootdir=root, sys_path=paths)


@dataclass(frozen=True)
class FunctionRef:
    """How a worker finds a reward function again, and how it scores with it: plain data only."""

    name: str
    """The function's name in the run (``relevance.evaluate`` when two functions share a name)."""
    module: str
    attr: str
    module_file: str | None
    """Absolute path of the function's module on the controller (None: import ``module`` by name)."""
    rel_file: str | None
    """The same path relative to the rootdir: where a worker finds it in a shipped working directory."""
    rootdir: str
    file_label: str
    gates: Gates
    runs: int = 1
    timeout: float | None = None
    replay_tolerance: float | None = None
    """``--reward-replay-tolerance``: checked against each sample's recorded score, as on the controller."""
    batch_size: int = 32
    sys_path: tuple[str, ...] = ()
    """The controller's ``sys.path`` entries under the rootdir (for functions imported by module name)."""
    style: str | None = None
    """A trainer-native function's style (``--reward-fn verl:...``, or read from its parameters): the worker
    imports the function as written and wraps it as the controller did (:func:`pytest_reward.trainers.styles.native_reward`)."""
    jax_cache_dir: str | None = None
    """The session's persistent compilation cache, for a reward model the worker loads
    (:func:`pytest_reward.rewards.reward_model.configure_engine`)."""

    @classmethod
    def of(cls, invoker: Invoker, rootdir: Path, *, batch_size: int, executor: str) -> FunctionRef:
        """The reference of ``invoker``'s function; ``ShipError`` when it has no import path a worker can use."""
        fn = invoker.fn
        module_file = str(fn.module_file) if fn.module_file is not None else None
        if not fn.attr or (module_file is None and fn.module in ("__main__", "?", "")):
            raise ShipError(
                f"{fn.name} ({fn.where}) cannot be scored by --reward-executor {executor} workers: it is not an "
                f"attribute of a module a worker could import (module {fn.module!r}). Workers import a reward "
                "function by its module and attribute, they never unpickle a closure: define it at the top level "
                "of a project module, or use --reward-executor thread."
            )
        where = ModuleRef.of(fn, rootdir)
        return cls(
            name=fn.name,
            module=fn.module,
            attr=fn.attr,
            module_file=module_file,
            rel_file=where.rel_file,
            rootdir=where.rootdir,
            file_label=invoker.file_label,
            gates=fn.gates,
            runs=invoker.runs,
            timeout=invoker.timeout,
            replay_tolerance=invoker.replay_tolerance,
            batch_size=batch_size,
            sys_path=where.sys_path,
            style=getattr(fn.obj, "__reward_style__", None),
            jax_cache_dir=engine_settings()["compilation_cache_dir"],
        )

    @property
    def module_ref(self) -> ModuleRef:
        return ModuleRef(self.module, self.module_file, self.rel_file, self.rootdir, self.sys_path)


# --- samples on the wire: tuples of JSON values ------------------------------------------------------------


def encode_samples(samples: list[Sample]) -> list[tuple[Any, ...]]:
    """What a worker needs of each sample: line, id, messages, prompt, ground truth (or none), expect, fields, the
    recorded score (``--reward-replay-tolerance``)."""
    return [
        (s.line, s.id, s.messages, s.prompt, s.has_ground_truth, s.ground_truth if s.has_ground_truth else None,
         s.expect, s.kwargs, s.recorded)
        for s in samples
    ]  # fmt: skip


def decode_samples(rows: list[tuple[Any, ...]], path: Path) -> list[Sample]:
    out = []
    for line, ident, messages, prompt, has_gt, gt, expect, kwargs, recorded in rows:
        if has_gt:
            sample = Sample(path, line, ident, messages, prompt, gt, expect, kwargs)
        else:
            sample = Sample(path, line, ident, messages, prompt, expect=expect, kwargs=kwargs)
        sample.recorded = recorded
        out.append(sample)
    return out


# --- loading functions (once per worker process) -------------------------------------------------------------

_LOADED: dict[FunctionRef, Invoker] = {}


def _import_module(ref: ModuleRef) -> Any:
    for entry in ref.sys_path:  # e.g. directories a conftest put on sys.path, for the module's own imports
        if entry not in sys.path and Path(entry).is_dir():
            sys.path.append(entry)
    if ref.module_file is None:
        return importlib.import_module(ref.module)
    path = Path(ref.module_file)
    root = Path(ref.rootdir)
    if not path.is_file() and ref.rel_file is not None:
        # A shipped working directory (Ray runtime_env): the project's files are under the worker's cwd.
        path, root = Path.cwd() / ref.rel_file, Path.cwd()
    if not path.is_file():
        raise ShipError(f"its module {ref.module_file} is not on the worker's machine ({os.uname()[1]})")
    return import_reward_module(path, root, "prepend")


def preload(refs: list[ModuleRef]) -> None:
    """Import reward modules ahead of their first chunk (a worker does it while pytest collects: a reward module
    that imports sympy or a sandbox costs its seconds there, not in the item). A failure is left for
    :func:`load` to report, with the function's name."""
    for ref in refs:
        try:
            _import_module(ref)
        except Exception:
            continue


def _import(ref: FunctionRef) -> Any:
    module = _import_module(ref.module_ref)
    obj: Any = module
    for part in ref.attr.split("."):
        if not hasattr(obj, part):
            raise ShipError(f"module {module.__name__} has no attribute {ref.attr!r} in the worker")
        obj = getattr(obj, part)
    if ref.style is not None:  # a trainer-native function: wrapped here as on the controller
        from ...trainers.styles import StyleError, native_reward

        try:
            return native_reward(obj, ref.style)
        except StyleError as exc:
            raise ShipError(
                f"{module.__name__}.{ref.attr} as a {ref.style} function in the worker: {exc}"
            ) from None
    if not is_reward_function(obj):
        raise ShipError(f"{module.__name__}.{ref.attr} is not a @reward_function in the worker")
    return obj


def load(ref: FunctionRef) -> Invoker:
    """The worker's invoker of ``ref`` (imported on first use, kept for the process's life)."""
    invoker = _LOADED.get(ref)
    if invoker is None:
        from ...reward.decorator import get_spec

        if ref.jax_cache_dir is not None:
            configure_engine(compilation_cache_dir=ref.jax_cache_dir)

        try:
            obj = _import(ref)
        except ShipError:
            raise
        except Exception as exc:
            raise ShipError(
                f"importing {ref.module_file or ref.module} in the worker failed: {type(exc).__name__}: {exc}"
            ) from None
        fn = RewardFn(
            obj=obj,
            spec=get_spec(obj),
            name=ref.name,
            qualname=ref.attr,
            module=ref.module,
            path=Path(ref.module_file or ref.module),
            lineno=0,
            marker=Marker(gates=ref.gates),
            attr=ref.attr,
        )
        # light: no key, no excerpt; the controller fills them for the outcomes it keeps
        invoker = Invoker(
            fn,
            ref.file_label,
            runs=ref.runs,
            timeout=ref.timeout,
            replay_tolerance=ref.replay_tolerance,
            light=True,
        )
        _LOADED[ref] = invoker
    return invoker


def score_chunk(ref: FunctionRef, payload: list[tuple[Any, ...]]) -> tuple[str, Any, float]:
    """Score one chunk: ``("ok", rows, seconds)`` with one wire row per sample, in order, or ``("ship", message,
    0.0)`` when the function cannot be loaded here. Never raises for what a reward function does."""
    start = time.perf_counter()
    try:
        invoker = load(ref)
    except ShipError as exc:
        return "ship", str(exc), 0.0
    samples = decode_samples(payload, Path(ref.file_label))
    rows = [outcome_to_wire(o) for o in invoker.score_stream(samples, chunk=ref.batch_size)]
    return "ok", rows, time.perf_counter() - start


def abandoned_calls(grace: float = 0.05) -> bool:
    """Whether a reward call that timed out is still running in this process (in its daemon thread)."""
    for thread in threading.enumerate():
        if thread.name == "reward-call":
            thread.join(grace)
            if thread.is_alive():
                return True
    return False


def main(fd: int, controller: int) -> None:
    """Entry point of a ``process`` worker: serve on the socket the controller (process ``controller``) passed as
    file descriptor ``fd``; die with the controller."""
    from multiprocessing.connection import Connection

    _die_with_parent(controller)
    serve(Connection(fd))


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when its parent ends (a worker in a session of its own must not outlive the
    controller, even one killed with SIGKILL while the worker spins in a reward call)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the controller was already gone
        os._exit(1)


def serve(conn: Connection) -> None:
    """The loop of a ``process`` executor worker: ``(task id, ref, payload)`` in, ``(task id, status, value,
    seconds, retiring)`` out; ``(0, None, [ModuleRef, ...])``: modules to :func:`preload`, no answer. A worker left with a timed-out call still running (a thread cannot be killed) says
    it is retiring and exits after its answer: the pool starts a fresh one, and the abandoned call ends with it.
    Ctrl-C is the controller's to handle (it ends the workers); a controller that goes away closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        task_id, ref, payload = task
        if ref is None:  # modules to import now, no answer
            preload(payload)
            continue
        try:
            status, value, seconds = score_chunk(ref, payload)
        except Exception as exc:  # a bug of ours, not the reward's: the controller fails the chunk with it
            status, value, seconds = "error", f"{type(exc).__name__}: {exc}", 0.0
        retiring = abandoned_calls()
        try:
            conn.send((task_id, status, value, seconds, retiring))
        except (EOFError, OSError, BrokenPipeError):
            return
        if retiring:
            conn.close()
            os._exit(0)
