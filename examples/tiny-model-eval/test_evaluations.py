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
    EncodingEvaluation,
    PerplexityComparisonEvaluation,
    PerplexityEvaluation,
    RolloutEvaluation,
)

#: 200 addition problems the model never saw in training (the first rows of the model's own held-out set).
HELDOUT = [json.loads(line) for line in (Path(__file__).parent / "data" / "heldout.jsonl").open()]


@pytest.mark.reward(mean=0.85, confidence=0.95)
class HeldoutAccuracy(RolloutEvaluation):
    """Greedy decoding on held-out sums: the lower bound of the 95 % bootstrap interval of the accuracy must
    be at least 0.85 (the model scores 0.930 on these 200 and 0.943 on all 1000 held-out problems)."""

    name = "heldout_accuracy"

    def __len__(self):
        return len(HELDOUT)

    def get(self, indx):
        return HELDOUT[indx]["prompt"], HELDOUT[indx]["answer"]

    def max_new_tokens(self, inference):
        return 6  # "1998" and the end-of-text token, with room to spare

    def check(self, y, y_hat):
        return y == y_hat


@pytest.mark.reward(mean=0.85, confidence=0.95)
class TeacherForcedAnswers(EncodingEvaluation):
    """The same sums read whole, ``"95+79=174<|endoftext|>"`` (teacher forcing): the model's argmax at each answer
    position, given the true text before it, must spell the answer and then end it. The text is read after the
    same start token as the rollouts' prompts, so this agrees with ``HeldoutAccuracy`` within a few points (a
    greedy rollout that gets its first digit right conditions on exactly the same context)."""

    name = "teacher_forced_answers"

    def __len__(self):
        return len(HELDOUT)

    def get(self, indx):
        return HELDOUT[indx]["prompt"] + HELDOUT[indx]["answer"] + "<|endoftext|>"

    def clean(self, y_hat):
        return y_hat  # one guess per token of the text: keep them all, spaces included

    def check(self, x, y_hat):
        answer = x.split("=")[1]  # "174<|endoftext|>"
        return y_hat.endswith(answer)


@pytest.mark.reward(max_mean=8.0)
class ProblemPerplexity(PerplexityEvaluation):
    """Perplexity (lower is better) of whole problems as text, ``"95+79=174"``: per token, every character scored
    (each given the start token and the characters before it); one value per problem, averaged over 64 problems.

    The operands are random, so no model can go below the data's own entropy: 3.67 on these problems (see the
    README); a uniform guess over the 257 tokens would be 257. The model scores about 5.8: the few problems whose
    answer it gets wrong pull the average up. The gate catches a checkpoint that got worse, or scoring that no
    longer reads texts the way the model was trained.
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
