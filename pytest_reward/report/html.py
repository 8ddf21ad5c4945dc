"""``report.html``: one self-contained page rendered from the ``summary.json`` data.

No external resources of any kind: inline CSS, inline SVG histograms, one small inline script, no fonts. A
Content-Security-Policy ``<meta>`` allows exactly that script and that style sheet (by hash) and nothing else, so
even a value that escaped ``html.escape`` could neither run nor fetch anything. Every value taken from the data is
escaped; the script reads only the DOM (never the data) and the page is complete without it: with JavaScript
disabled everything is visible and only the filter box stays disabled.

Markup the text filter works on (stable, tests and users may rely on it):

* ``<input id="filter">``: space-separated terms, case-insensitive, all must match.
* ``<tr class="sample-row">``: one failing / worst / preview sample; matched against its own text plus its
  group's function and file names. ``<tr class="delta-row">``: one regressed / improved sample of a comparison,
  filtered the same way (not counted).
* ``<section class="group" data-label="FUNCTION FILE">``: hidden when neither its label nor any of its rows
  match; its line in the overview table (``<tr class="overview-row" data-group="g-N">``) is hidden with it.
* ``<span id="filter-count">``: ``"X of Y samples shown"`` (``sample-row`` only).
* ``<section id="probes">``: the reward-hacking probes, one ``<tr class="probe-row" data-verdict="V">`` each in its
  table, and per probe that broke its rule (or reports, ``info``) a ``<details class="probe">`` with its
  counter-examples (not filtered).

Histogram bars: ``<rect class="bar" data-count="N">`` (one per bin, then one ``bar err`` for errored samples),
each with a ``<title>``; per group the counts sum to ``summary.n``.
"""

from __future__ import annotations

import base64
import hashlib
import math
import shlex
from collections.abc import Iterable
from html import escape
from typing import Any

__all__ = ["render_html"]

#: Characters of a text shown before it is folded into a ``<details>``; lines likewise.
PREVIEW_CHARS = 240
PREVIEW_LINES = 6
#: Longest text kept in full (``results.jsonl`` has all of it); keeps the page small for large responses.
FULL_TEXT_CAP = 20_000

_STYLE = """
:root{--fg:#1d2026;--muted:#667085;--bg:#fff;--panel:#f6f7f9;--line:#d9dde3;--pass:#1a7f37;--fail:#c62828;
--warn:#a36100;--err:#8e24aa;--bar:#4c78a8;--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
@media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--muted:#98a2b3;--bg:#16181d;--panel:#1f232a;--line:#343a44;
--pass:#4ac26b;--fail:#ff6b6b;--warn:#f0b400;--err:#d28cf0;--bar:#6fa0d8}}
*{box-sizing:border-box}
[hidden]{display:none!important}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg)}
main{padding:0 16px 40px}
.top{position:sticky;top:0;z-index:10;display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center;
padding:8px 16px;background:var(--panel);border-bottom:1px solid var(--line)}
.top h1{font-size:16px;margin:0}
.top .counts{color:var(--muted)}
.top .filter{margin-left:auto;display:flex;gap:8px;align-items:center}
#filter{font:13px var(--mono);width:26em;max-width:60vw;padding:4px 8px;border:1px solid var(--line);border-radius:4px;
background:var(--bg);color:var(--fg)}
#filter-count{color:var(--muted);font-size:12px;min-width:12em}
h2{font-size:15px;margin:0;display:inline}
h3{font-size:13px;margin:14px 0 6px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.meta{display:flex;flex-wrap:wrap;gap:4px 24px;margin:12px 0;color:var(--muted);font-size:12px}
.meta b{color:var(--fg);font-weight:600}
.mono,.txt,code,td.num{font-family:var(--mono);font-size:12px}
table{border-collapse:collapse;margin:4px 0}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{font-weight:600;font-size:12px;color:var(--muted);background:var(--panel)}
td.num,th.num{text-align:right;white-space:nowrap}
.scroll{overflow-x:auto}
.badge{display:inline-block;padding:0 6px;border-radius:3px;font:600 12px var(--mono);color:#fff;background:var(--muted)}
.v-pass{background:var(--pass)}.v-fail{background:var(--fail)}.v-partial,.v-below{background:var(--warn)}
.v-error{background:var(--err)}.v-na{background:var(--muted)}
.muted{color:var(--muted)}.bad{color:var(--fail)}.good{color:var(--pass)}
section.group{border:1px solid var(--line);border-radius:6px;margin:14px 0}
section.group>details>summary{cursor:pointer;padding:8px 12px;background:var(--panel);border-radius:6px}
.gbody{padding:4px 12px 12px}
.cols{display:flex;flex-wrap:wrap;gap:8px 32px;align-items:flex-start}
svg.hist{display:block;overflow:visible}
svg.hist rect.bar{fill:var(--bar)}svg.hist rect.bar.err{fill:var(--err)}svg.hist rect.bar:hover{opacity:.75}
svg.hist text{font:9px var(--mono);fill:var(--muted)}
svg.hist line{stroke:var(--line)}
.txt{white-space:pre-wrap;word-break:break-word;max-width:42ch;min-width:16ch}
.txt summary{cursor:pointer;list-style:none}
.txt summary::-webkit-details-marker{display:none}
.txt .more{color:var(--bar);font-family:system-ui,sans-serif;font-size:11px;white-space:nowrap}
details[open]>summary .prev{display:none}
.err{color:var(--err)}
.chip{font-size:11px;color:var(--muted);border:1px solid var(--line);border-radius:3px;padding:0 4px;margin-right:2px}
ul.fails{margin:2px 0;padding-left:16px;color:var(--fail)}
ul.warnings{margin:2px 0;padding-left:16px;color:var(--warn)}
.warn{color:var(--warn)}
"""

_SCRIPT = """
(function () {
  "use strict";
  var input = document.getElementById("filter");
  var counter = document.getElementById("filter-count");
  if (!input || !counter) { return; }
  var ROWS = "tr.sample-row, tr.delta-row";
  var groups = Array.prototype.slice.call(document.querySelectorAll("section.group"));
  var overview = {};
  Array.prototype.forEach.call(document.querySelectorAll("tr.overview-row"), function (r) {
    overview[r.getAttribute("data-group")] = r;
  });
  var total = document.querySelectorAll("tr.sample-row").length;
  var cache = new WeakMap();
  function text(el) {
    var t = cache.get(el);
    if (t === undefined) { t = el.textContent.toLowerCase(); cache.set(el, t); }
    return t;
  }
  function matches(hay, terms) {
    for (var i = 0; i < terms.length; i++) { if (hay.indexOf(terms[i]) < 0) { return false; } }
    return true;
  }
  function apply() {
    var terms = input.value.toLowerCase().split(/\\s+/).filter(function (t) { return t.length > 0; });
    var shown = 0;
    groups.forEach(function (g) {
      var label = (g.getAttribute("data-label") || "").toLowerCase();
      var any = matches(label, terms);
      Array.prototype.forEach.call(g.querySelectorAll("table.rows"), function (table) {
        var visible = 0;
        Array.prototype.forEach.call(table.querySelectorAll(ROWS), function (r) {
          var ok = matches(label + "\\n" + text(r), terms);
          r.hidden = !ok;
          if (ok) {
            visible++;
            if (r.classList.contains("sample-row")) { shown++; }
          }
        });
        table.hidden = terms.length > 0 && visible === 0;
        if (visible > 0) { any = true; }
      });
      g.hidden = !any;
      var o = overview[g.id];
      if (o) { o.hidden = !any; }
    });
    counter.textContent = shown + " of " + total + " samples shown";
  }
  input.disabled = false;
  input.placeholder = "filter samples (/ focuses, Esc clears)";
  input.addEventListener("input", apply);
  input.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { input.value = ""; apply(); }
  });
  document.addEventListener("keydown", function (ev) {
    var tag = ev.target && ev.target.tagName;
    if (ev.key === "/" && tag !== "INPUT" && tag !== "TEXTAREA") { ev.preventDefault(); input.focus(); }
  });
  apply();
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


_CSP = (
    "default-src 'none'; "
    f"script-src {_csp_hash(_SCRIPT)}; style-src {_csp_hash(_STYLE)}; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def _esc(value: Any) -> str:
    """Escape any value for HTML text and (double-quoted) attributes."""
    return escape("" if value is None else str(value), quote=True)


# --- plain-text formatting (escape the result) ------------------------------------------------------------


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else str(value)
    return str(value)


def _g(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.4g}" if _is_num(value) else str(value)


def _pct(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.1%}" if _is_num(value) and math.isfinite(value) else str(value)


def _signed(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if _is_num(value) and math.isfinite(value) else str(value)


def _ci(ci: Any) -> str:
    """``[low, high]`` as in the terminal table."""
    if not isinstance(ci, dict) or ci.get("low") is None:
        return "–"
    return f"[{_fmt(ci.get('low'))}, {_fmt(ci.get('high'))}]"


def _ci_method(ci: Any) -> str:
    if not isinstance(ci, dict):
        return ""
    conf = ci.get("confidence")
    level = f"{conf:.0%}" if _is_num(conf) else ""
    return " ".join(p for p in (level, str(ci.get("method") or "")) if p)


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _location(row: dict[str, Any]) -> str:
    file, line = row.get("file"), row.get("line")
    if file is None and line is None:
        return ""
    return f"{file or '?'}:{line if line is not None else '?'}"


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- markup fragments ------------------------------------------------------------------------------------


def _badge(verdict: Any) -> str:
    text = str(verdict) if verdict is not None else "?"
    cls = {
        "pass": "v-pass",
        "fail": "v-fail",
        "partial": "v-partial",
        "not evaluated": "v-partial",
        "below": "v-below",
        "error": "v-error",
    }
    return f'<span class="badge {cls.get(text.lower(), "v-na")}">{_esc(text)}</span>'


def _text_block(text: Any) -> str:
    """Monospace text; long ones show a preview and fold the full text into a ``<details>``."""
    if text is None:
        return '<span class="muted">–</span>'
    text = str(text)
    lines = text.split("\n")
    if len(text) <= PREVIEW_CHARS and len(lines) <= PREVIEW_LINES:
        return f'<div class="txt">{_esc(text)}</div>'
    preview = "\n".join(lines[:PREVIEW_LINES])[:PREVIEW_CHARS]
    size = f"{len(text):,} chars" + (f", {len(lines)} lines" if len(lines) > 1 else "")
    full = text
    if len(text) > FULL_TEXT_CAP:
        full = text[:FULL_TEXT_CAP] + f"\n… ({len(text) - FULL_TEXT_CAP:,} more characters in results.jsonl)"
    return (
        f'<details class="txt"><summary><span class="prev">{_esc(preview)}…</span> '
        f'<span class="more">[{size}]</span></summary>{_esc(full)}</details>'
    )


def _table(head: Iterable[str], rows: Iterable[str], cls: str = "") -> str:
    ths = "".join(
        f'<th class="num">{_esc(c[1:])}</th>' if c.startswith(">") else f"<th>{_esc(c)}</th>" for c in head
    )
    attr = f' class="{cls}"' if cls else ""
    return f'<div class="scroll"><table{attr}><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _header(data: dict[str, Any], groups: list[dict[str, Any]], n_rows: int) -> str:
    verdicts = [str(g.get("verdict")) for g in groups]
    summaries = [_dict(g.get("summary")) for g in groups]
    n = sum(_int(s.get("n")) for s in summaries)
    errors = sum(_int(s.get("n_errors")) for s in summaries)
    parts = [f"{len(groups)} group{'' if len(groups) == 1 else 's'}"]
    parts += [f"{verdicts.count(v)} {v}" for v in ("PASS", "FAIL", "partial", "NO GATE") if verdicts.count(v)]
    counts = f"{', '.join(parts)} · {n} samples, {errors} errored"
    verdict = data.get("verdict")
    return (
        '<header class="top">'
        f"<h1>pytest-reward report</h1>{_badge(verdict if verdict is not None else 'no verdict')}"
        f'<span class="counts">{_esc(counts)}</span>'
        '<span class="filter"><input id="filter" type="search" autocomplete="off" spellcheck="false" '
        'disabled placeholder="filter (needs JavaScript)" aria-label="filter samples">'
        f'<span id="filter-count" aria-live="polite">{n_rows} samples</span></span>'
        "</header>"
    )


def _meta(data: dict[str, Any]) -> str:
    items: list[tuple[str, str]] = [
        ("generated", _fmt(data.get("generated_at"))),
        ("pytest-reward", _fmt(data.get("plugin_version"))),
        ("pytest", _fmt(data.get("pytest_version"))),
        ("python", _fmt(data.get("python"))),
        ("platform", _fmt(data.get("platform"))),
    ]
    commit = data.get("commit")
    if isinstance(commit, dict):
        text = str(commit.get("id") or "?")[:12]
        if commit.get("branch"):
            text += f" ({commit['branch']})"
        if commit.get("dirty"):
            text += ", dirty"
        items.append(("commit", text))
    else:
        items.append(("commit", "–"))
    items.append(("seed", _fmt(data.get("seed"))))
    args = data.get("args")
    if isinstance(args, list):
        items.append(("args", shlex.join(str(a) for a in args) or "–"))
    spans = "".join(f'<span>{_esc(k)} <b class="mono">{_esc(v)}</b></span>' for k, v in items)
    return f'<div class="meta">{spans}</div>'


def _overview(groups: list[dict[str, Any]]) -> str:
    rows = []
    method = ""
    for i, g in enumerate(groups):
        s = _dict(g.get("summary"))
        method = method or _ci_method(s.get("mean_ci"))
        n = _fmt(s.get("n")) + (f" ({s['n_errors']} err)" if s.get("n_errors") else "")
        rows.append(
            f'<tr class="overview-row" data-group="g-{i}"><td><a href="#g-{i}">{_esc(g.get("function"))}</a></td>'
            f'<td class="mono">{_esc(g.get("file"))}</td><td class="num">{_esc(n)}</td>'
            + "".join(f'<td class="num">{_esc(_fmt(s.get(k)))}</td>' for k in ("mean", "min", "p10"))
            + f'<td class="num">{_esc(_pct(s.get("pass_rate")))}</td><td class="num">{_esc(_ci(s.get("mean_ci")))}</td>'
            f"<td>{_badge(g.get('verdict'))}</td></tr>"
        )
    head = ["function", "samples", ">n", ">mean", ">min", ">p10", ">pass rate", ">95% CI of mean", "verdict"]
    note = ""
    if method:
        note = (
            f'<p class="muted">95% CI of the mean: {_esc(method)}; errored samples count as failures and as the lowest'
            " score.</p>"
        )
    return "<h3>Overview</h3>" + _table(head, rows) + note


def _run_comparison(cmp: Any) -> str:
    if not isinstance(cmp, dict):
        return ""
    base = _dict(cmp.get("baseline"))
    commit = _dict(base.get("commit"))
    bits = [f"baseline {base.get('name') or '?'}"]
    if base.get("path"):
        bits.append(str(base["path"]))
    if base.get("saved_at"):
        bits.append(f"saved {base['saved_at']}")
    if commit.get("id"):
        bits.append(f"commit {str(commit['id'])[:12]}")
    rules = ", ".join(str(r) for r in _list(cmp.get("rules"))) or "none"
    failures = _list(cmp.get("failures"))
    out = [
        "<h3>Comparison</h3>",
        f'<p class="mono">{_esc(" · ".join(bits))}</p>',
        f"<p>rules <code>{_esc(rules)}</code>{' (strict: only when the CI excludes zero)' if cmp.get('strict') else ''}</p>",
    ]
    if cmp.get("pairing"):
        out.append(f'<p class="muted">samples pair {_esc(cmp["pairing"])}</p>')
    if failures:
        out.append('<ul class="fails">' + "".join(f"<li>FAIL {_esc(f)}</li>" for f in failures) + "</ul>")
    else:
        out.append('<p class="good">no compare rule failed</p>')
    warnings = _list(cmp.get("warnings"))
    if warnings:
        out.append(
            '<ul class="warnings">' + "".join(f"<li>WARNING {_esc(w)}</li>" for w in warnings) + "</ul>"
        )
    out.append(_probe_changes([c for c in _list(cmp.get("probes")) if isinstance(c, dict)]))
    return "".join(out)


def _probe_changes(changes: list[dict[str, Any]]) -> str:
    """The probes compared with the stored run: a row per probe whose verdict changed."""
    shown = [c for c in changes if c.get("status") != "unchanged"]
    if not changes:
        return ""
    same = len(changes) - len(shown)
    out = []
    if shown:
        rows = []
        for c in shown:
            status = str(c.get("status"))
            rows.append(
                f'<tr class="probe-change-row" data-status="{_esc(status)}"><td>{_esc(c.get("function"))}</td>'
                f"<td>{_esc(c.get('file'))}</td><td>{_esc(c.get('probe'))}</td>"
                f"<td>{_esc(_probe_side(c, 'before'))}</td><td>{_esc(_probe_side(c, 'after'))}</td>"
                f"<td>{_esc(status)}</td></tr>"
            )
        out.append(
            "<h4>Probes vs the stored run</h4><table><thead><tr><th>function</th><th>samples</th><th>probe</th>"
            "<th>before</th><th>now</th><th>change</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
    if same:
        out.append(f'<p class="muted">{same} probe(s) with the same verdict as in the stored run</p>')
    return "".join(out)


def _probe_side(c: dict[str, Any], side: str) -> str:
    verdict, broken, checked = c.get(side), c.get(f"broken_{side}"), c.get(f"checked_{side}")
    if verdict is None:
        return "–"
    if verdict in ("PASS", "FAIL") and isinstance(broken, int) and isinstance(checked, int):
        return f"{verdict} ({broken} of {checked} broke)"
    return str(verdict)


def _aggregates(s: dict[str, Any]) -> str:
    n = _fmt(s.get("n"))
    if s.get("expected") is not None and _int(s.get("n")) < _int(s.get("expected")):
        n += f" of {s['expected']} expected (partial run)"
    ci = s.get("mean_ci")
    ci_text = _ci(ci)
    method = _ci_method(ci)
    rows = [
        ("n", n),
        ("errors", _fmt(s.get("n_errors"))),
        *([("flaky", _fmt(s.get("n_flaky")))] if s.get("n_flaky") else []),
        (
            "pass / below / fail",
            f"{_fmt(s.get('n_pass'))} / {_fmt(s.get('n_below'))} / {_fmt(s.get('n_fail'))}",
        ),
        ("mean", _fmt(s.get("mean"))),
        ("min", _fmt(s.get("min"))),
        ("p10", _fmt(s.get("p10"))),
        ("max", _fmt(s.get("max"))),
        ("pass rate", _pct(s.get("pass_rate"))),
        ("95% CI of mean", ci_text),
    ]
    for q, v in _dict(s.get("quantiles")).items():
        if q != "0.1":
            rows.append((f"quantile({q})", _fmt(v)))
    body = "".join(f'<tr><th>{_esc(k)}</th><td class="num">{_esc(v)}</td></tr>' for k, v in rows)
    note = f'<p class="muted">{_esc(method)}</p>' if method else ""
    return f'<div><h3>Aggregates</h3><table class="agg">{body}</table>{note}</div>'


def _gates(gates: list[Any]) -> str:
    if not gates:
        return '<div><h3>Gates</h3><p class="muted">no aggregate gates</p></div>'
    rows = []
    for raw in gates:
        gate = _dict(raw)
        target, name = gate.get("target"), gate.get("gate")
        what = str(name) if target in (None, "score") else f"{target} {name}"
        if gate.get("evaluated") is False:
            status = _badge("not evaluated")
        else:
            status = _badge("pass" if gate.get("passed") else "FAIL")
        interval = gate.get("interval")
        upper = bool(gate.get("upper"))
        compared = ""
        if isinstance(interval, dict):
            side, edge = ("upper", interval.get("high")) if upper else ("lower", interval.get("low"))
            compared = f"CI {side} bound {_g(edge)} ({_ci_method(interval)})"
        elif gate.get("compared") is not None and gate.get("compared") != gate.get("value"):
            compared = _g(gate.get("compared"))
        rows.append(
            f'<tr><td class="mono">{_esc(what)}</td><td class="num">{_esc(_g(gate.get("value")))}</td>'
            f'<td class="mono">{_esc(compared)}</td><td class="num">{"≤" if upper else "≥"} {_esc(_g(gate.get("bound")))}</td>'
            f"<td>{status}</td><td>{_esc(gate.get('note') or '')}</td></tr>"
        )
    return (
        "<div><h3>Gates</h3>"
        + _table(["gate", ">value", "compared", ">bound", "result", "note"], rows)
        + "</div>"
    )


def _histogram(hist: Any, n: Any) -> str:
    hist = _dict(hist)
    counts = [_int(c) for c in _list(hist.get("counts"))]
    edges = _list(hist.get("edges"))
    errors = _int(hist.get("errors"))
    if not counts and not errors:
        return '<div><h3>Scores</h3><p class="muted">no histogram</p></div>'
    bw, gap, plot, top, left = 22, 2, 100, 14, 4
    tallest = max([*counts, errors, 1])
    labelled = len(edges) == len(counts) + 1 and all(_is_num(e) for e in edges)
    parts: list[str] = []

    def bar(x: float, count: int, title: str, cls: str) -> None:
        height = plot * max(count, 0) / tallest
        y = top + plot - height
        parts.append(
            f'<rect class="{cls}" data-count="{count}" x="{x:g}" y="{y:.1f}" width="{bw}" height="{height:.1f}">'
            f"<title>{_esc(title)}</title></rect>"
        )
        if count:
            parts.append(f'<text x="{x + bw / 2:g}" y="{y - 3:.1f}" text-anchor="middle">{count}</text>')

    for i, count in enumerate(counts):
        if labelled:
            close = "]" if i == len(counts) - 1 else ")"
            span = f"[{edges[i]:g}, {edges[i + 1]:g}{close}"
        else:
            span = f"bin {i + 1}"
        bar(left + i * (bw + gap), count, f"score {span}: {count} sample{'' if count == 1 else 's'}", "bar")
    x_err = left + len(counts) * (bw + gap) + 10
    bar(x_err, errors, f"errored (no score): {errors} sample{'' if errors == 1 else 's'}", "bar err")
    base = top + plot
    width = x_err + bw + left
    parts.append(f'<line x1="0" y1="{base}" x2="{width}" y2="{base}"></line>')
    if labelled:
        for i in (0, len(counts) // 2, len(counts)):
            x = left + i * (bw + gap) - (gap if i == len(counts) else 0)
            parts.append(f'<text x="{x:g}" y="{base + 12}" text-anchor="middle">{edges[i]:g}</text>')
    parts.append(f'<text x="{x_err + bw / 2:g}" y="{base + 12}" text-anchor="middle">err</text>')
    total = sum(counts) + errors
    label = f"score histogram: {total} samples in {len(counts)} bins, {errors} errored"
    svg = (
        f'<svg class="hist" role="img" aria-label="{_esc(label)}" width="{width}" height="{base + 18}" '
        f'viewBox="0 0 {width} {base + 18}">{"".join(parts)}</svg>'
    )
    warn = ""
    if _is_num(n) and total != n:
        warn = f'<p class="warn">the histogram holds {total} samples, the summary {_esc(n)}</p>'
    return f"<div><h3>Scores</h3>{svg}{warn}</div>"


def _metric_table(metrics: Any) -> str:
    metrics = _dict(metrics)
    if not metrics:
        return ""
    rows = []
    for name, raw in metrics.items():
        m = _dict(raw)
        qs = ", ".join(f"q{q} {_fmt(v)}" for q, v in _dict(m.get("quantiles")).items())
        cis = []
        if isinstance(m.get("mean_ci"), dict):
            cis.append(f"mean {_ci(m['mean_ci'])} {_ci_method(m['mean_ci'])}")
        if isinstance(m.get("pass_ci"), dict):
            cis.append(f"pass rate {_ci(m['pass_ci'])} {_ci_method(m['pass_ci'])}")
        rows.append(
            f'<tr><td class="mono">{_esc(name)}</td><td class="num">{_esc(_fmt(m.get("n")))}</td>'
            f'<td class="num">{_esc(_fmt(m.get("mean")))}</td><td class="num">{_esc(_fmt(m.get("min")))}</td>'
            f'<td class="num">{_esc(_pct(m.get("pass_rate")))}</td><td class="mono">{_esc(qs)}</td>'
            f'<td class="mono">{_esc("; ".join(cis))}</td></tr>'
        )
    head = ["metric", ">n", ">mean", ">min", ">pass rate", "quantiles", "gate intervals"]
    return "<h3>Metrics</h3>" + _table(head, rows)


def _metrics_cell(metrics: Any) -> str:
    metrics = _dict(metrics)
    if not metrics:
        return '<span class="muted">–</span>'
    out = []
    for name, raw in metrics.items():
        value, reason, invalid = raw, None, False
        if isinstance(raw, dict):  # SampleOutcome shape: {"score", "valid", "reason"}
            value, reason, invalid = raw.get("score"), raw.get("reason"), raw.get("valid") is False
        title = f' title="{_esc(reason)}"' if reason else ""
        flag = ' <span class="bad">invalid</span>' if invalid else ""
        out.append(f"<div{title}>{_esc(name)} {_esc(_fmt(value))}{flag}</div>")
    return f'<div class="mono">{"".join(out)}</div>'


_DASH = '<span class="muted">–</span>'


def _runs(row: dict[str, Any]) -> str:
    """With ``--reward-runs K``: how many runs the score averages and their spread (sd)."""
    runs = _list(row.get("runs"))
    if not runs:
        return ""
    scores = ", ".join(_fmt(r) for r in runs)
    return f'<div class="muted" title="runs: {_esc(scores)}">{len(runs)} runs · sd {_esc(_fmt(row.get("spread")))}</div>'


def _sample_row(row: dict[str, Any], tags: list[str]) -> str:
    score = row.get("score")
    verdict = row.get("verdict")
    if score is None and row.get("error"):
        verdict = "error"
    duration = row.get("duration")
    where = _location(row)
    head = [f"<b>{_esc(row.get('id') if row.get('id') is not None else '–')}</b>"]
    if where:
        head.append(f'<div class="muted">{_esc(where)}</div>')
    if _is_num(duration):
        head.append(f'<div class="muted">{_esc(_duration(duration))}</div>')
    head.append("<div>" + "".join(f'<span class="chip">{_esc(t)}</span>' for t in tags) + "</div>")
    notes = []
    if row.get("reason") is not None:
        notes.append(_text_block(row.get("reason")))
    failures = [f for f in _list(row.get("failures")) if f]
    if failures:
        notes.append('<ul class="fails">' + "".join(f"<li>{_esc(f)}</li>" for f in failures) + "</ul>")
    if row.get("error") and [str(row["error"])] != failures:  # not when it only repeats the failure line
        notes.append(f'<div class="err">{_text_block(row.get("error"))}</div>')
    return (
        f'<tr class="sample-row" data-verdict="{_esc(verdict)}"><td class="mono">{"".join(head)}</td>'
        f'<td>{_badge(verdict)}</td><td class="num">{_esc(_fmt(score))}{_runs(row)}</td>'
        f"<td>{_metrics_cell(row.get('metrics'))}</td>"
        f"<td>{_text_block(row.get('user'))}</td><td>{_text_block(row.get('response'))}</td>"
        f"<td>{_text_block(row.get('ground_truth'))}</td>"
        f"<td>{''.join(notes) or _DASH}</td></tr>"
    )


def _samples(samples: Any) -> tuple[str, int]:
    """Failing, worst, flaky, then preview samples, each once (tagged with the lists it is in)."""
    samples = _dict(samples)
    merged: dict[Any, tuple[dict[str, Any], list[str]]] = {}
    for tag in ("failing", "worst", "flaky", "preview"):
        for i, raw in enumerate(_list(samples.get(tag))):
            if not isinstance(raw, dict):
                continue
            key = raw.get("key") or (raw.get("file"), raw.get("line"), raw.get("id"))
            if key == (None, None, None):
                key = (tag, i)
            if key in merged:
                merged[key][1].append(tag)
            else:
                merged[key] = (raw, [tag])
    if not merged:
        return '<h3>Samples</h3><p class="muted">no samples recorded</p>', 0
    rows = [_sample_row(row, tags) for row, tags in merged.values()]
    head = ["sample", "verdict", ">score", "metrics", "user", "response", "ground truth", "reason · failures · error"]
    return "<h3>Samples (failing, worst, flaky, preview)</h3>" + _table(head, rows, "rows"), len(rows)


def _delta_rows(items: list[Any], file: Any) -> list[str]:
    rows = []
    for raw in items:
        d = _dict(raw)
        where = f"{file or '?'}:{d['line']}" if d.get("line") is not None else ""
        delta = d.get("delta")
        cls = "bad" if _is_num(delta) and delta < 0 else "good"
        if d.get("response_changed"):
            where += " · new response"
        rows.append(
            f'<tr class="delta-row"><td class="mono"><b>{_esc(d.get("id"))}</b> <span class="muted">{_esc(where)}</span>'
            f'<div class="muted">{_esc(d.get("key"))}</div></td><td class="num">{_esc(_fmt(d.get("before")))}</td>'
            f'<td class="num">{_esc(_fmt(d.get("after")))}</td><td class="num {cls}">{_esc(_signed(delta))}</td></tr>'
        )
    return rows


def _group_comparison(cmp: Any, group: dict[str, Any], failures: list[str]) -> str:
    if not isinstance(cmp, dict):
        return ""
    delta = cmp.get("mean_delta")
    delta_text = _signed(_dict(delta).get("estimate"))
    if isinstance(delta, dict):
        lo, hi = _signed(delta.get("low")), _signed(delta.get("high"))
        delta_text += f" [{lo}, {hi}] {_ci_method(delta)}"
    pr_delta = cmp.get("pass_rate_delta")
    pr_text = f"{pr_delta * 100:+.1f} pp" if _is_num(pr_delta) else "–"
    group_delta = cmp.get("group_mean_delta")
    group_text = _signed(_dict(group_delta).get("estimate"))
    if isinstance(group_delta, dict):
        group_text += f" [{_signed(group_delta.get('low'))}, {_signed(group_delta.get('high'))}] {_ci_method(group_delta)}"
    changed = cmp.get("n_response_changed")
    rows = [
        ("baseline", _fmt(cmp.get("baseline"))),
        (
            "paired / new / removed",
            f"{_fmt(cmp.get('n_paired'))} / {_fmt(cmp.get('n_new'))} / {_fmt(cmp.get('n_removed'))}",
        ),
        (
            "paired samples with a different response",
            "– (not known)" if changed is None else f"{_fmt(changed)} of {_fmt(cmp.get('n_paired'))}",
        ),
        ("mean, all samples", f"{_fmt(cmp.get('group_mean_before'))} → {_fmt(cmp.get('group_mean_after'))}"),
        ("Δ mean, all samples", group_text),
        ("mean, paired samples", f"{_fmt(cmp.get('mean_before'))} → {_fmt(cmp.get('mean_after'))}"),
        ("Δ mean, paired samples", delta_text),
        (
            "pass rate, all samples",
            f"{_pct(cmp.get('group_pass_rate_before'))} → {_pct(cmp.get('group_pass_rate_after'))}",
        ),
        (
            "pass rate, paired samples",
            f"{_pct(cmp.get('pass_rate_before'))} → {_pct(cmp.get('pass_rate_after'))}",
        ),
        ("Δ pass rate, paired samples", pr_text),
    ]
    body = "".join(f'<tr><th>{_esc(k)}</th><td class="mono">{_esc(v)}</td></tr>' for k, v in rows)
    out = ["<h3>Versus baseline</h3>", f"<table>{body}</table>"]
    warnings = _list(cmp.get("warnings"))
    if warnings:
        out.append(
            '<ul class="warnings">' + "".join(f"<li>WARNING {_esc(w)}</li>" for w in warnings) + "</ul>"
        )
    for title, key, count in (
        ("New samples", "new_samples", "n_new"),
        ("Removed samples", "removed_samples", "n_removed"),
    ):
        refs = [_dict(r) for r in _list(cmp.get(key))]
        if refs:
            names = ", ".join(str(r.get("id") or r.get("key")) for r in refs)
            more = _int(cmp.get(count)) - len(refs)
            out.append(
                f"<p><b>{title}</b>: {_esc(names)}{_esc(f', and {more} more') if more > 0 else ''}</p>"
            )
    if failures:
        out.append('<ul class="fails">' + "".join(f"<li>FAIL {_esc(f)}</li>" for f in failures) + "</ul>")
    head = ["sample", ">before", ">after", ">Δ"]
    for title, key in (("Most regressed", "regressed"), ("Most improved", "improved")):
        items = _list(cmp.get(key))
        if items:
            out.append(f"<h3>{title}</h3>" + _table(head, _delta_rows(items, group.get("file")), "rows"))
    return "".join(out)


def _accuracy_row(name: str, c: dict[str, Any]) -> str:
    ci = _dict(c.get("ci"))
    interval = f"[{_fmt(ci.get('low'))}, {_fmt(ci.get('high'))}]" if ci else "–"
    return (
        f'<tr><td class="mono">{_esc(name)}</td><td class="num">{_esc(_fmt(c.get("n")))}</td>'
        f'<td class="num">{_esc(_g(c.get("credit")))}</td><td class="num">{_esc(_fmt(c.get("accuracy")))}</td>'
        f'<td class="num">{_esc(interval)}</td><td class="num">{_esc(_fmt(c.get("n_tied")))}</td>'
        f'<td class="num">{_esc(_fmt(c.get("n_errors")))}</td></tr>'
    )


def _preference(p: Any) -> str:
    """A preference file's accuracy, overall and per subset, and its margins' distribution."""
    if not isinstance(p, dict):
        return ""
    rows = [_accuracy_row("all pairs", p)]
    rows += [_accuracy_row(str(name), _dict(c)) for name, c in _dict(p.get("subsets")).items()]
    head = ["subset", ">pairs", ">credit", ">accuracy", ">95% CI (Wilson score)", ">ties", ">errors"]
    out = [
        "<h3>Preference pairs</h3>",
        '<p class="muted">accuracy: mean credit over the pairs (1 when the chosen response scores strictly above '
        "every rejected one; a tie 0, or 1/k at the top of a best-of-n set; an errored pair 0)</p>",
        _table(head, rows, "rows"),
    ]
    m = _dict(p.get("margin"))
    if m:
        q = _dict(m.get("quantiles"))
        cells = [
            ("pairs scored", _fmt(m.get("n"))),
            ("mean", _fmt(m.get("mean"))),
            ("min", _fmt(m.get("min"))),
            *((f"quantile({k})", _fmt(v)) for k, v in q.items()),
            ("max", _fmt(m.get("max"))),
            ("negative / zero", f"{_fmt(m.get('n_negative'))} / {_fmt(m.get('n_zero'))}"),
        ]
        body = "".join(f'<tr><th>{_esc(k)}</th><td class="num">{_esc(v)}</td></tr>' for k, v in cells)
        out.append(f'<h3>Margins (chosen minus the best rejected score)</h3><table class="agg">{body}</table>')
    return "".join(out)


def _pair_comparison(p: Any) -> str:
    """A preference file against the baseline: accuracy per subset before → after, the pairs that flipped."""
    if not isinstance(p, dict):
        return ""
    rows = [
        f'<tr><td class="mono">all pairs</td><td class="num">{_esc(_pct(p.get("before")))} → '
        f'{_esc(_pct(p.get("after")))}</td><td class="num">{_esc(_fmt(p.get("n_flipped")))}</td>'
        f'<td class="num">{_esc(_fmt(p.get("n_fixed")))}</td></tr>'
    ]
    for name, sub in _dict(p.get("subsets")).items():
        sub = _dict(sub)
        rows.append(
            f'<tr><td class="mono">{_esc(name)}</td><td class="num">{_esc(_pct(sub.get("before")))} → '
            f'{_esc(_pct(sub.get("after")))}</td><td class="num">{_esc(_fmt(sub.get("n_flipped")))}</td>'
            f'<td class="num">{_esc(_fmt(sub.get("n_fixed")))}</td></tr>'
        )
    out = ["<h3>Pairs versus baseline</h3>", _table(["subset", ">accuracy", ">flipped", ">fixed"], rows, "rows")]
    for title, key, count in (("Flipped right → wrong", "flipped", "n_flipped"), ("Fixed", "fixed", "n_fixed")):
        refs = [_dict(r) for r in _list(p.get(key))]
        if refs:
            items = [
                f'<tr><td class="mono">{_esc(r.get("id") or r.get("key"))}</td><td class="num">{_esc(_fmt(r.get("line")))}</td>'
                f'<td class="mono">{_esc(r.get("subset") or "–")}</td><td class="num">{_esc(_fmt(r.get("margin_before")))} → '
                f'{_esc(_fmt(r.get("margin_after")))}</td></tr>'
                for r in refs
            ]
            more = _int(p.get(count)) - len(refs)
            out.append(f"<h3>{title} ({_esc(_fmt(p.get(count)))})</h3>")
            out.append(_table(["pair", ">line", "subset", ">margin before → after"], items, "rows"))
            if more > 0:
                out.append(f'<p class="muted">and {more} more</p>')
    return "".join(out)


def _group(i: int, group: dict[str, Any], run_failures: list[str]) -> tuple[str, int]:
    s = _dict(group.get("summary"))
    function, file = group.get("function"), group.get("file")
    prefix = f"{function} on {file}:"  # the wording of the comparison's failure lines
    failures = [f for f in run_failures if f.startswith(prefix)]
    samples, n_rows = _samples(group.get("samples"))
    title = (
        f"<summary>{_badge(group.get('verdict'))} <h2>{_esc(function)}</h2> "
        f'<span class="muted">on</span> <span class="mono">{_esc(file)}</span> '
        f'<span class="muted">n={_esc(_fmt(s.get("n")))} · mean {_esc(_fmt(s.get("mean")))} · '
        f"pass rate {_esc(_pct(s.get('pass_rate')))}</span></summary>"
    )
    body = (
        '<div class="gbody"><div class="cols">'
        + _aggregates(s)
        + _histogram(group.get("histogram") or s.get("histogram"), s.get("n"))
        + _gates(_list(group.get("gates")))
        + "</div>"
        + _metric_table(s.get("metrics"))
        + _preference(s.get("preference"))
        + _group_comparison(group.get("comparison"), group, failures)
        + _pair_comparison(_dict(group.get("comparison")).get("preference"))
        + samples
        + "</div>"
    )
    label = f"{function or ''} {file or ''}"
    section = (
        f'<section class="group" id="g-{i}" data-label="{_esc(label)}" data-verdict="{_esc(group.get("verdict"))}">'
        f"<details open>{title}{body}</details></section>"
    )
    return section, n_rows


def _probes(probes: list[Any]) -> str:
    """The probes section: one row per function × file × probe, then the counter-examples of those that broke
    their rule (or, for an ``info`` probe, the mutated responses that pass)."""
    probes = [p for p in probes if isinstance(p, dict)]
    if not probes:
        return ""
    rows = []
    for p in probes:
        verdict = str(p.get("verdict"))
        broke = _fmt(p.get("broken")) if verdict in ("PASS", "FAIL") else "–"
        means = "–"
        if p.get("mean_mutated") is not None:
            means = f"{_fmt(p.get('mean_original'))} → {_fmt(p.get('mean_mutated'))}"
        rows.append(
            f'<tr class="probe-row" data-verdict="{_esc(verdict)}"><td>{_esc(p.get("function"))}</td>'
            f'<td class="mono">{_esc(p.get("file"))}</td><td class="mono">{_esc(p.get("probe"))}</td>'
            f'<td class="mono">{_esc(p.get("rule"))}</td><td class="num">{_esc(_fmt(p.get("checked")))}</td>'
            f'<td class="num">{_esc(broke)}</td><td class="num">{_esc(means)}</td><td>{_badge(verdict)}</td>'
            f"<td>{_esc(p.get('note') or p.get('doc') or '')}</td></tr>"
        )
    head = [
        "function",
        "samples",
        "probe",
        "rule",
        ">checked",
        ">broke",
        ">mean own → probed",
        "verdict",
        "why",
    ]
    out = [
        '<section id="probes"><h3>Probes</h3>',
        _table(head, rows),
        '<p class="muted">each probe mutates every response of the samples and scores the mutation as the samples '
        "are scored; floor: the lowest score of the samples' own responses</p>",
    ]
    for p in probes:
        examples = [e for e in _list(p.get("examples")) if isinstance(e, dict)]
        if not examples and not p.get("crashes"):
            continue
        summary = (
            f"{_badge(p.get('verdict'))} <b>{_esc(p.get('probe'))}</b> "
            f'<span class="muted">of</span> {_esc(p.get("function"))} <span class="muted">on</span> '
            f'<span class="mono">{_esc(p.get("file"))}</span> <span class="muted">rule</span> '
            f"<code>{_esc(p.get('rule'))}</code> · {_esc(_fmt(p.get('broken')))} of {_esc(_fmt(p.get('checked')))} broke it"
        )
        crashes = "".join(f'<li class="err">{_esc(c)}</li>' for c in _list(p.get("crashes")))
        ex_rows = [
            f'<tr><td class="mono">{_esc(p.get("file"))}:{_esc(e.get("line"))} [{_esc(e.get("id"))}]</td>'
            f'<td>{_text_block(e.get("original"))}</td><td class="num">{_esc(_g(e.get("original_score")))}</td>'
            f'<td>{_text_block(e.get("mutated"))}</td><td class="num">{_esc(_g(e.get("score")))}</td>'
            f"<td>{_esc(e.get('problem'))}</td><td>{_text_block(e.get('reason'))}</td></tr>"
            for e in examples
        ]
        out.append(
            f'<details class="probe"><summary>{summary}</summary>'
            f'<p class="muted">{_esc(p.get("doc") or "")}</p>'
            + (f'<ul class="fails">{crashes}</ul>' if crashes else "")
            + (
                _table(["sample", "original", ">score", "mutated", ">score", "problem", "reason"], ex_rows)
                if ex_rows
                else ""
            )
            + "</details>"
        )
    out.append("</section>")
    return "".join(out)


def render_html(data: dict[str, Any]) -> str:
    """The report page for ``data`` (the content of ``summary.json``), as one self-contained HTML string."""
    data = _dict(data)
    groups = [g for g in _list(data.get("groups")) if isinstance(g, dict)]
    run_cmp = data.get("comparison")
    run_failures = [str(f) for f in _list(_dict(run_cmp).get("failures"))]
    sections = []
    n_rows = 0
    for i, group in enumerate(groups):
        section, rows = _group(i, group, run_failures)
        sections.append(section)
        n_rows += rows
    verdict = data.get("verdict") or "no verdict"
    title = f"pytest-reward: {verdict} · {len(groups)} groups"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_esc(_CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_esc(title)}</title><style>{_STYLE}</style></head><body>"
        + _header(data, groups, n_rows)
        + "<main>"
        + _meta(data)
        + (_overview(groups) if groups else '<p class="muted">no reward groups in this run</p>')
        + _run_comparison(run_cmp)
        + _probes(_list(data.get("probes")))
        + "".join(sections)
        + f"</main><script>{_SCRIPT}</script></body></html>\n"
    )
