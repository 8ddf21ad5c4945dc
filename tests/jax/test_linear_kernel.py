"""The decode step's matmul kernel (kernels.linear_packed over kernels.pack_rows panels): as accurate as XLA's
matmul against float64 at any shape, a column the same bits alone or in any batch, refusals with the reason, and
the decode step and the inference job using it on the CPU for float32 (and the XLA path otherwise) with the same
numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_reward.jax import InferenceJob, ModelConfig, init_params, kernels, model, resolve_model

needs_kernel = pytest.mark.skipif(
    not kernels.available(), reason=f"kernel unavailable: {kernels.status().detail}"
)
EPS = float(np.finfo(np.float32).eps)


def operands(rng: np.random.Generator, N: int, K: int, B: int, spread: float = 1.0):
    w = (rng.standard_normal((N, K)) * np.exp(rng.uniform(-spread, spread, (N, 1)))).astype(np.float32)
    x = (rng.standard_normal((K, B)) * np.exp(rng.uniform(-spread, spread, (1, B)))).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    return w, x, b


def within_forward_bound(got: np.ndarray, w: np.ndarray, x: np.ndarray, b: np.ndarray) -> None:
    """|got - exact| <= (K + 2) eps (|w| |x| + |b|): the forward error bound of a float32 dot product in any order."""
    exact = w.astype(np.float64) @ x.astype(np.float64) + b[:, None]
    scale = np.abs(w).astype(np.float64) @ np.abs(x).astype(np.float64) + np.abs(b)[:, None]
    excess = np.abs(got - exact) - (w.shape[1] + 2) * EPS * scale
    assert excess.max() <= 0, f"worst excess over the bound {excess.max():.3g}"


@needs_kernel
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    N=st.integers(1, 60),  # whole panels of 12 rows and a last one part padding
    K=st.integers(1, 80),
    B=st.sampled_from([1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 64, 65]),  # every column split
    spread=st.sampled_from([0.0, 2.0]),
    seed=st.integers(0, 2**16),
)
def test_the_kernel_is_as_accurate_as_xla_matmul(N, K, B, spread, seed):
    w, x, b = operands(np.random.default_rng(seed), N, K, B, spread)
    got = np.asarray(kernels.linear_packed(jnp.asarray(kernels.pack_rows(w)), jnp.asarray(x), jnp.asarray(b)))
    assert got.shape == (N, B) and got.dtype == np.float32
    within_forward_bound(got, w, x, b)
    within_forward_bound(np.asarray(jnp.asarray(w) @ jnp.asarray(x) + b[:, None]), w, x, b)  # XLA's, alike


@needs_kernel
def test_a_column_is_the_same_bits_alone_or_in_any_batch():
    w, x, b = operands(np.random.default_rng(1), 30, 200, 41)  # 41 = 32 + 8 + 1 columns; 30 rows: 3 panels
    panels = jnp.asarray(kernels.pack_rows(w))
    batch = np.asarray(kernels.linear_packed(panels, jnp.asarray(x), jnp.asarray(b)))
    for c in range(x.shape[1]):
        alone = np.asarray(kernels.linear_packed(panels, jnp.asarray(x[:, c : c + 1]), jnp.asarray(b)))
        assert np.array_equal(alone[:, 0], batch[:, c])
    # and beside different neighbours, at another batch width
    other = np.concatenate(
        [x[:, 5:6], np.random.default_rng(2).standard_normal((200, 16), np.float32)], axis=1
    )
    assert np.array_equal(
        np.asarray(kernels.linear_packed(panels, jnp.asarray(other), jnp.asarray(b)))[:, 0], batch[:, 5]
    )


def test_pack_rows_lays_out_panels_of_twelve_rows_padded_with_zeros():
    w = np.arange(25 * 3, dtype=np.float32).reshape(25, 3)
    panels = kernels.pack_rows(w)
    assert panels.shape == (3, 3, 12)
    for n in range(25):
        for k in range(3):
            assert panels[n // 12, k, n % 12] == w[n, k]
    assert not panels[2, :, 1:].any()  # rows 25..35 are padding
    assert np.array_equal(np.asarray(kernels.pack_rows(jnp.asarray(w))), panels)  # jax arrays, inside jit too
    assert np.array_equal(np.asarray(jax.jit(kernels.pack_rows)(jnp.asarray(w))), panels)


@needs_kernel
@pytest.mark.parametrize(
    ("panels_shape", "x_shape", "bias_shape", "message"),
    [
        ((2, 8, 11), (8, 4), (24,), "pack_rows panels"),
        ((2, 8), (8, 4), (24,), "pack_rows panels"),
        ((2, 8, 12), (9, 4), (24,), r"x must be \(K, B\) with K = 8"),
        ((2, 8, 12), (8,), (24,), r"x must be \(K, B\)"),
        ((2, 8, 12), (8, 4), (12,), "must have the N rows of 2 panels"),
        ((2, 8, 12), (8, 4), (25,), "must have the N rows of 2 panels"),
        ((2, 8, 12), (8, 4), (24, 1), "must have the N rows"),
    ],
)
def test_operands_that_do_not_fit_are_refused_with_the_reason(panels_shape, x_shape, bias_shape, message):
    z = [jnp.zeros(s, jnp.float32) for s in (panels_shape, x_shape, bias_shape)]
    with pytest.raises(ValueError, match=message):
        kernels.linear_packed(*z)


@needs_kernel
@pytest.mark.parametrize(
    ("panels_shape", "bias_shape", "out_shape", "message"),
    [
        ((2, 8, 12), (24,), (24, 5), r"the result must be \(N, B\)"),
        ((2, 8, 12), (30,), (30, 4), r"ceil\(N / 12\)"),
        ((2, 8, 12), (12,), (12, 4), r"ceil\(N / 12\)"),
        ((2, 8, 6), (24,), (24, 4), r"packed \(P, K, 12\)"),
    ],
)
def test_the_kernel_refuses_operands_its_python_wrapper_would_have_stopped(
    panels_shape, bias_shape, out_shape, message
):
    call = jax.ffi.ffi_call(kernels.LINEAR_TARGET, jax.ShapeDtypeStruct(out_shape, jnp.float32))
    z = [jnp.zeros(s, jnp.float32) for s in (panels_shape, (8, 4), bias_shape)]
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        jax.block_until_ready(call(*z))


LLAMA = ModelConfig(
    family="llama",
    vocab_size=301,  # not a multiple of 12: the unembedding's last panel is part padding
    d_model=64,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    d_ff=96,
    max_positions=64,
)  # no biases, rotary positions, grouped-query attention
GPT2 = ModelConfig.gpt2(vocab_size=300, d_model=48, n_layers=2, n_heads=4, max_positions=64)


def _decode(cfg: ModelConfig, dparams: model.Params, B: int = 5, S: int = 24):
    rng = np.random.default_rng(0)
    cache = tuple(
        tuple(
            jnp.asarray(rng.standard_normal((B, cfg.n_kv_heads, S, cfg.head_dim), np.float32))
            for _ in range(2)
        )
        for _ in range(cfg.n_layers)
    )
    tok = jnp.asarray(rng.integers(0, cfg.vocab_size, B), jnp.int32)
    slot = jnp.asarray(rng.integers(0, S, B), jnp.int32)
    valid = jnp.asarray((rng.random((B, S)) < 0.6) | (np.arange(S)[None] == np.asarray(slot)[:, None]))
    step = jax.jit(
        lambda d, c: model.decode_step(d, cfg, c, tok, slot, slot, valid)
    )  # traced afresh per call
    return step, (dparams, cache)


@needs_kernel
@pytest.mark.parametrize("B", [5, 33])  # eight columns; a block of 32 and one of 8
@pytest.mark.parametrize("cfg", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_a_decode_step_gives_the_same_logits_packed_or_not(cfg, B, monkeypatch):
    params = init_params(cfg, seed=3, std=0.3)
    packed = jax.tree.map(jnp.asarray, model.decode_weights(params, cfg, packed=True))
    plain = jax.tree.map(jnp.asarray, model.decode_weights(params, cfg))
    qkv_rows = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    assert packed["layers"][0]["qkv"]["panels"].shape == (-(-qkv_rows // 12), cfg.d_model, 12)
    step, args = _decode(cfg, packed, B)
    hlo = step.lower(*args).as_text()
    assert hlo.count(kernels.LINEAR_TARGET) == 4 * cfg.n_layers + 1  # every matrix and the unembedding
    with_kernel = np.asarray(step(*args)[0])
    step, args = _decode(cfg, plain, B)
    assert kernels.LINEAR_TARGET not in step.lower(*args).as_text()
    np.testing.assert_allclose(with_kernel, np.asarray(step(*args)[0]), rtol=1e-5, atol=1e-5)
    # the packed weights without the kernel: XLA's path unpacks them and gives what the plain layout gives
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    step, args = _decode(cfg, packed, B)
    assert kernels.LINEAR_TARGET not in step.lower(*args).as_text()
    xla_packed = np.asarray(step(*args)[0])
    step, args = _decode(cfg, plain, B)
    np.testing.assert_allclose(xla_packed, np.asarray(step(*args)[0]), rtol=1e-6, atol=1e-6)


@needs_kernel
def test_the_job_packs_its_decode_weights_on_the_cpu_for_float32_only(monkeypatch):
    assert model.decode_packed(np.float32) and not model.decode_packed(jnp.bfloat16)
    job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"), per_device_batch_size=4)
    assert set(job._decode_params()["layers"][0]["qkv"]) == {"panels", "b"}
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    assert not model.decode_packed(np.float32)
    job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"), per_device_batch_size=4)
    assert set(job._decode_params()["layers"][0]["qkv"]) == {"wt", "b"}


@needs_kernel
def test_a_new_parameter_set_in_the_other_layout_compiles_its_own_program(monkeypatch):
    """The compiled-program cache keys on the decode weights' layout: parameters replaced while the kernels are
    turned off are laid out unpacked, and the rollout must not reuse the program compiled for packed ones."""
    from pytest_reward.jax.inference import InferenceState

    job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"), per_device_batch_size=32)
    prompts = [list(f"{a}+{3 * a % 97}=".encode()) for a in range(40)]  # slots of 32 columns, then refilled
    packed = job.generate_tokens(prompts, 6)[0]
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    job.state = InferenceState(job.state.params)  # a new state: the decode weights are built again, unpacked
    plain = job.generate_tokens(prompts, 6)[0]
    assert set(job._decode_params()["layers"][0]["qkv"]) == {"wt", "b"}
    assert [list(map(int, t)) for t in packed] == [list(map(int, t)) for t in plain]
    assert sum(map(len, packed)) > 40  # rows produced tokens
    assert job.stats.compiles == 2
