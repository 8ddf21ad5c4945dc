"""``tag_count_reward``: are the required XML-like tags present (and balanced)."""

from __future__ import annotations

import re
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message, MetricResult
from ._common import assistant_text, invalid, metric


def _tag_reason(tag: str, opening: int, closing: int, require_balanced: bool) -> str:
    if opening == 0 and closing == 0:
        return f"Tag '{tag}' not found in response"
    if closing == 0:
        return f"Found {opening} opening <{tag}> tag(s) but no closing"
    if opening == 0:
        return f"Found {closing} closing </{tag}> tag(s) but no opening"
    if opening == closing:
        return f"Found {opening} balanced '{tag}' tag(s)"
    if require_balanced:
        return f"Unbalanced tags: {opening} opening vs {closing} closing '{tag}' tags"
    return f"Found '{tag}' tags (unbalanced: {opening} opening, {closing} closing)"


@reward_function
def tag_count_reward(
    messages: list[Message] | list[dict[str, Any]],
    *,
    required_tags: list[str],
    score_per_tag: float = 0.25,
    require_balanced: bool = True,
    **kwargs: Any,
) -> EvaluateResult:
    """``score_per_tag`` for each required tag found (capped at 1), minus ``score_per_tag`` per unbalanced tag.

    A tag counts as found when it has opening (``<tag ...>``) and closing (``</tag>``) tags in equal number
    (``require_balanced=True``) or either of them (``False``). Metrics: ``tag_<name>`` per tag and ``overall``.

    Differences from reward-kit (deliberate): tag names are regex-escaped (reward-kit interpolates them into a
    pattern, so ``required_tags=["a.b"]`` matched ``<aXb>`` and ``"c++"`` never matched ``<c++>``); a tag name must
    end where the name ends, so ``<answers>`` or ``<abbr>`` no longer count as ``<answer>`` / ``<a>``
    (reward-kit's ``<a[^>]*>`` matched them); a missing tag is a valid score, not ``is_score_valid=False``.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "tag_count")
    metrics: dict[str, MetricResult] = {}
    found: list[str] = []
    unbalanced: list[str] = []
    for tag in required_tags:
        name = re.escape(tag)
        opening = len(re.findall(rf"<{name}(?:\s[^>]*)?>", text))
        closing = len(re.findall(rf"</{name}\s*>", text))
        balanced = opening == closing
        if require_balanced:
            is_found = opening > 0 and closing > 0 and balanced
            if not balanced and (opening or closing):
                unbalanced.append(tag)
        else:
            is_found = opening > 0 or closing > 0
        if is_found:
            found.append(tag)
        metrics[f"tag_{tag}"] = metric(
            1.0 if is_found else 0.0, _tag_reason(tag, opening, closing, require_balanced)
        )
    score = min(1.0, len(found) * score_per_tag)
    if unbalanced:
        score = max(0.0, score - len(unbalanced) * score_per_tag)
    missing = [t for t in required_tags if t not in found]
    if not found:
        reason = "No required tags found in response"
    elif not missing and not unbalanced:
        reason = f"All {len(required_tags)} required tags found and balanced"
    else:
        parts = [f"Found {len(found)}/{len(required_tags)} required tags"]
        if missing:
            parts.append("Missing tags: " + ", ".join(f"'{t}'" for t in missing))
        if unbalanced:
            parts.append("Unbalanced tags: " + ", ".join(f"'{t}'" for t in unbalanced))
        reason = ". ".join(parts)
    metrics["overall"] = metric(score, reason)
    return EvaluateResult(score=score, reason=reason, metrics=metrics)
