"""Answer accuracy: ``accuracy_reward`` (extract the final answer, compare with the ground truth, graded) and
``cosine_scaled_accuracy_length_reward`` (accuracy combined with a cosine length schedule)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message
from ._common import assistant_text, content_of, invalid, metric
from ._numbers import parse_number
from .length import count_tokens

_NUM = r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+(?:\.\d+)?)?"
_ANSWER_PATTERNS = [
    re.compile(
        rf"\b(?:answer|result|solution)\s*(?:is|:|=)\s*:?\s*(?:[a-z]\s*=\s*)?\$?\s*({_NUM})", re.IGNORECASE
    ),
    re.compile(rf"\b(?:therefore|thus|hence|so)\b[,:]?\s*(?:[a-z]\s*=\s*)?\$?\s*({_NUM})", re.IGNORECASE),
    re.compile(rf"\b(?:the value of|value of)\s*[a-z]\s*(?:is|=)\s*\$?\s*({_NUM})", re.IGNORECASE),
    re.compile(rf"\b[a-z]\s*=\s*({_NUM})(?![\d/])"),
]
_EQUALS = re.compile(rf"(?:=|\bequals\b)\s*\$?\s*({_NUM})", re.IGNORECASE)
_ANY_NUMBER = re.compile(rf"(?<![\w.])({_NUM})(?![\w])")
_PI = re.compile(r"(?:=|\bis\b)\s*([-+]?\d+(?:\.\d+)?)?\s*(?:π|\\pi\b|\bpi\b)", re.IGNORECASE)
_PROPER_NOUN = re.compile(r"\bis\s+([A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*)")
_LATEX_BLOCKS = [re.compile(r"\$\$(.+?)\$\$", re.DOTALL), re.compile(r"\$([^$]+)\$"),
                 re.compile(r"\\\((.+?)\\\)", re.DOTALL), re.compile(r"\\\[(.+?)\\\]", re.DOTALL)]  # fmt: skip
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*)\}")
_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.IGNORECASE | re.DOTALL)


def normalize_text(text: str) -> str:
    """Lower-case, collapse whitespace, drop punctuation and brackets (keeps ``+ - * / =``)."""
    text = text.lower().replace("×", "*").replace("÷", "/")
    text = re.sub(r"[,.;:!?\"'()\[\]{}]", "", text)
    text = re.sub(r"[^\w\s+\-*/=]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def extract_math_expression(text: str) -> str:
    """The final answer in ``text``: ``\\boxed{}``, ``<answer>``, "the answer is N", "x = N", "= N", a
    LaTeX block, the only number of a short text, a proper noun after "is", or the short text itself."""
    if boxed := _BOXED.findall(text):
        return boxed[-1].strip()
    if tagged := _ANSWER_TAG.findall(text):
        return tagged[-1].strip()
    if (m := _PI.search(text)) is not None:
        return str((float(m.group(1)) if m.group(1) else 1.0) * math.pi)
    for pattern in _ANSWER_PATTERNS:
        if found := pattern.findall(text):
            return found[-1]
    if found := _EQUALS.findall(text):
        return found[-1]
    for pattern in _LATEX_BLOCKS:
        if blocks := pattern.findall(text):
            expr = blocks[-1].split("=")[-1].strip()
            numbers = _ANY_NUMBER.findall(expr)
            return numbers[-1] if numbers else re.sub(r"[\\{}\[\]]", "", expr).strip()
    lines = [line for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines[-3:]):
        if re.search(r"answer|result|solution", line, re.IGNORECASE) and (
            numbers := _ANY_NUMBER.findall(line)
        ):
            return numbers[-1]
    numbers = _ANY_NUMBER.findall(text)
    if len(text) < 200 and numbers and (len(numbers) == 1 or len(text.split()) < 30):
        return numbers[-1]
    if (m := _PROPER_NOUN.search(text)) is not None:
        return m.group(1).strip()
    if len(text) < 50:
        return normalize_text(text)
    return ""


def _as_number(text: str) -> float | None:
    return parse_number(text.strip().rstrip(".").strip())


def _numeric_similarity(pred: float, gt: float) -> float:
    if pred == gt:
        return 1.0
    error = abs(pred - gt)
    tolerance = 0.001 if abs(gt) < 0.1 else 0.01 if abs(gt) < 1.0 else 0.1
    if error <= tolerance:
        return 1.0
    if gt == 0:
        return 1.0 if error < 0.01 else 0.5 if error < 0.1 else 0.0
    relative = error / abs(gt)
    for bound, score in ((0.001, 1.0), (0.01, 0.9), (0.05, 0.8), (0.1, 0.5), (0.3, 0.3)):
        if relative < bound:
            return score
    return 0.0


def _word_jaccard(a: str, b: str) -> float:
    words_a, words_b = set(a.split()), set(b.split())
    if not words_a and not words_b:
        return 1.0
    return len(words_a & words_b) / len(words_a | words_b)


def compare_math_expressions(pred: str, gt: str) -> float:
    """Similarity in [0, 1] of an extracted answer and the ground truth.

    Both numeric (integers, decimals, fractions, LaTeX fractions, ``1,000``, percentages): 1.0 within a
    magnitude-dependent tolerance, then 0.9 / 0.8 / 0.5 / 0.3 for relative errors below 1 % / 5 % / 10 % / 30 %.
    Otherwise text: 1.0 for equal normalised text or the ground truth appearing as whole words in the
    prediction, else word Jaccard similarity.
    """
    if not pred and not gt:
        return 1.0
    if not pred or not gt:
        return 0.0
    pred_value, gt_value = _as_number(pred), _as_number(gt)
    if pred_value is not None and gt_value is not None:
        return _numeric_similarity(pred_value, gt_value)
    pred_norm, gt_norm = normalize_text(pred), normalize_text(gt)
    if pred_norm == gt_norm:
        return 1.0
    if gt_value is None and len(gt_norm) > 2 and re.search(rf"(?<!\w){re.escape(gt_norm)}(?!\w)", pred_norm):
        return 1.0
    return _word_jaccard(pred_norm, gt_norm)


def _ground_truth_text(ground_truth: Any) -> tuple[str | None, str]:
    if isinstance(ground_truth, str):
        return ground_truth, ""
    if isinstance(ground_truth, (int, float)) and not isinstance(ground_truth, bool):
        return str(ground_truth), ""
    if isinstance(ground_truth, Sequence) and ground_truth:
        text = content_of(ground_truth[0]) if not isinstance(ground_truth[0], str) else ground_truth[0]
        if text is None:
            return None, "Ground truth message has no content"
        return text, ""
    return None, "Ground truth not provided/invalid"


@reward_function
def accuracy_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: list[Message] | list[dict[str, Any]] | str | None,
    extract_fn: Callable[[str], str] | None = None,
    compare_fn: Callable[[str, str], float] | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """Extract the final answer from the response and compare it with the ground truth (graded in [0, 1]).

    ``ground_truth``: a list of messages whose first one holds the expected answer (reward-kit's convention),
    or the answer as a string. ``extract_fn(text) -> answer`` and ``compare_fn(pred, gt) -> float`` replace the
    built-in extraction and comparison. Metrics: ``answer_extraction``, ``answer_accuracy``.

    Differences from reward-kit (deliberate):

    * numbers are compared as numbers first: reward-kit's substring test scored ``"1"`` against ``"-12"`` as
      1.0, and any prediction and ground truth both starting with ``3.14`` (or ``314``) as 1.0 (``3.149`` vs
      ``3.14159``, ``314`` vs ``31400``);
    * a textual ground truth must appear as whole words (``"Paris"`` no longer matches ``"Parisian"``);
    * a ``compare_fn`` result outside [0, 1] is clipped instead of raising a MetricResult ValidationError;
    * a plain-string ``ground_truth`` is accepted; wrong answers are valid scores.
    """
    text, why = assistant_text(messages, allow_empty=True)
    if text is None:
        return invalid(why, "accuracy")
    expected, why = _ground_truth_text(ground_truth)
    if expected is None:
        return invalid(why, "accuracy")
    extracted = extract_fn(text) if extract_fn else extract_math_expression(text)
    if (
        not extracted
        and len(expected) > 2
        and re.search(rf"(?<!\w){re.escape(expected.lower())}(?!\w)", text.lower())
    ):
        extracted = expected
    similarity = (
        compare_fn(extracted, expected) if compare_fn else compare_math_expressions(extracted, expected)
    )
    similarity = max(0.0, min(1.0, float(similarity)))
    return EvaluateResult(
        score=similarity,
        reason=f"Expected: '{expected}', Extracted: '{extracted}', Similarity: {similarity:.2f}",
        metrics={
            "answer_extraction": metric(
                1.0 if extracted else 0.0,
                f"Extracted answer: '{extracted}'" if extracted else "Failed to extract answer",
            ),
            "answer_accuracy": metric(similarity, f"Answer similarity: {similarity:.2f}"),
        },
    )


@reward_function
def cosine_scaled_accuracy_length_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: list[Message] | list[dict[str, Any]] | str | None = None,
    extract_fn: Callable[[str], str] | None = None,
    compare_fn: Callable[[str, str], float] | None = None,
    max_length: int = 1000,
    min_value_wrong: float = 0.0,
    max_value_wrong: float = 0.3,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    token_method: str = "whitespace",
    correctness_weight: float = 0.7,
    length_weight: float = 0.3,
    **kwargs: Any,
) -> EvaluateResult:
    """``correctness_weight * accuracy + length_weight * length_score``, clipped to [0, 1].

    The answer counts as correct when ``accuracy_reward``'s similarity is at least 0.9. The length score
    follows ``cosine_length_reward``'s schedule (correct: ``max_value_correct`` → ``min_value_correct`` as the
    response grows to ``max_length`` tokens; wrong: ``min_value_wrong`` → ``max_value_wrong``). Metrics:
    ``combined_reward``, ``accuracy``, ``length``, ``token_count``.

    Differences from reward-kit (deliberate): an accuracy that cannot be computed (missing ground truth) makes
    the result invalid instead of a valid-looking length-only score; negative schedule values no longer raise a
    MetricResult ValidationError; ``max_length <= 0`` gives an invalid result instead of ZeroDivisionError.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "combined_reward")
    if max_length <= 0:
        return invalid(f"max_length must be positive, got {max_length}", "combined_reward")
    accuracy = accuracy_reward(
        messages=messages, ground_truth=ground_truth, extract_fn=extract_fn, compare_fn=compare_fn
    )
    if not accuracy.is_score_valid:
        return invalid(f"Accuracy could not be computed: {accuracy.reason}", "combined_reward")
    correct = accuracy.score >= 0.9
    tokens = count_tokens(text, token_method)
    progress = min(1.0, tokens / max_length)
    cosine_factor = math.cos(progress * math.pi)
    start, end = (max_value_correct, min_value_correct) if correct else (min_value_wrong, max_value_wrong)
    length_score = end + 0.5 * (start - end) * (1.0 + cosine_factor)
    combined = max(0.0, min(1.0, accuracy.score * correctness_weight + length_score * length_weight))
    kind = "reward" if correct else "penalty"
    length_reason = f"Length-based {kind}: {tokens}/{max_length} tokens, cosine factor: {cosine_factor:.2f}"
    return EvaluateResult(
        score=combined,
        reason=(
            f"Combined score (acc:{accuracy.score:.2f}*{correctness_weight:.1f} + len:{length_score:.2f}*"
            f"{length_weight:.1f} = {combined:.2f}). Accuracy: {accuracy.reason}. Length: {length_reason}"
        ),
        metrics={
            "combined_reward": metric(combined, f"Combined score: {combined:.2f}"),
            "accuracy": metric(accuracy.score, f"Accuracy: {accuracy.score:.2f}"),
            "length": metric(
                length_score, f"Length: {tokens}/{max_length} tokens, score: {length_score:.2f}"
            ),
            "token_count": metric(1.0 - progress, f"Token count: {tokens}/{max_length}"),
        },
    )
