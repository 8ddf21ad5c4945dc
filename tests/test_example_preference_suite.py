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
