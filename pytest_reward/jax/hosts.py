"""Collectives across the processes of a ``jax.distributed`` run that fail with a message instead of aborting or
hanging.

What goes wrong without this module (measured with two processes on one machine, CPU, gloo): arrays of different
shapes on two processes make gloo abort the process (SIGABRT, no Python exception), after the other process already
returned a wrong result; a process that never arrives (it died, or it passed ``None`` and went on) leaves the others
blocked in the collective for ever; and JAX's preemption notifier catches SIGTERM, so ``timeout`` or a scheduler
cannot end the hung processes (only SIGKILL does). A gloo collective cannot be interrupted once entered.

So every collective here is two steps:

1. **Arrival.** Each process writes what it is about to do (the collective's name and its shapes) under the
   collective's sequence number in the coordinator's key-value store, then reads every other process's entry,
   waiting at most :attr:`Hosts.timeout` seconds in all. A process missing at the deadline is named in a
   :class:`HostsError` ("process 1 did not arrive within 300 s at ..."); processes that arrived at another
   collective, or with other shapes, are named with what each brought. Every process reads the same entries, so
   every process that arrived decides the same way: all raise, or all go on.
2. **The gather**, entered only when every process arrived with matching shapes: small payloads come back from the
   key-value store itself; arrays (and large payloads, as bytes) go through ``process_allgather`` (gloo on CPU,
   NCCL on GPUs), padded to the longest and cut back (the lengths were agreed in step 1).

The sequence number counts the collectives this process entered: every process runs the same code, so the n-th
collective is the same one everywhere (a process that ran other code is caught by the name check). Entries of a
collective are deleted two collectives later, when every process has certainly read them.

:func:`initialize` starts ``jax.distributed`` with the preemption service off, so SIGTERM keeps its default action
(the process ends), and resolves the coordinator address, process count and id from arguments, the standard
``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` variables, or SLURM's (``srun``).
:func:`current` is the :class:`Hosts` of an initialized run (``None`` in a single process).

A process that dies: the others fail at their next collective, within the timeout, naming it (exit status 1). When
the dead process is process 0 (it runs the coordination service), JAX's distributed client in every other process
notices first, within seconds, and ends its process itself (SIGABRT, with "Terminating process because the JAX
distributed service detected fatal errors ... the leader task was preempted/died"): jaxlib offers no way to turn
that into an exception (its client's ``missed_heartbeat_callback`` cannot be called from Python: ``std::bad_cast``).
After a failed collective, or an uncaught exception, the process skips JAX's shutdown barrier at exit (it would wait
for the missing processes and then abort), so it ends at once with its own status.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_TIMEOUT",
    "TIMEOUT_ENV",
    "Hosts",
    "HostsError",
    "Launch",
    "current",
    "initialize",
]

#: Seconds a process waits at a collective for the others, unless set (``initialize(timeout=)``, the environment
#: variable :data:`TIMEOUT_ENV`, ``--reward-collective-timeout``). Long enough for one host to compile or load
#: while the others wait; short enough that a dead host ends the run within minutes.
DEFAULT_TIMEOUT = 300.0
TIMEOUT_ENV = "PYTEST_REWARD_COLLECTIVE_TIMEOUT"

#: Payloads up to this size travel in the key-value store itself; larger ones through the gloo/NCCL gather.
_INLINE_BYTES = 256 * 1024
_PREFIX = "pytest_reward/collective"


class HostsError(RuntimeError):
    """A collective could not run: a process did not arrive in time, arrived at another collective or with other
    shapes, or the coordinator cannot be reached. The message names the processes.

    ``fatal`` (``lost``: a process or the coordinator is gone, or a gather broke) breaks the run: every later
    collective of this process fails at once with the first such message (a run of many evaluations does not wait
    a timeout for the dead process at each), and at exit the process skips ``jax.distributed``'s shutdown barrier
    (which would wait for the missing processes and then abort it), so it ends with its own exit status. A
    mismatch (other shapes, settings or code on some process) is not fatal: every process that arrived raised the
    same error, and the run can go on."""

    def __init__(self, message: str, *, fatal: bool = True) -> None:
        super().__init__(message)
        self.fatal = fatal
        if fatal:
            _break(message)


_broken: str | None = None  # the first fatal failure's message


def _break(why: str) -> None:
    global _broken
    if _broken is None:
        _broken = why


def _skip_shutdown_when_broken() -> None:
    """At exit (before jax's own handler, registered earlier): after a failed collective, detach the distributed
    client and service without shutting them down. Their shutdown waits at a barrier for every process (a dead one
    never comes) and then aborts; they are left alive (one reference kept) so that no destructor runs it either."""
    if not _broken:
        return
    from jax._src import distributed

    state = distributed.global_state
    _kept.extend(x for x in (state.preemption_sync_manager, state.client, state.service) if x is not None)
    state.preemption_sync_manager = state.client = state.service = None
    import ctypes

    for obj in _kept:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


_kept: list[Any] = []


def _breaking(previous: Any) -> Any:
    """``sys.excepthook`` for a multi-process run: an exception that ends this process (on this process only,
    say) breaks the run, so the process exits at once with status 1 instead of waiting at JAX's shutdown barrier
    for processes that are waiting for it at their next collective."""

    def hook(kind: Any, value: Any, traceback: Any) -> None:
        _break(f"{kind.__name__}: {value}")
        previous(kind, value, traceback)

    return hook


@dataclass(frozen=True)
class Launch:
    """Where this process sits in a multi-process run: the coordinator's ``host:port``, the process count and this
    process's id, and where each came from (for error messages)."""

    coordinator: str
    num_processes: int
    process_id: int
    source: str

    @classmethod
    def resolve(
        cls,
        coordinator: str | None = None,
        num_processes: int | None = None,
        process_id: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Launch | None:
        """The launch from the arguments, else ``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` /
        ``JAX_PROCESS_ID``, else SLURM's ``SLURM_NTASKS`` / ``SLURM_PROCID`` (with the coordinator given). ``None``
        when no coordinator is named anywhere (a single-process run); ``ValueError`` naming the source when the
        values are incomplete or out of range."""
        env = os.environ if environ is None else environ
        sources = []
        if coordinator is None and env.get("JAX_COORDINATOR_ADDRESS"):
            coordinator = env["JAX_COORDINATOR_ADDRESS"]
            sources.append("JAX_COORDINATOR_ADDRESS")
        if not coordinator:
            return None

        def number(value: Any, names: Sequence[str]) -> tuple[int | None, str | None]:
            if value is not None:
                return int(value), None
            for name in names:
                if env.get(name, "").strip():
                    text = env[name].strip()
                    if not text.isdigit():
                        raise ValueError(f"{name}={text!r} is not a non-negative integer")
                    return int(text), name
            return None, None

        count, count_source = number(num_processes, ("JAX_NUM_PROCESSES", "SLURM_NTASKS"))
        index, index_source = number(process_id, ("JAX_PROCESS_ID", "SLURM_PROCID"))
        sources += [s for s in (count_source, index_source) if s]
        where = ", ".join(sources) or "arguments"
        if count is None or index is None:
            missing = " and ".join(
                what
                for what, value in (
                    ("the process count (JAX_NUM_PROCESSES)", count),
                    ("the process id (JAX_PROCESS_ID)", index),
                )
                if value is None
            )
            raise ValueError(f"coordinator {coordinator} is named ({where}) but not {missing}")
        if count < 1 or not 0 <= index < count:
            raise ValueError(
                f"process id {index} and process count {count} ({where}): the id must be in 0..count-1"
            )
        if ":" not in coordinator:
            raise ValueError(f"coordinator {coordinator!r} ({where}) must be host:port")
        return cls(coordinator, count, index, where)


def _timeout_from_env() -> float:
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} must be a positive number of seconds")
    return value


_timeout: float | None = None  # set by initialize(timeout=...); else the environment's, else the default


def initialize(launch: Launch, *, timeout: float | None = None, local_device_ids: Any = None) -> Hosts:
    """Start ``jax.distributed`` for ``launch`` (or join the run already started with the same values) and return
    this process's :class:`Hosts`. The preemption service stays off, so SIGTERM ends the process (JAX's notifier
    would catch it); ``timeout`` (seconds, default :data:`DEFAULT_TIMEOUT` or :data:`TIMEOUT_ENV`) bounds every
    collective and the connection to the coordinator."""
    global _timeout
    import jax
    from jax._src import distributed

    if timeout is not None:
        if not float(timeout) > 0:
            raise ValueError(f"collective timeout must be a positive number of seconds, got {timeout!r}")
        _timeout = float(timeout)
    wait = _timeout if _timeout is not None else _timeout_from_env()
    state = distributed.global_state
    if state.client is None:
        atexit.register(_skip_shutdown_when_broken)  # after jax's handler: runs before it
        sys.excepthook = _breaking(sys.excepthook)
        jax.config.update("jax_enable_preemption_service", False)
        before = signal.getsignal(signal.SIGTERM)
        jax.distributed.initialize(
            launch.coordinator,
            launch.num_processes,
            launch.process_id,
            local_device_ids=local_device_ids,
            initialization_timeout=max(1, int(wait)),
            # a dead process is our collectives' to report (they name it); the coordinator's own heartbeat
            # check would end the others first with its own message
            heartbeat_timeout_seconds=max(100, int(wait) + 30),
            # process 0 waits this long at exit for the others to shut down (a dead one never does)
            shutdown_timeout_seconds=max(1, int(wait)),
        )
        if signal.getsignal(signal.SIGTERM) is not before:  # a jax that installs a handler anyway
            signal.signal(signal.SIGTERM, before or signal.SIG_DFL)
    elif (state.num_processes, state.process_id) != (launch.num_processes, launch.process_id):
        raise ValueError(
            f"jax.distributed is already initialized as process {state.process_id} of {state.num_processes}, "
            f"not {launch.process_id} of {launch.num_processes} ({launch.source})"
        )
    hosts = current()
    assert hosts is not None or launch.num_processes == 1
    return hosts if hosts is not None else Hosts(None, 0, 1, wait)


_current: Hosts | None = None


def current() -> Hosts | None:
    """The :class:`Hosts` of this process's ``jax.distributed`` run, or ``None`` when it runs alone."""
    global _current
    import jax
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None or jax.process_count() < 2:
        return None
    wait = _timeout if _timeout is not None else _timeout_from_env()
    if _current is None or _current._client is not client:
        _current = Hosts(client, jax.process_index(), jax.process_count(), wait)
    _current.timeout = wait
    return _current


class Hosts:
    """The processes of a ``jax.distributed`` run, and collectives among them that cannot abort or hang (see the
    module docstring). Every process must call the same collectives in the same order.

    Attributes:
        index: this process's id (0 writes the run's files).
        count: the number of processes.
        timeout: seconds a collective waits for the others before it raises :class:`HostsError`.
    """

    def __init__(self, client: Any, index: int, count: int, timeout: float) -> None:
        self._client = client
        self.index = int(index)
        self.count = int(count)
        self.timeout = float(timeout)
        self._round = 0

    # -- step 1: arrival through the key-value store ----------------------------------------------------------
    def _key(self, round_: int, process: int) -> str:
        return f"{_PREFIX}/{round_}/{process}"

    def _arrive(self, name: str, payload: bytes, patience: Callable[[], bool] | None = None) -> list[bytes]:
        """Publish ``payload`` for the next collective, named ``name``, and read every process's. Raises
        :class:`HostsError` naming the processes missing at the deadline or at another collective; at a deadline
        where ``patience()`` is true (the missing process is still making progress) the wait starts again."""
        if self.count == 1:  # a run of one process: nobody to wait for
            return [payload]
        if _broken is not None:
            raise HostsError(
                f"{name}: an earlier collective of this run failed, so no other can run: {_broken}"
            )
        self._round += 1
        round_ = self._round
        entry = name.encode("utf-8", "replace")
        blob = struct.pack("<I", len(entry)) + entry + payload
        try:
            self._client.key_value_set_bytes(self._key(round_, self.index), blob)
        except Exception as exc:
            raise HostsError(self._lost(name, exc)) from None
        deadline = time.monotonic() + self.timeout
        got: dict[int, bytes] = {self.index: blob}
        while len(got) < self.count:
            process = min(p for p in range(self.count) if p not in got)
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                got[process] = self._client.blocking_key_value_get_bytes(self._key(round_, process), left_ms)
            except Exception as exc:
                if "DEADLINE" not in str(exc).upper():
                    raise HostsError(self._lost(name, exc)) from None
                if patience is not None and patience():
                    deadline = time.monotonic() + self.timeout
                    continue
                missing = [p for p in range(self.count) if p not in got and not self._arrived(round_, p)]
                raise HostsError(
                    f"{_processes(missing)} did not arrive within {self.timeout:g} s at collective #{round_} "
                    f"({name}) of process {self.index} of {self.count}: dead, stuck, or running other code. "
                    f"Raise the timeout (--reward-collective-timeout, {TIMEOUT_ENV}) if a host is just slow."
                ) from None
        if round_ > 2:
            try:
                self._client.key_value_delete(self._key(round_ - 2, self.index))
            except Exception:  # a store that cannot delete keeps a few bytes more; nothing depends on it
                pass
        payloads = []
        elsewhere = {}
        for process in range(self.count):
            data = got[process]
            (n,) = struct.unpack("<I", data[:4])
            theirs = data[4 : 4 + n].decode("utf-8", "replace")
            if theirs != name:
                elsewhere[process] = theirs
            payloads.append(data[4 + n :])
        if elsewhere:
            shown = "; ".join(f"process {p} at {what!r}" for p, what in sorted(elsewhere.items()))
            raise HostsError(
                f"collective #{round_}: process {self.index} is at {name!r} but {shown}: the processes ran "
                "different code (every process must make the same calls in the same order)",
                fatal=False,
            )
        return payloads

    def _arrived(self, round_: int, process: int) -> bool:
        try:
            return self._client.key_value_try_get_bytes(self._key(round_, process)) is not None
        except Exception:
            return False

    def _lost(self, name: str, exc: BaseException) -> str:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (
            f"collective {name!r}: the coordinator (process 0) cannot be reached from process {self.index}: "
            f"{first[:300]}. Process 0 ended or its host is unreachable."
        )

    # -- the collectives --------------------------------------------------------------------------------------
    def exchange(self, name: str, value: Any, *, patience: Callable[[], bool] | None = None) -> list[Any]:
        """Every process's ``value`` (any picklable object), in process order. Small values travel in the
        key-value store; large ones as bytes through the array gather (lengths agreed first). ``patience``: see
        :meth:`waiting_for`."""
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        head = b"i" + data if len(data) <= _INLINE_BYTES else b"g" + struct.pack("<Q", len(data))
        heads = self._arrive(name, head, patience)
        if all(h[:1] == b"i" for h in heads):
            return [pickle.loads(h[1:]) for h in heads]
        lengths = [len(h) - 1 if h[:1] == b"i" else struct.unpack("<Q", h[1:9])[0] for h in heads]
        buffer = np.zeros(max(lengths), np.uint8)
        if head[:1] == b"g":
            buffer[: len(data)] = np.frombuffer(data, np.uint8)
        rows = self._gather_padded(name, buffer)
        out = []
        for process, (h, n) in enumerate(zip(heads, lengths, strict=True)):
            raw = h[1:] if h[:1] == b"i" else rows[process, :n].tobytes()
            out.append(pickle.loads(raw))
        return out

    def agree(self, name: str, value: Any) -> list[Any]:
        """Every process's ``value``; :class:`HostsError` naming each process's value unless all are equal."""
        values = self.exchange(name, value)
        if any(v != values[0] for v in values[1:]):
            shown = "; ".join(f"process {p}: {v!r:.200}" for p, v in enumerate(values))
            raise HostsError(
                f"{name}: the processes disagree ({shown}); every process must pass the same", fatal=False
            )
        return values

    def step(self) -> None:
        """Count one unit of work this process did alone (another process may be waiting for it: see
        :meth:`waiting_for`)."""
        if self.count == 1:
            return
        try:
            self._client.key_value_increment(f"{_PREFIX}/progress/{self.index}", 1)
        except Exception:  # the coordinator is gone: the next collective says so
            pass

    def waiting_for(self, process: int) -> Callable[[], bool]:
        """A ``patience`` for :meth:`exchange`: true at a deadline when ``process`` counted a :meth:`step` since
        the previous deadline, so a collective waits as long as that process keeps working alone (process 0
        running the run's unshared items, say) and fails :attr:`timeout` seconds after it stopped."""
        seen: list[bytes | None] = [self._progress(process)]

        def moved() -> bool:
            now = self._progress(process)
            moved, seen[0] = now != seen[0], now
            return moved

        return moved

    def _progress(self, process: int) -> bytes | None:
        try:
            return self._client.key_value_try_get_bytes(f"{_PREFIX}/progress/{process}")
        except Exception:
            return None

    def broadcast(self, name: str, value: Any, source: int = 0) -> Any:
        """``value`` as process ``source`` has it, on every process (the others' ``value`` is ignored; ``None``
        is fine)."""
        return self.exchange(name, value if self.index == source else None)[source]

    def barrier(self, name: str) -> None:
        """Return once every process got here (or raise :class:`HostsError` at the timeout)."""
        self._arrive(name, b"")

    def gather_rows(self, name: str, array: np.ndarray) -> list[np.ndarray]:
        """Every process's host array, whose first axis may differ between processes (one host holding fewer
        samples): the lengths are agreed, each array padded to the longest, gathered, and cut back. The other
        axes and the dtype must agree (else :class:`HostsError` naming each process's)."""
        array = np.asarray(array)
        sig = (array.shape[1:], array.dtype.str)
        heads = self._arrive(name, pickle.dumps((array.shape[0], sig)))
        shapes = [pickle.loads(h) for h in heads]
        if any(s[1] != sig for s in shapes):
            shown = "; ".join(
                f"process {p}: {(n, *s[0])} {np.dtype(s[1])}" for p, (n, s) in enumerate(shapes)
            )
            raise HostsError(f"{name}: the arrays do not match beyond the first axis ({shown})", fatal=False)
        longest = max(n for n, _ in shapes)
        padded = np.zeros((longest, *array.shape[1:]), array.dtype)
        padded[: array.shape[0]] = array
        rows = self._gather_padded(name, padded)
        return [rows[p, :n] for p, (n, _) in enumerate(shapes)]

    def fetch(self, name: str, array: Any) -> np.ndarray:
        """A global ``jax.Array`` (batch axis sharded over every process's devices) as one host array on every
        process. Each process's view of the global shape is checked first: a mismatch raises
        :class:`HostsError` instead of aborting in the gather."""
        sig = (tuple(array.shape), str(array.dtype))
        heads = self._arrive(name, pickle.dumps(sig))
        sigs = [pickle.loads(h) for h in heads]
        if any(s != sig for s in sigs):
            shown = "; ".join(f"process {p}: {s[0]} {s[1]}" for p, s in enumerate(sigs))
            raise HostsError(f"{name}: the processes hold different global arrays ({shown})", fatal=False)
        if self.count == 1:
            return np.asarray(array)
        from jax.experimental import multihost_utils

        return self._gather(name, lambda: multihost_utils.process_allgather(array, tiled=True))

    def _gather_padded(self, name: str, array: np.ndarray) -> np.ndarray:
        """(count, *array.shape): the gloo/NCCL gather of equal-shaped host arrays (shapes agreed beforehand)."""
        if self.count == 1:
            return array[None]
        from jax.experimental import multihost_utils

        return self._gather(name, lambda: multihost_utils.process_allgather(array, tiled=False))

    def _gather(self, name: str, gather: Callable[[], Any]) -> np.ndarray:
        """Run the gloo/NCCL gather; a process that dies while it runs breaks the connection (a ``JaxRuntimeError``
        from gloo: "Connection reset by peer"), which becomes a :class:`HostsError` that says so."""
        try:
            return np.asarray(gather())
        except Exception as exc:
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise HostsError(
                f"{name}: the gather among the {self.count} processes failed in process {self.index} ({first}): "
                "another process died or its host went away during it"
            ) from None

    def __repr__(self) -> str:
        return f"Hosts(process {self.index} of {self.count}, timeout={self.timeout:g}s)"


def _processes(ids: Sequence[int]) -> str:
    if not ids:
        return "no process (the store lost the entries)"
    if len(ids) == 1:
        return f"process {ids[0]}"
    return "processes " + ", ".join(map(str, ids))
