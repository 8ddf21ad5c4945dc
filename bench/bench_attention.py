"""Decode attention on the CPU (issue 19): the C++ kernel of ``pytest_reward.jax.kernels`` against XLA's path
(``model._attend``: two batched matrix-vector products and a masked softmax), in the same run, on the decode
shapes of ``bench_rollout.py`` (every layer's cache its own array, so each read comes from memory as in a step).

Per shape: ms for all layers, bytes of keys and values read per second (of the valid slots for the kernel, of
every slot for XLA, which reads them all), the ratio, and the largest difference of the outputs. The machine's
streaming bandwidth (a numpy sum over 256 MB, one thread) is printed beside them for scale.

Usage: ``python bench/bench_attention.py [--reps 30] [--results bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
from _common import best, best_interleaved, machine, write_section

from pytest_reward.jax import ModelConfig, kernels, model

SECTION = "## Decode attention kernel (issue 19)"
LINES: list[str] = []

#: name -> (layers, batch, kv heads, query heads per kv head, slots, head width, valid slots per row)
SHAPES = {
    "6-layer d384, batch 32": (6, 32, 6, 1, 128, 64, 96),
    "6-layer d384, batch 8": (6, 8, 6, 1, 128, 64, 96),
    "GPT-2-small, batch 32": (12, 32, 12, 1, 128, 64, 96),
    "Llama-shaped GQA (32 heads / 4 kv), batch 32": (8, 32, 4, 8, 128, 64, 96),
}


def say(line: str = "") -> None:
    print(line, flush=True)
    LINES.append(line)


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--results", type=Path, help="write our section of this RESULTS.md")
    args = p.parse_args()
    status = kernels.status()
    if not status.available:
        print(f"the kernel is not available: {status.detail}", file=sys.stderr)
        sys.exit(2)
    say(f"- machine: {machine()}; kernel: {status.detail.split(' ')[0]} ({Path(str(status.library)).name})")
    say(f"- streaming bandwidth (numpy sum over 256 MB, one thread): {stream_bandwidth(10) / 1e9:.1f} GB/s")
    say(f"- best of {args.reps} alternating runs of each program")
    say("")
    say(
        "| shape | valid slots | XLA ms | XLA GB/s (every slot) | kernel ms | kernel GB/s (valid slots) | "
        "XLA / kernel | max difference |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, shape in SHAPES.items():
        case(name, shape, args.reps)
    if args.results:
        header = [
            SECTION,
            "",
            f"- date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}, jax {jax.__version__}",
            "- command: `python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]) + "`",
        ]
        write_section(args.results, SECTION, "\n".join(header + LINES))
        print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
