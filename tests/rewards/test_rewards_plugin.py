"""Built-ins through the plugin: `--reward-fn pytest_reward.rewards:math_reward` on a samples file, and
per-component gates on a combine()d reward via the marker's metrics=."""

from __future__ import annotations

import json

import pytest

SAMPLES = [
    {"id": "right", "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\nadd\n</think>\n<answer>\n\\boxed{4}\n</answer>"}], "ground_truth": "4"},
    {"id": "wrong", "messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "\\boxed{6}"}], "ground_truth": "5"},
]  # fmt: skip


@pytest.fixture
def samples(pytester: pytest.Pytester) -> str:
    path = pytester.path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in SAMPLES) + "\n")
    return str(path)


def test_builtin_by_import_path(pytester: pytest.Pytester, samples: str) -> None:
    result = pytester.runpytest(
        "--reward-fn",
        "pytest_reward.rewards:math_reward",
        "--reward-samples",
        samples,
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2)  # a wrong answer is a valid score of 0, not an error


@pytest.mark.parametrize(("bound", "exit_ok"), [(0.4, True), (0.6, False)])
def test_component_gate_on_combined_reward(
    pytester: pytest.Pytester, samples: str, bound: float, exit_ok: bool
) -> None:
    pytester.makepyfile(
        rewards=f"""
        import pytest
        from pytest_reward.rewards import combine, format_reward, math_reward

        # reward_function built with combine(); gate on one component
        evaluate = pytest.mark.reward(metrics={{"math_reward": {{"mean": {bound}}}}})(
            combine(weights={{format_reward: 0.2, math_reward: 0.8}}, name="evaluate")
        )
        """
    )
    result = pytester.runpytest(
        "--reward-fn", "rewards.py::evaluate", "--reward-samples", samples, "-p", "no:cacheprovider"
    )
    assert (result.ret == 0) is exit_ok, result.stdout.str()
    if not exit_ok:
        result.stdout.fnmatch_lines(["*math_reward*0.5*0.6*"])
