"""Parsing numbers as models write them: ``-3``, ``1,234.5``, ``2.5e-3``, ``3/4``, ``\\frac{3}{4}``, ``-\\dfrac{1}{2}``,
``1.5 \\times 10^{3}``, ``50\\%``."""

from __future__ import annotations

import math
import re

__all__ = ["parse_number"]

_PLAIN = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?")
_FRACTION = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*/\s*([-+]?\d+(?:\.\d+)?)")
_LATEX_FRACTION = re.compile(
    r"([-+]?)\s*\\[dt]?frac\s*\{\s*([-+]?\d+(?:\.\d+)?)\s*\}\s*\{\s*([-+]?\d+(?:\.\d+)?)\s*\}"
)
_LATEX_FRACTION_SHORT = re.compile(r"([-+]?)\s*\\[dt]?frac(\d)(\d)")
_TIMES_TEN = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|×|\*)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?")


def _strip_wrappers(text: str) -> str:
    text = text.strip()
    for _ in range(3):
        before = text
        text = text.strip().strip("$").strip()
        if text.startswith("\\(") and text.endswith("\\)"):
            text = text[2:-2].strip()
        if text.startswith("\\[") and text.endswith("\\]"):
            text = text[2:-2].strip()
        if text.startswith("{") and text.endswith("}") and text.count("{") == 1:
            text = text[1:-1].strip()
        text = re.sub(r"\\(?:left|right)(?=[()\[\]])", "", text)
        text = text.replace("\\!", "").replace("\\,", "").replace("{,}", ",")
        if text == before:
            break
    return text


def parse_number(text: str) -> float | None:
    """The value of ``text`` when the whole of it is one number, else ``None``. Never NaN or infinite."""
    text = _strip_wrappers(text)
    if not text:
        return None
    percent = text.endswith("%") or text.endswith("\\%")
    if percent:
        text = text[: -2 if text.endswith("\\%") else -1].strip()
    value: float | None = None
    try:
        if _PLAIN.fullmatch(text):
            value = float(text.replace(",", ""))
        elif m := _FRACTION.fullmatch(text):
            den = float(m.group(2))
            value = float(m.group(1)) / den if den else None
        elif m := _LATEX_FRACTION.fullmatch(text) or _LATEX_FRACTION_SHORT.fullmatch(text):
            den = float(m.group(3))
            value = (-1.0 if m.group(1) == "-" else 1.0) * float(m.group(2)) / den if den else None
        elif m := _TIMES_TEN.fullmatch(text):
            value = float(m.group(1)) * 10.0 ** int(m.group(2))
    except (ValueError, OverflowError):
        return None
    if value is None or not math.isfinite(value):
        return None
    return value / 100.0 if percent else value
