"""``--reward-executor process``: worker processes on this machine, each fed through its own pipe.

Each worker is a fresh interpreter (``sys.executable``, the controller's environment and working directory; nothing
of the pytest process is inherited, no fork of a threaded process) that imports
:mod:`pytest_reward.scoring.executors.worker`, then the reward functions it is asked for, by path. It talks to the controller
over a socket pair (``multiprocessing.connection`` framing). Each worker holds at most two chunks (one running, one
queued in its socket); a feeder thread per worker writes to the socket, so the controller never blocks on a busy
worker. A worker's death is seen as the end of its socket: the chunk it was scoring is reported lost (the stream
retries it), a chunk still queued behind it is sent again as it was, and a fresh worker takes its place.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import RemoteExecutor, available_cpus
from .worker import FunctionRef, ModuleRef

if TYPE_CHECKING:
    from ...project.functions import RewardFn

__all__ = ["ProcessExecutor"]

_QUIT = object()
_MAIN = (
    "import sys; from pytest_reward.scoring.executors.worker import main; main(int(sys.argv[1]), int(sys.argv[2]))"
)


class _Worker:
    """One worker process, its pipe, its feeder thread and the tasks it holds (oldest first)."""

    def __init__(self, index: int) -> None:
        ours, theirs = socket.socketpair()
        # A fresh interpreter running the worker module (not multiprocessing's spawn, which re-runs the parent's
        # main script in the child: a script that calls pytest.main() unguarded would start pytest again).
        # Its own session: Ctrl-C at the terminal reaches the controller only (which cancels the chunks and ends
        # the workers), and where the kernel groups a session's processes for scheduling (autogroup, Linux desktops
        # and this project's machines), the workers are not squeezed into the pytest process's share. The worker
        # asks to be killed when the controller dies (PR_SET_PDEATHSIG), so it never outlives it.
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MAIN, str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.index = index
        self.pending: dict[int, None] = {}
        self.retiring = False
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._feeder = threading.Thread(target=self._feed, name=f"reward-feeder-{index}", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        while True:
            message = self._outbox.get()
            if message is _QUIT:
                return
            try:
                self.conn.send(message)  # None last: the worker's loop ends
            except (OSError, ValueError):
                return  # the worker died: the controller sees its socket close
            if message is None:
                return

    def send(self, task_id: int, message: Any) -> None:
        self.pending[task_id] = None
        self._outbox.put(message)

    def post(self, message: Any) -> None:
        """A message without an answer (modules to preload)."""
        self._outbox.put(message)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, *, kill: bool = False) -> None:
        """Ask the worker to end after what it holds (``kill``: end it now, with every process it started)."""
        if kill:
            self._outbox.put(_QUIT)
            self.kill_group()
        else:
            self._outbox.put(None)

    def kill_group(self) -> None:
        """SIGKILL the worker's process group: the worker (it leads a session of its own) and whatever the reward
        started in it (a subprocess, a server it forgot to stop), which would otherwise outlive the run."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the worker and all its children are gone already

    def death(self) -> str:
        try:
            code = self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.kill_group()  # what the dead worker started
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (out of memory, or killed)" if name == "SIGKILL" else ""
            return f"worker process {self.process.pid} was killed by {name}{hint}"
        return f"worker process {self.process.pid} exited with code {code}"


class ProcessExecutor(RemoteExecutor):
    """``workers`` processes (default: the CPUs this process may use)."""

    name = "process"
    target = 0.05

    def __init__(self, workers: int | None) -> None:
        super().__init__()
        self.size = workers or available_cpus()
        self._workers: list[_Worker] = []
        self._spawned = 0
        self._owner: dict[int, _Worker] = {}
        self._preload: list[ModuleRef] = []

    def start(self) -> None:
        while len(self._workers) < self.size:
            self._spawn()

    def preload(self, functions: Iterable[RewardFn], rootdir: Path) -> None:
        """Every worker imports these functions' modules now, while pytest collects (and each one started later,
        in its turn)."""
        refs = list(dict.fromkeys(ModuleRef.of(fn, rootdir) for fn in functions))
        self._preload = refs
        for worker in self._workers:
            worker.post((0, None, refs))

    def _spawn(self) -> _Worker:
        worker = _Worker(self._spawned)
        self._spawned += 1
        if self._preload:
            worker.post((0, None, self._preload))
        self._workers.append(worker)
        return worker

    def _capacity(self) -> int:
        return 2 * self.size

    def _submit(self, task_id: int, ref: FunctionRef, payload: list[Any]) -> None:
        self.start()
        live = [w for w in self._workers if w.alive and not w.retiring]
        worker = min(live, key=lambda w: len(w.pending)) if live else self._spawn()
        worker.send(task_id, (task_id, ref, payload))
        self._owner[task_id] = worker

    def _collect(self, block: bool) -> list[tuple[int, str, Any, float]]:
        answers: list[tuple[int, str, Any, float]] = []
        while not answers:
            # A worker's answer, or its death: the pipe's end closes with the process (EOF).
            ready = set(wait([w.conn for w in self._workers], timeout=None if block else 0))
            for worker in list(self._workers):
                if worker.conn in ready:
                    answers += self._drain(worker)
            if not block:
                break
        return answers

    def _drain(self, worker: _Worker) -> list[tuple[int, str, Any, float]]:
        answers = []
        gone = False
        try:
            while worker.conn.poll():
                task_id, status, value, seconds, retiring = worker.conn.recv()
                worker.pending.pop(task_id, None)
                self._owner.pop(task_id, None)
                answers.append((task_id, status, value, seconds))
                worker.retiring = worker.retiring or retiring
        except (EOFError, OSError):
            gone = True
        if gone or worker.retiring:
            reason = worker.death()
            for n, task_id in enumerate(worker.pending):
                self._owner.pop(task_id, None)
                # It scores its tasks in order: the oldest one was running; the others were only queued.
                lost = n == 0 and not worker.retiring
                answers.append((task_id, "died" if lost else "requeue", reason, 0.0))
            worker.pending.clear()
            worker.stop(kill=True)
            self._workers.remove(worker)
            self._spawn()
        return answers

    def _cancel(self, task_ids: list[int]) -> None:
        for task_id in task_ids:
            worker = self._owner.pop(task_id, None)
            if worker is not None and worker in self._workers:
                worker.stop(kill=True)
                self._workers.remove(worker)
        for worker in self._workers:
            worker.pending.clear()

    def close(self) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()
        for worker in workers:
            try:
                worker.process.wait(1.0)
            except subprocess.TimeoutExpired:  # busy in a call that does not return: ended now
                worker.process.kill()
                worker.process.wait()
            worker.kill_group()  # the processes its rewards started and left running
            worker.conn.close()
        self._owner.clear()
