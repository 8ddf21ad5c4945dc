"""The report data of a run: ``summary.json``, and what ``report.html`` and the GitHub summary render."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..run.result import RunResult

__all__ = ["FORMAT", "report_data", "session_verdict"]

FORMAT = "pytest-reward-summary"
VERSION = 1
SAMPLES_SHOWN = 20


def session_verdict(result: RunResult, exitstatus: int) -> str:
    """The run's verdict as the session ended: ``FAIL`` whenever the exit status is not 0 (a failing sample, gate,
    comparison or item, an ordinary test, a failed deploy), never ``PASS`` for a red session."""
    return "PASS" if exitstatus == 0 and result.verdict == "PASS" else "FAIL"


def report_data(result: RunResult, exitstatus: int = 0) -> dict[str, Any]:
    """Plain, JSON-serialisable data of the whole run (see ``pytest_reward/report/html.py`` for its shape)."""
    settings = result.settings
    groups = []
    for report in result.groups:
        groups.append(
            {
                "function": report.function,
                "file": report.file,
                "verdict": report.verdict,
                "errors": list(report.errors),
                "summary": report.summary.to_dict(),
                "gates": [g.to_dict() for g in report.gates],
                "histogram": report.summary.histogram,
                "samples": {
                    "failing": [o.row() for o in report.failing(SAMPLES_SHOWN)],
                    "worst": [o.row() for o in report.worst(SAMPLES_SHOWN)],
                    "preview": [o.row() for o in report.preview(settings.preview or 5, settings.seed)],
                    "flaky": [o.row() for o in report.flaky[:SAMPLES_SHOWN]],
                },
                "comparison": report.comparison.to_dict() if report.comparison else None,
            }
        )
    comparison = None
    if result.baseline is not None:
        path, base = result.baseline, result.baseline_meta
        comparison = {
            "baseline": {
                "name": base.get("name", path.stem),
                "path": str(path),
                "saved_at": base.get("generated_at"),
                "commit": base.get("commit"),
            },
            "rules": list(settings.compare_fail),
            "strict": settings.compare_strict,
            "failures": list(result.compare_failures),
            "warnings": [f"{c.function} on {c.file}: {w}" for c in result.comparisons for w in c.warnings],
            "probes": [c.to_dict() for c in result.probe_changes],
            "pairing": "by id, else by what was asked: the conversation without its final assistant turn, the "
            "ground truth and the other input fields (#2, #3 … on exact duplicates)",
        }
    data: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    data.update(result.meta)
    data.update(
        {
            "verdict": session_verdict(result, exitstatus),
            "exitstatus": exitstatus,
            "groups": groups,
            "comparison": comparison,
            "probes": [p.to_dict() for p in result.probes],
            "replay_failures": list(result.replay_failures),
        }
    )
    return data
