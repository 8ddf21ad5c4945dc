"""N-gram rewards: ``repetition_penalty_reward`` (penalise repeated n-grams) and ``diversity_reward`` (lexical
diversity over several n-gram sizes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message, MetricResult
from ._common import assistant_text, invalid, metric


def _words(text: str, language: str) -> list[str]:
    if language == "zh":
        try:
            import jieba  # optional, as in reward-kit

            return [w for w in jieba.cut(text) if w.strip()]
        except ImportError:
            return [c for c in text if not c.isspace()]
    return text.lower().split()


def get_ngrams(text: str, n: int, language: str = "en") -> tuple[list[tuple[str, ...]], int]:
    """The word n-grams of ``text`` (lower-cased, whitespace-split; characters or jieba words for ``"zh"``)."""
    words = _words(text, language)
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)] if n > 0 else []
    return grams, len(grams)


def _response(messages: Any, metric_name: str) -> tuple[str | None, EvaluateResult | None]:
    text, why = assistant_text(messages, allow_empty=True)
    if text is None:
        return None, invalid(why, metric_name)
    return text, None


@reward_function
def repetition_penalty_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: Any = None,
    ngram_size: int = 3,
    max_penalty: float = 0.5,
    language: str = "en",
    **kwargs: Any,
) -> EvaluateResult:
    """``1 - max_penalty * repetition_ratio``, where the ratio is the share of repeated ``ngram_size``-grams.

    An empty response, or one shorter than one n-gram, scores 1.0 (nothing repeated). Metrics: ``repetition``,
    ``unique_ngram_ratio``, ``repetition_penalty``.

    Differences from reward-kit (deliberate): ``max_penalty > 1`` no longer crashes with a MetricResult
    ValidationError (the score is clipped at 0, as reward-kit's top-level score was, and so are the metrics);
    ``is_score_valid`` stays ``True`` for a heavily repeated response (reward-kit set it to ``score > 0``).
    """
    text, failure = _response(messages, "repetition")
    if failure is not None:
        return failure
    assert text is not None
    if not text.strip():
        metrics = {
            "repetition": metric(1.0, "Empty response"),
            "unique_ngram_ratio": metric(1.0, "Empty response"),
            "repetition_penalty": metric(1.0, "No penalty applied to empty response"),
        }
        return EvaluateResult(score=1.0, reason="Empty response, no repetition to penalize", metrics=metrics)
    grams, total = get_ngrams(text, ngram_size, language)
    if total < 1:
        reason = f"Text too short for {ngram_size}-gram analysis"
        return EvaluateResult(score=1.0, reason=reason, metrics={"repetition": metric(1.0, reason)})
    unique = len(set(grams))
    ratio = 1.0 - unique / total
    penalty = ratio * max_penalty
    score = max(0.0, 1.0 - penalty)
    reason = f"Repetition ratio: {ratio:.2f}, Unique {ngram_size}-grams: {unique}/{total}"
    return EvaluateResult(
        score=score,
        reason=reason,
        metrics={
            "repetition": metric(score, reason),
            "unique_ngram_ratio": metric(1.0 - ratio, f"Unique {ngram_size}-gram ratio: {1.0 - ratio:.2f}"),
            "repetition_penalty": metric(1.0 - penalty, f"Applied repetition penalty: {penalty:.2f}"),
        },
    )


def _normalised_weights(sizes: Sequence[int], weights: Sequence[float] | None) -> list[float]:
    chosen = list(weights) if weights is not None else [0.2, 0.3, 0.5][: len(sizes)]
    if len(chosen) > len(sizes):
        chosen = chosen[: len(sizes)]
    elif len(chosen) < len(sizes):
        missing = len(sizes) - len(chosen)
        chosen += [max(0.0, 1.0 - sum(chosen)) / missing] * missing
    total = sum(chosen)
    if total <= 0:
        return [1.0 / len(chosen)] * len(chosen) if chosen else []
    return [w / total for w in chosen]


@reward_function
def diversity_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: Any = None,
    ngram_sizes: list[int] | tuple[int, ...] = (1, 2, 3),
    weights: list[float] | None = None,
    language: str = "en",
    **kwargs: Any,
) -> EvaluateResult:
    """Weighted mean over ``ngram_sizes`` of (unique n-grams / n-grams). Default weights 0.2/0.3/0.5.

    An empty response scores 0. Metrics: ``diversity`` and ``ngram_<n>`` per size.

    Differences from reward-kit (deliberate):

    * a response shorter than the largest n-gram crashed reward-kit (it added an *unweighted* 1.0 for each
      size with no n-grams, so ``"hello"`` scored 2.2 and the ``diversity`` MetricResult raised a
      ValidationError); here such a size counts as fully diverse *with its weight*, so scores stay in [0, 1];
    * the caller's ``weights`` list is no longer extended in place, and the default ``ngram_sizes`` is an
      immutable tuple (reward-kit's mutable default list);
    * an empty response is a valid 0 (reward-kit: ``is_score_valid=False``).
    """
    text, failure = _response(messages, "diversity")
    if failure is not None:
        return failure
    assert text is not None
    if not text.strip():
        return EvaluateResult(
            score=0.0, reason="Empty response", metrics={"diversity": metric(0.0, "Empty response")}
        )
    sizes = list(ngram_sizes)
    if not sizes:
        return invalid("ngram_sizes is empty", "diversity")
    size_metrics: dict[str, MetricResult] = {}
    score = 0.0
    for size, weight in zip(sizes, _normalised_weights(sizes, weights), strict=True):
        grams, total = get_ngrams(text, size, language)
        ratio = len(set(grams)) / total if total else 1.0
        score += ratio * weight
        size_metrics[f"ngram_{size}"] = metric(ratio, f"Diversity ratio for ngram_{size}: {ratio:.2f}")
    score = min(1.0, max(0.0, score))
    return EvaluateResult(
        score=score,
        reason=f"Lexical diversity score: {score:.2f}",
        metrics={
            "diversity": metric(score, f"Overall weighted diversity score: {score:.2f}"),
            **size_metrics,
        },
    )
