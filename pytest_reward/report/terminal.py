"""The end-of-run reward table, rendered with rich into pytest's terminal writer.

Colour follows pytest's own decision (``--color``, ``NO_COLOR``, ``PY_COLORS``, TTY): the table is rendered into
a string by a rich ``Console`` forced to that choice, then written through the ``TerminalReporter``.
Verbosity: default shows the table; ``-q`` one line per function × file; ``-qq`` only failed gates.
"""

from __future__ import annotations

import io
import re
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .text import visible

if TYPE_CHECKING:
    from rich.text import Text

    from ..run.result import GroupResult, ProbeResult, RunResult
    from .outputs import Written

__all__ = [
    "render_comparison",
    "render_preview",
    "render_probe_changes",
    "render_probes",
    "render_table",
    "terminal_width",
    "write_summary",
]


def _fmt(value: float | None, digits: int = 3) -> str:
    """Fixed decimals for reward-sized numbers; four significant digits for large ones (perplexities)."""
    if value is None:
        return "–"
    if abs(value) >= 10_000:
        return f"{value:.4g}"
    return f"{value:.{digits}f}"


def _ci(report: GroupResult) -> str:
    ci = report.summary.mean_ci
    if ci is None:
        return "–"
    return f"[{_fmt(ci['low'])}, {_fmt(ci['high'])}]"


def _verdict_style(verdict: str) -> str:
    return {"PASS": "bold green", "FAIL": "bold red", "ERROR": "bold red"}.get(verdict, "yellow")


def _cell(text: object, style: str = "") -> Text:
    """A table cell of data: never parsed as rich markup, its control characters made visible."""
    from rich.text import Text

    return Text(visible(text), style=style)


def _line(tr: Any, text: str, **markup: bool) -> None:
    """One line of the summary through pytest's writer, its data made safe for the terminal."""
    tr.write_line(visible(text), **markup)


def render_table(reports: Sequence[GroupResult], *, markup: bool, width: int) -> str:
    """The per-function table as text (with ANSI styles when ``markup``)."""
    from rich import box
    from rich.table import Table

    console = _console(markup, width)
    table = Table(box=box.SIMPLE_HEAD if markup else box.ASCII2, show_edge=False, pad_edge=False)
    table.add_column("function", no_wrap=True)
    table.add_column("samples", no_wrap=True)
    for name in ("n", "mean", "min", "p10", "pass rate"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("95% CI of mean", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for r in reports:
        s = r.summary
        n = f"{s.n}" + (f" ({s.n_errors} err)" if s.n_errors else "")
        rate = "–" if s.pass_rate is None else f"{s.pass_rate:.1%}"
        table.add_row(
            _cell(r.function),
            _cell(r.file),
            n,
            _fmt(s.mean),
            _fmt(s.min),
            _fmt(s.p10),
            rate,
            _ci(r),
            _cell(r.verdict, _verdict_style(r.verdict)),
        )
    if _fits(console, table, width):
        console.print(table)
    else:  # one block per function × file (wrapped between words, never cutting a name or a number)
        for r in reports:
            _print_wrapped(console, _narrow_line(r), width, head=(len(r.verdict), _verdict_style(r.verdict)))
    return _output(console)


def _narrow_line(r: GroupResult) -> str:
    s = r.summary
    n = f"{s.n}" + (f" ({s.n_errors} err)" if s.n_errors else "")
    rate = "–" if s.pass_rate is None else f"{s.pass_rate:.1%}"
    return (
        f"{r.verdict:<7} {visible(r.function)} on {visible(r.file)}: n={n} mean {_fmt(s.mean)} (95% CI {_ci(r)}) "
        f"min {_fmt(s.min)} p10 {_fmt(s.p10)} pass rate {rate}"
    )


def _rate(counts: dict[str, Any]) -> str:
    ci = counts["ci"]
    return f"{counts['accuracy']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]" if ci else "–"


def preference_lines(reports: Sequence[GroupResult]) -> list[str]:
    """Each preference file's accuracy (with its Wilson interval), its subsets' and its margins' distribution
    (the table above reads the margins as the scores: n, mean, min, p10)."""
    lines = []
    for r in reports:
        p = r.summary.preference
        if not p:
            continue
        credit = f"{p['credit']:g}" if p["credit"] != int(p["credit"]) else f"{int(p['credit'])}"
        extra = []
        if p["n_tied"]:
            extra.append(f"{p['n_tied']} tied at the top")
        if p["n_errors"]:
            extra.append(f"{p['n_errors']} errored")
        if p["n_best_of_n"]:
            extra.append(f"{p['n_best_of_n']} best-of-n")
        lines.append(
            f"{r.function} on {r.file}: pair accuracy {_rate(p)} ({credit} of {p['n']} pairs"
            + (f"; {', '.join(extra)}" if extra else "")
            + ")"
        )
        if p["subsets"]:
            width = max(len("subset"), *(len(name) for name in p["subsets"]))
            lines.append(f"  {'subset':<{width}}  {'pairs':>5}  accuracy [95% CI]")
            for name, c in p["subsets"].items():
                lines.append(f"  {name:<{width}}  {c['n']:>5}  {_rate(c)}")
        m = p.get("margin")
        if m:
            q = m["quantiles"]
            lines.append(
                f"  margin (chosen − best rejected): mean {m['mean']:.3f}, min {m['min']:.3f}, p10 {q['0.1']:.3f}, "
                f"p25 {q['0.25']:.3f}, median {q['0.5']:.3f}, p75 {q['0.75']:.3f}, p90 {q['0.9']:.3f}, "
                f"max {m['max']:.3f}; {m['n_negative']} negative, {m['n_zero']} zero"
            )
    if lines:
        lines.append(
            "pair accuracy: mean credit over the pairs (chosen strictly above every rejected response: 1; a tie: 0, "
            "or 1/k at the top of a best-of-n set), 95% CI: Wilson score; an errored pair counts as wrong."
        )
    return lines


def terminal_width() -> int:
    """The width to render for: ``COLUMNS`` when set, else the terminal's, else (no terminal: a CI log) 80."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def write_summary(tr: Any, result: RunResult, written: Written, *, dist: str = "no") -> None:
    """Write the reward section of the terminal summary (``dist``: pytest-xdist's ``--dist`` mode)."""
    reports = result.groups
    settings = result.settings
    verbosity = tr.config.get_verbosity()
    markup = bool(getattr(tr, "hasmarkup", False))
    failed = [(r, g) for r in reports for g in r.failed_gates]
    unevaluated = [(r, g) for r in reports for g in r.gates if not g.evaluated]
    if verbosity >= -1:
        tr.write_sep("=", "reward summary", bold=True)
    if verbosity >= 0 and reports:
        tr.write(render_table(reports, markup=markup, width=terminal_width()))
        method = next((r.summary.mean_ci["method"] for r in reports if r.summary.mean_ci), None)
        if method:
            note = f"95% CI of the mean: {method}; errored samples count as failures and as the lowest score."
            for line in _wrap(visible(note), terminal_width()):
                tr.write_line(line)
    elif verbosity == -1:
        for r in reports:
            s = r.summary
            rate = "–" if s.pass_rate is None else f"{s.pass_rate:.1%}"
            _line(
                tr, f"{r.verdict:<7} {r.function} on {r.file}: n={s.n} mean={_fmt(s.mean)} pass rate {rate}"
            )
    if verbosity >= 0 and any(r.summary.preference for r in reports):
        for text in preference_lines(reports):
            for line in _wrap(visible(text), terminal_width()):
                tr.write_line(line)
    if verbosity >= 0:
        for r in reports:
            ro = r.summary.rollout
            if ro and ro["n"] > 1:  # one response per prompt: pass@1 is the pass rate of the table
                n = int(ro["n"])
                _line(
                    tr,
                    f"{r.function} on {r.file}: {n} responses per prompt: pass@1 {ro.get('pass@1', 0):.3f}, "
                    f"pass@{n} {ro.get(f'pass@{n}', 0):.3f}, best-of-{n} mean {ro.get('best_of_n', 0):.3f}",
                )
        if result.rollout_calls:
            _line(
                tr,
                f"reward: rollouts: {result.rollout_calls} call(s) to the model, {result.rollout_seconds:.1f}s",
            )
            if dist == "load":
                _line(
                    tr,
                    "reward: with --dist load, workers roll out the chunks their own items need (a chunk may be "
                    "rolled out by several); --dist loadfile keeps each samples file on one worker",
                )
    if result.probes:
        write_probes(tr, result.probes, verbosity, markup)
    if result.comparisons and verbosity >= -1:
        tr.write(
            render_comparison(
                result.comparisons, result.comparisons[0].baseline, markup=markup, width=terminal_width()
            )
        )
    if result.probe_changes and verbosity >= -1:
        tr.write(render_probe_changes(result.probe_changes, markup=markup, width=terminal_width()))
    for r in reports:
        for reason in r.errors[:3]:
            _line(tr, f"ERROR {r.function} on {r.file}: an item ended without a verdict ({reason})", red=True)
    for r, g in failed:
        _line(tr, f"FAIL {r.function} on {r.file}: {g.describe()}", red=True, bold=True)
    for line in (*result.compare_failures, *result.replay_failures):
        _line(tr, f"FAIL {line}", red=True, bold=True)
    for line in written.errors:
        _line(tr, f"ERROR {line}", red=True, bold=True)
    if verbosity >= -1:
        for r, g in unevaluated:
            _line(tr, f"SKIP {r.function} on {r.file}: {g.describe()}", yellow=True)
        for r in reports:
            if r.summary.n_flaky:
                names = ", ".join(f"{o.sample_id} (sd {o.extra.get('spread', 0):.3f})" for o in r.flaky[:5])
                more = f" and {r.summary.n_flaky - 5} more" if r.summary.n_flaky > 5 else ""
                _line(
                    tr,
                    f"FLAKY {r.function} on {r.file}: {r.summary.n_flaky} samples vary across runs by more than "
                    f"sd {settings.flaky_spread:g}: {names}{more}",
                    yellow=True,
                )
            if r.summary.n_replayed:
                _line(
                    tr,
                    f"REPLAY {r.function} on {r.file}: {r.summary.n_replay_differ} of {r.summary.n_replayed} "
                    f"samples differ from the recorded score by more than {settings.replay_tolerance:g}",
                    yellow=bool(r.summary.n_replay_differ),
                )
    if settings.preview and verbosity >= -1:
        tr.write_sep("-", "reward preview")
        tr.write(
            render_preview(reports, settings.preview, settings.seed, markup=markup, width=terminal_width())
        )
    if written.saved_path is not None:
        _line(tr, f"reward: stored this run as {written.saved_path}")
    for path in written.report_paths:
        _line(tr, f"reward: wrote {path}")


def render_probes(probes: Sequence[ProbeResult], *, markup: bool, width: int) -> str:
    """The probes table: one row per reward function × samples file × probe."""
    from rich import box
    from rich.table import Table

    console = _console(markup, width)
    table = Table(box=box.SIMPLE_HEAD if markup else box.ASCII2, show_edge=False, pad_edge=False)
    table.add_column("function", no_wrap=True)
    table.add_column("samples", no_wrap=True)
    table.add_column("probe", no_wrap=True)
    table.add_column("rule", no_wrap=True)
    for name in ("checked", "broke", "mean own → probed"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for p in probes:
        means = "–" if p.mean_mutated is None else f"{_fmt(p.mean_original)} → {_fmt(p.mean_mutated)}"
        broke = "–" if p.verdict in ("INFO", "SKIP", "ERROR") else str(p.broken)
        table.add_row(
            _cell(p.function),
            _cell(p.file),
            _cell(p.probe),
            _cell(p.rule),
            str(p.checked),
            broke,
            means,
            _cell(p.verdict, _verdict_style(p.verdict)),
        )
    if _fits(console, table, width):
        console.print(table)
    else:  # one block per probe
        for p in probes:
            line = visible(f"{p.verdict:<7} probe {p.probe} of {p.function} on {p.file} ({p.rule}): ")
            line += f"{p.checked} checked" + (
                f", {p.broken} broke the rule" if p.verdict in ("PASS", "FAIL") else ""
            )
            _print_wrapped(console, line, width, head=(len(p.verdict), _verdict_style(p.verdict)))
    return _output(console)


#: Checks among the probes whose counts are not of mutated responses (groups of responses, samples two functions
#: agree on): their line is their note.
COUNTS_NO_MUTATIONS = ("abstaining_groups", "reference")


def _probe_line(p: ProbeResult) -> str:
    if p.verdict == "ERROR":
        return f"the item ended without a verdict ({p.crashes[0] if p.crashes else 'no reason'})"
    if p.verdict in ("SKIP", "INFO") or p.probe in COUNTS_NO_MUTATIONS:
        return p.note
    text = f'{p.broken} of {p.checked} mutated responses break "{p.rule}"'
    if p.examples:
        e = p.examples[0]
        mutated = " ".join(e.mutated.split())
        mutated = mutated if len(mutated) <= 60 else mutated[:59] + "…"
        text += f" (e.g. {p.file}:{e.line}: {mutated!r}: {e.problem})"
    return text


def write_probes(tr: Any, probes: Sequence[ProbeResult], verbosity: int, markup: bool) -> None:
    """The probes section: the table (default verbosity), then one line per probe that failed, errored, was
    skipped or reports (``info``); ``-q`` keeps the lines, ``-qq`` only the failures."""
    if verbosity >= 0:
        tr.write_sep("-", "reward probes")
        tr.write(render_probes(probes, markup=markup, width=terminal_width()))
    for p in probes:
        where = f"probe {p.probe} of {p.function} on {p.file}: {_probe_line(p)}"
        if p.verdict in ("FAIL", "ERROR"):
            _line(tr, f"{p.verdict} {where}", red=True, bold=True)
        elif verbosity >= -1 and p.verdict == "INFO":
            _line(tr, f"INFO {where}", cyan=True)
        elif verbosity >= -1 and p.verdict == "SKIP":
            _line(tr, f"SKIP {where}", yellow=True)
        elif verbosity >= 0 and p.note:
            _line(tr, f"NOTE probe {p.probe} of {p.function} on {p.file}: {p.note}", yellow=True)


def _console(markup: bool, width: int) -> Any:
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        width=width,
        force_terminal=markup,
        no_color=not markup,
        color_system="standard" if markup else None,
        markup=False,  # data is never markup: styles come from Text objects
        highlight=False,
        emoji=False,
    )


def _clip(text: str | None, limit: int) -> str:
    """One line of at most ``limit`` characters, safe for the terminal."""
    if text is None:
        return "–"
    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return visible(text)


def render_preview(reports: Sequence[GroupResult], n: int, seed: int, *, markup: bool, width: int) -> str:
    """``--reward-preview``: a few samples per function with their conversations, scores and reasons."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = _console(markup, width)
    for r in reports:
        shown = r.preview(n, seed)
        if not shown:
            continue
        table = Table(
            title=Text(
                f"{visible(r.function)} on {visible(r.file)}: {len(shown)} of {r.summary.n} samples (worst first, "
                f"then random; seed {seed})"
            ),
            box=box.SIMPLE_HEAD if markup else box.ASCII2,
            show_lines=True,
            title_justify="left",
        )
        table.add_column("sample", no_wrap=True)
        table.add_column("user", overflow="fold", ratio=3)
        table.add_column("response", overflow="fold", ratio=3)
        truths = any(o.ground_truth is not None for o in shown)
        if truths:
            table.add_column("ground truth", overflow="fold", ratio=2)
        table.add_column("score", justify="right", no_wrap=True)
        table.add_column("metrics", overflow="fold", ratio=2)
        table.add_column("reason", overflow="fold", ratio=2)
        table.add_column("verdict", no_wrap=True)
        for o in shown:
            metrics = "\n".join(f"{visible(k)} {m['score']:.3g}" for k, m in o.metrics.items()) or "–"
            reason = o.reason if o.error is None else o.error
            style = {"pass": "green", "fail": "red", "below": "yellow"}.get(o.verdict, "")
            verdict = Text(visible(o.verdict), style=style)
            problems = o.failures or o.below
            if problems and problems[0] != reason:
                verdict.append("\n" + _clip(problems[0], 80))
            table.add_row(
                Text(f"{visible(o.sample_id)}\n{visible(o.file)}:{o.line}"),
                Text(_clip(o.user, 300)),
                Text(_clip(o.response, 300)),
                *([Text(_clip(o.ground_truth, 200))] if truths else []),
                "err" if o.score is None else f"{o.score:.3f}",
                Text(metrics),
                Text(_clip(reason, 200)),
                verdict,
            )
        if width >= 120 and console.measure(table).minimum <= width:
            console.print(table)
        else:
            _preview_blocks(console, table.title.plain, shown, width)
    return _output(console)


def _preview_blocks(console: Any, title: str, shown: Sequence[Any], width: int) -> None:
    """The preview where its table would not fit: one block per sample, every line within ``width``."""
    _print_wrapped(console, title, width)
    for o in shown:
        style = {"pass": "green", "fail": "red", "below": "yellow"}.get(o.verdict, "")
        score = "err" if o.score is None else f"{o.score:.3f}"
        head = f"{visible(o.verdict)} {visible(o.sample_id)} ({visible(o.file)}:{o.line}) score {score}"
        _print_wrapped(console, head, width, head=(len(visible(o.verdict)), style))
        reason = o.reason if o.error is None else o.error
        problems = o.failures or o.below
        fields = [("user", o.user), ("response", o.response)]
        if o.ground_truth is not None:
            fields.append(("truth", o.ground_truth))
        fields.append(("reason", reason))
        if problems and problems[0] != reason:
            fields.append(("verdict", problems[0]))
        if o.metrics:
            fields.append(("metrics", ", ".join(f"{k} {m['score']:.3g}" for k, m in o.metrics.items())))
        for label, text in fields:
            _print_wrapped(console, f"{label:<9} {_clip(text, 300)}", width, indent="  ", words=False)


def _sample_name(e: Any) -> str:
    return str(e.id or e.key)


def _names(refs: Sequence[Any], total: int, shown: int = 5) -> str:
    names = ", ".join(visible(_sample_name(r)) for r in refs[:shown])
    return names + (f", and {total - min(shown, len(refs))} more" if total > min(shown, len(refs)) else "")


def _comparison_numbers(c: Any) -> tuple[str, str, str, str]:
    """Responses changed, mean before → after, Δ mean [CI], pass rate before → after of one comparison."""
    changed = "–" if c.n_response_changed is None else f"{c.n_response_changed} of {c.n_paired}"
    if c.status != "compared":
        return "–", visible(c.status), "–", "–"
    mean = rate = delta = "–"
    if c.group_mean_before is not None:
        mean = f"{c.group_mean_before:.3f} → {c.group_mean_after:.3f}"
        rate = f"{c.group_pass_rate_before:.1%} → {c.group_pass_rate_after:.1%}"
    if c.mean_delta is not None:
        d = c.mean_delta
        delta = f"{d['estimate']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
    return changed, mean, delta, rate


def _delta_style(c: Any) -> str:
    d = c.mean_delta if c.status == "compared" else None
    if d is None:
        return ""
    return "red" if d["high"] < 0 else ("green" if d["low"] > 0 else "")


_PAIRING = (
    "samples pair by id, else by what they ask (the conversation without its final answer, the ground truth, the "
    "other fields); mean and pass rate: every sample of each run; Δ mean: the paired samples"
)


def render_comparison(comparisons: list[Any], baseline: str, *, markup: bool, width: int) -> str:
    """The comparison with a stored run: one row per function × file (one block each where a row would not fit),
    then warnings, the new and removed samples and the most changed samples."""
    from rich import box
    from rich.table import Table

    console = _console(markup, width)
    table = Table(
        title=_cell(f"compared with stored run {baseline}"),
        title_justify="left",
        caption=_PAIRING,
        caption_justify="left",
        box=box.SIMPLE_HEAD if markup else box.ASCII2,
        show_edge=False,
    )
    table.add_column("function", no_wrap=True)
    table.add_column("samples", no_wrap=True)
    table.add_column("paired", justify="right", no_wrap=True)
    table.add_column("new/removed", justify="right", no_wrap=True)
    table.add_column("responses changed", justify="right", no_wrap=True)
    table.add_column("mean before → after", justify="right", no_wrap=True)
    table.add_column("Δ mean [95% CI]", justify="right", no_wrap=True)
    table.add_column("pass rate before → after", justify="right", no_wrap=True)
    for c in comparisons:
        changed, mean, delta, rate = _comparison_numbers(c)
        table.add_row(
            _cell(c.function),
            _cell(c.file),
            str(c.n_paired),
            f"{c.n_new}/{c.n_removed}",
            changed,
            mean,
            _cell(delta, _delta_style(c)),
            rate,
        )
    if _fits(console, table, width):
        console.print(table)
    else:  # one block per function × file, every line within the width
        _print_wrapped(console, f"compared with stored run {visible(baseline)}", width)
        for c in comparisons:
            changed, mean, delta, rate = _comparison_numbers(c)
            _print_wrapped(console, f"{visible(c.function)} on {visible(c.file)}", width)
            _print_wrapped(
                console,
                f"paired {c.n_paired}; new/removed {c.n_new}/{c.n_removed}; responses changed {changed}",
                width,
                indent="  ",
            )
            if c.status != "compared":
                _print_wrapped(console, f"not compared: {mean}", width, indent="  ")
                continue
            _print_wrapped(console, f"mean {mean}; pass rate {rate}", width, indent="  ")
            _print_wrapped(console, f"Δ mean {delta}", width, indent="  ", style=_delta_style(c))
        _print_wrapped(console, _PAIRING, width)
    for c in comparisons:
        where = f"{visible(c.function)} on {visible(c.file)}"
        for warning in c.warnings:
            _print_wrapped(console, f"WARNING {where}: {visible(warning)}", width, style="yellow")
        if c.status == "compared":
            for label, refs, total in (
                ("new", c.new_samples, c.n_new),
                ("removed", c.removed_samples, c.n_removed),
            ):
                if total:
                    _print_wrapped(console, f"{where} {label}: {_names(refs, total)}", width, indent="  ")
        for text in comparison_pair_lines(c):
            _print_wrapped(console, f"{where} {text}", width, indent="  ")
        for label, items in (("most regressed", c.regressed), ("most improved", c.improved)):
            if items:
                entries = ", ".join(
                    f"{visible(_sample_name(e))} {e.before:.3f}→{e.after:.3f}"
                    + (" (new response)" if e.response_changed else "")
                    for e in items[:3]
                )
                _print_wrapped(console, f"{where} {label}: {entries}", width, indent="  ")
    return _output(console)


def _flips(refs: Sequence[dict[str, Any]], total: int, shown: int = 5) -> str:
    names = []
    for f in refs[:shown]:
        margins = ""
        if f["margin_before"] is not None and f["margin_after"] is not None:
            margins = f" margin {f['margin_before']:.3g}→{f['margin_after']:.3g}"
        names.append(f"{visible(str(f['id'] or f['key']))} (line {f['line']}{margins})")
    return ", ".join(names) + (f", and {total - len(names)} more" if total > len(names) else "")


def comparison_pair_lines(c: Any) -> list[str]:
    """A preference file's comparison: accuracy before → after (every pair, and per subset) and the pairs that
    flipped right → wrong or were fixed."""
    p = c.preference
    if not p or p["after"] is None or p["before"] is None:
        return []
    lines = [f"accuracy {p['before']:.1%} → {p['after']:.1%} ({p['after'] - p['before']:+.1%})"]
    for name, s in p["subsets"].items():
        if s["before"] is None or s["after"] is None:
            side = "new" if s["before"] is None else "removed"
            lines.append(f"subset {visible(name)}: {side}")
            continue
        lines.append(
            f"subset {visible(name)}: {s['before']:.1%} → {s['after']:.1%} ({s['delta']:+.1%}; "
            f"{s['n_before']} → {s['n_after']} pairs, {s['n_flipped']} flipped, {s['n_fixed']} fixed)"
        )
    if p["n_flipped"]:
        lines.append(f"flipped right → wrong: {p['n_flipped']}: {_flips(p['flipped'], p['n_flipped'])}")
    if p["n_fixed"]:
        lines.append(f"fixed wrong → right: {p['n_fixed']}: {_flips(p['fixed'], p['n_fixed'])}")
    return lines


def render_probe_changes(changes: Sequence[Any], *, markup: bool, width: int) -> str:
    """The probes compared with a stored run: one row per function × file × probe whose verdict changed (a
    regression, an improvement, a probe on one side only; one line each where a row would not fit), then how many
    kept their verdict."""
    from rich import box
    from rich.table import Table

    console = _console(markup, width)
    shown = [c for c in changes if c.status != "unchanged"]
    same = len(changes) - len(shown)
    if shown:
        title = f"probes compared with stored run {visible(changes[0].baseline)}"
        table = Table(
            title=_cell(title),
            title_justify="left",
            box=box.SIMPLE_HEAD if markup else box.ASCII2,
            show_edge=False,
        )
        for name in ("function", "samples", "probe", "before", "now", "change"):
            table.add_column(name, no_wrap=True)
        for c in shown:
            style = {"regressed": "red", "improved": "green"}.get(c.status, "")
            table.add_row(
                _cell(c.function),
                _cell(c.file),
                _cell(c.probe),
                c.counts("before"),
                c.counts("after"),
                _cell(c.status, style),
            )
        if _fits(console, table, width):
            console.print(table)
        else:
            _print_wrapped(console, title, width)
            for c in shown:
                style = {"regressed": "red", "improved": "green"}.get(c.status, "")
                _print_wrapped(
                    console,
                    f"{visible(c.status)}: probe {visible(c.probe)} of {visible(c.function)} on {visible(c.file)}: "
                    f"{c.counts('before')} → {c.counts('after')}",
                    width,
                    indent="  ",
                    style=style,
                )
    if same:
        _print_wrapped(
            console,
            f"probes: {same} with the same verdict as in stored run {visible(changes[0].baseline)}",
            width,
        )
    return _output(console)


def _fits(console: Any, table: Any, width: int) -> bool:
    """Whether ``table`` fits ``width`` without wrapping a cell."""
    return bool(console.measure(table, options=console.options.update_width(100_000)).maximum <= width)


def _wrap(text: str, width: int, indent: str = "", words: bool = True) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken between words only (a word wider than the width
    stands alone on its line; ``words=False``: a long word is split, for texts that are not names); continuation
    lines indented two more columns."""
    import textwrap

    return textwrap.wrap(
        text,
        width=max(width, len(indent) + 12),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=not words,
        break_on_hyphens=False,
    ) or [indent]


def _print_wrapped(
    console: Any,
    text: str,
    width: int,
    *,
    indent: str = "",
    style: str = "",
    head: tuple[int, str] = (0, ""),
    words: bool = True,
) -> None:
    """Print ``text`` wrapped to ``width`` (``style`` on all of it; ``head``: a style for its first characters)."""
    from rich.text import Text

    for i, line in enumerate(_wrap(text, width, indent, words)):
        styled = Text(line, style=style)
        if i == 0 and head[0]:
            styled.stylize(head[1], 0, head[0])
        console.print(styled, soft_wrap=True)


_TRAILING = re.compile(r"[ ]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def _output(console: Any) -> str:
    """What ``console`` rendered, without the spaces rich pads lines with."""
    return _TRAILING.sub(r"\1", console.file.getvalue())


def write_deploy(tr: Any, outcome: Any) -> None:
    """The deploy step's result: one line, plus what was (or would be) shipped."""
    tr.write_sep("-", "reward deploy")
    style = {"deployed": {"green": True}, "dry-run": {"cyan": True}}.get(
        outcome.status, {"red": True, "bold": True}
    )
    prefix = "ERROR " if outcome.failed else ""
    _line(tr, f"{prefix}reward deploy: {outcome.message}", **style)
    for line in outcome.lines:
        _line(tr, line)
