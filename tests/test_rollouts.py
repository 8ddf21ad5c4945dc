"""Prompt-only samples: rolled out by the session's model once, in fixed chunks, shared by every function."""

from __future__ import annotations

import json

import pytest

from pytest_reward.scoring.rollouts import pass_at_k

from .conftest import msgs

# A stand-in model (the user's own inference_job fixture): answers "<a+b>" for "a+b=" prompts, or "?" with the
# given probability, logging its calls in calls.jsonl.
FAKE_JOB = """
    import json, pathlib, random
    from dataclasses import dataclass
    import pytest

    HERE = pathlib.Path(__file__).parent

    @dataclass
    class Out:
        text: str
        finish_reason: str = "eot"

    class FakeJob:
        def rollout(self, prompts, max_new_tokens, *, temperature, top_k, top_p, stop, seed, n):
            with open(HERE / "calls.jsonl", "a") as log:  # one line per call: safe with several processes
                log.write(json.dumps({"prompts": [p if isinstance(p, str) else p[-1]["content"] for p in prompts], "n": n, "seed": seed, "stop": list(stop)}) + "\\n")
            rng = random.Random(seed)
            out = []
            for p in prompts:
                text = p if isinstance(p, str) else p[-1]["content"]
                a, b = text.rstrip("=").split("+")
                for _ in range(n):
                    wrong = temperature > 0 and rng.random() < 0.5
                    out.append(Out("?" if wrong else str(int(a) + int(b))))
            return out

    @pytest.fixture(scope="session")
    def inference_job():
        return FakeJob()
"""

EXACT = """
    import pytest
    from pytest_reward import reward_function

    @pytest.mark.reward(threshold=1.0, pass_rate=0.0{rollout})
    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        return {{"score": float(messages[-1]["content"] == ground_truth), "reason": messages[-1]["content"]}}

    @reward_function
    def length(messages, **kwargs):
        return {{"score": min(1.0, len(messages[-1]["content"]) / 3)}}

    @reward_function
    def nonempty(messages, **kwargs):
        return {{"score": float(bool(messages[-1]["content"]))}}
"""


def prompts(n: int, start: int = 0) -> list[dict]:
    return [
        {"id": f"p{i}", "prompt": f"{i}+{i}=", "ground_truth": str(2 * i)} for i in range(start, start + n)
    ]


def calls(project) -> list[dict]:
    return [json.loads(line) for line in (project.path / "calls.jsonl").read_text().splitlines()]


def test_each_prompt_is_rolled_out_once_for_every_function(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl("prompts.jsonl", prompts(10))
    result = project.run("--reward-samples", "prompts.jsonl", "--reward-max-batch", "4")
    result.assert_outcomes(passed=30)
    made = calls(project)
    # 10 prompts in chunks of 4: three calls, whatever the number of functions scoring them
    assert [len(c["prompts"]) for c in made] == [4, 4, 2]
    assert sorted(p for c in made for p in c["prompts"]) == sorted(f"{i}+{i}=" for i in range(10))
    result.stdout.fnmatch_lines(["reward: rollouts: 3 call(s) to the model, *"])


def test_chat_prompts_and_prompt_fields_both_work(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl(
        "prompts.jsonl",
        [
            {"id": "plain", "prompt": "2+3=", "ground_truth": "5"},
            {
                "id": "chat",
                "messages": [{"role": "system", "content": "add"}, *msgs("4+4=")],
                "ground_truth": "8",
            },
            {"id": "answered", "messages": msgs("1+1=", "2"), "ground_truth": "2"},
        ],
    )
    outcomes = {
        (o["function"], o["sample_id"]): o for o in project.outcomes("--reward-samples", "prompts.jsonl")
    }
    assert outcomes[("exact", "plain")]["score"] == 1.0 and outcomes[("exact", "chat")]["score"] == 1.0
    assert outcomes[("exact", "chat")]["extra"]["responses"] == ["8"]
    assert "responses" not in outcomes[("exact", "answered")]["extra"]  # already answered: not rolled out
    (made,) = calls(project)
    assert made["prompts"] == ["2+3=", "4+4="]
    # a chat's answer ends with the assistant's turn: the job is asked to stop at the end markers
    assert made["stop"][:2] == ["<|im_end|>", "<|endoftext|>"]


def test_plain_prompts_get_only_the_configured_stop_strings(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=', rollout={"stop": ["\\n"]}'))
    project.jsonl("prompts.jsonl", prompts(2))
    project.run("--reward-samples", "prompts.jsonl")
    assert [c["stop"] for c in calls(project)] == [["\n"], []]  # exact's setting, then the default one


def test_n_responses_per_prompt_give_pass_at_k_and_best_of_n(project):
    project.file("conftest.py", FAKE_JOB)
    rollout = ', rollout={"n": 4, "temperature": 0.8, "seed": 3}'
    project.file("rewards.py", EXACT.format(rollout=rollout))
    project.jsonl("prompts.jsonl", prompts(6))
    result = project.run("--reward-samples", "prompts.jsonl", "--reward-report", "out")
    assert result.ret == 0
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    exact = [r for r in rows if r["function"] == "exact"]
    for row in exact:
        c = sum(1 for text in row["responses"] if text != "?")
        assert len(row["responses"]) == 4 and row["response_scores"] == [
            1.0 if t != "?" else 0.0 for t in row["responses"]
        ]
        assert "runs" not in row and row["reason"].endswith("(mean of 4 responses)")
        assert row["score"] == pytest.approx(c / 4)
        assert row["pass@1"] == pytest.approx(c / 4) and row["pass@4"] == (1.0 if c else 0.0)
        assert row["best_of_n"] == (1.0 if c else 0.0)
    assert calls(project)[0]["n"] == 4
    result.stdout.fnmatch_lines(
        ["exact on prompts.jsonl: 4 responses per prompt: pass@1 *, pass@4 *, best-of-4 mean *"]
    )
    # responses that differ are the point of sampling, not a flaky reward function
    assert "FLAKY" not in result.stdout.str()


def test_rollouts_do_not_depend_on_who_runs_them(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=', rollout={"n": 3, "temperature": 1.0, "seed": 7}'))
    project.jsonl("prompts.jsonl", prompts(12))

    def responses(*args):
        (project.path / "calls.jsonl").unlink(missing_ok=True)
        project.run_subprocess(
            "--reward-samples", "prompts.jsonl", "--reward-report", "out", "--reward-max-batch", "5", *args
        )
        rows = [
            json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()
        ]
        return {r["id"]: r["responses"] for r in rows if r["function"] == "exact"}

    single = responses()
    assert responses("-k", "exact and (p7 or p11)") == {k: single[k] for k in ("p7", "p11")}
    assert responses("-n", "2", "-p", "xdist") == single
    assert responses("--reward-granularity", "file", "-n", "2", "-p", "xdist") == single


def test_rollout_calls_are_counted_across_xdist_workers(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl("prompts.jsonl", prompts(10))
    args = ("--reward-samples", "prompts.jsonl", "--reward-max-batch", "4", "-p", "xdist", "-n", "2")
    result = project.run_subprocess(*args, "--dist", "loadfile")
    result.stdout.fnmatch_lines(["reward: rollouts: 3 call(s) to the model, *"])  # the workers' calls, summed
    assert "--dist loadfile keeps" not in result.stdout.str()
    (project.path / "calls.jsonl").unlink()
    result = project.run_subprocess(*args)
    made = len(calls(project))
    result.stdout.fnmatch_lines(
        [f"reward: rollouts: {made} call(s) to the model, *", "reward: with --dist load, *--dist loadfile keeps*"]
    )


def test_dist_loadfile_rolls_out_each_chunk_once_across_workers(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl("prompts.jsonl", prompts(10))
    result = project.run_subprocess(
        "--reward-samples", "prompts.jsonl", "--reward-max-batch", "4", "-n", "2", "--dist", "loadfile", "-p", "xdist"
    )
    result.assert_outcomes(passed=30)
    assert sorted(len(c["prompts"]) for c in calls(project)) == [2, 4, 4]  # one worker, each chunk once


def _rows(project, *args) -> list[dict]:
    (project.path / "calls.jsonl").unlink(missing_ok=True)
    project.run("--reward-samples", "prompts.jsonl", "--reward-report", "out", *args)
    return [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]


def test_file_granularity_rolls_out_each_chunk_once_with_the_same_responses(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=', rollout={"n": 3, "temperature": 1.0, "seed": 7}'))
    project.jsonl("prompts.jsonl", prompts(10))
    by_sample = {(r["function"], r["id"]): r for r in _rows(project, "--reward-max-batch", "4")}
    sample_calls = calls(project)
    result = project.run(
        "--reward-samples", "prompts.jsonl", "--reward-granularity", "file", "--reward-max-batch", "4"
    )
    result.assert_outcomes(passed=3)  # one item per function
    assert calls(project)[len(sample_calls) :] == sample_calls  # same chunks, same seeds, once each
    # exact samples 3 responses at temperature 1, the other two share greedy ones: 2 settings x 3 chunks
    result.stdout.fnmatch_lines(
        [
            "exact on prompts.jsonl: 3 responses per prompt: pass@1 0.*, pass@3 *, best-of-3 mean *",
            "reward: rollouts: 6 call(s) to the model, *",
        ]
    )
    # one response per prompt: no pass@k line (it was printed with pass@1 counted twice, 2.000)
    assert "length on prompts.jsonl: 1 responses" not in result.stdout.str()
    by_file = {
        (r["function"], r["id"]): r
        for r in _rows(project, "--reward-granularity", "file", "--reward-max-batch", "4")
    }
    assert by_file.keys() == by_sample.keys()
    for key, row in by_file.items():
        n = len(row["responses"])
        for field in ("responses", "response_scores", "score", "pass@1", f"pass@{n}", "best_of_n", "verdict"):
            assert row[field] == by_sample[key][field], (key, field)


def test_file_granularity_mixes_answered_prompt_only_and_broken_lines(project):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", EXACT.format(rollout=""))
    answered = {"id": "done", "messages": msgs("1+1=", "2"), "ground_truth": "2"}
    project.jsonl("prompts.jsonl", [*prompts(3), answered, "{broken", *prompts(2, start=3)])
    result = project.run(
        "--reward-samples", "prompts.jsonl", "--reward-granularity", "file", "--reward-max-batch", "2"
    )
    result.assert_outcomes(failed=3)  # the broken line fails every function; nothing else is lost
    result.stdout.fnmatch_lines(["1 of 7 samples failed (exact on prompts.jsonl)", "  prompts.jsonl:5 *"])
    assert [len(c["prompts"]) for c in calls(project)] == [2, 2, 1]
    rows = _rows(project, "--reward-granularity", "file", "--reward-max-batch", "2")
    exact = {r["line"]: r for r in rows if r["function"] == "exact"}
    assert sorted(exact) == [1, 2, 3, 4, 5, 6, 7]
    assert exact[4]["score"] == 1.0 and "responses" not in exact[4]
    assert exact[5]["error"].startswith("invalid JSON")
    assert all(exact[line]["responses"] == [str(2 * i)] for i, line in enumerate((1, 2, 3, 6, 7)))


def test_file_granularity_loads_the_model_only_for_prompt_only_samples(project):
    project.file("conftest.py", FAKE_JOB.replace("return FakeJob()", 'raise RuntimeError("model loaded")'))
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl("answered.jsonl", [{"messages": msgs("1+1=", "2"), "ground_truth": "2"}])
    result = project.run("--reward-samples", "answered.jsonl", "--reward-granularity", "file")
    result.assert_outcomes(passed=3)


def test_file_granularity_rollout_failure_fails_its_chunk_only(project):
    project.file(
        "conftest.py",
        FAKE_JOB.replace(
            "            rng = random.Random(seed)",
            "            if any(p == '9+9=' for p in prompts):\n                raise ValueError('prompt too long')\n"
            "            rng = random.Random(seed)",
        ),
    )
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl("prompts.jsonl", prompts(10))
    result = project.run(
        "--reward-samples", "prompts.jsonl", "--reward-granularity", "file", "--reward-max-batch", "4"
    )
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        ["2 of 10 samples failed (exact on prompts.jsonl)", "  prompts.jsonl:9 ?p8?  rollout failed: prompt too long"]
    )


BATCH_EXACT = """
    import pytest
    from pytest_reward import reward_function

    @pytest.mark.reward(threshold=1.0, pass_rate=0.0, rollout={"n": 2})
    @reward_function(mode="batch")
    def exact_batch(rollouts_messages, ground_truth=None, **kwargs):
        return [{"score": float(m[-1]["content"] == g), "reason": "batch"} for m, g in zip(rollouts_messages, ground_truth)]
"""


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_batch_mode_functions_score_the_responses_of_a_prompt(project, granularity):
    project.file("conftest.py", FAKE_JOB)
    project.file("rewards.py", BATCH_EXACT)
    project.jsonl("prompts.jsonl", prompts(3))
    rows = _rows(project, "--reward-granularity", granularity)
    assert [r["response_scores"] for r in rows] == [[1.0, 1.0]] * 3
    assert all(r["score"] == 1.0 for r in rows)


def test_file_granularity_without_a_model_makes_prompt_only_lines_errors(project):
    project.file("rewards.py", EXACT.format(rollout=""))
    answered = {"id": "done", "messages": msgs("1+1=", "2"), "ground_truth": "2"}
    project.jsonl("prompts.jsonl", [*prompts(1), answered])
    result = project.run("--reward-samples", "prompts.jsonl", "--reward-granularity", "file")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "1 of 2 samples failed (exact on prompts.jsonl)",
            "  prompts.jsonl:1 ?p0?  prompt-only sample: no model to roll it out: pass --reward-model PATH_OR_NAME*",
        ]
    )


def test_without_a_model_prompt_only_samples_are_a_usage_error(project):
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl("prompts.jsonl", prompts(2))
    result = project.run("--reward-samples", "prompts.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*prompts.jsonl::exact?p0?: no model to roll out prompt-only samples*--reward-model PATH_OR_NAME*"]
    )


def test_a_missing_model_directory_fails_with_the_path(project):
    project.file("rewards.py", EXACT.format(rollout=""))
    project.jsonl("prompts.jsonl", prompts(1))
    result = project.run("--reward-samples", "prompts.jsonl", "--reward-model", "no/such/model")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*--reward-model no/such/model: not a model directory (no config.json) and not a shipped example model (available: tiny-adder)*"
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_file_granularity_with_a_missing_model_fails_only_the_prompt_only_samples(project):
    project.file("rewards.py", EXACT.format(rollout=""))
    answered = {"id": "done", "messages": msgs("1+1=", "2"), "ground_truth": "2"}
    project.jsonl("prompts.jsonl", [*prompts(1), answered])
    rows = _rows(project, "--reward-granularity", "file", "--reward-model", "no/such/model")
    exact = {r["id"]: r for r in rows if r["function"] == "exact"}
    assert exact["done"]["score"] == 1.0
    assert exact["p0"]["error"].startswith("rollout failed: --reward-model no/such/model: not a model directory")


def test_pass_at_k_known_values():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - (7 * 6) / (10 * 9))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_the_shipped_model_rolls_out_and_scores(project):
    pytest.importorskip("jax")
    project.file("rewards.py", EXACT.format(rollout=', rollout={"max_new_tokens": 6}'))
    heldout = [json.loads(line) for line in _heldout().read_text().splitlines()][:12]
    project.jsonl(
        "prompts.jsonl",
        [{"id": f"h{i}", "prompt": h["prompt"], "ground_truth": h["answer"]} for i, h in enumerate(heldout)],
    )
    result = project.run_subprocess(
        "--reward-samples", "prompts.jsonl", "--reward-model", "tiny-adder", "--reward-report", "out"
    )
    rows = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    exact = [r for r in rows if r["function"] == "exact"]
    assert len(exact) == 12 and sum(r["score"] for r in exact) >= 8  # 93.7 % greedy on all 1000 held-out sums
    # exact asks for 6 new tokens, the other two use the default: two settings, two calls
    result.stdout.fnmatch_lines(["reward: rollouts: 2 call(s) to the model, *"])
    # file granularity: the same rollouts (chunks and seeds do not depend on it), the same scores
    result = project.run_subprocess(
        "--reward-samples",
        "prompts.jsonl",
        "--reward-model",
        "tiny-adder",
        "--reward-report",
        "out",
        "--reward-granularity",
        "file",
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["reward: rollouts: 2 call(s) to the model, *"])
    by_file = [json.loads(line) for line in (project.path / "out" / "results.jsonl").read_text().splitlines()]
    key = lambda r: (r["function"], r["id"])  # noqa: E731
    assert [(key(r), r["responses"], r["score"]) for r in sorted(by_file, key=key)] == [
        (key(r), r["responses"], r["score"]) for r in sorted(rows, key=key)
    ]


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_prompt_too_long_for_the_model_fails_that_sample(project, granularity):
    """One prompt of a chunk that does not fit the model fails alone, named by file:line; the chunk's other
    prompts are rolled out and scored; both fixes the message suggests are accepted and work."""
    pytest.importorskip("jax")
    project.file("rewards.py", EXACT.format(rollout=""))
    long = "1" * 55 + "+1="  # 58 bytes + the start token: 59 of tiny-adder's 64 positions
    project.jsonl("prompts.jsonl", [{"id": "long", "prompt": long, "ground_truth": "x"},
                                    {"id": "short", "prompt": "1+1=", "ground_truth": "2"}])  # fmt: skip
    args = ["--reward-samples", "prompts.jsonl", "--reward-model", "tiny-adder", "-k", "nonempty",
            "--reward-granularity", granularity]  # fmt: skip
    result = project.run_subprocess(*args, "--reward-rollout-max-new-tokens", "8")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*rollout failed: prompts.jsonl:1: the prompt has 59 tokens; with max_new_tokens=8 it needs 67 positions "
            "but the model's block_size is 64. Shorten the prompt, or lower max_new_tokens "
            "(@pytest.mark.reward(rollout={'max_new_tokens': N}) or --reward-rollout-max-new-tokens N)*"
        ]
    )
    assert "prompts.jsonl:2" not in result.stdout.str()  # the short prompt of the same chunk was scored
    if granularity == "sample":
        result.assert_outcomes(passed=1, failed=1)
    # the two fixes the message names
    assert project.run_subprocess(*args, "--reward-rollout-max-new-tokens", "4").ret == 0
    project.file("rewards.py", EXACT.format(rollout="").replace(
        "@reward_function\n    def nonempty", '@pytest.mark.reward(rollout={"max_new_tokens": 4})\n    @reward_function\n    def nonempty'))  # fmt: skip
    assert project.run_subprocess(*args, "--reward-rollout-max-new-tokens", "8").ret == 0


def _heldout():
    from pytest_reward.jax.zoo import resolve_model

    return resolve_model("tiny-adder") / "heldout.jsonl"
