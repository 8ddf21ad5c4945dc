"""Samples formats are registered in one place: a format registered through ``register_format`` (here a CSV
format written for the test) is read, counted, collected and named in errors like a built-in one, with no other
change to the plugin; unregistered, the same file is not a samples file."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_reward.data.formats import (
    FORMATS,
    SamplesFormat,
    format_for,
    is_samples_file,
    record_samples,
    register_format,
    unregister_format,
)
from pytest_reward.data.samples import Sample, SampleError
from pytest_reward.data.sources import count_samples, read_samples, uses_fields

SCORER = """
    import pytest
    from pytest_reward import EvaluateResult, reward_function

    @pytest.mark.reward(threshold=0.5)
    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        return EvaluateResult(score=float(messages[-1]["content"] == ground_truth))
"""

ROWS = [
    ("q1", "2+2?", "4", "4"),
    ("q2", "3+3?", "6", "6"),
    ("q3", "5+5?", "11", "10"),
]


def _read_csv(path: Path, *, max_line_bytes: int, keys: bool, fields: Any) -> Iterator[Sample | SampleError]:
    """A CSV file with columns id, question, answer, expected: one sample per row."""
    with open(path, newline="", encoding="utf-8") as fh:
        records = (
            (
                row,
                {
                    "id": values["id"],
                    "messages": [
                        {"role": "user", "content": values["question"]},
                        {"role": "assistant", "content": values["answer"]},
                    ],
                    "ground_truth": values["expected"],
                }
                if values.get("question")
                else {"id": values["id"]},
            )
            for row, values in enumerate(csv.DictReader(fh), 1)
        )
        yield from record_samples(path, records, keys=keys)


def _count_csv(path: Path, *, limit: int | None = None) -> int:
    with open(path, encoding="utf-8") as fh:
        return max(sum(1 for _ in fh) - 1, 0)


CSV = SamplesFormat("csv-test", suffixes=(".csv",), read=_read_csv, count=_count_csv)


@pytest.fixture
def csv_format() -> Iterator[SamplesFormat]:
    register_format(CSV)
    try:
        yield CSV
    finally:
        unregister_format(CSV.name)


def _write_csv(path: Path, rows: list[tuple[str, ...]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "question", "answer", "expected"])
        writer.writerows(rows)
    return path


def test_a_registered_format_is_read_counted_and_asked_like_a_builtin(tmp_path, csv_format):
    path = _write_csv(tmp_path / "qa.csv", [*ROWS, ("q4", "", "", "")])
    assert is_samples_file(path) and format_for(path) is csv_format and not uses_fields(path)
    assert count_samples(path) == 4
    *good, bad = list(read_samples(path))
    assert [(s.id, s.ground_truth, s.location) for s in good] == [
        ("q1", "4", "qa.csv:row 1"),
        ("q2", "6", "qa.csv:row 2"),
        ("q3", "10", "qa.csv:row 3"),
    ]
    assert isinstance(bad, SampleError) and bad.location == "qa.csv:row 4" and "missing 'messages'" in bad.message


def test_a_registered_format_is_collected_end_to_end(project, csv_format):
    project.file("rewards.py", SCORER)
    _write_csv(project.path / "qa.csv", ROWS)
    result = project.run("--reward-samples", "qa.csv", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*qa.csv::exact?q1? PASSED*", "*qa.csv::exact?q3? FAILED*"])
    # named as a path argument, too (collected by pytest_collect_file, remembered as an explicit file)
    result = project.run("qa.csv")
    result.assert_outcomes(passed=2, failed=1)


def test_without_registration_the_same_file_is_not_collected(project):
    project.file("rewards.py", SCORER)
    _write_csv(project.path / "qa.csv", ROWS)
    result = project.run("qa.csv")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: not found: *qa.csv"])  # pytest's own: nothing collects it


def test_file_granularity_counts_with_the_format(project, csv_format):
    project.file("rewards.py", SCORER)
    _write_csv(project.path / "qa.csv", ROWS)
    # three rows, over a cap of two: one item for the file
    result = project.run("--reward-samples", "qa.csv", "-o", "reward_max_items_per_file=2", "-v")
    result.stdout.fnmatch_lines(["*qa.csv::exact FAILED*"])
    result.assert_outcomes(failed=1)


def test_registration_refuses_a_taken_name_or_suffix(csv_format):
    with pytest.raises(ValueError, match=r"\.csv already belongs to format 'csv-test'"):
        register_format(SamplesFormat("other", suffixes=(".csv",), read=_read_csv, count=_count_csv))
    with pytest.raises(ValueError, match="named 'csv-test' is already registered"):
        register_format(SamplesFormat("csv-test", suffixes=(".tsv",), read=_read_csv, count=_count_csv))
    with pytest.raises(ValueError, match="give suffixes, read and count"):
        SamplesFormat("half", suffixes=(".half",))
    with pytest.raises(KeyError, match="no samples format named 'nothing'"):
        unregister_format("nothing")
    assert [f.name for f in FORMATS].count("csv-test") == 1


def test_the_longest_suffix_wins_and_unknown_names_read_as_jsonl(csv_format):
    gz = SamplesFormat("csv-gz", suffixes=(".csv.gz",), read=_read_csv, count=_count_csv)
    register_format(gz)
    try:
        assert format_for("a.csv.gz") is gz and format_for("a.csv") is csv_format
    finally:
        unregister_format("csv-gz")
    assert format_for("notes.txt").name == "jsonl" and not is_samples_file("notes.txt")


def _csv_shards(directory: Path) -> list[Path] | None:
    """A directory with a ``shards.txt`` listing its CSV files."""
    index = directory / "shards.txt"
    return [directory / name for name in index.read_text().split()] if index.is_file() else None


def test_a_registered_directory_format_stands_for_its_files(project, csv_format):
    project.file("rewards.py", SCORER)
    (project.path / "qa").mkdir()
    _write_csv(project.path / "qa" / "b.csv", ROWS[2:])
    _write_csv(project.path / "qa" / "a.csv", ROWS[:2])
    result = project.run("--reward-samples", "qa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # not yet a samples directory
    (project.path / "qa" / "shards.txt").write_text("a.csv\nb.csv\n")
    register_format(SamplesFormat("csv-shards", files=_csv_shards))
    try:
        result = project.run("--reward-samples", "qa", "-v")
    finally:
        unregister_format("csv-shards")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*qa/a.csv::exact?q1? PASSED*", "*qa/b.csv::exact?q3? FAILED*"])


@pytest.mark.parametrize(("value", "what"), [("data.parquet", "a samples file"), ("qa.csv", "a samples file")])
def test_an_optional_value_that_names_any_samples_format_is_a_usage_error(project, csv_format, value, what):
    """Regression: only ``.jsonl`` was recognised, so ``--reward-save data.parquet`` named the run "data.parquet"
    and tested nothing."""
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [{"messages": [{"role": "user", "content": "q"}], "ground_truth": "a"}])
    result = project.run("--reward-samples", "s.jsonl", "--reward-save", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --reward-save {value}: *but that is {what} to test.*"])
