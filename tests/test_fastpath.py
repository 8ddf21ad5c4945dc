"""One call, one verdict: the fast path of the calling convention (``Reward.fast``) gives what the slow path gives
(``Reward.call`` on ``Reward.kwargs``, the input check), the compiled verdict rules give what ``judge`` gives, and the
ledgers that hand the functions' own scores to their probes keep their contract."""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_reward import EvaluateResult, reward_function
from pytest_reward.data.samples import Sample
from pytest_reward.errors import RewardReturnError
from pytest_reward.judge.gates import Gates, MetricGates
from pytest_reward.judge.results import PASS, judge
from pytest_reward.judge.verdict import checked_rule, verdict_rule
from pytest_reward.probes.ledger import FileScores, SampleScores
from pytest_reward.reward.call import MISSING, Reward, call_within, changed_error, owned_messages
from pytest_reward.trainers.styles import native_reward

from .conftest import msgs

ACTIONS = [
    "result",
    "metrics",
    "dict",
    "junk",
    "none",
    "raise",
    "return-error",
    "nan",
    "invalid",
    "error",
    "mutate-messages",
    "mutate-truth",
    "mutate-field",
]


def _behave(messages, ground_truth, kwargs):
    """What the response asks for: a kind of return, an exception, or a change of an input in place."""
    action, _, value = messages[-1]["content"].partition(":")
    score = float(value or 0.5)
    if action == "raise":
        raise ValueError("broken on purpose")
    if action == "return-error":
        raise RewardReturnError("not a result", value=[1, 2])
    if action == "dict":
        return {"score": score, "reason": "a dict"}
    if action == "junk":
        return ("junk",)
    if action == "none":
        return None
    if action == "nan":
        return EvaluateResult(score=math.nan)
    if action == "invalid":
        return EvaluateResult(score=score, is_score_valid=False, reason="cannot tell")
    if action == "error":
        return EvaluateResult(score=score, error="it broke")
    if action == "mutate-messages":
        messages[0]["content"] += "!"
    if action == "mutate-truth" and isinstance(ground_truth, list | dict):
        ground_truth.clear()
    if action == "mutate-field" and isinstance(kwargs.get("tags"), list):
        kwargs["tags"].append("x")
    metrics = {"m": {"score": score, "reason": "m"}} if action == "metrics" else {}
    return EvaluateResult(score=score, reason=f"gt={ground_truth!r} n={len(messages)}", metrics=metrics)


@reward_function
def sync_reward(messages, ground_truth=None, **kwargs):
    return _behave(messages, ground_truth, kwargs)


@reward_function
async def async_reward(messages, ground_truth=None, **kwargs):
    return _behave(messages, ground_truth, kwargs)


@reward_function
def wants_original(messages, ground_truth=None, original_messages=None, **kwargs):
    result = _behave(messages, ground_truth, kwargs)
    if isinstance(result, EvaluateResult) and not math.isnan(result.score):
        return EvaluateResult(score=result.score, reason=f"{result.reason} o={len(original_messages)}")
    return result


@reward_function(mode="batch")
def batch_reward(rollouts_messages, ground_truth=None, **kwargs):
    truths = ground_truth or [None] * len(rollouts_messages)
    return [_behave(m, t, {}) for m, t in zip(rollouts_messages, truths, strict=True)]


FUNCTIONS = {"sync": sync_reward, "async": async_reward, "original": wants_original, "batch": batch_reward}


def _slow(reward: Reward, messages, truth, fields, owned):
    """The slow path: ``call`` on ``kwargs`` (or ``kwargs_owned``), then ``changed_inputs``."""
    try:
        if owned:
            kwargs = reward.kwargs_owned(messages, truth, fields)
            result = reward.call(kwargs)
            changed = reward.changed_inputs(kwargs, messages, truth, fields)
        else:
            kwargs = reward.kwargs(messages, truth, fields)
            result = reward.call(kwargs)
            changed = reward.changed_inputs(kwargs, messages, truth, fields)
        if changed:
            raise changed_error(reward.name, changed)
    except Exception as exc:
        return "raised", type(exc).__name__, str(exc)
    return "result", result.model_dump()


def _copied(value):
    return value if value is MISSING else copy.deepcopy(value)


def _fast(call, messages, truth, fields, owned):
    try:
        result = call(messages, truth, fields, owned)
    except Exception as exc:
        return "raised", type(exc).__name__, str(exc)
    return "result", result.model_dump()


truths = st.sampled_from([MISSING, None, "42", 7, ["a", "b"], {"k": [1]}])
fields_ = st.sampled_from([{}, {"tags": ["t"]}, {"n": 3}, {"tags": ["t"], "meta": {"a": 1}}])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(FUNCTIONS)),
    action=st.sampled_from(ACTIONS),
    score=st.sampled_from(["", "0", "0.25", "1", "inf"]),
    truth=truths,
    fields=fields_,
    owned=st.booleans(),
)
def test_the_fast_path_gives_what_the_slow_path_gives(name, action, score, truth, fields, owned):
    """Every kind of return, exception and in-place change, sync, async, ``original_messages`` and batch mode,
    owned messages or a sample's: the same result or the same error, and the caller's inputs untouched."""
    reward = Reward(FUNCTIONS[name])
    text = f"{action}:{score}" if score else action
    messages = [{"role": "system", "content": "s"}, *msgs("q?", text)]
    inputs = (messages, truth, fields)
    snapshot = (copy.deepcopy(messages), _copied(truth), copy.deepcopy(fields))

    def given_messages():
        return owned_messages(messages, text) if owned else messages

    slow = _slow(reward, given_messages(), _copied(truth), copy.deepcopy(fields), owned)
    fast = _fast(reward.fast(), given_messages(), truth, fields, owned)
    assert fast == slow
    assert inputs == snapshot  # the fast path copied what it was handed of the caller's


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(FUNCTIONS)),
    action=st.sampled_from(ACTIONS),
    truth=truths,
    fields=fields_,
    owned=st.booleans(),
)
def test_then_and_failed_apply_to_what_the_call_gives(name, action, truth, fields, owned):
    """``then`` maps a result, ``failed`` an exception: what the raising closure gives, through them."""
    reward = Reward(FUNCTIONS[name])
    messages = [{"role": "system", "content": "s"}, *msgs("q?", action)]

    def given_messages():
        return owned_messages(messages, action) if owned else messages

    plain = _fast(reward.fast(), given_messages(), _copied(truth), copy.deepcopy(fields), owned)
    mapped = reward.fast(
        then=lambda r: ("result", r.model_dump()), failed=lambda e: ("raised", type(e).__name__, str(e))
    )
    assert mapped(given_messages(), truth, fields, owned) == plain


def test_a_users_wrapper_around_a_reward_function_is_what_the_fast_path_calls():
    """The fast path calls our decorator's function itself (one frame less), never through a copy of that shortcut
    that ``functools.wraps`` leaves on a user's own wrapper: the user's wrapper runs on every call."""
    calls = []

    @reward_function
    def inner(messages, **kwargs):
        return {"score": 0.5}

    @functools.wraps(inner)
    def logged(*args, **kwargs):
        calls.append(kwargs["messages"][-1]["content"])
        return EvaluateResult(score=0.25)

    assert Reward(inner).fast()(msgs("q?", "a"), MISSING).score == 0.5  # a dict coerced, as the wrapper does
    assert Reward(logged).fast()(msgs("q?", "b"), MISSING).score == 0.25
    assert Reward(logged).fast()(msgs("q?", "c"), MISSING, None, False).score == 0.25
    assert calls == ["b", "c"]


def test_the_usual_call_is_made_with_keywords_alone():
    """No ground truth (MISSING or None) is not passed; a scalar one is; the call gets the messages it is handed."""
    seen = []

    @reward_function
    def spy(messages, ground_truth="default", **kwargs):
        seen.append((messages, ground_truth))
        return EvaluateResult(score=1.0)

    fast = Reward(spy).fast()
    mine = msgs("q?", "a")
    fast(mine, MISSING)
    fast(mine, None)
    fast(mine, "t")
    assert [t for _, t in seen] == ["default", "default", "t"]
    assert all(m is mine for m, _ in seen)  # owned: passed as they are


def test_a_timeout_applies_to_the_fast_path_as_to_call():
    @reward_function
    def slow(messages, ground_truth=None, **kwargs):
        import time

        time.sleep(5)
        return EvaluateResult(score=1.0)

    from pytest_reward.errors import RewardTimeout

    with pytest.raises(RewardTimeout):
        call_within(0.05, Reward(slow).fast(), msgs("q?", "a"), MISSING, {}, False)


# --- trainer-native functions: a finite number without its EvaluateResult ------------------------------------------


def _verl_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "nan":
        return math.nan
    if solution_str == "dict":
        return {"score": 0.5, "acc": 1.0}
    if solution_str == "junk":
        return "junk"
    if solution_str == "mutate" and isinstance(ground_truth, list):
        ground_truth.append("x")
    return 1.0 if solution_str == ground_truth else 0.0


@pytest.mark.parametrize("text", ["4", "5", "nan", "dict", "junk", "mutate"])
@pytest.mark.parametrize("truth", [MISSING, "4", ["4"]])
@pytest.mark.parametrize(
    "fields", [{}, {"data_source": "gsm8k", "extra_info": {"i": 1}}, {"extra_info": {"l": [1]}}]
)
def test_numbers_from_a_trainer_native_function_judge_as_their_results(text, truth, fields):
    fn = native_reward(_verl_score, style="verl")
    reward = Reward(fn)
    assert getattr(reward.fn, "__reward_scalar__", None) is not None
    numbers, plain = reward.fast(numbers=True), reward.fast()
    messages = msgs("q?", text)
    rule = verdict_rule(Gates(threshold=0.5))
    got = _fast_value(numbers, messages, truth, fields)
    want = _fast_value(plain, messages, truth, fields)
    if got[0] == "raised" or want[0] == "raised":
        assert got == want
        return
    value, result = got[1], want[1]
    if value.__class__ is float:
        assert result.is_score_valid and not result.metrics and result.reason is None
        assert value == result.score
    assert rule(value) == judge(result, Gates(threshold=0.5), None)


def _fast_value(call, messages, truth, fields):
    try:
        return "value", call(messages, truth, fields, False)
    except Exception as exc:
        return "raised", type(exc).__name__, str(exc)


# --- the compiled verdict rules ---------------------------------------------------------------------------------------

scores = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from([0.0, 0.5, 0.7, 1.0])
)
metric_sets = st.dictionaries(
    st.sampled_from(["m", "n"]), st.floats(min_value=0, max_value=1), max_size=2
).map(lambda d: {k: {"score": v, "reason": k} for k, v in d.items()})
results = st.builds(
    lambda score, valid, error, metrics, reason: EvaluateResult.model_construct(
        score=score,
        is_score_valid=valid,
        error=error,
        reason=reason,
        metrics={
            k: __import__("pytest_reward").MetricResult(score=v["score"], reason=v["reason"])
            for k, v in metrics.items()
        },
    ),
    scores,
    st.booleans(),
    st.sampled_from([None, "", "boom"]),
    metric_sets,
    st.sampled_from([None, "why"]),
)
gates = st.builds(
    lambda threshold, pass_rate, metric: Gates(
        threshold=threshold,
        pass_rate=pass_rate if threshold is not None else None,
        metrics=(("m", MetricGates(threshold=metric)),) if metric is not None else (),
    ),
    st.sampled_from([None, 0.0, 0.5, 0.7, 1.0]),
    st.sampled_from([None, 0.8]),
    st.sampled_from([None, 0.6]),
)


@settings(max_examples=500, deadline=None)
@given(result=results, gates=gates)
def test_the_compiled_verdict_is_judges(result, gates):
    expected = judge(result, gates, None)
    assert _same(verdict_rule(gates)(result), expected)
    assert _same(checked_rule(gates)(result), (expected[1], expected[0] == PASS, result.reason, None))
    # with words: a result without a valid score says why, as its outcome's first failure (a pair's response)
    words = expected[3][0] if expected[1] is None and expected[3] else None
    assert _same(checked_rule(gates, words=True)(result), (expected[1], expected[0] == PASS, result.reason, words))


@settings(max_examples=200, deadline=None)
@given(number=st.floats(allow_nan=False, allow_infinity=False), gates=gates)
def test_a_number_is_judged_as_its_valid_result(number, gates):
    expected = judge(EvaluateResult(score=number), gates, None)
    assert _same(verdict_rule(gates)(number), expected)
    assert _same(checked_rule(gates)(number), (expected[1], expected[0] == PASS, None, None))


def _same(a, b):
    """Equal, NaN equal to NaN."""
    return repr(a) == repr(b)


# --- the ledgers of the functions' own scores -----------------------------------------------------------------------


def _sample(line: int, text: str | None = "a") -> Sample:
    messages = msgs("q?", text) if text is not None else [{"role": "user", "content": "q?"}]
    return Sample(Path("s.jsonl"), line, None, messages)


def test_sample_scores_are_taken_once_and_nothing_is_recorded_after():
    ledger = SampleScores()
    a, b = _sample(1), _sample(2)
    ledger.record(a, 0.5, True)
    ledger.record(b, None, False)
    taken = ledger.take()
    assert taken[id(a)] == (0.5, True)
    assert math.isnan(taken[id(b)][0]) and taken[id(b)][1] is False
    ledger.record(a, 1.0, True)
    assert ledger.take() == {}


def test_file_scores_follow_the_answered_samples_in_file_order():
    ledger = FileScores()
    assert ledger.start()
    samples = [_sample(1), _sample(2, None), _sample(3), _sample(4)]
    for s in samples:
        ledger.note(s, scored=s.line != 4)  # line 2 has no response: not counted; line 4: not scored here
    ledger.record(1, 0.25, False)
    ledger.record(3, 1.0, True)
    ledger.finish()
    scores, verdicts, known = ledger.take()
    assert list(scores[:2]) == [0.25, 1.0] and math.isnan(scores[2])
    assert list(verdicts) == [0, 1, 0] and list(known) == [1, 1, 0]
    assert not ledger.start()  # taken: a later run of the item records nothing


def test_an_unfinished_file_run_leaves_nothing_to_take():
    ledger = FileScores()
    ledger.start()
    ledger.note(_sample(1), scored=True)
    ledger.note(_sample(2), scored=True)
    ledger.record(1, 0.5, True)
    ledger.finish()  # line 2's outcome never came
    assert ledger.take() is None
