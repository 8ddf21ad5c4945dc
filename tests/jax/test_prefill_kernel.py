"""The CPU kernel of a prompt's causal attention (pytest_reward.jax.kernels.prefill_attention): it computes what
the XLA path computes, within the same error bound, for any batch, padding, grouping, head width and number of
query positions; a row is the same bits whatever else is in its batch and however much padding precedes it;
forward programs call it on the CPU for float32 only; and operands that do not fit are refused with the reason."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_reward.jax import ModelConfig, init_params, kernels, model

needs_kernel = pytest.mark.skipif(
    not kernels.available(), reason=f"kernel unavailable: {kernels.status().detail}"
)


def config(KV: int, G: int, Dh: int, family: str = "llama", n_layers: int = 1) -> ModelConfig:
    return ModelConfig(
        family=family,
        vocab_size=300,
        d_model=KV * G * Dh,
        n_layers=n_layers,
        n_heads=KV * G,
        n_kv_heads=KV,
        head_dim=Dh,
        d_ff=48,
        max_positions=512,
    )


def xla_prefill(qkv, mask, queries, cfg):
    """The XLA path: split into heads, mask the T x T scores, softmax, weighted sum."""
    T = qkv.shape[1]
    q, k, v = model._split_qkv(jnp.asarray(qkv), cfg)
    allowed = (np.tril(np.ones((T, T), bool))[None] & mask[:, None, :])[:, None, None]
    return np.asarray(model._attend(q[:, :, :, T - queries :], k, v, allowed[:, :, :, T - queries :], cfg))


def exact_prefill(qkv, mask, queries, KV, Dh):
    """The same in float64 (numpy); a query with no real token at or before it: uniform weights over all T."""
    B, T, C = qkv.shape
    H = C // Dh - 2 * KV
    x = qkv.astype(np.float64)
    q = x[..., : H * Dh].reshape(B, T, KV, H // KV, Dh)
    k = x[..., H * Dh : (H + KV) * Dh].reshape(B, T, KV, Dh)
    v = x[..., (H + KV) * Dh :].reshape(B, T, KV, Dh)
    s = np.einsum("bikgd,bjkd->bkgij", q, k) / math.sqrt(Dh)
    allowed = (np.tril(np.ones((T, T), bool))[None] & mask[:, None, :])[:, None, None]
    s = np.where(allowed, s, -np.inf)
    s = np.where(allowed.any(axis=-1, keepdims=True), s, 0.0)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    o = np.einsum("bkgij,bjkd->bikgd", w / w.sum(axis=-1, keepdims=True), v).reshape(B, T, H * Dh)
    return o[:, T - queries :]


def prompts_mask(rng, B, T, kind):
    """Left padding (what the engine sends) or any mask at all, row 0 all padding; or all real tokens."""
    if kind == "left":
        mask = np.arange(T)[None] >= rng.integers(0, T + 1, B)[:, None]
    elif kind == "any":
        mask = rng.random((B, T)) < rng.uniform(0.2, 1.0)
    else:
        mask = np.ones((B, T), bool)
    if kind != "full":
        mask[0] = False
    return mask


@needs_kernel
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    B=st.integers(1, 3),
    KV=st.integers(1, 3),
    G=st.integers(1, 3),
    T=st.integers(1, 150),  # past one block of 64 query positions, and rows of four with a remainder
    Dh=st.sampled_from([8, 16, 24, 40, 64, 128]),
    which=st.sampled_from(["all", "last", "some"]),
    kind=st.sampled_from(["left", "any", "full"]),
    spread=st.sampled_from([0.1, 1.0, 4.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_kernel_is_as_accurate_as_the_xla_attention(B, KV, G, T, Dh, which, kind, spread, seed):
    rng = np.random.default_rng(seed)
    queries = {"all": T, "last": 1, "some": int(rng.integers(1, T + 1))}[which]
    H = KV * G
    qkv = rng.standard_normal((B, T, (H + 2 * KV) * Dh), np.float32)
    qkv[..., : (H + KV) * Dh] *= spread  # queries and keys: scores of every size
    mask = prompts_mask(rng, B, T, kind)
    got = np.asarray(kernels.prefill_attention(qkv, mask, queries, KV, Dh, 1.0 / math.sqrt(Dh)))
    assert got.shape == (B, queries, H * Dh)
    xla = xla_prefill(qkv, mask, queries, config(KV, G, Dh))
    exact = exact_prefill(qkv, mask, queries, KV, Dh)
    # As for the decode kernel: a float32 dot product of length Dh errs by at most Dh eps sum_d |q_d k_d|, which
    # moves a weight by a factor exp(+-2e); the weighted sum of at most T values adds T eps max|v|.
    eps = float(np.finfo(np.float32).eps)
    x = np.abs(qkv.astype(np.float64))
    q = x[..., : H * Dh].reshape(B, T, H, Dh)
    k = np.repeat(x[..., H * Dh : (H + KV) * Dh].reshape(B, T, KV, Dh), G, axis=2)
    abs_dot = np.einsum("bihd,bjhd->bhij", q, k).max()
    bound = (2 * Dh * eps * abs_dot / math.sqrt(Dh) + T * eps) * float(x[..., (H + KV) * Dh :].max())
    assert np.abs(xla - exact).max() <= bound  # the bound holds for XLA's path: it means something
    assert np.abs(got - exact).max() <= bound
    if kind != "full":  # row 0 is all padding: every query gets the mean of its head's T values
        v = qkv[0, :, (H + KV) * Dh :].reshape(T, KV, 1, Dh).repeat(G, axis=2).reshape(T, H * Dh)
        np.testing.assert_allclose(
            got[0], np.broadcast_to(v.mean(axis=0), got[0].shape), rtol=1e-5, atol=1e-6
        )


@needs_kernel
def test_a_row_is_the_same_bits_alone_in_any_batch_and_behind_any_padding():
    rng = np.random.default_rng(11)
    KV, G, Dh, T = 2, 2, 40, 90
    C = (KV * G + 2 * KV) * Dh
    lengths = [90, 1, 37, 64, 65, 70]
    rows = [rng.standard_normal((n, C), np.float32) for n in lengths]
    qkv = np.zeros((len(rows), T, C), np.float32)
    mask = np.zeros((len(rows), T), bool)
    for b, r in enumerate(rows):  # left-padded, the padding's projections garbage
        qkv[b, : T - len(r)] = rng.standard_normal((T - len(r), C)) * 100
        qkv[b, T - len(r) :], mask[b, T - len(r) :] = r, True
    batch = np.asarray(kernels.prefill_attention(qkv, mask, T, KV, Dh, 0.2))
    last = np.asarray(kernels.prefill_attention(qkv, mask, 5, KV, Dh, 0.2))
    for b, r in enumerate(rows):
        alone = np.asarray(
            kernels.prefill_attention(r[None], np.ones((1, len(r)), bool), len(r), KV, Dh, 0.2)
        )
        # bitwise: one thread sums a query's scores and values over its own real keys, in order
        assert np.array_equal(batch[b, T - len(r) :], alone[0])
        assert np.array_equal(last[b], batch[b, -5:])  # the same in any block of query positions


def _forward_hlo(cfg: ModelConfig, dtype=jnp.float32) -> str:
    params = jax.tree.map(lambda a: jnp.asarray(a, dtype), init_params(cfg))
    tokens, mask = jnp.zeros((2, 12), jnp.int32), jnp.ones((2, 12), bool)
    return jax.jit(lambda t, m: model.forward(params, cfg, t, m)).lower(tokens, mask).as_text()


@needs_kernel
def test_forward_programs_call_the_kernel_on_the_cpu_for_float32_only(monkeypatch):
    cfg = config(KV=2, G=2, Dh=16, n_layers=3)
    hlo = _forward_hlo(cfg)
    assert hlo.count(kernels.PREFILL_TARGET) >= cfg.n_layers  # one per layer
    assert kernels.PREFILL_TARGET not in _forward_hlo(cfg, jnp.bfloat16)
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    assert kernels.PREFILL_TARGET not in _forward_hlo(cfg)


@needs_kernel
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_forward_and_prefill_give_the_same_numbers_with_and_without_the_kernel(monkeypatch, family):
    cfg = config(KV=2, G=2 if family == "llama" else 1, Dh=16, family=family, n_layers=2)
    params = jax.tree.map(jnp.asarray, init_params(cfg, seed=5, std=0.3))
    rng = np.random.default_rng(2)
    tokens = jnp.asarray(rng.integers(0, 300, (4, 30)), jnp.int32)
    mask = jnp.asarray(np.arange(30)[None] >= np.array([0, 3, 29, 12])[:, None])  # left padding

    def run():
        logits = jax.jit(lambda t, m: model.forward(params, cfg, t, m))(tokens, mask)
        x, kvs = jax.jit(lambda t, m: model.hidden_states(params, cfg, t, m, last_only=True))(tokens, mask)
        return np.asarray(logits), np.asarray(x), [np.asarray(a) for kv in kvs for a in kv]

    with_kernel = run()
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    without = run()
    real = np.asarray(mask)
    np.testing.assert_allclose(with_kernel[0][real], without[0][real], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(with_kernel[1], without[1], rtol=1e-4, atol=1e-4)
    assert np.array_equal(with_kernel[2][0], without[2][0])  # layer 0's keys: before any attention
    for a, b in zip(with_kernel[2], without[2], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@needs_kernel
def test_gradients_through_the_forward_are_the_xla_paths(monkeypatch):
    cfg = config(KV=2, G=2, Dh=16, n_layers=2)
    params = jax.tree.map(jnp.asarray, init_params(cfg, seed=1, std=0.2))
    rng = np.random.default_rng(4)
    tokens = jnp.asarray(rng.integers(0, 300, (3, 20)), jnp.int32)
    mask = jnp.asarray(np.arange(20)[None] >= np.array([0, 6, 19])[:, None])

    def loss(params):
        logits = model.forward(params, cfg, tokens, mask)
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), tokens[:, 1:, None], axis=-1)[..., 0]
        return -(picked * mask[:, 1:]).sum()

    def run():
        value, grads = jax.jit(jax.value_and_grad(loss))(params)
        hlo = jax.jit(jax.value_and_grad(loss)).lower(params).as_text()
        return float(value), jax.tree.leaves(grads), hlo

    value, grads, hlo = run()
    assert kernels.PREFILL_TARGET in hlo  # the forward pass calls the kernel
    _, dout = jax.jvp(
        lambda h: model._attend_prefill(h, mask, 20, cfg),
        (jnp.ones((3, 20, 128)),),
        (jnp.ones((3, 20, 128)),),
    )
    assert dout.shape == (3, 20, 64)  # forward mode too, by the kernel's rule
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    value0, grads0, hlo0 = run()
    assert kernels.PREFILL_TARGET not in hlo0
    assert value == pytest.approx(value0, rel=1e-5)
    for a, b in zip(grads, grads0, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize(
    "qkv_shape, mask_shape, queries, message",
    [
        ((2, 5, 7 * 16), (2, 5), 5, r"qkv must be \(B, T, \(KV G \+ 2 KV\) Dh\) with KV=2, Dh=16"),  # 7 heads
        (
            (2, 5, 4 * 16),
            (2, 5),
            5,
            r"qkv must be \(B, T, \(KV G \+ 2 KV\) Dh\)",
        ),  # keys and values, no queries
        ((2, 5, 6 * 16 + 3), (2, 5), 5, r"qkv must be"),  # not whole heads
        ((2 * 5 * 6 * 16,), (2, 5), 5, "qkv must be rank 3"),
        ((1, 5, 6 * 16), (1, 5), 7, "7 query positions of a 5-token prompt"),
        ((2, 5, 6 * 16), (2, 4), 5, r"mask must be \(B, T\)"),  # from here on, the kernel's own checks
        ((2, 5, 6 * 16), (2, 5, 1), 5, "mask rank 2"),
        ((2, 5, 6 * 16), (2, 5), 5, "expected F32 but got F16"),
    ],
)
def test_operands_that_do_not_fit_are_refused_with_the_reason(qkv_shape, mask_shape, queries, message):
    qkv = np.ones(qkv_shape, np.float16 if "F16" in message else np.float32)
    mask = np.ones(mask_shape, bool)
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=message):
        jax.block_until_ready(kernels.prefill_attention(qkv, mask, queries, 2, 16, 0.25))


@needs_kernel
@pytest.mark.parametrize(
    "out_shape, message",
    [
        ((2, 5, 40), "the output width must be KV G Dh"),  # not whole query heads
        ((2, 5, 64), r"qkv must be \(B, T, \(KV G \+ 2 KV\) Dh\)"),  # 4 query heads for qkv's 2
        ((2, 6, 32), r"the output must be \(B, Tq, KV G Dh\) with Tq <= T"),
        ((3, 5, 32), r"the output must be \(B, Tq, KV G Dh\)"),
    ],
)
def test_the_kernel_refuses_an_output_that_does_not_fit_its_operands(out_shape, message):
    kernels.status()  # registered
    call = jax.ffi.ffi_call(kernels.PREFILL_TARGET, jax.ShapeDtypeStruct(out_shape, jnp.float32))
    qkv, mask = np.ones((2, 5, 6 * 16), np.float32), np.ones((2, 5), bool)  # 2 query heads over 2 kv heads
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        jax.block_until_ready(
            call(qkv, mask, kv_heads=np.int64(2), head_dim=np.int64(16), scale=np.float32(0.25))
        )
