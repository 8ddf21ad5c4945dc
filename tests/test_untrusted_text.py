"""Text from samples and rewards (responses, prompts, reasons, ids, names) on its way out: control characters never
reach the terminal raw, data is never parsed as rich markup, the GitHub step summary escapes it, and a lone
surrogate writes (escaped) like any other character."""

from __future__ import annotations

from pytest_reward.report.text import visible

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
