"""Model hyper-parameters, and their translation from and to Hugging Face ``config.json``.

One frozen dataclass describes both supported families:

* ``family="gpt2"``: learned positions, LayerNorm with bias, GELU MLP, fused qkv with bias, tied embeddings.
* ``family="llama"``: RoPE, RMSNorm, SwiGLU MLP, grouped-query attention; Qwen2 adds a qkv bias, and the
  lm_head may be tied or not.

The dataclass is hashable, so it is passed to ``jax.jit`` as a static argument.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

Family = Literal["gpt2", "llama"]

#: ``model_type`` values of ``config.json`` that we can run, mapped to the architecture family.
SUPPORTED_MODEL_TYPES: dict[str, Family] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "llama",
    "mistral": "llama",
}

_GELU_NAMES = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu": "gelu",
}


class ConfigError(ValueError):
    """A ``config.json`` we cannot run; the message names the file and the offending key."""


@dataclass(frozen=True)
class ModelConfig:
    """Shape and flavour of a decoder-only transformer.

    Attributes:
        family: ``"gpt2"`` or ``"llama"`` (Llama, Qwen2 and Mistral share the second).
        model_type: the Hugging Face ``model_type`` written back on save (``gpt2``, ``llama``, ``qwen2``...).
        vocab_size: V.
        d_model: D, the residual width.
        n_layers: L.
        n_heads: H, query heads.
        n_kv_heads: KV heads (``== n_heads`` for GPT-2; fewer for grouped-query attention).
        head_dim: Dh (usually ``D // H``).
        d_ff: F, MLP hidden width.
        max_positions: the context length T_max (``n_positions`` / ``max_position_embeddings``).
        norm_eps: LayerNorm / RMSNorm epsilon.
        activation: ``"gelu_tanh"``, ``"gelu"`` or ``"silu"``.
        tie_embeddings: logits use the token embedding transposed instead of a separate ``lm_head``.
        qkv_bias: the q/k/v projections have a bias (GPT-2, Qwen2, Llama with ``attention_bias``).
        out_bias: the attention output projection has a bias (GPT-2, Llama with ``attention_bias``).
        mlp_bias: the MLP projections have biases (GPT-2, Llama with ``mlp_bias``).
        rope_theta: RoPE base frequency (llama family only).
        rope_scaling: ``None`` or a tuple of ``(key, value)`` pairs of a ``"linear"`` / ``"llama3"`` scaling.
        bos_token_id, eos_token_ids, pad_token_id: special ids from ``config.json`` (may be ``None`` / empty).
    """

    family: Family
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    max_positions: int
    model_type: str = ""
    norm_eps: float = 1e-5
    activation: str = "gelu_tanh"
    tie_embeddings: bool = True
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        if not self.model_type:
            object.__setattr__(self, "model_type", self.family)
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def gpt2(
        cls,
        *,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        max_positions: int,
        d_ff: int | None = None,
        **kw: Any,
    ) -> ModelConfig:
        """A GPT-2 shaped config (``d_ff`` defaults to ``4 * d_model``)."""
        return cls(
            family="gpt2",
            vocab_size=vocab_size,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=n_heads,
            n_kv_heads=n_heads,
            head_dim=d_model // n_heads,
            d_ff=d_ff or 4 * d_model,
            max_positions=max_positions,
            **kw,
        )

    @property
    def n_params(self) -> int:
        """Number of parameters (tied embeddings counted once)."""
        D, F, L, V = self.d_model, self.d_ff, self.n_layers, self.vocab_size
        q, kv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        attn = D * (q + 2 * kv) + q * D + (q + 2 * kv) * self.qkv_bias + D * self.out_bias
        if self.family == "gpt2":
            mlp = 2 * D * F + (F + D) * self.mlp_bias
            norms = 4 * D
        else:
            mlp = 3 * D * F + (3 * F if self.mlp_bias else 0)
            norms = 2 * D
        emb = V * D + (0 if self.tie_embeddings else V * D)
        pos = self.max_positions * D if self.family == "gpt2" else 0
        final = 2 * D if self.family == "gpt2" else D
        return L * (attn + mlp + norms) + emb + pos + final

    def matmul_flops_per_token(self, context: int) -> int:
        """Forward matmul FLOPs for one token attending over ``context`` keys (logits included)."""
        D, F = self.d_model, self.d_ff
        q, kv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        mlp = (4 if self.family == "gpt2" else 6) * D * F
        per_layer = 2 * D * (q + 2 * kv) + 2 * q * D + mlp + 4 * context * q
        return self.n_layers * per_layer + 2 * D * self.vocab_size

    # ------------------------------------------------------------------ Hugging Face config.json
    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], source: str = "config.json") -> ModelConfig:
        """Translate a Hugging Face config dict. Raises :class:`ConfigError` naming ``source`` and the key."""
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: unsupported model_type {model_type!r}; supported: {sorted(SUPPORTED_MODEL_TYPES)}"
            )

        def need(key: str, *alternatives: str) -> Any:
            for k in (key, *alternatives):
                if hf.get(k) is not None:
                    return hf[k]
            raise ConfigError(f"{source}: missing required key {key!r} for model_type {model_type!r}")

        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        special = {
            "bos_token_id": hf.get("bos_token_id"),
            "eos_token_ids": eos_ids,
            "pad_token_id": hf.get("pad_token_id"),
        }
        if SUPPORTED_MODEL_TYPES[model_type] == "gpt2":
            for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
                if hf.get(flag):
                    raise ConfigError(f"{source}: {flag}=true is not supported")
            act = hf.get("activation_function", "gelu_new")
            if act not in _GELU_NAMES:
                raise ConfigError(f"{source}: unsupported activation_function {act!r}")
            d, h = int(need("n_embd")), int(need("n_head"))
            return cls(
                family="gpt2",
                model_type=model_type,
                vocab_size=int(need("vocab_size")),
                d_model=d,
                n_layers=int(need("n_layer")),
                n_heads=h,
                n_kv_heads=h,
                head_dim=d // h,
                d_ff=int(hf.get("n_inner") or 4 * d),
                max_positions=int(need("n_positions", "n_ctx")),
                norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
                activation=_GELU_NAMES[act],
                tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
                **special,
            )

        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"{source}: unsupported hidden_act {act!r} (only 'silu')")
        if hf.get("use_sliding_window") or (model_type == "mistral" and hf.get("sliding_window") is not None):
            window = hf.get("sliding_window")
            if window is not None and int(window) < int(hf.get("max_position_embeddings", 0)):
                raise ConfigError(
                    f"{source}: sliding-window attention (sliding_window={window}) is not supported"
                )
        d, h = int(need("hidden_size")), int(need("num_attention_heads"))
        rope = dict(hf.get("rope_parameters") or {})
        theta = float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))
        scaling = hf.get("rope_scaling") or {}
        if "rope_type" in rope and rope["rope_type"] != "default":
            scaling = rope
        kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
        if kind not in ("default", "linear", "llama3"):
            raise ConfigError(f"{source}: unsupported rope scaling type {kind!r} (default, linear, llama3)")
        if hf.get("partial_rotary_factor", 1.0) != 1.0:
            raise ConfigError(f"{source}: partial_rotary_factor is not supported")
        rope_scaling = None
        if kind != "default":
            keep = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
            rope_scaling = (("rope_type", kind), *((k, float(scaling[k])) for k in keep if k in scaling))
        attention_bias = bool(hf.get("attention_bias", False))
        return cls(
            family="llama",
            model_type=model_type,
            vocab_size=int(need("vocab_size")),
            d_model=d,
            n_layers=int(need("num_hidden_layers")),
            n_heads=h,
            n_kv_heads=int(hf.get("num_key_value_heads") or h),
            head_dim=int(hf.get("head_dim") or d // h),
            d_ff=int(need("intermediate_size")),
            max_positions=int(need("max_position_embeddings")),
            norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            activation="silu",
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=attention_bias or model_type == "qwen2",
            out_bias=attention_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)),
            rope_theta=theta,
            rope_scaling=rope_scaling,
            **special,
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers needs to rebuild this model."""
        eos: Any = None
        if self.eos_token_ids:
            eos = self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else list(self.eos_token_ids)
        special = {"bos_token_id": self.bos_token_id, "eos_token_id": eos, "pad_token_id": self.pad_token_id}
        if self.family == "gpt2":
            inverse = {v: k for k, v in _GELU_NAMES.items() if k in ("gelu_new", "gelu")}
            return {
                "architectures": ["GPT2LMHeadModel"],
                "model_type": "gpt2",
                "vocab_size": self.vocab_size,
                "n_embd": self.d_model,
                "n_layer": self.n_layers,
                "n_head": self.n_heads,
                "n_inner": self.d_ff,
                "n_positions": self.max_positions,
                "n_ctx": self.max_positions,
                "layer_norm_epsilon": self.norm_eps,
                "activation_function": inverse[self.activation],
                "tie_word_embeddings": self.tie_embeddings,
                "attn_pdrop": 0.0,
                "embd_pdrop": 0.0,
                "resid_pdrop": 0.0,
                "torch_dtype": "float32",
                **special,
            }
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
        out: dict[str, Any] = {
            "architectures": [arch.get(self.model_type, "LlamaForCausalLM")],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.d_model,
            "intermediate_size": self.d_ff,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_positions,
            "rms_norm_eps": self.norm_eps,
            "hidden_act": "silu",
            "tie_word_embeddings": self.tie_embeddings,
            "rope_theta": self.rope_theta,
            "torch_dtype": "float32",
            **special,
        }
        if self.model_type != "qwen2":
            out["attention_bias"] = self.qkv_bias
            out["mlp_bias"] = self.mlp_bias
        if self.rope_scaling:
            out["rope_scaling"] = dict(self.rope_scaling)
        return out

    @classmethod
    def from_json_file(cls, path: str | Path) -> ModelConfig:
        """Read ``config.json``; corrupt JSON or an unsupported model raises :class:`ConfigError`."""
        path = Path(path)
        try:
            hf = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: not found (a model directory needs config.json)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(hf, dict):
            raise ConfigError(f"{path}: expected a JSON object, got {type(hf).__name__}")
        return cls.from_hf_dict(hf, source=str(path))

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """RoPE inverse frequencies, float32 (Dh/2,), with ``linear`` / ``llama3`` scaling applied like transformers."""
    dim = cfg.head_dim
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv = (np.float32(1.0) / (np.float32(cfg.rope_theta) ** exponent)).astype(np.float32)
    if not cfg.rope_scaling:
        return inv
    s = dict(cfg.rope_scaling)
    factor = float(s.get("factor", 1.0))
    if s["rope_type"] == "linear":
        return (inv / np.float32(factor)).astype(np.float32)
    low, high = float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    old_ctx = float(s.get("original_max_position_embeddings", 8192))
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)
