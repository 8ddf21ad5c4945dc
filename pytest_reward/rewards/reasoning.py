"""Reasoning-structure rewards: ``reasoning_steps_reward`` (explicit steps, numbered lists, bullets,
transitions) and ``sequence_reward`` (ordered sequence words such as "First … Then … Finally")."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message, MetricResult
from ._common import assistant_text, invalid, metric

DEFAULT_STEP_PATTERNS = (
    r"Step\s+\d+[:.]\s+",
    r"^\s*\d+\.\s+",
    r"\n\s*\d+\.\s+",
    r"\n\s*-\s+",
    r"\n\s*\*\s+",
    r"\b(?:First|Second|Third|Fourth|Fifth|Next|Then|Finally)[,:]",
    r"\b(?:Let's|I will|To solve this|To begin)[,:]",
)
DEFAULT_SEQUENCE_TERMS = (
    "First",
    "Second",
    "Third",
    "Fourth",
    "Fifth",
    "Next",
    "Then",
    "Finally",
    "Conclusion",
)

_EXPLICIT = re.compile(r"Step\s+\d+[:.]\s+", re.MULTILINE)
_NUMBERED = re.compile(r"(?:^|\n)\s*\d+\.\s+", re.MULTILINE)
_BULLETS = re.compile(r"(?:^|\n)\s*[-*]\s+", re.MULTILINE)
_TRANSITIONS = re.compile(r"\b(?:First|Second|Third|Next|Then|Finally)[,:]", re.MULTILINE)


@lru_cache(maxsize=128)
def _combined(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.MULTILINE)


@reward_function
def reasoning_steps_reward(
    messages: list[Message] | list[dict[str, Any]],
    pattern: str | None = None,
    min_steps: int = 3,
    max_steps: int | None = None,
    exclusive_patterns: bool = False,
    **kwargs: Any,
) -> EvaluateResult:
    """Count reasoning steps (default patterns plus ``pattern``, or only ``pattern`` with
    ``exclusive_patterns=True``). Score ``min(1, steps / min_steps)``; with ``max_steps``, a linear ramp from
    ``min_steps - 1`` steps (0) to ``max_steps`` steps (1). Metrics: ``reasoning_steps`` plus, when present,
    ``explicit_steps``, ``numbered_lists``, ``bullet_points``, ``transition_phrases``.

    Differences from reward-kit (deliberate): ``min_steps <= 0`` or ``max_steps < min_steps`` give an invalid
    result naming the bad parameter (reward-kit raised ZeroDivisionError for ``max_steps == min_steps - 1``);
    an invalid ``pattern`` gives an invalid result instead of raising ``re.error``.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "reasoning_steps")
    if min_steps <= 0:
        return invalid(f"min_steps must be positive, got {min_steps}", "reasoning_steps")
    if max_steps is not None and max_steps < min_steps:
        return invalid(f"max_steps ({max_steps}) must be >= min_steps ({min_steps})", "reasoning_steps")
    patterns = (
        (pattern,)
        if pattern and exclusive_patterns
        else ((pattern,) if pattern else ()) + DEFAULT_STEP_PATTERNS
    )
    try:
        steps = len(_combined(patterns).findall(text))
    except re.error as exc:
        return invalid(f"Invalid pattern {pattern!r}: {exc}", "reasoning_steps")
    if steps == 0:
        score = 0.0
    elif max_steps is not None:
        score = min(1.0, max(0.0, (steps - min_steps + 1) / (max_steps - min_steps + 1)))
    else:
        score = min(1.0, steps / min_steps)
    metrics: dict[str, MetricResult] = {
        "reasoning_steps": metric(score, f"Found {steps} reasoning steps (minimum required: {min_steps})")
    }
    for name, regex, label in (
        ("explicit_steps", _EXPLICIT, "explicit steps"),
        ("numbered_lists", _NUMBERED, "numbered list items"),
        ("bullet_points", _BULLETS, "bullet points"),
        ("transition_phrases", _TRANSITIONS, "transition phrases"),
    ):
        count = len(regex.findall(text))
        if count:
            metrics[name] = metric(count / min_steps, f"Found {count} {label}")
    reason = f"Detected {steps} reasoning steps (required: {min_steps})"
    if max_steps:
        reason += f", max: {max_steps}"
    return EvaluateResult(score=score, reason=reason, metrics=metrics)


@reward_function
def sequence_reward(
    messages: list[Message] | list[dict[str, Any]],
    sequence_terms: list[str] | None = None,
    min_matches: int = 3,
    case_sensitive: bool = False,
    **kwargs: Any,
) -> EvaluateResult:
    """Count ``sequence_terms`` that appear in order (each after the previous one found); score
    ``min(1, matches / min_matches)``. Metrics: ``sequence_reasoning``, ``sequential_terms_found``.

    Differences from reward-kit (deliberate): terms match whole words (reward-kit's substring search found
    "then" inside "authentication" and "first" inside "firstly"); ``min_matches <= 0`` gives an invalid result
    instead of ZeroDivisionError.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "sequence_reasoning")
    if min_matches <= 0:
        return invalid(f"min_matches must be positive, got {min_matches}", "sequence_reasoning")
    terms = list(sequence_terms or DEFAULT_SEQUENCE_TERMS)
    flags = 0 if case_sensitive else re.IGNORECASE
    found: list[str] = []
    position = 0
    for term in terms:
        match = re.compile(rf"(?<!\w){re.escape(term)}(?!\w)", flags).search(text, position)
        if match:
            found.append(term if case_sensitive else term.lower())
            position = match.end()
    score = min(1.0, len(found) / min_matches)
    return EvaluateResult(
        score=score,
        reason=f"Detected {len(found)} sequential reasoning terms in order (required: {min_matches})",
        metrics={
            "sequence_reasoning": metric(
                score, f"Found {len(found)} sequential terms (minimum required: {min_matches})"
            ),
            "sequential_terms_found": metric(score, f"Sequential terms found: {', '.join(found)}"),
        },
    )
