"""Helpers for end-to-end tests: write small reward projects into a pytester directory."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy  # noqa: F401  (imported before any in-process pytester run: numpy cannot be imported twice)
import pytest
import rich.console
import rich.table  # noqa: F401

try:  # likewise jax (jaxlib cannot be loaded twice in one process: in-process runs must find it imported)
    import jax  # noqa: F401
except ImportError:  # pragma: no cover - the jax extra is part of the dev install
    pass

REPO = Path(__file__).resolve().parents[1]
# In-process runs re-import nothing: when the outer pytest was started as ``.venv/bin/pytest`` (no cwd on
# sys.path) the plugin was imported before the inner session could mark it for assertion rewriting, and the inner
# session says so in a warning that would shift every summary line the tests match. No persistent XLA cache: jax's
# cache is process-wide, and one a model run turned on would follow this worker's later tests (the cache's own tests
# run in subprocesses).
IN_PROCESS = (
    "-p",
    "no:cacheprovider",
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
    "-o",
    "reward_jax_cache_dir=",
)
EXAMPLES = REPO / "examples"


def msgs(user: str, assistant: str | None = None) -> list[dict[str, Any]]:
    out = [{"role": "user", "content": user}]
    if assistant is not None:
        out.append({"role": "assistant", "content": assistant})
    return out


class Project:
    """A reward project inside a pytester directory."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.path = pytester.path
        # An ini file pins the rootdir to the project (and keeps the repo's own settings out).
        pytester.makeini("[pytest]\n")

    def file(self, name: str, text: str) -> Path:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    def jsonl(self, name: str, rows: list[Any]) -> Path:
        lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return path

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest(*IN_PROCESS, *args)

    def run_subprocess(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)

    def result(self, *args: str) -> Any:
        """Run in-process and return the ``RunResult`` the plugin hands to ``pytest_reward_run_finished`` (None
        when the hook was not called)."""
        seen: list[Any] = []

        class Recorder:
            def pytest_reward_run_finished(self, result: Any, session: pytest.Session) -> None:
                seen.append(result)

        self.pytester.inline_run(*IN_PROCESS, *args, plugins=[Recorder()])
        assert len(seen) <= 1, "pytest_reward_run_finished was called more than once"
        return seen[0] if seen else None

    def outcomes(self, *args: str) -> list[dict[str, Any]]:
        """Run in-process and return every per-sample outcome of the run's result (groups whose every outcome
        the result keeps: sample items; file items keep only the samples that reports show), as dicts."""
        result = self.result(*args)
        if result is None:
            return []
        return [
            {f.name: getattr(o, f.name) for f in dataclasses.fields(o) if f.name != "sample"}
            for group in result.groups
            if group.complete_outcomes
            for o in group.outcomes
        ]


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Project:
    # A wide terminal: summary lines and tables are not cut, so tests can match them whole.
    monkeypatch.setenv("COLUMNS", "240")
    return Project(pytester)
