"""What failed a session besides its tests, counted in pytest's last line (``3 passed, 1 gate failed``, in red):
aggregate gates, comparison rules, the deploy, result files that could not be written. Each is a category of the
terminal reporter's ``stats``, as failed tests are; the exit status is set where the failure is decided. The words
never start with ``failed``: tools that read that line (pytester's ``parseoutcomes``) count ``N failed`` as failed
tests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from .pytest_private import red_summary_line

__all__ = [
    "COMPARISON",
    "DEPLOY",
    "GATE",
    "REFUSED_DEPLOY",
    "REPLAY",
    "RESULT_FILES",
    "SessionFailure",
    "count_failures",
]

GATE = "gate failed"
COMPARISON = "comparison failed"
DEPLOY = "deploy failed"
REFUSED_DEPLOY = "deploy refused"
RESULT_FILES = "result write failed"
REPLAY = "replay checked nothing"
_WORDS = {
    GATE: (GATE, "gates failed"),
    COMPARISON: (COMPARISON, "comparisons failed"),
    DEPLOY: (DEPLOY, "deploys failed"),
    REFUSED_DEPLOY: (REFUSED_DEPLOY, "deploys refused"),
    RESULT_FILES: (RESULT_FILES, "result writes failed"),
    REPLAY: (REPLAY, "replays checked nothing"),
}


@dataclass
class SessionFailure:
    """One entry of a category in ``stats``: plugins that walk every entry there read them like reports."""

    category: str
    message: str


def count_failures(config: pytest.Config, category: str, messages: list[str]) -> None:
    """Count ``messages`` (one line each: what failed) under ``category`` in the last line, which turns red."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not messages:
        return
    reporter.stats.setdefault(category, []).extend(SessionFailure(category, m) for m in messages)
    red_summary_line(reporter, _WORDS)
