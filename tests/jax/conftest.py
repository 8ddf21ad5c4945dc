"""Fixtures for the JAX engine tests: small random transformers checkpoints and the shipped tiny-adder model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from pytest_reward.jax import InferenceJob, ModelConfig, init_params, resolve_model

VOCAB = 300  # > 257 so the byte tokenizer's ids are valid for the random models too


def _hf_models() -> dict[str, object]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = {"vocab_size": VOCAB, "bos_token_id": 256, "eos_token_id": 256, "pad_token_id": 256}
    gpt2 = transformers.GPT2Config(n_positions=96, n_embd=64, n_layer=2, n_head=4, **common)
    llama = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=112,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention
        max_position_embeddings=96,
        rope_theta=5000.0,
        tie_word_embeddings=False,
        **common,
    )
    qwen2 = transformers.Qwen2Config(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=96,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        **common,
    )
    return {
        "gpt2": transformers.GPT2LMHeadModel(gpt2),
        "llama": transformers.LlamaForCausalLM(llama),
        "qwen2": transformers.Qwen2ForCausalLM(qwen2),
    }


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    """name -> (directory written by ``save_pretrained``, the transformers model in eval mode)."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for name, m in _hf_models().items():
        # Random init gives near-uniform logits; scale the weights up so greedy decisions are far from ties.
        import torch

        with torch.no_grad():
            for p in m.parameters():
                if p.ndim >= 2:
                    p.mul_(4.0)
        m.eval()
        m.save_pretrained(root / name)
        out[name] = (root / name, m)
    return out


@pytest.fixture(scope="session")
def adder_dir() -> Path:
    return resolve_model("tiny-adder")


@pytest.fixture(scope="session")
def adder(adder_dir: Path) -> InferenceJob:
    return InferenceJob.from_checkpoint(adder_dir, per_device_batch_size=64)


@pytest.fixture(scope="session")
def random_gpt() -> InferenceJob:
    """A random byte-level GPT-2 (vocab 257), sharp enough that greedy paths are not ties."""

    cfg = ModelConfig.gpt2(vocab_size=257, d_model=64, n_layers=2, n_heads=4, max_positions=128)
    params = init_params(cfg, seed=1, std=0.2)
    return InferenceJob(cfg, params, per_device_batch_size=8)


def random_prompts(n: int, lo: int, hi: int, seed: int = 0) -> list[str]:
    """``n`` lowercase ASCII prompts with lengths in [lo, hi], both ends included."""
    rng = np.random.default_rng(seed)
    lengths = [lo, hi, *rng.integers(lo, hi + 1, max(0, n - 2)).tolist()][:n]
    return ["".join(chr(c) for c in rng.integers(97, 123, k)) for k in lengths]


def bigram_job(table: np.ndarray, tokenizer=None, max_positions: int = 64, **kwargs) -> InferenceJob:
    """A model whose logits are ``table[previous token]`` exactly: a 0-layer Llama with one-hot embeddings.

    ``table`` is (V, V) float; RMSNorm of ``sqrt(V) * one_hot`` is ``sqrt(V) * one_hot``, scaled back by the final
    norm, so ``logits(t) = table[t]``. For tests that need hand-computable log-probabilities.
    """
    import math

    V = table.shape[0]
    cfg = ModelConfig(
        family="llama",
        vocab_size=V,
        d_model=V,
        n_layers=0,
        n_heads=1,
        n_kv_heads=1,
        head_dim=V,
        d_ff=4,
        max_positions=max_positions,
        norm_eps=0.0,
        activation="silu",
        tie_embeddings=False,
        qkv_bias=False,
        out_bias=False,
        mlp_bias=False,
    )
    params = {
        "embed": np.eye(V, dtype=np.float32) * np.float32(math.sqrt(V)),
        "layers": [],
        "final_norm": {"scale": np.full(V, 1 / math.sqrt(V), np.float32)},
        "lm_head": {"w": np.asarray(table, np.float32)},
    }
    return InferenceJob(cfg, params, tokenizer, **kwargs)


# ---------------------------------------------------------------------------------------------- reward models
EOS = 256  # the byte tokenizer's <|endoftext|>: eos, and pad (pad == eos, GPT-2's convention) in the reward models


def _reward_models(num_labels: int = 1) -> dict[str, object]:
    """Tiny random reward models, one per class the engine reads: the ``*ForSequenceClassification`` heads (no bias)
    and a ``*ForTokenClassification`` one (verl's, with a bias)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    common = {"vocab_size": VOCAB, "bos_token_id": EOS, "eos_token_id": EOS, "pad_token_id": EOS}
    common["num_labels"] = num_labels
    gpt2 = transformers.GPT2Config(n_positions=128, n_embd=32, n_layer=2, n_head=2, **common)
    llama = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rope_theta=5000.0,
        **common,
    )
    qwen2 = transformers.Qwen2Config(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=128,
        **common,
    )
    return {
        "gpt2": transformers.GPT2ForSequenceClassification(gpt2),
        "llama": transformers.LlamaForSequenceClassification(llama),
        "qwen2": transformers.Qwen2ForSequenceClassification(qwen2),
        "qwen2-token": transformers.Qwen2ForTokenClassification(qwen2),
    }


def save_reward_models(root: Path, num_labels: int = 1) -> dict[str, tuple[Path, object]]:
    """name -> (directory written by ``save_pretrained`` with a byte tokenizer, the transformers model in eval mode).
    Weights are scaled up (random init is near-constant) and the head's bias, where there is one, set away from 0."""
    import torch

    from pytest_reward.jax import ByteTokenizer

    out = {}
    for name, m in _reward_models(num_labels).items():
        with torch.no_grad():
            for p in m.parameters():
                if p.ndim >= 2:
                    p.mul_(3.0)
            if getattr(m.score, "bias", None) is not None:
                m.score.bias.copy_(torch.linspace(0.5, 1.5, m.score.bias.numel()))
        m.eval()
        m.save_pretrained(root / name)
        ByteTokenizer().save(root / name)
        out[name] = (root / name, m)
    return out


@pytest.fixture(scope="session")
def reward_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    """The tiny reward models of :func:`save_reward_models`, one label each."""
    return save_reward_models(tmp_path_factory.mktemp("rm"))


@pytest.fixture(scope="session")
def reward_checkpoints_3_labels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    """The tiny reward models of :func:`save_reward_models` with a three-row head (``num_labels=3``)."""
    return save_reward_models(tmp_path_factory.mktemp("rm3"), num_labels=3)
