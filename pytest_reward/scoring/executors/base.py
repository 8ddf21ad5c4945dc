"""Where the samples of a ``file`` item are scored: in the pytest process, in worker processes, or on a Ray cluster.

``--reward-executor`` picks one (ini ``reward_executor``):

``thread`` (default)
    In the pytest process: a plain loop, or ``--reward-workers N`` threads (or N concurrent coroutines) for
    I/O-bound rewards (LLM judges, HTTP services). No start-up cost; CPU-bound rewards use one core.
``process``
    ``--reward-workers N`` worker processes on this machine (default: the CPUs this process may use), started once
    per pytest process while it collects. For CPU-bound rewards: math verification, parsers, the code sandbox.
``ray``
    Tasks on a Ray cluster: a local one started for the run (loopback only, no dashboard), or the cluster at
    ``--reward-ray-address``. For more cores than one machine has.

One contract for all three. Samples go to workers in chunks (never one task per sample): a chunk is sized from the
measured cost per sample to about :attr:`RemoteExecutor.target` seconds of work, and each worker holds at most two
(one running, one queued), so at most ``2 × workers`` chunks are in flight and memory stays bounded. Results come
back as plain rows (the outcome's fields, verdict included: :mod:`pytest_reward.judge.wire`) and are yielded **in file
order**, so the item folds exactly what an in-process run folds: the same table, summary, rows, stored run.

Workers load reward functions by import path (:class:`~pytest_reward.scoring.executors.worker.FunctionRef`), never by
unpickling a closure; a function without one is a :class:`~pytest_reward.scoring.executors.worker.ShipError` that names it.
A worker that dies (``os._exit``, an OOM kill, a lost Ray node) costs the chunk it was scoring one retry, one sample
per task, so that only a sample that kills its worker again fails, with the reason; the item says so in a
:class:`RewardExecutorWarning`. No sample is ever dropped. The per-call timeout (``--reward-timeout``, marker
``timeout=``) is applied inside the worker; a ``process`` worker left with a timed-out call still running retires
after answering and is replaced. Ctrl-C (or any end of the stream) cancels the chunks in flight: ``process`` kills
the workers holding them, ``ray`` cancels the tasks.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...judge.results import SampleOutcome
from ..pairs import expand_pairs, pair_scorer, response_samples
from .worker import FunctionRef, ShipError, encode_samples

if TYPE_CHECKING:
    from ...data.samples import Sample
    from ...project.functions import RewardFn
    from ..invoker import Invoker, Passed
    from ..pairs import PairScored

__all__ = [
    "EXECUTORS",
    "Executor",
    "InProcess",
    "RemoteExecutor",
    "RewardExecutorWarning",
    "ShipError",
    "available_cpus",
]

EXECUTORS = ("thread", "process", "ray")


class RewardExecutorWarning(UserWarning):
    """Something the run survived but the user should know: a worker died and a chunk was retried."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class Executor:
    """Scores a stream of samples with one reward function, in order."""

    name = "thread"

    def start(self) -> None:
        """Start workers ahead of use (optional; ``stream`` starts them when needed)."""

    def preload(self, functions: Iterable[RewardFn], rootdir: Path) -> None:
        """Have the started workers import these functions' modules now (optional)."""

    def stream(
        self,
        invoker: Invoker,
        entries: Iterable[Sample | SampleOutcome],
        *,
        segment: int,
        batch: int | None,
        rootdir: Path,
        notes: list[str],
        passes: bool = False,
    ) -> Iterator[SampleOutcome | Passed | PairScored]:
        """Outcomes for ``entries``, in their order: each sample scored, each outcome passed through. A preference
        pair's sample (``Sample.pair``) gives the outcome of each of its responses in turn (the item folds them:
        :class:`~pytest_reward.scoring.pairs.PairFolder`), or, in the in-process loop, one
        :data:`~pytest_reward.scoring.pairs.PairScored` tuple.

        ``segment``: samples with responses are scored in runs of at most this many (memory stays flat; for a
        batch-mode function, batches restart at each run, as in every executor). ``batch``: the batch size of a
        batch-mode function (None: pointwise). ``notes``: what the item should tell the user (retries).
        ``passes``: the caller (a light invoker's file item) folds passing scores itself, so a sample that passes
        without metrics may come as a :data:`~pytest_reward.scoring.invoker.Passed` tuple instead of its outcome
        (``invoker.passed_outcome(*passed)`` is that outcome); an executor may always give outcomes."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop the workers (idempotent)."""


#: Entries the in-process loop reads before it scores them: a block of lines decoded back to back, then a block of
#: calls back to back, keeps each one's code and data warm in the CPU's caches (measured on 100,000 preference
#: pairs with ``math_reward``: the file item's call phase 5.2 s read one at a time, 4.6 s in blocks of 64; larger
#: blocks outlive the young garbage collections and cost more again). Memory stays flat: 64 samples at a time (the
#: other executors hold segments of up to 4096).
READ_BLOCK = 64


class InProcess(Executor):
    """``thread``: scoring in the pytest process (``workers`` threads or coroutines for I/O-bound rewards)."""

    name = "thread"

    def __init__(self, workers: int | None) -> None:
        self.workers = workers or 1

    def stream(
        self,
        invoker: Invoker,
        entries: Iterable[Sample | SampleOutcome],
        *,
        segment: int,
        batch: int | None,
        rootdir: Path,
        notes: list[str],
        passes: bool = False,
    ) -> Iterator[SampleOutcome | Passed | PairScored]:
        if batch is None and self.workers <= 1:
            # In this thread, READ_BLOCK entries read, then scored one by one (a longer segment kept alive would
            # only outlive the young garbage collections and make the full ones frequent). A pair scored whole
            # where its responses can be (pair_scorer), else response by response.
            score, pairs = invoker.sample_scorer(passes=passes), pair_scorer(invoker)
            source = iter(entries)
            while True:
                block = list(islice(source, READ_BLOCK))
                if not block:
                    return
                for entry in block:
                    if entry.__class__ is SampleOutcome:
                        yield entry  # type: ignore[misc]
                    elif entry.pair is None:  # type: ignore[union-attr]
                        yield score(entry)  # type: ignore[arg-type]
                    elif pairs is not None:
                        yield pairs(entry)  # type: ignore[arg-type]
                    else:
                        for response in response_samples(entry):  # type: ignore[arg-type]
                            yield invoker.score_one(response)
        run: list[Sample] = []
        chunk = batch or 32
        for entry in expand_pairs(entries):
            if entry.__class__ is SampleOutcome:
                if run:
                    yield from invoker.score_stream(run, workers=self.workers, chunk=chunk)
                    run = []
                yield entry  # type: ignore[misc]
                continue
            run.append(entry)  # type: ignore[arg-type]
            if len(run) >= segment:
                yield from invoker.score_stream(run, workers=self.workers, chunk=chunk)
                run = []
        if run:
            yield from invoker.score_stream(run, workers=self.workers, chunk=chunk)


class _Task:
    """One chunk in flight: its samples, and which attempt this is (a retry is attempt 1)."""

    __slots__ = ("attempt", "outcomes", "samples")

    def __init__(self, samples: list[Sample], attempt: int = 0) -> None:
        self.samples = samples
        self.attempt = attempt
        self.outcomes: list[SampleOutcome] | None = None


class _Slot:
    """A place in the output order: outcomes made on the controller, or chunks (a retried chunk: several)."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: list[Any]) -> None:
        self.pieces = pieces

    @property
    def done(self) -> bool:
        return all(p.__class__ is not _Task or p.outcomes is not None for p in self.pieces)

    def outcomes(self) -> Iterator[SampleOutcome]:
        for piece in self.pieces:
            if piece.__class__ is _Task:
                yield from piece.outcomes
            else:
                yield from piece


class _Deaths:
    """What the workers' deaths cost one stream: for the item's warning."""

    def __init__(self) -> None:
        self.count = 0
        self.reasons: dict[str, None] = {}
        self.retried = 0
        self.failed = 0

    def note(self, executor: str, fn: str, label: str) -> str | None:
        if not self.count:
            return None
        why = "; ".join(list(self.reasons)[:3])
        times = f"{self.count} time{'s' if self.count != 1 else ''}"
        lost = f"{self.retried} sample{'s' if self.retried != 1 else ''}"
        return (
            f"{fn} on {label}: {executor} workers died {times} while scoring ({why}); the {lost} of the lost "
            f"chunks were retried once, one sample per task: {self.retried - self.failed} scored, {self.failed} "
            "failed (their worker died again; each says so in its error)"
        )


class _Cost:
    """The measured seconds per sample of one function (a moving average over its chunks)."""

    __slots__ = ("chunk", "per_sample")

    def __init__(self, chunk: int) -> None:
        self.per_sample: float | None = None
        self.chunk = chunk
        """Samples per chunk for this cost (:meth:`RemoteExecutor._chunk_size`)."""

    def add(self, seconds: float) -> None:
        self.per_sample = seconds if self.per_sample is None else 0.7 * self.per_sample + 0.3 * seconds


class RemoteExecutor(Executor):
    """Scoring in workers outside the pytest process: chunking, ordering, retries and cancellation here; the
    transport (:meth:`_submit`, :meth:`_collect`, :meth:`_cancel`) in the subclasses."""

    target = 0.05
    """Seconds of work a chunk is sized to, once the cost per sample is known."""
    first_chunk = 8
    max_chunk = 4096

    def __init__(self) -> None:
        self._next_id = 0

    # -- transport ----------------------------------------------------------------------------------------------

    def _capacity(self) -> int:
        """How many chunks may be in flight at once."""
        raise NotImplementedError

    def _submit(self, task_id: int, ref: FunctionRef, payload: list[Any]) -> None:
        raise NotImplementedError

    def _collect(self, block: bool) -> list[tuple[int, str, Any, float]]:
        """Answers that arrived: ``(task id, status, value, seconds)``. Status ``ok`` (value: the rows), ``ship``
        (value: why the function cannot be loaded), ``died`` (value: why the task was lost), ``requeue`` (lost
        through no fault of its own: sent again as it was). ``block``: wait for at least one (interruptibly)."""
        raise NotImplementedError

    def _cancel(self, task_ids: list[int]) -> None:
        raise NotImplementedError

    # -- the stream -----------------------------------------------------------------------------------------

    def _chunk_size(self, batch: int | None, per_sample: float | None) -> int:
        """Samples per chunk: :attr:`first_chunk` until the function's cost per sample is measured, then about
        :attr:`target` seconds of work."""
        if per_sample is None:
            size = self.first_chunk
        else:
            size = int(self.target / max(per_sample, 1e-7))
            size = max(self.first_chunk, min(self.max_chunk, size))
        if batch:  # whole batches, so that a batch-mode function sees the batches an in-process run makes
            size = batch * max(1, round(size / batch))
        return size

    def stream(
        self,
        invoker: Invoker,
        entries: Iterable[Sample | SampleOutcome],
        *,
        segment: int,
        batch: int | None,
        rootdir: Path,
        notes: list[str],
        passes: bool = False,
    ) -> Iterator[SampleOutcome | Passed | PairScored]:
        ref = FunctionRef.of(invoker, rootdir, batch_size=batch or 32, executor=self.name)
        self.start()
        capacity = max(1, self._capacity())
        max_slots = 4 * capacity + 256
        slots: deque[_Slot] = deque()
        inflight: dict[int, tuple[_Slot, _Task]] = {}
        deaths = _Deaths()
        cost = _Cost(self._chunk_size(batch, None))  # of this function: each stream measures its own
        it = iter(
            expand_pairs(entries)
        )  # each response of a pair a sample of its own, folded back by the item
        run: list[Sample] = []
        run_total = 0  # samples since the run began (a batch-mode function's runs end at ``segment``)
        exhausted = False

        def submit(slot: _Slot, task: _Task) -> None:
            task_id = self._next_id = self._next_id + 1
            inflight[task_id] = (slot, task)
            self._submit(task_id, ref, encode_samples(task.samples))

        def flush() -> None:
            nonlocal run
            if run:
                task = _Task(run)
                slot = _Slot([task])
                slots.append(slot)
                submit(slot, task)
                run = []

        try:
            while True:
                while not exhausted and len(inflight) < capacity and len(slots) < max_slots:
                    entry = next(it, None)
                    if entry is None:
                        exhausted = True
                        flush()
                    elif entry.__class__ is SampleOutcome:
                        flush()
                        run_total = 0
                        slots.append(_Slot([[entry]]))
                    else:
                        run.append(entry)  # type: ignore[arg-type]
                        run_total += 1
                        if batch and run_total >= segment:
                            flush()
                            run_total = 0
                        elif len(run) >= cost.chunk:
                            flush()
                while slots and slots[0].done:
                    yield from slots.popleft().outcomes()
                if not slots and exhausted:
                    return
                if not inflight:  # pragma: no cover - a slot that is not done has a task in flight
                    raise RuntimeError("executor stream: a pending slot without a task")
                for task_id, status, value, seconds in self._collect(block=True):
                    self._answer(
                        invoker, inflight, task_id, status, value, seconds, deaths, cost, batch, submit
                    )
        finally:
            if inflight:
                self._cancel(list(inflight))
                inflight.clear()
            note = deaths.note(self.name, invoker.fn.name, invoker.file_label)
            if note:
                notes.append(note)

    def _answer(
        self,
        invoker: Invoker,
        inflight: dict[int, tuple[_Slot, _Task]],
        task_id: int,
        status: str,
        value: Any,
        seconds: float,
        deaths: _Deaths,
        cost: _Cost,
        batch: int | None,
        submit: Any,
    ) -> None:
        entry = inflight.pop(task_id, None)
        if entry is None:
            return  # an answer to a task cancelled meanwhile
        slot, task = entry
        samples = task.samples
        if status == "ok":
            outcomes = []
            for row, sample in zip(value, samples, strict=True):
                outcome = SampleOutcome(*row)
                outcome.sample = sample
                outcomes.append(outcome)
            task.outcomes = outcomes
            if samples and seconds > 0:
                cost.add(seconds / len(samples))
                cost.chunk = self._chunk_size(batch, cost.per_sample)
            return
        if status == "ship":
            fn = invoker.fn
            raise ShipError(
                f"{fn.name} ({fn.where}) cannot be scored by --reward-executor {self.name} workers: {value}. "
                "Workers import a reward function by its module and attribute (they never unpickle a closure): "
                "define it at the top level of a project module, or use --reward-executor thread."
            )
        if status == "requeue":
            submit(slot, task)
            return
        # died (or failed in a way that is not the reward's): one retry, one sample per task when that is possible
        if task.attempt == 0:
            deaths.count += 1
            deaths.reasons.setdefault(str(value), None)
            deaths.retried += len(samples)
            pointwise = not invoker.batch
            parts = [[s] for s in samples] if pointwise and len(samples) > 1 else [samples]
            retries = [_Task(p, attempt=1) for p in parts]
            at = slot.pieces.index(task)
            slot.pieces[at : at + 1] = retries
            for retry in retries:
                submit(slot, retry)
            return
        deaths.count += 1
        deaths.reasons.setdefault(str(value), None)
        deaths.failed += len(samples)
        reason = (
            f"the {self.name} worker scoring this sample died ({value}), on the first try and on the retry"
        )
        task.outcomes = [invoker.outcome(s, None, error=reason) for s in samples]
