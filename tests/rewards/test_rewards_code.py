"""Code-execution rewards (they run programs in the sandbox; each run costs ~50 ms)."""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_reward.rewards import (
    deepcoder_code_reward,
    evaluate_apps_solution,
    fractional_code_reward,
    local_code_execution_reward,
)
from pytest_reward.rewards.code_execution import compare_outputs, extract_code_blocks, parse_call_arguments
from pytest_reward.rewards.sandbox import node_available

needs_node = pytest.mark.skipif(node_available() is None, reason="JavaScript tests need 'node' on PATH")


def answer(code: str, language: str = "python", prose: str = "Here you go:") -> list[dict[str, str]]:
    return [
        {"role": "user", "content": "Write the program."},
        {"role": "assistant", "content": f"{prose}\n```{language}\n{code}\n```"},
    ]


# --- helpers ---------------------------------------------------------------------------------------------


def test_extract_code_blocks_filters_language_and_chatter() -> None:
    text = "```js\nconsole.log(1)\n```\n```python\n<think>hmm</think>\nprint(1)\n```\n```\nplain\n```"
    blocks = extract_code_blocks(text, "python")
    assert [b["code"] for b in blocks] == ["print(1)", "plain"]
    assert extract_code_blocks(text, "javascript")[0]["code"] == "console.log(1)"


def test_compare_outputs() -> None:
    assert compare_outputs("hello\n", "hello") == 1.0
    assert compare_outputs("3.1416", "3.14159") == 1.0
    assert compare_outputs("3.2", "3.14159") == 0.7
    assert compare_outputs("[1, 2, 3]", "[1, 2, 3]") == 1.0
    assert 0.0 < compare_outputs("Hello, World", "Hello, world!") < 1.0
    assert compare_outputs("", "x") == 0.0


def test_compare_outputs_huge_outputs_use_line_comparison() -> None:
    # reward-kit bug: a character-level LCS, quadratic: two 100 kB outputs took minutes.
    a = "\n".join(f"line {i}" for i in range(20_000))
    b = a.replace("line 5", "LINE 5")
    score = compare_outputs(a, b)
    assert 0.0 < score < 1.0


def test_parse_call_arguments() -> None:
    assert parse_call_arguments("[1, 2]") == [[1, 2]]
    assert parse_call_arguments("1 2") == [1, 2]
    assert parse_call_arguments("'a' 3.5") == ["a", 3.5]
    assert parse_call_arguments("") == []


# --- local_code_execution_reward -------------------------------------------------------------------------


def test_local_code_execution_reward_matches_output() -> None:
    result = local_code_execution_reward(messages=answer("print(sum(range(10)))"), ground_truth="45")
    assert result.score == 1.0
    assert result.metrics["output_match"].score == 1.0
    partial = local_code_execution_reward(
        messages=answer("print('Hello, World')"), ground_truth="Hello, world!"
    )
    assert 0.0 < partial.score < 1.0


def test_local_code_execution_reward_without_expected_output() -> None:
    assert local_code_execution_reward(messages=answer("x = 1"), ground_truth=None).score == 1.0


def test_local_code_execution_reward_failures_score_zero_with_reason() -> None:
    crash = local_code_execution_reward(messages=answer("raise ValueError('boom')"), ground_truth="x")
    assert crash.score == 0.0 and "ValueError: boom" in (crash.reason or "")
    assert crash.is_score_valid is True
    no_code = local_code_execution_reward(
        messages=[{"role": "assistant", "content": "no code"}], ground_truth="x"
    )
    assert no_code.score == 0.0 and "No python code blocks" in (no_code.reason or "")
    unsupported = local_code_execution_reward(
        messages=answer("x", "cobol"), ground_truth="x", language="cobol"
    )
    assert unsupported.is_score_valid is False and "Unsupported language" in (unsupported.reason or "")


def test_local_code_execution_reward_honours_max_memory_mb() -> None:
    # reward-kit bug: max_memory_mb was ignored (always 100 MB).
    code = "x = bytearray(150 * 1024 * 1024)\nprint('ok')"
    assert (
        local_code_execution_reward(messages=answer(code), ground_truth="ok", max_memory_mb=100).score == 0.0
    )
    assert (
        local_code_execution_reward(messages=answer(code), ground_truth="ok", max_memory_mb=400).score == 1.0
    )


def test_local_code_execution_reward_unicode_output() -> None:
    result = local_code_execution_reward(
        messages=answer("print('héllo ✓ 世界')"), ground_truth="héllo ✓ 世界"
    )
    assert result.score == 1.0


@needs_node
def test_local_code_execution_reward_javascript() -> None:
    result = local_code_execution_reward(
        messages=answer("console.log(6 * 7)", "javascript"), ground_truth="42", language="javascript"
    )
    assert result.score == 1.0


# --- fractional_code_reward ------------------------------------------------------------------------------


STDIN_DOUBLER = "import sys\nn = int(input())\nprint(n * 2)\nsys.exit(0)"


def test_fractional_code_reward_stdin_tests() -> None:
    tests = [
        {"input": "2", "expected_output": "4"},
        {"input": "5", "expected_output": "10"},
        {"input": "1", "expected_output": "3"},
    ]
    result = fractional_code_reward(messages=answer(STDIN_DOUBLER), ground_truth=tests)
    assert result.score == pytest.approx(2 / 3)
    details = json.loads(result.metrics["test_results"].reason)
    assert [d["passed"] for d in details] == [True, True, False]


def test_fractional_code_reward_sys_exit_keeps_output() -> None:
    # reward-kit bug: its exec() wrapper lost everything printed before sys.exit(0).
    result = fractional_code_reward(
        messages=answer(STDIN_DOUBLER), ground_truth=[{"input": "21", "expected_output": "42"}]
    )
    assert result.score == 1.0


def test_fractional_code_reward_function_calls() -> None:
    code = "def add(a, b):\n    return a + b"
    tests = [{"input": "1 2", "expected_output": "3"}, {"input": "x y", "expected_output": "'xy'"}]
    result = fractional_code_reward(messages=answer(code), ground_truth=tests, function_to_call="add")
    assert result.score == 1.0


def test_fractional_code_reward_expected_output_string() -> None:
    assert fractional_code_reward(messages=answer("print(7)"), ground_truth="7").score == 1.0


def test_fractional_code_reward_rejects_e2b_and_bad_ground_truth() -> None:
    e2b = fractional_code_reward(messages=answer("print(1)"), ground_truth="1", environment="e2b")
    assert e2b.is_score_valid is False and "e2b" in (e2b.reason or "")
    assert fractional_code_reward(messages=answer("print(1)"), ground_truth=[1, 2]).is_score_valid is False
    assert fractional_code_reward(messages=answer("print(1)"), ground_truth=[]).is_score_valid is False


@needs_node
def test_fractional_code_reward_javascript_tests() -> None:
    code = "const n = parseInt(require('fs').readFileSync(0, 'utf8')); console.log(n * n);"
    tests = [{"input": "3", "expected_output": "9"}, {"input": "4", "expected_output": "16"}]
    assert (
        fractional_code_reward(
            messages=answer(code, "javascript"), ground_truth=tests, language="javascript"
        ).score
        == 1.0
    )


JS_SUM_LINES = "let line, total = 0;\nwhile ((line = readline()) !== undefined) total += Number(line);\nconsole.log(total);"


@needs_node
@settings(max_examples=8, deadline=None)
@given(
    numbers=st.lists(st.integers(-1000, 1000), max_size=6),
    newline=st.sampled_from(["\n", "\r\n"]),
    final_newline=st.booleans(),
)
def test_javascript_tests_can_read_stdin_with_readline(
    numbers: list[int], newline: str, final_newline: bool
) -> None:
    # Judges' JavaScript shells provide a global readline(); Node does not, so the programs failed here.
    stdin = newline.join(map(str, numbers)) + (newline if final_newline and numbers else "")
    result = deepcoder_code_reward(
        messages=answer(JS_SUM_LINES, "javascript"),
        ground_truth=[{"input": stdin, "expected_output": str(sum(numbers))}],
        language="javascript",
    )
    assert result.score == 1.0, result.reason


@needs_node
def test_javascript_readline_keeps_the_programs_own_definitions_strictness_and_line_numbers() -> None:
    own = "function readline() { return '5'; }\nconsole.log(Number(readline()) * 2);"
    node_module = (
        "const readline = require('readline');\nconst lines = [];\n"
        "readline.createInterface({ input: process.stdin }).on('line', (l) => lines.push(l))"
        ".on('close', () => console.log(lines.length));"
    )
    strict = (
        "#!/usr/bin/env node\n'use strict';\nconst strict = (function () { return this === undefined; })();\n"
        "console.log(readline(), strict, new Error().stack.split('\\n')[1].match(/main\\.js:(\\d+)/)[1]);"
    )
    for code, expected in [(own, "10"), (node_module, "3"), (strict, "a true 4")]:
        result = fractional_code_reward(
            messages=answer(code, "javascript"),
            ground_truth=[{"input": "a\nb\nc\n", "expected_output": expected}],
            language="javascript",
        )
        assert result.score == 1.0, (code, result.metrics["test_results"].reason)


# --- deepcoder_code_reward -------------------------------------------------------------------------------


def test_deepcoder_code_reward_is_binary() -> None:
    tests = [{"input": "2", "expected_output": "4"}, {"input": "3", "expected_output": "7"}]
    result = deepcoder_code_reward(messages=answer(STDIN_DOUBLER), ground_truth=tests, language="python")
    assert result.score == 0.0
    assert result.is_score_valid is True  # reward-kit bug: a failed test made the result "invalid"
    assert result.metrics["pass_rate"].score == pytest.approx(0.5)
    passing = deepcoder_code_reward(messages=answer(STDIN_DOUBLER), ground_truth=tests[:1], language="python")
    assert passing.score == 1.0 and passing.metrics["overall_status"].score == 1.0


def test_deepcoder_code_reward_target_function() -> None:
    code = "def square(x):\n    return x * x"
    tests = [{"input": "3", "expected_output": "9"}, {"input": "[2]", "expected_output": "error"}]
    result = deepcoder_code_reward(
        messages=answer(code), ground_truth=tests[:1], language="python", target_function="square"
    )
    assert result.score == 1.0
    assert (
        deepcoder_code_reward(messages=answer(code), ground_truth=[], language="python").is_score_valid
        is False
    )


def test_deepcoder_code_reward_timeout() -> None:
    code = "while True:\n    pass"
    result = deepcoder_code_reward(
        messages=answer(code),
        ground_truth=[{"input": "", "expected_output": "x"}],
        language="python",
        timeout=1,
    )
    assert result.score == 0.0
    assert "timeout" in (result.reason or "")


# --- evaluate_apps_solution ------------------------------------------------------------------------------


def test_evaluate_apps_solution_standard_input() -> None:
    code = "def main():\n    n = int(input())\n    print(n * n)"  # main() never called: the harness calls it
    ground_truth = json.dumps({"inputs": ["3\n", "4\n", "5\n"], "outputs": ["9\n", "16\n", "26\n"]})
    result = evaluate_apps_solution(messages=answer(code), ground_truth=ground_truth)
    assert result.score == pytest.approx(2 / 3)
    assert "First failure: test 3" in (result.reason or "")


def test_evaluate_apps_solution_float_tolerance() -> None:
    ground_truth = {"inputs": [""], "outputs": ["0.3333333\n"]}
    assert evaluate_apps_solution(messages=answer("print(1/3)"), ground_truth=ground_truth).score == 1.0


def test_evaluate_apps_solution_call_based_problems_are_called() -> None:
    # reward-kit bug: fn_name was deleted and the function solution run as a stdin script (score 0).
    code = "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for i, n in enumerate(nums):\n            if target - n in seen:\n                return [seen[target - n], i]\n            seen[n] = i"
    ground_truth = {
        "fn_name": "twoSum",
        "inputs": [[[2, 7, 11, 15], 9], [[3, 2, 4], 6]],
        "outputs": [[0, 1], [1, 2]],
    }
    assert evaluate_apps_solution(messages=answer(code), ground_truth=ground_truth).score == 1.0
    plain = "def double(x):\n    return 2 * x"
    assert (
        evaluate_apps_solution(
            messages=answer(plain), ground_truth={"fn_name": "double", "inputs": [[4]], "outputs": [[8]]}
        ).score
        == 1.0
    )


def test_evaluate_apps_solution_ignores_the_callers_warning_filters() -> None:
    # Bug: the solution was parsed in this process, so under `-W error` the invalid escape "\d" made
    # `ast.parse` fail, the uncalled main() was not called and a correct solution scored 0; without `-W error`
    # the model's DeprecationWarning landed in the caller's session.
    code = 'import re\ndef main():\n    print(len(re.findall("\\d+", input())))'
    ground_truth = {"inputs": ["a1 b22 c333\n"], "outputs": ["3\n"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert evaluate_apps_solution(messages=answer(code), ground_truth=ground_truth).score == 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evaluate_apps_solution(messages=answer(code), ground_truth=ground_truth)
    from_the_solution = [w for w in caught if issubclass(w.category, (DeprecationWarning, SyntaxWarning))]
    assert from_the_solution == []


def test_evaluate_apps_solution_without_test_cases_is_invalid() -> None:
    # reward-kit bug: no test cases gave a valid 0 ("no results"), a score the solution did not earn.
    for tests in ({"inputs": [], "outputs": []}, {"inputs": ["1"], "outputs": []}):
        result = evaluate_apps_solution(messages=answer("print(input())"), ground_truth=tests)
        assert (result.score, result.is_score_valid) == (0.0, False)
        assert "inputs for" in (result.reason or "")


def test_evaluate_apps_solution_bad_inputs() -> None:
    assert (
        evaluate_apps_solution(messages=answer("print(1)"), ground_truth="{not json").is_score_valid is False
    )
    assert (
        evaluate_apps_solution(messages=answer("print(1)"), ground_truth={"inputs": ["1"]}).is_score_valid
        is False
    )
    none_content = evaluate_apps_solution(
        messages=[{"role": "assistant", "content": None}], ground_truth={"inputs": [], "outputs": []}
    )
    assert none_content.is_score_valid is False  # reward-kit: AttributeError
