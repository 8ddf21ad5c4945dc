"""Preference pairs as tests of any reward function (issue 32, part 1): a line with ``chosen`` and ``rejected`` is one
test, "the better answer must score higher", in both granularities and under xdist, gated by ``pair_accuracy``,
``subset_accuracy`` and ``mean_margin``, reported with accuracy per subset and the margins."""

from __future__ import annotations

import json

import pytest

from pytest_reward.judge.stats import wilson_interval

# score = the number written in the response; "boom" raises; "nan" is not a valid score.
NUMBER = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    @pytest.mark.reward({marker})
    @reward_function
    def number(messages, **kwargs):
        text = messages[-1]["content"]
        if text == "boom":
            raise ZeroDivisionError("the reward cannot read boom")
        return EvaluateResult(score=float(text), reason=f"read {{text}}")
"""

GRANULARITIES = [
    pytest.param(("--reward-granularity", "sample"), id="sample"),
    pytest.param(("--reward-granularity", "file"), id="file"),
    pytest.param(("--reward-granularity", "sample", "-n", "2"), id="sample-xdist"),
    pytest.param(("--reward-granularity", "file", "-n", "2"), id="file-xdist"),
]
EXECUTORS = [  # a pair's responses are scored in order by every executor, and folded back into the pair
    pytest.param(("--reward-granularity", "file", "--reward-workers", "2"), id="file-threads"),
    pytest.param(
        ("--reward-granularity", "file", "--reward-executor", "process", "--reward-workers", "2"),
        id="file-process",
    ),
]


def pair(
    chosen: str, rejected: str | list[str], subset: str | None = None, **more: object
) -> dict[str, object]:
    row: dict[str, object] = {"prompt": "Which is better?", "chosen": chosen, "rejected": rejected, **more}
    if subset is not None:
        row["subset"] = subset
    return row


def write(project, marker: str, rows: list[object], name: str = "pairs.jsonl") -> None:
    project.file("rewards.py", NUMBER.format(marker=marker))
    project.jsonl(name, rows)


def summary(project) -> dict[str, object]:
    return json.loads((project.path / "out" / "summary.json").read_text())


# 3 right pairs in "chat" (one best-of-n), 1 wrong in "safety", 1 right in "safety"
ROWS = [
    pair("0.9", "0.1", "chat", id="c1"),
    pair("0.8", "0.3", "chat", id="c2"),
    pair("0.7", ["0.1", "0.2", "0.3"], "chat", id="c3"),
    pair("0.2", "0.6", "safety", id="s1"),
    pair("0.9", "0.4", "safety", id="s2"),
]


@pytest.mark.parametrize("args", GRANULARITIES + EXECUTORS)
def test_accuracy_per_subset_in_every_granularity(project, args):
    write(project, "pair_accuracy=0.7", ROWS)
    result = project.run("--reward-samples", "pairs.jsonl", "--reward-report", "out", *args)
    assert result.ret == 0, result.stdout.str()
    low, high = wilson_interval(4, 5).low, wilson_interval(4, 5).high
    result.stdout.fnmatch_lines(
        [
            f"number on pairs.jsonl: pair accuracy 0.800 [{low:.3f}, {high:.3f}] (4 of 5 pairs; 1 best-of-n)",
            "  subset  pairs  accuracy [95% CI]",
            "  chat        3  1.000 *",
            "  safety      2  0.500 *",
            "  margin (chosen − best rejected): mean 0.360, min -0.400, *max 0.800; 1 negative, 0 zero",
        ]
    )
    group = summary(project)["groups"][0]
    p = group["summary"]["preference"]
    assert (p["n"], p["credit"], p["accuracy"]) == (5, 4.0, 0.8)
    assert {name: (c["n"], c["accuracy"]) for name, c in p["subsets"].items()} == {
        "chat": (3, 1.0),
        "safety": (2, 0.5),
    }
    assert p["ci"]["method"] == "Wilson score"
    assert group["verdict"] == "PASS"
    if "sample" in args:  # the wrong pair is left to the gate, as a threshold miss is to pass_rate
        result.stdout.fnmatch_lines(["*4 passed, 1 ranked wrong*"])


@pytest.mark.parametrize("args", GRANULARITIES)
def test_the_gates_fail_with_their_intervals(project, args):
    marker = (
        "pair_accuracy=0.9, subset_accuracy={'safety': 0.9, 'chat': 0.6}, mean_margin=0.5, confidence=0.9"
    )
    write(project, marker, ROWS)
    result = project.run("--reward-samples", "pairs.jsonl", *args)
    assert result.ret == 1
    acc, chat, safety = wilson_interval(4, 5, 0.9), wilson_interval(3, 3, 0.9), wilson_interval(1, 2, 0.9)
    assert chat.low < 0.6  # chat is right on every pair, but 3 pairs at 90 % do not show 0.6
    lines = [line for line in result.stdout.lines if line.startswith("FAIL number")]
    assert lines[:3] == [
        f"FAIL number on pairs.jsonl: pair_accuracy 0.8 (CI lower bound {acc.low:.4g}, 90% Wilson score) < 0.9",
        f"FAIL number on pairs.jsonl: subset_accuracy(chat) 1 (CI lower bound {chat.low:.4g}, 90% Wilson score) "
        "< 0.6",
        f"FAIL number on pairs.jsonl: subset_accuracy(safety) 0.5 (CI lower bound {safety.low:.4g}, 90% Wilson "
        "score) < 0.9",
    ]
    assert lines[3].startswith("FAIL number on pairs.jsonl: mean margin 0.36 (CI lower bound ")
    assert len(lines) == 4


def test_gates_pass_and_a_missing_subset_fails_naming_the_subsets(project):
    write(project, "pair_accuracy=0.8, subset_accuracy={'chat': 1.0}, mean_margin=0.3", ROWS)
    assert project.run("--reward-samples", "pairs.jsonl").ret == 0
    write(project, "subset_accuracy={'safty': 0.5}", ROWS)
    result = project.run("--reward-samples", "pairs.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "FAIL number on pairs.jsonl: subset_accuracy(safty) ≥ 0.5 failed: no pairs of subset 'safty' in this file "
            "(its subsets: chat, safety)"
        ]
    )


def test_gates_of_one_kind_of_file_say_nothing_of_the_other(project):
    """A function meets a samples file and a preference file: mean/threshold gate the samples, pair_accuracy the
    pairs; neither is judged on the other's file."""
    write(project, "threshold=0.5, mean=0.6, pair_accuracy=0.5", ROWS)
    project.jsonl(
        "samples.jsonl",
        [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "0.7"}]}],
    )
    result = project.run(
        "--reward-samples", "pairs.jsonl", "--reward-samples", "samples.jsonl", "--reward-report", "out"
    )
    assert result.ret == 0, result.stdout.str()
    gates = {g["file"]: [x["gate"] for x in g["gates"]] for g in summary(project)["groups"]}
    assert gates == {"pairs.jsonl": ["pair_accuracy"], "samples.jsonl": ["mean"]}


def test_without_a_preference_gate_a_wrong_pair_fails_with_its_panel(project):
    write(project, "", [pair("0.2", "0.6", "safety", id="s1"), pair("0.9", "0.4", id="ok")])
    result = project.run("--reward-samples", "pairs.jsonl", "--reward-granularity", "sample")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "chosen scored 0.2, below rejected at 0.6 (margin -0.4)",
            "  pair       pairs.jsonl:1  [s1]  subset safety",
            "  function   number  (rewards.py:*)",
            "  user       Which is better?",
            "  chosen     score 0.2      0.2",
            "             reason read 0.2",
            "  rejected   score 0.6      0.6",
            "             reason read 0.6",
            "  margin     -0.4 (chosen minus the best rejected score)",
            "  why        chosen scored 0.2, below rejected at 0.6 (margin -0.4)",
        ]
    )
    result = project.run("--reward-samples", "pairs.jsonl", "--reward-granularity", "file")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "1 of 2 pairs failed (number on pairs.jsonl)",
            "  pairs.jsonl:1 [s1]  chosen scored 0.2, below rejected at 0.6 (margin -0.4)",
        ]
    )


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_ties_are_wrong_and_a_best_of_n_tie_at_the_top_earns_1_over_k(project, granularity):
    rows = [
        pair("0.5", "0.50", id="tie"),  # a pair's tie: wrong (RewardBench)
        pair("0.9", ["0.90", "0.1", "0.2"], id="tie2"),  # tie with one of three: 1/2 (RewardBench 2)
        pair("0.9", ["0.90", "0.900", "0.2"], id="tie3"),  # tie with two: 1/3
        pair("0.5", ["0.50"], id="listed"),  # a list of one is best-of-n too: 1/2
    ]
    write(project, "pair_accuracy=0.1", rows)
    result = project.run(
        "--reward-samples", "pairs.jsonl", "--reward-granularity", granularity, "--reward-report", "out"
    )
    assert result.ret == 0
    p = summary(project)["groups"][0]["summary"]["preference"]
    assert p["credit"] == pytest.approx(1 / 2 + 1 / 3 + 1 / 2)
    assert (p["n"], p["n_correct"], p["n_tied"]) == (4, 0, 4)
    assert p["accuracy"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 2) / 4)
    rows_out = {r["id"]: r for r in summary(project)["groups"][0]["samples"]["worst"]}
    assert rows_out["tie"]["pair"]["credit"] == 0.0 and rows_out["tie3"]["pair"]["credit"] == pytest.approx(
        1 / 3
    )
    if granularity == "sample":
        result.stdout.fnmatch_lines(["*4 ranked wrong*"])


BAD = [
    {"prompt": "p", "chosen": "0.9"},
    {"prompt": "p", "rejected": "0.1"},
    {"prompt": "p", "chosen": "0.9", "rejected": []},
    {"prompt": "p", "chosen": "0.9", "rejected": ["0.1", "0.9"]},
    {"prompt": "p", "chosen": "0.9", "rejected": "0.1", "subset": 7},
    {"prompt": "p", "chosen": "0.9", "rejected": ["0.1", {"role": "assistant", "content": "x"}]},
    {"prompt": "p", "chosen": "0.9", "rejected": "0.1", "expect": {"score": 1}},
    {"prompt": "p", "chosen": [{"role": "user", "content": "0.9"}], "rejected": "0.1"},
]
BAD_MESSAGES = [  # (fnmatch: [ ] written ?)
    "preference pair without 'rejected': the line has 'chosen' but no 'rejected'*",
    "preference pair without 'chosen': the line has 'rejected' but no 'chosen'*",
    "'rejected' is an empty list: give one rejected response*",
    "'chosen' is identical to 'rejected?1?': the pair cannot tell a better answer from a worse one",
    "'subset' must be a non-empty string, got a number 7",
    "'rejected' must be a string, a list of messages (one response), or a list of responses*",
    "'expect' is for samples, not preference pairs*",
    "'chosen' must end with an assistant turn (the response scored), got a 'user' turn",
]


@pytest.mark.parametrize("args", GRANULARITIES[:2])
def test_bad_pairs_are_error_items_naming_file_and_line_and_the_rest_run(project, args):
    write(project, "pair_accuracy=0.5", [*BAD, pair("0.9", "0.1", id="good")])
    result = project.run("--reward-samples", "pairs.jsonl", "--reward-report", "out", *args)
    assert result.ret == 1
    assert "INTERNALERROR" not in result.stdout.str()
    # sample granularity: one error item each, "pairs.jsonl:N: message"; file: "pairs.jsonl:N [line-N]  message"
    result.stdout.fnmatch_lines_random([f"*pairs.jsonl:{n}*{m}" for n, m in enumerate(BAD_MESSAGES, 1)])
    if "sample" in args:
        result.assert_outcomes(passed=1, failed=len(BAD))
    p = summary(project)["groups"][0]["summary"]["preference"]
    assert (p["n"], p["credit"]) == (1, 1.0)  # the good pair ran


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_a_reward_that_fails_on_one_response_fails_the_pair_with_the_reason(project, granularity):
    write(
        project,
        "pair_accuracy=0.1",
        [pair("0.9", ["0.1", "boom", "nan"], id="b"), pair("0.9", "0.1", id="ok")],
    )
    result = project.run(
        "--reward-samples", "pairs.jsonl", "--reward-granularity", granularity, "--reward-report", "out"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*the reward failed on the rejected?1? response (and on rejected?2?): ZeroDivisionError: the reward "
            "cannot read boom*"
        ]
    )
    p = summary(project)["groups"][0]["summary"]["preference"]
    assert (p["n"], p["n_errors"], p["credit"]) == (2, 1, 1.0)


def test_the_formats_of_trl_and_rewardbench(project):
    user = {"role": "user", "content": "Say hi"}
    rows = [
        # TRL conversational, explicit prompt: rejected is ONE response (a list of messages)
        {
            "prompt": [user],
            "chosen": [{"role": "assistant", "content": "0.9"}],
            "rejected": [{"role": "assistant", "content": "0.1"}],
        },
        # TRL implicit prompt: the shared turns are the context
        {
            "chosen": [user, {"role": "assistant", "content": "0.8"}],
            "rejected": [user, {"role": "assistant", "content": "0.2"}],
        },
        # best-of-n as a list of lists of messages
        {
            "messages": [user],
            "chosen": [{"role": "assistant", "content": "0.7"}],
            "rejected": [
                [{"role": "assistant", "content": "0.3"}],
                [{"role": "assistant", "content": "0.4"}],
            ],
        },
        # RewardBench: prompt / chosen / rejected / subset, extra columns forwarded as keyword arguments
        {
            "prompt": "Say hi",
            "chosen": "0.6",
            "rejected": "0.5",
            "subset": "chat",
            "chosen_model": "a",
            "rejected_model": "b",
            "id": 30,
        },
    ]
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        SEEN = []

        @pytest.mark.reward(pair_accuracy=1.0)
        @reward_function
        def number(messages, **kwargs):
            assert messages[0] == {"role": "user", "content": "Say hi"}, messages
            assert len(messages) == 2 and messages[-1]["role"] == "assistant", messages
            assert "subset" not in kwargs and "chosen" not in kwargs and "rejected" not in kwargs, kwargs
            return {"score": float(messages[-1]["content"]), "reason": ",".join(sorted(kwargs))}
        """,
    )
    project.jsonl("pairs.jsonl", rows)
    result = project.run(
        "--reward-samples", "pairs.jsonl", "--reward-report", "out", "--reward-granularity", "sample"
    )
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=4)
    p = summary(project)["groups"][0]["summary"]["preference"]
    assert (p["n"], p["credit"], p["n_best_of_n"], list(p["subsets"])) == (4, 4.0, 1, ["chat"])
    rows_out = {r["id"]: r for r in summary(project)["groups"][0]["samples"]["worst"]}
    assert rows_out["30"]["pair"]["reasons"] == ["chosen_model,rejected_model"] * 2


def test_a_parquet_preference_dataset(project):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "prompt": ["a", "b", "c"],
            "chosen": ["0.9", "0.8", "0.1"],
            "rejected": ["0.1", "0.80", "0.5"],
            "subset": ["x", "y", None],
        }
    )
    pq.write_table(table, project.path / "pairs.parquet")
    project.file("rewards.py", NUMBER.format(marker="pair_accuracy=0.5"))
    result = project.run(
        "--reward-samples", "pairs.parquet", "--reward-report", "out", "--reward-granularity", "file"
    )
    assert result.ret == 1  # 1 of 3 right
    result.stdout.fnmatch_lines(["*pair_accuracy 0.3333 < 0.5*"])
    p = summary(project)["groups"][0]["summary"]["preference"]
    assert (p["n"], p["credit"], sorted(p["subsets"])) == (3, 1.0, ["x", "y"])


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_compare_reports_accuracy_per_subset_and_the_flipped_pairs(project, granularity, monkeypatch):
    project.file(
        "rewards.py",
        """
        import os
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(pair_accuracy=0.1)
        @reward_function
        def number(messages, **kwargs):
            x = float(messages[-1]["content"])
            return {"score": 0.0 if os.environ.get("FLIP") and x in (0.7, 0.8) else x}
        """,
    )
    project.jsonl("pairs.jsonl", ROWS)
    args = ("--reward-samples", "pairs.jsonl", "--reward-granularity", granularity)
    assert project.run(*args, "--reward-save", "base").ret == 0
    monkeypatch.setenv("FLIP", "1")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "gh.md"))
    result = project.run(
        *args, "--reward-compare", "base", "--reward-compare-fail", "accuracy:0.2", "--reward-report", "out"
    )
    assert result.ret == 1
    # FLIP scores 0.8 and 0.7 as 0: c2 (0.8 vs 0.3) and c3 (0.7 vs 0.1, 0.2, 0.3) flip right -> wrong
    result.stdout.fnmatch_lines(
        [
            "*number on pairs.jsonl accuracy 80.0% → 40.0% (-40.0%)",
            "*number on pairs.jsonl subset chat: 100.0% → 33.3% (-66.7%; 3 → 3 pairs, 2 flipped, 0 fixed)",
            "*number on pairs.jsonl subset safety: 50.0% → 50.0% (+0.0%; 2 → 2 pairs, 0 flipped, 0 fixed)",
            "*number on pairs.jsonl flipped right → wrong: 2: c2 (line 2 margin 0.5→-0.3), c3 (line 3 margin 0.4→-0.3)",
            "FAIL number on pairs.jsonl: accuracy dropped 0.4 (paired, 5: 80.0% → 40.0%; all samples, 5 → 5: 80.0% → "
            "40.0%) > tolerance 0.2 vs 0001_base; subset 'chat' accuracy dropped 0.6667 (100.0% of 3 → 33.3% of 3 "
            "pairs) > tolerance 0.2 vs 0001_base; 2 pair(s) flipped right → wrong: c2, c3",
        ]
    )
    comparison = summary(project)["groups"][0]["comparison"]["preference"]
    assert [f["id"] for f in comparison["flipped"]] == ["c2", "c3"] and comparison["n_fixed"] == 0
    assert "flipped right → wrong: `c2`, `c3`" in (project.path / "gh.md").read_text()
    html = (project.path / "out" / "report.html").read_text()
    assert "Pairs versus baseline" in html and "Flipped right → wrong (2)" in html
    # the pass_rate rule reads a preference file's accuracy: its drop of 0.4 equals the tolerance, which passes;
    # the accuracy rule also reads each subset's
    assert project.run(*args, "--reward-compare", "base", "--reward-compare-fail", "pass_rate:0.4").ret == 0
    result = project.run(*args, "--reward-compare", "base", "--reward-compare-fail", "accuracy:0.4")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on pairs.jsonl: subset 'chat' accuracy dropped 0.6667 *"])


def test_reports_show_accuracy_subsets_and_margins(project, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "gh.md"))
    write(project, "pair_accuracy=0.5", ROWS)
    assert project.run("--reward-samples", "pairs.jsonl", "--reward-report", "out").ret == 0
    html = (project.path / "out" / "report.html").read_text()
    assert "Preference pairs" in html and "Margins (chosen minus the best rejected score)" in html
    assert "95% CI (Wilson score)" in html and ">safety<" in html
    gh = (project.path / "gh.md").read_text()
    assert "| `number` | `pairs.jsonl` | `safety` | 2 | 0.500 [" in gh
    assert "| `number` | `pairs.jsonl` | 0.360 | -0.400 |" in gh
    margin = summary(project)["groups"][0]["summary"]["preference"]["margin"]
    assert (margin["n"], margin["n_negative"], margin["max"]) == (5, 1, pytest.approx(0.8))


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_probes_mutate_the_chosen_response_scored_once(project, granularity):
    """With probes, each pair's chosen response is probed as a sample: its own score comes from the pair's item
    (not scored again), and the probe mutates it."""
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(pair_accuracy=0.5, probes=["empty"])
        @reward_function
        def number(messages, **kwargs):
            text = messages[-1]["content"]
            with open("calls.txt", "a") as fh:
                fh.write((text if text.strip() else "EMPTY") + "\\n")
            return {"score": float(text) if text.strip() else 0.0}
        """,
    )
    project.jsonl("pairs.jsonl", ROWS)
    result = project.run("--reward-samples", "pairs.jsonl", "--reward-granularity", granularity)
    assert result.ret == 0, result.stdout.str()
    calls = (project.path / "calls.txt").read_text().splitlines()
    assert (
        len(calls) == 2 * 4 + 4 + 5
    )  # every response once (c3 has four), one empty mutation per chosen response
    assert calls.count("EMPTY") == 5


def test_xdist_folds_the_subset_gates_across_workers(project):
    rows = [pair("0.9", "0.1", "a", id=f"a{i}") for i in range(6)] + [
        pair("0.1", "0.9", "b", id=f"b{i}") for i in range(3)
    ]
    write(project, "subset_accuracy={'a': 1.0, 'b': 0.5}", rows)
    result = project.run(
        "--reward-samples",
        "pairs.jsonl",
        "-n",
        "2",
        "--reward-granularity",
        "sample",
        "--reward-report",
        "out",
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL number on pairs.jsonl: subset_accuracy(b) 0 < 0.5"])
    p = summary(project)["groups"][0]["summary"]["preference"]
    assert {k: (v["n"], v["credit"]) for k, v in p["subsets"].items()} == {"a": (6, 6.0), "b": (3, 0.0)}


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_a_batch_mode_reward_scores_a_pairs_responses_in_one_batch(project, granularity):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(pair_accuracy=0.5)
        @reward_function(mode="batch")
        def number(rollouts_messages, **kwargs):
            return [{"score": float(m[-1]["content"])} for m in rollouts_messages]
        """,
    )
    project.jsonl("pairs.jsonl", ROWS)
    result = project.run(
        "--reward-samples", "pairs.jsonl", "--reward-granularity", granularity, "--reward-report", "out"
    )
    assert result.ret == 0, result.stdout.str()
    p = summary(project)["groups"][0]["summary"]["preference"]
    assert (p["n"], p["credit"]) == (5, 4.0)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("pair_accuracy=1.5", "pair_accuracy must be in [[]0, 1], got 1.5"),
        ('subset_accuracy={"safety": 2}', "subset_accuracy[[]'safety'] must be in [[]0, 1], got 2"),
        ('subset_accuracy="safety"', "subset_accuracy*"),
        ('mean_margin="wide"', "mean_margin*"),
    ],
)
def test_a_malformed_preference_gate_is_a_collection_error_naming_it(project, marker, message):
    write(project, marker, [pair("0.9", "0.1", id="p")])
    result = project.run("--reward-samples", "pairs.jsonl")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines([f"@pytest.mark.reward on rewards.py::*: {message}"])
