"""The only module of pytest-reward that touches pytest's private API, and why (each has no public equivalent in
pytest 8.4–9.x; the rest of the package uses public API only):

* :class:`TerminalRepr` — the base class of a failure report that writes itself to the terminal (our verdict
  headline in red, then context lines). ``repr_failure`` may return a plain string instead, but then pytest cannot
  colour the headline, nor use ``reprcrash`` for the one-line short summary.
* :func:`fixture_info` — ``FixtureManager.getfixtureinfo``: resolve the fixtures of our stand-in test function once
  per samples file and hand the result to every ``pytest.Function`` item of that file. Without it, pytest resolves
  them again for each of thousands of items (``Function.__init__`` does the same call, privately, per item).
* :func:`import_test_module` — ``_pytest.pathlib.import_path``: discovery imports the test modules that define
  reward functions exactly as pytest's own collection does (same module objects, same ``sys.path`` handling,
  assertion rewriting intact), so each function is found once, not twice under two module names.
* :func:`skip_at_item` — ``Skipped(_use_item_location=True)``: a skip decided while an item runs (a probe that
  applies to no sample) is reported at the item's location, as pytest's own ``skip`` marks are; ``pytest.skip()``
  would name the line of pytest's runner that caught it.
* :func:`red_summary_line` — pytest colours the last line from ``TerminalReporter`` internals (known categories
  of ``stats``; red only for failed tests and errors): a session failed by a gate, a comparison or a deploy would
  end on a green or yellow line. The public ``build_summary_stats_line`` is wrapped on the reporter instance.
* :func:`structured_node_id` — pytest ≥ 9.2 builds a ``Function``'s structured node id from its name without
  splitting off ``[...]``; our items must carry the id pytest parses back from ``--lf`` caches and ``--deselect``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _pytest._code.code import TerminalRepr
from _pytest._io import TerminalWriter

__all__ = [
    "TerminalRepr",
    "TerminalWriter",
    "fixture_info",
    "import_test_module",
    "red_summary_line",
    "skip_at_item",
    "structured_node_id",
]


def fixture_info(collector: pytest.Collector, func: Callable[..., Any]) -> Any:
    """The ``FuncFixtureInfo`` of ``func`` as a test function under ``collector``."""
    return collector.session._fixturemanager.getfixtureinfo(node=collector, func=func, cls=None)


def skip_at_item(reason: str) -> BaseException:
    """The exception that skips the running item, reported at the item's own location (raise it)."""
    return pytest.skip.Exception(reason, _use_item_location=True)


def structured_node_id(nodeid: str) -> Any:
    """The node id pytest ≥ 9.2 parses back from a string id; None on older pytest (ids are plain strings)."""
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest < 9.2
        return None
    return coerce_node_id(nodeid)


def import_test_module(path: Path, config: pytest.Config) -> ModuleType:
    """Import the test module at ``path`` as pytest's collection would."""
    from _pytest.pathlib import import_path

    return import_path(
        path,
        mode=config.getoption("importmode"),
        root=config.rootpath,
        consider_namespace_packages=config.getini("consider_namespace_packages"),
    )


def red_summary_line(reporter: Any, words: Mapping[str, tuple[str, str]]) -> None:
    """Make pytest's last line show the session's own failures like failed tests, in red: ``3 passed, 1 gate
    failed``. pytest counts every ``reporter.stats`` category in that line (``"%d %s" % (count, key)``) but colours
    one it does not know yellow, and the whole line red only for failed tests and errors. ``words``: each of our
    categories and its (singular, plural) text. ``summary_stats`` builds the line through
    ``build_summary_stats_line``, wrapped here once per reporter."""
    build = reporter.build_summary_stats_line
    if getattr(build, "reward_words", None) is not None:
        return

    def build_summary_stats_line() -> tuple[list[tuple[str, dict[str, bool]]], str]:
        parts, color = build()
        ours = False
        out = []
        for text, markup in parts:
            count, _, key = text.partition(" ")
            if key in words:
                ours = True
                text = f"{count} {words[key][count != '1']}"
                markup = {"red": True, "bold": True}
            out.append((text, markup))
        return out, "red" if ours else color

    build_summary_stats_line.reward_words = words  # type: ignore[attr-defined]
    reporter.build_summary_stats_line = build_summary_stats_line
