"""The shipped tiny model, evaluated with the JAX evaluation API as pytest items.

Every ``Evaluation`` subclass defined here is a test item run on the session's ``inference_job`` (one model,
compiled once, shared by all of them), gated by its ``@pytest.mark.reward`` like a reward function:
each evaluation sample is a row of the reward table, and ``mean`` / ``max_mean`` / ``pass_rate`` apply to the
per-sample scores.
"""

import json
from pathlib import Path

import pytest

from pytest_reward.evaluation import (
    PerplexityComparisonEvaluation,
    PerplexityEvaluation,
    RolloutEvaluation,
)

#: 200 addition problems the model never saw in training (the first rows of the model's own held-out set).
HELDOUT = [json.loads(line) for line in (Path(__file__).parent / "data" / "heldout.jsonl").open()]


@pytest.mark.reward(mean=0.85, confidence=0.95)
class HeldoutAccuracy(RolloutEvaluation):
    """Greedy decoding on held-out sums: the lower bound of the 95 % bootstrap interval of the accuracy must
    be at least 0.85 (the model scores 0.937 on all 1000 held-out problems)."""

    name = "heldout_accuracy"

    def __len__(self):
        return len(HELDOUT)

    def get(self, indx):
        return HELDOUT[indx]["prompt"], HELDOUT[indx]["answer"]

    def max_new_tokens(self, inference):
        return 6  # "1998" and the end-of-text token, with room to spare

    def check(self, y, y_hat):
        return y == y_hat


@pytest.mark.reward(max_mean=250_000)
class ProblemPerplexity(PerplexityEvaluation):
    """Perplexity (lower is better) of whole problems as text, ``"95+79=174"``.

    The model was trained on the answers only, so the random operands are nearly unpredictable and the
    perplexity is high (about 1.6e5 on these problems); what this gate catches is a checkpoint that got worse.
    """

    name = "problem_perplexity"

    def __len__(self):
        return 64

    def get(self, indx):
        return HELDOUT[indx]["prompt"] + HELDOUT[indx]["answer"]


@pytest.mark.reward(mean=0.85)
class RightOverWrong(PerplexityComparisonEvaluation):
    """Multiple choice by likelihood: after ``"95+79="``, the right sum must be more likely than the sum off by
    one or by ten."""

    name = "right_over_wrong"

    def __len__(self):
        return len(HELDOUT)

    def get(self, indx):
        prompt, answer = HELDOUT[indx]["prompt"], HELDOUT[indx]["answer"]
        choices = [answer, str(int(answer) + 1), str(int(answer) + 10)]
        return prompt, choices, 0
