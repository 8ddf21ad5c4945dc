"""The end-of-run reward table, rendered with rich into pytest's terminal writer.

Colour follows pytest's own decision (``--color``, ``NO_COLOR``, ``PY_COLORS``, TTY): the table is rendered into
a string by a rich ``Console`` forced to that choice, then written through the ``TerminalReporter``.
Verbosity: default shows the table; ``-q`` one line per function × file; ``-qq`` only failed gates.
"""

from __future__ import annotations

import io
import shutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..session import GroupReport, RewardSession

__all__ = ["render_table", "write_summary"]


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ci(report: GroupReport) -> str:
    ci = report.summary.mean_ci
    if ci is None:
        return "–"
    return f"[{ci['low']:.3f}, {ci['high']:.3f}]"


def _verdict_style(verdict: str) -> str:
    return {"PASS": "bold green", "FAIL": "bold red"}.get(verdict, "yellow")


def render_table(reports: list[GroupReport], *, markup: bool, width: int) -> str:
    """The per-function table as text (with ANSI styles when ``markup``)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(
        file=io.StringIO(),
        width=width,
        force_terminal=markup,
        no_color=not markup,
        color_system="standard" if markup else None,
        highlight=False,
        emoji=False,
    )
    table = Table(box=box.SIMPLE_HEAD if markup else box.ASCII2, show_edge=False, pad_edge=False)
    table.add_column("function", overflow="fold")
    table.add_column("samples", overflow="fold")
    for name in ("n", "mean", "min", "p10", "pass rate"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("95% CI of mean", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for r in reports:
        s = r.summary
        n = f"{s.n}" + (f" ({s.n_errors} err)" if s.n_errors else "")
        rate = "–" if s.pass_rate is None else f"{s.pass_rate:.1%}"
        table.add_row(
            r.function,
            r.file,
            n,
            _fmt(s.mean),
            _fmt(s.min),
            _fmt(s.p10),
            rate,
            _ci(r),
            f"[{_verdict_style(r.verdict)}]{r.verdict}[/]",
        )
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _terminal_width() -> int:
    return max(60, shutil.get_terminal_size((120, 24)).columns)


def write_summary(tr: Any, rs: RewardSession) -> None:
    """Write the reward section of the terminal summary."""
    reports = rs.reports or []
    verbosity = rs.config.get_verbosity()
    markup = bool(getattr(tr, "hasmarkup", False))
    failed = [(r, g) for r in reports for g in r.failed_gates]
    unevaluated = [(r, g) for r in reports for g in r.gates if not g.evaluated]
    if verbosity >= -1:
        tr.write_sep("=", "reward summary", bold=True)
    if verbosity >= 0:
        tr.write(render_table(reports, markup=markup, width=_terminal_width()))
        method = next((r.summary.mean_ci["method"] for r in reports if r.summary.mean_ci), None)
        if method:
            tr.write_line(
                f"95% CI of the mean: {method}; errored samples count as failures and as the lowest score."
            )
    elif verbosity == -1:
        for r in reports:
            s = r.summary
            rate = "–" if s.pass_rate is None else f"{s.pass_rate:.1%}"
            tr.write_line(
                f"{r.verdict:<7} {r.function} on {r.file}: n={s.n} mean={_fmt(s.mean)} pass rate {rate}"
            )
    for r, g in failed:
        tr.write_line(f"FAIL {r.function} on {r.file}: {g.describe()}", red=True, bold=True)
    if verbosity >= -1:
        for r, g in unevaluated:
            tr.write_line(f"SKIP {r.function} on {r.file}: {g.describe()}", yellow=True)
