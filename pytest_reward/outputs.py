"""The files a run writes, as pure functions of its :class:`~pytest_reward.run.RunResult`: the stored run
(``--reward-save`` / ``--reward-autosave``), the report directory (``--reward-report``) and the GitHub step summary
(``$GITHUB_STEP_SUMMARY``). Each file is written atomically; a failure to write is an error line of the run, never
an exception."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError
from .run import RunResult

__all__ = ["Written", "stored_run_name", "write_outputs"]


@dataclass(frozen=True)
class Written:
    """What :func:`write_outputs` wrote, and what it could not."""

    saved_path: Path | None = None
    report_paths: tuple[Path, ...] = ()
    errors: tuple[str, ...] = field(default_factory=tuple)


def stored_run_name(result: RunResult) -> str:
    """``--reward-save NAME``, else (``--reward-autosave``) the commit and the time of the run."""
    settings = result.settings
    commit = (result.meta.get("commit") or {}).get("short")
    if settings.save:
        return settings.save
    if settings.autosave and settings.save is None:
        stamp = (
            str(result.meta.get("generated_at", "")).replace("-", "").replace(":", "").replace("T", "_")[:15]
        )
        return f"{commit or 'nocommit'}_{stamp}"
    return commit or "run"


def write_outputs(result: RunResult) -> Written:
    """Store the run and write the result files that the settings ask for."""
    settings = result.settings
    errors: list[str] = []
    saved: Path | None = None
    paths: list[Path] = []
    if settings.save is not None or settings.autosave:
        from .baseline import Storage

        try:
            saved = Storage(settings.storage).save(dict(result.record), stored_run_name(result))
        except UsageError as exc:
            errors.append(str(exc))
        except OSError as exc:
            errors.append(f"could not store the run in {settings.storage}: {exc}")
    if settings.report_dir is not None:
        from .report.files import write_report_dir

        try:
            paths = write_report_dir(result, settings.report_dir)
        except OSError as exc:
            errors.append(f"could not write the report to {settings.report_dir}: {exc}")
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        from .report.github import append_step_summary

        try:
            append_step_summary(result, Path(summary_path))
        except OSError as exc:
            errors.append(f"could not append to GITHUB_STEP_SUMMARY {summary_path}: {exc}")
    return Written(saved, tuple(paths), tuple(errors))
