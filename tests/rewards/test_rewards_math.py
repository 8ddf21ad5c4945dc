"""Math and accuracy rewards: documented examples, LaTeX, edge cases and reward-kit bugs fixed."""

from __future__ import annotations

import pytest

from pytest_reward.reward.models import Message
from pytest_reward.rewards import (
    accuracy_reward,
    cosine_scaled_accuracy_length_reward,
    list_comparison_math_reward,
    math_reward,
    multiple_choice_math_reward,
)
from pytest_reward.rewards.accuracy import compare_math_expressions, extract_math_expression
from pytest_reward.rewards.math_answers import extract_mcq_option, extract_numbers


def conv(text: str | None, user: str = "Solve it.") -> list[dict[str, object]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": text}]


def gt(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


# --- math_reward -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "truth"),
    [
        ("The answer is 42", "42"),
        ("Therefore, the final answer is \\boxed{42}.", "42"),
        ("<answer>3.14</answer>", "3.14"),
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "#### 72"),
        ("\\boxed{\\frac{3}{4}}", "0.75"),
        ("The area is $\\boxed{12.5}$ square meters", "12.5"),
        ("The total is 1,234", "1234"),
        ("\\boxed{42}", "\\boxed{42.0004}"),  # within the default relative tolerance of 0.001
    ],
)
def test_math_reward_correct_answers(response: str, truth: str) -> None:
    result = math_reward(messages=conv(response), ground_truth=truth)
    assert result.score == 1.0, result.reason
    assert result.metrics["answer_comparison"].score == 1.0


@pytest.mark.parametrize(
    ("response", "truth"),
    [
        ("The answer is 41", "42"),
        ("\\boxed{43}", "42"),
        ("It is either 5 or 6", "5"),  # unboxed "or": strict
        ("6 * 7 = 42", "42"),  # several numbers where the truth has one: ambiguous
    ],
)
def test_math_reward_wrong_or_ambiguous_answers_score_zero(response: str, truth: str) -> None:
    result = math_reward(messages=conv(response), ground_truth=truth)
    assert result.score == 0.0
    assert result.is_score_valid is True


def test_math_reward_boxed_answer_wins_over_working() -> None:
    result = math_reward(messages=conv("2 + 3 = 5, so 5 * 2 = 10 and \\boxed{10}"), ground_truth="10")
    assert result.score == 1.0


def test_math_reward_tolerance_parameters() -> None:
    assert math_reward(messages=conv("\\boxed{3.1416}"), ground_truth="3.14159").score == 1.0
    assert math_reward(messages=conv("\\boxed{3.2}"), ground_truth="3.14159").score == 0.0
    assert math_reward(messages=conv("\\boxed{3.2}"), ground_truth="3.14159", tolerance=0.05).score == 1.0
    assert math_reward(messages=conv("\\boxed{1e-9}"), ground_truth="0", absolute_tolerance=1e-6).score == 1.0


def test_math_reward_units() -> None:
    assert (
        math_reward(messages=conv("The length is 5 m"), ground_truth="5 m", require_units=True).score == 1.0
    )
    assert math_reward(messages=conv("\\boxed{5}"), ground_truth="5 m", require_units=True).score == 0.0
    assert math_reward(messages=conv("\\boxed{5}"), ground_truth="5 m").score == 1.0


@pytest.mark.parametrize(
    ("response", "truth"),
    [
        ("\\boxed{-\\frac{1}{2}}", "-0.5"),
        ("\\boxed{\\dfrac{1}{4}}", "0.25"),
        ("\\boxed{1,000}", "1000"),
        ("\\boxed{2.5e3}", "2500"),
        ("\\boxed{50\\%}", "0.5"),
        ("\\boxed{\\sqrt{2}}", "\\boxed{\\sqrt{2}}"),
    ],
)
def test_math_reward_latex_forms_reward_kit_missed(response: str, truth: str) -> None:
    # reward-kit bug: these boxed answers yielded "could not extract" (score 0) even when correct.
    assert math_reward(messages=conv(response), ground_truth=truth).score == 1.0


def test_math_reward_reads_long_gsm8k_answers_whole() -> None:
    # reward-kit bug: "#### 1156" was read as 115.
    assert math_reward(messages=conv("Adding up.\n#### 1156"), ground_truth="1156").score == 1.0
    assert math_reward(messages=conv("Adding up.\n#### 1156"), ground_truth="115").score == 0.0
    assert math_reward(messages=conv("#### 12,345"), ground_truth="12345").score == 1.0


def test_math_reward_invalid_inputs() -> None:
    assert math_reward(messages=[], ground_truth="1").is_score_valid is False
    assert math_reward(messages=conv("1"), ground_truth="").is_score_valid is False
    assert math_reward(messages=conv("1"), ground_truth="no numbers here").is_score_valid is False
    empty = math_reward(messages=conv(""), ground_truth="42")
    assert empty.score == 0.0 and empty.is_score_valid is True
    with pytest.raises(TypeError):
        math_reward(messages=conv("1"))  # ground_truth is required, as in reward-kit


def test_math_reward_accepts_numbers_messages_and_unicode() -> None:
    assert math_reward(messages=conv("Résultat : \\boxed{7} ✓"), ground_truth=7).score == 1.0
    messages = [Message(role="user", content="q"), Message(role="assistant", content="\\boxed{7}")]
    assert math_reward(messages=messages, ground_truth=[{"role": "assistant", "content": "7"}]).score == 1.0


def test_math_reward_huge_input_is_handled() -> None:
    text = "word " * 200_000 + "\\boxed{99}"
    assert math_reward(messages=conv(text), ground_truth="99").score == 1.0


def test_extract_numbers_skips_coefficients() -> None:
    values = [a.value for a in extract_numbers("Solve 2x + 3 = 7")]
    assert 2.0 not in values
    assert values == [3.0, 7.0]


# --- list_comparison_math_reward -------------------------------------------------------------------------


def test_list_comparison_math_reward() -> None:
    assert list_comparison_math_reward(messages=conv("\\boxed{3, 1, 2}"), ground_truth="1, 2, 3").score == 1.0
    ordered = list_comparison_math_reward(
        messages=conv("\\boxed{3, 1, 2}"), ground_truth="1, 2, 3", order_matters=True
    )
    assert ordered.score == 0.0
    missing = list_comparison_math_reward(messages=conv("$1, 2$"), ground_truth="1, 2, 3")
    assert missing.score == 0.0 and "Missing in generated: [3.0]" in (missing.reason or "")
    assert (
        list_comparison_math_reward(
            messages=conv("\\boxed{\\frac{1}{2}, 3/4}"), ground_truth="0.5, 0.75"
        ).score
        == 1.0
    )
    assert list_comparison_math_reward(messages=conv("1, 2"), ground_truth="").is_score_valid is False


# --- multiple_choice_math_reward -------------------------------------------------------------------------


def test_multiple_choice_math_reward() -> None:
    assert (
        multiple_choice_math_reward(messages=conv("The answer is (B)."), ground_truth=gt("(B)")).score == 1.0
    )
    assert multiple_choice_math_reward(messages=conv("I pick C."), ground_truth=gt("B")).score == 0.0
    ambiguous = multiple_choice_math_reward(messages=conv("Either (A) or (B)."), ground_truth=gt("(B)"))
    assert ambiguous.score == 0.0 and "ambiguous" in (ambiguous.reason or "")
    assert multiple_choice_math_reward(messages=conv("(b)"), ground_truth="B").score == 1.0


def test_multiple_choice_article_a_is_not_an_option() -> None:
    # reward-kit bug: the article "a" was read as option A, making the answer ambiguous (score 0).
    result = multiple_choice_math_reward(
        messages=conv("The answer is (B), a classic result."), ground_truth=gt("(B)")
    )
    assert result.score == 1.0
    assert extract_mcq_option("a b c") == []


def test_multiple_choice_invalid_ground_truth() -> None:
    assert multiple_choice_math_reward(messages=conv("(A)"), ground_truth=[]).is_score_valid is False
    user_gt = [{"role": "user", "content": "(A)"}]
    assert multiple_choice_math_reward(messages=conv("(A)"), ground_truth=user_gt).is_score_valid is False


# --- accuracy_reward -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("The answer is 42.", "42", 1.0),
        ("So x = 4", "4", 1.0),
        ("The final result: 3/4", "0.75", 1.0),
        ("\\boxed{12}", "12", 1.0),
        ("The capital of France is Paris.", "Paris", 1.0),
        ("The answer is 41.", "42", 0.8),
        ("The answer is 30.", "42", 0.3),
        ("The answer is 20.", "42", 0.0),
        ("The answer is π", "3.14159", 1.0),
    ],
)
def test_accuracy_reward_examples(response: str, truth: str, expected: float) -> None:
    result = accuracy_reward(messages=conv(response), ground_truth=gt(truth))
    assert result.score == pytest.approx(expected), result.reason


def test_accuracy_reward_compares_numbers_as_numbers() -> None:
    # reward-kit bug: its substring test ("1" in "-12") and its "3.14"/"314" prefix shortcut scored these 1.0.
    assert compare_math_expressions("1", "-12") == 0.0
    assert compare_math_expressions("3.14", "3.14e5") == 0.0
    assert compare_math_expressions("314", "314159") == 0.0
    assert compare_math_expressions("314", "31400") == 0.0


def test_accuracy_reward_text_answers_need_whole_words() -> None:
    # reward-kit bug: "Paris" matched inside "Parisian".
    result = accuracy_reward(messages=conv("It is the Parisian style"), ground_truth=gt("Paris"))
    assert result.score < 1.0


def test_accuracy_reward_custom_functions_and_string_ground_truth() -> None:
    result = accuracy_reward(
        messages=conv("ANSWER=yes"),
        ground_truth="yes",
        extract_fn=lambda t: t.split("=")[1],
        compare_fn=lambda a, b: 2.0,
    )
    assert result.score == 1.0  # clipped, where reward-kit raised a ValidationError
    assert extract_math_expression("") == ""


def test_accuracy_reward_invalid_inputs() -> None:
    assert accuracy_reward(messages=conv("42"), ground_truth=None).is_score_valid is False
    assert accuracy_reward(messages=conv("42"), ground_truth=[]).is_score_valid is False
    assert (
        accuracy_reward(messages=[{"role": "user", "content": "q"}], ground_truth="1").is_score_valid is False
    )


# --- cosine_scaled_accuracy_length_reward ----------------------------------------------------------------


def test_cosine_scaled_accuracy_length_reward() -> None:
    short_right = cosine_scaled_accuracy_length_reward(
        messages=conv("The answer is 42"), ground_truth=gt("42")
    )
    long_right = cosine_scaled_accuracy_length_reward(
        messages=conv("word " * 900 + "The answer is 42"), ground_truth=gt("42")
    )
    wrong = cosine_scaled_accuracy_length_reward(messages=conv("The answer is 7"), ground_truth=gt("42"))
    assert short_right.score == pytest.approx(1.0, abs=1e-3)
    assert 0.7 < long_right.score < short_right.score
    assert wrong.score < 0.1
    assert set(short_right.metrics) == {"combined_reward", "accuracy", "length", "token_count"}


def test_cosine_scaled_accuracy_length_reward_without_ground_truth_is_invalid() -> None:
    # reward-kit bug: a missing ground truth still produced a valid-looking length-only score.
    result = cosine_scaled_accuracy_length_reward(messages=conv("The answer is 42"), ground_truth=None)
    assert result.is_score_valid is False
