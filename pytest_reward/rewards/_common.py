"""Helpers shared by the built-in rewards: reading messages (dicts or ``Message``), building results.

Semantics used by every built-in (a deliberate difference from reward-kit, see ``docs/rewards.md``):
``is_score_valid=False`` means *the reward could not be computed* (no assistant message, unusable ground truth,
sandbox failure), never *the answer was wrong*. A wrong answer is a valid score of 0. reward-kit sets it to
``False`` for wrong answers (a leftover of its old ``success=`` field), which makes trainers and aggregators
that drop invalid rows silently discard every negative sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..reward.models import EvaluateResult, Message, MetricResult

__all__ = [
    "assistant_text",
    "clamp01",
    "content_of",
    "field_of",
    "invalid",
    "metric",
    "role_of",
]


def field_of(message: Any, name: str, default: Any = None) -> Any:
    """``message.name`` for a ``Message`` (or any object), ``message[name]`` for a mapping."""
    if isinstance(message, Mapping):
        return message.get(name, default)
    return getattr(message, name, default)


def role_of(message: Any) -> str | None:
    role = field_of(message, "role")
    return role if isinstance(role, str) else None


def content_of(message: Any) -> str | None:
    """The text of a message: ``None`` when it has no content; multi-part content joined."""
    if isinstance(message, Message):
        return None if message.content is None else message.text
    content = field_of(message, "content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type", "text") == "text"
        )
    return str(content)


def assistant_text(messages: Any, *, allow_empty: bool = False) -> tuple[str | None, str]:
    """The content of the last message when it is an assistant message.

    Returns ``(text, "")`` or ``(None, reason)`` explaining why there is no usable response.
    """
    if not messages or not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return None, "No messages provided"
    last = messages[-1]
    if not isinstance(last, (Mapping, Message)):
        return None, f"Last message is of unexpected type {type(last).__name__}"
    if role_of(last) != "assistant":
        return None, f"Last message is not from the assistant (role {role_of(last)!r})"
    text = content_of(last)
    if text is None or (not text and not allow_empty):
        return None, "Assistant response has no content"
    return text, ""


def clamp01(value: float) -> float:
    """``value`` clipped to [0, 1]; NaN becomes 0."""
    if value != value:  # NaN
        return 0.0
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else float(value)


def metric(score: float, reason: str, valid: bool = True) -> MetricResult:
    """A ``MetricResult`` with the score clipped to [0, 1] (``MetricResult`` rejects anything else)."""
    return MetricResult(score=clamp01(score), reason=reason, is_score_valid=valid)


def invalid(reason: str, metric_name: str = "error", **extra_metrics: MetricResult) -> EvaluateResult:
    """Score 0, ``is_score_valid=False``: the reward could not be computed, with ``reason`` saying why."""
    metrics = {metric_name: MetricResult(score=0.0, reason=reason, is_score_valid=False), **extra_metrics}
    return EvaluateResult(score=0.0, reason=reason, is_score_valid=False, metrics=metrics, error=reason)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
