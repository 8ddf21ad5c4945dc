"""How probes score their mutated responses, at what cost: the in-thread path of the default executor, the
watchdog that holds the timeout for a whole block of calls, the path through the other executors; what they must
share with a sample's call (verdicts, errors, isolation); and the samples' own scores taken from their items."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest

from pytest_reward import EvaluateResult, reward_function
from pytest_reward.data.samples import Sample
from pytest_reward.errors import RewardTimeout
from pytest_reward.judge.gates import Gates, Marker, MetricGates
from pytest_reward.judge.results import PASS
from pytest_reward.project.functions import RewardFn
from pytest_reward.reward.call import MISSING, each_within, owned_messages
from pytest_reward.reward.decorator import get_spec
from pytest_reward.scoring.invoker import Invoker

from .conftest import msgs

# --- one input: the probes' call and verdict are a sample's -----------------------------------------------------


@reward_function
def graded(messages, ground_truth=None, **kwargs):
    """Whatever the response asks for: a score, an invalid result, a NaN, an error, an exception, a dict."""
    text = messages[-1]["content"]
    if text == "raise":
        raise ValueError("no")
    if text == "dict":
        return {"score": 0.25, "reason": "a dict"}
    if text == "invalid":
        return EvaluateResult(score=0.9, is_score_valid=False, reason="cannot tell")
    if text == "nan":
        return EvaluateResult(score=math.nan, reason="nan")
    if text == "error":
        return EvaluateResult(score=1.0, error="it broke", reason="error set")
    if text == "junk":
        return "not a result"
    score = float(text) if text.replace(".", "", 1).isdigit() else 0.0
    seen = "" if ground_truth is None else f" gt={ground_truth!r}"
    return EvaluateResult(score=score, reason=f"{text}{seen}", metrics={"m": {"score": score, "reason": "m"}})


@reward_function
async def graded_async(messages, ground_truth=None, **kwargs):
    return graded(messages=messages, ground_truth=ground_truth)


@reward_function
def with_fields(messages, ground_truth=None, tags=None, original_messages=None, **kwargs):
    return EvaluateResult(score=len(tags or []) / 4, reason=f"{ground_truth} {len(original_messages or [])}")


def _invoker(fn, gates: Gates) -> Invoker:
    spec = get_spec(fn)
    reward = RewardFn(
        obj=fn,
        spec=spec,
        name=spec.name,
        qualname=spec.name,
        module=fn.__module__,
        path=Path("r.py"),
        lineno=1,
        marker=Marker(gates=gates),
    )
    return Invoker(reward, "s.jsonl")


RESPONSES = ["1", "0.5", "0", "0.75", "raise", "dict", "invalid", "nan", "error", "junk"]
TRUTHS = [MISSING, None, "42", ["a", "b"], {"k": 1}]


@pytest.mark.parametrize("fn", [graded, graded_async], ids=["sync", "async"])
@pytest.mark.parametrize(
    "gates",
    [
        Gates(),
        Gates(threshold=0.6),
        Gates(threshold=0.6, pass_rate=0.5),
        Gates(threshold=0.1, metrics=(("m", MetricGates(threshold=0.7)),)),
    ],
    ids=["no-threshold", "threshold", "pass-rate", "metric-gate"],
)
def test_a_probe_call_gives_what_the_sample_path_gives(fn, gates):
    """Score, verdict, reason and error of every kind of result, through the probes' path and a sample's."""
    invoker = _invoker(fn, gates)
    one = invoker.fresh_scorer()
    for text in RESPONSES:
        for truth in TRUTHS:
            messages = msgs("q?", text)
            sample = Sample(Path("s.jsonl"), 1, None, messages, None, *(() if truth is MISSING else (truth,)))
            outcome = invoker.score_one(sample)
            expected = (outcome.score, outcome.verdict == PASS, outcome.reason, outcome.error)
            assert one(owned_messages(messages, text), truth, {}) == expected, (text, truth)
            assert list(invoker.score_fresh([(owned_messages(messages, text), truth, {})])) == [expected]


def test_fields_and_original_messages_take_the_general_path_with_copies():
    invoker = _invoker(with_fields, Gates())
    one = invoker.fresh_scorer()
    tags = ["x", "y"]
    messages = [{"role": "system", "content": "s"}, *msgs("q?", "a")]
    sample = Sample(Path("s.jsonl"), 1, None, messages, None, "t", kwargs={"tags": tags})
    outcome = invoker.score_one(sample)
    assert one(owned_messages(messages, "a"), "t", {"tags": tags}) == (0.5, True, "t 2", None)
    assert (outcome.score, outcome.reason) == (0.5, "t 2")


@reward_function
def greedy(messages, ground_truth=None, tags=None, **kwargs):
    """Changes every input it gets in place."""
    messages[0]["content"] += " (seen)"
    messages[-1]["content"] = "changed"
    messages.append({"role": "user", "content": "more"})
    if isinstance(ground_truth, list):
        ground_truth.append("x")
    if tags is not None:
        tags.clear()
    return EvaluateResult(score=1.0, reason="greedy")


def test_a_call_that_changes_shared_inputs_fails_and_changes_nothing_of_the_sample():
    invoker = _invoker(greedy, Gates())
    one = invoker.fresh_scorer()
    messages = msgs("q?", "a")
    truth, tags = ["t"], ["x"]
    snapshot = json.dumps([messages, truth, tags])
    score, passed, _, error = one(owned_messages(messages, "b"), truth, {"tags": tags})
    assert (score, passed) == (None, False)
    assert "greedy changed its input 'ground_truth', 'tags' in place" in error
    assert json.dumps([messages, truth, tags]) == snapshot


# --- the watchdog ----------------------------------------------------------------------------------------------


def test_each_within_runs_a_batch_in_one_thread_and_abandons_only_the_hung_call():
    calls: list[tuple[int, int]] = []
    release = threading.Event()

    def work(item, tick):
        tick()
        calls.append((item, threading.get_ident()))
        if item == 3:
            release.wait(10)  # hangs past the deadline
        if item == 5:
            raise ValueError("five")
        return item * 10

    try:
        out = each_within(0.3, work, list(range(8)))
    finally:
        release.set()
    assert [ok for ok, _ in out] == [True, True, True, False, True, False, True, True]
    assert [v for ok, v in out if ok] == [0, 10, 20, 40, 60, 70]
    assert isinstance(out[3][1], RewardTimeout) and "timed out after 0.3s" in str(out[3][1])
    assert isinstance(out[5][1], ValueError)
    time.sleep(0.05)  # the abandoned call returns once released: it must not have gone on with the next items
    assert sorted(item for item, _ in calls) == list(range(8))  # each item ran once
    threads = [ident for _, ident in sorted(calls)]
    assert len(set(threads[:4])) == 1  # one thread for the items up to the hung one
    assert len(set(threads[4:])) == 1 and threads[4] != threads[3]  # a fresh one after it


def test_an_abandoned_item_makes_no_further_call():
    calls: list[str] = []
    release = threading.Event()

    def runs(item, tick):  # three calls per item, as --reward-runs 3 makes
        for run in range(3):
            tick()
            calls.append(f"{item}.{run}")
            if item == 0:
                release.wait(10)
        return item

    try:
        out = each_within(0.2, runs, [0, 1])
    finally:
        release.set()
    time.sleep(0.1)  # the hung call has returned: its item's second call must not follow
    assert [ok for ok, _ in out] == [False, True]
    assert calls == ["0.0", "1.0", "1.1", "1.2"]


def test_each_within_without_a_limit_runs_in_the_calling_thread():
    here = threading.get_ident()
    out = each_within(None, lambda item, tick: (item, threading.get_ident()), [1, 2])
    assert out == [(True, (1, here)), (True, (2, here))]


def test_each_within_deadline_is_per_call_not_per_batch():
    # 12 calls of 0.05 s each under a 0.5 s limit: the batch takes longer than the limit, no call does
    out = each_within(0.5, lambda item, tick: (tick(), time.sleep(0.05), item)[2], list(range(12)))
    assert out == [(True, i) for i in range(12)]


# --- whole runs: the paths agree --------------------------------------------------------------------------------

VARIED = """
    import math
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    @pytest.mark.reward({marker}probes=["empty", "echo", "stuffing", "repeat", "format_only", "truncate", "case",
                                        "whitespace", "ground_truth_leak"])
    @reward_function
    def varied(messages, ground_truth=None, **kwargs):
        text = messages[-1]["content"]
        if "Q3" in text:
            raise RuntimeError("cannot read Q3")
        if not text.strip():
            return EvaluateResult(score=0.0, is_score_valid=False, reason="empty")
        if "lorem" in text:
            return EvaluateResult(score=math.nan, reason="junk")
        score = 1.0 if str(ground_truth) in text else 0.3
        score += 1e-12 * text.count(" ")  # a hair above the floor for longer texts: the rounding margin decides
        if len(text) > 60:
            score = min(score, 0.9)
        return EvaluateResult(score=score, reason=f"{{len(text)}} characters")
"""

VARIED_SAMPLES = [
    {"messages": msgs("Q1: 6*7?", "6*7 = 42, so \\boxed{42}"), "ground_truth": "42"},
    {"messages": msgs("Q2: 2+2?", "<think>2+2</think><answer>5</answer>"), "ground_truth": "4"},
    {"messages": msgs("Q3: 10-3?", "The answer is 7"), "ground_truth": "7"},
    {"messages": msgs("Q4: pick", "I pick (B)."), "ground_truth": "B"},
    {"messages": msgs("Q5: say hi", "hi"), "ground_truth": "hi"},
]


def _probes(result):
    return [
        (
            p.probe,
            p.verdict,
            p.checked,
            p.broken,
            p.errors,
            p.passing,
            p.not_applicable,
            round(p.mean_original, 9) if p.mean_original is not None else None,  # sums in another order
            round(p.mean_mutated, 9) if p.mean_mutated is not None else None,
            [(e.line, e.problem, e.score, e.original_score, e.mutated) for e in p.examples],
        )
        for p in result.probes
    ]


@pytest.mark.parametrize("marker", ["", "threshold=0.5, "], ids=["no-threshold", "threshold"])
def test_every_path_gives_the_same_probe_results(project, marker):
    project.file("rewards.py", VARIED.format(marker=marker))
    project.jsonl("s.jsonl", VARIED_SAMPLES)
    here = project.result("--reward-samples", "s.jsonl")  # in this thread, each mutation scored as it is made
    assert {p.verdict for p in here.probes} >= {"PASS", "FAIL"}
    watched = project.result("--reward-samples", "s.jsonl", "--reward-timeout", "60")  # one watchdog a block
    threads = project.result("--reward-samples", "s.jsonl", "--reward-workers", "2")  # the executor's path
    filed = project.result("--reward-samples", "s.jsonl", "--reward-granularity", "file")
    assert _probes(watched) == _probes(here)
    assert _probes(threads) == _probes(here)
    assert _probes(filed) == _probes(here)


KINDS = """
    import math
    import pytest
    import pytest_reward
    from pytest_reward import reward_function, EvaluateResult, RewardReturnError

    class Mine(EvaluateResult):
        pass

    for rule in ["<= floor", "<= original", "== original", ">= original", "not pass", "info"]:
        name = "as_" + rule.replace(" ", "_").replace("<=", "le").replace("==", "eq").replace(">=", "ge")
        pytest_reward.probe(name, rule=rule)(lambda response, sample: "mutated " + response)

    @pytest.mark.reward(
        {marker}probes=["as_le_floor", "as_le_original", "as_eq_original", "as_ge_original", "as_not_pass", "as_info"]
    )
    @reward_function
    def kinds(messages, ground_truth=None, **kwargs):
        text = messages[-1]["content"]
        word = text.split()[-1]
        bonus = 0.125 if text.startswith("mutated") else 0.0  # a mutation scores a little more
        if word == "raise":
            raise ValueError("no")
        if word == "retval":
            raise RewardReturnError("not a result", value=3)
        if word == "dict":
            return {{"score": 0.25 + bonus, "reason": "a dict"}}
        if word == "invalid":
            return EvaluateResult(score=0.9, is_score_valid=False, reason="cannot tell")
        if word == "nan":
            return EvaluateResult(score=math.nan, reason="nan")
        if word == "error":
            return EvaluateResult(score=1.0, error="it broke", reason="error set")
        if word == "junk":
            return "not a result"
        if word == "sub":
            return Mine(score=0.5 + bonus, reason="a subclass")
        score = float(word) if word.replace(".", "", 1).isdigit() else 0.0
        return EvaluateResult(score=score + (bonus if score < 1 else 0.0), reason=f"{{word}} gt={{ground_truth!r}}")
"""

KIND_SAMPLES = [
    {"messages": msgs(f"q{i}", word), **truth}
    for i, (word, truth) in enumerate(
        [
            ("1", {"ground_truth": "1"}),
            ("0.5", {}),
            ("0", {"ground_truth": None}),
            ("0.75", {"ground_truth": ["a", "b"]}),  # a list: the call copies it (the general path)
            ("0.25", {"ground_truth": "x", "tags": ["t"]}),  # a field: likewise
            ("raise", {}),
            ("retval", {}),
            ("dict", {}),
            ("invalid", {}),
            ("nan", {}),
            ("error", {}),
            ("junk", {}),
            ("sub", {}),
        ]
    )
]


@pytest.mark.parametrize("marker", ["", "threshold=0.5, "], ids=["no-threshold", "threshold"])
def test_every_kind_of_result_gives_the_same_probe_results_on_every_path(project, marker):
    """The in-thread loop makes and judges the usual call itself: each kind of result a function can give (a
    result, a dict, a subclass, an invalid or non-finite score, an error, an exception, something else), under each
    rule, counts as it does where the calls go through the executors (or the general path of a sample with fields
    or a list ground truth)."""
    project.file("rewards.py", KINDS.format(marker=marker))
    project.jsonl("s.jsonl", KIND_SAMPLES)
    here = project.result("--reward-samples", "s.jsonl")
    assert {p.verdict for p in here.probes} == {"FAIL", "INFO"}
    assert all(p.checked == len(KIND_SAMPLES) for p in here.probes)
    le_floor = next(p for p in here.probes if p.probe == "as_le_floor")
    problems = {e.line: e.problem for e in le_floor.examples}
    assert "ValueError: no" in problems[6]
    assert "kinds returned int 3" in problems[7] and "kinds returned str 'not a result'" in problems[12]
    assert problems[13] == "score 0.625 > floor 0" and le_floor.errors == 3
    ge = next(p for p in here.probes if p.probe == "as_ge_original")  # a mutation scores more: only errors break
    assert {e.line: e.problem.split(":")[0] for e in ge.examples} == {
        6: "raised on the mutated response",
        7: "raised on the mutated response",
        12: "raised on the mutated response",
    }
    watched = project.result("--reward-samples", "s.jsonl", "--reward-timeout", "60")
    threads = project.result("--reward-samples", "s.jsonl", "--reward-workers", "2")
    assert _probes(watched) == _probes(here)
    assert _probes(threads) == _probes(here)


def test_a_reward_that_changes_its_input_reaches_neither_the_samples_nor_the_counter_examples(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        @pytest.mark.reward(probes=["repeat", "case"])
        @reward_function
        def vandal(messages, **kwargs):
            with open("seen.txt", "a") as fh:
                fh.write(messages[-2]["content"] + "\\n")
            score = float(len(messages[-1]["content"]) > 20)
            messages[-1]["content"] = "VANDALISED"  # its own turn: each call owns it
            if messages[-2]["content"].startswith("touch"):
                messages[-2]["content"] = "VANDALISED"  # shared with the other calls on this sample
            return EvaluateResult(score=score, reason="read it")
        """,
    )
    project.jsonl(
        "s.jsonl",
        [{"messages": msgs("keep me", "a short answer")}, {"messages": msgs("touch me", "another answer")}],
    )
    result = project.result("--reward-samples", "s.jsonl", "--reward-report", "rep")
    probes = {p.probe: p for p in result.probes}
    repeat = probes["repeat"]
    # line 1: only its own turn changed (nothing shared): scored, and the repeat pays more; line 2: the question
    # it shares with the other calls on that sample changed: that call fails, as a sample's would
    assert (repeat.verdict, repeat.checked, repeat.broken, repeat.errors) == ("FAIL", 2, 2, 1)
    first, second = sorted(repeat.examples, key=lambda e: e.line)
    assert first.mutated == "a short answer\n\na short answer\n\na short answer" and first.score == 1.0
    assert "vandal changed its input 'messages' in place" in second.problem
    assert (first.original, second.original) == ("a short answer", "another answer")
    assert probes["case"].errors == 1
    summary = json.loads((project.path / "rep" / "summary.json").read_text())
    assert "VANDALISED" not in json.dumps(summary["probes"])
    # every call saw the real question: the copy a call changed was made again for the next one
    seen = (project.path / "seen.txt").read_text().splitlines()
    assert sorted(set(seen)) == ["keep me", "touch me"] and len(seen) == 2 + 2 + 2


def test_a_change_to_any_turn_a_call_shares_fails_that_call(project):
    """What a call shares with the other calls on its sample: the turns before the last (here the second of three),
    and what the last turn holds besides its content when that is a list or a dict."""
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        @pytest.mark.reward(probes=["repeat", "case"])
        @reward_function
        def meddler(messages, **kwargs):
            last = messages[-1]
            if "meta" in last:
                last["meta"]["seen"] = last["meta"].get("seen", 0) + 1
            elif messages[1]["content"].startswith("touch"):
                messages[1]["content"] += "!"
            return EvaluateResult(score=1.0 if "seen" not in last.get("meta", {}) else 0.5, reason="ok")
        """,
    )
    three = [{"role": "system", "content": "sys"}, *msgs("touch me", "an answer")]
    meta = [*msgs("q", "x"), {"role": "assistant", "content": "meta answer", "meta": {"k": 1}}]
    meta = [meta[0], meta[2]]
    project.jsonl("s.jsonl", [{"messages": msgs("keep me", "fine")}, {"messages": three}, {"messages": meta}])
    result = project.result("--reward-samples", "s.jsonl")
    for probe in result.probes:
        assert (probe.checked, probe.errors) == (3, 2), probe.probe
        assert sorted(
            e.line for e in probe.examples if "meddler changed its input 'messages'" in e.problem
        ) == [2, 3]
    own = {o.line: o.error for g in result.groups for o in g.outcomes}
    assert (
        "changed its input 'messages'" in own[2]
        and "changed its input 'messages'" in own[3]
        and own[1] is None
    )


def test_counter_examples_past_those_kept_are_counted(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function, EvaluateResult

        @pytest.mark.reward(probes=["repeat", "empty"])
        @reward_function
        def longer(messages, **kwargs):
            text = messages[-1]["content"]
            return EvaluateResult(score=min(len(text), 200) / 1000, reason=f"{len(text)}")
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs(f"q{i}", f"answer number {i}")} for i in range(30)])
    result = project.run("--reward-samples", "s.jsonl", "-k", "repeat")
    result.assert_outcomes(failed=1, deselected=31)
    result.stdout.fnmatch_lines(
        [
            '*probe repeat: 30 of 30 mutated responses break "<= original"*',
            "  … and 25 more (report.html and summary.json list 20)",
        ]
    )
    repeat = next(p for p in project.result("--reward-samples", "s.jsonl").probes if p.probe == "repeat")
    assert (repeat.broken, len(repeat.examples)) == (30, 20)


# --- the samples' own scores ----------------------------------------------------------------------------------

COUNTED = """
    import itertools
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    CALLS = itertools.count(1)

    @pytest.mark.reward(probes=["repeat", "empty"])
    @reward_function
    def counted(messages, **kwargs):
        n = next(CALLS)
        with open("calls.txt", "a") as fh:
            fh.write(messages[-1]["content"][:10].replace("\\n", " ") + "\\n")
        return EvaluateResult(score=n / 1000, reason=f"call {{n}}")
"""


def test_probes_compare_with_the_scores_the_sample_items_gave(project):
    project.file("rewards.py", COUNTED)
    project.jsonl("s.jsonl", [{"messages": msgs(f"q{i}", f"answer {i}")} for i in range(4)])
    result = project.result("--reward-samples", "s.jsonl", "--reward-report", "rep")
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert len(calls) == 4 + 4 + 4  # the samples once each, then each probe's mutations: none scored twice
    own = {
        row["line"]: row["score"]
        for row in map(json.loads, (project.path / "rep" / "results.jsonl").read_text().splitlines())
    }
    repeat = next(p for p in result.probes if p.probe == "repeat")
    # every call scores higher than the last, so each repeat breaks "<= original": the examples show the originals
    assert repeat.broken == 4
    assert {e.line: e.original_score for e in repeat.examples} == own
    assert repeat.mean_original == pytest.approx(sum(own.values()) / 4)


def test_probes_alone_score_the_samples_own_responses_themselves(project):
    project.file("rewards.py", COUNTED)
    project.jsonl("s.jsonl", [{"messages": msgs(f"q{i}", f"answer {i}")} for i in range(4)])
    result = project.result("--reward-samples", "s.jsonl", "-k", "probe")
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert calls[:4] == [f"answer {i}" for i in range(4)]  # scored once, for the rules, before the mutations
    assert len(calls) == 4 + 4 + 4
    assert {p.probe: p.checked for p in result.probes} == {"repeat": 4, "empty": 4}


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_probes_compare_with_the_scores_the_items_gave_in_either_granularity(project, granularity):
    """The samples' own responses are scored once, by their items (a sample item each, or the file item that
    streams the file): the probes read those scores, and each probe scores only its mutations."""
    project.file("rewards.py", COUNTED)
    rows = [{"messages": msgs(f"q{i}", f"answer {i}")} for i in range(4)]
    # and one the probes do not mutate (its item scores it): a tool-call turn
    tool_call = {"role": "assistant", "content": "calling", "tool_calls": [{"id": "t"}]}
    rows.append({"messages": [*msgs("q4"), tool_call]})
    project.jsonl("s.jsonl", rows)
    result = project.result(
        "--reward-samples", "s.jsonl", "--reward-granularity", granularity, "--reward-report", "rep"
    )
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert len(calls) == 5 + 4 + 4  # the samples once each (by their items), then each probe's mutations
    own = {
        row["line"]: row["score"]
        for row in map(json.loads, (project.path / "rep" / "results.jsonl").read_text().splitlines())
        if row["line"] <= 4
    }
    assert len(own) == 4
    repeat = next(p for p in result.probes if p.probe == "repeat")
    assert repeat.broken == 4
    assert {e.line: e.original_score for e in repeat.examples} == own
    assert repeat.mean_original == pytest.approx(sum(own.values()) / 4)


COUNTED_BOTH = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    def _score(text):
        with open("calls.txt", "a") as fh:
            fh.write(text[:10].replace("\\n", " ") + "\\n")
        return len(text) % 7 / 10

    @pytest.mark.reward(probes=["repeat", "empty"])
    @reward_function
    def pointwise(messages, **kwargs):
        return EvaluateResult(score=_score(messages[-1]["content"]), reason="counted")

    @pytest.mark.reward(probes=["repeat", "empty"])
    @reward_function(mode="batch")
    def batched(rollouts_messages, **kwargs):
        return [EvaluateResult(score=_score(m[-1]["content"]), reason="counted") for m in rollouts_messages]
"""


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--reward-workers", "2"),
        ("--reward-executor", "process", "--reward-workers", "1"),
        ("--reward-timeout", "60"),
        ("--reward-runs", "2"),
    ],
    ids=["thread", "workers", "process", "timeout", "runs"],
)
def test_file_probes_reuse_the_file_items_scores_on_every_path(project, options):
    """Whichever executor scores the file, and with --reward-runs, the probes read what the file item gave (the
    same verdicts as in sample granularity, where they read the sample items'): each sample's own response is
    scored once per run, by its item."""
    project.file("rewards.py", COUNTED_BOTH)
    project.jsonl("s.jsonl", [{"messages": msgs(f"q{i}", "word " * i)} for i in range(1, 6)])
    runs = 2 if "--reward-runs" in options else 1
    per_sample = project.result("--reward-samples", "s.jsonl", *options)
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert len(calls) == 2 * runs * (5 + 5 + 5)  # two functions: 5 own responses, 5 + 5 mutations
    (project.path / "calls.txt").unlink()
    per_file = project.result("--reward-samples", "s.jsonl", "--reward-granularity", "file", *options)
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert len(calls) == 2 * runs * (5 + 5 + 5)
    assert _probes(per_file) == _probes(per_sample)
    assert len(per_file.probes) == 4 and all(p.checked == 5 and p.broken for p in per_file.probes)


def test_file_probes_score_what_the_file_item_did_not(project):
    """Where the file item gave no score to reuse, the probes score the samples' own responses themselves: a
    duplicate id (an error of the file item, no call), the file item deselected, the file item run after them."""
    project.file("rewards.py", COUNTED)
    rows = [{"id": f"s{i}", "messages": msgs(f"q{i}", f"answer {i}")} for i in range(4)]
    rows.append({"id": "s1", "messages": msgs("q1 again", "answer again")})
    project.jsonl("s.jsonl", rows)
    file = ("--reward-samples", "s.jsonl", "--reward-granularity", "file")
    result = project.result(*file)
    calls = (project.path / "calls.txt").read_text().splitlines()
    # the file item: 4 calls (line 5 is a duplicate id); the probes: line 5's own response, then 5 + 5 mutations
    assert calls[:4] == [f"answer {i}" for i in range(4)] and calls[4] == "answer aga"
    assert len(calls) == 4 + 1 + 5 + 5
    by_probe = {p.probe: p for p in result.probes}
    assert by_probe["repeat"].checked == 5 and by_probe["repeat"].broken == 5
    assert {e.line: e.original_score for e in by_probe["repeat"].examples} == {
        1: 0.001,
        2: 0.002,
        3: 0.003,
        4: 0.004,
        5: 0.005,
    }

    (project.path / "calls.txt").unlink()
    result = project.result(*file, "-k", "probe")  # the file item deselected
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert calls[:5] == [f"answer {i}" for i in range(4)] + ["answer aga"]
    assert len(calls) == 5 + 5 + 5
    assert {p.probe: p.checked for p in result.probes} == {"repeat": 5, "empty": 5}

    (project.path / "calls.txt").unlink()
    project.file(
        "conftest.py",
        """
        def pytest_collection_modifyitems(items):
            items.reverse()  # the probe items first, the file item last
        """,
    )
    result = project.result(*file)
    calls = (project.path / "calls.txt").read_text().splitlines()
    # the probes score the own responses (5), then their mutations; the file item scores its 4 after them
    assert calls[:5] == [f"answer {i}" for i in range(4)] + ["answer aga"]
    assert len(calls) == 5 + 5 + 5 + 4
    assert {p.probe: p.checked for p in result.probes} == {"repeat": 5, "empty": 5}


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_xdist_workers_score_what_their_items_did_not(project, granularity):
    project.file("rewards.py", COUNTED.replace("n / 1000", "0.5"))
    project.jsonl("s.jsonl", [{"messages": msgs(f"q{i}", f"answer {i}")} for i in range(4)])
    result = project.run_subprocess(
        "--reward-samples", "s.jsonl", "-n", "2", "--reward-granularity", granularity
    )
    result.assert_outcomes(passed=6 if granularity == "sample" else 3)
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert 4 + 8 <= len(calls) <= 4 + 8 + 4 * 2  # at most once more per sample and worker
