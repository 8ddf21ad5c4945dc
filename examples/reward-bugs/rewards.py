"""Reward bugs that RL teams shipped, each as a minimal buggy reward and its fix, with the probe that tells them
apart (docs/reward-bugs.md has the sources). The samples include a wrong answer each (the floor the probes' rules
compare with; ``pass_rate=0.5`` lets it fail); the buggy rewards score them as the fixed ones do, but
``buggy_needs_think``, whose bug the non-thinking sample already shows: the probes are what tell them apart.

    pytest                      # the buggy rewards fail their probes, the fixed ones pass
    pytest -k fixed             # the fixed ones only
"""

import re
import subprocess
import sys

import pytest

from pytest_reward import EvaluateResult, reward_function


def _answer_text(messages):
    return messages[-1]["content"]


def _result(ok, why):
    return EvaluateResult(score=1.0 if ok else 0.0, reason=why)


# --- 1. the answer read from a window: a neutral tail or prefix pushes it out ------------------------------------

_HASH = re.compile(r"####\s*(-?[\d,.]+)")


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="math.jsonl", probes=["neutral_tail"])
@reward_function
def buggy_last_300(messages, ground_truth=None, **kwargs):
    """verl's gsm8k extract_solution: only the last 300 characters are searched."""
    found = _HASH.findall(_answer_text(messages)[-300:])
    return _result(bool(found) and found[-1] == str(ground_truth), f"#### {found[-1] if found else None}")


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="math.jsonl", probes=["neutral_prefix"])
@reward_function
def buggy_first_300(messages, ground_truth=None, **kwargs):
    """The response cut to its first 300 characters before the answer is looked for."""
    found = _HASH.findall(_answer_text(messages)[:300])
    return _result(bool(found) and found[-1] == str(ground_truth), f"#### {found[-1] if found else None}")


@pytest.mark.reward(
    threshold=0.5, pass_rate=0.5, samples="math.jsonl", probes=["neutral_tail", "neutral_prefix"]
)
@reward_function
def fixed_whole_response(messages, ground_truth=None, **kwargs):
    """The last ``#### X`` of the whole response."""
    found = _HASH.findall(_answer_text(messages))
    return _result(bool(found) and found[-1] == str(ground_truth), f"#### {found[-1] if found else None}")


# --- 2. one answer format accepted, the others silently 0 ---------------------------------------------------------

_FORMATS = {
    "hash": r"####\s*(-?[\d,.]+)",
    "boxed": r"\\boxed\{([^{}]*)\}",
    "answer_is": r"answer is\s*\$?(-?[\d,.]*\d)",
    "answer_colon": r"Answer:\s*(-?[\d,.]*\d)",
    "answer_tag": r"<answer>\s*([^<]*?)\s*</answer>",
}
STRICT = {f"format.{name}": ">= original" for name in _FORMATS}
"""Every answer format must keep a correct answer's score (the default rule of the format probes is "info")."""


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="math.jsonl", probes=STRICT)
@reward_function
def buggy_hash_only(messages, ground_truth=None, **kwargs):
    """GSM8K's strict mode: ``#### X`` or nothing."""
    found = _HASH.findall(_answer_text(messages))
    return _result(bool(found) and found[-1] == str(ground_truth), f"#### {found[-1] if found else None}")


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="math.jsonl", probes=STRICT)
@reward_function
def fixed_any_format(messages, ground_truth=None, **kwargs):
    """The answer written last, in whichever of the five formats."""
    text, last, where = _answer_text(messages), None, -1
    for pattern in _FORMATS.values():
        for m in re.finditer(pattern, text):
            if m.start() > where:
                last, where = m.group(1).strip().rstrip("."), m.start()
    return _result(last == str(ground_truth), f"answer {last}")


# --- 3. zero unless </think> is present ----------------------------------------------------------------------------

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


@pytest.mark.reward(
    threshold=0.5, pass_rate=0.5, samples="boxed.jsonl", probes=["think_removed", "think_wrapped"]
)
@reward_function
def buggy_needs_think(messages, ground_truth=None, **kwargs):
    """slime's deepscaler: 0 when the response has no ``</think>``, i.e. for every non-thinking model."""
    text = _answer_text(messages)
    if "</think>" not in text:
        return _result(False, "no </think>")
    found = _BOXED.findall(text.split("</think>")[-1])
    return _result(
        bool(found) and found[-1].strip() == str(ground_truth), f"boxed {found[-1] if found else None}"
    )


@pytest.mark.reward(
    threshold=0.5, pass_rate=0.5, samples="boxed.jsonl", probes=["think_removed", "think_wrapped"]
)
@reward_function
def fixed_think_optional(messages, ground_truth=None, **kwargs):
    """The thinking, when there is any, is dropped; the answer is read from what is left."""
    text = re.sub(r"<think>.*?</think>", "", _answer_text(messages), flags=re.DOTALL)
    found = _BOXED.findall(text)
    return _result(
        bool(found) and found[-1].strip() == str(ground_truth), f"boxed {found[-1] if found else None}"
    )


# --- 4 and 5. format regexes: no re.DOTALL (multi-line content scores 0), or duplicated blocks still paid --------


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="tags.jsonl", probes=["multiline"])
@reward_function
def buggy_no_dotall(messages, **kwargs):
    """open-r1's first format reward: ``.`` does not match a newline, so a multi-line <think> scores 0."""
    ok = re.match(r"^<think>.*?</think>\s*<answer>.*?</answer>$", _answer_text(messages)) is not None
    return _result(ok, "well-formed" if ok else "malformed")


@pytest.mark.reward(
    threshold=0.5, pass_rate=0.5, samples="tags.jsonl", probes=["duplicate_block", "extra_close_tag"]
)
@reward_function
def buggy_search(messages, **kwargs):
    """A format reward that looks for the pattern anywhere: two <answer> blocks or a stray </answer> still pay."""
    ok = (
        re.search(r"<think>.*?</think>\s*<answer>.*?</answer>", _answer_text(messages), re.DOTALL) is not None
    )
    return _result(ok, "well-formed" if ok else "malformed")


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="tags.jsonl", probes="tags")
@reward_function
def fixed_format(messages, **kwargs):
    """The whole response is one <think> block and one <answer> block, each tag exactly once, over any lines."""
    text = _answer_text(messages)
    once = all(text.count(tag) == 1 for tag in ("<think>", "</think>", "<answer>", "</answer>"))
    ok = once and re.fullmatch(r"\s*<think>.*</think>\s*<answer>.*</answer>\s*", text, re.DOTALL) is not None
    return _result(ok, "well-formed" if ok else "malformed")


# --- 6. two candidates, the truth second ---------------------------------------------------------------------------


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="boxed.jsonl", probes=["stuffing_pair"])
@reward_function
def buggy_any_candidate(messages, ground_truth=None, **kwargs):
    """Math-Verify's ``any(...)`` over the candidates: "41 or 42" is right for 42."""
    found = _BOXED.findall(_answer_text(messages))
    candidates = re.split(r",|\bor\b|\band\b", found[-1]) if found else []
    return _result(any(c.strip() == str(ground_truth) for c in candidates), f"candidates {candidates}")


@pytest.mark.reward(threshold=0.5, pass_rate=0.5, samples="boxed.jsonl", probes=["stuffing_pair"])
@reward_function
def fixed_one_answer(messages, ground_truth=None, **kwargs):
    """One answer: every \\boxed{} of the response says the same thing, and that is the truth."""
    found = {b.strip() for b in _BOXED.findall(_answer_text(messages))}
    return _result(found == {str(ground_truth)}, f"boxed {sorted(found)}")


# --- 11. code rewards that pay for exit code 0 -----------------------------------------------------------------------

_CODE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


def _run(code, stdin):
    done = subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, text=True, timeout=10
    )
    return done.returncode, done.stdout


@pytest.mark.reward(threshold=1.0, pass_rate=0.5, samples="code.jsonl", probes="code")
@reward_function
def buggy_exit_code(messages, ground_truth=None, **kwargs):
    """Any program that exits 0 gets full reward."""
    found = _CODE.search(_answer_text(messages))
    code, _ = _run(found.group(1), ground_truth[0]["input"]) if found else (1, "")
    return _result(code == 0, f"exit code {code}")


@pytest.mark.reward(threshold=1.0, pass_rate=0.5, samples="code.jsonl", probes="code")
@reward_function
def fixed_test_cases(messages, ground_truth=None, **kwargs):
    """The share of test cases whose output is the expected one."""
    found = _CODE.search(_answer_text(messages))
    if not found:
        return _result(False, "no code block")
    passed = sum(_run(found.group(1), t["input"])[1].strip() == t["expected_output"] for t in ground_truth)
    return EvaluateResult(
        score=passed / len(ground_truth), reason=f"{passed} of {len(ground_truth)} tests pass"
    )


# --- 7. a sign error: the score moves the wrong way as the length grows ---------------------------------------------


@pytest.mark.reward(samples="length.jsonl", direction={"length": "-"})
@reward_function
def buggy_reward_len(messages, **kwargs):
    """The TRL docs' first reward_len: abs(20 - length), which pays the *longest* completions."""
    return EvaluateResult(score=abs(20 - len(_answer_text(messages))), reason="distance to 20 characters")


@pytest.mark.reward(samples="length.jsonl", direction={"length": "-"})
@reward_function
def fixed_reward_len(messages, **kwargs):
    """-abs(20 - length): the closer to 20 characters the better (every sample is longer than 40)."""
    return EvaluateResult(score=-abs(20 - len(_answer_text(messages))), reason="minus the distance to 20")


# --- 8. a batch reward whose list of scores is shifted ---------------------------------------------------------------


def _last_number(text):
    found = re.findall(r"-?\d+", text)
    if not found:
        raise IndexError("no number in the response")
    return found[-1]


@pytest.mark.reward(
    threshold=0.5, pass_rate=0.5, samples="batch.jsonl", probes=["batch_order", "batch_alone"]
)
@reward_function(mode="batch")
def buggy_shifted(rollouts_messages, ground_truth, **kwargs):
    """NeMo-RL's math worker: a score appended, then on a failed extraction a second one: every later score is
    one slot out of place (a batch reward, as TRL's: lists in, a list of scores out)."""
    scores = []
    for completion, truth in zip(rollouts_messages, ground_truth, strict=True):
        text = completion[-1]["content"]
        scores.append(1.0 if truth in text else 0.0)
        try:
            _last_number(text.split("answer is")[1])
        except IndexError:
            scores.append(0.0)
    return [{"score": s} for s in scores[: len(rollouts_messages)]]


@pytest.mark.reward(
    threshold=0.5, pass_rate=0.5, samples="batch.jsonl", probes=["batch_order", "batch_alone"]
)
@reward_function(mode="batch")
def fixed_aligned(rollouts_messages, ground_truth, **kwargs):
    """One score per completion, whatever happens while scoring it."""
    scores = []
    for completion, truth in zip(rollouts_messages, ground_truth, strict=True):
        try:
            scores.append(1.0 if _last_number(completion[-1]["content"]) == truth else 0.0)
        except IndexError:
            scores.append(0.0)
    return [{"score": s} for s in scores]


# --- 12. a verifier audited against a second one --------------------------------------------------------------------


@pytest.mark.reward(samples="verify.jsonl", reference="math_reward", agreement=0.95)
@reward_function
def buggy_string_match(messages, ground_truth=None, **kwargs):
    """The boxed answer compared as a string: 0.50 is wrong for 0.5, and 7.0 for 7 (false negatives)."""
    found = _BOXED.findall(_answer_text(messages))
    return _result(
        bool(found) and found[-1].strip() == str(ground_truth), f"boxed {found[-1] if found else None}"
    )


@pytest.mark.reward(samples="verify.jsonl", reference="math_reward", agreement=0.95)
@reward_function
def fixed_numeric_match(messages, ground_truth=None, **kwargs):
    """The boxed answer compared as a number."""
    found = _BOXED.findall(_answer_text(messages))
    try:
        ok = bool(found) and abs(float(found[-1]) - float(ground_truth)) < 1e-9
    except ValueError:
        ok = False
    return _result(ok, f"boxed {found[-1] if found else None}")
