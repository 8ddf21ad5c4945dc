"""Text from samples and rewards (responses, prompts, reasons, ids, names) on its way out: control characters never
reach the terminal raw, data is never parsed as rich markup, the GitHub step summary escapes it, and a lone
surrogate writes (escaped) like any other character."""

from __future__ import annotations

import json
import re

import pytest

from pytest_reward.report.text import md_code, md_text, visible

from .conftest import msgs

ECHO = """
    import pytest
    from pytest_reward import reward_function

    @pytest.mark.reward(threshold=0.5)
    @reward_function
    def echo(messages, **kwargs):
        text = messages[-1]["content"]
        return {"score": 0.0 if "FAIL" in text else 1.0, "reason": "echo " + text}
"""

# OSC 52 (clipboard), a title change, erase-line and cursor-up, a C1 CSI, BEL, a bidi override, a carriage return.
HOSTILE = "FAIL \x1b]52;c;aGVsbG8=\x07 \x1b]0;TITLE\x07 \x1b[2K\x1b[1A \x9b2J \u202egnp.exe \rOVER"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def test_visible_escapes_controls_and_keeps_the_rest():
    assert visible("a\x1b[2Kb\x07\x9b\u202e\ud83d") == "a\\x1b[2Kb\\x07\\x9b\\u202e\\ud83d"
    assert visible("one\ntwo\tthree") == "one\\ntwo\\tthree"
    assert visible("one\ntwo\tthree\r", block=True) == "one\ntwo\tthree\\r"
    assert visible("héllo → 😀 [/INST]") == "héllo → 😀 [/INST]"


def test_control_characters_are_shown_not_sent_in_the_failure_panel_and_preview(project):
    project.file("rewards.py", ECHO)
    project.jsonl(
        "s.jsonl",
        [
            {"id": "bad\x1b]0;id\x07", "messages": msgs("user \x1b[1A\x1b[2K asks", HOSTILE)},
            {"id": "ok", "messages": msgs("q", "fine")},
        ],
    )
    result = project.run("--reward-samples", "s.jsonl", "--color=no", "--reward-preview=2", "-rf")
    assert result.ret == 1
    out = result.stdout.str()
    assert not [c for c in RAW if c in out], "a control character reached the terminal"
    assert "\\x1b]52;c;aGVsbG8=\\x07" in out  # shown, visibly
    result.stdout.fnmatch_lines(
        [
            "  assistant  FAIL \\x1b]52;c;aGVsbG8=\\x07 *\\u202egnp.exe OVER",  # whitespace folded to spaces
            "  reason     echo FAIL \\x1b]52*",
            "*reward preview*",
        ]
    )


def test_data_is_never_rich_markup(project):
    """Llama-2 prompts close tags that were never opened: a passing run stays green, the text shows as is."""
    project.file("rewards.py", ECHO)
    project.jsonl(
        "s.jsonl",
        [
            {
                "id": "[red]x[/]",
                "messages": msgs("[INST] say hi [/INST]", "[/bold] hi [link=http://x]y[/link]"),
            }
        ],
    )
    for color in ("no", "yes"):
        result = project.run("--reward-samples", "s.jsonl", "--reward-preview=1", f"--color={color}")
        assert result.ret == 0, result.stdout.str()
        out = result.stdout.str()
        assert "[INST] say hi" in out and "[/INST]" in out and "[/bold] hi" in out and "[red]x[/]" in out
        assert "INTERNALERROR" not in out + result.stderr.str()


# --- the GitHub step summary -------------------------------------------------------------------------------------

VALUE = """
    from pytest_reward import reward_function

    @reward_function
    def value(messages, **kwargs):
        return {"score": float(messages[-1]["content"])}
"""

HOSTILE_IDS = ["<!-- hidden", "<img src=x onerror=alert(1)>", "[text](https://evil.example)"]


def _rendered(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def test_md_text_and_md_code_keep_data_literal():
    assert _rendered(md_text("<!-- *x* [a](b) & `c`")) == "<p>&lt;!-- *x* [a](b) &amp; `c`</p>\n"
    assert _rendered(md_code("a``b`", in_table=False)) == "<p><code>a``b`</code></p>\n"
    assert _rendered(md_code("`x", in_table=False)) == "<p><code>`x</code></p>\n"
    table = f"| a |\n| --- |\n| {md_code('p|q')} |\n"
    assert "<td><code>p|q</code></td>" in _rendered(table)


def test_github_step_summary_escapes_sample_ids_and_file_names(project, monkeypatch):
    project.file("rewards.py", VALUE)
    name = "we`ird.jsonl"

    def samples(value: str) -> None:
        project.jsonl(name, [{"id": i, "messages": msgs("q", value)} for i in HOSTILE_IDS])

    samples("0.9")
    assert project.run("--reward-samples", name, "--reward-save=base").ret == 0
    samples("0.1")
    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = project.run(
        "--reward-samples", name, "--reward-compare=base", "--reward-compare-fail=sample:0.3"
    )
    assert result.ret == 1
    text = summary.read_text(encoding="utf-8")
    assert "``we`ird.jsonl``" in text  # a fence longer than the backtick inside
    html = _rendered(text)
    assert "<!--" not in html and "<img" not in html and "<a " not in html
    assert "&lt;!-- hidden" in html and "[text](https://evil.example)" in html  # shown, literally
    assert "<code>we`ird.jsonl</code>" in html


# --- lone surrogates ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_a_lone_surrogate_is_written_escaped_and_blames_no_one(project, monkeypatch, granularity):
    """``"\\ud83d"`` in a samples file is half an emoji: every file and the terminal get it as that escape."""
    project.file("rewards.py", ECHO)
    with open(project.path / "s.jsonl", "w", encoding="utf-8") as fh:  # the JSON escape, as a dataset has it
        fh.write(
            '{"id": "half\\ud83d", "messages": [{"role": "user", "content": "q"}, '
            '{"role": "assistant", "content": "half \\ud83d ok"}]}\n'
        )
        fh.write(
            '{"id": "bad", "messages": [{"role": "user", "content": "q"}, '
            '{"role": "assistant", "content": "FAIL \\udc00"}]}\n'
        )
    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = project.run_subprocess(
        "--reward-samples",
        "s.jsonl",
        "--reward-report",
        "out",
        "--reward-save=x",
        "--reward-granularity",
        granularity,
    )
    out = result.stdout.str() + result.stderr.str()
    assert "UnicodeEncodeError" not in out and "INTERNALERROR" not in out
    assert result.ret == 1  # the FAIL sample, nothing else
    if granularity == "sample":
        result.stdout.fnmatch_lines(["  assistant  FAIL \\udc00"])
    rows = [
        json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text("utf-8").splitlines()
    ]
    assert [r["reason"] for r in rows] == [
        "echo half \ud83d ok",
        "echo FAIL \udc00",
    ]  # the same text, read back
    data = json.loads((project.path / "out" / "summary.json").read_text("utf-8"))
    assert data["exitstatus"] == 1
    assert "half \\ud83d ok" in (project.path / "out" / "report.html").read_text("utf-8")
    assert "| `echo` | `s.jsonl` | 2 |" in summary.read_text("utf-8")
    assert list((project.path / ".reward").glob("*_x.json"))


# --- widths ------------------------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG_NAMES = """
    from pytest_reward import reward_function

    @reward_function
    def evaluate_response_quality(messages, **kwargs):
        return {"score": float(messages[-1]["content"])}
"""


def _check_width(text: str, width: int) -> None:
    for line in text.splitlines():
        plain = ANSI.sub("", line)
        assert len(plain) <= width, f"{len(plain)} > {width}: {plain!r}"
        assert plain == plain.rstrip(), f"padded: {plain!r}"


@pytest.mark.parametrize("width", [60, 80, 200])
@pytest.mark.parametrize("markup", [False, True])
def test_comparison_and_preview_fit_the_width_and_never_break_names(width, markup):
    from pytest_reward.report.terminal import render_comparison, render_probe_changes
    from pytest_reward.run.baseline import compare_probes, compare_runs

    def run(shift: float) -> dict:
        samples = {
            f"k{i}": {
                "score": 0.5 + shift,
                "verdict": "pass",
                "id": f"sample-{i}",
                "line": i + 1,
                "response": None,
            }
            for i in range(20)
        }
        group = {"function": "evaluate_response_quality", "file": "samples.jsonl", "samples": samples}
        return {"format": "pytest-reward-run", "version": 2, "name": "0001_base", "groups": [group]}

    comparisons = compare_runs(run(-0.1), run(0.0), seed=0, n_resamples=200)
    text = render_comparison(comparisons, "0001_base", markup=markup, width=width)
    text += render_probe_changes(compare_probes(run(-0.1), run(0.0)), markup=markup, width=width)
    _check_width(text, width)
    plain = ANSI.sub("", text)
    assert "evaluate_response_quality" in plain and "samples.jsonl" in plain
    assert "-0.1000" in plain  # the Δ mean survives every width
    if width >= 200:
        assert "| samples " in plain or " samples " in plain.splitlines()[1]


@pytest.mark.parametrize("columns", ["60", "80"])
@pytest.mark.parametrize("color", ["no", "yes"])
def test_reward_output_fits_columns_in_a_ci_log(project, monkeypatch, columns, color):
    project.file("rewards.py", LONG_NAMES)
    project.jsonl("samples.jsonl", [{"id": f"s{i}", "messages": msgs("q " * 40, "0.5")} for i in range(4)])
    assert project.run("--reward-samples", "samples.jsonl", "--reward-save=base").ret == 0
    monkeypatch.setenv("COLUMNS", columns)
    result = project.run(
        "--reward-samples", "samples.jsonl", "--reward-compare=base", "--reward-preview=2", f"--color={color}"
    )
    assert result.ret == 0
    out = ANSI.sub("", result.stdout.str())
    section = out[out.index("reward summary") : out.rindex("passed in")]  # the plugin's part of the output
    _check_width("\n".join(section.splitlines()[1:-1]), int(columns))
    assert "evaluate_response_quality" in section and "samples.jsonl" in section
