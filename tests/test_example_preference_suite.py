"""The shipped ``examples/preference-suite`` project: its per-sample part runs green as the README describes it."""

from __future__ import annotations

import shutil

import pytest

from .conftest import EXAMPLES

pytest.importorskip("jax")


def test_reward_model_on_correct_answers(pytester):
    shutil.copytree(EXAMPLES / "preference-suite", pytester.path, dirs_exist_ok=True)
    result = pytester.runpytest("-p", "no:cacheprovider", "--reward-fn", "rewards.py::sum_rm_answers")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=50)
    result.stdout.fnmatch_lines(
        [
            "PASS    sum_rm_answers on answers.jsonl: n=60 mean 2.059 (95% CI [1.184, 2.861])",
            "  min -11.481 p10 -0.559 pass rate 83.3%",
            "*50 passed, 10 below threshold*",
        ]
    )


def test_the_whole_project_pairs_and_answers(pytester):
    """The project as `make demo` runs it: the model and the rule on the same pairs, per subset, next to the
    model on correct answers alone (the figures the project's README explains)."""
    shutil.copytree(EXAMPLES / "preference-suite", pytester.path, dirs_exist_ok=True)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "exact_sum on pairs.jsonl: pair accuracy 1.000 [0.940, 1.000] (60 of 60 pairs)",
            "sum_rm on pairs.jsonl: pair accuracy 0.900 [0.799, 0.953] (54 of 60 pairs)",
            "  carry           20  0.850 [0.640, 0.948]",
            "  no-carry        20  0.900 [0.699, 0.972]",
            "  three-digit     20  0.950 [0.764, 0.991]",
            "*164 passed, 10 below threshold, 6 ranked wrong*",
        ]
    )


def test_a_stricter_gate_fails_the_model_not_the_rule(pytester):
    """The gates bite: at 0.95 the model's 0.900 fails its pair_accuracy gate and the rule's 1.000 passes."""
    shutil.copytree(EXAMPLES / "preference-suite", pytester.path, dirs_exist_ok=True)
    rewards = pytester.path / "rewards.py"
    rewards.write_text(rewards.read_text().replace("pair_accuracy=0.8,", "pair_accuracy=0.95,"))
    result = pytester.runpytest("-p", "no:cacheprovider", "pairs.jsonl")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["PASS    exact_sum on pairs.jsonl:*", "FAIL    sum_rm on pairs.jsonl:*", "FAIL sum_rm on pairs.jsonl: pair_accuracy 0.9 < 0.95"]
    )
