"""``format_reward``: does the response match a format regex (by default ``<think>…</think><answer>…</answer>``)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message
from ._common import assistant_text, invalid, metric

DEFAULT_FORMAT_REGEX = r"^<think>\n.*?</think>\n<answer>\n.*?</answer>$"


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.DOTALL)


@reward_function
def format_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: Any = None,
    format_regex: str = DEFAULT_FORMAT_REGEX,
    require_exact_match: bool = True,
    **kwargs: Any,
) -> EvaluateResult:
    """1.0 when the last (assistant) message matches ``format_regex`` (``re.DOTALL``), else 0.0.

    ``require_exact_match=True`` anchors the match at the start (``re.match``; the default pattern also ends in
    ``$``), ``False`` finds it anywhere (``re.search``). ``ground_truth`` is ignored. Metric: ``format_check``.

    Differences from reward-kit (deliberate): a wrong format is a *valid* score of 0 (reward-kit marks it
    ``is_score_valid=False``); an invalid ``format_regex`` gives an invalid result naming the regex error
    instead of raising ``re.error``.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "format_check")
    try:
        pattern = _compile(format_regex)
    except re.error as exc:
        return invalid(f"Invalid format_regex {format_regex!r}: {exc}", "format_check")
    matched = (pattern.match(text) if require_exact_match else pattern.search(text)) is not None
    if matched:
        return EvaluateResult(
            score=1.0,
            reason="Format is correct",
            metrics={"format_check": metric(1.0, "Text follows the required format pattern")},
        )
    return EvaluateResult(
        score=0.0,
        reason="Format is incorrect",
        metrics={"format_check": metric(0.0, "Text does not follow the required format pattern")},
    )
