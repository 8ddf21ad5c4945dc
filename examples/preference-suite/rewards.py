"""A learned reward model and a rule next to it, tested on the same preference pairs and the same answers.

``sum_rm`` is the shipped ``tiny-sum-rm`` (a byte-level GPT-2 reward model trained to prefer correct sums);
``exact_sum`` is the rule that knows the answer. Both meet ``pairs.jsonl`` (one correct and one near-miss answer per
problem) with the same accuracy gates; ``sum_rm_answers`` (the same model, loaded once) scores ``answers.jsonl`` (correct
answers alone) as an ordinary per-sample reward, gated on the model's own scale.
"""

import pytest

from pytest_reward import EvaluateResult, reward_function, reward_model

#: The gates both functions must pass on the pairs: overall, and per subset of problems.
PAIRS = pytest.mark.reward(
    samples="pairs.jsonl",
    pair_accuracy=0.8,
    subset_accuracy={"no-carry": 0.8, "carry": 0.75, "three-digit": 0.8},
)

sum_rm = PAIRS(reward_model("tiny-sum-rm", name="sum_rm"))

#: On correct answers alone, the model's calibrated zero is "correct": most must score above it.
sum_rm_answers = pytest.mark.reward(samples="answers.jsonl", threshold=0.0, pass_rate=0.75, mean=1.0)(
    reward_model("tiny-sum-rm", name="sum_rm_answers", batch_size=64)
)


@PAIRS
@reward_function
def exact_sum(messages, **kwargs):
    """1 when the answer is the sum of the two numbers the user asked about, else 0."""
    question, answer = messages[-2]["content"], messages[-1]["content"].strip()
    a, b = question.rstrip("=").split("+")
    right = answer == str(int(a) + int(b))
    return EvaluateResult(score=float(right), reason=f"{a}+{b}={int(a) + int(b)}, answered {answer}")
