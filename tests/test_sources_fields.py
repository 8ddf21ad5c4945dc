"""The field mapping in the marker: ``@pytest.mark.reward(sample_fields={target: "column.path"})``
maps a dataset file's columns for that function, replacing ini ``reward_sample_fields`` for it; the file is parsed
once per distinct mapping, a row one function cannot read is that function's ``file:row N`` error item, and the
other functions (and rows) still run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.data.sources import fields_key, parse_fields
from pytest_reward.errors import GateError
from pytest_reward.judge.gates import validate_marker

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

REWARDS = """
    import json, os, pathlib
    import pytest
    from pytest_reward import EvaluateResult, reward_function

    def _log(name, messages, ground_truth, kwargs):
        with open("calls.jsonl", "a") as f:
            f.write(json.dumps([name, messages[-1]["content"], ground_truth, sorted(kwargs)]) + "\\n")

    @reward_function
    def plain(messages, ground_truth=None, **kwargs):
        _log("plain", messages, ground_truth, kwargs)
        return EvaluateResult(score=float(messages[-1]["content"] == ground_truth))

    @pytest.mark.reward(sample_fields={"prompt": "question", "response": "answer_b", "ground_truth": "extra.gold"})
    @reward_function
    def picky(messages, ground_truth=None, **kwargs):
        _log("picky", messages, ground_truth, kwargs)
        return EvaluateResult(score=float(messages[-1]["content"] == ground_truth))
"""

ROWS = [
    {"question": "2+2?", "answer_a": "4", "answer_b": "4", "meta": {"gold": "4"}, "extra": {"gold": "4"}},
    {"question": "3+3?", "answer_a": "6", "answer_b": "5", "meta": {"gold": "6"}, "extra": None},
    {"question": "1+1?", "answer_a": "3", "answer_b": "2", "meta": {"gold": "2"}, "extra": {"gold": "2"}},
]
INI = "[pytest]\nreward_sample_fields = prompt=question response=answer_a ground_truth=meta.gold\n"


def _calls(project) -> list[list]:
    import json

    path = project.path / "calls.jsonl"
    out = [json.loads(line) for line in path.read_text().splitlines()]
    path.unlink()
    return out


@pytest.fixture
def mapped(project):
    project.file("rewards.py", REWARDS)
    project.file("pytest.ini", INI)
    pq.write_table(pa.Table.from_pylist(ROWS), project.path / "d.parquet")
    return project


def test_the_marker_mapping_wins_for_its_function_and_the_ini_one_holds_for_the_others(mapped):
    result = mapped.run("d.parquet", "--reward-threshold", "0.5", "-v", "-rf")
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*d.parquet::plain?row-1? PASSED*",
            "*d.parquet::plain?row-2? PASSED*",
            "*d.parquet::plain?row-3? FAILED*",
            "*d.parquet::picky?row-2? FAILED*",  # a row that cannot be read comes first, as for every file
            "*d.parquet::picky?row-1? PASSED*",
            "*d.parquet::picky?row-3? PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(["*d.parquet:row 2: extra is null, so 'extra.gold' is missing*"])
    calls = _calls(mapped)
    # plain: answer_a against meta.gold, the columns the ini mapping leaves forwarded as keywords
    assert [c for c in calls if c[0] == "plain"] == [
        ["plain", "4", "4", ["answer_b", "extra"]],
        ["plain", "6", "6", ["answer_b", "extra"]],
        ["plain", "3", "2", ["answer_b", "extra"]],
    ]
    # picky: answer_b against extra.gold (row 2 could not be read for it, so it was never called on it)
    assert [c for c in calls if c[0] == "picky"] == [
        ["picky", "4", "4", ["answer_a", "meta"]],
        ["picky", "2", "2", ["answer_a", "meta"]],
    ]


def test_file_granularity_reads_each_function_s_mapping_too(mapped):
    result = mapped.run("d.parquet", "--reward-threshold", "0.5", "--reward-granularity", "file", "-rf")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*1 of 3 samples failed (plain on d.parquet)*",
            "*1 of 3 samples failed (picky on d.parquet)*",
        ]
    )
    assert "extra is null, so 'extra.gold' is missing" in result.stdout.str()
    calls = _calls(mapped)
    assert sorted(c[1] for c in calls if c[0] == "picky") == ["2", "4"]
    assert sorted(c[1] for c in calls if c[0] == "plain") == ["3", "4", "6"]


def test_a_module_pytestmark_maps_every_function_and_one_mapping_means_one_error_item(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import EvaluateResult, reward_function

        pytestmark = pytest.mark.reward(sample_fields="prompt=question response=answer_b ground_truth=extra.gold")

        @reward_function
        def plain(messages, ground_truth=None, **kwargs):
            return EvaluateResult(score=float(messages[-1]["content"] == ground_truth))

        @reward_function
        def other(messages, ground_truth=None, **kwargs):
            return EvaluateResult(score=float(messages[-1]["content"] == ground_truth))
        """,
    )
    project.file("pytest.ini", INI)
    pq.write_table(pa.Table.from_pylist(ROWS), project.path / "d.parquet")
    result = project.run("d.parquet", "--reward-threshold", "0.5", "-v")
    # both functions read answer_b against extra.gold; row 2 is one error item for both, as with the ini mapping
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*d.parquet::row-2 FAILED*"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"ground_truth": 3}, "sample_fields must be a dict {target: *got 'ground_truth': 3"),
        (["messages=prompt"], "sample_fields must be a dict*got list*"),
        ({"messages": "a", "prompt": "b"}, "*sample_fields: map either 'messages' or 'prompt', not both"),
        ({"ground_truth": "meta..gold"}, "*sample_fields: 'ground_truth=meta..gold' is not TARGET=column*"),
        ({"ground-truth": "gold"}, "*sample_fields: target 'ground-truth' is not a name*"),
        ({"ground truth": "gold"}, "*'ground truth': 'gold' is not a target and a column path"),
    ],
)
def test_an_invalid_marker_mapping_is_a_collection_error_naming_the_function(project, value, message):
    project.file(
        "rewards.py",
        f"""
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(sample_fields={value!r})
        @reward_function
        def picky(messages, **kwargs):
            return {{"score": 1.0}}
        """,
    )
    pq.write_table(pa.Table.from_pylist(ROWS), project.path / "d.parquet")
    result = project.run("d.parquet")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*@pytest.mark.reward on rewards.py::picky: {message}"])


# --- the marker's form and the ini's are one mapping -------------------------------------------------------------

_NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
_PATH = st.lists(_NAME, min_size=1, max_size=3).map(".".join)


@given(st.dictionaries(_NAME, _PATH, max_size=5))
def test_the_marker_dict_and_the_ini_entries_give_the_same_mapping_or_the_same_error(mapping):
    entries = [f"{t}={p}" for t, p in mapping.items()]
    try:
        expected = parse_fields(entries, "X")
    except ValueError as exc:
        with pytest.raises(GateError, match="map either 'messages' or 'prompt'"):
            validate_marker((), {"sample_fields": mapping}, "X")
        assert "map either" in str(exc)
        return
    got = validate_marker((), {"sample_fields": mapping}, "X")["sample_fields"]
    assert dict(got) == expected
    assert validate_marker((), {"sample_fields": " ".join(entries)}, "X")["sample_fields"] == got
    # the key the file is grouped by does not depend on the order the mapping was written in
    assert fields_key(dict(reversed(list(expected.items())))) == fields_key(expected)


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_probes_read_the_file_with_their_function_s_mapping(project, granularity):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import EvaluateResult, reward_function

        @pytest.mark.reward(sample_fields={"prompt": "question", "response": "answer_b"}, probes=["empty"])
        @reward_function
        def picky(messages, **kwargs):
            return EvaluateResult(score=float(messages[-1]["content"] == "right"))
        """,
    )
    project.file("pytest.ini", "[pytest]\nreward_sample_fields = prompt=question response=answer_a\n")
    rows = [{"question": f"q{i}", "answer_a": "wrong", "answer_b": "right"} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), project.path / "d.parquet")
    result = project.run("d.parquet", "--reward-granularity", granularity)
    result.assert_outcomes(passed=2 if granularity == "file" else 4)  # and the probe item
    # the probe's originals are answer_b's scores (1.0), not answer_a's (the ini mapping's: 0.0)
    result.stdout.fnmatch_lines(["*picky*d.parquet*empty*3*1.000 → 0.000*"])
