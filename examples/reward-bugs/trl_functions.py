"""9. A TRL reward that abstains on a whole group. TRL reward functions may return None for a completion ("cannot
score this one"); when every completion of a prompt gets None, the group's mean and std are NaN (or the group's
advantages silently 0). Not a ``rewards.py`` module: run these as TRL functions,

    pytest --reward-fn trl:trl_functions.py::buggy_abstains --reward-fn trl:trl_functions.py::fixed_scores_every_group
"""

import pytest


@pytest.mark.reward(samples="groups.jsonl", probes={"abstaining_groups": "not pass"})
def buggy_abstains(prompts, completions, ground_truth, **kwargs):
    """None for a question without a numeric answer: both responses to the proof question get None."""
    return [
        float(truth in completion[-1]["content"]) if truth else None
        for completion, truth in zip(completions, ground_truth, strict=True)
    ]


@pytest.mark.reward(samples="groups.jsonl", probes={"abstaining_groups": "not pass"})
def fixed_scores_every_group(prompts, completions, ground_truth, **kwargs):
    """A question it cannot grade scores 0 for every response: no signal for that group, and no NaN."""
    return [
        float(bool(truth) and truth in completion[-1]["content"])
        for completion, truth in zip(completions, ground_truth, strict=True)
    ]
