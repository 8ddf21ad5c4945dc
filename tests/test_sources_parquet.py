"""Datasets as samples: Parquet files and Arrow files (``datasets.save_to_disk``) read as samples,
streamed by record batch, with verl's and TRL's schemas recognised and ``reward_sample_fields`` for the rest.

Every file here is written by pyarrow itself (``pq.write_table`` / ``pa.ipc``), with the column types verl's and
TRL's own preprocessing produce: verl's ``examples/data_preprocess/gsm8k.py`` rows (``data_source``, ``prompt`` as a
list of ``{role, content}`` structs, ``ability``, ``reward_model`` struct with ``style`` / ``ground_truth``,
``extra_info`` struct) and TRL's standard (strings) and conversational (lists of messages) ``prompt`` /
``completion`` columns.
"""

from __future__ import annotations

import json
import shutil

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from pytest_reward.data.samples import Sample, SampleError  # noqa: E402
from pytest_reward.data.sources import DatasetError, read_samples  # noqa: E402

from .conftest import msgs  # noqa: E402

try:  # imported once, here: pytester's teardown forgets modules a test imports, and datasets cannot load twice
    import datasets
except ImportError:  # pragma: no cover - datasets is in the dev extra
    datasets = None

VERL = """
    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        assert data_source == "openai/gsm8k" and extra_info["split"] == "test"
        return float(solution_str.strip().endswith(str(ground_truth)))
"""

STANDARD = """
    from pytest_reward import EvaluateResult, reward_function

    @reward_function
    def ends_with_truth(messages, ground_truth=None, **kwargs):
        return EvaluateResult(score=float(messages[-1]["content"].strip().endswith(str(ground_truth))))
"""


def _verl_rows(answers: list[str | None]) -> list[dict]:
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"What is {i} + 40? Answer after ####."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 40)},
            "extra_info": {"split": "test", "index": i},
            "response": answer,
        }
        for i, answer in enumerate(answers)
    ]


def test_verl_rows_are_prompt_only_samples_with_ground_truth_and_extras(tmp_path):
    rows = _verl_rows([None, None])
    for r in rows:
        del r["response"]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    first, second = list(read_samples(tmp_path / "train.parquet"))
    assert isinstance(first, Sample) and first.prompt_only
    assert first.messages == [{"role": "user", "content": "What is 0 + 40? Answer after ####."}]
    assert first.ground_truth == "40" and second.ground_truth == "41"
    assert first.kwargs == {
        "data_source": "openai/gsm8k",
        "ability": "math",
        "extra_info": {"split": "test", "index": 0},
    }
    assert (first.location, second.label) == ("train.parquet:row 1", "row-2")


def test_trl_standard_and_conversational_rows(tmp_path):
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"prompt": "2+2=", "completion": "4", "ground_truth": "4"},
                {"prompt": "3+3=", "completion": None},
            ]
        ),
        tmp_path / "std.parquet",
    )
    answered, prompt_only = list(read_samples(tmp_path / "std.parquet"))
    assert answered.messages == [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]
    assert answered.ground_truth == "4"
    assert prompt_only.prompt == "3+3=" and prompt_only.prompt_only
    conv = [
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "completion": [{"role": "assistant", "content": "Hello"}],
        }
    ]
    pq.write_table(pa.Table.from_pylist(conv), tmp_path / "conv.parquet")
    (sample,) = list(read_samples(tmp_path / "conv.parquet"))
    assert [m["role"] for m in sample.messages] == ["system", "user", "assistant"]
    assert not sample.prompt_only and sample.messages[-1]["content"] == "Hello"


def test_streams_by_record_batch_across_row_groups(tmp_path):
    rows = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(10_000)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "big.parquet", row_group_size=1000)
    out = read_samples(tmp_path / "big.parquet")
    assert next(out).messages[-1]["content"] == "a0"
    # rows are numbered across row groups and batches, in file order
    assert [(s.line, s.messages[-1]["content"]) for s in out][-1] == (10_000, "a9999")


def test_field_mapping_with_dotted_paths_and_row_errors(tmp_path):
    rows = [
        {
            "conv": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "meta": {"answer": "a"},
        },
        {"conv": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}], "meta": None},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    fields = {"messages": "conv", "ground_truth": "meta.answer"}
    good, bad = list(read_samples(tmp_path / "d.parquet", fields=fields))
    assert isinstance(good, Sample) and good.ground_truth == "a" and good.kwargs == {}
    assert isinstance(bad, SampleError) and bad.location == "d.parquet:row 2"
    assert "meta is null" in bad.message
    (missing,) = list(read_samples(tmp_path / "d.parquet", fields={"messages": "conversation"}))[:1]
    assert isinstance(missing, SampleError) and "no column 'conversation'" in missing.message


def test_no_preset_and_no_mapping_is_one_error_naming_the_columns(tmp_path):
    pq.write_table(pa.Table.from_pylist([{"question": "q", "answer": "a"}]), tmp_path / "d.parquet")
    (err,) = list(read_samples(tmp_path / "d.parquet"))
    assert isinstance(err, SampleError) and "['question', 'answer']" in err.message
    assert "reward_sample_fields" in err.message


def test_arrow_files_as_datasets_save_to_disk_writes_them(tmp_path):
    # datasets' save_to_disk writes data-00000-of-00001.arrow as an Arrow IPC *stream*; also accept IPC files.
    table = pa.Table.from_pylist(
        [{"prompt": "2+2=", "completion": "4"}, {"prompt": "1+1=", "completion": "2"}]
    )
    with (
        pa.OSFile(str(tmp_path / "data-00000-of-00001.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as w,
    ):
        w.write_table(table, max_chunksize=1)
    with pa.OSFile(str(tmp_path / "file.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    for name in ("data-00000-of-00001.arrow", "file.arrow"):
        samples = list(read_samples(tmp_path / name))
        assert [s.messages[-1]["content"] for s in samples] == ["4", "2"], name


def test_corrupt_file_raises_naming_it(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DatasetError, match=r"bad\.parquet"):
        list(read_samples(tmp_path / "bad.parquet"))


# --- whole runs -----------------------------------------------------------------------------------------------


def test_verl_parquet_scored_with_the_verl_compute_score(project):
    project.file("my_reward.py", VERL)
    pq.write_table(
        pa.Table.from_pylist(_verl_rows(["#### 40", "#### 99", "#### 42"])), project.path / "test.parquet"
    )
    project.file("pytest.ini", "[pytest]\nreward_sample_fields = response=response\n")
    args = ("--reward-samples", "test.parquet", "--reward-fn", "verl:my_reward.py::compute_score")
    result = project.run(*args, "--reward-threshold", "0.5", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*compute_score?row-2? FAILED*"])
    # file granularity streams the same rows, with the same verdicts
    result = project.run(*args, "--reward-threshold", "0.5", "--reward-granularity", "file", "-rf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test.parquet:2*"])


def test_positional_parquet_and_glob_and_row_errors(project):
    project.file("test_reward.py", STANDARD)
    rows = [
        {"prompt": "2+2=", "completion": "4", "ground_truth": "4"},
        {"prompt": None, "completion": "x", "ground_truth": "1"},
    ]
    pq.write_table(pa.Table.from_pylist(rows), project.path / "trl.parquet")
    result = project.run("trl.parquet", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*trl.parquet:row 2*'prompt' must be a string or a list of messages, got null*"]
    )
    project.file("pytest.ini", "[pytest]\nreward_samples_glob = *.parquet\n")
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=1)


def test_corrupt_parquet_is_a_usage_error_naming_it(project):
    project.file("test_reward.py", STANDARD)
    (project.path / "bad.parquet").write_bytes(b"not parquet at all")
    result = project.run("bad.parquet")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad.parquet: not a readable parquet file*"])


def test_a_run_without_datasets_does_not_import_pyarrow(project):
    project.file("test_reward.py", STANDARD)
    project.jsonl(
        "s.jsonl",
        [
            {
                "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "4"}],
                "ground_truth": "4",
            }
        ],
    )
    project.file(
        "conftest.py",
        "import sys\ndef pytest_sessionfinish():\n    print('PYARROW', 'pyarrow' in sys.modules)\n",
    )
    result = project.run_subprocess("s.jsonl", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PYARROW False*"])


def test_corrupt_parquet_from_options_or_a_glob_names_it(project):
    project.file("test_reward.py", STANDARD)
    (project.path / "bad.parquet").write_bytes(b"not parquet at all")
    result = project.run("--reward-samples", "bad.parquet")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reward-samples bad.parquet:*bad.parquet: not a readable parquet file*"])
    project.file("pytest.ini", "[pytest]\nreward_samples_glob = *.parquet\n")
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*bad.parquet: not a readable parquet file*"])


def test_a_malformed_field_mapping_is_a_usage_error_naming_the_option(project):
    project.file("test_reward.py", STANDARD)
    project.file("pytest.ini", "[pytest]\nreward_sample_fields = ground_truth\n")
    pq.write_table(pa.Table.from_pylist([{"prompt": "q", "completion": "a"}]), project.path / "d.parquet")
    result = project.run("d.parquet")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini reward_sample_fields: 'ground_truth' is not TARGET=column*"])


def test_datasets_save_to_disk_directories_as_samples(project):
    # datasets is a test dependency (the dev extra, what `make test` installs): never skipped for want of it
    try:
        import datasets
    except ImportError:
        pytest.fail("datasets is not installed: it is in the dev extra, pip install -e '.[dev]'")
    project.file("test_reward.py", STANDARD)
    rows = [
        {"prompt": "2+2=", "completion": "4", "ground_truth": "4"},
        {"prompt": "1+1=", "completion": "3", "ground_truth": "2"},
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(project.path / "one"))
    ds = datasets.Dataset.from_list(rows)
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(project.path / "dd"))
    result = project.run("--reward-samples", "one", "--reward-threshold", "0.5", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*data-00000-of-00001.arrow::ends_with_truth?row-2? FAILED*"])
    result = project.run("dd", "--reward-threshold", "0.5")  # a DatasetDict: every split
    result.assert_outcomes(passed=2, failed=2)


def test_a_datasetdict_missing_a_split_or_a_shard_is_a_usage_error_naming_it(project):
    if datasets is None:
        pytest.fail("datasets is not installed: it is in the dev extra, pip install -e '.[dev]'")
    project.file("test_reward.py", STANDARD)
    ds = datasets.Dataset.from_list([{"prompt": "2+2=", "completion": "4", "ground_truth": "4"}])
    for name in ("no_split", "no_state", "no_shard"):
        datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(project.path / name))
    shutil.rmtree(project.path / "no_split" / "test")
    (project.path / "no_state" / "test" / "state.json").unlink()
    (project.path / "no_shard" / "test" / "data-00000-of-00001.arrow").unlink()
    for name, says in (
        ("no_split", "split 'test' (listed in dataset_dict.json) is missing*name them: *no_split?train"),
        ("no_state", "split 'test' (listed in dataset_dict.json) has no state.json*"),
        ("no_shard", "split 'test': shard data-00000-of-00001.arrow (listed in *state.json) is missing"),
    ):
        for args, given in (((name,), name), (("--reward-samples", name), f"--reward-samples {name}")):
            result = project.run(*args)
            assert result.ret == pytest.ExitCode.USAGE_ERROR, (args, result.stdout.str())
            result.stderr.fnmatch_lines([f"*{given}: *{name}: {says}*"])
    result = project.run("no_split/train")  # the split that is there, named as the message says
    result.assert_outcomes(passed=1)


def test_replay_tolerance_holds_in_worker_processes(project):
    # the process executor's workers check the recorded score too (it travels with the sample)
    import json

    project.file("rewards.py", STANDARD)  # a @reward_function: workers import it by module and attribute
    chatml = "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"
    rows = [
        {"input": chatml, "output": "It is 42", "gts": "42", "score": 1.0, "step": 3},
        {"input": chatml, "output": "It is 42.", "gts": "42", "score": 1.0, "step": 3},  # drifted: now 0.0
    ]
    (project.path / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ("--reward-samples", "3.jsonl", "--reward-replay-tolerance", "0.01")
    result = project.run(
        *args, "--reward-executor", "process", "--reward-workers", "1", "--reward-granularity", "file", "-rf"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*3.jsonl:2*replay: the trainer recorded 1, the reward gives 0 now (tolerance 0.01)*"])


def test_the_summary_counts_samples_that_differ_from_the_recorded_score(project):
    import json

    project.file("rewards.py", STANDARD)
    chatml = "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"
    rows = [
        {"input": chatml, "output": "It is 42", "gts": "42", "score": 1.0, "step": 3},
        {"input": chatml, "output": "It is 41", "gts": "42", "score": 0.0, "step": 3},
        {"input": chatml, "output": "It is 42.", "gts": "42", "score": 1.0, "step": 3},  # drifted: now 0.0
    ]
    (project.path / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for granularity in ("sample", "file"):
        result = project.run(
            "--reward-samples",
            "3.jsonl",
            "--reward-replay-tolerance",
            "0.01",
            "--reward-granularity",
            granularity,
        )
        result.stdout.fnmatch_lines(
            [
                "REPLAY ends_with_truth on 3.jsonl: 1 of 3 samples differ from the recorded score by more than 0.01"
            ]
        )
    result = project.run("--reward-samples", "3.jsonl", "--reward-replay-tolerance", "1")
    result.stdout.fnmatch_lines(["REPLAY ends_with_truth on 3.jsonl: 0 of 3 samples differ*"])
    assert "REPLAY" not in project.run("--reward-samples", "3.jsonl").stdout.str()


# --- the columnar read and the file-granularity scoring loop (speed) -------------------------------------------


def _odd_rows() -> list[dict]:
    """verl rows, 600 of them (more than one slice of the columnar read), with rows that are not the usual one."""
    rows = _verl_rows([f"#### {i + 40}" for i in range(600)])
    rows[0]["reward_model"] = None  # a null struct on the mapped path reward_model.ground_truth
    rows[1]["prompt"] = [{"role": "  ", "content": "q"}]  # a blank role
    rows[2]["prompt"] = [{"role": "user", "content": None}]  # a null content without tool calls
    rows[3]["response"] = '[{"role": "assistant", "content": "#### 43"}]'  # a response given as JSON messages
    rows[4]["response"] = " [not json] #### 44"  # looks like JSON, is text
    rows[5]["prompt"] = []  # an empty prompt with a response: the conversation is the response alone
    rows[6]["response"] = None  # prompt-only
    rows[7]["prompt"] = None
    rows[300]["reward_model"] = None  # in another slice
    return rows


def test_columnar_read_gives_each_row_what_the_row_path_gives(tmp_path):
    pq.write_table(pa.Table.from_pylist(_odd_rows()), tmp_path / "odd.parquet", row_group_size=250)
    out = list(read_samples(tmp_path / "odd.parquet", fields={"response": "response"}))
    assert len(out) == 600
    errors = {o.line: o.message for o in out if isinstance(o, SampleError)}
    assert errors == {
        1: "reward_model is null, so 'reward_model.ground_truth' is missing",
        2: "messages[0].role must be a non-empty string, got '  '",
        3: "messages[0].content is null but the message has no tool_calls",
        8: "'prompt' must be a string or a list of messages, got null",
        301: "reward_model is null, so 'reward_model.ground_truth' is missing",
    }
    by_row = {o.line: o for o in out if isinstance(o, Sample)}
    assert by_row[4].messages == [
        {"role": "user", "content": "What is 3 + 40? Answer after ####."},
        {"role": "assistant", "content": "#### 43"},
    ]
    assert by_row[5].messages[-1] == {"role": "assistant", "content": " [not json] #### 44"}
    assert by_row[6].messages == [{"role": "assistant", "content": "#### 45"}]
    assert by_row[7].prompt_only and by_row[7].messages == [
        {"role": "user", "content": "What is 6 + 40? Answer after ####."}
    ]
    usual = by_row[600]
    assert (usual.location, usual.label, usual.unit) == ("odd.parquet:row 600", "row-600", "row")
    assert usual.messages == [
        {"role": "user", "content": "What is 599 + 40? Answer after ####."},
        {"role": "assistant", "content": "#### 639"},
    ]
    assert usual.ground_truth == "639"
    assert usual.kwargs == {
        "data_source": "openai/gsm8k",
        "ability": "math",
        "extra_info": {"split": "test", "index": 599},
    }
    # every usual sample is the one its JSONL line would give
    (tmp_path / "same.jsonl").write_text(
        "".join(
            json.dumps({"messages": s.messages, "ground_truth": s.ground_truth, **s.kwargs}) + "\n"
            for s in by_row.values()
        )
    )
    again = list(read_samples(tmp_path / "same.jsonl"))
    assert [(s.messages, s.ground_truth, s.kwargs, s.key) for s in again] == [
        (s.messages, s.ground_truth, s.kwargs, s.key) for s in by_row.values()
    ]
    # a run that stores no per-sample data reads the same samples and errors, with the empty key
    keyless = list(read_samples(tmp_path / "odd.parquet", fields={"response": "response"}, keys=False))
    assert [(o.line, o.message) for o in keyless if isinstance(o, SampleError)] == sorted(errors.items())
    keyless_by_row = {o.line: o for o in keyless if isinstance(o, Sample)}
    assert keyless_by_row == by_row  # key and response hash aside (not compared)
    assert {(s.key, s.response_hash) for s in keyless_by_row.values()} == {("", None)}
    assert all(s.unit == "row" for s in keyless_by_row.values())
    # without a ground truth column: samples without one, keyed or not
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "response": f"a{i}", "n": i} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "plain.parquet")
    for keys in (True, False):
        got = list(read_samples(tmp_path / "plain.parquet", fields={"response": "response"}, keys=keys))
        assert [(s.messages[-1]["content"], s.kwargs, s.has_ground_truth, s.unit) for s in got] == [
            (f"a{i}", {"n": i}, False, "row") for i in range(3)
        ]
        assert (got[0].key == "") is not keys


def test_messages_with_more_fields_and_paths_the_schema_lacks_are_read_row_by_row(tmp_path):
    rows = _verl_rows(["#### 40", "#### 41"])
    rows[0]["prompt"] = [
        {"role": "system", "content": "be brief", "name": None},
        {"role": "user", "content": "q", "name": "ann"},
    ]
    rows[1]["prompt"] = [{"role": "user", "content": "q2", "name": None}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "named.parquet")
    first, second = read_samples(tmp_path / "named.parquet", fields={"response": "response"})
    # null fields of the struct are dropped, the others kept, as for every row
    assert first.messages[:2] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "q", "name": "ann"},
    ]
    assert second.messages == [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "#### 41"}]
    out = list(
        read_samples(
            tmp_path / "named.parquet", fields={"response": "response", "ground_truth": "reward_model.answer"}
        )
    )
    assert [o.message for o in out] == [
        "reward_model has no field 'answer' (needed for 'reward_model.answer')"
    ] * 2


def test_a_verl_reward_changing_its_inputs_fails_its_own_row_in_file_granularity(project):
    project.file(
        "my_reward.py",
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
            if extra_info["index"] == 1:
                extra_info["tags"].append("mine")
            if extra_info["index"] == 2:
                ground_truth.clear()
            return 1.0
        """,
    )
    rows = _verl_rows(["#### 40", "#### 41", "#### 42", "#### 43"])
    for r in rows:
        r["reward_model"]["ground_truth"] = [r["reward_model"]["ground_truth"]]
        r["extra_info"]["tags"] = ["t"]
    pq.write_table(pa.Table.from_pylist(rows), project.path / "test.parquet")
    project.file("pytest.ini", "[pytest]\nreward_sample_fields = response=response\n")
    args = ("--reward-samples", "test.parquet", "--reward-fn", "verl:my_reward.py::compute_score")
    result = project.run(*args, "--reward-granularity", "file", "--reward-report", "out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*2 of 4 samples failed*"])
    lines = (project.path / "out" / "results.jsonl").read_text().splitlines()
    errors = [json.loads(line)["error"] for line in lines]
    assert errors[0] is None and errors[3] is None
    assert "compute_score changed its input 'extra_info' in place" in errors[1]
    assert "compute_score changed its input 'ground_truth' in place" in errors[2]


def test_a_verl_reward_is_handed_no_object_of_a_sample_unchecked(project):
    """The verl adapter copies ``extra_info`` itself: a row whose other inputs are strings and numbers is scored on
    its own objects (nothing it is handed can change them), every other row on private copies checked after the
    call, in file granularity as in the threaded path; whatever it changes fails its own row, naming the input."""
    project.file(
        "my_reward.py",
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
            extra_info["index"] = -1  # the adapter's own dict
            extra_info.pop("split", None)
            for value in (data_source, ground_truth, *extra_info.values()):
                if isinstance(value, list):
                    value.append("mine")
                elif isinstance(value, dict):
                    value["mine"] = True
            return 1.0
        """,
    )
    flat = {"data_source": "gsm8k", "ground_truth": "1", "extra_info": {"split": "test", "index": 0}}
    variants = [
        {},
        {"ground_truth": ["1"]},
        {"data_source": ["gsm8k"]},
        {"extra_info": {"split": "test", "tags": ["t"]}},
        {"extra_info": {"split": "test", "meta": {"k": 1}}},
        {"num_turns": [1]},
        {"reward_scores": {"other": 1.0}},
        {"extra_info": None, "num_turns": 2, "reward_scores": 0.5},
        {"extra_info": [["split", "test"]]},
        {"extra_info": {"split": "test", "index": 3, "score": 0.5, "ok": True, "note": None}},
    ]
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a"), **flat, **v} for v in variants])
    args = ("--reward-samples", "s.jsonl", "--reward-fn", "verl:my_reward.py::compute_score")

    def errors(*extra: str) -> list:
        out = project.path / ("out" + "_".join(extra))
        project.run(*args, "--reward-granularity", "file", "--reward-report", str(out), *extra)
        return [json.loads(line)["error"] for line in (out / "results.jsonl").read_text().splitlines()]

    in_file, threaded = errors(), errors("--reward-workers", "2")
    assert in_file == threaded
    changed = [None if e is None else e.split("changed its input ")[1].split(" in place")[0] for e in in_file]
    assert changed == [
        None, "'ground_truth'", "'data_source'", "'extra_info'", "'extra_info'", "'num_turns'", "'reward_scores'",
        None, None, None,
    ]  # fmt: skip


def test_a_reward_changing_the_conversation_fails_and_the_report_shows_it_as_written(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function

        @reward_function
        def mutates(messages, ground_truth=None, **kwargs):
            messages[-1]["content"] = "TAMPERED"
            return {"score": 1.0}

        @reward_function
        def reads(messages, ground_truth=None, **kwargs):
            return {"score": float(messages[-1]["content"].endswith(ground_truth))}
        """,
    )
    pq.write_table(pa.Table.from_pylist(_verl_rows(["#### 40", "#### 41"])), project.path / "test.parquet")
    project.file("pytest.ini", "[pytest]\nreward_sample_fields = response=response\n")
    result = project.result("--reward-samples", "test.parquet", "--reward-granularity", "file")
    by_fn = {g.function: g for g in result.groups}
    assert by_fn["reads"].verdict == "NO GATE" and by_fn["reads"].summary.mean == 1.0
    assert by_fn["mutates"].verdict == "FAIL"
    shown = by_fn["mutates"].outcomes
    assert shown and all("changed its input 'messages' in place" in o.error for o in shown)
    assert sorted(o.response for o in shown) == ["#### 40", "#### 41"]


ALL_KINDS = """
    import math
    from pytest_reward import EvaluateResult, reward_function

    @reward_function
    def kinds(messages, ground_truth=None, kind=None, **kwargs):
        if kind == "raise":
            raise ValueError("boom")
        if kind == "none":
            return None
        if kind == "nan":
            return {"score": math.nan}
        if kind == "invalid":
            return EvaluateResult(score=0.9, is_score_valid=False, reason="unsure")
        if kind == "error":
            return EvaluateResult(score=0.9, error="half done")
        if kind == "low":
            return {"score": 0.1, "reason": "low"}
        if kind == "metrics":
            return {"score": 0.8, "metrics": {"m": {"score": 0.5, "reason": "half"}}}
        return EvaluateResult(score=1.0, reason="fine")
"""


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_file_granularity_outcomes_are_those_of_the_threaded_path(project, fmt):
    project.file("rewards.py", ALL_KINDS)
    kinds = ["ok", "raise", "none", "nan", "invalid", "error", "low", "metrics", "ok"]
    rows = [
        {"prompt": [{"role": "user", "content": f"q{i}"}], "completion": f"a{i}", "kind": k}
        for i, k in enumerate(kinds)
    ]
    if fmt == "jsonl":
        lines = [
            {"messages": [*r["prompt"], {"role": "assistant", "content": r["completion"]}], "kind": r["kind"]}
            for r in rows
        ]
        lines.append({**lines[0], "expect": {"max": 0.5}})  # a golden expectation: the general path
        project.jsonl("s.jsonl", lines)
        samples = "s.jsonl"
    else:
        pq.write_table(pa.Table.from_pylist(rows), project.path / "s.parquet")
        samples = "s.parquet"

    def rows_of(*extra: str) -> list[dict]:
        out = project.path / ("out" + "_".join(extra))
        result = project.run("--reward-samples", samples, "--reward-granularity", "file", "--reward-threshold", "0.5",
                    "--reward-report", str(out), *extra)  # fmt: skip
        result.assert_outcomes(failed=1)
        found = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        for row in found:
            row.pop("duration")
        return found

    one_by_one, threaded = rows_of(), rows_of("--reward-workers", "2")
    assert one_by_one == threaded
    verdicts = [r["verdict"] for r in one_by_one]
    assert verdicts[:9] == ["pass", "fail", "fail", "fail", "fail", "fail", "fail", "pass", "pass"]
    if fmt == "jsonl":
        assert verdicts[9] == "fail" and one_by_one[9]["failures"] == ["expect score: expected ≤ 0.5, got 1"]
    assert "ValueError: boom" in one_by_one[1]["error"]
    assert "kinds returned None" in one_by_one[2]["error"]
