"""The README stays true: its option table is the plugin's own option list, and every option is registered."""

from __future__ import annotations

import re

import pytest

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


@pytest.mark.parametrize("name", ["reward"])
def test_marker_is_registered(pytester, name):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines([f"@pytest.mark.{name}(threshold=None, mean=None, *"])
