"""Code-execution rewards, all run in ``sandbox.run_code``: ``local_code_execution_reward`` (compare stdout
with an expected output), ``fractional_code_reward`` (pass rate over test cases), ``deepcoder_code_reward``
(all tests must pass) and ``evaluate_apps_solution`` (APPS-format tests)."""

from __future__ import annotations

import ast
import difflib
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message, MetricResult
from ._common import assistant_text, invalid, metric
from .sandbox import INCOMPLETE, ExecutionResult, Limits, run_code

_CODE_BLOCK = re.compile(r"```([\w+#-]*)[ \t]*\n([\s\S]*?)\n?```")
_VERBOSE = [
    re.compile(r"<think>.*?</think>", re.DOTALL),
    re.compile(r"<reasoning>.*?</reasoning>", re.DOTALL),
    re.compile(r"^\s*Here's the Python code.*?\n", re.MULTILINE | re.IGNORECASE),
    re.compile(r"^\s*Okay, here is the code:.*?\n", re.MULTILINE | re.IGNORECASE),
]
_LANGUAGE_ALIASES = {"py": "python", "python3": "python", "js": "javascript", "node": "javascript"}
_MAX_SIMILARITY_CHARS = 20_000


def _canonical_language(language: str) -> str:
    return _LANGUAGE_ALIASES.get(language.lower(), language.lower())


def extract_code_blocks(text: str, language: str | None = None) -> list[dict[str, str]]:
    """Fenced code blocks of ``text`` as ``{"language", "code"}``; with ``language``, blocks tagged with another
    language are skipped (untagged ones are kept). ``<think>`` sections and chatter lines are removed."""
    wanted = _canonical_language(language) if language else None
    blocks = []
    for tag, code in _CODE_BLOCK.findall(text):
        tag_language = _canonical_language(tag) if tag else ""
        if wanted and tag_language and tag_language != wanted:
            continue
        for pattern in _VERBOSE:
            code = pattern.sub("", code)
        blocks.append({"language": tag_language or "unknown", "code": code.strip()})
    return blocks


def normalize_output(output: str) -> str:
    """Strip, unify newlines, collapse every run of whitespace to one space."""
    return re.sub(r"\s+", " ", output.replace("\r\n", "\n").replace("\r", "\n").strip())


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def string_similarity(a: str, b: str) -> float:
    """Character similarity in [0, 1] (``difflib`` ratio; long texts compared by lines to stay fast)."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    if len(a) + len(b) > 2 * _MAX_SIMILARITY_CHARS:
        return difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False).ratio()
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def compare_outputs(actual: str, expected: str) -> float:
    """Similarity in [0, 1] of a program's output and the expected output.

    Equal after whitespace normalisation: 1.0. Both numbers: 1.0 within 0.1 % relative error, then 0.9 (1 %),
    0.7 (10 %), then ``1 - relative error``. Both JSON lists: 0.3 × length similarity + 0.7 × mean best item
    similarity. Otherwise: 0.3 × line-count similarity + 0.7 × mean line similarity for multi-line outputs,
    character similarity for single lines.
    """
    actual_lines = [line.rstrip() for line in actual.replace("\r\n", "\n").strip().split("\n")]
    expected_lines = [line.rstrip() for line in expected.replace("\r\n", "\n").strip().split("\n")]
    actual_norm, expected_norm = normalize_output(actual), normalize_output(expected)
    if actual_norm == expected_norm:
        return 1.0
    a_num, e_num = _number(actual_norm), _number(expected_norm)
    if a_num is not None and e_num is not None:
        if e_num == 0:
            return 1.0 if a_num == 0 else 0.0
        relative = abs(a_num - e_num) / abs(e_num)
        if relative <= 0.001:
            return 1.0
        if relative <= 0.01:
            return 0.9
        if relative <= 0.1:
            return 0.7
        return max(0.0, 1.0 - min(1.0, relative))
    if actual_norm.startswith("[") and expected_norm.startswith("["):
        try:
            a_list, e_list = json.loads(actual_norm), json.loads(expected_norm)
        except json.JSONDecodeError:
            a_list = e_list = None
        if isinstance(a_list, list) and isinstance(e_list, list):
            if not a_list and not e_list:
                return 1.0
            length = 1.0 - abs(len(a_list) - len(e_list)) / max(1, len(a_list), len(e_list))
            items = 0.0
            if a_list and e_list:
                items = sum(max(compare_outputs(str(a), str(e)) for a in a_list) for e in e_list) / len(
                    e_list
                )
            return 0.3 * length + 0.7 * items
    if len(actual_lines) > 1 or len(expected_lines) > 1:
        length = 1.0 - abs(len(actual_lines) - len(expected_lines)) / max(
            1, len(actual_lines), len(expected_lines)
        )
        common = min(len(actual_lines), len(expected_lines))
        lines = sum(string_similarity(actual_lines[i], expected_lines[i]) for i in range(common)) / common
        return 0.3 * length + 0.7 * lines
    return string_similarity(actual_norm, expected_norm)


def _limits(timeout: float, memory_mb: int | None = 256) -> Limits:
    return Limits(timeout=float(timeout), memory_mb=memory_mb)


def _strict(kwargs: Mapping[str, Any]) -> bool:
    """The rewards' ``strict`` keyword: refuse (an invalid result saying why) to run code on a host that cannot
    isolate it fully, instead of running it with the missing mechanisms named in the reason."""
    return bool(kwargs.get("strict", False))


def _execution_metric(result: ExecutionResult) -> MetricResult:
    if result.ok:
        return metric(1.0, f"Code executed successfully with output:\n{result.stdout[:2000]}")
    detail = result.stderr.strip()[-2000:]
    return metric(
        0.0, f"Code execution failed with error: {_run_error(result)}" + (f"\n{detail}" if detail else "")
    )


def _run_error(result: ExecutionResult) -> str:
    """Why a run failed, in words; a run stopped by the wall-clock or CPU limit says "timed out"."""
    if result.status in ("timeout", "cpu"):
        return f"Execution timed out: {result.reason}"
    return result.reason


def _shown_output(stdout: str, limit: int) -> str:
    """A program's output as test details show it: without the trailing line break(s) and spaces (the
    comparison ignores them: ``print(repr(x))`` shows as ``repr(x)``), cut to ``limit`` characters."""
    return stdout.rstrip()[:limit]


def _infrastructure_failure(result: ExecutionResult) -> bool:
    """The sandbox itself could not run the program: not the program's fault, so the score is not valid."""
    return result.status in ("setup_error", "unsupported")


def _code_from(
    messages: Any, language: str, missing: str | None = None
) -> tuple[str | None, EvaluateResult | None]:
    """The first ``language`` code block of the response, or the result to return: invalid without a response,
    a valid 0 saying ``missing`` when the response has no such block."""
    text, why = assistant_text(messages)
    if text is None:
        return None, invalid(why)
    blocks = extract_code_blocks(text, language)
    if not blocks:
        missing = missing or f"No {language} code blocks found in model's response."
        return None, EvaluateResult(score=0.0, reason=missing, metrics={"error": metric(0.0, missing)})
    return blocks[0]["code"], None


def _run_and_compare(
    code: str, language: str, expected: str | None, limits: Limits, label: str, strict: bool
) -> EvaluateResult:
    metrics: dict[str, MetricResult] = {
        "extracted_code": metric(1.0, f"Extracted code:\n```{language}\n{code}\n```")
    }
    result = run_code(code, language, limits=limits, strict=strict)
    metrics["execution_result"] = _execution_metric(result)
    if _infrastructure_failure(result):
        return invalid(f"{label}: {result.reason}", "execution_result", **metrics)
    if not result.ok:
        return EvaluateResult(
            score=0.0, reason=f"{label}: code execution failed: {result.reason}", metrics=metrics
        )
    if not expected:
        return EvaluateResult(
            score=1.0,
            reason=f"{label}: execution successful, no expected output to compare.{result.isolation_note}",
            metrics=metrics,
        )
    similarity = compare_outputs(result.stdout, expected)
    metrics["output_match"] = metric(
        similarity,
        f"Output similarity: {similarity:.2f}\n\nExpected:\n{expected[:2000]}\n\nActual:\n{result.stdout[:2000]}",
    )
    return EvaluateResult(
        score=similarity,
        reason=f"{label}: execution successful. Output similarity: {similarity:.2f}.{result.isolation_note}",
        metrics=metrics,
    )


@reward_function
def local_code_execution_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: str | None = None,
    language: str = "python",
    timeout: int = 5,
    max_memory_mb: int = 100,
    **kwargs: Any,
) -> EvaluateResult:
    """Run the first ``language`` code block of the response in the sandbox; score the similarity of its stdout
    and ``ground_truth`` (``compare_outputs``), or 1.0 for a clean run when there is no expected output. A
    program that fails, times out, exceeds memory or floods its output scores 0 with the reason. Metrics:
    ``extracted_code``, ``execution_result``, ``output_match``.

    ``strict=True`` (keyword, as for every code reward here): on a host that cannot isolate the code fully
    (see ``sandbox``'s threat model) return an invalid result naming what is missing instead of running it;
    without it such a run goes ahead and the reason ends with ``[sandbox incomplete: ...]``.

    Differences from reward-kit (deliberate): ``max_memory_mb`` is honoured (reward-kit always used 100 MB);
    the program gets no network, none of the caller's environment, a private temp directory and its whole
    process tree is killed at the timeout (reward-kit left it running); it works from any thread (reward-kit
    used SIGALRM, which fails outside the main thread); output comparison of long outputs is no longer
    quadratic (reward-kit's LCS on two 100 kB outputs ran for minutes).
    """
    code, failure = _code_from(messages, language)
    if failure is not None:
        return failure
    assert code is not None
    limits = _limits(timeout, max_memory_mb)
    return _run_and_compare(code, language, ground_truth, limits, "Local execution", _strict(kwargs))


# --- test cases -----------------------------------------------------------------------------------------


def _refine(value: Any) -> Any:
    """Numeric strings become numbers and JSON-looking strings are decoded (reward-kit's refinement)."""
    if not isinstance(value, str):
        return value
    stripped = value.strip()
    if stripped.startswith(("[", "{")):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return value
    try:
        return float(stripped) if any(c in stripped for c in ".eE") else int(stripped)
    except ValueError:
        return value


_PARSE_ERRORS = (ValueError, SyntaxError, TypeError, RecursionError, MemoryError)


def _literal(text: str) -> Any:
    """``text`` as a JSON value, else as a Python literal, else as itself; then refined."""
    try:
        return _refine(json.loads(text))
    except _PARSE_ERRORS:
        pass
    try:
        return _refine(ast.literal_eval(text))
    except _PARSE_ERRORS:
        return _refine(text)


def parse_call_arguments(test_input: str) -> list[Any]:
    """Arguments of a function-call test: the whole input as one literal, else each shell-style word."""
    text = test_input.strip()
    if not text:
        return []
    for parse in (json.loads, ast.literal_eval):
        try:
            return [_refine(parse(text))]
        except _PARSE_ERRORS:
            continue
    try:
        words = shlex.split(text)
    except ValueError:
        words = [text]
    return [_literal(word) for word in words]


_PY_CALL_HARNESS = """

import json as _pr_json, sys as _pr_sys
_pr_args = _pr_json.loads({args!r})
_pr_result = {function}(*_pr_args)
print(repr(_pr_result))
"""

_JS_CALL_HARNESS = """
;(function () {{
  const result = {function}(...{args});
  console.log(JSON.stringify(result));
}})();
"""


# Judges' JavaScript shells (V8's d8, SpiderMonkey) give programs a global ``readline()`` returning the next line
# of stdin (``undefined`` at the end); Node has none. Defined on ``globalThis`` and only when absent, so a
# program's own ``readline`` (a function, ``const readline = require("readline")``) shadows it. One line, put
# after a hashbang and a "use strict" directive, so the program's line numbers and strictness stay as written.
_JS_READLINE = (
    ";(() => { if (typeof globalThis.readline !== 'undefined') return; let lines = null, next = 0;"
    " globalThis.readline = () => { if (lines === null) { const fs = typeof require === 'function'"
    " ? require('fs') : process.getBuiltinModule('fs'); lines = fs.readFileSync(0, 'utf8').split(/\\r?\\n/);"
    " if (lines[lines.length - 1] === '') lines.pop(); } return next < lines.length ? lines[next++] : undefined;"
    " }; })();"
)
_JS_PROLOGUE = re.compile(r"\A(?:#![^\n]*\n)?(?:\s*(?:'use strict'|\"use strict\")[ \t]*;?)?")


def _with_js_readline(code: str) -> str:
    """``code`` with the global ``readline()`` above defined before it runs."""
    prologue = _JS_PROLOGUE.match(code)
    end = prologue.end() if prologue else 0
    return code[:end] + _JS_READLINE + code[end:]


def _call_program(code: str, language: str, function: str, arguments: list[Any]) -> str | None:
    if not re.fullmatch(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*", function):
        return None
    try:
        args = json.dumps(arguments)
    except (TypeError, ValueError):
        return None
    if language == "python":
        return code + _PY_CALL_HARNESS.format(args=args, function=function)
    return code + _JS_CALL_HARNESS.format(args=args, function=function)


def _expected_forms(expected: Any, language: str, by_call: bool) -> list[str]:
    text = (
        expected
        if isinstance(expected, str)
        else json.dumps(expected)
        if language == "javascript"
        else repr(expected)
    )
    forms = [normalize_output(text)]
    if by_call and language == "python":
        forms.append(normalize_output(repr(expected)))
        if isinstance(expected, str):
            literal = _literal(expected)
            forms.append(normalize_output(repr(literal)))
    return forms


def run_test_cases(
    code: str,
    language: str,
    test_cases: Sequence[Mapping[str, Any]],
    timeout: float,
    function_to_call: str | None = None,
    memory_mb: int | None = 256,
    strict: bool = False,
) -> EvaluateResult:
    """Run ``code`` once per test case (``{"input", "expected_output"}``) and score the pass rate.

    Without ``function_to_call`` the input is the program's stdin and its stdout must equal the expected
    output (whitespace-normalised). With it, the input holds the call's arguments (one JSON/Python literal,
    or shell-style words) and the printed ``repr`` (Python) / ``JSON.stringify`` (JavaScript) of the return
    value must equal the expected output. A JavaScript program fed stdin also has a global ``readline()``
    (the next line, ``undefined`` at the end), as judges' JavaScript shells provide. Metrics: ``pass_rate``,
    ``test_results`` (JSON details; each test's ``actual_output`` without trailing whitespace, an ``error``
    for a failed run: "Execution timed out: ..." for a run stopped by a time limit).
    """
    language = _canonical_language(language)
    if not test_cases:
        return invalid("No test cases provided")
    limits = _limits(timeout, memory_mb)
    details: list[dict[str, Any]] = []
    passed = 0
    infrastructure: str | None = None
    for number, case in enumerate(test_cases, 1):
        test_input = case.get("input", "")
        expected = case.get("expected_output", case.get("output", ""))
        if not isinstance(test_input, str):
            test_input = json.dumps(test_input)
        entry: dict[str, Any] = {
            "test_number": number,
            "input": test_input[:500],
            "expected_output": str(expected)[:500],
        }
        if function_to_call:
            program = _call_program(code, language, function_to_call, parse_call_arguments(test_input))
            if program is None:
                return invalid(f"Cannot call {function_to_call!r} with input {test_input[:100]!r}")
            result = run_code(program, language, limits=limits, strict=strict)
        else:
            program = _with_js_readline(code) if language == "javascript" else code
            result = run_code(program, language, stdin=test_input, limits=limits, strict=strict)
        if _infrastructure_failure(result):
            infrastructure = result.reason
            entry.update(passed=False, error=result.reason)
            details.append(entry)
            break
        ok = result.ok and normalize_output(result.stdout) in _expected_forms(
            expected, language, bool(function_to_call)
        )
        passed += ok
        entry.update(passed=ok, actual_output=_shown_output(result.stdout, 500), status=result.status)
        if not result.ok:
            entry["error"] = _run_error(result)
        details.append(entry)
    if infrastructure is not None:
        return invalid(f"Sandbox could not run the tests: {infrastructure}", "pass_rate")
    total = len(test_cases)
    score = passed / total
    first_failure = next((d for d in details if not d["passed"]), None)
    reason = f"{passed}/{total} tests passed."
    if first_failure is not None:
        why = first_failure.get("error") or f"got {first_failure.get('actual_output', '')[:100]!r}"
        reason += f" First failure: test {first_failure['test_number']}: {why}"
    if INCOMPLETE not in reason:
        reason += result.isolation_note
    return EvaluateResult(
        score=score,
        reason=reason,
        metrics={
            "pass_rate": metric(score, f"{passed}/{total} tests passed ({score:.2%})"),
            "test_results": metric(score, json.dumps(details, indent=2)),
        },
    )


def _e2b_unavailable(environment: str) -> EvaluateResult | None:
    if environment.lower() == "local":
        return None
    return invalid(
        f"environment={environment!r} is not supported: pytest-reward runs code only in its local sandbox "
        "(E2B is a network service). Use environment='local'."
    )


@reward_function
def fractional_code_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: str | list[dict[str, Any]] | None,
    language: str = "python",
    timeout: int = 30,
    environment: str = "local",
    api_key: str | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """Pass rate in [0, 1]. ``ground_truth``: a list of test cases (``{"input", "expected_output"}``; pass
    ``function_to_call="name"`` to call a function instead of using stdin), or an expected output string
    (scored like ``local_code_execution_reward``), or ``None`` (1.0 for a clean run). ``timeout`` is per run.

    Differences from reward-kit (deliberate): ``environment="e2b"`` (a network service) gives an invalid
    result saying so; a program that calls ``sys.exit(0)`` after printing the right answer passes (reward-kit's
    ``exec`` wrapper lost its output); stdin is a real pipe, so ``sys.stdin.buffer`` and ``input()`` behave
    normally; the sandbox differences of ``local_code_execution_reward`` apply.
    """
    if (failure := _e2b_unavailable(environment)) is not None:
        return failure
    if ground_truth is not None and not isinstance(ground_truth, (str, list)):
        return invalid("Invalid ground_truth format: expected a string or a list of test case dicts.")
    if isinstance(ground_truth, list) and not all(isinstance(t, Mapping) for t in ground_truth):
        return invalid("Invalid ground_truth format: expected a string or a list of test case dicts.")
    code, failure = _code_from(messages, language)
    if failure is not None:
        return failure
    assert code is not None
    if isinstance(ground_truth, list):
        return run_test_cases(code, language, ground_truth, timeout, kwargs.get("function_to_call"),
                              strict=_strict(kwargs))  # fmt: skip
    return _run_and_compare(
        code, language, ground_truth, _limits(timeout), "Fractional code execution", _strict(kwargs)
    )


@reward_function
def deepcoder_code_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: list[dict[str, Any]] | None,
    language: str,
    timeout: int = 10,
    environment: str = "local",
    api_key: str | None = None,
    target_function: str | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """DeepCoder-style binary reward: 1.0 when every test case passes, else 0.0. ``ground_truth``: the test
    cases (``{"input", "expected_output"}``); ``target_function``: call this function with each input instead
    of feeding stdin. Metrics: those of ``fractional_code_reward`` plus ``overall_status``.

    Differences from reward-kit (deliberate): a
    failed test is a valid 0 (reward-kit set ``is_score_valid=False`` whenever a test failed);
    ``environment="e2b"`` is an invalid result naming the reason.
    """
    if (failure := _e2b_unavailable(environment)) is not None:
        return failure
    code, failure = _code_from(messages, language, missing=f"No {language} code block found in the response.")
    if failure is not None:
        return failure
    assert code is not None
    if not ground_truth or not isinstance(ground_truth, list):
        return invalid("No test cases provided.")
    tests = run_test_cases(code, language, ground_truth, timeout, target_function, strict=_strict(kwargs))
    if not tests.is_score_valid:
        return tests
    score = 1.0 if tests.score == 1.0 else 0.0
    reason = "All tests passed." if score else tests.reason or "One or more tests failed."
    if score and INCOMPLETE in (tests.reason or ""):
        reason += " " + tests.reason[tests.reason.index(INCOMPLETE) :]
    metrics = dict(tests.metrics)
    metrics["overall_status"] = metric(
        score, "All tests passed." if score else "One or more tests failed or an error occurred."
    )
    return EvaluateResult(score=score, reason=reason, metrics=metrics)


# --- APPS -----------------------------------------------------------------------------------------------


def _extract_apps_code(text: str) -> str | None:
    cleaned = re.sub(r"<think>[\s\S]*?</think>", "", text, flags=re.IGNORECASE).strip()
    if not cleaned:
        return None
    for pattern in (r"```python\s*(.*?)\s*```", r"```\s*(.*?)\s*```"):
        if (m := re.search(pattern, cleaned, re.DOTALL)) is not None:
            return m.group(1).strip()
    if (index := cleaned.find("def ")) != -1:
        return cleaned[index:].strip()
    return cleaned


# Compiles the solution (read from stdin; nothing of it runs) and reports, as one JSON line, its syntax error or
# whether it defines ``main()`` without calling it at module level. It runs in the sandbox, not here: the
# compiler turns warnings into SyntaxErrors under the caller's ``-W error`` and would otherwise print the model's
# warnings into the caller's session, and changing warning filters here is not thread-safe.
_PY_INSPECT = """
import ast, json, sys, warnings
warnings.simplefilter("ignore")
try:
    tree = compile(sys.stdin.read(), "<solution>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    compile(tree, "<solution>", "exec", dont_inherit=True)
except SyntaxError as exc:
    print(json.dumps({"syntax_error": f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"}))
    raise SystemExit(0)
bodies = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
calls = any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "main"
            for n in bodies for c in ast.walk(n))
defines = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
print(json.dumps({"syntax_error": None, "main_uncalled": defines and not calls}))
"""


def _inspect_solution(code: str, limits: Limits, strict: bool) -> tuple[ExecutionResult, dict[str, Any]]:
    """The inspection run and what it found (``{}`` when it could not say, e.g. a parser out of memory: then
    the tests decide)."""
    result = run_code(_PY_INSPECT, "python", stdin=code, limits=limits, strict=strict)
    if result.ok:
        try:
            found = json.loads(result.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            found = None
        if isinstance(found, dict):
            return result, found
    return result, {}


def _apps_lines_equal(actual: str, expected: Any) -> bool:
    if isinstance(expected, list):
        expected = "\n".join(str(e) for e in expected)
    got = [line.strip() for line in actual.strip().splitlines()]
    want = [line.strip() for line in str(expected).strip().splitlines()]
    if got == want:
        return True
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        a_parts, b_parts = a.split(), b.split()
        if a_parts == b_parts:
            continue
        if len(a_parts) != len(b_parts):
            return False
        try:
            if not all(
                math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-6)
                for x, y in zip(a_parts, b_parts, strict=True)
            ):
                return False
        except ValueError:
            return False
    return True


@reward_function
def evaluate_apps_solution(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: str | dict[str, Any] | None,
    **kwargs: Any,
) -> EvaluateResult:
    """APPS-format test cases; score = fraction passed. ``ground_truth``: ``{"inputs": [...], "outputs": [...],
    "fn_name"?: str}`` as a dict or JSON string. Standard-input problems feed each input to stdin and compare
    stdout line by line (numbers with tolerance); a ``def main()`` that is never called is called. With
    ``fn_name`` each input is the argument list of a call to that function (a method of ``Solution`` when the
    code defines that class) and its return value must equal the output. ``execution_timeout`` (kwarg,
    default 10 s) bounds each run. Metrics: ``pass_rate``, ``test_results``.

    The solution is compiled once in the sandbox before any test: one that does not compile scores 0 with
    ``Execution Error: SyntaxError: ...`` in the reason and an ``execution_error_details`` metric (JSON with
    ``error``), whatever the tests are. An empty answer scores 0 like an empty solution.

    Differences from reward-kit (deliberate): call-based problems (``fn_name``) are evaluated as calls
    (reward-kit deleted ``fn_name`` and ran every problem as a stdin script, so correct function solutions
    scored 0); a last message with no content (``None``) is an invalid result instead of an
    ``AttributeError``; a ground truth with no test cases is an invalid result naming the counts (reward-kit:
    a valid 0, "no results"), since there is nothing to score the solution on.
    """
    if not messages:
        return EvaluateResult(
            score=0.0,
            reason="No messages provided.",
            is_score_valid=False,
            error="No messages provided.",
            metrics={"error": metric(0.0, "No messages provided for evaluation.", valid=False)},
        )
    text, why = assistant_text(messages, allow_empty=True)  # an empty answer is an empty solution: 0
    if text is None:
        return invalid(why)
    code = _extract_apps_code(text)
    if not code:
        return EvaluateResult(
            score=0.0,
            reason="The provided code solution was empty after extraction.",
            metrics={"parsability": metric(0.0, "Empty code solution after extraction.")},
        )
    spec: Any = ground_truth
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            return invalid(f"Ground_truth JSONDecodeError: {exc}")
    if (
        not isinstance(spec, Mapping)
        or not isinstance(spec.get("inputs"), list)
        or not isinstance(spec.get("outputs"), list)
    ):
        return invalid(
            "Invalid ground_truth: expected {'inputs': [...], 'outputs': [...]} (dict or JSON string)."
        )
    inputs, outputs = spec["inputs"], spec["outputs"]
    limits = _limits(float(kwargs.get("execution_timeout", 10)))
    inspection, found = _inspect_solution(code, limits, _strict(kwargs))
    if _infrastructure_failure(inspection):
        return invalid(f"Sandbox could not run the tests: {inspection.reason}", "pass_rate")
    if found.get("syntax_error"):  # no test could pass, whatever the tests are
        error = str(found["syntax_error"])
        return EvaluateResult(
            score=0.0,
            reason=f"Execution Error: {error}. The solution does not compile; no test was run."
            + inspection.isolation_note,
            metrics={
                "pass_rate": metric(0.0, f"0/{len(inputs)}"),
                "execution_error_details": metric(0.0, json.dumps({"error": error})),
            },
        )
    if not inputs or len(inputs) != len(outputs):
        return invalid(f"Invalid ground_truth: {len(inputs)} inputs for {len(outputs)} outputs.")
    fn_name = spec.get("fn_name")
    if not fn_name and found.get("main_uncalled") is True:
        code += "\n\nmain()\n"
    passed = 0
    details: list[dict[str, Any]] = []
    for number, (test_input, expected) in enumerate(zip(inputs, outputs, strict=True), 1):
        if fn_name:
            args = test_input if isinstance(test_input, list) else [test_input]
            program = code + _APPS_CALL_HARNESS.format(args=json.dumps(args), fn=fn_name)
            result = run_code(program, "python", limits=limits, strict=_strict(kwargs))
            ok = False
            if result.ok:
                try:
                    value = json.loads(result.stdout.strip().splitlines()[-1])
                    ok = (
                        value == expected
                        or [value] == expected
                        or (isinstance(value, list) and value == [expected])
                    )
                except (json.JSONDecodeError, IndexError):
                    ok = False
        else:
            stdin = test_input if isinstance(test_input, str) else "\n".join(map(str, test_input))
            result = run_code(code, "python", stdin=stdin, limits=limits, strict=_strict(kwargs))
            ok = result.ok and _apps_lines_equal(result.stdout, expected)
        if _infrastructure_failure(result):
            return invalid(f"Sandbox could not run the tests: {result.reason}", "pass_rate")
        passed += ok
        details.append({"test_number": number, "passed": ok, "status": result.status, "reason": result.reason,
                        "actual_output": _shown_output(result.stdout, 300)})  # fmt: skip
    score = passed / len(inputs)
    reason = f"Passed {passed}/{len(inputs)} test cases."
    if (failure_detail := next((d for d in details if not d["passed"]), None)) is not None:
        reason += f" First failure: test {failure_detail['test_number']} ({failure_detail['status']}: {failure_detail['reason']})"
    if INCOMPLETE not in reason:
        reason += result.isolation_note
    return EvaluateResult(
        score=score,
        reason=reason,
        metrics={
            "pass_rate": metric(score, f"{passed}/{len(inputs)}"),
            "test_results": metric(score, json.dumps(details)),
        },
    )


_APPS_CALL_HARNESS = """

import json as _pr_json
_pr_args = _pr_json.loads({args!r})
_pr_target = Solution().{fn} if "Solution" in globals() and hasattr(Solution, {fn!r}) else {fn}
_pr_value = _pr_target(*_pr_args)
if isinstance(_pr_value, tuple):
    _pr_value = list(_pr_value)
print(_pr_json.dumps(_pr_value))
"""

__all__ = [
    "compare_outputs",
    "deepcoder_code_reward",
    "evaluate_apps_solution",
    "extract_code_blocks",
    "fractional_code_reward",
    "local_code_execution_reward",
    "run_test_cases",
]
