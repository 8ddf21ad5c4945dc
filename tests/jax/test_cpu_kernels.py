"""The hand-written CPU decode-attention kernel (pytest_reward.jax.kernels): it computes what the XLA path
computes, decode programs call it on the CPU (and not when it is turned off), generation gives the same tokens
with and without it, and its build is cached per machine, atomic under concurrent builders, and falls back to the
XLA path with a reason when no compiler, a failing compiler or an unwritable cache stands in the way."""

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
    assert kernels.TARGET in _decode_hlo(cfg)
    assert kernels.TARGET not in _decode_hlo(cfg, jnp.bfloat16)  # the kernel is float32: XLA runs the rest
    monkeypatch.setenv("PYTEST_REWARD_CPU_KERNELS", "0")
    assert not kernels.available()
    assert kernels.TARGET not in _decode_hlo(cfg)


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
        (lambda q, k, v, valid: (q, k, v[:, :, :-1], valid), "shapes of q, k, v and valid disagree"),
        (lambda q, k, v, valid: (q, k, v, valid[:, :-1]), "shapes of q, k, v and valid disagree"),
        (lambda q, k, v, valid: (q[:, :1], k, v, valid), "shapes of q, k, v and valid disagree"),
        (lambda q, k, v, valid: (q[0], k, v, valid), "q, k, v must be rank 4 and valid rank 2"),
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
