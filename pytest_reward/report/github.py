"""A Markdown summary appended to ``$GITHUB_STEP_SUMMARY`` (GitHub Actions job summary), controller only.

Names, sample ids and messages are data: each goes in as a code span (:func:`~.text.md_code`) or escaped prose
(:func:`~.text.md_text`), so none can open an HTML comment, embed an image or a link, or break the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    lines += _preference_lines(result)
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


def _rate(c: dict[str, Any]) -> str:
    ci = c.get("ci")
    return "–" if not ci else f"{c['accuracy']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def _preference_lines(result: RunResult) -> list[str]:
    """Each preference file's accuracy, overall and per subset (95 % Wilson score intervals), its margins, and
    what a comparison flipped."""
    lines: list[str] = []
    for r in result.groups:
        p = r.summary.preference
        if not p:
            continue
        if not lines:
            lines += [
                "",
                "**Preference pairs** (accuracy: mean credit, a pair right when its chosen response scores above "
                "every rejected one; 95% CI: Wilson score; margin: chosen minus the best rejected score)",
                "",
                "| function | pairs file | subset | pairs | accuracy [95% CI] | ties | errors |",
                "| --- | --- | --- | ---: | --- | ---: | ---: |",
            ]
        rows = [("all", p), *p["subsets"].items()]
        for name, c in rows:
            subset = "all" if name == "all" and c is p else md_code(name)
            lines.append(
                f"| {md_code(r.function)} | {md_code(r.file)} | {subset} | {c['n']} | {_rate(c)} | "
                f"{c['n_tied']} | {c['n_errors']} |"
            )
    margins = []
    for r in result.groups:
        p = r.summary.preference
        m = p.get("margin") if p else None
        if m:
            q = m["quantiles"]
            margins.append(
                f"| {md_code(r.function)} | {md_code(r.file)} | {_f(m['mean'])} | {_f(m['min'])} | {_f(q['0.1'])} | "
                f"{_f(q['0.5'])} | {_f(q['0.9'])} | {_f(m['max'])} | {m['n_negative']} | {m['n_zero']} |"
            )
    if margins:
        lines += [
            "",
            "| function | pairs file | mean margin | min | p10 | median | p90 | max | negative | zero |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *margins,
        ]
    for c in result.comparisons:
        p = c.preference
        if not p or p["before"] is None or p["after"] is None:
            continue
        flipped = ", ".join(md_code(str(f["id"] or f["key"]), in_table=False) for f in p["flipped"][:10])
        more = f" and {p['n_flipped'] - 10} more" if p["n_flipped"] > 10 else ""
        lines += [
            "",
            f"- {md_code(c.function, in_table=False)} on {md_code(c.file, in_table=False)}: accuracy "
            f"{p['before']:.1%} → {p['after']:.1%}; {p['n_flipped']} pair(s) flipped right → wrong"
            + (f": {flipped}{more}" if flipped else "")
            + f"; {p['n_fixed']} fixed",
        ]
        for name, sub in p["subsets"].items():
            if sub["delta"] is not None:
                lines.append(
                    f"  - subset {md_code(name, in_table=False)}: {sub['before']:.1%} → {sub['after']:.1%} "
                    f"({sub['n_flipped']} flipped)"
                )
    return lines


def append_step_summary(result: RunResult, path: Path, exitstatus: int = 0) -> None:
    """Append (never truncate: other steps and tools write to the same file)."""
    with open(path, "a", encoding="utf-8", errors=TEXT_ERRORS) as fh:
        fh.write(markdown_summary(result, exitstatus) + "\n")
