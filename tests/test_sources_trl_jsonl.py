"""TRL's schema in JSONL, and field mappings on JSONL files: a line of TRL's standard format (``prompt`` and
``completion`` strings) or conversational format (lists of messages) is read as the same row of a Parquet file
would be, and ini ``reward_sample_fields`` / a marker's ``sample_fields=`` apply to JSONL lines too. Lines of our
own schema read as they always have."""

from __future__ import annotations

import json

import pytest

from pytest_reward.data.samples import Sample, iter_samples

CONVERSATIONAL = {
    "prompt": [{"role": "user", "content": "2+2?"}],
    "completion": [{"role": "assistant", "content": "4"}],
    "solution": "4",
}
STANDARD = {"prompt": "3+3?", "completion": "6", "solution": "6"}
PROMPT_ONLY = {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]}

TRL = """
    def accuracy(prompts, completions, solution=None, **kwargs):
        texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
        return [float(t.strip() == s) for t, s in zip(texts, solution)]
"""

PLAIN = """
    import pytest
    from pytest_reward import EvaluateResult, reward_function

    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        return EvaluateResult(score=float(messages[-1]["content"] == ground_truth))
"""


def test_trl_lines_read_as_trl_rows(project):
    path = project.jsonl("trl.jsonl", [CONVERSATIONAL, STANDARD, PROMPT_ONLY])
    conversational, standard, prompt_only = list(iter_samples(path))
    for sample, question, answer in ((conversational, "2+2?", "4"), (standard, "3+3?", "6")):
        assert isinstance(sample, Sample) and not sample.prompt_only
        assert sample.messages == [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
        assert sample.kwargs == {"solution": answer}
    assert isinstance(prompt_only, Sample) and prompt_only.prompt_only
    assert [m["role"] for m in prompt_only.messages] == ["system", "user"]


def test_a_trl_function_scores_trl_jsonl_without_a_mapping_or_a_model(project):
    project.file("rewards.py", TRL)
    project.jsonl("trl.jsonl", [CONVERSATIONAL, STANDARD, {**STANDARD, "completion": "7"}])
    for style in ("trl", "trl-standard"):
        result = project.run(
            "--reward-samples", "trl.jsonl", "--reward-fn", f"{style}:rewards.py::accuracy",
            "--reward-threshold", "0.5", "-v",
        )  # fmt: skip
        result.assert_outcomes(passed=2, failed=1)
        result.stdout.fnmatch_lines(["*trl.jsonl::accuracy?line-3? FAILED*"])


def test_our_lines_and_malformed_lines_read_as_before(project):
    project.file("test_reward.py", PLAIN)
    project.jsonl(
        "s.jsonl",
        [
            {
                "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                "ground_truth": "a",
            },
            {"neither": 1},
            {"prompt": 5},
            {**STANDARD, "completion": 5},
        ],
    )
    result = project.run("s.jsonl", "-v")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*s.jsonl:2: missing 'messages' (or 'prompt' for a prompt-only sample)*",
            "*s.jsonl:3: 'prompt' must be a string, got int*",
            "*s.jsonl:4: 'completion' must be a string or a list of messages, got 5*",
        ],
        consecutive=False,
    )


def test_the_ini_mapping_and_the_marker_mapping_apply_to_jsonl(project):
    project.file("test_reward.py", PLAIN)
    project.file(
        "test_marked.py",
        """
        import pytest
        from pytest_reward import EvaluateResult, reward_function

        @pytest.mark.reward(sample_fields={"ground_truth": "gold"})
        @reward_function
        def by_gold(messages, ground_truth=None, **kwargs):
            return EvaluateResult(score=float(messages[-1]["content"] == ground_truth))
        """,
    )
    conversation = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    project.jsonl(
        "s.jsonl",
        [
            {"messages": conversation, "answer": "a", "gold": "a"},
            {"messages": conversation, "answer": "b", "gold": "a"},
            {"messages": conversation, "gold": "a"},
        ],
    )
    project.file("pytest.ini", "[pytest]\nreward_sample_fields = ground_truth=answer\n")
    result = project.run("s.jsonl", "--reward-threshold", "0.5", "-v")
    result.assert_outcomes(passed=4, failed=2)
    for line, outcome in ((1, "PASSED"), (2, "FAILED"), (3, "FAILED")):
        result.stdout.fnmatch_lines([f"*s.jsonl::exact?line-{line}? {outcome}*"])
        result.stdout.fnmatch_lines([f"*s.jsonl::by_gold?line-{line}? PASSED*"])
    result.stdout.fnmatch_lines(["*s.jsonl:3: no column 'answer' (columns: messages, gold)*"])


def test_a_mapping_leaves_verl_dump_rows_alone(tmp_path):
    path = tmp_path / "3.jsonl"
    path.write_text('{"input": "user\\n2+2?\\nassistant\\n", "output": "4", "gts": "4", "score": 1.0}\n')
    (sample,) = list(iter_samples(path, fields={"ground_truth": "answer"}))
    assert isinstance(sample, Sample) and sample.recorded == 1.0
    (same,) = list(iter_samples(path, fields={"messages": "absent"}))
    assert isinstance(same, Sample) and same.messages == sample.messages


@pytest.mark.parametrize("line", [CONVERSATIONAL, STANDARD])
def test_a_trl_line_with_a_mapping_over_the_preset(tmp_path, line):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (sample,) = list(iter_samples(path, fields={"ground_truth": "solution"}))
    assert isinstance(sample, Sample) and sample.ground_truth == line["solution"] and sample.kwargs == {}
