"""Stored runs that cannot fool a comparison: tampered files are refused naming the entry, runs that no longer pair
say so (and fail under --reward-compare-strict), concurrent saves each get a run of their own, and a run is never
compared with itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import msgs

EXACT = """
    from pytest_reward import reward_function

    @reward_function
    def exact(messages, ground_truth, **kwargs):
        ok = messages[-1]["content"].strip() == ground_truth
        return {"score": float(ok), "reason": "equal" if ok else "differs"}
"""

ROWS = [{"id": f"q{i}", "messages": msgs(f"{i}+{i}?", str(2 * i)), "ground_truth": str(2 * i)} for i in range(4)]
WRONG = [dict(row, messages=msgs(row["messages"][0]["content"], "no idea")) for row in ROWS]
RULES = "--reward-compare-fail=mean:0.1,pass_rate:0.1,sample:0.1"


def stored_path(project, name: str) -> Path:
    (path,) = (project.path / ".reward").glob(f"*_{name}.json")
    return path


@pytest.fixture
def saved(project):
    """A project whose stored run ``base`` scored every sample 1; the samples now all score 0."""
    project.file("rewards.py", EXACT)
    project.jsonl("s.jsonl", ROWS)
    assert project.run("--reward-samples", "s.jsonl", "--reward-save=base").ret == 0
    project.jsonl("s.jsonl", WRONG)
    return project


def test_the_untampered_run_fails_the_rules(saved):
    result = saved.run("--reward-samples", "s.jsonl", "--reward-compare=base", RULES)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL exact on s.jsonl: mean dropped 1*"])


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("score", float("nan"), "score nan is not a finite number"),
        ("score", float("inf"), "score inf is not a finite number"),
        ("score", "1.0", "score '1.0' is not a finite number"),
        ("score", True, "score True is not a finite number"),
        (None, "garbage", "not an object (str)"),
        ("line", "one", "line 'one' is not a int"),
    ],
)
def test_a_tampered_stored_run_is_a_usage_error_naming_the_entry(saved, field, value, says):
    path = stored_path(saved, "base")
    record = json.loads(path.read_text())
    samples = record["groups"][0]["samples"]
    key = next(k for k, entry in samples.items() if entry["id"] == "q0")
    if field is None:
        samples[key] = value
    else:
        samples[key][field] = value
    path.write_text(json.dumps(record))  # NaN and Infinity as Python's json writes (and reads) them
    result = saved.run("--reward-samples", "s.jsonl", "--reward-compare=base", RULES)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert f"baseline {path}: exact on s.jsonl, sample {key!r}: {says}" in output


def test_a_renamed_function_is_named_and_fails_strict(saved):
    """The function was renamed: nothing pairs. Both groups say so and name the functions on each side; strict
    comparison fails; without strict the run still reports the warning."""
    saved.file("rewards.py", EXACT.replace("def exact(", "def exact_match("))
    saved.jsonl("s.jsonl", ROWS)
    result = saved.run("--reward-samples", "s.jsonl", "--reward-compare=base")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*exact_match on s.jsonl: no group of 0001_base pairs with it: its 4 sample(s) are unpaired "
            "(functions only in this run: exact_match; functions only in 0001_base: exact; renamed?)*",
        ]
    )
    strict = saved.run("--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-compare-strict")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(
        [
            "FAIL only 0 of this run's 4 samples pair with a sample of 0001_base, fewer than half; on one side "
            "only: exact (removed), exact_match (new) (an error under --reward-compare-strict)",
        ]
    )


def test_a_new_function_beside_paired_ones_passes_strict(saved):
    """Adding a function is not a rename: most samples still pair, so strict comparison passes; the new group
    says it pairs nothing."""
    saved.jsonl("s.jsonl", ROWS)
    saved.file(
        "rewards.py",
        EXACT
        + """
    @reward_function
    def length(messages, **kwargs):
        return {"score": 1.0, "reason": "fine"}
""",
    )
    saved.jsonl("t.jsonl", ROWS[:1])
    result = saved.run(
        "--reward-samples", "s.jsonl", "--reward-compare=base", "--reward-compare-strict", RULES
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*length on s.jsonl: no group of 0001_base pairs with it*"])


SAVE = """
import sys
from pathlib import Path
from pytest_reward.run.baseline import Storage, run_record
record = run_record([], {"commit": None, "tag": sys.argv[2]})
record["groups"] = [{"function": "f", "file": "s.jsonl", "samples": {
    f"k{i}": {"id": None, "line": i, "response": None, "score": 1.0, "verdict": "PASS"} for i in range(2000)}}]
print(Storage(Path(sys.argv[1])).save(record, sys.argv[3]).name)
"""


@pytest.mark.parametrize("names", [["same"] * 5, ["a", "b", "c", "d", "e"]])
def test_concurrent_saves_get_distinct_complete_runs(tmp_path, names):
    storage = tmp_path / ".reward"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SAVE, str(storage), str(i), name], stdout=subprocess.PIPE, text=True
        )
        for i, name in enumerate(names)
    ]
    written = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(written)) == 5
    files = sorted(p.name for p in storage.glob("*.json"))
    assert files == sorted(written)
    assert sorted(name[:4] for name in files) == ["0001", "0002", "0003", "0004", "0005"]
    tags = sorted(json.loads((storage / name).read_text())["tag"] for name in files)
    assert tags == ["0", "1", "2", "3", "4"]  # every run complete, none overwritten


def test_compare_refuses_a_run_against_itself(saved):
    result = saved.pytester.run(sys.executable, "-m", "pytest_reward.cli", "compare", "base", "latest")
    assert result.ret == 4
    assert "'base' and 'latest' are the same stored run (0001_base): nothing to compare" in result.stderr.str()
    saved.run("--reward-samples", "s.jsonl", "--reward-save=after")
    assert saved.pytester.run(sys.executable, "-m", "pytest_reward.cli", "compare", "base", "latest").ret == 0
