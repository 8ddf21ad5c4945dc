"""RewardModel: loading (heads, labels, errors), texts and chat templates, truncation, batching and its invariances.

Parity with transformers is in ``test_reward_model_parity.py``.
"""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_reward.jax import (
    ByteTokenizer,
    CheckpointError,
    InferenceJob,
    RewardHeadError,
    RewardModel,
    load_checkpoint,
)
from pytest_reward.jax.reward_model import length_bucket, pooled_length

from .conftest import EOS


@pytest.fixture(scope="module")
def gpt2_rm(reward_checkpoints):
    return RewardModel.from_checkpoint(reward_checkpoints["gpt2"][0])


def random_rows(n: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, EOS + 1, rng.integers(lo, hi + 1)).tolist() for _ in range(n)]


# ---------------------------------------------------------------------------------------------- loading
def test_a_causal_lm_checkpoint_is_no_reward_model_and_the_error_names_its_tensors(hf_checkpoints):
    with pytest.raises(RewardHeadError) as tied:
        RewardModel.from_checkpoint(hf_checkpoints["gpt2"][0])
    message = str(tied.value)
    assert "'score.weight' of shape (num_labels, 64)" in message
    assert "'transformer.wte.weight'" in message and "'transformer.ln_f.bias'" in message
    assert "h.0." not in message  # the layers' tensors are not listed
    assert "causal language model" in message and "AutoModelForSequenceClassification" in message
    with pytest.raises(RewardHeadError, match=r"'lm_head\.weight'"):  # untied: its unembedding is named too
        RewardModel.from_checkpoint(hf_checkpoints["llama"][0])
    assert issubclass(RewardHeadError, CheckpointError)


def test_a_reward_checkpoint_read_as_a_language_model_says_how_to_load_it(reward_checkpoints):
    for name in ("gpt2", "llama"):
        with pytest.raises(CheckpointError, match=r"RewardModel\.from_checkpoint"):
            InferenceJob.from_checkpoint(reward_checkpoints[name][0])


def test_a_head_with_several_labels_needs_a_label_and_the_suggestion_works(reward_checkpoints_3_labels):
    path = reward_checkpoints_3_labels["gpt2"][0]
    with pytest.raises(RewardHeadError) as err:
        RewardModel.from_checkpoint(path)
    message = str(err.value)
    assert "tensor 'score.weight' of shape (3, 32) has 3 labels ['LABEL_0', 'LABEL_1', 'LABEL_2']" in message
    assert "label=2 or label='LABEL_2'" in message
    by_index = RewardModel.from_checkpoint(path, label=2)
    by_name = RewardModel.from_checkpoint(path, label="LABEL_2")
    rows = random_rows(3, 2, 20, seed=0)
    np.testing.assert_array_equal(by_index.score_ids(rows), by_name.score_ids(rows))
    for bad in (3, -1, True, "LABEL_9", 1.0):
        with pytest.raises(RewardHeadError, match=r"label="):
            RewardModel.from_checkpoint(path, label=bad)


def test_id2label_names_the_labels(reward_checkpoints_3_labels, tmp_path):
    source = reward_checkpoints_3_labels["llama"][0]
    path = shutil.copytree(source, tmp_path / "named")
    config = json.loads((path / "config.json").read_text())
    config["id2label"] = {"0": "helpful", "1": "harmless", "2": "honest"}
    config["label2id"] = {v: int(k) for k, v in config["id2label"].items()}
    (path / "config.json").write_text(json.dumps(config))
    rm = RewardModel.from_checkpoint(path, label="harmless")
    assert (rm.labels, rm.label) == (("helpful", "harmless", "honest"), 1)
    rows = random_rows(2, 3, 9, seed=1)
    np.testing.assert_array_equal(
        rm.score_ids(rows), RewardModel.from_checkpoint(source, label=1).score_ids(rows)
    )
    config["id2label"] = {"0": "only"}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(RewardHeadError, match=r"id2label has 1 labels but tensor 'score\.weight' has 3 rows"):
        RewardModel.from_checkpoint(path, label=0)


def test_the_head_bias_is_read_when_the_checkpoint_has_one(reward_checkpoints):
    _, with_bias = load_checkpoint(reward_checkpoints["qwen2-token"][0], head="score")
    _, without = load_checkpoint(reward_checkpoints["qwen2"][0], head="score")
    assert with_bias["score"]["w"].shape == (32, 1) and with_bias["score"]["b"].tolist() == [0.5]
    assert "b" not in without["score"] and "lm_head" not in without


def test_a_misshapen_head_is_an_error_naming_the_file_and_the_tensor(reward_checkpoints, tmp_path):
    from safetensors.numpy import load_file, save_file

    path = shutil.copytree(reward_checkpoints["qwen2-token"][0], tmp_path / "bad")
    tensors = load_file(path / "model.safetensors")
    tensors["score.weight"] = np.zeros((1, 31), np.float32)
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(
        RewardHeadError, match=r"model\.safetensors: tensor 'score\.weight' has shape \(1, 31\), "
    ):
        RewardModel.from_checkpoint(path)
    tensors["score.weight"] = np.zeros((1, 32), np.float32)
    tensors["score.bias"] = np.zeros((2,), np.float32)
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(RewardHeadError, match=r"tensor 'score\.bias' has shape \(2,\), expected \(1,\)"):
        RewardModel.from_checkpoint(path)


def test_settings_are_checked(reward_checkpoints):
    path = reward_checkpoints["gpt2"][0]
    with pytest.raises(ValueError, match=r"pooling must be one of \['hf', 'last_attended'\]"):
        RewardModel.from_checkpoint(path, pooling="last")
    with pytest.raises(ValueError, match=r"max_length=129 must be between 1 and the model's 128 positions"):
        RewardModel.from_checkpoint(path, max_length=129)
    with pytest.raises(ValueError, match=r"truncation must be 'left' or 'error'"):
        RewardModel.from_checkpoint(path, truncation="right")


# ---------------------------------------------------------------------------------------------- inputs
def test_bad_rows_are_errors_naming_the_row(gpt2_rm):
    with pytest.raises(ValueError, match=r"sequence 1 is empty"):
        gpt2_rm.score_ids([[1, 2], []])
    with pytest.raises(
        ValueError, match=r"sequence 0 has token id 300, outside the model's vocabulary 0\.\.299"
    ):
        gpt2_rm.score_ids([[1, 300]])
    with pytest.raises(ValueError, match=r"sequence 0 has token id -1"):
        gpt2_rm.score_ids([[-1, 3]])
    with pytest.raises(TypeError, match=r"wrap a single text in a list"):
        gpt2_rm.score_texts("hello")
    with pytest.raises(ValueError, match=r"batch_size must be a positive number of rows or None"):
        gpt2_rm.score_ids([[1]], batch_size=0)
    assert gpt2_rm.score_ids([]).shape == (0,)


def test_pooled_length_rules():
    assert pooled_length([1, 2, 9, 9], "hf", 9) == 2
    assert pooled_length([9, 1, 9, 2], "hf", 9) == 4
    assert pooled_length([9, 9], "hf", 9) == 1  # transformers' argmax of zeros: the first token
    assert pooled_length([1, 2, 9, 9], "last_attended", 9) == 4
    assert (
        pooled_length([1, 2, 9], "hf", None) == 3
    )  # no pad token: the last token, as transformers (one row)


def test_length_buckets_are_powers_of_two_and_midpoints_capped():
    assert [length_bucket(n, 1024) for n in (1, 16, 17, 25, 33, 49, 65, 97, 129, 200)] == [
        16, 16, 24, 32, 48, 64, 96, 128, 192, 256,
    ]  # fmt: skip
    assert length_bucket(100, 100) == 100 and length_bucket(90, 100) == 96 and length_bucket(97, 100) == 100


def test_longer_rows_keep_the_start_token_and_their_last_tokens(reward_checkpoints):
    path = reward_checkpoints["llama"][0]
    rm = RewardModel.from_checkpoint(path, max_length=16, start_token=7)
    full = RewardModel.from_checkpoint(path, start_token=7)
    text = "the quick brown fox jumps over the lazy dog"
    ids = rm.encode(text)
    assert ids[0] == 7 and len(ids) == len(text) + 1
    [got] = rm.score_texts([text])
    assert rm.stats.truncated == 1
    assert got == pytest.approx(full.score_ids([[7, *ids[-15:]]])[0], abs=1e-6)
    strict = RewardModel.from_checkpoint(path, max_length=16, truncation="error")
    with pytest.raises(ValueError, match=r"sequence 0 has 43 tokens up to its pooled token, more than max_length=16.*"
                       r"truncation='left'"):  # fmt: skip
        strict.score_texts([text])
    assert strict.score_texts(["short"]).shape == (1,)  # what fits is scored


def test_trailing_pad_tokens_do_not_count_towards_the_length_under_the_hf_rule(reward_checkpoints):
    rm = RewardModel.from_checkpoint(reward_checkpoints["gpt2"][0], max_length=16, truncation="error")
    row = list(range(10)) + [EOS] * 30
    assert rm.score_ids([row])[0] == pytest.approx(rm.score_ids([row[:10]])[0], abs=1e-6)


# ---------------------------------------------------------------------------------------------- chat templates
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHATS = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue, like the sky."}],
]


@pytest.fixture(scope="module")
def templated(reward_checkpoints, tmp_path_factory):
    """The qwen2 reward model with a Hugging Face tokenizer: a chat template that writes the BOS token, and
    ``add_bos_token`` (the BOS token is the start token of every text)."""
    path = tmp_path_factory.mktemp("templated") / "rm"
    shutil.copytree(reward_checkpoints["qwen2"][0], path)
    ByteTokenizer(("<|endoftext|>", "<s>", "<|im_start|>", "<|im_end|>")).save(path)
    config = json.loads((path / "tokenizer_config.json").read_text())
    del config["pytest_reward_tokenizer"]
    config |= {"bos_token": "<s>", "add_bos_token": True, "chat_template": TEMPLATE}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def test_render_is_the_chat_template_as_transformers_renders_it_without_a_generation_prompt(templated):
    transformers = pytest.importorskip("transformers")
    rm = RewardModel.from_checkpoint(templated)
    hf_tok = transformers.AutoTokenizer.from_pretrained(templated)
    for chat in CHATS:
        text = rm.render(chat)
        assert text == hf_tok.apply_chat_template(chat, tokenize=False)
        assert text.startswith("<s><|im_start|>user\n") and text.endswith("<|im_end|>\n")
        ids = rm.encode(text)
        assert ids == hf_tok(text, add_special_tokens=False)["input_ids"]
        assert ids.count(257) == 1 and ids[0] == 257  # one start token: the template's, none added
    assert rm.start_token == 257 and rm.encode("hello")[:2] == [257, ord("h")]  # a bare text gets it


def test_score_conversations_scores_the_rendered_ids(templated, reward_checkpoints):
    torch = pytest.importorskip("torch")
    rm = RewardModel.from_checkpoint(templated)
    _, hf = reward_checkpoints["qwen2"]
    got = rm.score_conversations(CHATS)
    for chat, score in zip(CHATS, got, strict=True):
        with torch.no_grad():
            expected = hf(torch.tensor([rm.encode(rm.render(chat))])).logits[0, 0].item()
        assert score == pytest.approx(expected, abs=1e-4)
    np.testing.assert_array_equal(got, rm.score_texts([rm.render(c) for c in CHATS]))


def test_a_tokenizer_without_a_chat_template_renders_chatml(gpt2_rm):
    assert (
        gpt2_rm.render(CHATS[0])
        == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
    )


# ---------------------------------------------------------------------------------------------- batching
def test_buckets_reuse_their_compiled_programs(reward_checkpoints):
    rm = RewardModel.from_checkpoint(reward_checkpoints["qwen2"][0])
    first = rm.score_ids(random_rows(20, 3, 40, seed=3))
    keys = list(rm.stats.compile_keys)
    assert rm.stats.compiles == len(keys) >= 2
    assert {T for _, T in keys} <= {16, 24, 32, 48}
    rm.score_ids(random_rows(20, 3, 40, seed=3))  # the same lengths again: nothing new to compile
    assert rm.stats.compile_keys == keys
    assert first.shape == (20,)
    rm.reset_stats()
    rm.score_ids(random_rows(10, 30, 31, seed=4), batch_size=4)  # one bucket: two full batches and a half one
    assert rm.stats.compile_keys == [(4, 32), (2, 32)] and rm.stats.batches == 3
    rm.score_ids(random_rows(10, 30, 31, seed=5), batch_size=4)
    assert rm.stats.compiles == 2


def test_default_batches_are_sized_by_tokens(reward_checkpoints):
    rm = RewardModel.from_checkpoint(reward_checkpoints["gpt2"][0], tokens_per_batch=64, max_batch_size=2)
    rm.score_ids([[1] * 20] * 5)  # T = 24: 64 // 24 = 2 rows a batch, the fifth alone
    assert rm.stats.compile_keys == [(2, 24), (1, 24)] and rm.stats.batches == 3
    assert rm.stats.tokens == 100 and rm.stats.padded_tokens == 5 * 24


def shared_rows(n_prompts: int, per_prompt: int, seed: int) -> list[list[int]]:
    """``per_prompt`` responses (1-15 tokens) to each of ``n_prompts`` prompts (6-30 tokens), shuffled."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, EOS, rng.integers(6, 31)).tolist() for _ in range(n_prompts)]
    rows = [
        p + rng.integers(0, EOS + 1, rng.integers(1, 16)).tolist() for p in prompts for _ in range(per_prompt)
    ]
    return [rows[i] for i in rng.permutation(len(rows))]


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2-token"])
def test_rows_sharing_a_prompt_run_it_once_with_the_scores_of_whole_rows(reward_checkpoints, name):
    path = reward_checkpoints[name][0]
    shared = RewardModel.from_checkpoint(path, min_shared_prefix=4)
    whole = RewardModel.from_checkpoint(path, min_shared_prefix=None)
    rows = [*shared_rows(3, 4, seed=8), [1, 2, 3, 4, 5], [9] * 20]  # the last two share nothing
    np.testing.assert_allclose(shared.score_ids(rows), whole.score_ids(rows), atol=1e-5, rtol=0)
    assert shared.stats.shared_tokens >= 3 * 3 * 6  # each prompt run once instead of four times
    assert shared.stats.tokens + shared.stats.shared_tokens == whole.stats.tokens
    assert any(len(key) == 4 for key in shared.stats.compile_keys)  # (G, P, B, T) programs ran
    assert all(len(key) == 2 for key in whole.stats.compile_keys) and whole.stats.shared_tokens == 0
    with pytest.raises(ValueError, match=r"min_shared_prefix must be a positive number of tokens or None"):
        RewardModel.from_checkpoint(path, min_shared_prefix=0)


def test_a_group_larger_than_a_batch_is_split(reward_checkpoints):
    path = reward_checkpoints["gpt2"][0]
    shared = RewardModel.from_checkpoint(path, min_shared_prefix=4)
    rows = shared_rows(1, 7, seed=9) + shared_rows(1, 2, seed=10)
    got = shared.score_ids(rows, batch_size=4)
    np.testing.assert_allclose(
        got, RewardModel.from_checkpoint(path, min_shared_prefix=None).score_ids(rows), atol=1e-5
    )
    assert max(key[2] for key in shared.stats.compile_keys if len(key) == 4) == 4


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(0, EOS), min_size=1, max_size=30)),
        min_size=1,
        max_size=10,
    ),
    batch_size=st.sampled_from([None, 1, 3, 8]),
    pooling=st.sampled_from(["hf", "last_attended"]),
    seed=st.integers(0, 2**16),
)
def test_scores_do_not_depend_on_batch_neighbours_or_order(
    reward_checkpoints, rows, batch_size, pooling, seed
):
    """Rows are one of three prompts (or none) and a tail: rows that share a prompt run it once, the others whole."""
    prompts = [[], [5] * 6, list(range(10, 30)), [7, 8] * 4]
    rows = [prompts[p] + tail for p, tail in rows]
    rm = _cached(reward_checkpoints, pooling)
    together = rm.score_ids(rows, batch_size=batch_size)
    alone = np.array([rm.score_ids([r])[0] for r in rows])
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)
    order = np.random.default_rng(seed).permutation(len(rows))
    shuffled = rm.score_ids([rows[i] for i in order], batch_size=batch_size)
    np.testing.assert_allclose(shuffled, together[order], atol=1e-5, rtol=0)


_MODELS: dict[str, RewardModel] = {}


def _cached(reward_checkpoints, pooling: str) -> RewardModel:
    if pooling not in _MODELS:
        path = reward_checkpoints["llama"][0]
        _MODELS[pooling] = RewardModel.from_checkpoint(path, pooling=pooling, min_shared_prefix=4)
    return _MODELS[pooling]


def test_bfloat16_scores_track_float32(reward_checkpoints):
    import jax.numpy as jnp

    path = reward_checkpoints["gpt2"][0]
    rows = random_rows(4, 5, 30, seed=7)
    f32 = RewardModel.from_checkpoint(path).score_ids(rows)
    bf16 = RewardModel.from_checkpoint(path, dtype=jnp.bfloat16)
    assert bf16.dtype == jnp.bfloat16 and bf16.params["embed"].dtype == jnp.bfloat16
    got = bf16.score_ids(rows)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, f32, atol=0.1 * np.abs(f32).max())


def test_sharded_and_bfloat16_checkpoints_load_their_head(reward_checkpoints, tmp_path):
    torch = pytest.importorskip("torch")
    path, hf = reward_checkpoints["qwen2-token"]
    rows = random_rows(3, 4, 20, seed=11)
    expected = RewardModel.from_checkpoint(path).score_ids(rows)
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    ByteTokenizer().save(tmp_path / "sharded")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    np.testing.assert_array_equal(RewardModel.from_checkpoint(tmp_path / "sharded").score_ids(rows), expected)
    copy.deepcopy(hf).to(torch.bfloat16).save_pretrained(tmp_path / "bf16")  # the session's model stays float32
    ByteTokenizer().save(tmp_path / "bf16")
    _, params = load_checkpoint(tmp_path / "bf16", head="score")
    assert params["score"]["b"].tolist() == [0.5]  # read from BF16 bytes
    got = RewardModel.from_checkpoint(tmp_path / "bf16").score_ids(rows)
    np.testing.assert_allclose(got, expected, atol=0.05 * np.abs(expected).max())
