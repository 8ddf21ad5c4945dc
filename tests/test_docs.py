"""The docs stay true: the reference pages' tables are the plugin's own option list and gate table, every option is
registered, and the README leads with the two commands."""

from __future__ import annotations

import re

from pytest_reward.judge import gates
from pytest_reward.judge.gates import GATE_KINDS, SETTINGS_HELP, marker_doc
from pytest_reward.plugin.options import OPTIONS, markdown_table

from .conftest import REPO


def readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_leads_with_the_two_commands():
    text = readme()
    block = text[text.index("```") : text.index("```", text.index("```") + 3)]
    assert re.search(r"^make demo\b", block.strip("`\n"), re.M)
    assert re.search(r"^make test\b", block, re.M)
    assert text.index("make demo") < text.index("## ")


def _generated(page: str, name: str) -> str:
    text = (REPO / "docs" / "reference" / page).read_text(encoding="utf-8")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    return text[text.index(start) + len(start) : text.index(end)].strip()


def test_options_page_table_matches_the_plugin():
    assert _generated("options.md", "options-table") == markdown_table(), (
        "docs/reference/options.md's table is stale; regenerate it with: make docs-tables"
    )


def test_marker_page_table_matches_the_gate_table():
    assert _generated("marker.md", "marker-table") == gates.markdown_table(), (
        "docs/reference/marker.md's table is stale; regenerate it with: make docs-tables"
    )


def test_marker_page_lists_every_key():
    table = _generated("marker.md", "marker-table")
    keys = [row.split("|")[1].strip().strip("`").partition("=")[0] for row in table.splitlines()[2:]]
    assert keys == [*(kind.key for kind in GATE_KINDS), "confidence", "metrics", *(k for k, _ in SETTINGS_HELP)]


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
