"""Math answer rewards: ``math_reward`` (numeric final answer with tolerance, units, LaTeX, ``<answer>`` tags,
GSM8K ``####``), ``list_comparison_math_reward`` (lists / sets of numbers) and ``multiple_choice_math_reward``
(MCQ letters)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message, MetricResult
from ._common import assistant_text, content_of, invalid, metric, role_of
from ._numbers import parse_number

_ALGEBRAIC_VARS = frozenset("xyzabcntqpruvw")


class Answer(NamedTuple):
    """One answer found in a text: the text it came from and its value (a float, or a string)."""

    text: str
    value: float | str


_TAG = re.compile(r"<(answer|ans)\b[^>]*>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*)\}")
_GSM8K = re.compile(r"####\s*(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)")
_NUM_UNIT = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z%]+)")
_LATEX_BLOCK = re.compile(r"\$\$(.*?)\$\$|\$(.*?)\$", re.DOTALL)
# General numbers, highest-priority alternative first; a match may carry a unit word.
_GENERAL = re.compile(
    r"(?P<frac>[-+]?\\[dt]?frac\{\s*-?\d+(?:\.\d+)?\s*\}\{\s*-?\d+(?:\.\d+)?\s*\})"
    r"|(?P<times>-?\d+(?:\.\d+)?\s*\\times\s*10\^\{?-?\d+\}?)"
    r"|(?<![\w.])(?P<num>-?(?:\d+\.?\d*[eE][-+]?\d+|\d+\s*/\s*-?\d+(?![.\d])|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d+))"
    r"(?:[ \t]*(?P<unit>(?!(?:and|or)\b)[a-zA-Z%]+\b))?"
)


def _is_coefficient(match: re.Match[str], text: str) -> bool:
    """``2x``, ``3 y``: a number multiplying an algebraic variable is not an answer."""
    unit = match.group("unit")
    if unit and len(unit) == 1 and unit.lower() in _ALGEBRAIC_VARS:
        return True
    end = match.end("num") if match.group("num") else match.end()
    return (
        end < len(text)
        and text[end].lower() in _ALGEBRAIC_VARS
        and (end + 1 == len(text) or not text[end + 1].isalnum())
    )


def _value_of_content(content: str, *, boxed: bool) -> float | str | None:
    content = content.strip()
    if not content:
        return None
    if boxed and " or " in content.lower():
        return content
    if boxed and re.fullmatch(r"[A-Ea-e]", content):
        return content.upper()
    value = parse_number(content)
    if value is not None:
        return value
    if m := _NUM_UNIT.fullmatch(content):
        return float(m.group(1))
    if boxed:
        return (
            re.sub(r"\s+", "", content)
            .replace("\\left", "")
            .replace("\\right", "")
            .replace("\\dfrac", "\\frac")
        )
    return None


def _tag_answers(text: str) -> list[Answer]:
    answers = []
    for m in _TAG.finditer(text):
        value = _value_of_content(m.group(2), boxed=False)
        if isinstance(value, float):
            answers.append(Answer(m.group(0), value))
    return answers


def _boxed_answers(text: str) -> tuple[list[Answer], bool]:
    answers = []
    found = False
    for m in _BOXED.finditer(text):
        found = True
        value = _value_of_content(m.group(1), boxed=True)
        if value is not None:
            answers.append(Answer(m.group(0), value))
    if len(answers) > 1 and all(isinstance(a.value, float) for a in answers):
        first = float(answers[0].value)
        if all(math.isclose(float(a.value), first, rel_tol=1e-9, abs_tol=1e-9) for a in answers[1:]):
            answers = answers[:1]
    return answers, found


def _general_answers(text: str) -> list[Answer]:
    answers = []
    for m in _GENERAL.finditer(text):
        if _is_coefficient(m, text):
            continue
        raw = m.group("frac") or m.group("times") or m.group("num")
        value = parse_number(raw.replace(" ", ""))
        if value is None:
            continue
        answers.append(Answer(m.group(0).strip(), value))
    return answers


def extract_numbers(text: str) -> list[Answer]:
    """Answers in ``text``, by priority: ``<answer>``/``<ans>`` tags, then ``\\boxed{}`` (all of them; if any
    ``\\boxed`` exists, nothing else is looked at), then GSM8K ``#### N``, then every number in the text."""
    if answers := _tag_answers(text):
        return answers
    boxed, found_boxed = _boxed_answers(text)
    if found_boxed:
        return boxed
    if gsm8k := [Answer(m.group(0), float(m.group(1).replace(",", ""))) for m in _GSM8K.finditer(text)]:
        return gsm8k
    return _general_answers(text)


def compare_numbers(
    expected: float, actual: float, relative_tolerance: float = 1e-5, absolute_tolerance: float = 1e-8
) -> tuple[bool, float]:
    """``(close, similarity)``: 1.0 when close; otherwise a similarity falling to 0 at one tolerance away."""
    if math.isclose(expected, actual, rel_tol=relative_tolerance, abs_tol=absolute_tolerance):
        return True, 1.0
    try:
        if expected == 0:
            error = abs(actual) / absolute_tolerance if absolute_tolerance > 0 else math.inf
        else:
            error = (
                abs((expected - actual) / expected) / relative_tolerance
                if relative_tolerance > 0
                else math.inf
            )
    except (ZeroDivisionError, OverflowError):
        return False, 0.0
    return False, max(0.0, 1.0 - min(1.0, error))


def _has_unit(answer: Answer) -> bool:
    text = answer.text
    if text.startswith("\\boxed{") and text.endswith("}"):
        text = text[7:-1].strip()
    m = re.search(r"\d(?:[\d.,/]*\d)?\s*([a-zA-Z%°$€£]+)", text)
    return bool(m and m.group(1).lower() != "or")


def _ground_truth_string(ground_truth: Any) -> str | None:
    if isinstance(ground_truth, str):
        return ground_truth
    if isinstance(ground_truth, (int, float)) and not isinstance(ground_truth, bool):
        return repr(ground_truth)
    if isinstance(ground_truth, Sequence) and ground_truth and not isinstance(ground_truth, (str, bytes)):
        return content_of(ground_truth[-1]) if not isinstance(ground_truth[-1], str) else ground_truth[-1]
    return None


def _fmt(answers: Sequence[Answer]) -> str:
    return ", ".join(f"'{a.text}' ({a.value})" for a in answers) if answers else "None"


def _zero(reason: str, metrics: dict[str, MetricResult], name: str, detail: str) -> EvaluateResult:
    metrics[name] = metric(0.0, detail)
    return EvaluateResult(score=0.0, reason=reason, metrics=metrics)


@reward_function
def math_reward(
    messages: list[Message] | list[dict[str, Any]],
    *,
    ground_truth: str,
    tolerance: float = 0.001,
    absolute_tolerance: float = 1e-8,
    require_units: bool = False,
    **kwargs: Any,
) -> EvaluateResult:
    """1.0 when the response's final answer equals ``ground_truth`` within ``tolerance`` (relative) or
    ``absolute_tolerance``.

    Answers are found by ``extract_numbers`` in both texts. Strict by design (as reward-kit): a response whose
    unboxed text offers several numbers joined by "or", several different answers where the ground truth has
    one, or a matching answer next to other, conflicting numbers, scores 0. Use ``\\boxed{}`` or
    ``<answer>`` to state the final answer. ``require_units``: the ground truth and the answer must both have
    a unit, or both not. Metrics: ``extracted_original_answers``, ``extracted_generated_answers``,
    ``answer_comparison`` (plus ``strictness_penalty_*`` when a strictness rule fired). The reason of a
    strictness failure opens with reward-kit's label for the rule ("Strictness fail (Issue #1 - unboxed 'or')",
    "(Issue #2 - ambiguity)", "(Conflicting Answers)"), so that tools matching reward-kit's reasons keep working.

    Differences from reward-kit (deliberate):

    * GSM8K answers of four or more digits without thousands separators are read whole: reward-kit's
      ``####`` pattern stopped after three digits, so ``#### 1156`` was read as 115 (and scored 1.0 against a
      ground truth of 115, 0.0 against 1156);
    * more answer forms parse: ``\\boxed{-\\frac{1}{2}}`` (sign outside the fraction), ``\\dfrac``,
      ``\\boxed{1,000}``, ``\\boxed{2.5e3}``, ``\\boxed{50\\%}``; reward-kit found no answer in them;
    * a ``\\boxed{}`` that is not a number (``\\boxed{\\sqrt{2}}``) is compared as text with the ground truth's
      boxed text, instead of "could not extract" (score 0 even for an identical answer);
    * ``ground_truth`` may also be a number or a list of messages (the last one's content is used);
    * the ``extracted_*`` metrics report 1.0 when answers were found (reward-kit: always 0.0); a wrong
      answer is a valid 0, an unusable ground truth or response an invalid one.
    """
    text, why = assistant_text(messages, allow_empty=True)
    if text is None:
        return invalid(f"Invalid or missing assistant response: {why}.")
    truth = _ground_truth_string(ground_truth)
    if not truth:
        return invalid("Missing or empty ground_truth (expected math answer string).")
    generated = extract_numbers(text)
    original = extract_numbers(truth)
    metrics: dict[str, MetricResult] = {
        "extracted_original_answers": metric(
            float(bool(original)), f"Extracted from original: {_fmt(original)}"
        ),
        "extracted_generated_answers": metric(
            float(bool(generated)), f"Extracted from generated (initial): {_fmt(generated)}"
        ),
    }
    if not original:
        return invalid(
            "Could not extract answers from original message (ground truth).", "answer_comparison", **metrics
        )
    if not generated:
        reason = "Could not extract answers from generated message, but original message has answers."
        return _zero(reason, metrics, "answer_comparison", reason)

    single_boxed_truth = (
        len(original) == 1 and original[0].text.startswith("\\boxed") and isinstance(original[0].value, float)
    )
    matched_boxed = False
    if single_boxed_truth:
        for answer in generated:
            if (
                answer.text.startswith("\\boxed")
                and isinstance(answer.value, float)
                and math.isclose(
                    answer.value, original[0].value, rel_tol=tolerance, abs_tol=absolute_tolerance
                )  # type: ignore[arg-type]
            ):
                generated, matched_boxed = [answer], True
                break

    numeric_generated = [a for a in extract_numbers(text) if isinstance(a.value, float)]
    single_or_answer = (
        len(generated) == 1 and isinstance(generated[0].value, str) and " or " in generated[0].value.lower()
    )
    if " or " in text.lower() and len(numeric_generated) > 1 and not single_or_answer:
        detail = (
            "Generated answer offers multiple numeric alternatives with an unboxed 'or' in the raw response."
        )
        return _zero(
            f"Strictness fail (Issue #1 - unboxed 'or'): {detail}",
            metrics,
            "strictness_penalty_unboxed_or",
            detail,
        )
    if len(original) == 1 and len(generated) > 1:
        # Worded as reward-kit's, which its users compare exactly ("leniency": the single boxed match above).
        detail = (
            "Ground truth is specific (one answer), but generated answer is ambiguous "
            "(multiple answers extracted, even after potential leniency)."
        )
        return _zero(
            f"Strictness fail (Issue #2 - ambiguity): {detail}",
            metrics,
            "strictness_penalty_ambiguity",
            detail,
        )

    best, best_match, best_reason = 0.0, False, ""
    for orig in original:
        for gen in generated:
            match, similarity = False, 0.0
            if isinstance(orig.value, float) and isinstance(gen.value, float):
                if require_units and _has_unit(orig) != _has_unit(gen):
                    details = f"Unit presence mismatch (require_units=True): '{orig.text}' vs '{gen.text}'"
                else:
                    match, similarity = compare_numbers(orig.value, gen.value, tolerance, absolute_tolerance)
                    details = f"Numeric match: {'Yes' if match else 'No'}, Similarity: {similarity:.3f}"
            elif isinstance(orig.value, str) and isinstance(gen.value, str):
                match = orig.value.lower() == gen.value.lower()
                similarity = 1.0 if match else 0.0
                details = f"String match: {'Yes' if match else 'No'} ('{gen.value}' vs '{orig.value}')"
            else:
                details = f"Type mismatch: '{gen.text}' vs '{orig.text}'"
            line = f"Gen='{gen.text}' ({gen.value}) vs Orig='{orig.text}' ({orig.value}). {details}"
            if similarity > best or not best_reason:
                best, best_match, best_reason = (
                    similarity,
                    match,
                    ("Best match: " if similarity > 0 else "") + line,
                )

    if best_match and best > 0.75 and not (single_boxed_truth and matched_boxed):
        truth_values = [o.value for o in original if isinstance(o.value, float)]
        conflicting = sorted(
            {
                g.value
                for g in generated
                if isinstance(g.value, float)
                and not any(
                    math.isclose(g.value, t, rel_tol=tolerance, abs_tol=absolute_tolerance)
                    for t in truth_values
                )
            }
        )
        if conflicting:
            detail = (
                "Generated answer, while containing a match, also includes other distinct numerical values not "
                f"matching any original answer: {conflicting}"
            )
            metrics["strictness_penalty_conflicting_answers"] = metric(0.0, detail)
            best, best_match, best_reason = 0.0, False, f"Strictness fail (Conflicting Answers): {detail}"
    metrics["answer_comparison"] = metric(best, best_reason)
    return EvaluateResult(score=best, reason=best_reason, metrics=metrics)


def parse_number_list_from_string(text: str) -> list[float] | None:
    """``"1, 2.5, 3/4"`` → ``[1.0, 2.5, 0.75]``; ``None`` unless every comma-separated part is a number."""
    parts = [p.strip() for p in re.split(r"\s*,\s*", text.replace("$", "").strip())]
    if not any(parts):
        return None
    numbers = []
    for part in parts:
        if not part:
            continue
        value = parse_number(part)
        if value is None:
            return None
        numbers.append(value)
    return numbers or None


def extract_number_list(text: str) -> list[list[float]]:
    """Number lists in ``\\boxed{}`` (preferred), else in ``$…$`` blocks, else the whole text as one list."""
    boxed = [lst for c in _BOXED.findall(text) if (lst := parse_number_list_from_string(c))]
    if boxed:
        return boxed
    blocks = [
        lst
        for a, b in _LATEX_BLOCK.findall(text)
        if (a or b) and (lst := parse_number_list_from_string((a or b).strip()))
    ]
    if blocks:
        return blocks
    whole = parse_number_list_from_string(text)
    return [whole] if whole else []


@reward_function
def list_comparison_math_reward(
    messages: list[Message] | list[dict[str, Any]],
    *,
    ground_truth: str,
    order_matters: bool = False,
    **kwargs: Any,
) -> EvaluateResult:
    """1.0 when the first number list of the response equals the ground truth's (as sets, or as sequences with
    ``order_matters=True``). Metrics: ``extracted_original_lists``, ``extracted_generated_lists``,
    ``list_comparison``.

    Differences from reward-kit (deliberate): list items may be fractions (``\\frac{1}{2}``, ``3/4``); an empty
    or unparseable ground truth is an invalid result rather than a valid 0.
    """
    text, why = assistant_text(messages)
    if text is None:
        return invalid(f"Invalid or missing assistant response: {why}.")
    truth = _ground_truth_string(ground_truth)
    if not truth:
        return invalid("Ground truth string (expected list) is empty.")
    generated, original = extract_number_list(text), extract_number_list(truth)
    metrics: dict[str, MetricResult] = {
        "extracted_original_lists": metric(float(bool(original)), f"Original lists: {original}"),
        "extracted_generated_lists": metric(float(bool(generated)), f"Generated lists: {generated}"),
    }
    if not original:
        return invalid(
            "Could not extract any number list from original message (ground truth).",
            "list_comparison",
            **metrics,
        )
    if not generated:
        reason = "Could not extract any number list from generated message."
        return _zero(reason, metrics, "list_comparison", reason)
    gen, orig = generated[0], original[0]
    if order_matters:
        score = float(gen == orig)
        reason = (
            f"{'Exact list match' if score else 'List mismatch'} (order matters). Gen: {gen} vs Orig: {orig}"
        )
    else:
        gen_set, orig_set = set(gen), set(orig)
        score = float(gen_set == orig_set)
        reason = f"Set {'match' if score else 'mismatch'} (order does not matter). Gen: {sorted(gen_set)} vs Orig: {sorted(orig_set)}."
        if missing := sorted(orig_set - gen_set):
            reason += f" Missing in generated: {missing}."
        if extra := sorted(gen_set - orig_set):
            reason += f" Extra in generated: {extra}."
    metrics["list_comparison"] = metric(score, reason)
    return EvaluateResult(score=score, reason=reason, metrics=metrics)


_MCQ_PATTERNS = [
    (re.compile(r"\(([A-Ea-e])\)"), 0),
    (re.compile(r"\[([A-Ea-e])\]"), 1),
    (re.compile(r"\{([A-Ea-e])\}"), 2),
    (re.compile(r"(?<![A-Za-z0-9_])([A-E])\.(?!\w)"), 3),
    (re.compile(r"(?<![A-Za-z0-9_'’])([A-E])(?![A-Za-z0-9_'’])"), 4),
]


def extract_mcq_option(text: str) -> list[tuple[str, str]]:
    """Distinct option letters A–E in order of appearance: ``(B)``, ``[B]``, ``{B}``, ``B.``, a standalone
    capital ``B``. Returns ``(matched text, letter)`` pairs."""
    found = []
    for pattern, priority in _MCQ_PATTERNS:
        for m in pattern.finditer(text):
            found.append((m.start(), priority, m.end(), m.group(0), m.group(1).upper()))
    found.sort()
    options: list[tuple[str, str]] = []
    seen: set[str] = set()
    covered = -1
    for start, _, end, raw, letter in found:
        if start >= covered:
            if letter not in seen:
                options.append((raw, letter))
                seen.add(letter)
            covered = end
    return options


@reward_function
def multiple_choice_math_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: list[Message] | list[dict[str, Any]] | str | None,
    **kwargs: Any,
) -> EvaluateResult:
    """1.0 when the response picks the ground truth's option letter (A–E). Strict: a response naming several
    options where the ground truth names one scores 0. When the ground truth names several options, the first
    options of both are compared (as in reward-kit). ``ground_truth``: a list whose first message is the
    assistant's reference answer (reward-kit's convention) or the answer as a string. Metrics:
    ``extracted_original_mcq``, ``extracted_generated_mcq``, ``mcq_comparison``, and ``ambiguous_original_mcq`` /
    ``ambiguous_generated_mcq`` (score 0, listing the options) when a side names more than one option.

    Differences from reward-kit (deliberate): a lower-case standalone letter is no longer an option (reward-kit
    matched case-insensitively, so the article "a" in "(B) is a valid choice" made every such answer ambiguous
    and scored 0); bracketed options ``(b)`` still count. A plain-string ``ground_truth`` is accepted.
    """
    # The reasons below open with reward-kit's wording for the same case; tools match on them.
    if not messages:
        return invalid("Missing generated messages: no messages provided.")
    if not ground_truth:
        return invalid(
            "Missing ground truth message: expected an assistant message (or a string) with the answer."
        )
    text, why = assistant_text(messages)
    if text is None:
        return invalid(f"Last generated message not from assistant or has no content: {why}.")
    if isinstance(ground_truth, str):
        truth: str | None = ground_truth
    elif isinstance(ground_truth, Sequence) and role_of(ground_truth[0]) == "assistant":
        truth = content_of(ground_truth[0])
    else:
        truth = None
    if not truth:
        return invalid(
            "Invalid ground truth message: Not an assistant message or has no content "
            "(expected an assistant message, or a string, with the answer)."
        )
    generated, original = extract_mcq_option(text), extract_mcq_option(truth)

    def fmt(items: list[tuple[str, str]]) -> str:
        return ", ".join(f"'{raw}' ({letter})" for raw, letter in items) if items else "None"

    metrics: dict[str, MetricResult] = {
        "extracted_original_mcq": metric(float(bool(original)), f"Extracted from original: {fmt(original)}"),
        "extracted_generated_mcq": metric(
            float(bool(generated)), f"Extracted from generated: {fmt(generated)}"
        ),
    }
    if not original:
        return invalid(
            "Could not extract MCQ option from original message (ground truth).", "mcq_comparison", **metrics
        )
    if not generated:
        reason = (
            "Could not extract MCQ option from generated message, but original message has an MCQ option."
        )
        return _zero(reason, metrics, "mcq_comparison", reason)
    if len(original) > 1:
        metrics["ambiguous_original_mcq"] = metric(
            0.0, f"Original message has multiple MCQ options: {fmt(original)}; the first is compared"
        )
    if len(generated) > 1:
        metrics["ambiguous_generated_mcq"] = metric(
            0.0, f"Generated message has multiple MCQ options: {fmt(generated)}"
        )
    if len(generated) > 1 and len(original) == 1:
        reason = "Generated answer is ambiguous (multiple MCQ options) while ground truth is specific."
        return _zero(reason, metrics, "mcq_comparison", reason)
    match = generated[0][1] == original[0][1]
    reason = f"Match: {match}. Gen: '{generated[0][0]}' ({generated[0][1]}) vs Orig: '{original[0][0]}' ({original[0][1]})"
    metrics["mcq_comparison"] = metric(float(match), reason)
    return EvaluateResult(score=float(match), reason=reason, metrics=metrics)
