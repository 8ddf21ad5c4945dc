"""Checkpoint round trips and the errors bad model directories give."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pytest_reward.jax import (
    CheckpointError,
    ConfigError,
    InferenceJob,
    ModelConfig,
    init_params,
    load_checkpoint,
    save_checkpoint,
)

LLAMA = ModelConfig(
    family="llama",
    model_type="llama",
    vocab_size=300,
    d_model=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    d_ff=48,
    max_positions=64,
    norm_eps=1e-6,
    activation="silu",
    tie_embeddings=False,
    qkv_bias=False,
    out_bias=False,
    mlp_bias=False,
    rope_theta=500.0,
    eos_token_ids=(256,),
)
QWEN2 = LLAMA.replace(model_type="qwen2", qkv_bias=True, tie_embeddings=True, n_kv_heads=1)
GPT2 = ModelConfig.gpt2(vocab_size=300, d_model=32, n_layers=2, n_heads=4, max_positions=64)


def _leaves(tree) -> list[tuple[str, np.ndarray]]:
    import jax

    return [(jax.tree_util.keystr(k), np.asarray(v)) for k, v in jax.tree_util.tree_leaves_with_path(tree)]


def _assert_same_tree(a, b) -> None:
    la, lb = _leaves(a), _leaves(b)
    assert [k for k, _ in la] == [k for k, _ in lb]
    for (k, x), (_, y) in zip(la, lb, strict=True):
        assert x.shape == y.shape, k
        np.testing.assert_array_equal(x, y, err_msg=k)


@pytest.mark.parametrize("cfg", [GPT2, LLAMA, QWEN2], ids=["gpt2", "llama", "qwen2"])
def test_round_trip(tmp_path, cfg):
    params = init_params(cfg, seed=3)
    save_checkpoint(tmp_path, cfg, params)
    cfg2, params2 = load_checkpoint(tmp_path)
    assert cfg2 == cfg
    _assert_same_tree(params, params2)


def test_sharded_round_trip(tmp_path):
    params = init_params(LLAMA, seed=4)
    save_checkpoint(tmp_path, LLAMA, params, max_shard_bytes=20_000)
    shards = sorted(p.name for p in tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 2
    assert not (tmp_path / "model.safetensors").exists()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    _, params2 = load_checkpoint(tmp_path)
    _assert_same_tree(params, params2)


@pytest.mark.parametrize("cfg", [GPT2, LLAMA, QWEN2], ids=["gpt2", "llama", "qwen2"])
def test_transformers_loads_what_we_save(tmp_path, cfg):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    job = InferenceJob(cfg, init_params(cfg, seed=5, std=0.2))
    job.save(tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokens = np.random.default_rng(0).integers(1, 300, (2, 20))
    with torch.no_grad():
        ref = hf(torch.tensor(tokens)).logits.numpy()
    assert np.abs(np.stack(job.logits(tokens.tolist())) - ref).max() <= 1e-4


def test_bfloat16_checkpoints_load(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    )
    hf.to(torch.bfloat16).save_pretrained(tmp_path)
    _, params = load_checkpoint(tmp_path)
    expected = hf.transformer.wte.weight.detach().float().numpy()
    assert params["embed"].dtype == np.float32
    np.testing.assert_array_equal(params["embed"], expected)


# ---------------------------------------------------------------------------------------------- bad directories
@pytest.fixture
def good_dir(tmp_path) -> Path:
    d = tmp_path / "model"
    save_checkpoint(d, LLAMA, init_params(LLAMA, seed=6))
    return d


def _rewrite_weights(d: Path, edit) -> None:
    tensors = load_file(str(d / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})


def test_missing_tensor_names_key_shape_and_directory(good_dir):
    _rewrite_weights(good_dir, lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(good_dir)
    msg = str(err.value)
    assert str(good_dir) in msg
    assert "'model.layers.1.self_attn.k_proj.weight'" in msg
    assert "(16, 32)" in msg
    assert "missing" in msg


def test_wrong_shape_names_file_key_and_both_shapes(good_dir):
    def edit(t):
        t["model.layers.0.mlp.down_proj.weight"] = np.zeros((32, 47), np.float32)

    _rewrite_weights(good_dir, edit)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(good_dir)
    msg = str(err.value)
    assert str(good_dir / "model.safetensors") in msg
    assert "'model.layers.0.mlp.down_proj.weight'" in msg
    assert "(32, 47)" in msg and "expected (32, 48)" in msg


def test_unexpected_tensor_is_an_error(good_dir):
    def edit(t):
        t["model.layers.2.input_layernorm.weight"] = np.ones(32, np.float32)

    _rewrite_weights(good_dir, edit)
    with pytest.raises(
        CheckpointError, match=r"not used by a llama model with 2 layers.*layers\.2\.input_layernorm"
    ):
        load_checkpoint(good_dir)


def test_unknown_model_type(good_dir):
    cfg = json.loads((good_dir / "config.json").read_text())
    cfg["model_type"] = "bert"
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        ConfigError, match=re.escape(str(good_dir / "config.json")) + r".*unsupported model_type 'bert'"
    ):
        load_checkpoint(good_dir)


def test_corrupt_config_json(good_dir):
    (good_dir / "config.json").write_text('{"model_type": "llama", ')
    with pytest.raises(ConfigError, match=re.escape(str(good_dir / "config.json")) + ": not valid JSON"):
        load_checkpoint(good_dir)


def test_missing_config_key(good_dir):
    cfg = json.loads((good_dir / "config.json").read_text())
    del cfg["hidden_size"]
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="missing required key 'hidden_size'"):
        load_checkpoint(good_dir)


def test_missing_weights_and_missing_directory(good_dir, tmp_path):
    (good_dir / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no model\.safetensors or model\.safetensors\.index\.json"):
        load_checkpoint(good_dir)
    with pytest.raises(CheckpointError, match="not a model directory"):
        load_checkpoint(tmp_path / "nowhere")


def test_corrupt_weights_file(good_dir):
    (good_dir / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_checkpoint(good_dir)


def test_missing_shard(tmp_path):
    save_checkpoint(tmp_path, LLAMA, init_params(LLAMA, seed=7), max_shard_bytes=20_000)
    victim = sorted(tmp_path.glob("model-*-of-*.safetensors"))[-1]
    victim.unlink()
    with pytest.raises(CheckpointError, match=re.escape(victim.name) + ".*does not exist"):
        load_checkpoint(tmp_path)


def test_saving_over_a_sharded_directory_removes_stale_shards(tmp_path):
    save_checkpoint(tmp_path, LLAMA, init_params(LLAMA, seed=8), max_shard_bytes=20_000)
    params = init_params(LLAMA, seed=9)
    save_checkpoint(tmp_path, LLAMA, params)
    assert (
        not list(tmp_path.glob("model-*-of-*")) and not (tmp_path / "model.safetensors.index.json").exists()
    )
    _assert_same_tree(params, load_checkpoint(tmp_path)[1])
    shutil.rmtree(tmp_path)
