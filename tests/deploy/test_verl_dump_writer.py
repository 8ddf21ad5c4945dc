"""verl's own rollout dump writer and its own GSM8K reward, read back as a regression suite.

Opt-in (marker ``clients``, ``make test-clients``): verl 0.9.1 is installed from the package registry with
``pip install --no-deps --target`` (see conftest). ``RayPPOTrainer._write_generations`` (the static method behind
``trainer.rollout_data_dir`` and ``validation_data_dir``) lives in ``verl/trainer/ppo/ray_trainer.py``, whose imports
need torch, ray and tensordict; the method itself uses only ``os`` and ``json``, so its source is taken verbatim from
the installed file (its decorator dropped) and run as it is. The reward under test is verl's own
``verl/utils/reward_score/gsm8k.py`` (stdlib only), loaded from the installed file by path. Nothing of verl's is
imitated: a change to the writer's format in a later verl would show here.
"""

from __future__ import annotations

import ast
import json
import textwrap

import pytest

from .conftest import installed_target

pytestmark = pytest.mark.clients

VERSION = "0.9.1"


def _verl_writer(verl_dir):
    """``RayPPOTrainer._write_generations`` from the installed verl, as a plain function."""
    path = verl_dir / "verl" / "trainer" / "ppo" / "ray_trainer.py"
    tree = ast.parse(path.read_text())
    (method,) = [
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "RayPPOTrainer"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "_write_generations"
    ]
    assert [ast.unparse(d) for d in method.decorator_list] == ["staticmethod"]
    method.decorator_list = []
    namespace: dict = {}
    module = ast.Module(body=[ast.parse("import json, os").body[0], method], type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)
    return namespace["_write_generations"]


REWARD = """
    import importlib.util

    spec = importlib.util.spec_from_file_location("verl_gsm8k", {path!r})
    gsm8k = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gsm8k)


    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        # verl's default_compute_score for data_source openai/gsm8k
        return gsm8k.compute_score(solution_str, ground_truth)
"""


def test_verl_dump_written_by_verl_replays_with_verls_own_reward(project, capsys):
    verl = installed_target("verl", VERSION)
    write_generations = _verl_writer(verl)
    inputs = [
        "system\nYou are a helpful assistant.\nuser\nWhat is 6*7?\nassistant\n",  # decoded, special tokens skipped
        "user\nWhat is 2+2?\nassistant\n",
        "user\nWhat is 10-3?\nassistant\n",
    ]
    outputs = ["6*7 = 42\n#### 42", "2+2 = 5\n#### 5", "10-3 is 7\n#### 7"]
    gts = ["42", "4", "7"]
    # the scores the trainer recorded: the third was computed by a reward that has changed since (drift)
    scores = [1.0, 0.0, 0.0]
    extras = {"acc": [True, False, False], "too_short": [1.0]}  # verl keeps extras of the batch's length only
    write_generations(inputs, outputs, gts, scores, extras, str(project.path / "dumps"), 12)
    capsys.readouterr()  # verl prints "Dumped generations to ..."
    rows = [json.loads(line) for line in (project.path / "dumps" / "12.jsonl").read_text().splitlines()]
    assert [sorted(r) for r in rows] == [["acc", "gts", "input", "output", "score", "step"]] * 3
    assert [r["step"] for r in rows] == [12, 12, 12]

    gsm8k = verl / "verl" / "utils" / "reward_score" / "gsm8k.py"
    project.file("verl_reward.py", textwrap.dedent(REWARD).format(path=str(gsm8k)))
    args = ("--reward-samples", "dumps/12.jsonl", "--reward-fn", "verl:verl_reward.py::compute_score", "-v")
    result = project.run(*args, "--reward-replay-tolerance", "0", "-rf")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*compute_score?line-3? FAILED*", "*expected 0 ± 0, got 1*"])
    result = project.run(*args)  # without a tolerance the recorded scores are not compared
    result.assert_outcomes(passed=3)
