"""Untrusted text (responses, prompts, reasons, sample ids, file and function names) on its way out.

To a terminal, :func:`visible`: control characters (ESC, BEL, CR, C1 codes such as CSI ``\\x9b``, bidi overrides)
and lone surrogates are written as Python escapes (``\\x1b``, ``\\u202e``, ``\\ud83d``), so a response can neither
move the cursor, rewrite lines already printed, set the clipboard or title, nor fail to encode. Into GitHub-flavoured
Markdown, :func:`md_text` (escaped prose) and :func:`md_code` (a code span whose fence no backtick run can close).
"""

from __future__ import annotations

import html
import re

__all__ = ["md_code", "md_text", "visible"]

# C0 controls but tab and newline, DEL and C1, bidi embeddings/overrides/isolates, lone surrogates.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_IN_BLOCK = re.compile(f"[{_UNSAFE}]")
_IN_LINE = re.compile(f"[\t\n{_UNSAFE}]")
_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!|~$:@^])")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, block: bool = False) -> str:
    """``text`` safe to write to a terminal: one line (newlines and tabs shown as ``\\n``, ``\\t``), or with
    ``block`` its newlines and tabs kept."""
    text = str(text)
    return (_IN_BLOCK if block else _IN_LINE).sub(_escape, text)


def md_text(text: object) -> str:
    """``text`` as literal Markdown prose on one line: HTML escaped, Markdown punctuation backslashed (safe in a
    table cell too)."""
    return html.escape(_MD_PUNCT.sub(r"\\\1", visible(text)), quote=False)


def md_code(text: object, *, in_table: bool = True) -> str:
    """``text`` as a Markdown code span, fenced by more backticks than its longest run (``in_table``: ``|``
    escaped, which a table cell needs even inside code)."""
    text = visible(text)
    if not text.strip():
        return md_text(text) or "–"
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (max(len(run) for run in re.findall("`*", text)) + 1)
    if text[0] in "` " or text[-1] in "` ":
        text = f" {text} "  # one space each side is stripped by the renderer
    return f"{fence}{text}{fence}"
