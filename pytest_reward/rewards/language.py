"""``language_consistency_reward``: is the response written in the target language."""

from __future__ import annotations

import re
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message, MetricResult
from ._common import assistant_text, content_of, invalid, metric, role_of


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Frequent function words per language (a word may belong to several languages).
LANGUAGE_MARKERS: dict[str, frozenset[str]] = {
    "en": _word_set(
        "the a an is are was were and or but in on at to for with by from of as it that this these those not be "
        "have has had do does did can could will would should may might must then than when where which who what "
        "because about there their they them so if very just only"
    ),
    "es": _word_set(
        "el la los las un una unos unas y o pero si no como más este esta estos estas ese esa esos esas mi tu su "
        "nuestro de en con por para sin es son era eran fue fueron ser estar tener hacer cuando porque donde "
        "quien cual que entre desde hasta sobre cada todo mucho poco otro mismo tan también siempre nunca ahora "
        "después"
    ),
    "fr": _word_set(
        "le la les un une des et ou mais si non comme plus ce cet cette ces mon ton son notre votre leur de à en "
        "avec par pour sans est sont était étaient être avoir faire dire je tu il elle nous vous ils elles que "
        "qui quoi où quand comment pourquoi quel quelle"
    ),
    "de": _word_set(
        "der die das den dem ein eine einen einer eines und oder aber wenn nicht wie mehr auch nur sehr so zum zur "
        "vom dieser diese dieses mein dein sein ihr unser in auf mit für von zu nach ist sind war waren haben "
        "machen ich du er sie es wir dass aus über"
    ),
    "ru": _word_set(
        "и в не на я быть он с что а по это она этот к но они мы как из у который то за свой весь от так о для "
        "ты же все тот вы его один"
    ),
}
# Characters that identify a script. Kanji are shared by Chinese and Japanese: kana decide for Japanese.
SCRIPT_PATTERNS: dict[str, re.Pattern[str]] = {
    "zh": re.compile(r"[\u4e00-\u9fff]"),
    "ja": re.compile(r"[\u3040-\u309f\u30a0-\u30ff]"),
    "ko": re.compile(r"[\uac00-\ud7af\u1100-\u11ff]"),
    "ru": re.compile(r"[а-яА-ЯёЁ]"),
    "ar": re.compile(r"[\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff]"),
    "hi": re.compile(r"[\u0900-\u097f]"),
    "he": re.compile(r"[\u0590-\u05ff]"),
}
# Explicit requests in the prompt ("answer in Spanish", "en español", "用中文").
_REQUESTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bin (spanish|español)\b|\ben español\b", re.IGNORECASE), "es"),
    (re.compile(r"\bin (french|français)\b|\ben français\b", re.IGNORECASE), "fr"),
    (re.compile(r"\bin (german|deutsch)\b|\bauf deutsch\b", re.IGNORECASE), "de"),
    (re.compile(r"\bin (english)\b", re.IGNORECASE), "en"),
    (re.compile(r"\bin (russian)\b|по-русски", re.IGNORECASE), "ru"),
    (re.compile(r"\bin (japanese)\b|日本語"), "ja"),
    (re.compile(r"\bin (chinese|mandarin)\b|中文|汉语"), "zh"),
    (re.compile(r"\bin (korean)\b|한국어"), "ko"),
]
_WORD = re.compile(r"\b\w+\b")


def count_words_by_language(text: str) -> dict[str, int]:
    """Marker-word and script-character counts per language (HTML tags and fenced code are ignored)."""
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    text = re.sub(r"<[^>]+>", " ", text).lower()
    counts = dict.fromkeys([*LANGUAGE_MARKERS, *SCRIPT_PATTERNS], 0)
    for word in _WORD.findall(text):
        for lang, markers in LANGUAGE_MARKERS.items():
            if word in markers:
                counts[lang] += 1
    for lang, pattern in SCRIPT_PATTERNS.items():
        counts[lang] += len(pattern.findall(text))
    if counts["ja"]:  # kana present: the kanji are Japanese
        counts["ja"] += counts["zh"]
        counts["zh"] = 0
    return counts


def detect_dominant_language(text: str) -> tuple[str, float]:
    """``(language, share of the markers it has)``; ``("en", 0.0)`` when there are no markers."""
    counts = count_words_by_language(text)
    total = sum(counts.values())
    if not total:
        return "en", 0.0
    lang = max(counts, key=lambda k: counts[k])
    return lang, counts[lang] / total


def _target_from_prompt(messages: Any) -> str | None:
    for message in messages[:-1]:
        if role_of(message) not in ("user", "system"):
            continue
        text = content_of(message) or ""
        for pattern, lang in _REQUESTS:
            if pattern.search(text):
                return lang
    for message in messages[:-1]:
        if role_of(message) == "user":
            lang, confidence = detect_dominant_language(content_of(message) or "")
            if confidence > 0.4:
                return lang
    return None


@reward_function
def language_consistency_reward(
    messages: list[Message] | list[dict[str, Any]],
    *,
    ground_truth: Any,
    target_language: str | None = None,
    min_consistency: float = 0.6,
    auto_detect: bool = True,
    **kwargs: Any,
) -> EvaluateResult:
    """Share of the response's language markers (function words, script characters) that belong to the target
    language, scaled so that ``min_consistency`` or more scores 1.0.

    The target is ``target_language``; else (``auto_detect``) a language the prompt asks for ("in Spanish",
    "en español", "用中文"), else the prompt's dominant language, else the dominant language of the response's
    first paragraph, else English. ``ground_truth`` is ignored. Metrics: ``language_consistency``,
    ``target_language`` and ``<lang>_percentage`` for the three most frequent languages.

    Differences from reward-kit (deliberate): reward-kit forced the result for responses containing phrases of
    its own test suite (any text mentioning "español" scored 0.95 for Spanish; "completamente", "palabras"...
    overrode the counts entirely); those special cases are gone. Kana mark kanji as Japanese rather than
    Chinese. ``min_consistency <= 0`` no longer divides by zero. A response with no language markers at all
    (only numbers or code) is an invalid result, as in reward-kit.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why, "language_consistency")
    target = target_language
    if not target and auto_detect:
        target = _target_from_prompt(messages)
        if not target:
            target, _ = detect_dominant_language(text.split("\n\n")[0] if "\n\n" in text else text[:200])
    target = (target or "en").lower()
    counts = count_words_by_language(text)
    total = sum(counts.values())
    if not total:
        return invalid("No language markers found in model response to evaluate.", "language_consistency")
    target_count = counts.get(target, 0)
    ratio = target_count / total
    score = min(1.0, ratio / min_consistency) if min_consistency > 0 else 1.0
    shares: dict[str, MetricResult] = {
        f"{lang}_percentage": metric(count / total, f"{100 * count / total:.1f}% {lang} content")
        for lang, count in sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:3]
        if count
    }
    return EvaluateResult(
        score=score,
        reason=f"Target language '{target}' detected at {ratio:.2f} consistency ({target_count}/{total} markers)",
        metrics={
            "language_consistency": metric(score, f"Target language '{target}' consistency: {ratio:.2f}"),
            "target_language": metric(1.0, f"Target language identified as '{target}'"),
            **shares,
        },
    )
