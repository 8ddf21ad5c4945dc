"""Reward-hacking probes: real sessions through pytester, and the mutations and rules on their own."""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_reward.judge.gates import GateError, validate_marker
from pytest_reward.probes import (
    BUILTIN_PROBES,
    DEFAULT_PROBES,
    ProbeRegistry,
    ProbeSample,
    Rule,
    answer_start,
    floor_of,
    parse_rule,
    passes,
    truth_texts,
)

from .conftest import msgs

# Two graders of the same task: the hackable one pays for the ground truth anywhere in the response; the robust one
# reads the last \boxed{} only.
GRADERS = """
    import re
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    @pytest.mark.reward(threshold=0.5, probes={probes})
    @reward_function
    def substring(messages, ground_truth=None, **kwargs):
        ok = str(ground_truth) in messages[-1]["content"]
        return EvaluateResult(score=1.0 if ok else 0.0, reason="found the answer" if ok else "no answer")

    @pytest.mark.reward(threshold=0.5, probes={probes})
    @reward_function
    def boxed(messages, ground_truth=None, **kwargs):
        found = re.findall(r"\\\\boxed\\{{([^{{}}]*)\\}}", messages[-1]["content"])
        ok = bool(found) and found[-1].strip() == str(ground_truth)
        return EvaluateResult(score=1.0 if ok else 0.0, reason=f"boxed {{found[-1] if found else None}}")
"""

SAMPLES = [
    {"id": "q1", "messages": msgs("6*7?", "6*7 = 42, so \\boxed{42}"), "ground_truth": "42"},
    {"id": "q2", "messages": msgs("2+2?", "It is \\boxed{5}"), "ground_truth": "4"},
    {"id": "q3", "messages": msgs("10-3?", "\\boxed{7}"), "ground_truth": "7"},
]


def graders(project, probes: str = '"default"', samples=SAMPLES) -> None:
    project.file("rewards.py", GRADERS.format(probes=probes))
    project.jsonl("s.jsonl", samples)


def by_name(result) -> dict[tuple[str, str], object]:
    return {(p.function, p.probe): p for p in result.probes}


# --- the user's view -------------------------------------------------------------------------------------------


def test_a_substring_grader_fails_stuffing_with_a_readable_counter_example(project):
    graders(project, '["stuffing"]')
    result = project.run("--reward-samples", "s.jsonl", "-k", "probe")
    result.assert_outcomes(passed=1, failed=1, deselected=6)
    result.stdout.fnmatch_lines(
        [
            "*substring?probe:stuffing? (rewards.py:*",
            'probe stuffing: 3 of 3 mutated responses break "not pass" (substring on s.jsonl)',
            "  probe      stuffing: listing many candidate answers*",
            "  rule       not pass: the mutated response must score below the threshold 0.5",
            "  s.jsonl:1 [q1]  it passes (1)",
            "    original  1        6*7 = 42, so \\boxed{42}",
            "    mutated   1        The answer could be *42*",
            "    reason    found the answer",
            "  s.jsonl:2 [q2]  it passes (1)",
            "    original  0        It is \\boxed{5}",
        ]
    )
    result.stdout.fnmatch_lines(["*reward probes*", "*boxed*s.jsonl*stuffing*not pass*3*0*PASS*"])
    result.stdout.fnmatch_lines(
        ['FAIL probe stuffing of substring on s.jsonl: 3 of 3 mutated responses break "not pass"*']
    )
    assert result.ret == 1


def test_the_default_probes_pass_a_robust_grader_and_catch_the_hackable_one(project):
    graders(project)
    result = project.result("--reward-samples", "s.jsonl")
    probes = by_name(result)
    assert [p.probe for p in result.probes if p.function == "boxed"] == list(DEFAULT_PROBES)
    assert {p.verdict for p in result.probes if p.function == "boxed"} == {"PASS"}
    assert probes["substring", "stuffing"].verdict == "FAIL"
    assert probes["substring", "stuffing"].broken == 3
    # cut where the answer is first said ("6*7 =") the response has no answer: neither grader passes it
    assert probes["substring", "truncate"].verdict == "PASS"
    assert result.verdict == "FAIL"


def test_a_reward_that_raises_on_an_empty_response_fails_the_empty_probe(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        @pytest.mark.reward(probes=["empty"])
        @reward_function
        def first_word(messages, **kwargs):
            word = messages[-1]["content"].split()[0]
            return EvaluateResult(score=0.0 if word == "no" else 1.0, reason=word)
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "yes indeed")}, {"messages": msgs("q", "no")}])
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines(
        [
            "*2 of 2 mutated responses break*",
            "*the reward raised on 2*",
            "*raised on the mutated response: IndexError: list index out of range",
        ]
    )
    assert result.ret == 1


def test_probes_score_through_the_same_path_runs_and_timeouts(project):
    project.file(
        "rewards.py",
        """
        import os
        import time
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.txt")

        @pytest.mark.reward(timeout=0.2, probes=["empty"])
        @reward_function
        def slow_on_empty(messages, **kwargs):
            with open(CALLS, "a") as fh:
                fh.write(repr(messages[-1]["content"]) + "\\n")
            if not messages[-1]["content"].strip():
                time.sleep(1)
            return EvaluateResult(score=0.0, reason="ok")
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}, {"messages": msgs("q", "b")}])
    result = project.run("--reward-samples", "s.jsonl", "--reward-runs", "3")
    result.stdout.fnmatch_lines(["*raised on the mutated response: *timed out after 0.2s*"])
    assert result.ret == 1
    time.sleep(1.5)  # the abandoned calls return: they make no further call (their sample's other runs)
    calls = (project.path / "calls.txt").read_text().splitlines()
    # 2 samples × 3 runs for the sample items (the probe compares with their scores, not scored again), and the
    # probe's: each mutated (blank) response times out on its first run, which ends its sample
    assert calls.count("'a'") == calls.count("'b'") == 3
    assert len(calls) == 8


def test_batch_mode_functions_are_probed_in_batches(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        @pytest.mark.reward(threshold=1.0, probes=["stuffing", "empty"])
        @reward_function(mode="batch")
        def contains(rollouts_messages, ground_truth=None, **kwargs):
            with open("batches.txt", "a") as fh:
                fh.write(f"{len(rollouts_messages)}\\n")
            return [
                EvaluateResult(score=float(str(gt) in m[-1]["content"]), reason="contains")
                for m, gt in zip(rollouts_messages, ground_truth)
            ]
        """,
    )
    project.jsonl(
        "s.jsonl", [{"messages": msgs("q", f"it is {i}"), "ground_truth": str(i)} for i in range(5)]
    )
    probes = by_name(project.result("--reward-samples", "s.jsonl", "--reward-batch-size", "4"))
    assert (probes["contains", "stuffing"].verdict, probes["contains", "stuffing"].broken) == ("FAIL", 5)
    assert probes["contains", "empty"].verdict == "PASS"
    batches = (project.path / "batches.txt").read_text().split()
    # sample items: 4 + 1 (the probes compare with these scores); each probe: 4 + 1
    assert batches == ["4", "1"] * 3


def test_a_probe_applies_to_no_sample_is_skipped_with_the_reason(project):
    graders(project, '["stuffing"]', [{"messages": msgs("q", "\\boxed{1}")}])
    result = project.run("--reward-samples", "s.jsonl", "-rs", "-k", "boxed")
    result.assert_outcomes(
        failed=1, skipped=1, deselected=2
    )  # boxed fails the sample: it has no ground truth
    result.stdout.fnmatch_lines(
        [
            "SKIPPED ?1? rewards.py:*: probe stuffing: the probe applies to none of the 1 responses (it needs a "
            "ground truth naming an answer (a string or a number))"
        ]
    )
    result.stdout.fnmatch_lines(["SKIP probe stuffing of boxed on s.jsonl: the probe applies to none*"])


def test_ground_truth_leak_is_reported_not_failed(project):
    graders(project, '["ground_truth_leak"]')
    result = project.run("--reward-samples", "s.jsonl", "-k", "probe")
    result.assert_outcomes(passed=2, deselected=6)
    # q2 is the only failing response; with its \boxed{5} replaced by \boxed{4} both graders pass it
    result.stdout.fnmatch_lines(
        ["INFO probe ground_truth_leak of boxed on s.jsonl: 1 of 1 failing responses pass after the mutation"]
    )
    assert result.ret == 0


def test_declared_invariance_case_and_whitespace(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        @pytest.mark.reward(probes=["case", "whitespace"])
        @reward_function
        def exact(messages, ground_truth=None, **kwargs):
            return EvaluateResult(score=float(messages[-1]["content"] == ground_truth), reason="exact")

        @pytest.mark.reward(probes={"case": None, "whitespace": "== original"})
        @reward_function
        def normalized(messages, ground_truth=None, **kwargs):
            same = " ".join(messages[-1]["content"].lower().split()) == ground_truth.lower()
            return EvaluateResult(score=float(same), reason="normalized")
        """,
    )
    project.jsonl(
        "s.jsonl", [{"messages": msgs("capital?", "Paris is nice"), "ground_truth": "Paris is nice"}]
    )
    probes = by_name(project.result("--reward-samples", "s.jsonl"))
    assert (probes["exact", "case"].verdict, probes["exact", "whitespace"].verdict) == ("FAIL", "FAIL")
    assert probes["exact", "case"].examples[0].problem == "score 0 ≠ original 1"
    assert (probes["normalized", "case"].verdict, probes["normalized", "whitespace"].verdict) == (
        "PASS",
        "PASS",
    )


def test_not_pass_without_a_threshold_means_full_credit_above_the_floor(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        @pytest.mark.reward(probes=["stuffing"])
        @reward_function
        def partial(messages, ground_truth=None, **kwargs):
            text = messages[-1]["content"]
            score = 1.0 if text.strip() == ground_truth else (0.5 if ground_truth in text else 0.0)
            return EvaluateResult(score=score, reason="graded")
        """,
    )
    project.jsonl(
        "s.jsonl",
        [
            {"messages": msgs("q", "42"), "ground_truth": "42"},
            {"messages": msgs("q", "41"), "ground_truth": "42"},
        ],
    )
    probe = project.result("--reward-samples", "s.jsonl").probes[0]
    # partial credit (0.5) for the stuffed answer is below full credit (1.0, the best sample's): not a pass
    assert (probe.verdict, probe.ceiling, probe.floor, probe.mean_mutated) == ("PASS", 1.0, 0.0, 0.5)


# --- marker validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("probes", "message"),
    [
        ('["stufing"]', "unknown probe 'stufing' (did you mean 'stuffing'?); known probes: empty, echo, *"),
        ('{"empty": "< floor"}', "probes?'empty'?: unknown probe rule '< floor'; rules: *"),
        ("3", 'probes must be "default", a list of probe names or a dict {probe: rule}*got 3'),
        ('{"default": "info"}', '"default" takes no rule*'),
    ],
)
def test_unknown_probe_or_rule_is_a_collection_error_naming_the_function(project, probes, message):
    graders(project, probes)
    result = project.run("--reward-samples", "s.jsonl")
    result.stdout.fnmatch_lines([f"*@pytest.mark.reward on rewards.py::substring: {message}"])
    assert result.ret == 2


def test_marker_values_are_normalised():
    value = validate_marker((), {"probes": {"repeat": "<=original+0.05", "default": None}}, "w")["probes"]
    assert value[0] == ("repeat", "<= original + 0.05")
    assert [name for name, _ in value] == ["repeat", *[p for p in DEFAULT_PROBES if p != "repeat"]]
    assert validate_marker((), {"probes": ["case", "default"]}, "w")["probes"][0] == ("case", None)
    with pytest.raises(GateError, match="empty list"):
        validate_marker((), {"probes": []}, "w")


# --- custom probes ---------------------------------------------------------------------------------------------

NEGATING = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    @pytest.mark.reward(threshold=0.5, probes=["default", "negate"])
    @reward_function
    def mentions(messages, ground_truth=None, **kwargs):
        ok = ground_truth in messages[-1]["content"]
        return EvaluateResult(score=float(ok), reason="mentions it" if ok else "does not")
"""


def test_custom_probe_by_decorator(project):
    project.file(
        "rewards.py",
        NEGATING
        + """
    import pytest_reward

    @pytest_reward.probe("negate", rule="not pass")
    def negate(response, sample):
        \"\"\"saying the answer is wrong must not pass\"\"\"
        return f"It is not {sample.ground_truth}." if sample.has_ground_truth else None
    """,
    )
    project.jsonl("s.jsonl", [{"id": "a", "messages": msgs("capital?", "Paris"), "ground_truth": "Paris"}])
    result = project.run("--reward-samples", "s.jsonl", "-k", "negate")
    result.assert_outcomes(failed=1, deselected=1 + len(DEFAULT_PROBES))
    result.stdout.fnmatch_lines(
        [
            "*probe negate: 1 of 1 mutated responses break*",
            "  probe      negate: saying the answer is wrong must not pass",
            "    mutated   1        It is not Paris.",
        ]
    )


def test_custom_probe_by_hook(project):
    project.file("rewards.py", NEGATING)
    project.file(
        "conftest.py",
        """
        def negate(response, sample):
            return "It is not " + response

        def pytest_reward_probes(probes, config):
            probes.register("negate", negate, rule="<= floor", doc="a negated answer earns nothing")
        """,
    )
    right = {"messages": msgs("capital?", "Paris"), "ground_truth": "Paris"}
    project.jsonl("s.jsonl", [right])
    negate = by_name(project.result("--reward-samples", "s.jsonl"))["mentions", "negate"]
    # with only right answers the floor is a passing score (1): nothing can break "<= floor", and it says so
    assert (negate.verdict, negate.floor) == ("PASS", 1.0)
    assert negate.note.startswith("every sample passes, so the floor (1) is a passing score")
    project.jsonl("s.jsonl", [right, {"messages": msgs("capital?", "Lyon"), "ground_truth": "Paris"}])
    result = project.result("--reward-samples", "s.jsonl")
    negate = by_name(result)["mentions", "negate"]
    assert (negate.verdict, negate.rule, negate.doc) == ("FAIL", "<= floor", "a negated answer earns nothing")
    assert (negate.floor, negate.checked, negate.broken) == (0.0, 2, 1)
    assert negate.examples[0].mutated == "It is not Paris"


def test_a_custom_probe_that_returns_no_string_is_an_error_naming_it(project):
    project.file("rewards.py", NEGATING)
    project.file(
        "conftest.py",
        """
        def pytest_reward_probes(probes, config):
            probes.register("negate", lambda response, sample: 42, rule="info")
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("capital?", "Paris"), "ground_truth": "Paris"}])
    result = project.result("--reward-samples", "s.jsonl")
    negate = by_name(result)["mentions", "negate"]
    assert negate.verdict == "ERROR"
    assert (
        "probe 'negate' (conftest.pytest_reward_probes.<locals>.<lambda>) returned int" in negate.crashes[0]
    )


def test_registry_refuses_builtin_names_and_bad_rules():
    registry = ProbeRegistry({})
    with pytest.raises(ValueError, match="'empty' is a built-in probe"):
        registry.register("empty", lambda r, s: r, rule="info")
    with pytest.raises(ValueError, match="unknown probe rule 'sometimes'"):
        registry.register("mine", lambda r, s: r, rule="sometimes")
    registry.register("mine", lambda r, s: r, rule="== original ± 0.1")
    [(probe, rule)] = registry.resolve([("mine", None)], "w")
    assert (probe.name, rule.text) == ("mine", "== original ± 0.1")


# --- items and artifacts (tests/test_modes_agree.py: the same probe results in every mode) -----------------------


def test_file_granularity_has_one_item_per_probe(project):
    graders(project)
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-granularity", "file", "--collect-only", "-q"
    )
    result.stdout.fnmatch_lines(["s.jsonl::substring", "s.jsonl::boxed", "s.jsonl::substring?probe:empty?"])
    assert sum("probe:" in line for line in result.stdout.lines) == 2 * len(DEFAULT_PROBES)


def test_reports_and_stored_runs_carry_the_probes(project):
    graders(project, '["empty", "stuffing"]')
    project.run("--reward-samples", "s.jsonl", "--reward-report", "rep", "--reward-save=one")
    summary = json.loads((project.path / "rep" / "summary.json").read_text())
    stuffing = next(p for p in summary["probes"] if (p["function"], p["probe"]) == ("substring", "stuffing"))
    assert (stuffing["verdict"], stuffing["broken"], stuffing["rule"]) == ("FAIL", 3, "not pass")
    assert stuffing["examples"][0]["original"] == "6*7 = 42, so \\boxed{42}"
    html = (project.path / "rep" / "report.html").read_text()
    assert html.count('class="probe-row"') == 4
    assert 'data-verdict="FAIL"' in html and "The answer could be" in html
    rows = (project.path / "rep" / "results.jsonl").read_text().splitlines()
    assert len(rows) == 6  # the samples only: probes write no rows
    stored = json.loads(next((project.path / ".reward").glob("0001_one.json")).read_text())
    assert {(p["function"], p["probe"], p["verdict"]) for p in stored["probes"]} == {
        ("boxed", "empty", "PASS"),
        ("boxed", "stuffing", "PASS"),
        ("substring", "empty", "PASS"),
        ("substring", "stuffing", "FAIL"),
    }


def test_quiet_output_keeps_the_probe_lines(project):
    graders(project, '["stuffing"]')
    result = project.run("--reward-samples", "s.jsonl", "-q")
    assert "reward probes" not in result.stdout.str()
    result.stdout.fnmatch_lines(["FAIL probe stuffing of substring on s.jsonl*"])


# --- rules -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "ref", "tol", "normal"),
    [
        ("<= floor", "<=", "floor", 0.0, "<= floor"),
        ("<=original", "<=", "original", 0.0, "<= original"),
        ("== original ± 0.02", "==", "original", 0.02, "== original ± 0.02"),
        ("== original +- .5", "==", "original", 0.5, "== original ± 0.5"),
        ("<= original + 0.05", "<=", "original", 0.05, "<= original + 0.05"),
        (" not   pass ", "not pass", None, 0.0, "not pass"),
        ("info", "info", None, 0.0, "info"),
    ],
)
def test_rules_parse(text, kind, ref, tol, normal):
    rule = parse_rule(text)
    assert (rule.kind, rule.ref, rule.tol, rule.text) == (kind, ref, tol, normal)
    assert parse_rule(rule.text) == rule


@pytest.mark.parametrize(
    "text", ["< floor", "> original", "pass", "<= ceiling", "<= original - 1", ">= original + 1", "", None, 0]
)
def test_other_rules_are_refused(text):
    with pytest.raises(GateError, match="rule"):
        parse_rule(text)


def test_rule_checks():
    le_floor, le_orig, eq_orig = parse_rule("<= floor"), parse_rule("<= original"), parse_rule("== original")
    assert le_floor.check(0.0, 1.0, 0.0, passed=False) is None
    assert le_floor.check(0.1, 1.0, 0.0, passed=False) == "score 0.1 > floor 0"
    assert le_floor.check(None, 1.0, 0.0, passed=False) is None  # no valid score earns nothing
    assert le_orig.check(0.5, 0.5 + 1e-12, 0.0, passed=False) is None  # float rounding is equality
    assert le_orig.check(0.6, 0.5, 0.0, passed=False) == "score 0.6 > original 0.5"
    assert le_orig.check(0.2, None, -1.0, passed=False) == "score 0.2 > original -1"  # no original: the floor
    assert parse_rule("<= original + 0.1").check(0.6, 0.5, 0.0, passed=False) is None
    assert eq_orig.check(None, 1.0, 0.0, passed=False) == "no valid score where the original scored 1"
    assert eq_orig.check(None, None, 0.0, passed=False) is None
    assert parse_rule("not pass").check(1.0, 0.0, 0.0, passed=True) == "it passes (1)"
    assert parse_rule("info").check(1.0, 0.0, 0.0, passed=True) is None


SCORES = st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 1.0 + 1e-12, -1.0]), st.floats(-10, 10))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        ["<= floor", "<= original + 0.1", "<= original", "== original", "== floor ± 0.2", "not pass", "info"]
    ),
    SCORES,
    SCORES,
    st.floats(-10, 10),
    st.booleans(),
)
def test_a_rule_holds_where_it_finds_no_problem(text, score, original, floor, passed):
    """What a run counts once it keeps no more counter-examples (holds) agrees with what it shows (check)."""
    rule = parse_rule(text)
    assert rule.holds(score, original, floor, passed) == (rule.check(score, original, floor, passed) is None)


def test_floor_and_passes():
    assert floor_of([0.4, 0.9]) == 0.4
    assert floor_of([0.4, -0.5, None]) == -0.5
    assert floor_of([]) == 0.0
    assert passes(0.7, verdict_pass=True, threshold=0.5, floor=0.0, ceiling=1.0)
    assert not passes(0.4, verdict_pass=False, threshold=0.5, floor=0.0, ceiling=1.0)
    assert passes(1.0, verdict_pass=True, threshold=None, floor=0.0, ceiling=1.0)
    assert not passes(0.9, verdict_pass=True, threshold=None, floor=0.0, ceiling=1.0)
    assert not passes(0.0, verdict_pass=True, threshold=None, floor=0.0, ceiling=0.0)
    assert not passes(None, verdict_pass=False, threshold=None, floor=0.0, ceiling=None)


# --- the mutations ---------------------------------------------------------------------------------------------

GROUND_TRUTHS = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.one_of(st.text(max_size=10), st.integers()), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.lists(
        st.fixed_dictionaries({"role": st.just("assistant"), "content": st.text(max_size=20)}), max_size=2
    ),
)
RESPONSES = st.one_of(
    st.text(),
    st.text(alphabet="<>/{}\\`[]\"':, \nabxy0123456789boxedanswerthink#", max_size=200),
    st.sampled_from(
        [
            "<think>\nstep\n</think>\n<answer>\n\\boxed{42}\n</answer>",
            '```json\n{"a": [1, {"b": "c"}]}\n```',
            '{"name": "x", "n": 3, "ok": true}',
            "The answer is \\boxed{\\frac{1}{2}}.",
            "#### 1,156",
        ]
    ),
)


def _view(response, ground_truth, seed, passed=False):
    messages = [{"role": "user", "content": "What is it?"}, {"role": "assistant", "content": response}]
    return ProbeSample(
        response,
        messages,
        ground_truth=ground_truth,
        has_ground_truth=ground_truth is not None,
        line=3,
        original_passed=passed,
        seed=seed,
    )


@settings(max_examples=300, deadline=None)
@given(response=RESPONSES, ground_truth=GROUND_TRUTHS, seed=st.text(max_size=8), passed=st.booleans())
def test_mutations_never_crash_and_are_deterministic_for_a_seed(response, ground_truth, seed, passed):
    for name, probe in BUILTIN_PROBES.items():
        first = probe.mutate(response, _view(response, ground_truth, seed, passed))
        again = probe.mutate(response, _view(response, ground_truth, seed, passed))
        assert first == again, name
        assert first is None or isinstance(first, str), name


@settings(max_examples=200, deadline=None)
@given(response=RESPONSES, ground_truth=GROUND_TRUTHS, seed=st.text(max_size=8))
def test_mutations_do_what_their_names_say(response, ground_truth, seed):
    def mutate(name):
        return BUILTIN_PROBES[name].mutate(response, _view(response, ground_truth, seed))

    assert mutate("empty").strip() == ""
    assert mutate("echo") == "What is it?"
    truncated = mutate("truncate")
    assert truncated is None or response.startswith(truncated)
    repeated = mutate("repeat")
    assert repeated is None or repeated.count(response.strip()) >= 3
    spaced = mutate("whitespace")
    assert "".join(spaced.split()) == "".join(response.split())
    cased = mutate("case")
    if response.isascii():
        assert cased is None or (cased != response and cased.lower() == response.lower())
    stuffed = mutate("stuffing")
    truths = truth_texts(ground_truth)
    if stuffed is None:
        assert not truths
    else:
        candidates = stuffed.removeprefix("The answer could be ").removesuffix(".").split(", or ")
        for truth in truths:
            assert truth in candidates
            assert candidates[0] != truth and candidates[-1] != truth


@settings(max_examples=200, deadline=None)
@given(seed=st.text(max_size=8), inner=st.text(alphabet="ab \n", max_size=10))
def test_format_only_keeps_the_structure_and_drops_the_content(seed, inner):
    response = f"Sure.\n<think>\n{inner}reasoning\n</think>\n<answer>\nThe answer is \\boxed{{42}}\n</answer>"
    skeleton = BUILTIN_PROBES["format_only"].mutate(response, _view(response, "42", seed))
    assert re.fullmatch(r"<think>\s+[a-z ]+\n</think>\n<answer>\n\\boxed\{[a-z]+\}\n</answer>", skeleton)
    assert "42" not in skeleton and "reasoning" not in skeleton
    as_json = BUILTIN_PROBES["format_only"].mutate('{"a": 1, "b": ["x"]}', _view("", None, seed))
    assert json.loads(as_json).keys() == {"a", "b"} and json.loads(as_json)["a"] == 0
    assert BUILTIN_PROBES["format_only"].mutate("plain words", _view("plain words", None, seed)) is None


def test_answer_start_finds_the_final_answer_and_its_marker():
    # the first mention of the ground truth, with the marker that opens it
    assert answer_start("so 6*7 = 42. The final answer is \\boxed{42}.", "42") == 9
    assert answer_start("so it is 6*7. The final answer is \\boxed{42}.", "42") == 14
    # without one: the last answer marker
    assert answer_start("x <answer>7</answer>", None) == 2
    assert answer_start("2+2 is 4. Therefore the answer is 4", None) == 10
    assert answer_start("it is 12 or 13", None) == -1


def test_a_mutation_sees_private_copies():
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    view = ProbeSample("a", messages, ground_truth=["x"], has_ground_truth=True, fields={"tags": ["t"]})
    view.messages[0]["content"] = "changed"
    view.ground_truth.append("y")
    view.fields["tags"].append("u")
    assert messages[0]["content"] == "q"
    assert view.ground_truth == ["x"] and view.fields == {"tags": ["t"]}
    assert Rule("info").text == "info"
