"""The files a run writes, as pure functions of its :class:`~pytest_reward.run.result.RunResult` and the session's exit
status: the stored run (``--reward-save`` / ``--reward-autosave``), the report directory (``--reward-report``) and
the GitHub step summary (``$GITHUB_STEP_SUMMARY``).

Two steps, so that no file can disagree with the exit status: :func:`stage_outputs` writes the large part where no
reader looks (before deploy: a run whose files cannot be written is not green), :func:`commit_outputs` writes what
names the final exit status and puts every file in place, each atomically (the report directory as one set). A
failure to write is an error line of the run, never an exception. An interrupted run (Ctrl-C) writes nothing: the
previous files stay as they were.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..run.result import RunResult

__all__ = ["Staged", "Written", "commit_outputs", "stage_outputs", "stored_run_name"]


@dataclass(frozen=True)
class Written:
    """What :func:`commit_outputs` wrote, and what it could not."""

    saved_path: Path | None = None
    report_paths: tuple[Path, ...] = ()
    errors: tuple[str, ...] = field(default_factory=tuple)


@dataclass
class Staged:
    """What :func:`stage_outputs` prepared (nothing is visible yet)."""

    report_staging: Path | None = None
    errors: list[str] = field(default_factory=list)

    def discard(self) -> None:
        if self.report_staging is not None:
            shutil.rmtree(self.report_staging, ignore_errors=True)
            self.report_staging = None


def stored_run_name(result: RunResult) -> str:
    """``--reward-save NAME``, else (``--reward-autosave``) the commit and the time of the run."""
    settings = result.settings
    commit = (result.meta.get("commit") or {}).get("short")
    if settings.save:
        return settings.save
    if settings.autosave and settings.save is None:
        stamp = str(result.meta.get("generated_at", "")).replace("-", "").replace(":", "").replace("T", "_")[:15]
        return f"{commit or 'nocommit'}_{stamp}"
    return commit or "run"


def stage_outputs(result: RunResult) -> Staged:
    """Check the destinations and write the report's rows where no reader looks yet."""
    staged = Staged()
    report_dir = result.settings.report_dir
    if report_dir is not None:
        from .files import stage_report_dir

        try:
            staged.report_staging = stage_report_dir(result, report_dir)
        except UsageError as exc:
            staged.errors.append(str(exc))
        except OSError as exc:
            staged.errors.append(f"could not write the report to {report_dir}: {exc}")
    return staged


def commit_outputs(result: RunResult, staged: Staged, exitstatus: int) -> Written:
    """Store the run and put the result files in place; each names the session's final ``exitstatus``."""
    settings = result.settings
    errors: list[str] = list(staged.errors)
    saved: Path | None = None
    paths: list[Path] = []
    if settings.save is not None or settings.autosave:
        from ..run.baseline import Storage

        try:
            record = dict(result.record, exitstatus=exitstatus)
            saved = Storage(settings.storage).save(record, stored_run_name(result))
        except UsageError as exc:
            errors.append(str(exc))
        except OSError as exc:
            errors.append(f"could not store the run in {settings.storage}: {exc}")
    if staged.report_staging is not None and settings.report_dir is not None:
        from .files import commit_report_dir

        try:
            paths = commit_report_dir(result, staged.report_staging, settings.report_dir, exitstatus)
        except OSError as exc:
            errors.append(f"could not write the report to {settings.report_dir}: {exc}")
        staged.report_staging = None
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        from .github import append_step_summary

        try:
            append_step_summary(result, Path(summary_path), exitstatus)
        except OSError as exc:
            errors.append(f"could not append to GITHUB_STEP_SUMMARY {summary_path}: {exc}")
    return Written(saved, tuple(paths), tuple(errors))
