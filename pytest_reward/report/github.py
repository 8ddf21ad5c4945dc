"""A Markdown summary appended to ``$GITHUB_STEP_SUMMARY`` (GitHub Actions job summary), controller only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..run import RunResult

__all__ = ["append_step_summary", "markdown_summary"]


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_summary(result: RunResult) -> str:
    reports = result.groups
    lines = [
        "### pytest-reward",
        "",
        "| function | samples | n | errors | mean | 95% CI of mean | pass rate | verdict |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for r in reports:
        s = r.summary
        ci = f"[{s.mean_ci['low']:.3f}, {s.mean_ci['high']:.3f}]" if s.mean_ci else "–"
        rate = "–" if s.pass_rate is None else f"{s.pass_rate:.1%}"
        badge = {"PASS": "✅ PASS", "FAIL": "❌ FAIL"}.get(r.verdict, r.verdict)
        lines.append(
            f"| `{_cell(r.function)}` | `{_cell(r.file)}` | {s.n} | {s.n_errors} | {_f(s.mean)} | {ci} | {rate} | {badge} |"
        )
    failures = [f"{r.function} on {r.file}: {g.describe()}" for r in reports for g in r.failed_gates]
    failures += result.compare_failures
    if failures:
        lines += ["", "**Failed gates**", ""]
        lines += [f"- {_cell(f)}" for f in failures]
    if result.comparisons:
        lines += ["", f"Compared with stored run `{result.comparisons[0].baseline}`:", ""]
        lines += [
            "| function | samples | paired | mean before → after | Δ mean (95% CI) |",
            "| --- | --- | ---: | --- | --- |",
        ]
        for c in result.comparisons:
            if c.mean_delta is None:
                lines.append(f"| `{_cell(c.function)}` | `{_cell(c.file)}` | {c.n_paired} | {c.status} | |")
                continue
            d = c.mean_delta
            lines.append(
                f"| `{_cell(c.function)}` | `{_cell(c.file)}` | {c.n_paired} | {_f(c.mean_before)} → {_f(c.mean_after)} "
                f"| {d['estimate']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] |"
            )
    return "\n".join(lines) + "\n"


def append_step_summary(result: RunResult, path: Path) -> None:
    """Append (never truncate: other steps and tools write to the same file)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(markdown_summary(result) + "\n")
