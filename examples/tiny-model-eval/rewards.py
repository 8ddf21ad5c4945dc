"""Reward functions for the prompt-only samples of ``prompts.jsonl``.

Each line of ``prompts.jsonl`` has a ``prompt`` and no response: the session's model (ini ``reward_model``)
writes ``n = 4`` responses per prompt, sampled at temperature 0.7 with a fixed seed, and every response is
scored by both functions below. The prompts are rolled out once and shared by the two functions.
"""

import pytest

from pytest_reward import EvaluateResult, MetricResult, reward_function

ROLLOUT = {"n": 4, "temperature": 0.7, "max_new_tokens": 6, "seed": 0}


@pytest.mark.reward(threshold=1.0, pass_rate=0.6, samples="prompts.jsonl", rollout=ROLLOUT)
@reward_function
def exact_sum(messages, ground_truth=None, **kwargs) -> EvaluateResult:
    """1.0 when the response is exactly the sum; a pass-rate gate tolerates some sampled misses."""
    answer = messages[-1]["content"].strip()
    right = answer == ground_truth
    return EvaluateResult(
        score=float(right),
        reason=f"{answer!r} {'==' if right else '!='} {ground_truth!r}",
        metrics={"exact": MetricResult(score=float(right), reason="exact match", is_score_valid=right)},
    )


@pytest.mark.reward(threshold=1.0, samples="prompts.jsonl", rollout=ROLLOUT)
@reward_function
def digits_only(messages, **kwargs) -> EvaluateResult:
    """Every response must be a number: 1 to 4 digits and nothing else."""
    answer = messages[-1]["content"].strip()
    ok = answer.isdigit() and 1 <= len(answer) <= 4
    return EvaluateResult(score=float(ok), reason="a 1-4 digit number" if ok else f"not a number: {answer!r}")
