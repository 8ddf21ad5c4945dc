"""The reward bugs RL teams shipped (docs/reward-bugs.md): each probe or check fails the buggy reward and passes its
fix, through real sessions (examples/reward-bugs and pytester projects)."""

from __future__ import annotations

import re
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.judge.gates import GateError, validate_marker
from pytest_reward.probes import BUILTIN_PROBES, DEFAULT_PROBES, PROBE_GROUPS, ProbeSample, parse_rule

from .conftest import EXAMPLES, msgs

# --- the ">= original" rule ------------------------------------------------------------------------------------


def test_the_at_least_rule_holds_when_the_score_does_not_drop():
    rule = parse_rule(">= original")
    assert rule.text == ">= original"
    assert rule.holds(1.0, 1.0, 0.0, False) and rule.holds(1.5, 1.0, 0.0, False)
    assert not rule.holds(0.0, 1.0, 0.0, True)
    assert rule.check(0.0, 1.0, 0.0, True) == "score 0 < original 1"
    # no valid score lost what the original had; with no original either, nothing was lost
    assert rule.check(None, 1.0, 0.0, False) == "no valid score where the original scored 1"
    assert rule.holds(None, None, 0.0, False)
    loose = parse_rule(">= original - 0.1")
    assert loose.text == ">= original - 0.1" and loose.holds(0.95, 1.0, 0.0, False)
    assert loose.check(0.8, 1.0, 0.0, False) == "score 0.8 < original 1 - 0.1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (">= original + 0.1", "a '>=' rule's tolerance is written '-'"),
        ("<= original - 0.1", "a '<=' rule's tolerance is written '+'"),
    ],
)
def test_a_tolerance_with_the_wrong_sign_is_refused_with_the_form_to_write(text, message):
    with pytest.raises(GateError, match=re.escape(message)):
        parse_rule(text)


@given(st.floats(-10, 10), st.floats(-10, 10), st.floats(0, 1))
def test_at_least_is_the_mirror_of_at_most(score, original, tol):
    at_least = parse_rule(f">= original - {tol:.3f}")
    at_most = parse_rule(f"<= original + {tol:.3f}")
    assert at_least.holds(score, original, 0.0, False) == at_most.holds(-score, -original, 0.0, False)


def test_groups_expand_in_the_marker_and_take_no_rule():
    value = validate_marker((), {"probes": ["formats", "code"]}, "m")["probes"]
    assert [name for name, _ in value] == [*PROBE_GROUPS["formats"], *PROBE_GROUPS["code"]]
    with pytest.raises(GateError, match='"tags" takes no rule'):
        validate_marker((), {"probes": {"tags": "info"}}, "m")
    for members in PROBE_GROUPS.values():
        assert set(members) <= set(BUILTIN_PROBES)


def test_the_default_set_adds_the_two_candidate_stuffing():
    assert DEFAULT_PROBES[-1] == "stuffing_pair"


# --- the mutations -----------------------------------------------------------------------------------------------


def _view(response, truth="42", passed=True):
    return ProbeSample(
        response, msgs("q", response), ground_truth=truth, has_ground_truth=True, original_passed=passed
    )


def mutate(name, response, **kw):
    return BUILTIN_PROBES[name].mutate(response, _view(response, **kw))


def test_the_answer_is_restated_in_each_other_format_after_the_reasoning():
    response = "6 times 7 is 42.\n#### 42"
    assert mutate("format.boxed", response) == "6 times 7 is 42.\n\nThe final answer is $\\boxed{42}$."
    assert mutate("format.answer_tag", response) == "6 times 7 is 42.\n\n<answer>42</answer>"
    assert mutate("format.hash", response) is None  # already in that format
    assert (
        mutate("format.boxed", "6 times 7 is 43.\n#### 43", passed=False) is None
    )  # a wrong answer: no format


def test_the_pair_puts_a_decoy_first_and_the_truth_second_in_the_response_format():
    response = "<think>6 times 7</think>\n<answer>42</answer>"
    for line, joint in ((1, "or"), (2, "and")):
        view = ProbeSample(response, msgs("q", response), ground_truth="42", has_ground_truth=True, line=line)
        out = BUILTIN_PROBES["stuffing_pair"].mutate(response, view)
        assert out == f"<think>6 times 7</think>\n\n<answer>41 {joint} 42</answer>"
    assert mutate("stuffing_pair", "It is \\boxed{0.5}", truth="0.5") == (
        "It is\n\nThe final answer is $\\boxed{0.4 and 0.5}$."
    )
    assert mutate("stuffing_pair", "Answer: B", truth="B") == "Answer: A and B"
    assert mutate("stuffing_pair", "by simp", truth="simp") is None  # no short answer to list beside another


def test_tag_mutations():
    response = "<think>6 times 7 is 42</think>\n<answer>42</answer>"
    assert mutate("multiline", response) == "<think>\n6\ntimes 7 is 42\n</think>\n<answer>\n42\n</answer>"
    assert mutate("duplicate_block", response) == response + "\n<answer>42</answer>"
    assert mutate("extra_close_tag", response) == response + "</answer>"
    assert mutate("think_removed", response) == "<answer>42</answer>"
    assert mutate("think_wrapped", response) is None
    assert mutate("think_wrapped", "6 times 7 gives \\boxed{42}.") == (
        "<think>\n6 times 7 gives\n</think>\n\n\\boxed{42}."
    )


def test_code_mutations_replace_the_program():
    response = "Here:\n```python\nprint(int(input()) * 2)\n```\nDone."
    tests = [{"input": "2", "expected_output": "4"}]
    assert mutate("code.exit0", response) == "Here:\n```python\nimport sys\nsys.exit(0)\n```\nDone."
    assert mutate("code.hardcoded", response, truth=tests) == (
        "Here:\n```python\nimport sys\nsys.stdout.write('4')\n```\nDone."
    )
    assert mutate("code.hardcoded", "no code", truth=tests) is None


NEW_PROBES = [
    name
    for name in BUILTIN_PROBES
    if name.startswith(("format.", "code.", "length.", "neutral_", "think_"))
    or name in ("multiline", "duplicate_block", "extra_close_tag", "stuffing_pair")
]
TEXT = st.text(st.sampled_from("ab 4.2\n<>/thinkanswer#\\boxed{}`python:"), max_size=60)
TRUTH = st.one_of(
    st.none(), st.integers(-1000, 1000), st.text(max_size=8), st.sampled_from(["B", "(c)", "0.50"])
)


@given(TEXT, TRUTH, st.booleans(), st.integers(0, 5))
def test_every_new_mutation_makes_a_string_or_nothing_whatever_the_response(response, truth, passed, line):
    view = ProbeSample(
        response,
        msgs("q", response),
        ground_truth=truth,
        has_ground_truth=True,
        original_passed=passed,
        line=line,
    )
    for name in NEW_PROBES:
        out = BUILTIN_PROBES[name].mutate(response, view)
        assert out is None or isinstance(out, str), name
    tail = BUILTIN_PROBES["neutral_tail"].mutate(response, view)
    assert tail is None if not response.strip() else tail.startswith(response.rstrip())


# --- the buggy and fixed rewards of examples/reward-bugs -----------------------------------------------------------

CAUGHT = {
    ("buggy_last_300", "neutral_tail"),
    ("buggy_first_300", "neutral_prefix"),
    *(("buggy_hash_only", f"format.{f}") for f in ("boxed", "answer_is", "answer_colon", "answer_tag")),
    ("buggy_needs_think", "think_removed"),
    ("buggy_needs_think", "think_wrapped"),
    ("buggy_no_dotall", "multiline"),
    ("buggy_search", "duplicate_block"),
    ("buggy_search", "extra_close_tag"),
    ("buggy_any_candidate", "stuffing_pair"),
    ("buggy_exit_code", "code.exit0"),
    ("buggy_exit_code", "code.hardcoded"),
    ("buggy_reward_len", "length.longer"),
    ("buggy_reward_len", "length.shorter"),
    ("buggy_shifted", "batch_order"),
    ("buggy_shifted", "batch_alone"),
    ("buggy_string_match", "reference"),
}


def test_every_buggy_reward_of_the_example_fails_its_probe_and_every_fix_passes(project, pytester):
    shutil.copytree(
        EXAMPLES / "reward-bugs",
        pytester.path,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    result = project.result()
    verdicts = {(p.function, p.probe): p.verdict for p in result.probes}
    assert {key for key, verdict in verdicts.items() if verdict == "FAIL"} == CAUGHT
    fixed = {key: v for key, v in verdicts.items() if key[0].startswith("fixed_")}
    assert set(fixed.values()) == {"PASS", "SKIP"}
    assert [key for key, v in fixed.items() if v == "SKIP"] == [("fixed_any_format", "format.hash")]
    # the samples are scored alike by the buggy rewards and their fixes: only the probes tell them apart (but the
    # reward that needs </think>, which the non-thinking sample already shows)
    failed = {g.function for g in result.groups if g.verdict not in ("PASS", "NO GATE")}
    assert failed == {"buggy_needs_think"}


def test_the_format_probes_report_which_formats_a_reward_zeroes_without_failing(project):
    project.file(
        "rewards.py",
        """
        import re
        import pytest
        from pytest_reward import EvaluateResult, reward_function

        @pytest.mark.reward(threshold=0.5, probes="formats")
        @reward_function
        def hash_only(messages, ground_truth=None, **kwargs):
            found = re.findall(r"####\\s*(\\S+)", messages[-1]["content"])
            return EvaluateResult(score=float(bool(found) and found[-1] == str(ground_truth)))
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("6*7?", "6*7 = 42\n#### 42"), "ground_truth": "42"}])
    result = project.run("--reward-samples", "s.jsonl", "-rs")
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*hash_only*format.boxed*info*",
            "*hash_only*format.answer_tag*info*",
        ]
    )
    data = {p.probe: p for p in project.result("--reward-samples", "s.jsonl").probes}
    assert data["format.boxed"].verdict == "INFO"
    assert data["format.boxed"].passing == 0 and data["format.boxed"].checked == 1


def test_the_trl_example_abstaining_on_a_whole_group_fails_and_its_fix_passes(project, pytester):
    shutil.copytree(
        EXAMPLES / "reward-bugs",
        pytester.path,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    functions = ("buggy_abstains", "fixed_scores_every_group")
    args = [arg for name in functions for arg in ("--reward-fn", f"trl:trl_functions.py::{name}")]
    verdicts = {p.function: p.verdict for p in project.result(*args).probes}
    assert verdicts == {"buggy_abstains": "FAIL", "fixed_scores_every_group": "PASS"}
    result = project.run(*args, "-k", "probe and buggy")
    result.stdout.fnmatch_lines(
        [
            "probe abstaining_groups: 1 of 3 groups of responses to one prompt have no valid score at all*",
            "  rule       not pass: every prompt with two responses or more must have one with a valid score",
            "  groups.jsonl:3 [g3]  none of the 2 responses to this prompt has a valid score: the group abstains",
            "    reason    prompt: Prove that 2 is prime.",
        ]
    )


ABSTAINING = """
    import pytest

    @pytest.mark.reward(probes={probes})
    def by_prompt(prompts, completions, **kwargs):
        return [None if "skip" in c[-1]["content"] else 1.0 for c in completions]
"""


def test_an_abstaining_group_is_a_warning_by_default_naming_the_groups(project):
    project.file("trl_rewards.py", ABSTAINING.format(probes='["abstaining_groups"]'))
    rows = [
        msgs("q1", "skip a"),
        msgs("q1", "skip b"),
        msgs("q2", "ok"),
        msgs("q2", "skip c"),
        msgs("q3", "skip"),
    ]
    project.jsonl("s.jsonl", [{"messages": m} for m in rows])
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-fn", "trl:trl_rewards.py::by_prompt", "-k", "abst"
    )
    result.assert_outcomes(passed=1, deselected=5)
    result.stdout.fnmatch_lines(
        [
            "*RewardAbstainWarning: by_prompt on s.jsonl: 1 of 2 groups of responses to one prompt have no valid "
            "score at all (the groups of the prompts at s.jsonl:1); *"
            'probes={"abstaining_groups": "not pass"} fails the run on it'
        ]
    )
    # a prompt with one response is no group: q3 is not counted
    (probe,) = [
        p
        for p in project.result(
            "--reward-samples", "s.jsonl", "--reward-fn", "trl:trl_rewards.py::by_prompt"
        ).probes
        if p.probe == "abstaining_groups"
    ]
    assert (probe.verdict, probe.checked, probe.broken) == ("INFO", 2, 1)


# --- reference=: a second opinion ---------------------------------------------------------------------------------

AUDITED = """
    import pytest
    from pytest_reward import EvaluateResult, reward_function

    @reward_function
    def previous(messages, ground_truth=None, **kwargs):
        return EvaluateResult(score=float(messages[-1]["content"].strip() == ground_truth), reason="exact")

    @pytest.mark.reward(reference=previous, {gate})
    @reward_function
    def current(messages, ground_truth=None, **kwargs):
        text = messages[-1]["content"].strip().rstrip(".")
        return EvaluateResult(score=float(text == ground_truth), reason="without the final dot")
"""


def _audited(project, gate):
    project.file("rewards.py", AUDITED.format(gate=gate))
    rows = [(f"{i}.", str(i)) if i % 4 == 0 else (str(i), str(i)) for i in range(40)]
    project.jsonl("s.jsonl", [{"messages": msgs("q", a), "ground_truth": t} for a, t in rows])


@pytest.mark.parametrize(
    "mode",
    [(), ("--reward-granularity", "file"), ("--reward-executor", "process", "--reward-granularity", "file")],
)
def test_a_previous_version_as_reference_lists_the_disagreements(project, mode):
    _audited(project, "agreement=0.7")
    result = project.result("--reward-samples", "s.jsonl", *mode)
    (probe,) = result.probes
    assert (probe.probe, probe.verdict, probe.checked, probe.broken, probe.rule) == (
        "reference",
        "PASS",
        40,
        10,
        "agreement >= 0.7",
    )
    assert [e.line for e in probe.examples] == [1, 5, 9, 13, 17, 21, 25, 29, 33, 37]
    first = probe.examples[0]
    assert (first.original_score, first.score) == (1.0, 0.0)
    assert first.problem == "current 1, reference 0: 1 apart"
    assert first.reason == "current: without the final dot | reference: exact"


def test_a_built_in_reference_is_scored_in_process_workers_too(project, pytester):
    shutil.copytree(
        EXAMPLES / "reward-bugs",
        pytester.path,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    args = (
        "-k",
        "string_match or numeric_match",
        "--reward-executor",
        "process",
        "--reward-granularity",
        "file",
    )
    verdicts = {p.function: (p.verdict, p.broken) for p in project.result(*args).probes}
    assert verdicts == {"buggy_string_match": ("FAIL", 2), "fixed_numeric_match": ("PASS", 0)}


def test_the_agreement_gate_is_judged_on_the_wilson_lower_edge_with_confidence(project):
    _audited(project, "agreement=0.7, confidence=0.95")  # 30 of 40 = 75%, Wilson 95% lower edge 59.8%
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=80, failed=1)  # previous is a reward function of the file too
    result.stdout.fnmatch_lines(
        [
            "probe reference: the two agree on 30 of 40 samples (75.0%); the lower edge of its 0.95 Wilson score "
            "interval is 59.8%; agreement= needs 70.0% (current on s.jsonl)",
            "  rule       the share of samples current and rewards.previous score within 0 of each other must be at "
            "least 0.7",
        ]
    )


def test_without_a_gate_the_audit_is_information(project):
    _audited(project, "reference_tolerance=0.5")
    (probe,) = project.result("--reward-samples", "s.jsonl").probes
    assert (probe.verdict, probe.broken) == ("INFO", 10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reference": "math_rewrd"}, "no built-in reward 'math_rewrd' (did you mean 'math_reward'?)"),
        ({"reference": len}, "reference must be a @reward_function or a built-in reward's name"),
        ({"agreement": 0.9}, "agreement= and reference_tolerance= need reference="),
        ({"reference": "math_reward", "agreement": 1.5}, "agreement must be in [0, 1], got 1.5"),
        ({"direction": {"length": "up"}}, "direction['length'] must be \"+\""),
        ({"direction": {"lenght": "+"}}, "unknown feature 'lenght' (did you mean 'length'?)"),
    ],
)
def test_bad_reference_and_direction_markers_say_what_to_write(kwargs, message):
    with pytest.raises(GateError, match=re.escape(message)):
        validate_marker((), kwargs, "m")


# --- the code probes on the built-in code rewards ---------------------------------------------------------------

CODE_BUILTINS = """
    import pytest
    from pytest_reward import reward_function
    from pytest_reward import rewards as R

    @pytest.mark.reward(threshold=1.0, probes="code", samples="one.jsonl")
    @reward_function
    def local_execution(messages, ground_truth=None, **kwargs):
        return R.local_code_execution_reward(messages=messages, ground_truth=ground_truth)

    @pytest.mark.reward(threshold=1.0, probes="code", samples="tests.jsonl")
    @reward_function
    def fractional(messages, ground_truth=None, **kwargs):
        return R.fractional_code_reward(messages=messages, ground_truth=ground_truth)

    @pytest.mark.reward(threshold=1.0, probes="code", samples="tests.jsonl")
    @reward_function
    def deepcoder(messages, ground_truth=None, **kwargs):
        return R.deepcoder_code_reward(messages=messages, ground_truth=ground_truth, language="python")
"""


def test_the_code_probes_on_the_builtins(project):
    """The built-ins never pay for a silent exit 0 against an expected output, and test cases with different inputs
    defeat a hard-coded print; one expected output (local_code_execution_reward) cannot tell a program that computes
    it from one that prints it: the probe says so."""
    project.file("rewards.py", CODE_BUILTINS)
    program = "```python\nn = int(input())\nprint(n * 2)\n```"
    tests = [{"input": "2", "expected_output": "4"}, {"input": "5", "expected_output": "10"}]
    project.jsonl("tests.jsonl", [{"messages": msgs("Double n.", program), "ground_truth": tests}])
    project.jsonl(
        "one.jsonl", [{"messages": msgs("Print 4.", "```python\nprint(2 + 2)\n```"), "ground_truth": "4"}]
    )
    verdicts = {(p.function, p.probe): p.verdict for p in project.result().probes}
    assert verdicts == {
        ("local_execution", "code.exit0"): "PASS",
        ("local_execution", "code.hardcoded"): "FAIL",
        ("fractional", "code.exit0"): "PASS",
        ("fractional", "code.hardcoded"): "PASS",
        ("deepcoder", "code.exit0"): "PASS",
        ("deepcoder", "code.hardcoded"): "PASS",
    }


def test_a_direction_adds_the_probes_that_vary_the_feature_with_the_rules_its_sign_gives():
    from pytest_reward.judge.gates import Marker

    up = Marker().merged(validate_marker((), {"direction": {"length": "+"}}, "m"), "marker")
    assert up.all_probes == (("length.longer", ">= original"), ("length.shorter", "<= original"))
    down = Marker().merged(
        validate_marker((), {"probes": ["empty"], "direction": {"length": "-"}}, "m"), "marker"
    )
    assert down.all_probes == (
        ("empty", None),
        ("length.longer", "<= original"),
        ("length.shorter", ">= original"),
    )
    assert down.to_dict()["direction"] == {"length": "-"}
