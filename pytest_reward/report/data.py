"""The report data of a run: ``summary.json``, and what ``report.html`` and the GitHub summary render."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..session import RewardSession

__all__ = ["FORMAT", "report_data"]

FORMAT = "pytest-reward-summary"
VERSION = 1
SAMPLES_SHOWN = 20


def overall_verdict(rs: RewardSession) -> str:
    reports = rs.finish()
    if rs.compare_failures or any(r.verdict == "FAIL" for r in reports):
        return "FAIL"
    return "PASS"


def report_data(rs: RewardSession) -> dict[str, Any]:
    """Plain, JSON-serialisable data of the whole run (see ``pytest_reward/report/html.py`` for its shape)."""
    settings = rs.settings
    groups = []
    for report in rs.finish():
        groups.append(
            {
                "function": report.function,
                "file": report.file,
                "verdict": report.verdict,
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
    if rs.baseline is not None:
        path, base = rs.baseline
        comparison = {
            "baseline": {
                "name": base.get("name", path.stem),
                "path": str(path),
                "saved_at": base.get("generated_at"),
                "commit": base.get("commit"),
            },
            "rules": list(settings.compare_fail),
            "strict": settings.compare_strict,
            "failures": list(rs.compare_failures),
        }
    data: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    data.update(rs.meta())
    data.update({"verdict": overall_verdict(rs), "groups": groups, "comparison": comparison})
    return data
