"""A Markdown summary appended to ``$GITHUB_STEP_SUMMARY`` (GitHub Actions job summary), controller only.

Names, sample ids and messages are data: each goes in as a code span (:func:`~.text.md_code`) or escaped prose
(:func:`~.text.md_text`), so none can open an HTML comment, embed an image or a link, or break the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..atomic import TEXT_ERRORS
from .text import md_code, md_text

if TYPE_CHECKING:
    from ..run.result import RunResult

__all__ = ["append_step_summary", "markdown_summary"]


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def markdown_summary(result: RunResult, exitstatus: int = 0) -> str:
    from .data import session_verdict

    reports = result.groups
    verdict = session_verdict(result, exitstatus)
    lines = [
        "### pytest-reward",
        "",
        f"Session: {'✅ PASS' if verdict == 'PASS' else '❌ FAIL'} (exit status {exitstatus})",
        "",
        "| function | samples | n | errors | mean | 95% CI of mean | pass rate | verdict |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for r in reports:
        s = r.summary
        ci = f"[{s.mean_ci['low']:.3f}, {s.mean_ci['high']:.3f}]" if s.mean_ci else "–"
        rate = "–" if s.pass_rate is None else f"{s.pass_rate:.1%}"
        badge = {"PASS": "✅ PASS", "FAIL": "❌ FAIL", "ERROR": "❌ ERROR"}.get(r.verdict, r.verdict)
        lines.append(
            f"| {md_code(r.function)} | {md_code(r.file)} | {s.n} | {s.n_errors} | {_f(s.mean)} | {ci} | {rate} | {badge} |"
        )
    failures = [f"{r.function} on {r.file}: {g.describe()}" for r in reports for g in r.failed_gates]
    failures += result.compare_failures
    failures += result.replay_failures
    if failures:
        lines += ["", "**Failed gates**", ""]
        lines += [f"- {md_text(f)}" for f in failures]
    if result.probes:
        lines += [
            "",
            "**Probes** (reward hacking: each mutates every response and checks the score against its rule)",
            "",
            "| function | samples | probe | rule | checked | broke | verdict |",
            "| --- | --- | --- | --- | ---: | ---: | --- |",
        ]
        for p in result.probes:
            badge = {"PASS": "✅ PASS", "FAIL": "❌ FAIL", "ERROR": "❌ ERROR"}.get(p.verdict, p.verdict)
            broke = str(p.broken) if p.verdict in ("PASS", "FAIL") else "–"
            lines.append(
                f"| {md_code(p.function)} | {md_code(p.file)} | {md_code(p.probe)} | {md_code(p.rule)} | "
                f"{p.checked} | {broke} | {badge} |"
            )
    if result.comparisons:
        lines += [
            "",
            f"Compared with stored run {md_code(result.comparisons[0].baseline, in_table=False)} (samples pair by id, else by what they "
            "ask: the conversation without its final answer, the ground truth, the other fields; mean: every "
            "sample of each run; Δ mean: the paired samples):",
            "",
        ]
        lines += [
            "| function | samples | paired | new / removed | responses changed | mean before → after | Δ mean (95% CI) |",
            "| --- | --- | ---: | ---: | ---: | --- | --- |",
        ]
        for c in result.comparisons:
            head = f"| {md_code(c.function)} | {md_code(c.file)} | {c.n_paired} | {c.n_new} / {c.n_removed} |"
            changed = "–" if c.n_response_changed is None else f"{c.n_response_changed} of {c.n_paired}"
            if c.status != "compared":
                lines.append(f"{head} – | {c.status} | |")
                continue
            mean = (
                "–"
                if c.group_mean_before is None
                else f"{_f(c.group_mean_before)} → {_f(c.group_mean_after)}"
            )
            d = c.mean_delta
            delta = "–" if d is None else f"{d['estimate']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
            lines.append(f"{head} {changed} | {mean} | {delta} |")
        changed = [c for c in result.probe_changes if c.status != "unchanged"]
        if changed:
            lines += [
                "",
                "| function | samples | probe | before | now | change |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
            for c in changed:
                mark = {"regressed": "❌ ", "improved": "✅ "}.get(c.status, "")
                lines.append(
                    f"| {md_code(c.function)} | {md_code(c.file)} | {md_code(c.probe)} | {c.counts('before')} | "
                    f"{c.counts('after')} | {mark}{c.status} |"
                )
        warnings = [f"{c.function} on {c.file}: {w}" for c in result.comparisons for w in c.warnings]
        if warnings:
            lines += ["", "**Warnings**", ""]
            lines += [f"- ⚠️ {md_text(w)}" for w in warnings]
    return "\n".join(lines) + "\n"


def append_step_summary(result: RunResult, path: Path, exitstatus: int = 0) -> None:
    """Append (never truncate: other steps and tools write to the same file)."""
    with open(path, "a", encoding="utf-8", errors=TEXT_ERRORS) as fh:
        fh.write(markdown_summary(result, exitstatus) + "\n")
