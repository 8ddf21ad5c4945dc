"""``--reward-report DIR``: results.jsonl (every sample), summary.json (aggregates), report.html — one set.

The three files are written into a staging directory beside ``DIR``, which then takes ``DIR``'s place in one step
(:func:`pytest_reward.atomic.replace_directory`): a reader, or a kill at any moment, finds the previous complete
set or the new one, never a mix of two runs. ``DIR`` belongs to the plugin: a directory holding anything else is
refused, never replaced.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..atomic import TEXT_ERRORS, replace_directory, staging_directory
from ..errors import UsageError
from .data import report_data

if TYPE_CHECKING:
    from ..run.result import RunResult

__all__ = ["REPORT_FILES", "commit_report_dir", "stage_report_dir"]

REPORT_FILES = ("results.jsonl", "summary.json", "report.html")


def _check_ours(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"could not write the report to {directory}: it is a file, not a directory")
    if directory.is_dir():
        foreign = sorted(p.name for p in directory.iterdir() if p.name not in REPORT_FILES)
        if foreign:
            raise UsageError(
                f"could not write the report to {directory}: refusing to replace a directory that holds other files "
                f"({', '.join(foreign[:5])}); the report directory is rewritten whole — name a new one"
            )


def stage_report_dir(result: RunResult, directory: Path) -> Path:
    """Check ``directory``, then write results.jsonl (the large part) into a new staging directory beside it."""
    _check_ours(directory)
    staging = staging_directory(directory)
    try:
        with open(staging / "results.jsonl", "w", encoding="utf-8", errors=TEXT_ERRORS) as fh:
            for group in result.groups:
                group.write_rows(fh)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def commit_report_dir(result: RunResult, staging: Path, directory: Path, exitstatus: int) -> list[Path]:
    """Add summary.json and report.html (which name the session's exit status) and put the set in place."""
    from .html import render_html

    try:
        data = report_data(result, exitstatus)
        summary = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        (staging / "summary.json").write_text(summary, "utf-8", errors=TEXT_ERRORS)
        (staging / "report.html").write_text(render_html(data), "utf-8", errors=TEXT_ERRORS)
        replace_directory(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [directory / name for name in REPORT_FILES]
