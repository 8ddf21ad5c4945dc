"""Ledgers of a reward function's own scores: what the items that score a file's samples give their own responses,
handed to the function's probes so that they need not score those samples again.

Collection makes one ledger per probed function × file and hands it to both sides: the items write to it as they
score (:class:`FileScores` for a file item, which streams the file; :class:`SampleScores` for sample items, one
sample each), the probes' target takes what it holds once (``take``) and scores the samples it lacks itself.
After ``take`` a ledger records nothing more. Nothing else holds or clears these scores: an item without a ledger
(the function has no probes) records nothing.

A score is a float, NaN for none (an error, an invalid result); ``passed`` is whether the sample's verdict is a pass.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from typing import Any

from ..data.samples import Sample
from .mutations import response_text

__all__ = ["FileScores", "SampleScores", "text_of"]


def text_of(record: Any) -> str | None:
    """The response of a sample the probes mutate (its conversation ends with an assistant turn of text); None for
    anything else (a prompt-only sample, a tool-call turn, a line that could not be read)."""
    if isinstance(record, Sample) and record.messages is not None:
        return response_text(record.messages)
    return None


class SampleScores:
    """Sample granularity: each sample item records its sample's score and verdict, by the sample's identity (the
    items and the probes' target share the sample objects read at collection)."""

    __slots__ = ("_scores", "taken")

    def __init__(self) -> None:
        self._scores: dict[int, tuple[float, bool]] = {}
        self.taken = False
        """The probes have read the scores: nothing more is recorded."""

    def record(self, sample: Sample, score: float | None, passed: bool) -> None:
        """The score (None: no valid score) and verdict a sample item gave ``sample``."""
        if not self.taken:
            self._scores[id(sample)] = (math.nan if score is None else score, passed)

    def take(self) -> dict[int, tuple[float, bool]]:
        """What was recorded, by ``id`` of the sample, once; nothing is recorded after this."""
        self.taken = True
        out, self._scores = self._scores, {}
        return out


class FileScores:
    """File granularity: what a file item gave the samples of its file that have a response (:func:`text_of`),
    aligned with those samples in file order (the probes' numbering): one score (NaN: none), one verdict byte and one
    byte saying whether the item scored the sample (a duplicate id is an error of the file item, not a call: the
    probes score it themselves), 10 bytes a sample. Kept only from a run that went through the whole file; taken once
    (a later run records nothing)."""

    __slots__ = ("_pending", "complete", "known", "scores", "taken", "verdict_pass")

    def __init__(self) -> None:
        self.scores = array("d")
        self.verdict_pass = bytearray()
        self.known = bytearray()
        self.complete = False
        """The item's run went through the whole file: every scored sample's outcome is in."""
        self.taken = False
        """The probes have read them (or scored the samples themselves): nothing more to record."""
        self._pending: deque[tuple[int, int]] = deque()
        """(line, index) of the samples handed to the executor whose outcome has not come back yet."""

    text_of = staticmethod(text_of)

    def start(self) -> bool:
        """A run of the item begins: what an earlier, unfinished run recorded is dropped. False (nothing to
        record) once the probes have taken the scores."""
        self.scores, self.verdict_pass, self.known = array("d"), bytearray(), bytearray()
        self.complete = False
        self._pending.clear()
        return not self.taken

    def note(self, record: Sample, scored: bool) -> None:
        """A sample of the file, in file order; ``scored``: handed to the executor (its outcome follows)."""
        if text_of(record) is None:
            return
        index = len(self.scores)
        self.scores.append(math.nan)
        self.verdict_pass.append(0)
        self.known.append(0)
        if scored:
            self._pending.append((record.line, index))

    def record(self, line: int, score: float | None, passed: bool) -> None:
        """An outcome of the item's stream (in file order): the next noted sample's when it is at ``line``."""
        pending = self._pending
        if pending and pending[0][0] == line:
            index = pending.popleft()[1]
            self.scores[index] = math.nan if score is None else score
            self.verdict_pass[index] = passed
            self.known[index] = 1

    def finish(self) -> None:
        """The item's stream ended: complete when every noted sample's outcome came back."""
        self.complete = not self._pending
        self._pending.clear()

    def take(self) -> tuple[array, bytearray, bytearray] | None:
        """Scores, verdicts and which samples the item scored, once, when its run was complete; None otherwise.
        Nothing is recorded after this."""
        self.taken = True
        if not self.complete:
            self.start()
            return None
        out = (self.scores, self.verdict_pass, self.known)
        self.scores, self.verdict_pass, self.known = array("d"), bytearray(), bytearray()
        self.complete = False
        return out
