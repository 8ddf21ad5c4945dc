"""slime's debug rollout data as samples: the pack ``--save-debug-rollout-data`` writes, read without
torch, the recorded reward kept for ``--reward-replay-tolerance``.

The pack's layout is slime's own (THUDM/slime 624b824a898a): ``slime/observability/rollout_data_utils.py``
``save_debug_rollout_data`` does ``torch.save({"rollout_id": rollout_id, "samples": [sample.to_dict() for sample in
data]}, path)``, and ``slime/utils/types.py`` ``Sample.to_dict`` is ``self.__dict__`` with ``status`` as its value
and ``spec_info`` / ``prefix_cache_info`` as dicts. slime itself needs a GPU stack to import, so the records below
carry every field of that dataclass by hand; the file is written by the real ``torch.save`` (tensors included), and
again as a zip holding a plain pickle, without torch.
"""

from __future__ import annotations

import io
import json
import pickle
import time
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_reward.data.samples import MAX_DEPTH, Sample, SampleError
from pytest_reward.data.sources import DatasetError, Opaque, load_pack, read_samples

CHATML = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"


def slime_sample(index: int, prompt, response: str, label, reward, **extra) -> dict:
    """What ``Sample.to_dict()`` returns for a generated sample (every dataclass field, in declaration order)."""
    record = {
        "group_index": index // 2,
        "index": index,
        "rollout_id": None,
        "prompt": prompt,
        "tokens": list(range(10 + index)),
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "multimodal_train_input_id": None,
        "apply_chat_template_kwargs": {},
        "response": response,
        "response_length": len(response.split()),
        "label": label,
        "reward": reward,
        "loss_mask": None,
        "weight_versions": ["1"],
        "rollout_log_probs": [-0.5] * len(response.split()),
        "rollout_top_p_token_ids": None,
        "rollout_top_p_token_offsets": None,
        "rollout_routed_experts": None,
        "remove_sample": False,
        "teacher_log_probs": None,
        "status": "completed",
        "metadata": {"source": "gsm8k"},
        "generate_function_path": None,
        "custom_rm_path": None,
        "train_metadata": None,
        "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": {
            "spec_accept_token_num": 0,
            "spec_draft_token_num": 0,
            "spec_verify_ct": 0,
            "completion_token_num": 0,
        },
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 12},
    }
    record.update(extra)
    return record


def samples() -> list[dict]:
    messages = [{"role": "user", "content": "What is 6*7?"}]
    return [
        slime_sample(0, messages, "It is 42", "42", 1.0),
        slime_sample(1, messages, "It is 41", "42", 0.0, status="truncated"),
        slime_sample(2, CHATML, "It is 42.", "42", 1.0),  # --apply-chat-template: a string; drifted: now 0.0
        slime_sample(
            3, "What is 6*7?", "42", "42", {"acc": 1.0}
        ),  # a dict reward (--reward-key): not replayed
    ]


def torch_save(path, value) -> None:
    torch = pytest.importorskip("torch")
    torch.save(value, path)


def plain_save(path, value) -> None:
    """A ``.pt`` written without torch: a zip holding ``<name>/data.pkl``, as torch's zip format has it."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pack/data.pkl", pickle.dumps(value, protocol=2))
        zf.writestr("pack/version", "3\n")


@pytest.mark.parametrize("save", [torch_save, plain_save])
def test_a_pack_reads_as_samples_with_prompt_and_response_split_and_the_recorded_reward(tmp_path, save):
    save(tmp_path / "3.pt", {"rollout_id": 3, "samples": samples()})
    got = list(read_samples(tmp_path / "3.pt"))
    assert all(isinstance(s, Sample) for s in got)
    first, truncated, templated, plain = got
    assert first.messages == [
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": "It is 42"},
    ]
    assert first.ground_truth == "42" and first.recorded == 1.0 and first.location == "3.pt:row 1"
    assert first.kwargs == {
        "index": 0,
        "group_index": 0,
        "status": "completed",
        "metadata": {"source": "gsm8k"},
    }
    assert truncated.kwargs["status"] == "truncated" and truncated.recorded == 0.0
    # a chat-templated prompt string is split into its turns
    assert [m["role"] for m in templated.messages] == ["system", "user", "assistant"]
    assert (
        templated.messages[1]["content"] == "What is 6*7?"
        and templated.messages[-1]["content"] == "It is 42."
    )
    assert plain.messages[0] == {"role": "user", "content": "What is 6*7?"} and plain.recorded is None


def test_tensors_in_the_pack_are_placeholders_and_never_loaded(tmp_path):
    torch = pytest.importorskip("torch")
    numpy = pytest.importorskip("numpy")
    records = samples()[:2]
    records[0]["rollout_routed_experts"] = torch.zeros(3, 2, 2, dtype=torch.int32)
    records[0]["rollout_log_probs"] = torch.tensor([-0.1, -0.2])
    records[1]["multimodal_inputs"] = {"image": numpy.zeros((2, 2))}
    records[1]["metadata"] = {"pixels": torch.ones(2)}  # a forwarded field holding a tensor: that row fails
    torch.save({"rollout_id": 0, "samples": records}, tmp_path / "0.pt")
    (raw,) = load_pack(tmp_path / "0.pt")[:1]
    assert isinstance(raw["rollout_routed_experts"], Opaque)
    assert "torch._utils._rebuild_tensor_v2" in repr(raw["rollout_routed_experts"])
    good, bad = list(read_samples(tmp_path / "0.pt"))
    assert isinstance(good, Sample) and good.messages[-1]["content"] == "It is 42"
    assert isinstance(bad, SampleError) and bad.location == "0.pt:row 2"
    assert "not JSON-compatible" in bad.message


def test_a_pickle_that_names_a_callable_runs_nothing(tmp_path):
    class Exploit:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    records = samples()[:2]
    records[1]["response"] = Exploit()
    plain_save(tmp_path / "x.pt", {"rollout_id": 0, "samples": records})
    good, bad = list(read_samples(tmp_path / "x.pt"))
    assert not (tmp_path / "pwned").exists()
    assert isinstance(good, Sample)
    # the callable is a placeholder that records its name: the row fails saying so
    assert isinstance(bad, SampleError) and bad.location == "x.pt:row 2"
    assert "system, not loaded>" in bad.message


def test_field_mapping_reaches_into_the_sample_dicts(tmp_path):
    records = samples()[:1]
    records[0]["metadata"] = {"answer": "42", "source": "gsm8k"}
    records[0]["label"] = None
    plain_save(tmp_path / "m.pt", {"rollout_id": 0, "samples": records})
    (sample,) = list(read_samples(tmp_path / "m.pt", fields={"ground_truth": "metadata.answer"}))
    assert sample.ground_truth == "42"
    (err,) = list(read_samples(tmp_path / "m.pt", fields={"ground_truth": "metadata.gold"}))
    assert isinstance(err, SampleError) and "metadata has no field 'gold'" in err.message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a pack at all", "not a readable slime rollout pack"),
        (pickle.dumps([1, 2, 3]), "expected a dict with a 'samples' list*got list)"),
        (pickle.dumps({"rollout_id": 1}), "expected a dict with a 'samples' list*got ['rollout_id'])"),
        (pickle.dumps({"samples": []})[:-5], "not a readable slime rollout pack"),
    ],
)
def test_a_malformed_pack_raises_naming_it(tmp_path, content, message):
    (tmp_path / "bad.pt").write_bytes(content)
    with pytest.raises(DatasetError) as info:
        list(read_samples(tmp_path / "bad.pt"))
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 'bad.pt'}: "), text
    position = 0
    for part in message.split("*"):
        position = text.find(part, position)
        assert position >= 0, (part, text)


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(
            _TEXT.filter(lambda t: "<|im_start|>" not in t and t.strip()),
            _TEXT,
            st.one_of(st.none(), _TEXT),
            st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False), st.integers(-3, 3)),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_plain_pack_reads_back_what_was_saved(records):
    packed = [slime_sample(i, p, r, label, reward) for i, (p, r, label, reward) in enumerate(records)]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"rollout_id": 0, "samples": packed}))
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.pt"
        path.write_bytes(buffer.getvalue())
        got = list(read_samples(path))
    assert len(got) == len(records)
    for sample, (prompt, response, label, reward) in zip(got, records, strict=True):
        assert isinstance(sample, Sample), sample
        assert sample.messages == [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": response},
        ]
        assert sample.ground_truth == label
        assert sample.recorded == (None if reward is None else float(reward))


# --- whole runs -----------------------------------------------------------------------------------------------

RM = """
    async def custom_rm(args, sample, **kwargs):
        assert sample.metadata == {"source": "gsm8k"}, sample.metadata
        assert isinstance(sample.index, int)
        return float(sample.response.endswith(sample.label))
"""


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_replaying_a_pack_with_the_slime_reward_fails_the_drifted_sample(project, granularity):
    project.file("rm.py", RM)
    (project.path / "rollout").mkdir()
    torch_save(project.path / "rollout" / "3.pt", {"rollout_id": 3, "samples": samples()[:3]})
    result = project.run(
        "--reward-samples", "rollout/3.pt", "--reward-fn", "slime:rm.py::custom_rm",
        "--reward-replay-tolerance", "0.01", "--reward-granularity", granularity, "-rf",
    )  # fmt: skip
    result.stdout.fnmatch_lines(
        ["REPLAY custom_rm on rollout/3.pt: 1 of 3 samples differ from the recorded score by more than 0.01"]
    )
    if granularity == "sample":
        result.assert_outcomes(passed=2, failed=1)
        result.stdout.fnmatch_lines(["FAILED rollout/3.pt::custom_rm[[]row-3[]]*replay: the trainer recorded 1, the reward gives 0 now (tolerance 0.01)*"])
    else:
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(["*3.pt:3*replay: the trainer recorded 1, the reward gives 0 now (tolerance 0.01)*"])


def test_a_malformed_pack_is_a_usage_error_and_a_bad_sample_a_row_error(project):
    project.file("rm.py", RM)
    (project.path / "bad.pt").write_bytes(b"garbage")
    result = project.run("--reward-samples", "bad.pt", "--reward-fn", "slime:rm.py::custom_rm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad.pt: not a readable slime rollout pack*"])
    records = samples()[:2]
    records.insert(1, "not a sample")
    records[0].pop("response")
    plain_save(project.path / "ok.pt", {"rollout_id": 0, "samples": records})
    result = project.run("ok.pt", "--reward-fn", "slime:rm.py::custom_rm", "-v")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*ok.pt:row 1: no column 'response'*"])
    result.stdout.fnmatch_lines(["*ok.pt:row 2: sample 2 is str, not a dict*"])


# --- hostile packs: what a pack can cost is bounded ---------------------------------------------------------------


def laughs(levels: int, copies: int = 10) -> list:
    """A list of ``copies`` references to one list of ``copies`` references to ... ``levels`` deep: a few hundred
    bytes pickled, ``copies ** levels`` strings as a tree."""
    value: list = ["ha"]
    for _ in range(levels):
        value = [value] * copies
    return value


@pytest.mark.parametrize("save", [torch_save, plain_save])
def test_shared_references_expanding_past_the_cap_fail_their_sample_at_once(tmp_path, save):
    records = samples()[:3]
    records[0]["metadata"] = {"laughs": laughs(9)}  # 10**9 strings as a tree
    cycle: list = []
    cycle.append(cycle)
    records[2]["metadata"] = {"self": cycle}
    save(tmp_path / "bomb.pt", {"rollout_id": 0, "samples": records})
    assert (tmp_path / "bomb.pt").stat().st_size < 4096
    start = time.perf_counter()
    bomb, good, looped = list(read_samples(tmp_path / "bomb.pt"))
    assert time.perf_counter() - start < 1.0
    assert isinstance(bomb, SampleError) and bomb.location == "bomb.pt:row 1"
    assert bomb.message.startswith("'metadata' expands to more than 8 MiB as JSON")
    assert "per-sample cap of 8 MiB (ini reward_max_line_bytes)" in bomb.message
    assert isinstance(good, Sample) and good.messages[-1]["content"] == "It is 41"
    assert isinstance(looped, SampleError) and "'metadata' holds itself" in looped.message
    # the cap is the JSONL line cap: raised, the same sample fits when it is small enough
    records[0]["metadata"] = {"laughs": laughs(4)}  # 10**4 strings, about 60 kB as JSON
    save(tmp_path / "small.pt", {"rollout_id": 0, "samples": records[:1]})
    (err,) = list(read_samples(tmp_path / "small.pt", max_line_bytes=16 * 1024))
    assert isinstance(err, SampleError) and "over the per-sample cap of 0.015625 MiB" in err.message
    (sample,) = list(read_samples(tmp_path / "small.pt"))
    assert isinstance(sample, Sample) and len(json.dumps(sample.kwargs["metadata"])) > 16 * 1024


def test_a_large_pack_with_shared_objects_is_read_whole(tmp_path):
    shared = {"source": "gsm8k", "tests": [f"assert f({i}) == {i}" for i in range(2000)]}
    long = "x" * (2 * 2**20)  # one 2 MiB response, named by every sample
    records = [slime_sample(i, "What is 6*7?", long, "42", 1.0, metadata=shared) for i in range(200)]
    plain_save(tmp_path / "big.pt", {"rollout_id": 0, "samples": records})
    got = list(read_samples(tmp_path / "big.pt"))
    assert len(got) == 200 and all(isinstance(s, Sample) for s in got)


def test_nesting_past_the_depth_limit_fails_its_sample(tmp_path):
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    records = samples()[:2]
    records[1]["label"] = deep
    plain_save(tmp_path / "deep.pt", {"rollout_id": 0, "samples": records})
    good, bad = list(read_samples(tmp_path / "deep.pt"))
    assert isinstance(good, Sample)
    assert (
        isinstance(bad, SampleError) and f"'label' is nested more than {MAX_DEPTH} levels deep" in bad.message
    )


def test_a_pickle_asking_for_a_huge_bytearray_allocates_nothing(tmp_path):
    class Huge:
        def __reduce__(self):
            return (bytearray, (10**13,))

    records = samples()[:1]
    records[0]["metadata"] = {"blob": Huge()}
    (tmp_path / "huge.pt").write_bytes(pickle.dumps({"rollout_id": 0, "samples": records}, protocol=4))
    with pytest.raises(DatasetError, match=r"huge.pt: not a readable slime rollout pack .*bytearray\(int\)"):
        load_pack(tmp_path / "huge.pt")
    records[0]["metadata"] = {"blob": bytearray(b"\x00\x01")}  # as pickle writes a real one: still read
    for protocol in (3, 5):
        (tmp_path / "ok.pt").write_bytes(
            pickle.dumps({"rollout_id": 0, "samples": records}, protocol=protocol)
        )
        (raw,) = load_pack(tmp_path / "ok.pt")
        assert raw["metadata"]["blob"] == bytearray(b"\x00\x01")


def test_a_hostile_pack_in_a_run_fails_one_row_and_scores_the_rest(project):
    project.file("rm.py", RM)
    records = samples()[:2]
    records[0]["metadata"] = {"laughs": laughs(9)}
    torch_save(project.path / "bomb.pt", {"rollout_id": 0, "samples": records})
    start = time.perf_counter()
    result = project.run("bomb.pt", "--reward-fn", "slime:rm.py::custom_rm", "-v")
    assert time.perf_counter() - start < 30
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*bomb.pt:row 1: 'metadata' expands to more than 8 MiB as JSON*"])
