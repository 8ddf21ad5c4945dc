"""The hand-written CPU kernels (pytest_reward.jax.kernels: decode attention, with and without the cache write,
and the greedy pick): they compute what the XLA path computes, decode programs call them on the CPU (and not when
they are turned off), generation gives the same tokens with and without them, and their build is cached per
machine, atomic under concurrent builders, and falls back to the XLA path with a reason when no compiler, a
failing compiler or an unwritable cache stands in the way."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


def xla_attention(q, k, v, valid):
    """The XLA path of model._attend for one query token: q (B, KV, G, Dh) -> (B, KV, G, Dh)."""
    B, KV, G, Dh = q.shape
    cfg = ModelConfig(
        family="llama",
        vocab_size=300,
        d_model=KV * G * Dh,
        n_layers=1,
        n_heads=KV * G,
        n_kv_heads=KV,
        head_dim=Dh,
        d_ff=4,
        max_positions=64,
    )
    out = model._attend(q[:, :, :, None], k, v, valid[:, None, None, None, :], cfg)  # (B, 1, KV G Dh)
    return out[:, 0].reshape(B, KV, G, Dh)


def exact_attention(q, k, v, valid):
    """The same attention in float64 (numpy): the reference both float32 paths are measured against."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = np.einsum("bkgd,bksd->bkgs", q, k) / math.sqrt(q.shape[-1])
    s = np.where(valid[:, None, None, :], s, -np.inf)
    s = np.where(valid.any(axis=1)[:, None, None, None], s, 0.0)  # no valid slot: uniform weights
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bkgs,bksd->bkgd", w / w.sum(axis=-1, keepdims=True), v)


@needs_kernel
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    B=st.integers(1, 4),
    KV=st.integers(1, 3),
    G=st.integers(1, 4),
    S=st.integers(1, 40),
    Dh=st.sampled_from([8, 16, 24, 32, 40, 64, 128]),
    seed=st.integers(0, 2**31 - 1),
    spread=st.sampled_from([0.1, 1.0, 4.0]),
)
def test_kernel_is_as_accurate_as_the_xla_attention(B, KV, G, S, Dh, seed, spread):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, KV, G, Dh), np.float32) * spread
    k = rng.standard_normal((B, KV, S, Dh), np.float32) * spread
    v = rng.standard_normal((B, KV, S, Dh), np.float32)
    valid = rng.random((B, S)) < rng.uniform(0.0, 1.0)
    valid[0, :] = False  # a row with no valid slot: the mean of all its values, as XLA gives
    if B > 1:
        valid[1, :] = True
    got = np.asarray(kernels.decode_attention(q, k, v, valid, 1.0 / math.sqrt(Dh)))
    xla = np.asarray(xla_attention(*map(jnp.asarray, (q, k, v, valid))))
    exact = exact_attention(q, k, v, valid)
    # Both sum in float32, in different orders. The forward error bound of a float32 dot product of length Dh is
    # Dh eps sum_d |q_d k_d|; a score error e moves a softmax weight by a factor exp(+-2e), and the weighted sum of
    # S values adds S eps max|v|: bound = (2 Dh eps max(sum|q k|) scale + S eps) max|v|, for either path.
    eps = float(np.finfo(np.float32).eps)
    abs_dot = np.einsum("bkgd,bksd->bkgs", np.abs(q).astype(np.float64), np.abs(k).astype(np.float64)).max()
    bound = (2 * Dh * eps * abs_dot / math.sqrt(Dh) + S * eps) * float(np.abs(v).max())
    assert np.abs(xla - exact).max() <= bound  # the bound holds for XLA's path: it means something
    assert np.abs(got - exact).max() <= bound
    np.testing.assert_allclose(
        got[0], v[0].mean(axis=1, keepdims=True).repeat(G, axis=1), rtol=1e-5, atol=1e-6
    )


def feature_major(q, k_new, v_new):
    """q (B, KV, G, Dh), k_new/v_new (B, KV, Dh) -> qkv ((KV G + 2 KV) Dh, B), as a decode step's matmul leaves
    them: the queries head by head (kv-major, then g), then the keys, then the values."""
    B = q.shape[0]
    return np.concatenate([q.reshape(B, -1).T, k_new.reshape(B, -1).T, v_new.reshape(B, -1).T], axis=0)


@needs_kernel
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    B=st.integers(1, 4),
    KV=st.integers(1, 3),
    G=st.integers(1, 3),
    S=st.integers(1, 24),
    Dh=st.sampled_from([8, 16, 40, 64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_update_writes_each_rows_slot_then_attends(B, KV, G, S, Dh, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, KV, G, Dh), np.float32)
    k_new, v_new = (rng.standard_normal((B, KV, Dh), np.float32) for _ in range(2))
    k, v = (rng.standard_normal((B, KV, S, Dh), np.float32) for _ in range(2))
    slot = rng.integers(-2, S + 2, B).astype(np.int32)  # some outside the cache: they write nothing
    valid = rng.random((B, S)) < 0.6
    inside = (slot >= 0) & (slot < S)
    valid[np.flatnonzero(inside), slot[inside]] = True  # a row attends to what it wrote
    want_k, want_v = k.copy(), v.copy()
    k_before = k.copy()
    for b in np.flatnonzero(inside):
        want_k[b, :, slot[b]], want_v[b, :, slot[b]] = k_new[b], v_new[b]
    o, got_k, got_v = kernels.decode_attention_update(
        feature_major(q, k_new, v_new), slot, k, v, valid, 1.0 / math.sqrt(Dh)
    )
    assert np.array_equal(np.asarray(got_k), want_k) and np.array_equal(np.asarray(got_v), want_v)
    o = np.asarray(o)
    assert o.shape == (KV * G * Dh, B)  # feature-major, as the output projection multiplies it
    plain = np.asarray(kernels.decode_attention(q, want_k, want_v, valid, 1.0 / math.sqrt(Dh)))
    # the same sums as the plain kernel over the written cache
    assert np.array_equal(o, plain.reshape(B, -1).T)
    assert np.array_equal(k, k_before)  # the caller's array is not written


@needs_kernel
def test_the_update_writes_in_place_where_the_cache_is_donated_and_never_into_a_live_input():
    B, KV, S, Dh = 3, 2, 8, 16
    rng = np.random.default_rng(1)
    qkv = jnp.asarray(rng.standard_normal(((KV + 2 * KV) * Dh, B), np.float32))
    k, v = (jnp.asarray(rng.standard_normal((B, KV, S, Dh), np.float32)) for _ in range(2))
    slot, valid = jnp.full((B,), 5, jnp.int32), jnp.ones((B, S), bool)

    def step(qkv, k, v):
        return kernels.decode_attention_update(qkv, slot, k, v, valid, 0.25)

    before = np.asarray(k).copy()
    _, k2, _ = jax.jit(step)(qkv, k, v)  # k is still live: XLA copies it, k keeps its values
    assert np.array_equal(np.asarray(k), before) and not np.array_equal(np.asarray(k2), before)
    pointer = k2.unsafe_buffer_pointer()
    _, k3, _ = jax.jit(step, donate_argnums=(1, 2))(qkv, k2, jnp.copy(v))
    assert k3.unsafe_buffer_pointer() == pointer  # donated: written where it was, no copy of the cache
    assert np.array_equal(np.asarray(k3), np.asarray(jax.jit(step)(qkv, jnp.asarray(before), v)[1]))


@needs_kernel
def test_a_row_does_not_depend_on_the_other_rows_in_its_batch():
    rng = np.random.default_rng(7)
    B, KV, G, S, Dh = 9, 3, 2, 50, 64
    q = rng.standard_normal((B, KV, G, Dh), np.float32)
    k = rng.standard_normal((B, KV, S, Dh), np.float32)
    v = rng.standard_normal((B, KV, S, Dh), np.float32)
    valid = rng.random((B, S)) < 0.7
    batch = np.asarray(kernels.decode_attention(q, k, v, valid, 0.125))
    for b in range(B):
        alone = np.asarray(
            kernels.decode_attention(q[b : b + 1], k[b : b + 1], v[b : b + 1], valid[b : b + 1], 0.125)
        )
        assert np.array_equal(alone[0], batch[b])  # bitwise: one thread sums one (row, head) in a fixed order


def _decode_hlo(cfg: ModelConfig, dtype=jnp.float32) -> str:
    params = jax.tree.map(lambda a: jnp.asarray(a, dtype), model.init_params(cfg))
    dparams = model.decode_weights(params, cfg)
    B, S = 3, 16
    cache = tuple((jnp.zeros((B, cfg.n_kv_heads, S, cfg.head_dim), dtype),) * 2 for _ in range(cfg.n_layers))
    tok, pos = jnp.zeros((B,), jnp.int32), jnp.zeros((B,), jnp.int32)
    valid = jnp.ones((B, S), bool)
    step = jax.jit(
        lambda c, t, p, v: model.decode_step(dparams, cfg, c, t, p, jnp.int32(0), v)
    )  # a fresh trace
    return step.lower(cache, tok, pos, valid).as_text()


@needs_kernel
def test_decode_steps_call_the_kernel_on_the_cpu_for_float32_only(monkeypatch):
    cfg = ModelConfig.gpt2(vocab_size=300, d_model=64, n_layers=2, n_heads=4, max_positions=64)
    hlo = _decode_hlo(cfg)
    assert hlo.count(kernels.UPDATE_TARGET) >= cfg.n_layers  # one per layer
    assert "dynamic_update_slice" not in hlo and "scatter" not in hlo  # the kernel writes the cache itself
    assert kernels.UPDATE_TARGET not in _decode_hlo(
        cfg, jnp.bfloat16
    )  # the kernel is float32: XLA runs the rest
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    assert not kernels.available()
    assert kernels.UPDATE_TARGET not in _decode_hlo(cfg)


@needs_kernel
def test_a_decode_step_gives_the_same_logits_with_and_without_the_kernel(monkeypatch):
    cfg = ModelConfig(
        family="llama",
        vocab_size=300,
        d_model=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        d_ff=96,
        max_positions=64,
    )  # grouped-query attention, rotary positions
    params = jax.tree.map(jnp.asarray, init_params(cfg, seed=3, std=0.3))
    dparams = model.decode_weights(params, cfg)
    rng = np.random.default_rng(0)
    B, S = 5, 24
    cache = tuple(
        tuple(jnp.asarray(rng.standard_normal((B, 2, S, 16), np.float32)) for _ in range(2)) for _ in range(2)
    )
    tok = jnp.asarray(rng.integers(0, 300, B), jnp.int32)
    slot = jnp.asarray(rng.integers(0, S, B), jnp.int32)  # one slot per row, as slot refill writes
    valid = jnp.asarray((rng.random((B, S)) < 0.6) | (np.arange(S)[None] == np.asarray(slot)[:, None]))

    def run():
        step = jax.jit(lambda c, t, p, s, v: model.decode_step(dparams, cfg, c, t, p, s, v))
        logits, new_cache = step(cache, tok, slot, slot, valid)
        return np.asarray(logits), [np.asarray(a) for kv in new_cache for a in kv]

    with_kernel = run()
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    without = run()
    np.testing.assert_allclose(with_kernel[0], without[0], rtol=1e-5, atol=1e-5)
    assert np.array_equal(with_kernel[1][0], without[1][0])  # layer 0's keys: before any attention
    # later layers' keys and values carry the rounding of the attention before them
    for a, b in zip(with_kernel[1], without[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


TOKENS_SCRIPT = textwrap.dedent(
    """
    import json
    from pytest_reward.jax import InferenceJob, kernels, resolve_model
    job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"), per_device_batch_size=4)
    prompts = ["12+30=", "7+8=", "99+1=", "450+550=", "3+4=", "61+27="]
    out = job.generate_tokens([list(p.encode()) for p in prompts], 8)
    print(json.dumps({"kernel": kernels.available(), "tokens": [list(map(int, t)) for t in out[0]]}))
    """
)


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


@needs_kernel
def test_generation_gives_the_same_tokens_with_and_without_the_kernel():
    on, off = _run(TOKENS_SCRIPT), _run(TOKENS_SCRIPT, PYTEST_REWARD_CPU_KERNELS="0")
    assert on.returncode == 0 and off.returncode == 0, on.stderr[-3000:] + off.stderr[-3000:]
    on, off = json.loads(on.stdout.splitlines()[-1]), json.loads(off.stdout.splitlines()[-1])
    assert on["kernel"] is True and off["kernel"] is False
    assert on["tokens"] == off["tokens"] and any(on["tokens"])


STATUS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax.numpy as jnp, numpy as np
    from pytest_reward.jax import kernels
    s = kernels.status()
    out = None
    if s.available:  # it also runs
        q = np.ones((1, 1, 1, 16), np.float32); kv = np.arange(32, dtype=np.float32).reshape(1, 1, 2, 16)
        out = np.asarray(kernels.decode_attention(q, kv, kv, np.array([[False, True]]), 0.25)).ravel().tolist()
    print(json.dumps({"available": s.available, "detail": s.detail, "library": str(s.library), "out": out}))
    """
)


def _status(**env: str) -> dict:
    proc = _run(STATUS_SCRIPT, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@needs_kernel
def test_the_library_is_built_once_and_reused_by_the_next_process(tmp_path):
    first, second = (
        _status(PYTEST_REWARD_KERNEL_CACHE=str(tmp_path)),
        _status(PYTEST_REWARD_KERNEL_CACHE=str(tmp_path)),
    )
    assert first["available"] and first["detail"].startswith("built ")
    assert second["available"] and second["detail"].startswith("reused ")
    assert first["library"] == second["library"] and Path(first["library"]).parent == tmp_path
    assert first["out"] == second["out"] == list(range(16, 32))  # only slot 1 is valid: its value row


@needs_kernel
def test_processes_building_at_once_each_end_with_a_whole_library(tmp_path):
    env = {**os.environ, "PYTEST_REWARD_KERNEL_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", STATUS_SCRIPT], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    results = [json.loads(p.communicate(timeout=300)[0].splitlines()[-1]) for p in procs]
    assert all(r["available"] and r["out"] == list(range(16, 32)) for r in results)
    assert len({r["library"] for r in results}) == 1
    assert [p.name for p in tmp_path.iterdir()] == [Path(results[0]["library"]).name]  # no temporary left


def test_without_a_compiler_the_xla_path_runs_and_says_why(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    got = _status(PATH=str(empty), CXX="", PYTEST_REWARD_KERNEL_CACHE=str(tmp_path / "cache"))
    assert not got["available"] and "no C++ compiler" in got["detail"]


def test_a_failing_build_is_reported_and_leaves_the_xla_path(tmp_path):
    failing = tmp_path / "cxx"
    failing.write_text("#!/bin/sh\necho 'cxx: no such target' >&2\nexit 3\n")
    failing.chmod(0o755)
    got = _status(CXX=str(failing), PYTEST_REWARD_KERNEL_CACHE=str(tmp_path / "cache"))
    assert not got["available"] and "exited 3" in got["detail"] and "no such target" in got["detail"]
    assert not list((tmp_path / "cache").iterdir())  # nothing half-built left behind


@needs_kernel
def test_an_unusable_cache_directory_builds_in_a_private_one(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    got = _status(PYTEST_REWARD_KERNEL_CACHE=str(blocker / "kernels"))
    assert got["available"] and got["out"] == list(range(16, 32))
    assert not Path(got["library"]).is_relative_to(blocker)
    assert not Path(got["library"]).parent.exists()  # the private directory went with its process


def test_turned_off_by_the_environment(tmp_path):
    got = _status(PYTEST_REWARD_CPU_KERNELS="0", PYTEST_REWARD_KERNEL_CACHE=str(tmp_path / "cache"))
    assert not got["available"] and "PYTEST_REWARD_CPU_KERNELS" in got["detail"]
    assert not (tmp_path / "cache").exists()  # nothing built


@needs_kernel
def test_turned_on_again_later_in_the_same_process(tmp_path):
    script = textwrap.dedent(
        """
        import os
        from pytest_reward.jax import kernels
        off = kernels.status()
        del os.environ["PYTEST_REWARD_CPU_KERNELS"]
        on = kernels.status()
        print(off.available, on.available, kernels.available())
        """
    )
    proc = _run(script, PYTEST_REWARD_CPU_KERNELS="0", PYTEST_REWARD_KERNEL_CACHE=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "True", "True"]


@needs_kernel
def test_a_cache_directory_others_can_write_to_is_not_trusted(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could have put a library here: it is not loaded, nor built into
    got = _status(PYTEST_REWARD_KERNEL_CACHE=str(shared))
    assert got["available"] and got["out"] == list(range(16, 32))
    assert not Path(got["library"]).is_relative_to(shared) and not list(shared.iterdir())


@needs_kernel
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda q, k, v, valid: (q, k, v[:, :, :-1], valid), "shapes of k, v and valid disagree"),
        (lambda q, k, v, valid: (q, k, v, valid[:, :-1]), "shapes of k, v and valid disagree"),
        (lambda q, k, v, valid: (q[:, :1], k, v, valid), "shapes of q, k, v and valid disagree"),
        (lambda q, k, v, valid: (q[0], k, v, valid), r"q must be rank 4 \(B, KV, G, Dh\)"),
        (lambda q, k, v, valid: (q, k, v, valid[0]), "k, v must be rank 4 and valid rank 2"),
        (lambda q, k, v, valid: (q, k.astype(np.float16), v, valid), "expected F32 but got F16"),
    ],
)
def test_operands_that_do_not_fit_are_refused_with_the_reason(change, message):
    q = np.ones((2, 3, 1, 16), np.float32)
    k = v = np.ones((2, 3, 5, 16), np.float32)
    valid = np.ones((2, 5), bool)
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        kernels.decode_attention(*change(q, k, v, valid), 0.25).block_until_ready()


@needs_kernel
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda qkv, slot: (qkv[:-1], slot), r"qkv must be \(\(KV G \+ 2 KV\) Dh, B\)"),  # not whole heads
        (lambda qkv, slot: (qkv[: 2 * 3 * 16], slot), r"qkv must be"),  # keys and values only: no queries
        (lambda qkv, slot: (qkv[:, :1], slot), r"qkv must be"),  # another batch
        (lambda qkv, slot: (qkv, slot[:1]), r"slot \(B,\)"),
    ],
)
def test_update_operands_that_do_not_fit_are_refused_with_the_reason(change, message):
    qkv = np.ones(((6 + 2 * 3) * 16, 2), np.float32)  # 6 query heads over 3 kv heads, width 16, batch 2
    k = v = np.ones((2, 3, 5, 16), np.float32)
    qkv, slot = change(qkv, np.zeros(2, np.int32))
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError, TypeError), match=message):
        jax.block_until_ready(kernels.decode_attention_update(qkv, slot, k, v, np.ones((2, 5), bool), 0.25))


@needs_kernel
def test_a_first_call_builds_and_registers_the_kernel_itself(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np
        from pytest_reward.jax import kernels
        q = np.ones((1, 1, 1, 16), np.float32); kv = np.arange(32, dtype=np.float32).reshape(1, 1, 2, 16)
        print(np.asarray(kernels.decode_attention(q, kv, kv, np.array([[True, False]]), 0.25)).ravel().tolist())
        """
    )
    proc = _run(script, PYTEST_REWARD_KERNEL_CACHE=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == list(range(16))


def test_a_call_where_the_kernel_is_unavailable_says_why(monkeypatch):
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    q = np.ones((1, 1, 1, 16), np.float32)
    kv = np.ones((1, 1, 2, 16), np.float32)
    with pytest.raises(RuntimeError, match="not available: turned off by PYTEST_REWARD_CPU_KERNELS"):
        kernels.decode_attention(q, kv, kv, np.ones((1, 2), bool), 0.25)


def numpy_argmax(x, axis):
    """numpy's argmax: the first index of the largest value, the first NaN where there is one."""
    return np.argmax(x, axis=axis).astype(np.int32)


@st.composite
def logits_with_ties_and_nans(draw, max_rows=3000, max_cols=40):
    V, B = draw(st.integers(1, max_rows)), draw(st.integers(1, max_cols))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    x = rng.standard_normal((V, B)).astype(np.float32)
    top = np.float32(draw(st.sampled_from([3.0, np.inf, np.float32(np.finfo(np.float32).max)])))
    for _ in range(draw(st.integers(0, 6))):  # ties at the top, in any rows
        x[rng.integers(0, V), rng.integers(0, B)] = top
    for _ in range(draw(st.integers(0, 3))):  # NaNs: numpy's argmax takes the first of them
        x[rng.integers(0, V), rng.integers(0, B)] = np.nan
    if draw(st.booleans()):
        x[:, 0] = -np.inf  # a column of -inf: index 0
    return x


@needs_kernel
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=logits_with_ties_and_nans())
def test_the_greedy_pick_kernel_is_numpys_argmax(x):
    assert np.array_equal(np.asarray(kernels.argmax_columns(x)), numpy_argmax(x, 0))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=logits_with_ties_and_nans(max_rows=600, max_cols=20))
def test_the_xla_greedy_pick_is_numpys_argmax_on_either_axis(x):
    from pytest_reward.jax.generate import argmax_first

    assert np.array_equal(np.asarray(argmax_first(jnp.asarray(x), axis=0)), numpy_argmax(x, 0))
    assert np.array_equal(np.asarray(argmax_first(jnp.asarray(x.T), axis=1)), numpy_argmax(x, 0))


@needs_kernel
def test_the_greedy_pick_splits_large_logits_and_keeps_the_first_index_across_the_split():
    V, B = 50257, 32  # GPT-2's vocabulary at batch 32: the rows are shared out over the threads
    rng = np.random.default_rng(3)
    x = rng.standard_normal((V, B)).astype(np.float32)
    x[V - 1, :] = 9.0  # the last row, in the last thread's range...
    x[V // 2 - 1 : V // 2 + 1, 1] = 10.0  # a tie astride the middle
    x[V - 2, 2], x[7, 2] = 11.0, 11.0  # ...and a tie of the first range with the last
    x[[100, 40000], 3] = np.nan  # NaNs in two ranges: the first wins
    x[40000, 4] = np.nan  # a NaN in a later range beats a larger number in an earlier one
    x[5, 4] = 50.0
    got = np.asarray(kernels.argmax_columns(x))
    assert np.array_equal(got, numpy_argmax(x, 0))
    assert got[:5].tolist() == [V - 1, V // 2 - 1, 7, 100, 40000]


@needs_kernel
def test_greedy_decoding_calls_the_pick_kernel_on_the_cpu_for_float32_logits_only(monkeypatch):
    from pytest_reward.jax import generate

    hlo = lambda x, axis: jax.jit(lambda x: generate.greedy_tokens(x, axis)).lower(x).as_text()  # noqa: E731
    x = jnp.zeros((300, 4), jnp.float32)
    assert kernels.ARGMAX_TARGET in hlo(x, 0)
    assert kernels.ARGMAX_TARGET not in hlo(x.T, -1)  # (B, V): a prefill's logits, once per rollout
    assert kernels.ARGMAX_TARGET not in hlo(x.astype(jnp.bfloat16), 0)
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    assert kernels.ARGMAX_TARGET not in hlo(x, 0)


@needs_kernel
@pytest.mark.parametrize(
    "x, message",
    [
        (np.zeros((3, 2, 1), np.float32), "x must be rank 2"),
        (np.zeros((0, 2), np.float32), "no rows"),
        (np.zeros((3, 2), np.float16), "expected F32 but got F16"),
    ],
)
def test_greedy_pick_operands_that_do_not_fit_are_refused_with_the_reason(x, message):
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        kernels.argmax_columns(x).block_until_ready()
