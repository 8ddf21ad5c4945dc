"""Trainer-native reward functions as test subjects: ``--reward-fn STYLE:path.py::name``, or the style
read from the parameters when exactly one fits.

The calling conventions are the trainers' own, read from their source (none of TRL, verl, OpenRLHF or slime imports
on this CPU venv without torch):

* TRL: ``trl/trainer/grpo_trainer.py`` ``GRPOTrainer._calculate_rewards`` (huggingface/trl mirror f2cd57710ae3,
  wheel 1.16.0 line 1579): ``reward_func(prompts=..., completions=..., completion_ids=..., **reward_kwargs)`` with
  every other column as an aligned list, ``trainer_state``, ``log_extra``, ``log_metric``; returns
  ``list[float | None]``;
* verl 0.9.1: ``verl/workers/reward_manager/naive.py:131`` calls ``compute_score(data_source=, solution_str=,
  ground_truth=, extra_info=)`` with ``extra_info`` holding ``num_turns`` and ``rollout_reward_scores``; a dict's
  ``score`` is the reward and its other keys ``reward_extra_info``;
* OpenRLHF 0.11: ``openrlhf/utils/agent.py:198``: ``reward_func(queries, prompts, labels)`` → ``{"rewards", "scores",
  "extra_logs"}``;
* slime 624b824a898a: ``slime/rollout/rm_hub/__init__.py``: ``await custom_rm(args, sample)``, ``--group-rm``:
  ``await custom_rm(args, samples)`` → list.
"""

from __future__ import annotations

import json

import pytest

from pytest_reward.trainers.styles import StyleError, detect_style, native_reward, split_style

from .conftest import msgs

VERL = """
    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        assert set(extra_info) >= {"num_turns", "rollout_reward_scores"}, extra_info
        assert data_source == "openai/gsm8k", data_source
        ok = solution_str.strip().endswith(str(ground_truth))
        return {"score": 1.0 if ok else 0.0, "acc": ok, "pred": solution_str[-3:], "split": extra_info["split"]}
"""

ROWS = [
    {
        "id": "right",
        "messages": msgs("2+40?", "It is 42"),
        "ground_truth": "42",
        "data_source": "openai/gsm8k",
        "extra_info": {"split": "test", "index": 0},
    },
    {
        "id": "wrong",
        "messages": msgs("1+1?", "It is 3"),
        "ground_truth": "2",
        "data_source": "openai/gsm8k",
        "extra_info": {"split": "test", "index": 1},
    },
]


def test_verl_compute_score_is_scored_with_its_dict_extras_as_metrics(project):
    project.file("my_reward.py", VERL)
    project.jsonl("s.jsonl", ROWS)
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-fn", "verl:my_reward.py::compute_score",
        "--reward-threshold", "0.5", "-v", "-rf",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*s.jsonl::compute_score?right? PASSED*", "*s.jsonl::compute_score?wrong? FAILED*"]
    )
    # acc (a bool in [0, 1]) is a metric; pred (a string) and split are named in the reason
    result.stdout.fnmatch_lines(["*acc*"])
    assert "split='test'" in result.stdout.str()


def test_style_read_from_the_signature_when_only_one_fits(project):
    project.file("my_reward.py", VERL)
    project.jsonl("s.jsonl", ROWS[:1])
    result = project.run("--reward-samples", "s.jsonl", "--reward-fn", "my_reward.py::compute_score", "-v")
    result.assert_outcomes(passed=1)


def test_an_ambiguous_signature_is_a_clear_error_naming_the_prefix(project):
    project.file(
        "my_reward.py",
        """
        def both(prompts, completions, solution_str=None, **kwargs):
            return [1.0] * len(completions)

        def neither(text, **kwargs):
            return 1.0
        """,
    )
    project.jsonl("s.jsonl", ROWS[:1])
    result = project.run("--reward-samples", "s.jsonl", "--reward-fn", "my_reward.py::both")
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["*--reward-fn my_reward.py::both: both(prompts, completions, solution_str) fits several*(trl, verl)*"
         "--reward-fn trl:*"]
    )  # fmt: skip
    result = project.run("--reward-samples", "s.jsonl", "--reward-fn", "my_reward.py::neither")
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["*'neither' is not decorated with @reward_function and its parameters (text) fit no trainer's*"]
    )
    # the prefix settles it
    result = project.run("--reward-samples", "s.jsonl", "--reward-fn", "trl:my_reward.py::both", "-v")
    result.assert_outcomes(passed=1)


def test_trl_function_gets_batches_with_columns_and_none_is_invalid(project):
    project.file(
        "trl_reward.py",
        """
        import json, pathlib

        def accuracy(prompts, completions, completion_ids=None, ground_truth=None, **kwargs):
            # conversational format: prompts are message lists, completions [[assistant message]]
            assert all(isinstance(p, list) and p[-1]["role"] == "user" for p in prompts), prompts
            assert all(c[0]["role"] == "assistant" for c in completions), completions
            assert len(completion_ids) == len(completions)
            assert kwargs["trainer_state"] is None
            kwargs["log_metric"]("batch_seen", 1.0)
            pathlib.Path("calls.jsonl").open("a").write(json.dumps(len(completions)) + "\\n")
            out = []
            for c, gt, lvl in zip(completions, ground_truth, kwargs["level"]):
                out.append(None if lvl == "skip" else float(c[0]["content"].endswith(gt)))
            return out
        """,
    )
    project.jsonl(
        "s.jsonl",
        [
            {"id": "a", "messages": msgs("q", "is 4"), "ground_truth": "4", "level": "easy"},
            {"id": "b", "messages": msgs("q", "is 5"), "ground_truth": "4", "level": "easy"},
            {"id": "c", "messages": msgs("q", "is 4"), "ground_truth": "4", "level": "skip"},
        ],
    )
    args = (
        "--reward-samples",
        "s.jsonl",
        "--reward-fn",
        "trl:trl_reward.py::accuracy",
        "--reward-threshold",
        "0.5",
    )
    result = project.run(*args, "-v", "-rf")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*accuracy?a? PASSED*", "*accuracy?b? FAILED*", "*accuracy?c? FAILED*"])
    result.stdout.fnmatch_lines(
        ["*accuracy returned None for this sample (TRL leaves it out of the reward)*"]
    )
    (project.path / "calls.jsonl").unlink()
    result = project.run(*args, "--reward-granularity", "file")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*2 of 3 samples failed (accuracy on s.jsonl)*"])
    assert (project.path / "calls.jsonl").read_text().split() == ["3"]  # one TRL batch of the whole file


@pytest.mark.parametrize("kind", ["dict", "tensor_like"])
def test_openrlhf_reward_func_file(project, kind):
    ret = '{"rewards": r, "scores": r, "extra_logs": {"len_ok": [1.0]}}' if kind == "dict" else "Rewards(r)"
    project.file(
        "reward_func.py",
        f"""
        class Rewards:  # what .tolist() gives back, as a torch tensor does
            def __init__(self, v):
                self.v = v
            def tolist(self):
                return list(self.v)

        def reward_func(queries, prompts, labels):
            assert prompts[0].startswith("<|im_start|>user\\n") and prompts[0].endswith("<|im_start|>assistant\\n")
            assert queries[0].startswith(prompts[0])
            r = [float(q[len(p):].strip().endswith(str(l))) for q, p, l in zip(queries, prompts, labels)]
            return {ret}
        """,
    )
    project.jsonl("s.jsonl", ROWS)
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-fn", "openrlhf:reward_func.py::reward_func",
        "--reward-threshold", "0.5", "-v",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)


def test_slime_custom_rm_and_its_group_form(project):
    project.file(
        "slime_rm.py",
        """
        async def custom_rm(args, sample, **kwargs):
            assert isinstance(sample.prompt, list) and sample.prompt[-1]["role"] == "user"
            return float(sample.response.endswith(sample.label))

        async def group_rm(args, samples, **kwargs):
            return [{"score": float(s.response.endswith(s.label)), "idx": 0.5} for s in samples]
        """,
    )
    project.jsonl("s.jsonl", ROWS)
    for spec in (
        "slime:slime_rm.py::custom_rm",
        "slime-group:slime_rm.py::group_rm",
        "slime_rm.py::custom_rm",
    ):
        result = project.run(
            "--reward-samples", "s.jsonl", "--reward-fn", spec, "--reward-threshold", "0.5", "-v"
        )  # fmt: skip
        result.assert_outcomes(passed=1, failed=1)


def test_a_bad_return_is_an_invalid_result_naming_it(project):
    project.file(
        "my_reward.py",
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return {"acc": 1.0}
        """,
    )
    project.jsonl("s.jsonl", ROWS[:1])
    result = project.run("--reward-samples", "s.jsonl", "--reward-fn", "verl:my_reward.py::compute_score")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*compute_score returned a dict without 'score'*"])


def test_verl_numbers_as_scores_in_both_granularities(project):
    """A plain number is the score (an int too); a non-finite one is invalid; a bool is 1.0 or 0.0, as verl writes
    it into its float reward tensor; a string is not a number; errored samples count as 0 in the mean."""
    project.file(
        "my_reward.py",
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return {"int": 1, "nan": float("nan"), "inf": float("-inf"), "bool": True, "text": "1"}.get(
                solution_str, 0.75
            )
        """,
    )
    answers = ["int", "nan", "inf", "bool", "text", "other"]
    project.jsonl(
        "s.jsonl",
        [
            {"id": a, "messages": msgs("system says", a), "ground_truth": "1", "data_source": "d"}
            for a in answers
        ],
    )
    for granularity in ("sample", "file"):
        result = project.result(
            "--reward-samples", "s.jsonl", "--reward-fn", "verl:my_reward.py::compute_score",
            "--reward-granularity", granularity, "--reward-threshold", "0.5",
        )  # fmt: skip
        (group,) = result.groups
        assert (group.summary.n, group.summary.mean) == (6, pytest.approx((1 + 1 + 0.75) / 6)), granularity
        by_id = {o.sample_id: o for o in group.outcomes}
        assert sorted(by_id) == sorted(answers)  # the file item keeps its 20 worst: all of them here
        assert by_id["int"].score == 1.0 and by_id["other"].score == 0.75
        assert by_id["nan"].failures == [
            "the result is marked is_score_valid=False",
            "the reward function reported an error: score is nan",
        ]
        assert by_id["inf"].score is None and by_id["inf"].verdict == "fail"
        assert by_id["bool"].score == 1.0 and by_id["bool"].error is None
        assert "compute_score's score is str '1': expected a number" in by_id["text"].error
        assert by_id["other"].response == "other"


BAD_RETURNS = """
    import numpy as np

    def trl_generator(prompts, completions, **kwargs):
        return (1.0 for _ in completions)

    def openrlhf_empty_logs(queries, prompts, labels):
        return {"rewards": [1.0], "extra_logs": {"acc": []}}

    def openrlhf_bool(queries, prompts, labels):
        return {"rewards": [True]}

    def verl_array(data_source, solution_str, ground_truth, extra_info=None):
        return np.array([0.5, 0.5])

    def verl_dict_array(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": np.array([1.0, 0.0])}

    async def slime_group_generator(args, samples, **kwargs):
        return (1.0 for _ in samples)
"""


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            "trl:bad.py::trl_generator",
            "trl_generator's return is a generator: "
            "expected a list of floats or None, one per completion (return a list)",
        ),
        (
            "openrlhf:bad.py::openrlhf_empty_logs",
            "openrlhf_empty_logs's extra_logs['acc'] has 0 values for 1 query: expected one per query",
        ),
        (
            "openrlhf:bad.py::openrlhf_bool",
            "openrlhf_bool's score is bool True: expected a number (OpenRLHF makes a tensor of each "
            "reward as it is, and torch.tensor([True]) is a bool tensor: return 1.0 or 0.0)",
        ),
        (
            "verl:bad.py::verl_array",
            "verl_array's score is ndarray of shape (2,) array([0.5, 0.5]): expected a number",
        ),
        (
            "verl:bad.py::verl_dict_array",
            "verl_dict_array's score is ndarray of shape (2,) array([1., 0.]): expected a number",
        ),
        (
            "slime-group:bad.py::slime_group_generator",
            "slime_group_generator's return is a generator: "
            "expected a list, one reward per sample (return a list)",
        ),
    ],
)
def test_a_return_the_trainer_cannot_use_is_named_with_what_was_expected(project, spec, error):
    """Not an exception the function never raised (IndexError, ValueError, "Task got bad yield"): what it returned,
    and what its trainer expects."""
    project.file("bad.py", BAD_RETURNS)
    project.jsonl("s.jsonl", ROWS[:1])
    for granularity in ("sample", "file"):
        result = project.result(
            "--reward-samples", "s.jsonl", "--reward-fn", spec, "--reward-granularity", granularity
        )  # fmt: skip
        ((outcome,),) = [group.outcomes for group in result.groups]
        assert error in outcome.error, granularity
        assert outcome.verdict == "fail"


@pytest.mark.parametrize(
    ("style", "source"),
    [
        (
            "verl",
            "def f(data_source, solution_str, ground_truth, extra_info=None):\n    return {'score': {v}}",
        ),
        ("trl", "def f(prompts, completions, **kwargs):\n    return [{v} for _ in completions]"),
        ("slime", "async def f(args, sample, **kwargs):\n    return {v}"),
    ],
)
def test_a_bool_is_the_score_its_trainer_would_store(project, style, source):
    """verl and TRL put a reward into a float tensor, as slime's group normalisation does: True is 1.0, False 0.0."""
    rows = [{**ROWS[0], "id": "t"}, {**ROWS[0], "id": "f"}]
    project.jsonl("s.jsonl", rows)
    for value, expected in (("True", 1.0), ("False", 0.0)):
        project.file("b.py", source.replace("{v}", value))
        outcomes = project.outcomes("--reward-samples", "s.jsonl", "--reward-fn", f"{style}:b.py::f")
        assert [(o["score"], o["error"]) for o in outcomes] == [(expected, None)] * 2, value


def test_the_style_prefix_cannot_clash_with_package_module_name():
    assert split_style("verl:pkg.mod:compute_score") == ("verl", "pkg.mod:compute_score")
    assert split_style("trl:rewards.py::f") == ("trl", "rewards.py::f")
    # a module called `trl` (or `verl`) with an attribute stays package.module:name
    assert split_style("trl:f") == (None, "trl:f")
    assert split_style("verl.utils:f") == (None, "verl.utils:f")
    assert split_style("mystyle:pkg:f") == (None, "mystyle:pkg:f")


def test_detection_and_fit_errors_in_process():
    def trl_fn(completions, **kwargs):
        return [1.0] * len(completions)

    def no_kwargs(prompts, completions):
        return [1.0]

    assert detect_style(trl_fn) == "trl"
    with pytest.raises(StyleError, match=r"needs a 'completions' parameter and \*\*kwargs"):
        native_reward(no_kwargs, "trl")
    with pytest.raises(StyleError, match="unknown style 'grpo'"):
        native_reward(trl_fn, "grpo")
    reward = native_reward(trl_fn)
    out = reward(rollouts_messages=[msgs("q", "a"), msgs("q", "b")], ground_truth=[None, None])
    assert [r.score for r in out] == [1.0, 1.0]


# --- in worker processes ----------------------------------------------------------------------------------------

STYLED = """
    import asyncio

    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        ok = solution_str.strip().endswith(str(ground_truth))
        return {"score": 1.0 if ok else 0.0, "acc": ok, "turns": extra_info["num_turns"]}

    def accuracy(prompts, completions, ground_truth=None, **kwargs):
        # a TRL batch: scores depend on the batch (position and size), so a changed batching shows
        n = len(completions)
        return [None if gt == "7" else float(c[0]["content"].endswith(gt)) * (i + 1) / n
                for i, (c, gt) in enumerate(zip(completions, ground_truth))]

    def reward_func(queries, prompts, labels):
        return {"rewards": [float(q.endswith(str(l))) for q, l in zip(queries, labels)], "extra_logs": {"n": [0.5]}}

    async def custom_rm(args, sample, **kwargs):
        await asyncio.sleep(0)
        if sample.label == "13":
            raise ValueError("unlucky label")
        return float(sample.response.endswith(sample.label))

    async def group_rm(args, samples, **kwargs):
        return [{"score": float(s.response.endswith(s.label)), "idx": i / len(samples)} for i, s in enumerate(samples)]
"""


def test_styled_functions_score_in_worker_processes_as_in_process(project):
    from .test_executors import normalized_files

    project.file("styled.py", STYLED)
    rows = [
        {"id": f"r{i}", "messages": msgs(f"{i}+0?", f"It is {i if i % 3 else i + 1}"), "ground_truth": str(i),
         "data_source": "toy", "extra_info": {"index": i}}
        for i in range(41)
    ]  # fmt: skip
    rows.insert(20, "{not json")
    project.jsonl("s.jsonl", rows)
    specs = [
        "verl:styled.py::compute_score",
        "trl:styled.py::accuracy",
        "openrlhf:styled.py::reward_func",
        "slime:styled.py::custom_rm",
        "slime-group:styled.py::group_rm",
    ]
    args = [a for spec in specs for a in ("--reward-fn", spec)]
    args += ["--reward-samples", "s.jsonl", "--reward-granularity", "file", "--reward-threshold", "0.5"]
    args += ["--reward-batch-size", "6", "--reward-preview", "3"]
    reference = project.run(*args, "--reward-report", "out-thread", "--reward-save=thread", "-rf")
    reference.assert_outcomes(failed=5)  # each function: the bad line, and wrong answers
    reference.stdout.fnmatch_lines(["*of 42 samples failed (custom_rm on s.jsonl)*"])
    expected = normalized_files(project.path, "out-thread", "thread")
    assert "unlucky label" in expected["results.jsonl"] and "returned None" in expected["results.jsonl"]
    result = project.run(
        *args, "--reward-report", "out-process", "--reward-save=process",
        "--reward-executor", "process", "--reward-workers", "2", "-rf",
    )  # fmt: skip
    result.assert_outcomes(failed=5)
    assert "cannot be scored by --reward-executor process" not in result.stdout.str()
    got = normalized_files(project.path, "out-process", "process")
    for file, text in expected.items():
        assert got[file] == text, f"{file} differs from the in-process run's"


@pytest.mark.parametrize("gate", [(), ("--reward-pass-rate", "0.1")])
def test_verl_file_granularity_outcomes_are_those_of_the_threaded_path(project, gate):
    """File granularity judges a verl number without building its result; the threaded path builds it: the
    same rows either way, below-threshold scores failing or tolerated by a pass-rate gate."""
    project.file(
        "my_reward.py",
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            if solution_str == "raise":
                raise KeyError(ground_truth)
            if solution_str == "dict":
                return {"score": 0.9, "acc": True, "pred": "x"}
            return {"low": 0.2, "one": 1, "nan": float("nan"), "big": 10**400}.get(solution_str, 0.75)
        """,
    )
    answers = ["ok", "low", "one", "nan", "big", "raise", "dict", "ok"]
    project.jsonl(
        "s.jsonl",
        [{"messages": msgs("q", a), "ground_truth": "1", "data_source": "d", "extra_info": {"i": i}} for i, a in
         enumerate(answers)],
    )  # fmt: skip

    def rows_of(*extra: str) -> list[dict]:
        out = project.path / ("out" + "_".join(extra))
        project.run(
            "--reward-samples", "s.jsonl", "--reward-fn", "verl:my_reward.py::compute_score",
            "--reward-granularity", "file", "--reward-threshold", "0.5", "--reward-report", str(out), *gate, *extra,
        )  # fmt: skip
        found = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        for row in found:
            row.pop("duration")
        return found

    fast, threaded = rows_of(), rows_of("--reward-workers", "2")
    assert fast == threaded
    low = "below" if gate else "fail"
    assert [r["verdict"] for r in fast] == ["pass", low, "pass", "fail", "fail", "fail", "pass", "pass"]
    assert [r["score"] for r in fast] == [0.75, 0.2, 1.0, None, None, None, 0.9, 0.75]
    assert fast[1]["failures"] == ([] if gate else ["score 0.2 < threshold 0.5"])
    assert "OverflowError" in fast[4]["error"] and "KeyError: '1'" in fast[5]["error"]
    assert fast[6]["metrics"] == {"acc": 1.0} and fast[6]["reason"] == "pred='x'"


# --- naming trainer functions in ini, and a misspelt prefix ---------------------------------------------------------

TRL_LEN = """
    def short(prompts, completions, **kwargs):
        return [float(len(c[0]["content"]) < 9) for c in completions]
"""


def test_trainer_functions_listed_in_ini_reward_functions(project):
    project.file("my_reward.py", VERL)
    project.file("rewards/trl_reward.py", TRL_LEN)
    project.jsonl("data/s.jsonl", ROWS)
    project.file(
        "pytest.ini",
        """
        [pytest]
        reward_functions =
            verl:my_reward.py::compute_score
            trl:rewards/trl_reward.py::short
        """,
    )
    (project.path / "sub").mkdir()
    with pytest.MonkeyPatch.context() as mp:  # ini paths are relative to the rootdir, wherever pytest starts
        mp.chdir(project.path / "sub")
        result = project.run("../data/s.jsonl", "--reward-threshold", "0.5", "-v")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*s.jsonl::compute_score?wrong? FAILED*"])
    # --reward-fn replaces the ini list
    result = project.run("data/s.jsonl", "--reward-fn", "trl:rewards/trl_reward.py::short", "-v")
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("where", ["flag", "ini"])
def test_a_misspelt_style_prefix_names_the_prefixes_and_the_closest(project, where):
    project.file("my_reward.py", VERL)
    project.jsonl("s.jsonl", ROWS)
    spec = "verll:my_reward.py::compute_score"
    if where == "ini":
        project.file("pytest.ini", f"[pytest]\nreward_functions = {spec}\n")
        result, source = project.run("s.jsonl"), "ini reward_functions"
    else:
        result, source = project.run("s.jsonl", "--reward-fn", spec), "--reward-fn"
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*{source} {spec}: unknown style prefix 'verll': did you mean verl:my_reward.py::compute_score? "
            "(the prefixes: trl, trl-standard, verl, openrlhf, slime, slime-group)"
        ]
    )
    result = project.run("s.jsonl", "--reward-fn", "verl:my_reward.py::compute_score")  # the suggestion works
    result.assert_outcomes(passed=2)


def test_the_option_help_names_every_style_prefix():
    from pytest_reward.plugin.options import OPTIONS
    from pytest_reward.trainers.styles import STYLES, unknown_prefix

    (fn_option,) = [o for o in OPTIONS if o.flag == "--reward-fn"]
    assert fn_option.ini == "reward_functions"
    assert f"STYLE: {', '.join(STYLES)})" in fn_option.help
    # a word that cannot be a style prefix, or a spec written without one, is left to the other errors
    assert unknown_prefix("my_reward.py::f") is None and unknown_prefix("pkg.mod:f") is None
    assert unknown_prefix("verl:my_reward.py::f") is None and unknown_prefix("pkg:f") is None
