"""Stored runs, paired comparisons and regression gates."""

from __future__ import annotations

import json
import math
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.cli import main as cli_main
from pytest_reward.errors import BaselineError
from pytest_reward.run.baseline import (
    Storage,
    compare_runs,
    dumps_run,
    evaluate_rules,
    parse_rules,
)

from .conftest import msgs

# score = base value + a shift read from shift.json (the "model change") + small deterministic noise per run.
SHIFTED = """
    import json, pathlib, random
    from pytest_reward import reward_function

    HERE = pathlib.Path(__file__).parent

    @reward_function
    def value(messages, base, **kwargs):
        cfg = json.loads((HERE / "shift.json").read_text())
        sid = messages[0]["content"]
        noise = random.Random(f"{sid}-{cfg['run']}").gauss(0, cfg["noise"])
        return {"score": base + cfg["shift"] + cfg.get("outliers", {}).get(sid, 0.0) + noise}
"""


def shifted_project(project, n=500, *, shift=0.0, noise=0.005, run=0, outliers=None):
    project.file("rewards.py", SHIFTED)
    if not (project.path / "s.jsonl").exists():
        rng = random.Random(42)
        project.jsonl(
            "s.jsonl",
            [
                {"id": f"s{i:03d}", "messages": msgs(f"s{i:03d}", "a"), "base": rng.uniform(0.3, 0.7)}
                for i in range(n)
            ],
        )
    (project.path / "shift.json").write_text(
        json.dumps({"shift": shift, "noise": noise, "run": run, "outliers": outliers or {}})
    )


RULES = "mean:0.02,pass_rate:0.05,sample:0.3"


def test_saved_run_is_plain_diffable_json(project):
    shifted_project(project, n=3)
    result = project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    assert result.ret == 0
    (path,) = (project.path / ".reward").iterdir()
    assert path.name == "0001_base.json"
    text = path.read_text()
    data = json.loads(text)
    assert data["format"] == "pytest-reward-run" and data["version"] == 2 and data["name"] == "0001_base"
    (group,) = data["groups"]
    assert sorted(group["samples"]) == ["id:s000", "id:s001", "id:s002"]
    # every sample keeps a short hash of its response (the answer "a" of every sample here)
    assert len({e["response"] for e in group["samples"].values()}) == 1
    assert len(group["samples"]["id:s000"]["response"]) == 12
    assert group["summary"]["n"] == 3
    # one sample per line
    assert sum(1 for line in text.splitlines() if line.strip().startswith('"id:s0')) == 3
    result.stdout.fnmatch_lines(["reward: stored this run as *0001_base.json"])
    project.run("--reward-samples", "s.jsonl", "--reward-autosave")
    names = sorted(p.name for p in (project.path / ".reward").iterdir())
    assert names[0] == "0001_base.json" and names[1].startswith("0002_nocommit_")


def test_identical_rerun_never_fails(project):
    shifted_project(project)
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    for strict in ([], ["--reward-compare-strict"]):
        result = project.run(
            "--reward-samples", "s.jsonl", "--reward-compare=base", f"--reward-compare-fail={RULES}", *strict
        )
        assert result.ret == 0, result.stdout.str()
        result.stdout.fnmatch_lines(
            ["*compared with stored run 0001_base*", "*value*s.jsonl*500*0/0*+0.0000 ?+0.0000, +0.0000?*"]
        )


@pytest.mark.parametrize("xdist", [False, True])
def test_a_shift_on_500_samples_with_small_noise_fails(project, xdist):
    shifted_project(project, run=0)
    project.run_subprocess("--reward-samples", "s.jsonl", "--reward-save=base")
    shifted_project(project, shift=-0.05, run=1)
    extra = ["-n", "2", "-p", "xdist"] if xdist else []
    result = project.run_subprocess(
        "--reward-samples",
        "s.jsonl",
        "--reward-compare",
        f"--reward-compare-fail={RULES}",
        "--reward-compare-strict",
        *extra,
    )
    assert result.ret == 1
    out = result.stdout.str()
    assert out.count("FAIL value on s.jsonl: mean dropped 0.05") == 1
    assert "sample s" not in out  # no single sample dropped by more than 0.3


def test_a_single_outlier_fails_only_the_sample_rule(project):
    shifted_project(project, run=0)
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    shifted_project(project, run=0, outliers={"s007": -0.9})
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-compare=base", f"--reward-compare-fail={RULES}"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["FAIL value on s.jsonl: sample s007 dropped 0.9 (* → *) > tolerance 0.3 vs 0001_base"]
    )
    assert "mean dropped" not in result.stdout.str() and "pass rate dropped" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*most regressed: s007*"])


def test_new_and_removed_samples_are_reported(project):
    shifted_project(project, n=5)
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    lines = (project.path / "s.jsonl").read_text().splitlines()
    (project.path / "s.jsonl").write_text("\n".join([*lines[1:], lines[0].replace("s000", "s999")]) + "\n")
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-report", "out")
    result.stdout.fnmatch_lines(["*value*s.jsonl*4*1/1*"])
    result.stdout.fnmatch_lines(["  value on s.jsonl new: s999", "  value on s.jsonl removed: s000"])
    comp = json.loads((project.path / "out" / "summary.json").read_text())["groups"][0]["comparison"]
    assert (comp["n_paired"], comp["n_new"], comp["n_removed"]) == (4, 1, 1)
    assert [(r["id"], r["line"]) for r in comp["new_samples"]] == [("s999", 5)]
    assert [(r["id"], r["line"]) for r in comp["removed_samples"]] == [("s000", 1)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "*baseline *0001_x.json: corrupt JSON*"),
        ('{"format": "something-else"}', "*baseline *0001_x.json: not a pytest-reward stored run*"),
        (
            '{"format": "pytest-reward-run", "version": 99, "groups": []}',
            "*baseline *0001_x.json: format version 99 is not supported*",
        ),
        (
            '{"format": "pytest-reward-run", "version": 2, "groups": [{"function": "f"}]}',
            '*baseline *0001_x.json: malformed "groups"*',
        ),
        (
            '{"format": "pytest-reward-run", "version": 1, "groups": [{"function": "value", "file": "s.jsonl", '
            '"samples": {"sha1:0123456789abcdef": {"score": 0.5, "verdict": "pass", "id": "line-1", "line": 1}}}]}',
            "*baseline *0001_x.json: stored by an earlier pytest-reward (stored-run format 1), which keyed 1 "
            "sample(s) without an id by their whole content*Store the baseline again*",
        ),
    ],
)
def test_unusable_baseline_is_a_usage_error_naming_the_file(project, content, message):
    shifted_project(project, n=2)
    (project.path / ".reward").mkdir()
    (project.path / ".reward" / "0001_x.json").write_text(content)
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare=x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_missing_baselines_are_usage_errors(project):
    shifted_project(project, n=2)
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reward-compare latest: no stored runs in *.reward (save one first*"])
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare", "nope/base.json")
    result.stderr.fnmatch_lines(["*--reward-compare nope/base.json: file not found*"])
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    result = project.run("--reward-samples", "s.jsonl", "--reward-compare=other")
    result.stderr.fnmatch_lines(["*--reward-compare other: no stored run matches in *(latest: 0001_base)*"])


@pytest.mark.parametrize("rules", ["mean", "median:0.1", "mean:-1", "mean:abc"])
def test_bad_compare_rules_are_usage_errors(project, rules):
    shifted_project(project, n=2)
    result = project.run("--reward-samples", "s.jsonl", f"--reward-compare-fail={rules}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reward-compare-fail*"])


def test_compare_command_between_two_stored_runs(project, capsys):
    shifted_project(project, run=0)
    project.run("--reward-samples", "s.jsonl", "--reward-save=before")
    shifted_project(project, shift=-0.05, run=1)
    project.run("--reward-samples", "s.jsonl", "--reward-save=after")
    storage = str(project.path / ".reward")
    assert cli_main(["compare", "before", "after", "--storage", storage, "--fail", "mean:0.02"]) == 1
    out = capsys.readouterr().out
    assert "0002_after vs 0001_before" in out and "FAIL value on s.jsonl: mean dropped 0.05" in out
    capsys.readouterr()
    # a run compared with itself would pass every rule: refused
    assert cli_main(["compare", "before", "before", "--storage", storage, "--fail", "mean:0.02"]) == 4
    assert "are the same stored run (0001_before)" in capsys.readouterr().err
    assert cli_main(["compare", "before", "missing", "--storage", storage]) == 4
    assert "no stored run matches" in capsys.readouterr().err


# --- unit level --------------------------------------------------------------------------------------


def record(
    scores: dict[str, float | None], verdicts: dict[str, str] | None = None, name: str = "0001_base"
) -> dict:
    verdicts = verdicts or {}
    samples = {
        k: {
            "score": v,
            "verdict": verdicts.get(k, "pass" if v is not None else "fail"),
            "id": k,
            "line": i + 1,
            "response": None,
        }
        for i, (k, v) in enumerate(scores.items())
    }
    return {
        "format": "pytest-reward-run",
        "version": 2,
        "name": name,
        "groups": [{"function": "f", "file": "s.jsonl", "samples": samples}],
    }


def test_paired_deltas_known_case():
    base = record({"a": 0.5, "b": 0.7, "c": 0.9, "gone": 0.1})
    cur = record({"a": 0.4, "b": 0.7, "c": 1.0, "new": 0.3})
    (comp,) = compare_runs(cur, base)
    assert (comp.n_paired, comp.n_new, comp.n_removed) == (3, 1, 1)
    assert comp.mean_before == pytest.approx(0.7) and comp.mean_after == pytest.approx(0.7)
    assert comp.mean_delta["estimate"] == pytest.approx(0.0, abs=1e-12)
    assert comp.mean_delta["low"] <= 0 <= comp.mean_delta["high"]
    assert [(d.key, round(d.delta, 6)) for d in comp.regressed] == [("a", -0.1)]
    assert [(d.key, round(d.delta, 6)) for d in comp.improved] == [("c", 0.1)]


def test_errored_samples_count_as_the_lowest_score():
    (comp,) = compare_runs(record({"a": 0.5, "b": 0.2}), record({"a": None, "b": 0.2}))
    # fill = min(0, lowest seen) = 0: a went 0 -> 0.5
    assert comp.regressed == [] and comp.improved[0].before == 0.0 and comp.improved[0].after == 0.5


def test_strict_needs_the_interval_below_zero():
    rng = random.Random(0)
    base = {f"s{i}": rng.uniform(0, 1) for i in range(8)}
    # a noisy drop of 0.05 on 8 samples: the point estimate is below -0.02 but the interval straddles 0
    deltas = [-0.5, 0.4, -0.3, 0.35, -0.2, 0.1, -0.1, -0.15]
    cur = {k: v + d for (k, v), d in zip(base.items(), deltas, strict=True)}
    comps = compare_runs(record(cur), record(base))
    rules = parse_rules(["mean:0.02"])
    assert comps[0].mean_delta["estimate"] == pytest.approx(-0.05)
    assert comps[0].mean_delta["high"] > 0
    assert len(evaluate_rules(comps, rules, strict=False)) == 1
    assert evaluate_rules(comps, rules, strict=True) == []


def test_a_run_where_every_sample_errored_fails_every_rule():
    base = record({f"s{i}": 0.8 for i in range(20)})
    cur = record({f"s{i}": None for i in range(20)})
    comps = compare_runs(cur, base)
    failures = evaluate_rules(comps, parse_rules([RULES]), strict=True)
    assert len(failures) == 3


def test_storage_numbering_and_resolution(tmp_path):
    storage = Storage(tmp_path / ".reward")
    p1 = storage.save(record({"a": 0.5}), "main")
    p2 = storage.save(record({"a": 0.6}), "feature")
    p3 = storage.save(record({"a": 0.7}), "main")
    assert [p.name for p in (p1, p2, p3)] == ["0001_main.json", "0002_feature.json", "0003_main.json"]
    assert storage.resolve("latest") == p3 and storage.resolve("main") == p3 and storage.resolve("2") == p2
    assert storage.resolve(str(p1)) == p1
    assert storage.load(p2)["groups"][0]["samples"]["a"]["score"] == 0.6
    with pytest.raises(BaselineError, match="use letters"):
        storage.save(record({"a": 0.5}), "../escape")


def test_dumps_run_round_trips():
    data = record({"b": 0.5, "a": None})
    assert json.loads(dumps_run(data)) == data


_usual_entry = st.fixed_dictionaries(
    {
        "id": st.text(),
        "line": st.integers(1, 10**9),
        "score": st.none() | st.floats(allow_nan=False, allow_infinity=False),
        "verdict": st.sampled_from(["pass", "below", "fail"]),
        "response": st.none() | st.text(),
    }
)
# entries off the usual shape: a non-finite or integer score, a missing or an extra field, other types
_other_entry = st.fixed_dictionaries(
    {
        "id": st.text() | st.integers(),
        "line": st.integers(1, 10**9) | st.none(),
        "score": st.sampled_from([float("inf"), float("-inf"), 1, True]) | st.floats(),
        "verdict": st.text(max_size=4),
    },
    optional={"response": st.text() | st.integers(), "extra": st.text()},
)


@given(st.dictionaries(st.text(), _usual_entry | _other_entry, max_size=4))
def test_a_stored_run_writes_each_sample_as_plain_json_on_its_line(samples):
    """Every sample entry of a stored run is the entry as ``json.dumps`` writes it (sorted keys, one line), under
    its key, whatever its shape, and the whole text reads back as the record."""
    data = {"format": "pytest-reward-run", "groups": [{"function": "f", "samples": samples}]}
    text = dumps_run(data)
    lines = [line.strip(" ").rstrip(",") for line in text.split("\n")]  # keys may hold other line breaks
    for key, entry in samples.items():
        dumped = (
            f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(entry, sort_keys=True, ensure_ascii=False)}"
        )
        assert dumped in lines
    finite = all(not isinstance(e["score"], float) or math.isfinite(e["score"]) for e in samples.values())
    if finite:  # NaN is not equal to itself: the round trip is checked where it can be
        assert json.loads(text) == data


def test_a_session_failed_only_by_a_comparison_ends_on_a_red_line_naming_it(project):
    shifted_project(project, n=20, run=0)
    project.run("--reward-samples", "s.jsonl", "--reward-save=base")
    shifted_project(project, n=20, run=0, outliers={"s007": -0.9})
    result = project.run(
        "--reward-samples",
        "s.jsonl",
        "--reward-compare=base",
        f"--reward-compare-fail={RULES}",
        "--color=yes",
    )
    assert result.ret == 1
    last = result.stdout.lines[-1]
    assert last.startswith("\x1b[31m") and re.search(r"\[1m\d+ comparisons? failed\x1b\[0m", last), repr(last)
