"""Mutations of a response's program: one that exits 0 and prints nothing, and one that prints the expected output
without computing it. A code reward that pays for either pays for nothing (the "exit code 0 = full reward" bug);
the second also shows a reward judged on one test case, which a hard-coded answer always passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .mutations import ProbeSample

_FENCE = re.compile(r"```([\w+#-]*)[ \t]*\n([\s\S]*?)\n?```")
_PYTHON = ("python", "py", "python3", "")
_JAVASCRIPT = ("javascript", "js", "node")


def _program_exiting(language: str) -> str | None:
    if language in _PYTHON:
        return "import sys\nsys.exit(0)"
    if language in _JAVASCRIPT:
        return "process.exit(0);"
    return None


def _program_printing(language: str, text: str) -> str | None:
    if language in _PYTHON:
        return f"import sys\nsys.stdout.write({text!r})"
    if language in _JAVASCRIPT:
        return f"process.stdout.write({json.dumps(text)});"
    return None


def expected_output(ground_truth: Any) -> str | None:
    """The output a program is expected to print: a string ground truth, or the first test case's
    ``expected_output`` (``output``) of a list of test cases; None when the ground truth names none."""
    if isinstance(ground_truth, str):
        return ground_truth if ground_truth.strip() else None
    if isinstance(ground_truth, list) and ground_truth and isinstance(ground_truth[0], Mapping):
        first = ground_truth[0]
        value = first.get("expected_output", first.get("output"))
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    return None


def _replace_program(response: str, program_of: Any) -> str | None:
    m = _FENCE.search(response)
    if m is None:
        return None
    language = m.group(1).lower()
    program = program_of(language)
    if program is None:
        return None
    return f"{response[: m.start()]}```{m.group(1)}\n{program}\n```{response[m.end() :]}"


def _code_exit0(response: str, sample: ProbeSample) -> str | None:
    return _replace_program(response, _program_exiting)


def _code_hardcoded(response: str, sample: ProbeSample) -> str | None:
    expected = expected_output(sample._ground_truth)
    if expected is None:
        return None
    return _replace_program(response, lambda language: _program_printing(language, expected))
