"""The README stays true: its option table is the plugin's own option list, and every option is registered."""

from __future__ import annotations

import re

from pytest_reward.judge.gates import GATE_KINDS, SETTINGS_HELP, marker_doc
from pytest_reward.plugin.options import OPTIONS, markdown_table

from .conftest import REPO

START, END = "<!-- options-table:start -->", "<!-- options-table:end -->"


def readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_leads_with_the_two_commands():
    text = readme()
    block = text[text.index("```") : text.index("```", text.index("```") + 3)]
    assert re.search(r"^make demo\b", block.strip("`\n"), re.M)
    assert re.search(r"^make test\b", block, re.M)
    assert text.index("make demo") < text.index("## ")


def test_readme_option_table_matches_the_plugin():
    text = readme()
    table = text[text.index(START) + len(START) : text.index(END)].strip()
    expected = markdown_table()
    assert table == expected, (
        "README option table is stale; regenerate it with: python -m pytest_reward.plugin.options"
    )


def test_every_declared_option_is_registered(pytester):
    result = pytester.runpytest("--help")
    out = result.stdout.str()
    for opt in OPTIONS:
        if opt.flag:
            assert opt.flag in out
        if opt.ini:
            assert opt.ini in out


def test_marker_is_registered_with_every_gate_kind(pytester):
    result = pytester.runpytest("--markers")
    line = f"@pytest.mark.{marker_doc()}"
    assert line in result.stdout.lines
    signature = line.partition("(")[2].partition(")")[0]
    assert [part.partition("=")[0] for part in signature.split(", ")] == [
        *(kind.key for kind in GATE_KINDS),
        "confidence",
        "metrics",
        *(key for key, _ in SETTINGS_HELP),
    ]
    assert signature.startswith("threshold=None, mean=None, max_mean=None, pass_rate=None, quantile=None, ")
    for kind in GATE_KINDS:
        assert f"; {kind.usage()}: {kind.help};" in line or f". {kind.usage()}: {kind.help};" in line
