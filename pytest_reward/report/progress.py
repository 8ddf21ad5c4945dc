"""Progress of long model work (rollouts, evaluations) while a test item runs.

pytest captures a test's output, so progress is written to the terminal with capture suspended. In a terminal, a
rich progress bar appears once the work has run for a second; without a TTY (CI logs), a line once it has run
for a second and one when it ends. Shorter work leaves no trace; nothing under ``-q`` or on xdist workers (their
output is not shown).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from .text import visible

__all__ = ["Progress"]

DELAY = 1.0


class Progress:
    def __init__(self, config: Any, label: str, total: int) -> None:
        self.config = config
        self.label = visible(label)  # names a function and a file: shown as data, never as markup
        self.total = total
        self.enabled = config.get_verbosity() >= 0 and not hasattr(config, "workerinput")
        self._tty = self.enabled and sys.stderr.isatty()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0
        self._announced = False

    def _write(self, text: str) -> None:
        capture = self.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            with capture.global_and_fixture_disabled():
                sys.stderr.write(text)
                sys.stderr.flush()
        else:
            sys.stderr.write(text)

    def _spin(self) -> None:
        if self._done.wait(DELAY):
            return
        if not self._tty:
            self._announced = True
            self._write(f"\nreward: {self.label} ...\n")
            return
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        capture = self.config.pluginmanager.getplugin("capturemanager")
        console = Console(file=sys.__stderr__, force_terminal=True, markup=False)
        columns = (TextColumn("reward {task.description}", markup=False), BarColumn(), TimeElapsedColumn())
        context = capture.global_and_fixture_disabled() if capture is not None else _Null()
        with context, RichProgress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(self.label, total=None)
            while not self._done.wait(0.1):
                bar.update(task)

    def __enter__(self) -> Progress:
        self._start = time.perf_counter()
        if not self.enabled:
            return self
        self._thread = threading.Thread(target=self._spin, name="reward-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._announced:
            self._write(f"reward: {self.label}: done in {time.perf_counter() - self._start:.1f}s\n")


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None
