"""Text rewards: documented examples, edge cases and the reward-kit bugs fixed (each marked "reward-kit bug")."""

from __future__ import annotations

import pytest

from pytest_reward.reward.models import Message
from pytest_reward.rewards import (
    cosine_length_reward,
    diversity_reward,
    exact_tool_match_reward,
    format_reward,
    json_schema_reward,
    language_consistency_reward,
    lean_prover_reward,
    length_reward,
    reasoning_steps_reward,
    repetition_penalty_reward,
    sequence_reward,
    tag_count_reward,
)
from pytest_reward.rewards.length import count_tokens


def conv(text: str | None, user: str = "Question?") -> list[dict[str, object]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": text}]


GOOD_FORMAT = "<think>\nLet me think.\n</think>\n<answer>\n42\n</answer>"


# --- format_reward ---------------------------------------------------------------------------------------


def test_format_reward_documented_examples() -> None:
    good = format_reward(messages=conv(GOOD_FORMAT))
    assert good.score == 1.0 and good.metrics["format_check"].score == 1.0
    bad = format_reward(messages=conv("<answer>42</answer><think>late</think>"))
    assert bad.score == 0.0
    custom = format_reward(
        messages=conv("Answer: 42"), format_regex=r"Answer: \d+", require_exact_match=False
    )
    assert custom.score == 1.0


def test_format_reward_wrong_format_is_a_valid_zero() -> None:
    # reward-kit bug: is_score_valid=False for a merely wrong format (aggregators then drop the sample).
    result = format_reward(messages=conv("just text"))
    assert result.score == 0.0
    assert result.is_score_valid is True


def test_format_reward_bad_regex_is_reported_not_raised() -> None:
    # reward-kit bug: re.error escaped from the reward function.
    result = format_reward(messages=conv("x"), format_regex="(unclosed")
    assert result.is_score_valid is False
    assert "Invalid format_regex" in (result.reason or "")


@pytest.mark.parametrize(
    "messages",
    [[], [{"role": "user", "content": "hi"}], conv(""), conv(None)],
    ids=["no-messages", "no-assistant", "empty", "none-content"],
)
def test_format_reward_without_a_response_is_invalid(messages: list[dict[str, object]]) -> None:
    result = format_reward(messages=messages)
    assert result.score == 0.0
    assert result.is_score_valid is False
    assert result.reason


def test_format_reward_accepts_message_objects_and_unicode() -> None:
    text = "<think>\n思考 ✓ — ünïcode\n</think>\n<answer>\n∑ = 42\n</answer>"
    messages = [Message(role="user", content="q"), Message(role="assistant", content=text)]
    assert format_reward(messages=messages).score == 1.0


# --- tag_count_reward ------------------------------------------------------------------------------------


def test_tag_count_reward_counts_balanced_tags() -> None:
    result = tag_count_reward(
        messages=conv("<think>a</think><answer>b</answer>"), required_tags=["think", "answer"]
    )
    assert result.score == pytest.approx(0.5)
    assert result.metrics["tag_think"].score == 1.0
    assert result.metrics["overall"].score == pytest.approx(0.5)
    full = tag_count_reward(messages=conv("<a>x</a>"), required_tags=["a"], score_per_tag=1.0)
    assert full.score == 1.0


def test_tag_count_reward_penalises_unbalanced_tags() -> None:
    text = "<think>a</think><answer>b"
    result = tag_count_reward(messages=conv(text), required_tags=["think", "answer"])
    assert result.score == 0.0  # one found (0.25) minus one unbalanced (0.25)
    relaxed = tag_count_reward(messages=conv(text), required_tags=["think", "answer"], require_balanced=False)
    assert relaxed.score == pytest.approx(0.5)


def test_tag_count_reward_tag_names_are_literal() -> None:
    # reward-kit bug: tag names were regex patterns and prefixes ("<answers>" counted as "<answer>").
    assert tag_count_reward(messages=conv("<answers>x</answer>"), required_tags=["answer"]).score == 0.0
    assert (
        tag_count_reward(messages=conv("<c++>x</c++>"), required_tags=["c++"], score_per_tag=1).score == 1.0
    )
    assert tag_count_reward(messages=conv("<aXb>x</aXb>"), required_tags=["a.b"]).score == 0.0


def test_tag_count_reward_requires_required_tags() -> None:
    with pytest.raises(TypeError):
        tag_count_reward(messages=conv("<a></a>"))


# --- length rewards --------------------------------------------------------------------------------------


def test_count_tokens_methods() -> None:
    assert count_tokens("one two  three") == 3
    assert count_tokens("abc", "character") == 3
    assert count_tokens("it's 2 cats!", "words") == 4
    # reward-kit bug: empty/whitespace-only text counted one token.
    assert count_tokens("") == 0
    assert count_tokens("   \n ") == 0


def test_length_reward_target_min_max() -> None:
    words = " ".join(["w"] * 50)
    assert length_reward(messages=conv(words), target_length=50).score == 1.0
    assert length_reward(messages=conv(words), target_length=100).score == pytest.approx(0.5)
    assert length_reward(messages=conv(words), min_length=10, max_length=60).score == 1.0
    assert length_reward(messages=conv(words), min_length=100).score == pytest.approx(0.5)
    assert length_reward(messages=conv(words), max_length=25).score == 0.0
    cosine = length_reward(messages=conv(words), target_length=100, scaling="cosine")
    assert cosine.score == pytest.approx(0.5)
    assert length_reward(messages=conv(words)).score == pytest.approx(0.5)  # no bounds: shorter is better


def test_length_reward_custom_range_keeps_metrics_valid() -> None:
    # reward-kit bug: reward_range=[-1, 1] put -1 into a MetricResult and raised a ValidationError.
    result = length_reward(messages=conv(" ".join(["w"] * 200)), max_length=100, reward_range=[-1.0, 1.0])
    assert result.score == -1.0
    assert result.metrics["length"].score == 0.0


def test_length_reward_zero_target() -> None:
    assert length_reward(messages=conv("word"), target_length=0, scaling="cosine").score == 0.0


def test_cosine_length_reward_schedule() -> None:
    short, long_ = conv("a b"), conv(" ".join(["w"] * 1000))
    assert cosine_length_reward(messages=short, is_correct=True).score == pytest.approx(1.0, abs=1e-4)
    assert cosine_length_reward(messages=long_, is_correct=True).score == pytest.approx(0.5)
    assert cosine_length_reward(messages=short, is_correct=False).score == pytest.approx(0.0, abs=1e-4)
    assert cosine_length_reward(messages=long_, is_correct=False).score == pytest.approx(0.3)
    assert cosine_length_reward(messages=short, correctness=0.95).metrics["correctness"].score == 1.0


def test_cosine_length_reward_negative_values_do_not_crash() -> None:
    # reward-kit bug: negative schedule values raised a MetricResult ValidationError.
    result = cosine_length_reward(
        messages=conv("a b c"), is_correct=False, min_value_wrong=-1.0, max_value_wrong=-0.5
    )
    assert result.score == pytest.approx(-1.0, abs=1e-3)
    assert result.metrics["cosine_length"].score == 0.0


# --- repetition / diversity ------------------------------------------------------------------------------


def test_repetition_penalty_reward() -> None:
    unique = repetition_penalty_reward(messages=conv("the quick brown fox jumps over the lazy dog"))
    assert unique.score == 1.0
    repeated = repetition_penalty_reward(messages=conv("spam spam spam spam spam spam spam spam"))
    assert repeated.score < 0.7
    assert repeated.is_score_valid is True
    assert repetition_penalty_reward(messages=conv("")).score == 1.0  # empty: nothing repeated
    assert repetition_penalty_reward(messages=conv("two words")).score == 1.0  # shorter than a 3-gram


def test_repetition_penalty_large_max_penalty_stays_in_range() -> None:
    # reward-kit bug: max_penalty > 1 gave a negative repetition_penalty metric → ValidationError.
    result = repetition_penalty_reward(messages=conv("a a a a a a a a a a"), max_penalty=3.0)
    assert result.score == 0.0
    assert all(0.0 <= m.score <= 1.0 for m in result.metrics.values())


def test_diversity_reward() -> None:
    varied = diversity_reward(messages=conv("every word in this sentence is quite different from others"))
    dull = diversity_reward(messages=conv("the the the the the the the the the the"))
    assert varied.score > 0.9 > dull.score
    assert set(varied.metrics) == {"diversity", "ngram_1", "ngram_2", "ngram_3"}


def test_diversity_reward_short_text_stays_in_range() -> None:
    # reward-kit bug: "hello" scored 2.2 (unweighted 1.0 per missing n-gram size) and crashed.
    result = diversity_reward(messages=conv("hello"))
    assert result.score == pytest.approx(1.0)


def test_diversity_reward_does_not_mutate_weights() -> None:
    # reward-kit bug: the caller's weights list was extended in place.
    weights = [0.5]
    diversity_reward(messages=conv("a b c d"), ngram_sizes=[1, 2], weights=weights)
    assert weights == [0.5]


# --- reasoning_steps_reward / sequence_reward ------------------------------------------------------------


def test_reasoning_steps_reward() -> None:
    steps = "Step 1: read.\nStep 2: think.\nStep 3: answer."
    result = reasoning_steps_reward(messages=conv(steps))
    assert result.score == 1.0
    assert result.metrics["explicit_steps"].score == 1.0
    assert reasoning_steps_reward(messages=conv("Just the answer: 4")).score == 0.0
    partial = reasoning_steps_reward(messages=conv("1. first\n2. second"), min_steps=4)
    assert partial.score == pytest.approx(0.5)


def test_reasoning_steps_reward_bad_parameters_are_reported() -> None:
    # reward-kit bug: max_steps == min_steps - 1 raised ZeroDivisionError.
    assert reasoning_steps_reward(messages=conv("1. a"), min_steps=3, max_steps=2).is_score_valid is False
    assert reasoning_steps_reward(messages=conv("1. a"), pattern="(").is_score_valid is False


def test_reasoning_steps_reward_exclusive_pattern() -> None:
    text = "Step 1: a\nStep 2: b\n=> c\n=> d\n=> e"
    assert reasoning_steps_reward(messages=conv(text), pattern=r"=>", exclusive_patterns=True).score == 1.0
    assert (
        reasoning_steps_reward(messages=conv("Step 1: a"), pattern=r"=>", exclusive_patterns=True).score
        == 0.0
    )


def test_sequence_reward() -> None:
    text = "First, we read. Then we think. Finally, we answer."
    assert sequence_reward(messages=conv(text)).score == 1.0
    out_of_order = sequence_reward(messages=conv("Finally it ends. First it began."), min_matches=2)
    assert out_of_order.score == pytest.approx(0.5)


def test_sequence_reward_matches_whole_words() -> None:
    # reward-kit bug: "then" matched inside "authentication", "first" inside "firstly".
    result = sequence_reward(
        messages=conv("authentication firstly"), sequence_terms=["first", "then"], min_matches=1
    )
    assert result.score == 0.0


# --- language_consistency_reward -------------------------------------------------------------------------


def test_language_consistency_reward_with_target() -> None:
    spanish = "La respuesta es que el gato está en la casa y no en el jardín con los niños."
    assert (
        language_consistency_reward(messages=conv(spanish), ground_truth=None, target_language="es").score
        == 1.0
    )
    assert (
        language_consistency_reward(messages=conv(spanish), ground_truth=None, target_language="en").score
        < 0.3
    )


def test_language_consistency_reward_detects_the_requested_language() -> None:
    english = "The cat is in the house and not in the garden with the children."
    spanish = "El gato está en la casa y no en el jardín con los niños."
    prompt = "Please answer in Spanish: where is the cat?"
    assert language_consistency_reward(messages=conv(spanish, prompt), ground_truth=None).score == 1.0
    assert language_consistency_reward(messages=conv(english, prompt), ground_truth=None).score < 0.3


def test_language_consistency_reward_scripts() -> None:
    chinese = "这是一个用中文写的回答，我们在这里说明问题的答案。"
    assert (
        language_consistency_reward(messages=conv(chinese), ground_truth=None, target_language="zh").score
        == 1.0
    )
    japanese = "これは日本語の答えです。問題の答えをここに書きます。"
    result = language_consistency_reward(messages=conv(japanese), ground_truth=None, target_language="ja")
    assert result.score == 1.0


def test_language_consistency_reward_has_no_test_phrase_special_cases() -> None:
    # reward-kit bug: any response mentioning "español" scored 0.95 for Spanish.
    english = "This is an English answer that mentions the word español only once, as it is here."
    assert (
        language_consistency_reward(messages=conv(english), ground_truth=None, target_language="es").score
        < 0.5
    )


def test_language_consistency_reward_without_markers_is_invalid() -> None:
    result = language_consistency_reward(
        messages=conv("12345 67890"), ground_truth=None, target_language="en"
    )
    assert result.is_score_valid is False


# --- lean_prover_reward ----------------------------------------------------------------------------------


LEAN_PROOF = """theorem add_zero' (n : Nat) : n + 0 = n := by
  intro h
  simp
  rw [Nat.add_zero]
  exact rfl
  apply Nat.le_refl"""


def test_lean_prover_reward_heuristics() -> None:
    complete = lean_prover_reward(messages=conv(LEAN_PROOF), ground_truth=None, statement="n + 0 = n")
    assert complete.score == pytest.approx(0.9)
    with_sorry = lean_prover_reward(
        messages=conv("theorem t : 1 = 1 := by\n  sorry"), ground_truth=None, statement="1 = 1"
    )
    assert with_sorry.score == pytest.approx(0.1)
    nothing = lean_prover_reward(messages=conv("I don't know."), ground_truth=None, statement="1 = 1")
    assert nothing.score == 0.0
    missing = lean_prover_reward(messages=conv(LEAN_PROOF), ground_truth=None)
    assert missing.is_score_valid is False and "Statement" in (missing.reason or "")


def test_lean_prover_reward_expected_proof_with_sorry_is_not_perfect() -> None:
    # reward-kit bug: the expected proof text anywhere in the response gave 1.0, even next to `sorry`.
    text = "theorem t : 1 = 1 := by\n  rfl\n  sorry"
    result = lean_prover_reward(messages=conv(text), ground_truth="rfl", statement="1 = 1")
    assert result.score < 1.0
    clean = lean_prover_reward(
        messages=conv("theorem t : 1 = 1 := by\n  rfl"), ground_truth="rfl", statement="1 = 1"
    )
    assert clean.score == 1.0


def test_lean_prover_reward_ignores_sorry_in_comments() -> None:
    text = "theorem t : 1 = 1 := by\n  -- no sorry needed here\n  simp"
    result = lean_prover_reward(messages=conv(text), ground_truth=None, statement="1 = 1")
    assert result.metrics["completeness"].score == 1.0
    assert result.score >= 0.5


# --- json_schema_reward ----------------------------------------------------------------------------------


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_json_schema_reward_full_and_partial_match() -> None:
    full = '```json\n{"name": "Ann", "age": 31, "tags": ["a"], "address": {"city": "Oslo"}}\n```'
    assert json_schema_reward(messages=conv(full), expected_schema=SCHEMA).score == 1.0
    partial = json_schema_reward(
        messages=conv('Here: {"name": "Ann", "extra": true}'), expected_schema=SCHEMA
    )
    assert 0.0 < partial.score < 0.5
    assert "Missing properties" in partial.metrics["schema_similarity"].reason


def test_json_schema_reward_integer_matches_integers() -> None:
    # reward-kit bug: JSON numbers were typed "number", so a schema "integer" property never matched.
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert json_schema_reward(messages=conv('{"n": 3}'), expected_schema=schema).score == 1.0


def test_json_schema_reward_explicit_content_and_errors() -> None:
    assert (
        json_schema_reward(messages=[], json_content={"name": "x"}, expected_schema=json_dumps_schema()).score
        == 1.0
    )
    assert json_schema_reward(messages=conv("no json here"), expected_schema=SCHEMA).is_score_valid is False
    assert json_schema_reward(messages=conv('{"a": 1}')).is_score_valid is False
    assert (
        json_schema_reward(messages=[], json_content="{not json", expected_schema=SCHEMA).is_score_valid
        is False
    )


def json_dumps_schema() -> str:
    return '{"type": "object", "properties": {"name": {"type": "string"}}}'


# --- exact_tool_match_reward -----------------------------------------------------------------------------


def _tool_message(name: str, arguments: str) -> dict[str, object]:
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


EXPECTED_CALL = {
    "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]
}


def test_exact_tool_match_reward_openai_format() -> None:
    good = exact_tool_match_reward(
        messages=[_tool_message("get_weather", '{"city":"Paris"}')], ground_truth=EXPECTED_CALL
    )
    assert good.score == 1.0 and good.metrics["exact_tool_match"].score == 1.0
    bad = exact_tool_match_reward(
        messages=[_tool_message("get_weather", '{"city": "Rome"}')], ground_truth=EXPECTED_CALL
    )
    assert bad.score == 0.0


def test_exact_tool_match_reward_xml_format_and_json_string_ground_truth() -> None:
    text = 'Calling <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    import json

    result = exact_tool_match_reward(messages=conv(text), ground_truth=json.dumps(EXPECTED_CALL))
    assert result.score == 1.0


def test_exact_tool_match_reward_without_ground_truth() -> None:
    assert exact_tool_match_reward(messages=conv("No tools needed."), ground_truth=None).score == 1.0
    assert exact_tool_match_reward(messages=[_tool_message("f", "{}")], ground_truth=None).score == 0.0


def test_exact_tool_match_reward_none_content_does_not_crash() -> None:
    # reward-kit bug: content None without tool_calls raised TypeError ("<tool_call>" in None).
    result = exact_tool_match_reward(messages=[{"role": "assistant", "content": None}], ground_truth=None)
    assert result.score == 1.0


def test_exact_tool_match_reward_bare_expected_calls() -> None:
    # reward-kit bug: expected calls without the "function" wrapper were dropped, so they never matched.
    expected = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    result = exact_tool_match_reward(
        messages=[_tool_message("get_weather", '{"city": "Paris"}')], ground_truth=expected
    )
    assert result.score == 1.0


def test_exact_tool_match_reward_bad_ground_truth_is_invalid() -> None:
    assert exact_tool_match_reward(messages=conv("x"), ground_truth="{broken").is_score_valid is False
    assert exact_tool_match_reward(messages=conv("x"), ground_truth=[1, 2]).is_score_valid is False
