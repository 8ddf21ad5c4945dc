"""``--reward-report DIR``: results.jsonl (every sample), summary.json (aggregates), report.html — each atomic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..atomic import atomic_open, atomic_write_text
from .data import report_data

if TYPE_CHECKING:
    from ..run import RunResult

__all__ = ["write_report_dir"]


def write_report_dir(result: RunResult, directory: Path) -> list[Path]:
    """Write the three report files into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / "results.jsonl"
    with atomic_open(results, "w") as fh:
        for report in result.groups:
            report.write_rows(fh)
    data = report_data(result)
    summary = directory / "summary.json"
    atomic_write_text(summary, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    html_path = directory / "report.html"
    from .html import render_html

    atomic_write_text(html_path, render_html(data))
    return [results, summary, html_path]
