"""How a reward item's failure reads: the verdict headline, where the sample is, the conversation excerpt, scores
and metrics — and for a crash, the user's own traceback without pytest's, pluggy's or the plugin's frames."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..judge.results import BELOW, SampleOutcome
from ..judge.wire import OUTCOME_FIELDS
from ..report.text import visible
from .pytest_private import TerminalRepr, TerminalWriter

if TYPE_CHECKING:
    from ..project.functions import RewardFn

__all__ = ["RewardFailure", "RewardRepr", "below_status", "describe_outcome", "user_frames"]

_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])  # the whole package, not only this layer


class RewardFailure(Exception):
    """A verdict (not a crash): the message is the whole report."""

    def __init__(self, headline: str, details: list[str]) -> None:
        super().__init__(headline)
        self.headline = headline
        self.details = details


class _Crash:
    """The ``reprcrash`` of our reports: pytest uses ``message`` for the short summary line."""

    def __init__(self, path: str, lineno: int, message: str) -> None:
        self.path = path
        self.lineno = lineno
        self.message = visible(message)


class RewardRepr(TerminalRepr):
    """A failure report: verdict line, context lines, then (for crashes) the user's traceback."""

    def __init__(
        self, headline: str, lines: Sequence[str], inner: Any = None, location: tuple[str, int] = ("", 0)
    ) -> None:
        self.headline = headline
        self.lines = list(lines)
        self.inner = inner
        self.reprcrash = _Crash(location[0], location[1], headline)

    def toterminal(self, tw: TerminalWriter) -> None:
        # Every line holds data (responses, reasons, ids, names): no control character reaches the terminal.
        tw.line(visible(self.headline), red=True, bold=True)
        for line in self.lines:
            tw.line(visible(line))
        if self.inner is not None:
            tw.line("")
            self.inner.toterminal(tw)


def _truncate(text: str | None, limit: int) -> str:
    if text is None:
        return "∅"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_outcome(outcome: SampleOutcome, fn: RewardFn, verbosity: int) -> list[str]:
    """Context lines of a failing sample: where it is, the conversation, scores, metrics."""
    width = 400 if verbosity > 0 else 120
    lines = [
        f"  sample     {outcome.file}:{outcome.line}  [{outcome.sample_id}]",
        f"  function   {fn.name}  ({fn.path.name}:{fn.lineno})",
        f"  user       {_truncate(outcome.user, width)}",
        f"  assistant  {_truncate(outcome.response, width)}",
    ]
    if outcome.ground_truth is not None:
        lines.append(f"  truth      {_truncate(outcome.ground_truth, width)}")
    if outcome.score is not None:
        gate = f"  (threshold {fn.gates.threshold:g})" if fn.gates.threshold is not None else ""
        lines.append(f"  score      {outcome.score:.4g}{gate}")
    if outcome.reason:
        lines.append(f"  reason     {_truncate(outcome.reason, width)}")
    if outcome.metrics:
        lines.append("  metrics")
        name_w = max(len(n) for n in outcome.metrics)
        for name, m in outcome.metrics.items():
            flag = "" if m.get("valid", True) else "  (invalid)"
            lines.append(f"    {name:<{name_w}}  {m['score']:.4g}  {_truncate(m.get('reason'), width)}{flag}")
    for problem in outcome.failures[1:]:
        lines.append(f"  also       {problem}")
    return lines


def user_frames(excinfo: pytest.ExceptionInfo[BaseException]) -> Any:
    """Traceback without pytest, pluggy or pytest-reward frames (and without __tracebackhide__ frames)."""
    tb = excinfo.traceback.filter(excinfo)
    return tb.filter(
        lambda entry: (
            not str(entry.path).startswith(_PACKAGE_DIR)
            and "/_pytest/" not in str(entry.path)
            and "/pluggy/" not in str(entry.path)
        )
    )


def below_status(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """The terminal status of a sample that missed its threshold but is tolerated by a pass-rate gate."""
    data = getattr(report, "reward", None)
    if report.when == "call" and report.passed and data and data.get("verdict") == BELOW:
        outcomes = data.get("outcomes") or ()
        if outcomes and "pair" in outcomes[0][_EXTRA]:
            return "ranked wrong", "w", "RANKED WRONG"
        return "below threshold", "b", "BELOW THRESHOLD"
    return None


_EXTRA = OUTCOME_FIELDS.index("extra")
