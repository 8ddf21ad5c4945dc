"""Learned reward models on the engine (issue 32): ``RewardModel.score_ids`` against transformers' forward of the same
``GPT2ForSequenceClassification`` checkpoint, in the same run.

A random GPT-2-small-shaped reward model (12 layers, d768, 50257 ids, ``num_labels=1``, pad = eos) is written by
transformers (``save_pretrained``, safetensors) and loaded by both. The work: chosen/rejected pairs, each text a
prompt of ``T/2`` tokens and a response of ``T/2`` (random ids, no pad token), one reward per text.

On the CPU (the default without a GPU): batch 16 x 256 tokens, float32.

- ours: ``rm.score_ids`` (warmed up) twice: as it runs by default, the two responses of a pair running their
  shared prompt once (``min_shared_prefix``), and on whole rows (``min_shared_prefix=None``: the length bucket's
  one program, every text run whole, as transformers runs it), in texts/s;
- the whole-row forward's matmul FLOP/s as a share of the machine's matmul peak. The FLOPs counted are the
  whole-row program's: every layer's projections and MLP for every token, except that the last layer's attention
  output and MLP run for the pooled token only, causal attention scores (``T (T + 1) / 2`` query-key pairs per
  head), and the head. The peak is measured right after each forward by a jitted chain of 2048^3 matmuls lasting
  about as long (on a machine shared with other work, a forward of seconds competes for the cores all along, while
  one matmul can land in a quiet moment): the share is the median (and quartiles) over the alternations; one
  2048^3 matmul (numpy and jax, the larger, first and last) is printed too;
- transformers: ``model(ids, attention_mask=mask).logits`` under ``torch.no_grad`` (the classifier's own forward
  and pooling), the same ids;
- the ratio, best of ``--reps`` alternating runs each; the whole comparison run ``--rounds`` times (default 3: the
  machine is shared, so the spread of the ratio is reported), and the largest score difference.

With a GPU (``--device gpu``, or ``auto`` when jax's first device is one): bfloat16 and float32, batch 1 and 64, the
same texts: ours and transformers on the same GPU, and the forward against its rooflines: the time to read every
weight once at the HBM bandwidth (nominal for the device kind, and a measured device copy; the bound at batch 1)
and the FLOPs. ``--smoke`` runs tiny shapes on any device, both paths (the test suite runs it, so the script
cannot rot between the sessions lent a GPU).

Usage: ``python bench/bench_reward_model.py [--device auto|cpu|gpu] [--smoke] [--reps 3] [--rounds 3]
[--wait-quiet MIN] [--results bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

# jax takes 75 % of the GPU's memory at its first use unless told otherwise; transformers runs beside it
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
from _common import Section, best, machine, matmul_rates
from bench_gpu import measured_bandwidth, nominal_bandwidth

from pytest_reward.jax import ModelConfig, RewardModel
from pytest_reward.jax.tokenizer import ByteTokenizer

#: RESULTS.md sections: the CPU run and the GPU run are recorded apart (one does not overwrite the other).
SECTIONS = {
    "cpu": "## Learned reward models on the engine (issue 32): CPU",
    "gpu": "## Learned reward models on the engine (issue 32): GPU",
}
REPORT = Section(SECTIONS["cpu"])


def say(line: str = "") -> None:
    REPORT.say(line)


#: The GPT-2-small shape, and a tiny one for ``--smoke``.
SHAPES = {
    False: dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
    True: dict(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=128),
}


def write_checkpoint(tmp: Path, smoke: bool) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    shape = SHAPES[smoke]
    eos = shape["vocab_size"] - 1
    config = transformers.GPT2Config(
        **shape, num_labels=1, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos
    )
    model = transformers.GPT2ForSequenceClassification(config)
    model.save_pretrained(tmp / "rm")
    ByteTokenizer().save(tmp / "rm")  # any tokenizer: the bench scores ids
    return tmp / "rm"


def pairs(n_texts: int, T: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``n_texts / 2`` prompts of ``T / 2`` random ids, each with two responses of ``T / 2`` ids (no pad id)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_texts // 2):
        prompt = rng.integers(0, vocab - 1, T // 2).tolist()
        out += [prompt + rng.integers(0, vocab - 1, T - T // 2).tolist() for _ in range(2)]
    return out


def forward_flops(cfg: ModelConfig, B: int, T: int) -> float:
    """Matmul FLOPs of the reward program on B rows of T tokens (module docstring)."""
    D, F, L = cfg.d_model, cfg.d_ff, cfg.n_layers
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    mlp = (4 if cfg.family == "gpt2" else 6) * D * F
    qkv = 2 * D * (q + 2 * kv)
    rest = 2 * q * D + mlp  # attention output and MLP, per token
    scores = 4 * q * T * (T + 1) / 2  # q.k and w.v over the causal pairs
    per_row = L * qkv * T + (L - 1) * (rest * T + scores) + (rest + 4 * q * T) + 2 * D
    return B * per_row


def hf_forward(hf, ids: list[list[int]], device: str, dtype) -> Callable[[], object]:
    import torch

    x = torch.tensor(ids, dtype=torch.long, device=device)
    mask = torch.ones_like(x)

    def run():
        with torch.no_grad():
            out = hf(x, attention_mask=mask).logits[:, 0].float()
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    run()
    return run


def matmul_peak(reps: int, n: int = 2048) -> float:
    np_gf, jx_gf = matmul_rates(reps, n)
    say(f"- float32 matmul {n}^3: numpy {np_gf:.0f} GFLOP/s, jax {jx_gf:.0f} GFLOP/s (load {load()})")
    return max(np_gf, jx_gf)


def sustained_matmuls(seconds: float, n: int) -> tuple[Callable[[], object], int]:
    """A jitted program of k back-to-back n^3 float32 matmuls lasting about ``seconds`` (k >= 1), and its FLOPs: on a
    shared machine a forward of several seconds competes for the cores all along, while one matmul can land in a
    quiet moment, so the peak that the forward is compared with is measured over as long a run, in the same
    alternation. Returns the timed function and k."""
    a = jnp.asarray(np.random.default_rng(0).random((n, n), dtype=np.float32) / n)
    one = jax.jit(jnp.matmul)
    one(a, a).block_until_ready()
    k = max(1, round(seconds / best(lambda: one(a, a).block_until_ready(), 3)))

    @jax.jit
    def chain(x):
        return jax.lax.fori_loop(0, k, lambda _, y: y @ a, x)

    chain(a).block_until_ready()
    return (lambda: chain(a).block_until_ready()), k


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def wait_for_quiet(max_minutes: float, threshold: float) -> None:
    """On a shared machine: wait (bounded) until the 1-minute load average drops below ``threshold``."""
    deadline = time.time() + 60 * max_minutes
    while os.getloadavg()[0] >= threshold and time.time() < deadline:
        time.sleep(10)
    print(f"(load average {load()} when starting)", flush=True)


# ---------------------------------------------------------------------------------------------- CPU
def cpu_bench(path: Path, smoke: bool, reps: int, rounds: int) -> None:
    import torch
    import transformers

    B, T = (4, 32) if smoke else (16, 256)
    n = 256 if smoke else 2048
    peak_start = matmul_peak(3 if smoke else 10, n)
    shared = RewardModel.from_checkpoint(path, min_shared_prefix=8 if smoke else 32)  # the default: 32
    whole = RewardModel.from_checkpoint(path, min_shared_prefix=None)
    hf = transformers.GPT2ForSequenceClassification.from_pretrained(path).eval()
    ids = pairs(B, T, whole.config.vocab_size)
    say(
        f"\n### GPT-2-small-shaped reward model, float32, CPU: {B // 2} pairs = batch {B} x {T} tokens "
        f"(each pair: one prompt of {T // 2} tokens, two responses of {T - T // 2})"
        + (" (smoke shape)" if smoke else "")
    )
    say(f"- torch threads {torch.get_num_threads()}, jax devices {jax.devices()}")
    hf_run = hf_forward(hf, ids, "cpu", torch.float32)
    expected = hf_run().numpy()
    fns: dict[str, Callable[[], object]] = {"hf": hf_run}
    for name, rm in (("shared", shared), ("whole", whole)):
        t0 = time.perf_counter()
        got = rm.score_ids(ids)
        say(
            f"- ours, {name} rows: first call {time.perf_counter() - t0:.2f} s (compile {rm.stats.compile_seconds:.2f} "
            f"s), programs {rm.stats.compile_keys}, max |score - transformers| {np.abs(got - expected).max():.1e}"
        )
        fns[name] = partial(rm.score_ids, ids)
    flops = forward_flops(whole.config, B, T)
    sustained, k = sustained_matmuls(best(fns["whole"], 1), n)
    # right after "whole": each forward is compared with the matmuls of the same moment
    fns["peak"] = sustained
    peak_flops = k * 2 * n**3
    times: dict[str, list[float]] = {key: [] for key in fns}
    efficiency: list[float] = []  # forward GFLOP/s over the next chain's GFLOP/s, one per alternation
    for r in range(rounds):
        best_of: dict[str, float] = {}
        for _ in range(reps):
            for key, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
                best_of[key] = min(best_of.get(key, float("inf")), times[key][-1])
            efficiency.append(flops / times["whole"][-1] / (peak_flops / times["peak"][-1]))
        t = best_of
        say(
            f"- round {r + 1}: transformers {t['hf']:.3f} s; ours whole rows {t['whole']:.3f} s "
            f"(**{t['hf'] / t['whole']:.2f}x**, {flops / t['whole'] / 1e9:.0f} GFLOP/s), shared prompts "
            f"{t['shared']:.3f} s (**{t['hf'] / t['shared']:.2f}x**); matmul chain {peak_flops / t['peak'] / 1e9:.0f} "
            f"GFLOP/s (load {load()})"
        )
    peak_end = matmul_peak(3 if smoke else 10, n)
    peak = max(peak_start, peak_end)
    best_of_all = {key: min(v) for key, v in times.items()}
    for name, label in (("shared", "shared prompts (the default)"), ("whole", "whole rows")):
        per_round = [
            min(times["hf"][i : i + reps]) / min(times[name][i : i + reps])
            for i in range(0, rounds * reps, reps)
        ]
        say(
            f"- {label}: **ratio {np.median(per_round):.2f}x** transformers (median of {rounds} rounds, spread "
            f"{min(per_round):.2f}-{max(per_round):.2f}x; each round best of {reps} alternating runs), "
            f"{B / best_of_all[name]:.1f} texts/s"
        )
    q1, med, q3 = np.percentile(100 * np.asarray(efficiency), [25, 50, 75])
    gfs = flops / best_of_all["whole"] / 1e9
    say(
        f"- the forward (whole rows: {flops / 1e9:.0f} GFLOP, module docstring) against the machine's matmul peak, "
        f"measured right after it by a jitted chain of {k} {n}^3 matmuls as long as the forward: **median {med:.0f} "
        f"%** (quartiles {q1:.0f}-{q3:.0f} %) over the {len(efficiency)} alternations; best times: {gfs:.0f} GFLOP/s "
        f"against {peak_flops / best_of_all['peak'] / 1e9:.0f} = {100 * gfs * best_of_all['peak'] / peak_flops * 1e9:.0f}"
        f" %; one {n}^3 matmul: {peak:.0f} GFLOP/s (the larger of {peak_start:.0f} at the start and {peak_end:.0f} "
        f"at the end); transformers at the same count {100 * flops / best_of_all['hf'] / 1e9 / peak:.0f} % of that"
    )
    say("- targets (issue 32): >= 1.5x transformers, the forward >= 80 % of the matmul peak")


# ---------------------------------------------------------------------------------------------- GPU
def gpu_bench(path: Path, smoke: bool, reps: int) -> None:
    import torch
    import transformers

    device = jax.devices()[0]
    kind = getattr(device, "device_kind", device.platform)
    bandwidth = {"measured": measured_bandwidth(reps, 0.01 if smoke else 1.0)}
    nominal = nominal_bandwidth(kind)
    if nominal is not None:
        bandwidth = {"nominal": nominal, **bandwidth}
    T = 32 if smoke else 256
    torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    say(
        f"\n### On {kind} ({device.platform}): texts of {T} tokens; memory bandwidth "
        + ", ".join(f"{k} {v / 1e9:.0f} GB/s" for k, v in bandwidth.items())
        + f"; transformers on {torch_device}"
    )
    say("")
    say(
        "| dtype | batch | ours ms (whole rows) | TFLOP/s | weights at HBM bandwidth | ours ms (shared prompts) | "
        "transformers ms | ours / transformers: whole, shared | max abs diff |"
    )
    say("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for dtype in ("bfloat16", "float32"):
        kw = {"dtype": getattr(jnp, dtype), "max_batch_size": 64}
        whole = RewardModel.from_checkpoint(path, min_shared_prefix=None, **kw)
        shared = RewardModel.from_checkpoint(path, min_shared_prefix=8 if smoke else 32, **kw)
        tdtype = getattr(torch, dtype)
        hf = (
            transformers.GPT2ForSequenceClassification.from_pretrained(path, dtype=tdtype)
            .to(torch_device)
            .eval()
        )
        weight_bytes = sum(a.size * a.dtype.itemsize for a in jax.tree_util.tree_leaves(whole.params))
        for batch in (1, 64):
            ids = pairs(max(batch, 2), T, whole.config.vocab_size, seed=batch)[:batch]
            hf_run = hf_forward(hf, ids, torch_device, tdtype)
            expected = hf_run().cpu().numpy()
            diff = max(float(np.abs(rm.score_ids(ids) - expected).max()) for rm in (whole, shared))
            t_whole = best(partial(whole.score_ids, ids), reps)
            t_shared = best(partial(shared.score_ids, ids), reps)
            t_hf = best(hf_run, reps)
            flops = forward_flops(whole.config, batch, T)
            roof = ", ".join(f"{100 * weight_bytes / v / t_whole:.0f} % of {k}" for k, v in bandwidth.items())
            say(
                f"| {dtype} | {batch} | {t_whole * 1e3:.2f} | {flops / t_whole / 1e12:.2f} | "
                f"{weight_bytes / 1e6:.0f} MB: {roof} | {t_shared * 1e3:.2f} | {t_hf * 1e3:.2f} | "
                f"**{t_hf / t_whole:.2f}x**, **{t_hf / t_shared:.2f}x** | {diff:.1e} |"
            )
        del hf
        if torch_device == "cuda":
            torch.cuda.empty_cache()
    say("")
    say(
        "Texts: pairs of responses to one prompt (batch 1: one text). Whole rows: every text run whole, as "
        "transformers runs it; shared prompts: the default, a pair's prompt run once. The weights column is the bound "
        "of batch 1 (every weight read once per forward, at the nominal and the measured bandwidth), for the whole-row "
        "time; batch 64 is compute-bound (TFLOP/s: the whole-row program's matmul FLOPs, module docstring)."
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    p.add_argument(
        "--smoke", action="store_true", help="tiny shapes on any device (a check that the script runs)"
    )
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3, help="CPU: how many times the whole comparison runs")
    p.add_argument("--results", type=Path, help="write our section of this RESULTS.md")
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="MIN",
        help="wait up to MIN minutes for a load below 2",
    )
    args = p.parse_args()
    if args.wait_quiet:
        wait_for_quiet(args.wait_quiet, 2.0)
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    has_gpu = jax.devices()[0].platform == "gpu"
    device = args.device if args.device != "auto" else ("gpu" if has_gpu else "cpu")
    if device == "gpu" and not has_gpu and not args.smoke:
        print(
            f"no GPU: jax's first device is {jax.devices()[0]} (run with --smoke to check the script)",
            file=sys.stderr,
        )
        sys.exit(2)
    global REPORT
    REPORT = Section(SECTIONS[device])
    say(f"- machine: {machine()}; torch {torch.__version__}, transformers {transformers.__version__}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        path = write_checkpoint(Path(tmp_dir), args.smoke)
        if device == "cpu":
            cpu_bench(path, args.smoke, args.reps, args.rounds)
        else:
            gpu_bench(path, args.smoke, args.reps)
    if args.results:
        REPORT.write(args.results)


if __name__ == "__main__":
    main()
