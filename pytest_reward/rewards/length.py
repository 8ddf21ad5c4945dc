"""Length rewards: ``length_reward`` (target / min / max length) and ``cosine_length_reward`` (Kimi/OpenR1-style
cosine schedule by correctness)."""

from __future__ import annotations

import math
import re
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message
from ._common import assistant_text, clamp01, invalid, metric

_WHITESPACE = re.compile(r"\s+")
_WORDS = re.compile(r"\b\w+\b")


def count_tokens(text: str, method: str = "whitespace") -> int:
    """Tokens in ``text``: ``"whitespace"`` (runs of non-space), ``"character"`` or ``"words"`` (``\\w+``).

    Unknown methods count like ``"whitespace"`` (as reward-kit does). Unlike reward-kit, empty or
    whitespace-only text has 0 tokens (reward-kit's ``re.split`` counted 1).
    """
    if method == "character":
        return len(text)
    if method == "words":
        return len(_WORDS.findall(text))
    stripped = text.strip()
    return len(_WHITESPACE.split(stripped)) if stripped else 0


def _cosine_rise(progress: float) -> float:
    """0 at progress 0, 1 at progress 1, along a quarter cosine."""
    return 1.0 - math.cos(progress * math.pi / 2.0)


@reward_function
def length_reward(
    messages: list[Message] | list[dict[str, Any]],
    *,
    ground_truth: Any = None,
    target_length: int | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    token_method: str = "whitespace",
    scaling: str = "linear",
    reward_range: list[float] | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """Score the response length in tokens, within ``reward_range`` (default ``[0, 1]``).

    * ``target_length``: the top of the range at the target, falling linearly (or along a cosine with
      ``scaling="cosine"``) with the relative deviation, reaching the bottom at 100 % deviation;
    * ``min_length`` and/or ``max_length``: the top inside the bounds; below ``min_length`` rising with
      ``tokens / min_length``; above ``max_length`` falling with the excess relative to ``max_length -
      min_length`` (or to ``max_length`` alone);
    * none of them: shorter is better, 0 tokens → top, 100+ tokens → bottom.

    Metrics: ``length`` (the score mapped to [0, 1]) and ``token_count`` (tokens / reference length, capped).

    Differences from reward-kit (deliberate): with a ``reward_range`` other than [0, 1] reward-kit put the raw
    score into ``MetricResult`` and raised a ValidationError (e.g. ``reward_range=[-1, 1]``); here the top-level
    score keeps the range and the ``length`` metric is normalised to [0, 1]. ``target_length=0`` no longer
    divides by zero in the cosine branch; whitespace-only text counts 0 tokens.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "length")
    low, high = (reward_range or [0.0, 1.0])[:2]
    tokens = count_tokens(text, token_method)
    cosine = scaling == "cosine"
    # `quality` is in [0, 1]; the score is low + (high - low) * quality.
    if target_length is not None:
        deviation = (
            abs(tokens - target_length) / target_length
            if target_length > 0
            else (0.0 if tokens == 0 else 1.0)
        )
        progress = min(1.0, deviation)
        quality = (1.0 + math.cos(progress * math.pi)) / 2.0 if cosine else 1.0 - progress
        reason = (
            f"Response length ({tokens} tokens) deviated by {deviation:.2f} from target ({target_length})"
        )
    elif min_length is not None and tokens < min_length:
        progress = tokens / min_length if min_length > 0 else 1.0
        quality = _cosine_rise(progress) if cosine else progress
        reason = f"Response length ({tokens} tokens) is below minimum ({min_length})"
    elif max_length is not None and tokens > max_length:
        if min_length is not None:
            span = max_length - min_length if max_length > min_length else 1
        else:
            span = max_length
        progress = min(1.0, (tokens - max_length) / span) if span > 0 else 1.0
        quality = 1.0 - (_cosine_rise(progress) if cosine else progress)
        reason = f"Response length ({tokens} tokens) exceeds maximum ({max_length})"
    elif min_length is not None or max_length is not None:
        quality = 1.0
        bounds = (
            f"{min_length if min_length is not None else 0}-{max_length if max_length is not None else '∞'}"
        )
        reason = f"Response length ({tokens} tokens) is within acceptable range ({bounds})"
    else:
        progress = min(1.0, tokens / 100)
        quality = (1.0 + math.cos(progress * math.pi)) / 2.0 if cosine else 1.0 - progress
        reason = f"Response length: {tokens} tokens"
    quality = clamp01(quality)
    score = low + (high - low) * quality
    reference = target_length or max_length or min_length or 100
    return EvaluateResult(
        score=score,
        reason=reason,
        metrics={
            "length": metric(quality, reason),
            "token_count": metric(tokens / reference if reference > 0 else 1.0, f"Token count: {tokens}"),
        },
    )


@reward_function
def cosine_length_reward(
    messages: list[Message] | list[dict[str, Any]],
    *,
    ground_truth: Any = None,
    correctness: float | None = None,
    is_correct: bool | None = None,
    max_length: int = 1000,
    min_value_wrong: float = 0.0,
    max_value_wrong: float = 0.3,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    token_method: str = "whitespace",
    **kwargs: Any,
) -> EvaluateResult:
    """Cosine length schedule: shorter correct answers earn more, longer wrong answers are penalised less.

    Correct (``is_correct=True``, or ``correctness >= 0.9``): from ``max_value_correct`` at 0 tokens down to
    ``min_value_correct`` at ``max_length``. Wrong (or correctness unknown): from ``min_value_wrong`` at 0 tokens
    up to ``max_value_wrong`` at ``max_length``. Metrics: ``cosine_length``, ``token_count``, ``correctness``.

    Differences from reward-kit (deliberate): negative values (the usual choice for wrong answers) no longer
    raise a MetricResult ValidationError: the score keeps them, the ``cosine_length`` metric is clipped to [0, 1].
    ``max_length <= 0`` gives an invalid result instead of ZeroDivisionError.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "cosine_length")
    if max_length <= 0:
        return invalid(f"max_length must be positive, got {max_length}", "cosine_length")
    tokens = count_tokens(text, token_method)
    correct = bool(is_correct) if is_correct is not None else correctness is not None and correctness >= 0.9
    progress = min(1.0, tokens / max_length)
    cosine_factor = math.cos(progress * math.pi)
    start, end = (max_value_correct, min_value_correct) if correct else (min_value_wrong, max_value_wrong)
    score = end + 0.5 * (start - end) * (1.0 + cosine_factor)
    kind = "reward" if correct else "penalty"
    detail = f"Length-based {kind}: {tokens}/{max_length} tokens, cosine factor: {cosine_factor:.2f}"
    reason = (
        f"Correct solution with length penalty: {tokens} tokens"
        if correct
        else f"Incorrect solution with length consideration: {tokens} tokens"
    )
    return EvaluateResult(
        score=score,
        reason=reason,
        metrics={
            "cosine_length": metric(score, detail),
            "token_count": metric(tokens / max_length, f"Token count: {tokens}/{max_length}"),
            "correctness": metric(
                1.0 if correct else 0.0, f"Solution is {'correct' if correct else 'incorrect'}"
            ),
        },
    )
