"""How a comparison pairs samples: samples without ``id`` by what was asked, not by the answer;
rules on the whole group as well as on the paired samples; tolerances that a drop equal to them passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.data.samples import (
    Sample,
    asked,
    asked_json,
    iter_samples,
    parse_record,
    response_hash,
)
from pytest_reward.run.baseline import compare_runs, evaluate_rules, exceeds, parse_rules

from .conftest import msgs

# score = the fraction of the ground truth's words found in the answer
OVERLAP = """
    from pytest_reward import reward_function

    @reward_function
    def overlap(messages, ground_truth, **kwargs):
        want = set(ground_truth.lower().split())
        got = set(messages[-1]["content"].lower().strip(".").split())
        return {"score": len(want & got) / len(want), "reason": f"{len(want & got)} of {len(want)} words"}
"""

QA = [
    ("What is the capital of France?", "Paris is the capital of France.", "paris is the capital of france"),
    ("Name a primary colour.", "Red is a primary colour.", "red is a primary colour"),
    ("What is 2 + 2?", "2 + 2 is 4", "4"),
    ("Who wrote Hamlet?", "Shakespeare wrote Hamlet.", "shakespeare wrote hamlet"),
    ("What is H2O?", "H2O is water.", "water"),
    ("Largest planet?", "Jupiter is the largest planet.", "jupiter"),
]


def qa_rows(answers: dict[int, str] | None = None, questions: dict[int, str] | None = None) -> list[dict]:
    answers, questions = answers or {}, questions or {}
    return [
        {"messages": msgs(questions.get(i, q), answers.get(i, a)), "ground_truth": gt}
        for i, (q, a, gt) in enumerate(QA)
    ]


def stored(project, name: str) -> dict:
    (path,) = (project.path / ".reward").glob(f"*_{name}.json")
    return json.loads(path.read_text())


# --- the regression: a worse answer is a paired sample that got worse -------------------------------------


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_a_worse_response_is_a_paired_sample_and_fails_the_mean_rule(project, granularity):
    """Before: the changed answer was "1 new / 1 removed", the paired means equal, and the run passed."""
    project.file("rewards.py", OVERLAP)
    project.jsonl("s.jsonl", qa_rows())
    args = ("--reward-samples", "s.jsonl", "--reward-granularity", granularity)
    assert project.run(*args, "--reward-save=base").ret == 0
    project.jsonl("s.jsonl", qa_rows({0: "I do not know."}))
    result = project.run(*args, "--reward-compare=base", "--reward-compare-fail=mean:0.02")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*overlap*s.jsonl*6*0/0*1 of 6*1.000 → 0.833*-0.1667 ?-0.5000, +0.0000?*100.0% → 100.0%*",
            "  overlap on s.jsonl most regressed: line-1 1.000→0.000 (new response)",
            "FAIL overlap on s.jsonl: mean dropped 0.1667 (paired, 6: 1 → 0.8333, 95% CI of Δ *; all samples, "
            "6 → 6: 1 → 0.8333, 95% CI of Δ *) > tolerance 0.02 vs 0001_base",
        ]
    )
    assert "new/removed" in result.stdout.str() and "WARNING" not in result.stdout.str()


def test_the_comparison_pairs_every_sample_and_counts_the_changed_responses(project):
    project.file("rewards.py", OVERLAP)
    project.jsonl("s.jsonl", qa_rows())
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    project.jsonl("s.jsonl", qa_rows({0: "I do not know.", 4: "It is water."}))
    result = project.result("--reward-samples", "s.jsonl", "--reward-compare=base")
    (comp,) = result.comparisons
    assert (comp.n_paired, comp.n_new, comp.n_removed, comp.n_response_changed) == (6, 0, 0, 2)
    assert [(d.id, d.line, d.before, d.after, d.response_changed) for d in comp.regressed] == [
        ("line-1", 1, 1.0, 0.0, True)
    ]
    assert comp.mean_delta["estimate"] == pytest.approx(-1 / 6)
    assert comp.group_mean_delta == comp.mean_delta  # the same samples on both sides


def test_exact_duplicates_pair_in_order(project):
    project.file("rewards.py", OVERLAP)
    row = qa_rows()[0]
    project.jsonl("s.jsonl", [row, row, qa_rows()[1]])
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    project.jsonl("s.jsonl", [row, {**row, "messages": msgs(QA[0][0], "Lyon.")}, qa_rows()[1]])
    result = project.result("--reward-samples", "s.jsonl", "--reward-compare=base")
    (comp,) = result.comparisons
    assert (comp.n_paired, comp.n_new, comp.n_removed, comp.n_response_changed) == (3, 0, 0, 1)
    assert [(d.line, d.delta) for d in comp.regressed] == [(2, -1.0)]


# --- rules on the whole group -------------------------------------------------------------------------------


def test_the_mean_rule_fails_on_the_whole_group_when_the_paired_samples_held(project):
    """New samples that score badly: the paired mean of deltas is 0, the group's mean fell."""
    project.file("rewards.py", OVERLAP)
    project.jsonl("s.jsonl", qa_rows())
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    bad = [{"messages": msgs(f"Question {i}?", "No idea."), "ground_truth": "forty two"} for i in range(3)]
    project.jsonl("s.jsonl", qa_rows() + bad)
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-compare-fail=mean:0.02"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*overlap*s.jsonl*6*3/0*0 of 6*1.000 → 0.667*+0.0000 ?+0.0000, +0.0000?*",
            "  overlap on s.jsonl new: line-7, line-8, line-9",
            "FAIL overlap on s.jsonl: mean dropped 0.3333 (paired, 6: 1 → 1, 95% CI of Δ ?0, 0?; all samples, "
            "6 → 9: 1 → 0.6667, 95% CI of Δ *) > tolerance 0.02 vs 0001_base",
        ]
    )


def group_record(entries: dict[str, tuple[float | None, str]]) -> dict:
    samples = {
        k: {"score": s, "verdict": v, "id": k, "line": i + 1, "response": None}
        for i, (k, (s, v)) in enumerate(entries.items())
    }
    return {
        "format": "pytest-reward-run",
        "version": 2,
        "name": "0001_base",
        "groups": [{"function": "f", "file": "s.jsonl", "samples": samples}],
    }


def test_the_pass_rate_rule_reads_the_whole_group_too():
    base = group_record({f"s{i}": (0.9, "pass") for i in range(10)})
    # the ten paired samples hold; ten new ones fail: the group's pass rate halves
    cur = group_record(
        {**{f"s{i}": (0.9, "pass") for i in range(10)}, **{f"n{i}": (0.1, "fail") for i in range(10)}}
    )
    (comp,) = compare_runs(cur, base)
    assert comp.pass_rate_delta == 0.0 and comp.group_pass_rate_delta == pytest.approx(-0.5)
    (line,) = evaluate_rules([comp], parse_rules(["pass_rate:0.05"]), strict=False)
    assert line == (
        "f on s.jsonl: pass rate dropped 0.5 (paired, 10: 100.0% → 100.0%; all samples, 10 → 20: 100.0% → 50.0%) "
        "> tolerance 0.05 vs 0001_base"
    )
    # strict: the group's interval (paired, new and removed samples resampled) lies below zero
    assert len(evaluate_rules([comp], parse_rules(["pass_rate:0.05"]), strict=True)) == 1
    assert "bootstrap over paired, new and removed samples" in comp.group_mean_delta["method"]


def test_fewer_than_half_paired_warns_and_is_an_error_when_strict(project):
    project.file("rewards.py", OVERLAP)
    project.jsonl("s.jsonl", qa_rows())
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    reworded = {i: QA[i][0] + " Answer in one sentence." for i in range(4)}
    project.jsonl("s.jsonl", qa_rows(questions=reworded))
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare=base")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*overlap*s.jsonl*2*4/4*0 of 2*",
            "WARNING overlap on s.jsonl: only 2 of 6 samples pair with a sample of 0001_base (4 new, 4 removed): "
            "fewer than half*",  # wrapped between words to the terminal's width
            "*did the questions change?",
            "  overlap on s.jsonl new: line-1, line-2, line-3, line-4",
            "  overlap on s.jsonl removed: line-1, line-2, line-3, line-4",
        ]
    )
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-compare-strict")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "FAIL overlap on s.jsonl: only 2 of 6 samples pair with a sample of 0001_base, fewer than half "
            "(an error under --reward-compare-strict)"
        ]
    )
    # half pairing up is enough
    project.jsonl("s.jsonl", qa_rows(questions={i: reworded[i] for i in range(3)}))
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-compare-strict")
    assert result.ret == 0 and "WARNING" not in result.stdout.str()


# --- stored runs of format 1 -------------------------------------------------------------------------------


def test_a_format_1_run_keyed_by_id_is_migrated(project):
    project.file("rewards.py", OVERLAP)
    rows = [{**r, "id": f"q{i}"} for i, r in enumerate(qa_rows())]
    project.jsonl("s.jsonl", rows)
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    (path,) = (project.path / ".reward").iterdir()
    old = json.loads(path.read_text())
    old["version"] = 1
    for group in old["groups"]:
        for entry in group["samples"].values():
            del entry["response"]
    path.write_text(json.dumps(old))
    rows[0]["messages"] = msgs(QA[0][0], "I do not know.")
    project.jsonl("s.jsonl", rows)
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-compare-fail=sample:0.5"
    )
    assert result.ret == 1
    # paired by id; no response hashes in the old file: "–", not "0 of 6"
    result.stdout.fnmatch_lines(
        ["*overlap*s.jsonl*6*0/0*–*", "FAIL overlap on s.jsonl: sample q0 dropped 1 (1 → 0)*"]
    )


# --- tolerances ---------------------------------------------------------------------------------------------

NUMBER = """
    from pytest_reward import reward_function

    @reward_function
    def number(messages, **kwargs):
        return {"score": float(messages[-1]["content"])}
"""


def numbers_project(project, scores: list[float]) -> None:
    project.file("rewards.py", NUMBER)
    project.jsonl(
        "s.jsonl", [{"id": f"s{i:02d}", "messages": msgs("q", str(s))} for i, s in enumerate(scores)]
    )


def test_a_drop_equal_to_the_tolerance_passes(project):
    """Before: 1.0 → 0.7 is a drop of 0.30000000000000004, and failed sample:0.3."""
    numbers_project(project, [1.0, 1.0, 1.0])
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    numbers_project(project, [0.7, 1.0, 1.0])
    args = ("--reward-samples", "s.jsonl", "--reward-compare=base")
    result = project.run(*args, "--reward-compare-fail=sample:0.3,mean:0.1")
    assert result.ret == 0, result.stdout.str()
    numbers_project(project, [0.69, 1.0, 1.0])
    result = project.run(*args, "--reward-compare-fail=sample:0.3")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["FAIL number on s.jsonl: sample s00 dropped 0.31 (1 → 0.69) > tolerance 0.3 vs 0001_base"]
    )


@given(st.floats(0, 1), st.floats(0, 1))
def test_exceeds_is_strict_beyond_rounding(before, tolerance):
    after = before - tolerance
    assert not exceeds(before - after, tolerance)  # equal up to rounding
    assert exceeds(tolerance + 1e-6, tolerance)
    assert not exceeds(tolerance, tolerance) and not exceeds(tolerance - 1e-6, tolerance)


def test_the_sample_rule_names_every_sample_over_the_tolerance(project):
    numbers_project(project, [1.0] * 14)
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    numbers_project(project, [0.5] * 13 + [0.8])
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-compare-fail=sample:0.3"
    )
    assert result.ret == 1
    named = ", ".join(f"s{i:02d} 0.5 (1 → 0.5)" for i in range(10))
    result.stdout.fnmatch_lines(
        [
            f"FAIL number on s.jsonl: 13 samples dropped more than tolerance 0.3 vs 0001_base: {named}, and 3 more"
        ]
    )
    assert "s13" not in result.stdout.str().split("FAIL number", 1)[1]  # dropped 0.2: within the tolerance


# --- the reports say it too ---------------------------------------------------------------------------------


def test_summary_json_report_html_and_github_summary_show_the_pairing(project, monkeypatch):
    project.file("rewards.py", OVERLAP)
    project.jsonl("s.jsonl", qa_rows())
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    project.jsonl(
        "s.jsonl", qa_rows({0: "I do not know."}, questions={i: f"Reworded {i}?" for i in (1, 2, 3, 4)})
    )
    step = project.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-report", "out")
    assert result.ret == 0
    data = json.loads((project.path / "out" / "summary.json").read_text())
    comp = data["groups"][0]["comparison"]
    assert (comp["n_paired"], comp["n_new"], comp["n_removed"], comp["n_response_changed"]) == (2, 4, 4, 1)
    assert comp["group_mean_before"] == 1.0 and comp["group_mean_after"] < 1.0
    assert [r["id"] for r in comp["new_samples"]] == ["line-2", "line-3", "line-4", "line-5"]
    assert comp["regressed"][0]["response_changed"] is True
    (warning,) = data["comparison"]["warnings"]
    assert warning.startswith("overlap on s.jsonl: only 2 of 6 samples pair")
    assert data["comparison"]["pairing"].startswith("by id, else by what was asked")
    html = (project.path / "out" / "report.html").read_text()
    assert "paired samples with a different response" in html and "1 of 2" in html
    assert '<ul class="warnings"><li>WARNING overlap on s.jsonl: only 2 of 6' in html
    assert '<b>line-1</b> <span class="muted">s.jsonl:1 · new response</span>' in html
    md = step.read_text()
    assert "| `overlap` | `s.jsonl` | 2 | 4 / 4 | 1 of 2 | 1.000 → " in md
    assert "- ⚠️ overlap on s\\.jsonl\\: only 2 of 6 samples pair" in md  # escaped: Markdown shows it as is


# --- the key itself ------------------------------------------------------------------------------------------

TEXT = st.text(max_size=20)
ROLE = st.sampled_from(["system", "user", "assistant", "tool"])
MESSAGE = st.fixed_dictionaries({"role": ROLE, "content": TEXT})
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def sample(record: dict) -> Sample:
    return parse_record(record, Path("s.jsonl"), 1)


def answered(history: list[dict], answer: str, **fields) -> dict:
    return {"messages": [*history, {"role": "assistant", "content": answer}], **fields}


@given(st.lists(MESSAGE, max_size=4), TEXT, TEXT, st.none() | TEXT | JSON)
def test_the_key_ignores_the_final_assistant_turn(history, a, b, truth):
    one, two = (
        sample(answered(history, a, ground_truth=truth)),
        sample(answered(history, b, ground_truth=truth)),
    )
    assert one.key == two.key
    assert (one.response_hash == two.response_hash) == (a == b)


@given(st.lists(MESSAGE, min_size=1, max_size=4), st.lists(MESSAGE, min_size=1, max_size=4), TEXT)
def test_the_key_follows_the_conversation(h1, h2, answer):
    one, two = sample(answered(h1, answer)), sample(answered(h2, answer))
    assert (one.key == two.key) == (h1 == h2)


@given(JSON, JSON, st.dictionaries(st.sampled_from(["lang", "tests", "meta"]), JSON, max_size=2), TEXT)
def test_the_key_follows_the_ground_truth_and_the_other_fields(t1, t2, fields, answer):
    history = [{"role": "user", "content": "q"}]
    one, two = (
        sample(answered(history, answer, ground_truth=t1)),
        sample(answered(history, answer, ground_truth=t2)),
    )
    assert (one.key == two.key) == (json.dumps(t1, sort_keys=True) == json.dumps(t2, sort_keys=True))
    plain, extra = sample(answered(history, answer)), sample(answered(history, answer, **fields))
    assert (plain.key == extra.key) == (not fields)


def test_what_the_key_leaves_out():
    history = [{"role": "user", "content": "q"}]
    base = sample(answered(history, "a", ground_truth="x"))
    assert sample(answered(history, "a", ground_truth_for_eval="x")).key == base.key
    assert sample(answered(history, "a", ground_truth="x", expect={"min": 0.5})).key == base.key
    assert (
        sample({"ground_truth": "x", "messages": answered(history, "b")["messages"]}).key == base.key
    )  # key order
    assert sample(answered(history, "a", ground_truth=None)).key != base.key
    assert sample(answered(history, "a")).key != base.key  # no ground truth is not a null one
    assert sample(answered(history, "a", ground_truth="x", id="z")).key == "id:z"
    # a prompt-only sample asks what the answered conversation asked (a file may switch to rollouts)
    assert sample({"messages": history, "ground_truth": "x"}).key == base.key
    assert sample({"messages": history}).response_hash is None
    assert sample({"prompt": "q"}).key != sample({"messages": history}).key


def test_the_key_is_the_same_in_every_process():
    """A fixed value: the scheme must not drift between versions or processes (stored runs pair on it)."""
    s = sample(answered([{"role": "user", "content": "What is 2 + 2?"}], "4", ground_truth="4"))
    assert asked_json(s) == '{"ground_truth":"4","messages":[{"content":"What is 2 + 2?","role":"user"}]}'
    # SHA-1 of those bytes, and of '{"content":"4","role":"assistant"}'
    assert s.key == "q:b9c33767d407435d"
    assert s.response_hash == response_hash([{"role": "assistant", "content": "4"}]) == "7fd77b47300f"


@given(
    st.lists(
        MESSAGE | st.fixed_dictionaries({"role": ROLE, "content": TEXT, "name": TEXT}), min_size=1, max_size=4
    ),
    st.sampled_from([{}, {"ground_truth": None}]) | st.builds(lambda t: {"ground_truth": t}, JSON),
    st.dictionaries(st.sampled_from(["lang", "tests"]), JSON, max_size=1),
)
def test_the_fast_encoding_is_the_canonical_json(messages, truth, fields):
    s = sample({"messages": messages, **truth, **fields})
    assert asked_json(s) == json.dumps(asked(s), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_lone_surrogates_hash(tmp_path):
    s = sample(answered([{"role": "user", "content": "\ud800"}], "\udfff"))
    assert s.key.startswith("q:") and len(s.response_hash) == 12


def test_duplicates_are_numbered_in_file_order(tmp_path):
    path = tmp_path / "s.jsonl"
    rows = [answered([{"role": "user", "content": q}], a) for q, a in ["xa", "xb", "ya", "xa", "xc"]]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    keys = [s.key for s in iter_samples(path)]
    assert keys[1] == keys[0] + "#2" and keys[3] == keys[0] + "#3" and keys[4] == keys[0] + "#4"
    assert "#" not in keys[2]
    assert keys == [s.key for s in iter_samples(path)]  # the same on every read
    assert [s.key for s in iter_samples(path, keys=False)] == [""] * 5


@given(
    st.lists(MESSAGE, min_size=1, max_size=4),
    st.sampled_from([{}, {"ground_truth": "x"}, {"id": "s1"}, {"lang": [1, {"a": None}]}]),
)
def test_keys_taken_while_reading_are_the_samples_own(messages, fields):
    """iter_samples computes keys inline (one pass per line); a sample built elsewhere computes them lazily."""
    import tempfile

    record = {"messages": messages, **fields}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        path.write_text(json.dumps(record) + "\n")
        (read,) = iter_samples(path)
    built = sample(record)
    assert (read.key, read.response_hash) == (built.key, built.response_hash)


# --- the whole group's interval (stats.group_bootstrap_delta) ----------------------------------------------


def test_group_interval_without_unpaired_samples_is_the_paired_one():
    from pytest_reward.judge.stats import group_bootstrap_delta, paired_bootstrap_delta

    rng = np.random.default_rng(1)
    before = rng.uniform(0, 1, 200)
    after = before + rng.normal(-0.05, 0.1, 200)
    (g,) = group_bootstrap_delta(after, before, [], [], (0.99,), seed=3, n_resamples=500)
    p = paired_bootstrap_delta(after, before, 0.99, seed=3, n_resamples=500)
    assert (g.estimate, g.low, g.high, g.method) == (p.estimate, p.low, p.high, p.method)


def test_group_interval_estimate_method_and_seed():
    from pytest_reward.judge.stats import group_bootstrap_delta

    rng = np.random.default_rng(2)
    before, after = rng.uniform(0, 1, 300), rng.uniform(0, 1, 300)
    new, removed = rng.uniform(0, 0.5, 40), rng.uniform(0.5, 1, 10)
    g95, g99 = group_bootstrap_delta(after, before, new, removed, (0.95, 0.99), seed=5, n_resamples=1000)
    expected = np.concatenate([after, new]).mean() - np.concatenate([before, removed]).mean()
    assert g95.estimate == pytest.approx(expected) and g99.estimate == g95.estimate
    assert g99.low <= g95.low <= g95.estimate <= g95.high <= g99.high
    assert g95.method == "bootstrap over paired, new and removed samples (B=1000, seed=5)"
    again = group_bootstrap_delta(after, before, new, removed, (0.95, 0.99), seed=5, n_resamples=1000)
    assert again == [g95, g99]
    # above the exact limit: the normal approximation of the same variance, which the bootstrap agrees with
    (normal,) = group_bootstrap_delta(after, before, new, removed, (0.95,), exact_limit=100)
    assert normal.method.startswith("normal approximation over paired, new and removed samples (n=350 > 100)")
    assert normal.high - normal.low == pytest.approx(g95.high - g95.low, rel=0.15)


def test_group_interval_keeps_the_pairing():
    """Paired samples that move together: resampling them as pairs gives a narrow interval; new and removed
    samples on their own side add their own variance only."""
    from pytest_reward.judge.stats import group_bootstrap_delta

    rng = np.random.default_rng(4)
    base = rng.uniform(0, 1, 500)
    (g,) = group_bootstrap_delta(base + 0.01, base, [0.5], [0.5], seed=0, n_resamples=1000)
    assert g.high - g.low < 0.01  # the two groups bootstrapped apart: about 0.07 wide
    assert g.low > 0
