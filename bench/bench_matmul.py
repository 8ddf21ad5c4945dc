"""A decode step's weight matmuls on the CPU (issue 19): ``kernels.linear_packed`` over ``kernels.pack_rows`` panels
against XLA's matmul of the (out, in) matrix, in the same run.

Per shape: one jit-compiled program that runs every weight matmul of the model's layers in sequence, as a decode
step does (qkv, attention out, MLP up, MLP down, each layer's weights its own arrays, so that the d384 and
GPT-2-small weights come from memory, not the cache), with B activation columns; and the unembedding alone. It
prints ms, GFLOP/s, the ratio and the largest difference between the two programs' outputs.

Usage: ``python bench/bench_matmul.py [--reps 20] [--results bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
from _common import Section, best_interleaved, kernels_or_exit, machine

from pytest_reward.jax import kernels

SECTION = "## Decode matmul kernel (issue 19)"
REPORT = Section(SECTION)
say = REPORT.say

#: name -> (d_model, d_ff, layers); every shape at each batch of BATCHES
MODELS = {
    "tiny-adder (d128)": (128, 512, 4),
    "6-layer d384": (384, 1536, 6),
    "GPT-2-small": (768, 3072, 12),
}
BATCHES = (8, 32)
UNEMBEDDINGS = {"GPT-2-small unembedding (50257 x 768)": (50257, 768)}


def layers_case(name: str, D: int, F: int, L: int, B: int, reps: int) -> None:
    rng = np.random.default_rng(0)
    shapes = [(3 * D, D), (D, D), (F, D), (D, F)]  # (out, in): qkv, attention out, MLP up, MLP down
    wt = [[(rng.standard_normal(s) * 0.02).astype(np.float32) for s in shapes] for _ in range(L)]
    bias = jax.device_put([[np.zeros(s[0], np.float32) for s in shapes] for _ in range(L)])
    plain = jax.device_put(wt)
    packed = jax.device_put([[kernels.pack_rows(w) for w in layer] for layer in wt])
    x0 = jnp.asarray(rng.standard_normal((D, B)).astype(np.float32))

    def program(linear):  # type: ignore[no-untyped-def]
        def run(ws, bs, x):  # type: ignore[no-untyped-def]
            for (w_qkv, w_out, w_up, w_down), (b_qkv, b_out, b_up, b_down) in zip(ws, bs, strict=True):
                h = linear(w_qkv, x, b_qkv)
                o = linear(w_out, h[:D], b_out)
                u = linear(w_up, o, b_up)
                x = x + linear(w_down, jnp.tanh(u), b_down)
            return x

        return jax.jit(run)

    xla = program(lambda w, x, b: w @ x + b[:, None])
    kernel = program(kernels.linear_packed)
    diff = float(jnp.abs(xla(plain, bias, x0) - kernel(packed, bias, x0)).max())
    t = best_interleaved(
        {
            "xla": lambda: xla(plain, bias, x0).block_until_ready(),
            "kernel": lambda: kernel(packed, bias, x0).block_until_ready(),
        },
        reps,
    )
    flops = 2 * B * L * sum(n * k for n, k in shapes)
    report(f"{name}, {4 * L} matrices", B, t, flops, diff)


def unembedding_case(name: str, V: int, D: int, B: int, reps: int) -> None:
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((V, D)) * 0.02).astype(np.float32)
    x = jnp.asarray(rng.standard_normal((D, B)).astype(np.float32))
    plain, packed, b = jnp.asarray(w), jnp.asarray(kernels.pack_rows(w)), jnp.zeros(V, jnp.float32)
    xla = jax.jit(lambda w, x: w @ x)
    kernel = jax.jit(lambda p, x: kernels.linear_packed(p, x, b))
    diff = float(jnp.abs(xla(plain, x) - kernel(packed, x)).max())
    t = best_interleaved(
        {
            "xla": lambda: xla(plain, x).block_until_ready(),
            "kernel": lambda: kernel(packed, x).block_until_ready(),
        },
        reps,
    )
    report(name, B, t, 2 * V * D * B, diff)


def report(name: str, B: int, t: dict[str, float], flops: int, diff: float) -> None:
    say(
        f"| {name} | {B} | {1e3 * t['xla']:.2f} | {flops / t['xla'] / 1e9:.0f} | {1e3 * t['kernel']:.2f} | "
        f"{flops / t['kernel'] / 1e9:.0f} | **{t['xla'] / t['kernel']:.2f}x** | {diff:.1e} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--results", type=Path, help="write our section of this RESULTS.md")
    args = p.parse_args()
    status = kernels_or_exit()
    say(f"- machine: {machine()}; kernel: {status.detail.split(' ')[0]} ({Path(str(status.library)).name})")
    say(f"- best of {args.reps} alternating runs of each program")
    say("")
    say(
        "| matrices | batch | XLA ms | XLA GFLOP/s | kernel ms | kernel GFLOP/s | XLA / kernel | max difference |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (D, F, L) in MODELS.items():
        for B in BATCHES:
            layers_case(name, D, F, L, B, args.reps)
    for name, (V, D) in UNEMBEDDINGS.items():
        for B in BATCHES:
            unembedding_case(name, V, D, B, args.reps)
    if args.results:
        REPORT.write(args.results)


if __name__ == "__main__":
    main()
