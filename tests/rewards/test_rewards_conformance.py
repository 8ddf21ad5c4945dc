"""What reward-kit 0.4.1's own test suite expects of the built-ins, kept as our inputs and expected results.

The conformance count (reward-kit's reward tests run against these built-ins, with the exclusions) is in
``docs/rewards.md``. These tests pin the behaviour that count measured: the deprecated tool-call aliases, the
reason wording that tools match on, multiple-choice edge cases, ``deepseek_prover_v2_reward``'s subgoal bonus and
what the code-execution rewards report about a run (test details, failed runs, missing code, APPS edge cases).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_reward.reward.decorator import get_spec, is_reward_function
from pytest_reward.reward.models import EvaluateResult
from pytest_reward.rewards import (
    composite_function_call_reward,
    deepcoder_code_reward,
    deepseek_prover_v2_reward,
    evaluate_apps_solution,
    exact_tool_match_reward,
    fractional_code_reward,
    lean_prover_reward,
    list_comparison_math_reward,
    llm_judge_reward,
    local_code_execution_reward,
    math_reward,
    multiple_choice_math_reward,
    schema_jaccard_reward,
)


def conv(text: str | None, user: str = "Solve it.") -> list[dict[str, Any]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": text}]


def gt(text: str | None) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": text}]


# --- deprecated aliases of exact_tool_match_reward -------------------------------------------------------

ALIASES: dict[str, Callable[..., EvaluateResult]] = {
    "schema_jaccard_reward": schema_jaccard_reward,
    "llm_judge_reward": llm_judge_reward,
    "composite_function_call_reward": composite_function_call_reward,
}
# Parameters of the old implementations: accepted and ignored (no schema comparison, no model call).
IGNORED = {
    "function_call": {"name": "anything", "arguments": "{}"},
    "expected_schema": {"type": "object"},
    "expected_behavior": "be helpful",
    "openai_api_key": "sk-not-used",
}


def tool_message(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ],
    }


def expected_calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls
        ]
    }


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_deprecated_alias_warns_and_blames_the_caller(name: str) -> None:
    alias = ALIASES[name]
    call = ("get_weather", {"city": "Oslo"})
    with pytest.warns(
        DeprecationWarning, match=rf"`{name}` is deprecated.*exact_tool_match_reward"
    ) as record:
        result = alias(
            messages=[{"role": "user", "content": "Weather?"}, tool_message(call)],
            ground_truth=expected_calls(call),
        )
    assert result.score == 1.0
    assert [w.filename for w in record] == [__file__]  # this line, not the package, is blamed


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_deprecated_alias_passes_an_error_filter_on_the_package(name: str) -> None:
    # The project's own pytest configuration turns DeprecationWarnings raised *from pytest_reward* into errors:
    # a user's call must not trip it, because the warning is attributed to the user's module.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", category=DeprecationWarning, module="pytest_reward")
        ALIASES[name](messages=conv("no tools"), ground_truth=None)
    assert [w.category for w in caught] == [DeprecationWarning]
    assert caught[0].filename == __file__


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_deprecated_alias_is_still_a_reward_function(name: str) -> None:
    alias = ALIASES[name]
    assert is_reward_function(alias)
    assert get_spec(alias).name == name
    assert alias.__name__ == name


names = st.sampled_from(["get_weather", "book_flight", "search"])
arguments = st.dictionaries(
    st.sampled_from(["city", "date", "n"]), st.one_of(st.integers(-5, 5), st.text(max_size=4))
)
call_lists = st.lists(st.tuples(names, arguments), max_size=3)


@settings(max_examples=60, deadline=None)
@given(generated=call_lists, expected=call_lists, ignored=st.booleans())
def test_deprecated_aliases_score_like_exact_tool_match(
    generated: list[tuple[str, dict[str, Any]]], expected: list[tuple[str, dict[str, Any]]], ignored: bool
) -> None:
    messages = [{"role": "user", "content": "Do it."}, tool_message(*generated)]
    truth = expected_calls(*expected)
    reference = exact_tool_match_reward(messages=messages, ground_truth=truth)
    assert reference.score == float(generated == expected)
    for alias in ALIASES.values():
        with pytest.warns(DeprecationWarning):
            result = alias(messages=messages, ground_truth=truth, **(IGNORED if ignored else {}))
        assert (result.score, result.reason, result.is_score_valid) == (
            reference.score,
            reference.reason,
            reference.is_score_valid,
        )


@pytest.mark.parametrize(("generated", "score"), [([("f", {"x": 1})], 1.0), ([("f", {"x": 2})], 0.0)])
def test_exact_tool_match_reason_opens_with_the_score(
    generated: list[tuple[str, dict[str, Any]]], score: float
) -> None:
    result = exact_tool_match_reward(
        messages=[tool_message(*generated)], ground_truth=expected_calls(("f", {"x": 1}))
    )
    assert result.score == score
    assert (result.reason or "").startswith(f"Exact tool match evaluation score: {score}")


# --- multiple_choice_math_reward edge cases --------------------------------------------------------------


def test_mcq_ambiguous_ground_truth_compares_its_first_option() -> None:
    truth = gt("Either (C) or (E) is accepted.")
    first = multiple_choice_math_reward(messages=conv("I choose (C)."), ground_truth=truth)
    assert first.score == 1.0
    flag = first.metrics["ambiguous_original_mcq"]
    assert flag.score == 0.0 and flag.is_score_valid and "(C)" in flag.reason and "(E)" in flag.reason
    assert "ambiguous_generated_mcq" not in first.metrics
    second = multiple_choice_math_reward(messages=conv("I choose (E)."), ground_truth=truth)
    assert second.score == 0.0 and second.is_score_valid  # only the first option of the ground truth counts


def test_mcq_both_sides_ambiguous_compares_the_first_options() -> None:
    result = multiple_choice_math_reward(messages=conv("[B], possibly [D]."), ground_truth=gt("(B) or (A)"))
    assert result.score == 1.0
    assert {"ambiguous_original_mcq", "ambiguous_generated_mcq"} <= set(result.metrics)
    assert "Gen: '[B]' (B) vs Orig: '(B)' (B)" in (result.reason or "")
    other = multiple_choice_math_reward(messages=conv("(D), possibly (B)."), ground_truth=gt("(B) or (A)"))
    assert other.score == 0.0


def test_mcq_ambiguous_response_to_a_specific_ground_truth_scores_zero() -> None:
    result = multiple_choice_math_reward(messages=conv("(A) or (D)"), ground_truth=gt("(D)"))
    assert (result.score, result.is_score_valid) == (0.0, True)
    assert "ambiguous_generated_mcq" in result.metrics
    assert "Generated answer is ambiguous" in (result.reason or "")


@pytest.mark.parametrize(
    ("messages", "ground_truth", "reason"),
    [
        ([], [], "Missing generated messages"),  # the response is checked first
        ([], gt("(A)"), "Missing generated messages"),
        (conv("(A)"), [], "Missing ground truth message"),
        (conv("(A)"), None, "Missing ground truth message"),
        (conv("(A)"), "", "Missing ground truth message"),
        (
            [{"role": "user", "content": "(A)"}],
            gt("(A)"),
            "Last generated message not from assistant or has no content",
        ),
        (conv(None), gt("(A)"), "Last generated message not from assistant or has no content"),
        (
            conv("(A)"),
            [{"role": "user", "content": "(A)"}],
            "Invalid ground truth message: Not an assistant message",
        ),
        (conv("(A)"), gt(None), "Invalid ground truth message: Not an assistant message"),
        (conv("(A)"), gt("The answer is two."), "Could not extract MCQ option from original message"),
    ],
)
def test_mcq_unusable_inputs_are_invalid_with_the_reason(
    messages: Any, ground_truth: Any, reason: str
) -> None:
    result = multiple_choice_math_reward(messages=messages, ground_truth=ground_truth)
    assert (result.score, result.is_score_valid) == (0.0, False)
    assert (result.reason or "").startswith(reason), result.reason


def test_mcq_without_option_in_the_ground_truth_still_reports_the_response() -> None:
    result = multiple_choice_math_reward(
        messages=conv("The answer is (B)."), ground_truth=gt("The answer is two.")
    )
    assert result.metrics["extracted_generated_mcq"].score == 1.0
    assert result.metrics["extracted_original_mcq"].score == 0.0


# --- math_reward / list_comparison_math_reward reasons ---------------------------------------------------


@pytest.mark.parametrize(
    ("response", "truth", "label", "metric"),
    [
        ("It is 3 or 4.", "\\boxed{3}", "Strictness fail (Issue #1 - unboxed 'or')", "strictness_penalty_unboxed_or"),
        ("First x = 2, then y = 5, so z = 9.", "\\boxed{5}", "Strictness fail (Issue #2 - ambiguity)", "strictness_penalty_ambiguity"),
        ("The roots are 2, 3 and 8.", "The roots are 2 and 3.", "Strictness fail (Conflicting Answers)", "strictness_penalty_conflicting_answers"),
    ],
)  # fmt: skip
def test_math_strictness_reasons_carry_reward_kits_labels(
    response: str, truth: str, label: str, metric: str
) -> None:
    result = math_reward(messages=conv(response), ground_truth=truth)
    assert (result.score, result.is_score_valid) == (0.0, True)  # a wrong answer: a valid 0
    assert (result.reason or "").startswith(label)
    assert result.metrics[metric].score == 0.0


def test_math_ambiguity_detail_names_the_rule() -> None:
    result = math_reward(messages=conv("Values: 1, 2 and 4."), ground_truth="\\boxed{4}")
    detail = result.metrics["strictness_penalty_ambiguity"].reason
    assert detail.startswith("Ground truth is specific (one answer), but generated answer is ambiguous")


@pytest.mark.parametrize("truth", ["What is it?", "Choice (A).", "no number here"])
def test_math_ground_truth_without_an_answer_is_invalid(truth: str) -> None:
    result = math_reward(messages=conv("\\boxed{1}"), ground_truth=truth)
    assert (result.score, result.is_score_valid) == (0.0, False)
    assert (result.reason or "").startswith("Could not extract answers from original message (ground truth)")


@pytest.mark.parametrize("reward", [math_reward, list_comparison_math_reward])
@pytest.mark.parametrize("messages", [[], [{"role": "user", "content": "1, 2"}]])
def test_missing_response_reason(
    reward: Callable[..., EvaluateResult], messages: list[dict[str, Any]]
) -> None:
    result = reward(messages=messages, ground_truth="1, 2")
    assert result.is_score_valid is False
    assert (result.reason or "").startswith("Invalid or missing assistant response")


def test_list_comparison_ground_truth_without_a_list_is_invalid() -> None:
    result = list_comparison_math_reward(messages=conv("1, 2, 3"), ground_truth="no list here")
    assert (result.score, result.is_score_valid) == (0.0, False)
    assert (result.reason or "").startswith(
        "Could not extract any number list from original message (ground truth)"
    )


# --- deepseek_prover_v2_reward ---------------------------------------------------------------------------

DECOMPOSED = """theorem two_steps (a b : Nat) (h : a = b) : a + 0 = b := by
  have h1 : a + 0 = a := by simp
  have h2 : a = b := h
  rw [h1]
  exact h2
  simp
  apply Eq.refl"""


def test_deepseek_prover_v2_adds_a_subgoal_bonus() -> None:
    base = lean_prover_reward(messages=conv(DECOMPOSED), ground_truth=None, statement="a + 0 = b")
    result = deepseek_prover_v2_reward(messages=conv(DECOMPOSED), ground_truth=None, statement="a + 0 = b")
    assert base.score == pytest.approx(0.9)
    # two `have` steps: 0.3 * 2/10; deepest indentation 2 columns: 0.2 * 2/40
    assert result.score == pytest.approx(0.9 + 0.06 + 0.01)
    assert result.metrics["subgoal_decomposition"].score == pytest.approx(0.2)
    assert result.metrics["hierarchical_structure"].score == pytest.approx(0.05)
    assert set(base.metrics) < set(result.metrics)


def test_deepseek_prover_v2_lean3_steps_and_lean_comments_count() -> None:
    # reward-kit bug: its `have` pattern needed `:=` (Lean 3's `have h : t,` never counted) and it looked for
    # decomposition comments after `//` or `/*`, which are not Lean comments.
    lean3 = "theorem t (n : nat) : n = n :=\nbegin\n  -- Step 1: reflexivity\n  have h : n = n,\n  simp,\n  exact rfl,\nend"
    result = deepseek_prover_v2_reward(messages=conv(lean3), ground_truth=None, statement="n = n")
    assert "2 step(s)" in (result.reason or "")
    c_style = lean3.replace("-- Step 1", "// Step 1")
    assert "1 step(s)" in (
        deepseek_prover_v2_reward(messages=conv(c_style), ground_truth=None, statement="n = n").reason or ""
    )


def test_deepseek_prover_v2_no_bonus_below_half() -> None:
    text = "theorem t : 1 = 1 := by\n    have h : 1 = 1 := rfl\n    sorry"
    base = lean_prover_reward(messages=conv(text), ground_truth=None, statement="1 = 1")
    result = deepseek_prover_v2_reward(messages=conv(text), ground_truth=None, statement="1 = 1")
    assert base.score < 0.5 and result.score == base.score
    assert result.metrics["subgoal_decomposition"].score > 0  # reported, not rewarded


def test_deepseek_prover_v2_without_subgoal_check_is_lean_prover_reward() -> None:
    result = deepseek_prover_v2_reward(
        messages=conv(DECOMPOSED), ground_truth=None, statement="s", check_subgoals=False
    )
    assert (
        result.score == lean_prover_reward(messages=conv(DECOMPOSED), ground_truth=None, statement="s").score
    )
    missing = deepseek_prover_v2_reward(messages=conv(DECOMPOSED), ground_truth=None)
    assert missing.is_score_valid is False and "Statement" in (missing.reason or "")


lean_lines = st.sampled_from(
    ["theorem t : 1 = 1 := by", "  have h : 1 = 1 := rfl", "    suffices h2 : True", "  -- step 2", "  simp",
     "  induction n with k ih", "  sorry", "  exact h", "  let m := 3", "end", "\tcalc 1 = 1 := rfl", "prose"]
)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(lean_lines, max_size=12), truth=st.sampled_from([None, "rfl", "simp"]))
def test_deepseek_prover_v2_bonus_never_lowers_or_exceeds(lines: list[str], truth: str | None) -> None:
    text = "\n".join(lines)
    base = lean_prover_reward(
        messages=conv(text), ground_truth=truth, statement="s", check_partial_progress=True
    )
    result = deepseek_prover_v2_reward(messages=conv(text), ground_truth=truth, statement="s")
    if base.score >= 0.5:
        assert base.score <= result.score <= min(1.0, base.score + 0.5)
    else:
        assert result.score == base.score
    assert all(0.0 <= m.score <= 1.0 for m in result.metrics.values())


# --- code-execution rewards ------------------------------------------------------------------------------


def fenced(code: str, language: str = "python") -> list[dict[str, Any]]:
    return conv(f"Here it is:\n```{language}\n{code}\n```")


def test_details(result: EvaluateResult) -> list[dict[str, Any]]:
    details = json.loads(result.metrics["test_results"].reason)
    assert isinstance(details, list)
    return details


test_details.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@pytest.mark.parametrize(
    ("test_input", "value"),
    [
        ("7", 7),
        ("'abc'", "abc"),
        ("[3, 1, 2]", [3, 1, 2]),
        ("{'k': [1, None]}", {"k": [1, None]}),
        ("", None),
    ],
)
def test_call_details_show_the_printed_value_without_its_line_break(test_input: str, value: Any) -> None:
    code = "def echo(*args):\n    return args[0] if args else None"
    result = fractional_code_reward(
        messages=fenced(code),
        ground_truth=[{"input": test_input, "expected_output": repr(value)}],
        function_to_call="echo",
    )
    assert result.score == 1.0
    assert test_details(result)[0]["actual_output"] == repr(value)


def test_stdin_details_drop_trailing_line_breaks_only() -> None:
    code = "print('  indented')\nprint('last  ')\nprint()"
    result = fractional_code_reward(
        messages=fenced(code), ground_truth=[{"input": "", "expected_output": "x"}]
    )
    assert test_details(result)[0]["actual_output"] == "  indented\nlast"


@pytest.mark.parametrize("reward", [local_code_execution_reward, fractional_code_reward])
def test_failed_run_metric_says_execution_failed_with_error(reward: Callable[..., EvaluateResult]) -> None:
    result = reward(messages=fenced("print(1 + missing_name)"), ground_truth="5")
    assert (result.score, result.is_score_valid) == (0.0, True)
    detail = result.metrics["execution_result"].reason
    assert "Code execution failed with error: exited with status 1: NameError" in detail


def test_deepcoder_missing_code_block_wording() -> None:
    result = deepcoder_code_reward(
        messages=conv("I would loop over the input."),
        ground_truth=[{"input": "1", "expected_output": "1"}],
        language="python",
    )
    assert (result.score, result.is_score_valid) == (0.0, True)
    assert result.metrics["error"].reason == "No python code block found in the response."


def test_timed_out_test_says_timed_out() -> None:
    result = deepcoder_code_reward(
        messages=fenced("import time\ntime.sleep(30)"),
        ground_truth=[{"input": "", "expected_output": "done"}],
        language="python",
        timeout=1,
    )
    assert (result.score, result.is_score_valid) == (0.0, True)
    [detail] = test_details(result)
    assert detail["status"] == "timeout"
    assert detail["error"].startswith("Execution timed out: wall-clock timeout after 1 s")


def test_apps_without_messages() -> None:
    result = evaluate_apps_solution(messages=[], ground_truth="{}")
    assert (result.score, result.is_score_valid, result.reason) == (0.0, False, "No messages provided.")
    assert result.metrics["error"].reason == "No messages provided for evaluation."


@pytest.mark.parametrize("content", ["", "<think>I am not sure.</think>", "```python\n```"])
def test_apps_empty_answer_is_an_empty_solution(content: str) -> None:
    result = evaluate_apps_solution(messages=conv(content), ground_truth="{}")
    assert (result.score, result.is_score_valid) == (0.0, True)
    assert result.reason == "The provided code solution was empty after extraction."
    assert result.metrics["parsability"].reason == "Empty code solution after extraction."


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("def f():\n  return 1 oops", "SyntaxError: invalid syntax (line 2)"),
        ("Sorry, I can't help with that.", "SyntaxError: unterminated string literal"),
        ("x = 1\nreturn x", "SyntaxError: 'return' outside function (line 2)"),  # found by the compiler
        ("if True:\nprint(1)", "IndentationError: expected an indented block"),
    ],
)
@pytest.mark.parametrize("tests", [{"inputs": [], "outputs": []}, {"inputs": ["1"], "outputs": ["1"]}])
def test_apps_solution_that_does_not_compile_scores_zero_whatever_the_tests(
    content: str, error: str, tests: dict[str, list[str]]
) -> None:
    result = evaluate_apps_solution(messages=conv(content), ground_truth=json.dumps(tests))
    assert (result.score, result.is_score_valid) == (0.0, True)
    assert (result.reason or "").startswith(f"Execution Error: {error}")
    assert error in json.loads(result.metrics["execution_error_details"].reason)["error"]
    assert "test_results" not in result.metrics  # nothing was run
