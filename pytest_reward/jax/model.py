"""The transformer: pure functions over a parameter pytree, GPT-2 and Llama/Qwen2 flavours in one file.

Notation used in the shape comments: B batch, T tokens in the call, S key/value slots in a cache, D model width,
H query heads, KV key/value heads, G = H // KV query heads per kv head, Dh head width, F MLP width, V vocab.

Parameters are a plain dict (see :func:`init_params` for the full tree). Layers are a Python list and are
unrolled at trace time, which measured 2-3x faster than ``lax.scan`` over stacked layers for CPU decoding.
Query, key and value projections are fused into one ``(D, (H + 2 KV) Dh)`` matrix, and for the Llama family
the gate and up projections into one ``(D, 2F)`` matrix, so each layer runs few, large matmuls.

Padding is always on the left. A row's positions are ``cumsum(mask) - 1``, so the first real token has
position 0 however much padding precedes it: the same prompt gives the same numbers alone or in a batch.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import kernels
from .config import ModelConfig, rope_inv_freq

Params = dict[str, Any]
#: One (key, value) pair per layer, each (B, KV, S, Dh).
KVCache = tuple[tuple[jax.Array, jax.Array], ...]

_NEG = -1e30  # masked attention score; finite so an all-masked (padding) query row stays NaN-free


# ---------------------------------------------------------------------------------------------- init
def init_params(cfg: ModelConfig, seed: int = 0, dtype: Any = np.float32, std: float = 0.02) -> Params:
    """Random parameters as numpy arrays: normal(0, std), residual projections scaled by 1/sqrt(2L), norms at
    1, biases at 0. Drawn with numpy's seeded generator (no XLA compile, deterministic everywhere).

    Tree::

        embed      (V, D)                      token embedding (also the unembedding when tied)
        pos_embed  (T_max, D)                  GPT-2 only
        layers[i]  attn_norm {scale (D,), bias (D,) GPT-2 only}
                   qkv  {w (D, (H+2KV) Dh), b ((H+2KV) Dh,) if qkv_bias}
                   out  {w (H Dh, D), b (D,) if out_bias}
                   mlp_norm {scale, bias}
                   up   {w (D, F) GPT-2 | (D, 2F) Llama: [gate | up], b if mlp_bias}
                   down {w (F, D), b (D,) if mlp_bias}
        final_norm {scale (D,), bias (D,) GPT-2 only}
        lm_head    {w (D, V)}                  untied models only
    """
    D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    q_kv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    rng = np.random.default_rng(seed)
    resid_std = std / math.sqrt(2 * cfg.n_layers)

    def normal(shape: tuple[int, ...], s: float = std) -> np.ndarray:
        return (s * rng.standard_normal(shape, dtype=np.float32)).astype(dtype)

    def norm() -> Params:
        p = {"scale": np.ones((D,), dtype)}
        if cfg.family == "gpt2":
            p["bias"] = np.zeros((D,), dtype)
        return p

    def linear(n_in: int, n_out: int, bias: bool, s: float = std) -> Params:
        p = {"w": normal((n_in, n_out), s)}
        if bias:
            p["b"] = np.zeros((n_out,), dtype)
        return p

    up_width = F if cfg.family == "gpt2" else 2 * F
    params: Params = {"embed": normal((V, D))}
    if cfg.family == "gpt2":
        params["pos_embed"] = normal((cfg.max_positions, D), 0.01)
    params["layers"] = [
        {
            "attn_norm": norm(),
            "qkv": linear(D, q_kv, cfg.qkv_bias),
            "out": linear(cfg.n_heads * cfg.head_dim, D, cfg.out_bias, resid_std),
            "mlp_norm": norm(),
            "up": linear(D, up_width, cfg.mlp_bias),
            "down": linear(F, D, cfg.mlp_bias, resid_std),
        }
        for _ in range(cfg.n_layers)
    ]
    params["final_norm"] = norm()
    if not cfg.tie_embeddings:
        params["lm_head"] = {"w": normal((D, V))}
    return params


# ---------------------------------------------------------------------------------------------- pieces
def positions_from_mask(mask: jax.Array) -> jax.Array:
    """(B, T) bool, left-padded -> (B, T) int32 positions; the first real token is 0, padding is 0."""
    return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def _linear(p: Params, x: jax.Array) -> jax.Array:
    y = x @ p["w"]
    return y + p["b"] if "b" in p else y


def _norm(p: Params, x: jax.Array, cfg: ModelConfig, axis: int = -1) -> jax.Array:
    """LayerNorm (GPT-2) or RMSNorm (Llama) over ``axis`` (the features: -1, or 0 for a feature-major (D, B)
    array), computed in float32."""
    x32 = x.astype(jnp.float32)
    scale = p["scale"] if axis == -1 else p["scale"][:, None]
    if cfg.family == "gpt2":
        bias = p["bias"] if axis == -1 else p["bias"][:, None]
        mean = x32.mean(axis, keepdims=True)
        var = jnp.square(x32 - mean).mean(axis, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + cfg.norm_eps)
        return (y.astype(x.dtype) * scale + bias).astype(x.dtype)
    var = jnp.square(x32).mean(axis, keepdims=True)
    return scale * (x32 * jax.lax.rsqrt(var + cfg.norm_eps)).astype(x.dtype)


def _mlp(p: Params, x: jax.Array, cfg: ModelConfig) -> jax.Array:
    """(..., D) -> (..., D)."""
    h = _linear(p["up"], x)  # (..., F) or (..., 2F)
    if cfg.family == "gpt2":
        h = jax.nn.gelu(h, approximate=cfg.activation == "gelu_tanh")
    else:
        gate, up = jnp.split(h, 2, axis=-1)
        h = jax.nn.silu(gate) * up
    return _linear(p["down"], h)


def _rotate(x: jax.Array, pos: jax.Array, cfg: ModelConfig, axis: int) -> jax.Array:
    """Rotary positions with the half-split convention of transformers: the two halves of ``axis`` (the head
    width) turned by ``pos`` times each frequency; ``pos`` broadcasts against ``x`` once a frequency axis is put
    in place of ``axis``."""
    freq_shape = [1] * x.ndim
    freq_shape[axis] = -1
    angles = pos.astype(jnp.float32) * jnp.asarray(rope_inv_freq(cfg)).reshape(freq_shape)  # (..., Dh/2, ...)
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=axis)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=axis)


def _rope_t(h: jax.Array, pos: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Rotary positions for the query and key heads of feature-major projections: h ((H+2KV) Dh, B), pos (B,)."""
    Dh, n = cfg.head_dim, cfg.n_heads + cfg.n_kv_heads
    x = h.reshape(-1, Dh, h.shape[1])  # (heads, Dh, B)
    rotated = _rotate(x[:n], pos[None, None, :], cfg, axis=1)
    return jnp.concatenate([rotated, x[n:]], axis=0).reshape(h.shape)


def _rope_tokens(h: jax.Array, pos: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Rotary positions for the query and key heads of token-major projections: h (B, T, (H+2KV) Dh), pos (B, T)."""
    B, T, _ = h.shape
    Dh, n = cfg.head_dim, cfg.n_heads + cfg.n_kv_heads
    x = h.reshape(B, T, -1, Dh)  # (B, T, heads, Dh)
    rotated = _rotate(x[:, :, :n], pos[:, :, None, None], cfg, axis=-1)
    return jnp.concatenate([rotated, x[:, :, n:]], axis=2).reshape(h.shape)


def _split_qkv(h: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(B, T, (H+2KV) Dh) -> q (B, KV, G, T, Dh), k (B, KV, T, Dh), v (B, KV, T, Dh)."""
    B, T, _ = h.shape
    H, KV, Dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    q, k, v = jnp.split(h, [H * Dh, (H + KV) * Dh], axis=-1)
    q = q.reshape(B, T, KV, H // KV, Dh).transpose(0, 2, 3, 1, 4)
    k = k.reshape(B, T, KV, Dh).transpose(0, 2, 1, 3)
    v = v.reshape(B, T, KV, Dh).transpose(0, 2, 1, 3)
    return q, k, v


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, allowed: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Grouped-query attention.

    q (B, KV, G, Tq, Dh), k/v (B, KV, S, Dh), allowed (B, 1, 1, Tq, S) bool -> (B, Tq, H Dh).
    """
    scale = 1.0 / math.sqrt(cfg.head_dim)
    s = jnp.einsum("bkgqd,bksd->bkgqs", q, k).astype(jnp.float32) * scale  # (B, KV, G, Tq, S)
    s = jnp.where(allowed, s, _NEG)
    w = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    o = jnp.einsum("bkgqs,bksd->bkgqd", w, v)  # (B, KV, G, Tq, Dh)
    B, KV, G, Tq, Dh = o.shape
    return o.transpose(0, 3, 1, 2, 4).reshape(B, Tq, KV * G * Dh)


def _attend_prefill(h: jax.Array, mask: jax.Array, queries: int, cfg: ModelConfig) -> jax.Array:
    """Causal attention of a left-padded batch: h (B, T, (H+2KV) Dh) the query, key and value projections
    (rotary positions applied), mask (B, T) bool the real tokens -> (B, queries, H Dh), the attention output of
    the last ``queries`` positions. Position i attends over the real tokens at or before it.

    On the CPU with float32 operands this is the hand-written kernel of :mod:`.kernels` where it is available: it
    reads the projections where the matmul left them, computes only the scores of keys at or before each query and
    sums in registers (GPT-2-small's prompt of 64 tokens at batch 32: 10 ms per layer in XLA's masked T x T
    attention); elsewhere, and on every other platform of the same program, the XLA path. Derivatives (training
    through :func:`forward`) are the XLA path's: the kernel computes the same function."""
    T = h.shape[1]

    def xla(h, mask):  # type: ignore[no-untyped-def]
        q, k, v = _split_qkv(h, cfg)
        causal = jnp.tril(jnp.ones((T, T), bool))
        allowed = (causal[None] & mask[:, None, :])[:, None, None]  # (B, 1, 1, T, T)
        return _attend(q[:, :, :, T - queries :], k, v, allowed[:, :, :, T - queries :], cfg)

    if not (h.dtype == jnp.float32 and kernels.available()):
        return xla(h, mask)

    def cpu(h, mask):  # type: ignore[no-untyped-def]
        scale = 1.0 / math.sqrt(cfg.head_dim)
        return kernels.prefill_attention(h, mask, queries, cfg.n_kv_heads, cfg.head_dim, scale)

    @jax.custom_jvp
    def attend(h, mask):  # type: ignore[no-untyped-def]
        return jax.lax.platform_dependent(h, mask, cpu=cpu, default=xla)

    @attend.defjvp
    def attend_jvp(primals, tangents):  # type: ignore[no-untyped-def]
        (h, mask), (dh, _) = primals, tangents
        _, dout = jax.jvp(lambda h: xla(h, mask), (h,), (dh,))  # linear in dh: reverse mode transposes it
        return attend(h, mask), dout

    return attend(h, mask)


def _attend_decode(
    h: jax.Array,
    pos: jax.Array,
    slot: jax.Array,
    ck: jax.Array,
    cv: jax.Array,
    valid: jax.Array,
    cfg: ModelConfig,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A decode step's attention: h ((H+2KV) Dh, B) the query, key and value projections feature-major, pos (B,)
    int32, slot () int32 the cache slot every row writes (clamped into the cache, as a dynamic update slice is) or
    (B,) int32 one per row (a slot outside the cache writes nothing), ck/cv (B, KV, S, Dh), valid (B, S) bool ->
    (H Dh, B) feature-major, and ck, cv with this token's keys and values written.

    On the CPU with float32 operands this is the hand-written kernel of :mod:`.kernels` where it is available: it
    reads the projections where the matmul left them, writes the cache rows in place and reads each valid cache
    slot once (~1.5x faster than XLA's two batched matrix-vector products, with no transposes and no separate
    cache write); elsewhere, and on every other platform of the same program, the XLA path."""
    B, S = ck.shape[0], ck.shape[2]

    if cfg.family == "llama":
        h = _rope_t(h, pos, cfg)

    def xla(h, slot, ck, cv, valid):  # type: ignore[no-untyped-def]
        q, k, v = _split_qkv_t(h, cfg)  # q (B, KV, G, 1, Dh), k/v (B, KV, 1, Dh)
        if jnp.ndim(slot) == 0:
            ck = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), (0, 0, slot, 0))  # (B, KV, S, Dh)
            cv = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (0, 0, slot, 0))
        else:  # row b's column slot[b]
            rows = jnp.arange(B)
            ck = ck.at[rows, :, slot].set(k[:, :, 0].astype(ck.dtype), mode="drop")
            cv = cv.at[rows, :, slot].set(v[:, :, 0].astype(cv.dtype), mode="drop")
        return _attend(q, ck, cv, valid[:, None, None, None, :], cfg)[:, 0].T, ck, cv

    if not (h.dtype == ck.dtype == cv.dtype == jnp.float32 and kernels.available()):
        return xla(h, slot, ck, cv, valid)

    def cpu(h, slot, ck, cv, valid):  # type: ignore[no-untyped-def]
        rows = jnp.broadcast_to(jnp.clip(slot, 0, S - 1) if jnp.ndim(slot) == 0 else slot, (B,))
        return kernels.decode_attention_update(h, rows, ck, cv, valid, 1.0 / math.sqrt(cfg.head_dim))

    return jax.lax.platform_dependent(h, slot, ck, cv, valid, cpu=cpu, default=xla)


def _embed(params: Params, cfg: ModelConfig, tokens: jax.Array, pos: jax.Array) -> jax.Array:
    """tokens, pos (B, T) -> (B, T, D)."""
    x = params["embed"][tokens]
    if cfg.family == "gpt2":
        x = x + params["pos_embed"][pos]
    return x


def unembed(params: Params, cfg: ModelConfig, x: jax.Array) -> jax.Array:
    """Final norm and logits: (..., D) -> (..., V) float32."""
    return unembed_slice(params, cfg, final_norm(params, cfg, x), 0, cfg.vocab_size)


def final_norm(params: Params, cfg: ModelConfig, x: jax.Array) -> jax.Array:
    """The norm applied before the unembedding: (..., D) -> (..., D)."""
    return _norm(params["final_norm"], x, cfg)


def unembed_slice(params: Params, cfg: ModelConfig, h: jax.Array, start: int, size: int) -> jax.Array:
    """Logits of vocabulary ids [start, start + size) from final-normed states: (..., D) -> (..., size) float32."""
    if cfg.tie_embeddings:
        w = params["embed"] if (start, size) == (0, cfg.vocab_size) else params["embed"][start : start + size]
        return (h @ w.T).astype(jnp.float32)
    w = params["lm_head"]["w"]
    w = w if (start, size) == (0, cfg.vocab_size) else w[:, start : start + size]
    return (h @ w).astype(jnp.float32)


# ---------------------------------------------------------------------------------------------- full forward
def hidden_states(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    mask: jax.Array | None = None,
    last_only: bool = False,
) -> tuple[jax.Array, list[tuple[jax.Array, jax.Array]]]:
    """Causal forward over a left-padded batch, without the unembedding.

    tokens (B, T) int32, mask (B, T) bool (True = real token; ``None`` = no padding).
    Returns the last hidden state before the final norm (B, T, D) and each layer's rotated keys and values,
    (B, KV, T, Dh) each, ready to seed a KV cache. ``last_only`` (a prefill: the cache needs every position's keys
    and values, the first new token only the last position's state): the last layer's attention output and MLP
    run for the last position only, and the hidden state is (B, 1, D).
    """
    B, T = tokens.shape
    if mask is None:
        mask = jnp.ones((B, T), bool)
    pos = positions_from_mask(mask)  # (B, T)
    x = _embed(params, cfg, tokens, pos)
    kvs = []
    for i, lp in enumerate(params["layers"]):
        h = _linear(lp["qkv"], _norm(lp["attn_norm"], x, cfg))  # (B, T, (H+2KV) Dh)
        if cfg.family == "llama":
            h = _rope_tokens(h, pos, cfg)
        queries = T
        if last_only and i == cfg.n_layers - 1:
            queries, x = 1, x[:, -1:]
        x = x + _linear(lp["out"], _attend_prefill(h, mask, queries, cfg))
        x = x + _mlp(lp, _norm(lp["mlp_norm"], x, cfg), cfg)
        _, k, v = _split_qkv(h, cfg)
        kvs.append((k, v))
    return x, kvs


def extend_hidden_states(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    mask: jax.Array,
    start: jax.Array,
    prefix: list[tuple[jax.Array, jax.Array]],
    prefix_mask: jax.Array,
    last_only: bool = False,
) -> jax.Array:
    """Causal forward of continuations of prefixes already run (their keys and values from :func:`hidden_states`).

    tokens, mask (B, T) the continuations, left-padded; start (B,) int32 the position of each row's first token
    (its prefix's length); prefix one (keys, values) pair per layer, (B, KV, P, Dh) each, and prefix_mask (B, P)
    bool their real slots. Each token attends to its row's real prefix slots and to the real tokens of its row at or
    before it: the numbers of :func:`hidden_states` over the prefix and the continuation together, for the
    continuation's positions. Returns the last hidden state before the final norm, (B, T, D), or with ``last_only``
    (B, 1, D), the last layer's attention and MLP run for the last position only. Attention is XLA's.
    """
    B, T = tokens.shape
    P = prefix_mask.shape[1]
    pos = start[:, None] + positions_from_mask(mask)  # (B, T)
    x = _embed(params, cfg, tokens, pos)
    own = jnp.tril(jnp.ones((T, T), bool))[None] & mask[:, None, :]  # (B, T, T)
    earlier = jnp.broadcast_to(prefix_mask[:, None, :], (B, T, P))
    allowed = jnp.concatenate([earlier, own], axis=-1)[:, None, None]  # (B, 1, 1, T, P + T)
    for i, (lp, (pk, pv)) in enumerate(zip(params["layers"], prefix, strict=True)):
        h = _linear(lp["qkv"], _norm(lp["attn_norm"], x, cfg))  # (B, T, (H+2KV) Dh)
        if cfg.family == "llama":
            h = _rope_tokens(h, pos, cfg)
        q, k, v = _split_qkv(h, cfg)
        k = jnp.concatenate([pk.astype(k.dtype), k], axis=2)  # (B, KV, P + T, Dh)
        v = jnp.concatenate([pv.astype(v.dtype), v], axis=2)
        a = allowed
        if last_only and i == cfg.n_layers - 1:
            q, a, x = q[:, :, :, -1:], allowed[:, :, :, -1:], x[:, -1:]
        x = x + _linear(lp["out"], _attend(q, k, v, a, cfg))
        x = x + _mlp(lp, _norm(lp["mlp_norm"], x, cfg), cfg)
    return x


def forward(params: Params, cfg: ModelConfig, tokens: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Logits of a left-padded batch: tokens (B, T) int32, mask (B, T) bool -> (B, T, V) float32."""
    x, _ = hidden_states(params, cfg, tokens, mask)
    return unembed(params, cfg, x)


# ---------------------------------------------------------------------------------------------- cached decode
def init_cache(kvs: list[tuple[jax.Array, jax.Array]], extra_slots: int) -> KVCache:
    """Grow prefill keys/values (B, KV, P, Dh) to a cache of P + extra_slots slots (B, KV, S, Dh)."""
    widen = ((0, 0), (0, 0), (0, extra_slots), (0, 0))
    return tuple((jnp.pad(k, widen), jnp.pad(v, widen)) for k, v in kvs)


def decode_weights(params: Params, cfg: ModelConfig, packed: bool = False) -> Params:
    """The parameters as :func:`decode_step` reads them: every matrix as (out, in), the unembedding as (V, D);
    with ``packed``, every matrix and the unembedding as the CPU kernel's panels instead.

    A decode step multiplies a few rows by every weight matrix. On CPU, XLA's matmul (YNNPACK) packs its right
    operand on every call: with the weight on the right, that is the whole matrix every step; with the weight on the
    left in (out, in) layout it streams the weight once and packs only the B activation columns (GPT-2-small, batch
    32: 47 ms of matmuls per step instead of 64). ``packed`` lays each matrix out for
    :func:`~.kernels.linear_packed` (:func:`~.kernels.pack_rows`: panels of 12 rows, read as one sequential stream),
    1.1-1.75x faster again where the kernels are available (:func:`decode_packed` says when to ask for it).
    :class:`~.inference.InferenceJob` keeps this second copy of the matrices beside the parameters (packed, the
    unembedding too: a copy of the embedding when tied; computed once per parameter set, on the host) and passes
    both to the rollout programs: the prefill reads the checkpoint layout of :func:`init_params`, the one tree
    everything else reads. Works on numpy arrays (the transposes are views) and inside jit alike.

    Tree: ``embed``, ``pos_embed`` (GPT-2), ``final_norm`` as in ``params``; ``unembed`` as ``{wt (V, D)}``
    (``embed`` itself when tied); ``layers[i]``: the norms, and ``qkv``, ``out``, ``up``, ``down`` as ``{wt (out,
    in), b (out,)}``. Packed, each of those matrices is ``{panels (ceil(out / 12), in, 12), b (out,)}`` instead
    (zeros where there is no bias).
    """

    def t(w: Any, b: Any = None) -> Params:
        if not packed:
            return {"wt": w, **({"b": b} if b is not None else {})}
        xp = jnp if isinstance(w, jax.Array) else np
        return {"panels": kernels.pack_rows(w), "b": xp.zeros(w.shape[0], w.dtype) if b is None else b}

    out: Params = {k: params[k] for k in ("embed", "pos_embed", "final_norm") if k in params}
    unembed = params["embed"] if cfg.tie_embeddings else params["lm_head"]["w"].T
    out["unembed"] = t(unembed)
    out["layers"] = [
        {
            "attn_norm": lp["attn_norm"],
            "mlp_norm": lp["mlp_norm"],
            **{name: t(lp[name]["w"].T, lp[name].get("b")) for name in ("qkv", "out", "up", "down")},
        }
        for lp in params["layers"]
    ]
    return out


def decode_packed(dtype: Any) -> bool:
    """Whether :func:`decode_weights` should pack the matrices for a decode step of ``dtype`` parameters run on the
    CPU now: float32 and the kernels available (the packed layout is read by the CPU kernel; XLA's path can read it,
    with a copy of each matrix per step, so it is meant for the CPU only)."""
    return np.dtype(dtype) == np.float32 and kernels.available()


def _linear_t(p: Params, x: jax.Array) -> jax.Array:
    """Feature-major linear layer: x (in, B) -> (out, B) with p = {wt (out, in), b (out,)} or, as
    :func:`decode_weights` packs it, {panels, b}: on the CPU the kernel (:func:`~.kernels.linear_packed`), elsewhere
    XLA's matmul of the matrix unpacked."""
    if "panels" not in p:
        y = p["wt"] @ x
        return y + p["b"][:, None] if "b" in p else y
    panels, b = p["panels"], p["b"]

    def xla(panels, x, b):  # type: ignore[no-untyped-def]
        w = jnp.transpose(panels, (0, 2, 1)).reshape(-1, panels.shape[1])[: b.shape[0]]  # (out, in)
        return w @ x + b[:, None]

    if not (panels.dtype == x.dtype == b.dtype == jnp.float32 and kernels.available()):
        return xla(panels, x, b)
    return jax.lax.platform_dependent(panels, x, b, cpu=kernels.linear_packed, default=xla)


def _mlp_t(p: Params, x: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Feature-major MLP: (D, B) -> (D, B)."""
    h = _linear_t(p["up"], x)  # (F, B) or (2F, B)
    if cfg.family == "gpt2":
        h = jax.nn.gelu(h, approximate=cfg.activation == "gelu_tanh")
    else:
        gate, up = jnp.split(h, 2, axis=0)
        h = jax.nn.silu(gate) * up
    return _linear_t(p["down"], h)


def _split_qkv_t(h: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array, jax.Array]:
    """((H+2KV) Dh, B) -> q (B, KV, G, 1, Dh), k (B, KV, 1, Dh), v (B, KV, 1, Dh), as :func:`_split_qkv` for T=1."""
    B = h.shape[1]
    H, KV, Dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    q, k, v = jnp.split(h, [H * Dh, (H + KV) * Dh], axis=0)
    q = q.reshape(KV, H // KV, Dh, B).transpose(3, 0, 1, 2)[:, :, :, None]
    k = k.reshape(KV, Dh, B).transpose(2, 0, 1)[:, :, None]
    v = v.reshape(KV, Dh, B).transpose(2, 0, 1)[:, :, None]
    return q, k, v


def decode_step(
    dparams: Params,
    cfg: ModelConfig,
    cache: KVCache,
    token: jax.Array,
    pos: jax.Array,
    slot: jax.Array,
    valid: jax.Array,
) -> tuple[jax.Array, KVCache]:
    """One new token per row through the network, reading and extending the KV cache.

    ``dparams`` is :func:`decode_weights` of the parameters. token (B,) int32, pos (B,) int32 its position, slot ()
    int32 the cache slot to write (or (B,) int32, one per row), valid (B, S) bool the slots this token may attend to
    (it must include ``slot``). Returns the logits transposed, (V, B) float32, and the new cache.

    The residual stream is feature-major, (D, B), so that every matmul is ``weight (out, in) @ activations (in, B)``
    (see :func:`decode_weights`); on the CPU the attention kernel reads the projections and writes its output in
    that layout too (:func:`_attend_decode`), elsewhere the small per-head tensors are transposed to (B, ...).
    """
    x = _embed(dparams, cfg, token[:, None], pos[:, None])[:, 0].T  # (D, B)
    new_cache = []
    for lp, (ck, cv) in zip(dparams["layers"], cache, strict=True):
        h = _linear_t(lp["qkv"], _norm(lp["attn_norm"], x, cfg, axis=0))  # ((H+2KV) Dh, B)
        o, ck, cv = _attend_decode(h, pos, slot, ck, cv, valid, cfg)  # o (H Dh, B)
        x = x + _linear_t(lp["out"], o)  # (D, B)
        x = x + _mlp_t(lp, _norm(lp["mlp_norm"], x, cfg, axis=0), cfg)
        new_cache.append((ck, cv))
    h = _norm(dparams["final_norm"], x, cfg, axis=0)
    return _linear_t(dparams["unembed"], h).astype(jnp.float32), tuple(new_cache)  # (V, B)
