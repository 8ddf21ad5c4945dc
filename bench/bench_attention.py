"""Attention on the CPU (issue 19): the C++ kernels of ``pytest_reward.jax.kernels`` against XLA's path, in the
same run.

Decode: ``decode_attention`` against ``model._attend`` (two batched matrix-vector products and a masked softmax)
on the decode shapes of ``bench_rollout.py`` (every layer's cache its own array, so each read comes from memory as
in a step). Per shape: ms for all layers, bytes of keys and values read per second (of the valid slots for the
kernel, of every slot for XLA, which reads them all), the ratio, and the largest difference of the outputs. The
machine's streaming bandwidth (a numpy sum over 256 MB, one thread) is printed beside them for scale.

Prefill: ``prefill_attention`` against the XLA path of ``model._attend_prefill`` (the masked T x T scores, softmax,
weighted sum) on prompts of ``bench_rollout.py``'s rollouts and its scoring batch, every other row left-padded; one
layer's program timed (its projections in cache, as in a forward where the matmul has just written them) and
multiplied by the layers. Per shape: ms for all layers, the useful GFLOP/s (the scores and weighted sums of
real keys at or before each real position), the ratio, and the largest difference.

Usage: ``python bench/bench_attention.py [--reps 30] [--results bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
from _common import Section, best, best_interleaved, kernels_or_exit, machine

from pytest_reward.jax import ModelConfig, kernels, model

SECTION = "## Attention kernels: decode and prefill (issue 19)"
REPORT = Section(SECTION)
say = REPORT.say

#: name -> (layers, batch, kv heads, query heads per kv head, slots, head width, valid slots per row)
SHAPES = {
    "6-layer d384, batch 32": (6, 32, 6, 1, 128, 64, 96),
    "6-layer d384, batch 8": (6, 8, 6, 1, 128, 64, 96),
    "GPT-2-small, batch 32": (12, 32, 12, 1, 128, 64, 96),
    "Llama-shaped GQA (32 heads / 4 kv), batch 32": (8, 32, 4, 8, 128, 64, 96),
}


#: name -> (layers, batch, kv heads, query heads per kv head, prompt tokens, head width)
PREFILL_SHAPES = {
    "6-layer d384, batch 32 x 64 tokens": (6, 32, 6, 1, 64, 64),
    "GPT-2-small, batch 32 x 64 tokens": (12, 32, 12, 1, 64, 64),
    "GPT-2-small scoring, batch 8 x 256 tokens": (12, 8, 12, 1, 256, 64),
    "Llama-shaped GQA (32 heads / 4 kv), batch 4 x 512 tokens": (8, 4, 4, 8, 512, 64),
}


def stream_bandwidth(reps: int) -> float:
    a = np.ones(64 << 20, np.float32)
    return a.nbytes / best(lambda: a.sum(), reps)


def chained(attend, layers: int):
    """All layers' attention in one program, each query depending on the last output (no overlap between them)."""

    def run(q, ks, vs, valid):
        for k, v in zip(ks, vs, strict=True):
            q = q + 0.01 * attend(q, k, v, valid)
        return q

    return jax.jit(run)


def case(name: str, shape: tuple[int, ...], reps: int) -> None:
    L, B, KV, G, S, Dh, used = shape
    rng = np.random.default_rng(0)
    cfg = ModelConfig(
        family="llama", vocab_size=8, d_model=KV * G * Dh, n_layers=L, n_heads=KV * G, n_kv_heads=KV,
        head_dim=Dh, d_ff=8, max_positions=S,
    )  # fmt: skip
    q = jnp.asarray(rng.standard_normal((B, KV, G, Dh), np.float32))
    ks = [jnp.asarray(rng.standard_normal((B, KV, S, Dh), np.float32)) for _ in range(L)]
    vs = [jnp.asarray(rng.standard_normal((B, KV, S, Dh), np.float32)) for _ in range(L)]
    valid = np.zeros((B, S), bool)
    valid[:, :used] = True
    valid = jnp.asarray(valid)

    def xla(q, k, v, valid):
        return model._attend(q[:, :, :, None], k, v, valid[:, None, None, None, :], cfg)[:, 0].reshape(
            q.shape
        )

    def kernel(q, k, v, valid):
        return kernels.decode_attention(q, k, v, valid, 1.0 / math.sqrt(Dh))

    fx, fk = chained(xla, L), chained(kernel, L)
    diff = float(np.abs(np.asarray(fx(q, ks, vs, valid)) - np.asarray(fk(q, ks, vs, valid))).max())
    t = best_interleaved(
        {
            "xla": lambda: fx(q, ks, vs, valid).block_until_ready(),
            "kernel": lambda: fk(q, ks, vs, valid).block_until_ready(),
        },
        reps,
    )
    tx, tk = t["xla"], t["kernel"]
    every, valid_bytes = 2 * L * B * KV * S * Dh * 4, 2 * L * B * KV * used * Dh * 4
    say(
        f"| {name} | {used}/{S} | {tx * 1e3:.2f} | {every / tx / 1e9:.1f} | {tk * 1e3:.2f} | "
        f"{valid_bytes / tk / 1e9:.1f} | **{tx / tk:.2f}x** | {diff:.1e} |"
    )


def prefill_case(name: str, shape: tuple[int, ...], reps: int) -> None:
    L, B, KV, G, T, Dh = shape
    rng = np.random.default_rng(0)
    cfg = ModelConfig(
        family="llama", vocab_size=8, d_model=KV * G * Dh, n_layers=L, n_heads=KV * G, n_kv_heads=KV,
        head_dim=Dh, d_ff=8, max_positions=T,
    )  # fmt: skip
    C = (KV * G + 2 * KV) * Dh
    # One layer's projections, timed again and again: in cache, as in a forward, where the attention reads what
    # the qkv matmul has just written.
    h = jnp.asarray(rng.standard_normal((B, T, C), np.float32))
    lengths = np.where(np.arange(B) % 2 == 0, T, rng.integers(T // 2, T + 1, B))  # every other row padded
    mask = np.arange(T)[None] >= (T - lengths)[:, None]

    def program():  # a new function each time: jit traces it afresh
        return jax.jit(lambda h, mask: model._attend_prefill(h, mask, T, cfg)).lower(h, mask).compile()

    os.environ["PYTEST_REWARD_CPU_KERNELS"] = "0"  # read when traced: this program takes XLA's path
    fx = program()
    os.environ.pop("PYTEST_REWARD_CPU_KERNELS")
    fk = program()
    assert kernels.PREFILL_TARGET in fk.as_text() and kernels.PREFILL_TARGET not in fx.as_text()
    real = np.asarray(mask)
    diff = float(np.abs(np.asarray(fx(h, mask)) - np.asarray(fk(h, mask)))[real].max())
    t = best_interleaved(
        {"xla": lambda: fx(h, mask).block_until_ready(), "kernel": lambda: fk(h, mask).block_until_ready()},
        reps,
    )
    tx, tk = L * t["xla"], L * t["kernel"]  # every layer
    keys = sum(n * (n + 1) // 2 for n in lengths)  # (query, key) pairs of real tokens, key at or before query
    flops = L * KV * G * keys * 4 * Dh
    say(
        f"| {name} | {tx * 1e3:.2f} | {flops / tx / 1e9:.1f} | {tk * 1e3:.2f} | {flops / tk / 1e9:.1f} | "
        f"**{tx / tk:.2f}x** | {diff:.1e} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--results", type=Path, help="write our section of this RESULTS.md")
    args = p.parse_args()
    status = kernels_or_exit()
    say(f"- machine: {machine()}; kernel: {status.detail.split(' ')[0]} ({Path(str(status.library)).name})")
    say(f"- streaming bandwidth (numpy sum over 256 MB, one thread): {stream_bandwidth(10) / 1e9:.1f} GB/s")
    say(f"- best of {args.reps} alternating runs of each program")
    say("")
    say(
        "Decode (one new token per row over its KV cache, every layer):\n\n"
        "| shape | valid slots | XLA ms | XLA GB/s (every slot) | kernel ms | kernel GB/s (valid slots) | "
        "XLA / kernel | max difference |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, shape in SHAPES.items():
        case(name, shape, args.reps)
    say("")
    say(
        "Prefill (the causal attention of whole prompts: one layer's time x the layers; every other row left-padded):"
    )
    say("")
    say(
        "| shape | XLA ms | XLA GFLOP/s (useful) | kernel ms | kernel GFLOP/s | XLA / kernel | max difference |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|")
    for name, shape in PREFILL_SHAPES.items():
        prefill_case(name, shape, args.reps)
    if args.results:
        REPORT.write(args.results)


if __name__ == "__main__":
    main()
