"""The JAX engine on a GPU (issue 19, part 3): rollouts of GPT-2-small and a Llama-shaped ~1B model, bf16 and
float32, batch 1 and 64, against the HBM-bandwidth roofline and against transformers ``generate`` on the same GPU
and the same weights.

For each model a random checkpoint is written by transformers (``save_pretrained``, safetensors) and loaded by
both engines, so the weights are the same. Per case (model, dtype, batch):

- ours: ``InferenceJob.generate_tokens`` (slot refill, greedy, ``ignore_eos``), ``--new`` tokens after ``--prompt``
  prompt tokens; new tokens per second; the decode step from two runs, ``(t(new) - t(1)) / (new - 1)`` (more
  rounds while the difference is lost in timing noise, and "unresolved" in the table if it stays so);
- the roofline: the bytes one decode step must read (every weight once, and the KV cache up to the current
  length, averaged over the generation) divided by the GPU's memory bandwidth: the nominal figure of its kind
  and a measured one (a device copy); the step's share of it;
- transformers ``generate`` (``max_new_tokens = min_new_tokens = new``, greedy, the same left-padded prompts);
  ours / transformers in new tokens per second.

Nothing here needs a GPU to run: ``--smoke`` runs tiny shapes on any device (the test suite runs it on the CPU, so
the script cannot rot between the sessions that are lent a GPU). Without ``--smoke`` and without a GPU it says so
and exits 2. ``--results FILE`` writes the section ``## JAX engine on a GPU (issue 19)``.

Usage: ``python bench/bench_gpu.py [--smoke] [--models gpt2,llama1b] [--dtypes bfloat16,float32]
[--batches 1,64] [--prompt 128] [--new 128] [--reps 3] [--results bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

# jax takes 75 % of the GPU's memory at its first use unless told otherwise; transformers runs beside it
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import best, cpu_model, hf_generate_fn, per_step, write_section

from pytest_reward.jax import InferenceJob
from pytest_reward.jax.tokenizer import ByteTokenizer

SECTION = "## JAX engine on a GPU (issue 19)"
LINES: list[str] = []

#: Nominal HBM bandwidth (bytes/s) by a word of the device kind (``jax.devices()[0].device_kind``).
NOMINAL_BANDWIDTH = {"H200": 4.8e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100": 2.0e12}


def say(line: str = "") -> None:
    print(line, flush=True)
    LINES.append(line)


# ---------------------------------------------------------------------------------------------- the machine
def nominal_bandwidth(kind: str) -> float | None:
    for word, value in NOMINAL_BANDWIDTH.items():  # the longer names first where one contains another
        if word in kind:
            return value
    return None


def measured_bandwidth(reps: int, gib: float) -> float:
    """Bytes per second of a device copy of ``gib`` GiB (read once, written once)."""
    n = int(gib * (1 << 30)) // 4
    x = jnp.ones((n,), jnp.float32)
    f = jax.jit(lambda a: a + 1.0)
    f(x).block_until_ready()
    t = best(lambda: f(x).block_until_ready(), reps)
    return 2 * x.nbytes / t


# ---------------------------------------------------------------------------------------------- the models
def shapes(smoke: bool) -> dict[str, tuple[str, dict]]:
    """name -> (transformers class, config keywords)."""
    if smoke:
        return {
            "gpt2": ("GPT2", dict(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=256)),
            "llama1b": (
                "Llama",
                dict(
                    hidden_size=64,
                    intermediate_size=176,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    vocab_size=300,
                    max_position_embeddings=256,
                ),
            ),
        }
    return {
        "gpt2": ("GPT2", dict()),  # GPT-2-small: 12 layers, d768, 50257 ids, 124M parameters
        "llama1b": (  # TinyLlama-1.1B's shape: 22 layers, d2048, grouped-query attention (32 heads, 4 kv)
            "Llama",
            dict(
                hidden_size=2048,
                intermediate_size=5632,
                num_hidden_layers=22,
                num_attention_heads=32,
                num_key_value_heads=4,
                vocab_size=32000,
                max_position_embeddings=2048,
                tie_word_embeddings=False,
            ),
        ),
    }


def write_checkpoint(tmp: Path, name: str, cls: str, kw: dict) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, f"{cls}Config")(**kw)
    model = getattr(transformers, f"{cls}LMHeadModel" if cls == "GPT2" else f"{cls}ForCausalLM")(config)
    model.save_pretrained(tmp / name)
    return tmp / name


def step_bytes(job: InferenceJob, batch: int, prompt: int, new: int) -> float:
    """What one decode step must read: every weight matrix, norm and bias once (the unembedding included; of an
    untied input embedding and of GPT-2's position table only the rows of the step's tokens), and the keys and values
    up to the current length, averaged over the generation."""
    cfg, params = job.config, job.params
    item = jnp.dtype(job.dtype).itemsize
    count = sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(params))
    lookups = [] if cfg.tie_embeddings else ["embed"]
    lookups += ["pos_embed"] if "pos_embed" in params else []
    count -= sum(int(np.prod(params[k].shape)) - batch * params[k].shape[1] for k in lookups)
    avg_len = prompt + (new + 1) / 2
    cache = cfg.n_layers * 2 * batch * cfg.n_kv_heads * cfg.head_dim * avg_len * item
    return count * item + cache


def transformers_time(path: Path, dtype: str, prompts: list[list[int]], new: int, reps: int) -> float:
    """Best-of-``reps`` seconds of transformers ``generate`` of exactly ``new`` greedy tokens (warmed up); the model
    is freed on return."""
    import torch
    import transformers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    hf = (
        transformers.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
    )
    mask = [[1] * len(p) for p in prompts]
    return best(hf_generate_fn(hf, prompts, mask, new, device), reps)


# ---------------------------------------------------------------------------------------------- one case
def run_case(
    name: str,
    path: Path,
    dtype: str,
    batch: int,
    prompt: int,
    new: int,
    reps: int,
    bandwidth: dict[str, float],
) -> dict:
    job = InferenceJob.from_checkpoint(
        path, tokenizer=ByteTokenizer(), per_device_batch_size=batch, dtype=dtype, start_token=None
    )
    vocab = job.config.vocab_size
    prompts = np.random.default_rng(batch).integers(1, min(vocab, 50000), (batch, prompt)).tolist()
    ours = lambda n: job.generate_tokens(prompts, n, ignore_eos=True)  # noqa: E731
    job.reset_stats()
    t0 = time.perf_counter()
    ours(new)
    ours(1)
    first = time.perf_counter() - t0
    longs: list[float] = []  # the timings of ours(new) per_step takes, for the tokens per second too

    def time_new() -> float:
        longs.append(best(lambda: ours(new), reps))
        return longs[-1]

    step = per_step(time_new, lambda: best(lambda: ours(1), reps), new - 1)
    t_new = min(longs)

    t_hf = transformers_time(path, dtype, prompts, new, reps)
    try:
        import torch

        torch.cuda.empty_cache()
    except (ImportError, RuntimeError):
        pass
    moved = step_bytes(job, batch, prompt, new)
    r = {
        "tok_s": batch * new / t_new,
        "hf_tok_s": batch * new / t_hf,
        "step_ms": None if step is None else step * 1e3,
        "first_s": first,
        "bytes": moved,
    }
    if step is None:
        step_cell, roof = "unresolved", "unresolved: t(new) not above t(1), the step is within timing noise"
    else:
        r |= {f"roof_{k}": 100 * moved / v / step for k, v in bandwidth.items()}
        step_cell = f"{r['step_ms']:.2f}"
        roof = ", ".join(f"{r[f'roof_{k}']:.0f} % of the {k} roofline" for k in bandwidth)
    say(
        f"| {name} | {dtype} | {batch} | {r['tok_s']:.0f} | {step_cell} | {moved / 1e6:.0f} MB | {roof} | "
        f"{r['hf_tok_s']:.0f} | **{r['tok_s'] / r['hf_tok_s']:.2f}x** |"
    )
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--smoke", action="store_true", help="tiny shapes on any device (a check that the script runs)"
    )
    p.add_argument("--models", default="gpt2,llama1b")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--batches", default="1,64")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--results", type=Path, help="write our section of this RESULTS.md")
    args = p.parse_args()
    device = jax.devices()[0]
    if device.platform != "gpu" and not args.smoke:
        print(
            f"no GPU: jax's first device is {device} (run with --smoke to check the script)", file=sys.stderr
        )
        sys.exit(2)
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    kind = getattr(device, "device_kind", device.platform)
    bandwidth = {"measured": measured_bandwidth(args.reps, 0.01 if args.smoke else 1.0)}
    nominal = nominal_bandwidth(kind)
    if nominal is not None:
        bandwidth = {"nominal": nominal, **bandwidth}
    say(
        f"- device: {kind} ({len(jax.devices())} device(s) of platform {device.platform}); host: {cpu_model()}; "
        f"memory bandwidth: "
        + ", ".join(f"{k} {v / 1e9:.0f} GB/s" for k, v in bandwidth.items())
        + " (measured: a device copy, read + write)"
    )
    say(f"- prompt {args.prompt} tokens, {args.new} new tokens, greedy, fixed length; best of {args.reps}")
    say("")
    say(
        "| model | dtype | batch | ours new tok/s | decode step (ms) | bytes a step must read | "
        "step vs roofline | transformers new tok/s | ours / transformers |"
    )
    say("|---|---|---:|---:|---:|---:|---|---:|---:|")
    models = shapes(args.smoke)
    results = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        for name in args.models.split(","):
            cls, kw = models[name]
            path = write_checkpoint(Path(tmp_dir), name, cls, kw)
            for dtype in args.dtypes.split(","):
                for batch in map(int, args.batches.split(",")):
                    results[(name, dtype, batch)] = run_case(
                        name, path, dtype, batch, args.prompt, args.new, args.reps, bandwidth
                    )
    say("")
    say(
        "Targets (issue 19): batch-1 decode >= 60 % of the roofline; batch 64 >= 3x transformers. The roofline "
        "counts the cache up to the current length; our step reads every slot of its cache (prompt bucket + "
        "new-token bucket), so the share is the engine's whole efficiency."
    )
    if args.results:
        header = [
            SECTION,
            "",
            f"- date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}",
            f"- software: jax {jax.__version__}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}, python {platform.python_version()}",
            "- command: `python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]) + "`",
            "",
        ]
        write_section(args.results, SECTION, "\n".join(header + LINES))
        print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
