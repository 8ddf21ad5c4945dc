"""Rollout dumps as regression suites: verl's ``trainer.rollout_data_dir`` / ``validation_data_dir``
JSONL read as samples, the recorded score kept, ``--reward-replay-tolerance`` failing drifted rewards.

The rows have the layout of verl 0.9.1's writer, ``verl/trainer/ppo/ray_trainer.py`` ``_write_generations``
(line 454; volcengine/verl b178a3cd56f5): ``input``, ``output``, ``gts``, ``score``, ``step`` and the reward
manager's extras, one ``json.dumps(entry, ensure_ascii=False, default=str)`` per line. Here the rows are written with
that json call (these tests run on every machine); tests/deploy/test_verl_dump_writer.py (opt-in, ``make
test-clients``) runs verl's own writer, taken from the installed verl, and verl's own GSM8K reward over its dump.
"""

from __future__ import annotations

import json

from pytest_reward.data.samples import iter_samples

CHATML = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"

VERL = """
    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        return float(solution_str.strip().endswith(str(ground_truth)))
"""


def _dump(path, rows):
    with open(path, "w") as f:
        for entry in rows:
            f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")


ROWS = [
    {"input": CHATML, "output": "It is 42", "gts": "42", "score": 1.0, "step": 3, "acc": True},
    {"input": CHATML, "output": "It is 41", "gts": "42", "score": 0.0, "step": 3, "acc": False},
    # the reward changed since training: recorded 1.0, recomputed 0.0
    {"input": CHATML, "output": "It is 42.", "gts": "42", "score": 1.0, "step": 3, "acc": True},
]


def test_dump_rows_split_into_prompt_and_response_with_the_recorded_score(tmp_path):
    _dump(tmp_path / "3.jsonl", ROWS[:1])
    (sample,) = list(iter_samples(tmp_path / "3.jsonl"))
    assert sample.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": "It is 42"},
    ]
    assert sample.ground_truth == "42" and sample.recorded == 1.0
    assert sample.kwargs == {"step": 3}  # the trainer's reward extras are not passed to the function again


def test_replay_tolerance_fails_samples_whose_reward_drifted(project):
    project.file("my_reward.py", VERL)
    _dump(project.path / "3.jsonl", ROWS)
    args = ("--reward-samples", "3.jsonl", "--reward-fn", "verl:my_reward.py::compute_score", "-v")
    result = project.run(*args)  # no tolerance: scored like any samples file, no threshold
    result.assert_outcomes(passed=3)
    result = project.run(*args, "--reward-replay-tolerance", "0.01", "-rf")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(  # says what happened: a replay that drifted, not an expectation someone wrote
        [
            "*compute_score?line-3? FAILED*",
            "*replay: the trainer recorded 1, the reward gives 0 now (tolerance 0.01)*",
        ]
    )
    assert "expect score" not in result.stdout.str()
    result = project.run(*args, "--reward-replay-tolerance", "1")
    result.assert_outcomes(passed=3)


def test_a_bad_dump_row_is_a_file_line_error_and_the_good_rows_run(project):
    project.file("my_reward.py", VERL)
    _dump(project.path / "3.jsonl", [ROWS[0], {"input": CHATML, "output": ["x"], "gts": "1", "score": 1.0}])
    result = project.run("--reward-samples", "3.jsonl", "--reward-fn", "verl:my_reward.py::compute_score")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*3.jsonl:2*'input' and 'output' must be strings*"])


def test_a_dump_row_without_output_names_the_dumps_own_field(project):
    project.file("my_reward.py", VERL)
    _dump(project.path / "3.jsonl", [ROWS[0], {"input": CHATML, "gts": "1", "score": 1.0}])
    result = project.run("--reward-samples", "3.jsonl", "--reward-fn", "verl:my_reward.py::compute_score")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*3.jsonl:2*verl dump row: missing 'output' (the row has 'input'*"])
    assert "missing 'messages'" not in result.stdout.str()


def test_replay_tolerance_must_not_be_negative(project):
    project.jsonl("s.jsonl", [])
    result = project.run("--reward-samples", "s.jsonl", "--reward-replay-tolerance", "-1")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--reward-replay-tolerance*must be ≥ 0*"])


def test_a_replay_with_nothing_recorded_fails_and_says_so(project):
    """--reward-replay-tolerance on rows that carry no recorded score compares nothing: the run fails with one line
    saying so (in the terminal, summary.json and the last line), instead of passing green."""
    project.file("my_reward.py", VERL)
    _dump(project.path / "3.jsonl", [{k: v for k, v in row.items() if k != "score"} for row in ROWS])
    args = ("--reward-samples", "3.jsonl", "--reward-fn", "verl:my_reward.py::compute_score", "--reward-report", "out")
    result = project.run(*args, "--reward-replay-tolerance", "0.01")
    assert result.ret == 1
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "FAIL compute_score on 3.jsonl: --reward-replay-tolerance 0.01 asked for a replay, but none of its 3 "
            "samples carries a recorded score*nothing was compared",
            "*3 passed, 1 replay checked nothing*",
        ]
    )
    summary = json.loads((project.path / "out" / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and len(summary["replay_failures"]) == 1
    assert project.run(*args).ret == 0  # no replay asked: nothing to fail
