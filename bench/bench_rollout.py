"""Benchmark of the JAX inference engine (issues 7 and 19) against transformers (torch CPU) on the same weights.

    .venv/bin/python bench/bench_rollout.py            # everything (~25 min on a loaded 2-core box)
    .venv/bin/python bench/bench_rollout.py --quick    # skip the naive no-cache loops
    .venv/bin/python bench/bench_rollout.py --against 53a4cad   # also time that revision's decode step
    .venv/bin/python bench/bench_rollout.py --results bench/RESULTS.md   # also write our section of RESULTS.md

Measures, printing every figure and ratio:

* the float32 matmul peak of the machine (2048^3, numpy and jax; peak = the larger, measured first and last);
* greedy rollout new tokens/s at fixed length (end-of-text ignored so every engine does the same work) for three
  shapes, each at batch 8 and 32: the shipped tiny-adder (4 layers, d128; 48 new tokens), a random 6-layer d384
  GPT-2 (nanoGPT's character-level shape, byte vocabulary; prompt 64, 64 new tokens) and a random GPT-2-small
  (124M; prompt 64, 64 new tokens), against transformers ``generate(do_sample=False)`` on the same weights: ours
  with slot refill (the default) and with static batching, the first call (compile + run) apart from the steady
  state (best of ``--reps``, contenders timed in alternation);
* the decode step alone (static rollout of N minus rollout of 1 new token, per step) as GFLOP/s and % of peak,
  and with ``--against REV`` the same step of revision REV's engine (its ``model.py``/``generate.py`` loaded from
  git) timed in alternation with this one, so before/after share the machine's load;
* slot refill against static batching on a long-tailed workload: 512 prompts, responses sampled from a random
  6-layer d384 model whose end-of-text logit is raised so that a response ends after a geometric number of tokens
  and about 10 % reach ``max_new_tokens`` (64); same outputs, generated tokens/s of each;
* forward (perplexity scoring) tokens/s on GPT-2-small, batch 8 x 256, against transformers' forward + log_softmax;
* the tiny-adder end to end: 1000 held-out problems, stopping at end-of-text, refill and static, and accuracy;
* (unless ``--quick``) the naive no-cache JAX loop (one full forward per new token) on the tiny-adder.

FLOPs count matmuls only: per token ``2 * (matmul weights) + 4 * L * context * D`` (+ the logits), with
``context`` = the key slots actually computed (all cache slots for a decode step, T for a forward).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import best, best_interleaved, cpu_model, hf_generate_fn, matmul_rates, write_section

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pytest_reward.jax import (  # noqa: E402
    ByteTokenizer,
    InferenceJob,
    ModelConfig,
    init_params,
    kernels,
    resolve_model,
)
from pytest_reward.jax import generate as gen  # noqa: E402

SECTION = "## JAX inference engine (issue 7)"
LINES: list[str] = []


def say(line: str = "") -> None:
    print(line, flush=True)
    LINES.append(line)


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} CPUs, load average {load()} at start"


def wait_for_quiet(max_minutes: float, threshold: float = 1.0) -> None:
    """Benchmarks on a shared 2-core box: wait (bounded) until the 1-minute load average drops below threshold."""
    deadline = time.time() + 60 * max_minutes
    while os.getloadavg()[0] >= threshold and time.time() < deadline:
        time.sleep(15)
    print(f"(load average {load()} when starting)", flush=True)


def matmul_peak(reps: int) -> float:
    np_gf, jx_gf = matmul_rates(reps)
    say(
        f"- float32 matmul 2048^3: numpy {np_gf:.0f} GFLOP/s, jax {jx_gf:.0f} GFLOP/s -> peak {max(np_gf, jx_gf):.0f}"
        f" (load {load()})"
    )
    return max(np_gf, jx_gf)


# ---------------------------------------------------------------------------------------------- models
def random_gpt2(tmp: Path, name: str, **shape: int):
    """A random GPT-2 written by transformers (``save_pretrained``) and loaded by both engines."""
    import torch
    import transformers

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**shape)).eval()
    hf.save_pretrained(tmp / name)
    return tmp / name, hf


# ---------------------------------------------------------------------------------------------- an older engine
def engine_at(rev: str) -> types.ModuleType:
    """Revision ``rev``'s ``generate`` module (with its ``model`` and ``config``), loaded from git into a package of
    its own, for timing its decode step beside this one's."""
    tmp = Path(tempfile.mkdtemp(prefix="engine-"))
    pkg = tmp / "engine_before"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("config", "model", "generate"):
        src = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:pytest_reward/jax/{name}.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (pkg / f"{name}.py").write_text(src)
    sys.path.insert(0, str(tmp))
    # A revision with CPU kernels imports them as ``from . import kernels``: it gets this revision's (one library
    # per process; the attention kernel it calls, ``kernels.decode_attention``, is the same call).
    sys.modules["engine_before.kernels"] = kernels
    return importlib.import_module("engine_before.generate")


def static_program(
    module: types.ModuleType, job: InferenceJob, tokens: np.ndarray, mask: np.ndarray, new: int
):
    """A compiled static greedy rollout of ``module`` (this engine's ``generate`` or an older one) and a function
    running it for ``n`` new tokens (n <= new)."""
    B = len(tokens)
    slots = max(16, 1 << (new - 1).bit_length())
    cfg_mod = sys.modules[module.__name__.rsplit(".", 1)[0] + ".config"]
    cfg = cfg_mod.ModelConfig(**{f: getattr(job.config, f) for f in job.config.__dataclass_fields__})
    args = [job.params, jnp.asarray(tokens), jnp.asarray(mask), jnp.zeros((B, 2), jnp.int32), jnp.uint32(0)]
    if "dparams" in inspect.signature(module.rollout).parameters:  # the decode layout beside the parameters
        if module is gen:
            dparams = job._decode_params()
        else:  # an older engine reads its own decode layout (before the packed one)
            host = jax.tree.map(np.asarray, job.params)
            dparams = jax.device_put(
                sys.modules[module.__name__.rsplit(".", 1)[0] + ".model"].decode_weights(host, cfg)
            )
        args.insert(1, dparams)
    rest = (jnp.float32(1e-6), jnp.int32(0), jnp.float32(1.0))
    static = {"cfg": cfg, "new_slots": slots, "mode": "greedy", "stop_ids": ()}
    exe = module.rollout_jit.lower(*args, jnp.int32(new), *rest, **static).compile()

    def run(n: int) -> np.ndarray:
        return np.asarray(exe(*args, jnp.int32(n), *rest)[0])

    run(new)
    run(1)
    return run


# ---------------------------------------------------------------------------------------------- fixed length
def rollout_bench(
    name: str,
    job: InferenceJob,
    hf,
    prompts: list[list[int]],
    new: int,
    reps: int,
    peak: float,
    before: types.ModuleType | None,
) -> dict:
    """Fixed-length greedy rollouts of one batch: ours (refill, static), transformers, the decode step."""
    B = len(prompts)
    P = max(map(len, prompts))
    say(f"\n### {name}: batch {B}, prompt {P}, {new} new tokens (greedy, fixed length)")
    job.reset_stats()
    t0 = time.perf_counter()
    ours = np.array(job.generate_tokens(prompts, new, ignore_eos=True)[0])
    first = time.perf_counter() - t0
    compile_s = job.stats.compile_seconds
    static = np.array(job.generate_tokens(prompts, new, ignore_eos=True, batching="static")[0])
    tokens, mask = job.pad(job.generate_tokens(prompts, 1, ignore_eos=True, batching="static")[1], 0)
    step_now = static_program(gen, job, tokens, mask, new)
    fns: dict[str, Callable[[], object]] = {
        "refill": lambda: job.generate_tokens(prompts, new, ignore_eos=True),
        "static": lambda: job.generate_tokens(prompts, new, ignore_eos=True, batching="static"),
        "step N": lambda: step_now(new),
        "step 1": lambda: step_now(1),
        "hf": hf_generate_fn(hf, tokens, mask, new),
    }
    if before is not None:
        step_before = static_program(before, job, tokens, mask, new)
        fns["before N"] = lambda: step_before(new)
        fns["before 1"] = lambda: step_before(1)
        same_before = bool((step_before(new) == step_now(new)).all())
    t = best_interleaved(fns, reps)
    tok_s = {k: B * new / t[k] for k in ("refill", "static", "hf")}
    P_bucket = max(16, 1 << (P - 1).bit_length())
    slots = P_bucket + max(16, 1 << (new - 1).bit_length())
    flops = B * job.config.matmul_flops_per_token(slots)
    step = (t["step N"] - t["step 1"]) / (new - 1)
    r = {
        "tok_s": tok_s["refill"],
        "static_tok_s": tok_s["static"],
        "hf_tok_s": tok_s["hf"],
        "first_s": first,
        "step_ms": step * 1e3,
        "step_gfs": flops / step / 1e9,
        "step_pct": 100 * flops / step / 1e9 / peak,
    }
    say(
        f"- ours (refill): first call {first:.2f} s (lowering + XLA compile {compile_s:.2f} s), steady "
        f"{t['refill']:.3f} s -> **{tok_s['refill']:.0f} new tok/s**; static batching {t['static']:.3f} s -> "
        f"{tok_s['static']:.0f} new tok/s; same tokens: {bool((ours == static).all())}"
    )
    say(
        f"- transformers generate: {t['hf']:.3f} s -> {tok_s['hf']:.0f} new tok/s; **ours {r['tok_s'] / r['hf_tok_s']:.2f}x**"
        f" (static {r['static_tok_s'] / r['hf_tok_s']:.2f}x; target >= 2x)"
    )
    say(
        f"- decode step: {step * 1e3:.2f} ms ({B} rows, {slots} cache slots), {flops / step / 1e9:.1f} GFLOP/s = "
        f"**{r['step_pct']:.0f} % of matmul peak** (prefill + first token {t['step 1'] * 1e3:.1f} ms)"
    )
    if before is not None:
        step_b = (t["before N"] - t["before 1"]) / (new - 1)
        r["before_step_ms"] = step_b * 1e3
        r["before_step_gfs"] = flops / step_b / 1e9
        r["before_step_pct"] = 100 * flops / step_b / 1e9 / peak
        say(
            f"- decode step of the engine before: {step_b * 1e3:.2f} ms = {r['before_step_pct']:.0f} % of peak; "
            f"**this one is {step_b / step:.2f}x faster**; same tokens: {same_before}"
        )
    say(f"- (best of {reps} alternating runs of each; load average {load()} after)")
    return r


# ---------------------------------------------------------------------------------------------- refill
def long_tail_job(p_stop: float) -> InferenceJob:
    """A random 6-layer d384 GPT-2 (byte vocabulary) whose end-of-text logit is raised by a constant ``b``: feature
    0 of the final norm is the constant 1 (scale 0, bias 1), it is 0 in every token's embedding but end-of-text's,
    where it is ``b``. The other logits are near-uniform (random weights), so at temperature 1 a row stops at each
    step with probability about ``p_stop``: lengths are geometric."""
    cfg = ModelConfig.gpt2(vocab_size=257, d_model=384, n_layers=6, n_heads=6, max_positions=256)
    params = init_params(cfg, seed=0)
    eot = 256
    b = float(np.log(p_stop / (1 - p_stop) * (cfg.vocab_size - 1)))
    params["final_norm"]["scale"][0] = 0.0
    params["final_norm"]["bias"][0] = 1.0
    params["embed"][:, 0] = 0.0
    params["embed"][eot, 0] = b
    return InferenceJob(cfg, params, ByteTokenizer(), per_device_batch_size=32)


def refill_bench(reps: int, n_prompts: int = 512, new: int = 64) -> dict:
    rng = np.random.default_rng(0)
    prompts = [rng.integers(97, 123, rng.integers(8, 16)).tolist() for _ in range(n_prompts)]
    target = 1 - 0.1 ** (1 / (new - 1))  # P(no stop in the first new - 1 tokens) = 10 %
    job = long_tail_job(target)
    kw = {"temperature": 1.0, "seed": 1}
    # calibrate the bias once on the real model (its other logits are not exactly uniform)
    gens, _ = job.generate_tokens(prompts[:128], new, **kw)
    stops = sum(g[-1] == 256 for g in gens)
    seen = stops / sum(len(g) for g in gens)
    adjust = np.log(target / (1 - target)) - np.log(seen / (1 - seen))
    params = jax.tree_util.tree_map(np.array, job.params)  # writable host copies
    params["embed"][256, 0] += adjust
    job = InferenceJob(job.config, params, ByteTokenizer(), per_device_batch_size=32)
    say(
        f"\n### Slot refill vs static batching: {n_prompts} prompts (8-15 bytes), up to {new} new tokens, sampled "
        f"(temperature 1), batch {job.per_device_batch_size}"
    )
    job.generate_tokens(prompts, new, **kw)  # compile both programs outside the timing
    job.generate_tokens(prompts, new, batching="static", **kw)
    refill_out: list = []
    static_out: list = []
    steps: dict[str, int] = {}

    def run(batching: str, out: list) -> None:
        job.reset_stats()
        out[:] = job.generate_tokens(prompts, new, batching=batching, **kw)[0]
        steps[batching] = job.stats.decode_steps

    t = best_interleaved(
        {"refill": lambda: run("refill", refill_out), "static": lambda: run("static", static_out)}, reps
    )
    lengths = np.array([len(g) for g in refill_out])
    tokens = int(lengths.sum())
    r = {k: tokens / t[k] for k in t}
    say(
        f"- workload: mean response {lengths.mean():.1f} tokens, median {np.median(lengths):.0f}, "
        f"{100 * np.mean(lengths == new):.1f} % reach {new} (end-of-text bias calibrated: per-step stop "
        f"probability {target:.3f})"
    )
    say(
        f"- static batching: {t['static']:.2f} s, {steps['static']} decode steps -> {r['static']:.0f} generated tok/s"
    )
    say(
        f"- slot refill: {t['refill']:.2f} s, {steps['refill']} decode steps -> {r['refill']:.0f} generated tok/s"
    )
    say(
        f"- **refill / static: {r['refill'] / r['static']:.2f}x** (target >= 2x); same outputs: "
        f"{refill_out == static_out}; (best of {reps} alternating runs; load average {load()} after)"
    )
    return {"ratio": r["refill"] / r["static"], "same": refill_out == static_out}


# ---------------------------------------------------------------------------------------------- where the time goes
def where_bench(peak: float, reps: int, B: int = 32, S: int = 128) -> None:
    """The parts of one GPT-2-small decode step at batch B over S cache slots, each compiled alone at its shapes
    and timed (best of ``5 * reps``), the way the engine computes it now and the way it did before issue 19:
    matmuls with the weight on the right (``x (B, in) @ w (in, out)``) or, now, on the left (``wt (out, in) @ x (in,
    B)``) through the CPU kernel over packed weights where the inference job packs them (XLA's otherwise), argmax
    as jax's (value, index) reduction or as two plain reductions, sampling by Gumbel draws
    (``jax.random.categorical``) or by inverse transform (``generate.sample_categorical``), attention over the cache
    as XLA's products after transposing the projections and writing the cache, or as the engine does now (the CPU
    kernel of :mod:`pytest_reward.jax.kernels` where it is available, which writes the cache itself)."""
    from pytest_reward.jax import model as model_mod

    cfg = ModelConfig.gpt2(vocab_size=50257, d_model=768, n_layers=12, n_heads=12, max_positions=1024)
    D, F, V, L, H, Dh = cfg.d_model, 4 * cfg.d_model, cfg.vocab_size, cfg.n_layers, cfg.n_heads, cfg.head_dim
    rng = np.random.default_rng(0)

    def arr(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape, np.float32) * 0.02)

    def t(fn: Callable, *a: jax.Array) -> float:
        f = jax.jit(fn)
        jax.block_until_ready(f(*a))
        return 1e3 * best(lambda: jax.block_until_ready(f(*a)), 5 * reps)

    def t_updating(fn: Callable, h: jax.Array, ck: jax.Array, cv: jax.Array) -> float:
        """Like ``t`` for ``fn(h, ck, cv) -> (out, ck, cv)``, the caches donated and fed back, as a decode loop
        carries them (an input not donated would be copied whole before it is written)."""
        f = jax.jit(fn, donate_argnums=(1, 2))
        cache = list(f(h, ck, cv)[1:])

        def once() -> None:
            out, *cache[:] = f(h, *cache)
            jax.block_until_ready(out)

        once()
        return 1e3 * best(once, 5 * reps)

    mm = lambda x, w: x @ w  # noqa: E731
    packed = model_mod.decode_packed(np.float32)

    def now(wt: jax.Array, x: jax.Array) -> float:
        """A matmul as the decode step does it now: wt (out, in) @ x (in, B), through the CPU kernel over packed
        panels where the job packs them (model.decode_packed), else XLA's."""
        if not packed:
            return t(mm, wt, x)
        p = {
            "panels": jnp.asarray(kernels.pack_rows(np.asarray(wt))),
            "b": jnp.zeros(wt.shape[0], jnp.float32),
        }
        return t(model_mod._linear_t, p, x)

    rows: list[tuple[str, int, float, float]] = []  # part, count per step, before ms, now ms
    for name, n_in, n_out in (
        ("qkv", D, 3 * D),
        ("attention out", D, D),
        ("MLP up", D, F),
        ("MLP down", F, D),
    ):
        w, x = arr(n_in, n_out), arr(B, n_in)
        rows.append((f"matmul {name} ({n_in}x{n_out})", L, t(mm, x, w), now(w.T.copy(), x.T.copy())))
    emb, h = arr(V, D), arr(B, D)
    rows.append((f"unembedding ({D}x{V})", 1, t(lambda h, e: h @ e.T, h, emb), now(emb, h.T.copy())))
    qkv, pos, slot = arr(3 * D, B), jnp.full((B,), S - 1, jnp.int32), jnp.int32(S - 1)
    allowed = jnp.ones((B, 1, 1, 1, S), bool)
    valid = jnp.ones((B, S), bool)

    def attend_before(h, ck, cv):  # transposes, XLA's cache write, XLA's attention
        q, k, v = model_mod._split_qkv_t(h, cfg)
        ck = jax.lax.dynamic_update_slice(ck, k, (0, 0, slot, 0))
        cv = jax.lax.dynamic_update_slice(cv, v, (0, 0, slot, 0))
        return model_mod._attend(q, ck, cv, allowed, cfg)[:, 0].T, ck, cv

    def attend_now(h, ck, cv):  # the CPU kernel where it is available
        return model_mod._attend_decode(h, pos, slot, ck, cv, valid, cfg)

    rows.append(
        (
            f"attention over the cache ({S} slots), cache write included",
            L,
            t_updating(attend_before, qkv, arr(B, H, S, Dh), arr(B, H, S, Dh)),
            t_updating(attend_now, qkv, arr(B, H, S, Dh), arr(B, H, S, Dh)),
        )
    )
    x_bd, x_db = arr(B, D), arr(D, B)
    norm_p = {"scale": jnp.ones((D,)), "bias": jnp.zeros((D,))}
    rows.append(
        (
            "layer norm",
            2 * L + 1,
            t(lambda x: model_mod._norm(norm_p, x, cfg), x_bd),
            t(lambda x: model_mod._norm(norm_p, x, cfg, axis=0), x_db),
        )
    )
    gelu = t(lambda h: jax.nn.gelu(h, approximate=True), arr(F, B))
    rows.append(("GELU", L, gelu, gelu))
    logits = arr(B, V)
    rows.append(
        (
            "greedy pick (argmax)",
            1,
            t(lambda x: jnp.argmax(x, axis=-1), logits),
            t(lambda x: gen.greedy_tokens(x, vocab_axis=0), logits.T.copy()),
        )
    )
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(0), i))(jnp.arange(B))
    rows.append(
        (
            "sampling (temperature 1)",
            1,
            t(lambda k, x: jax.vmap(jax.random.categorical)(k, x), keys, logits),
            t(gen.sample_categorical, keys, logits),
        )
    )
    say(
        f"\n### Where a GPT-2-small decode step's time goes (batch {B}, {S} cache slots; each part compiled alone, "
        f"best of {5 * reps})"
    )
    say("")
    say("| part | per step | before (ms per step) | now (ms per step) |")
    say("|---|---:|---:|---:|")
    tot_b = tot_n = 0.0
    for part, count, b, n in rows:
        if "sampling" not in part:
            tot_b, tot_n = tot_b + count * b, tot_n + count * n
        say(f"| {part} | x{count} | {count * b:.2f} | {count * n:.2f} |")
    flops = B * cfg.matmul_flops_per_token(S) / 1e9
    say(
        f"| **sum, greedy** | | **{tot_b:.1f}** | **{tot_n:.1f}** |\n\n"
        f"- matmul FLOPs per step {flops:.2f} G: at the sum of the parts that is {100 * flops / tot_b * 1e3 / peak:.0f} % "
        f"of peak before and {100 * flops / tot_n * 1e3 / peak:.0f} % now (the whole step adds the loop and the "
        f"stop check; load average {load()})"
    )


# ---------------------------------------------------------------------------------------------- forward
def forward_bench(job: InferenceJob, hf, peak: float, reps: int) -> dict:
    import torch

    B, T = 8, 256
    rng = np.random.default_rng(0)
    texts = ["".join(chr(c) for c in rng.integers(97, 123, T)) for _ in range(B)]  # 256 byte tokens
    say(f"\n### Forward / perplexity scoring, GPT-2-small shape: batch {B} x {T} tokens")
    job.reset_stats()
    t0 = time.perf_counter()
    job.token_nll(texts)
    first = time.perf_counter() - t0
    seqs = [job.with_start_token(ByteTokenizer().encode(t)) for t in texts]  # the tokens token_nll reads
    T = len(seqs[0]) - 1  # the tokens scored per text
    x = torch.tensor([s[:-1] for s in seqs])
    y = torch.tensor([s[1:] for s in seqs])

    def hf_forward():
        with torch.no_grad():
            logp = torch.log_softmax(hf(x).logits, -1)
            return -logp.gather(-1, y[..., None])[..., 0]

    ref = hf_forward().numpy()
    t = best_interleaved({"ours": lambda: job.token_nll(texts), "hf": hf_forward}, reps)
    steady, hf_s = t["ours"], t["hf"]
    ours = B * T / steady
    gfs = B * T * job.config.matmul_flops_per_token(T) / steady / 1e9
    say(
        f"- ours: first call {first:.2f} s (compile {job.stats.compile_seconds:.2f} s), steady {steady:.3f} s -> "
        f"**{ours:.0f} tok/s**, {gfs:.0f} GFLOP/s = **{100 * gfs / peak:.0f} % of matmul peak**"
    )
    diff = float(np.abs(np.stack(job.token_nll(texts)) - ref).max())
    say(
        f"- transformers forward + log_softmax: {hf_s:.3f} s -> {B * T / hf_s:.0f} tok/s; "
        f"**ratio {hf_s / steady:.2f}x**; max |nll diff| {diff:.1e}"
    )
    say(f"- (best of {reps} alternating runs of each; load average {load()} after)")
    return {"ours_tok_s": ours, "hf_tok_s": B * T / hf_s, "gfs": gfs}


def adder_end_to_end(reps: int) -> None:
    adder_dir = resolve_model("tiny-adder")
    job = InferenceJob.from_checkpoint(adder_dir, per_device_batch_size=256)
    problems = [json.loads(x) for x in (adder_dir / "heldout.jsonl").read_text().splitlines()]
    prompts = [p["prompt"] for p in problems]
    job.rollout(prompts, 6)
    job.rollout(prompts, 6, batching="static")
    t = best_interleaved(
        {
            "refill": lambda: job.rollout(prompts, 6),
            "static": lambda: job.rollout(prompts, 6, batching="static"),
        },
        reps,
    )
    out = job.rollout(prompts, 6)
    acc = np.mean([r.text == p["answer"] for r, p in zip(out, problems, strict=True)])
    same = [r.tokens for r in out] == [r.tokens for r in job.rollout(prompts, 6, batching="static")]
    say(
        f"\n### tiny-adder end to end: {len(prompts)} held-out problems, stop at end-of-text, batch 256: refill "
        f"{t['refill']:.3f} s -> {len(prompts) / t['refill']:.0f} problems/s, static {t['static']:.3f} s -> "
        f"{len(prompts) / t['static']:.0f} problems/s; same tokens {same}; greedy accuracy {acc:.3f} (load {load()})"
    )


def naive_bench(name: str, job: InferenceJob, prompts: list[list[int]], new: int, r: dict) -> None:
    """The naive baseline: greedy decoding without a cache, one full forward over the buffer per new token."""
    B = len(prompts)
    tokens, mask = job.pad(prompts, 0)
    args = (job.params, jnp.asarray(tokens), jnp.asarray(mask))
    t0 = time.perf_counter()
    exe = gen.rollout_no_cache_jit.lower(*args, cfg=job.config, new_tokens=new).compile()
    c = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = np.asarray(exe(*args))
    naive_s = time.perf_counter() - t0
    naive = B * new / naive_s
    cached = np.array(job.generate_tokens(prompts, new, ignore_eos=True)[0])
    say(
        f"- {name}, naive no-cache JAX loop: compile {c:.2f} s, run {naive_s:.2f} s -> {naive:.1f} new tok/s; "
        f"**ours is {r['tok_s'] / naive:.1f}x**; greedy agreement with the cached rollout "
        f"{float((cached == ref).mean()):.3f}"
    )


def write_results(path: Path, command: str) -> None:
    header = [
        SECTION,
        "",
        f"- date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}",
        f"- machine: {machine_line}",
        f"- software: jax {jax.__version__}, numpy {np.__version__}, torch {torch_version}, python "
        f"{platform.python_version()}",
        f"- command: `{command}`",
        "",
    ]
    write_section(path, SECTION, "\n".join(header + LINES))


def main() -> None:
    global machine_line, torch_version
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="skip the naive no-cache loop")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--against", metavar="REV", help="also time the decode step of git revision REV's engine")
    p.add_argument(
        "--only", choices=["fixed", "refill", "where", "forward", "adder"], help="run one part only"
    )
    p.add_argument("--results", type=Path, help="write our section of this RESULTS.md")
    p.add_argument(
        "--wait-quiet", type=float, default=0.0, metavar="MIN", help="wait up to MIN minutes for load < 1"
    )
    args = p.parse_args()
    if args.wait_quiet:
        wait_for_quiet(args.wait_quiet)
    import torch
    import transformers

    torch_version = torch.__version__
    machine_line = machine()
    say(f"Machine: {machine_line}; torch threads {torch.get_num_threads()}; jax devices {jax.devices()}")
    say(f"- CPU kernels (decode and prefill attention, greedy pick): {kernels.status().detail}")
    peak = matmul_peak(10)
    before = engine_at(args.against) if args.against else None
    if before is not None:
        say(f"- engine before: revision {args.against} (its model.py and generate.py)")
    results: dict[str, dict] = {}
    refill = None
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if args.only in (None, "fixed", "forward"):
            adder_dir = resolve_model("tiny-adder")
            problems = [json.loads(x) for x in (adder_dir / "heldout.jsonl").read_text().splitlines()][:32]
            d384_dir, hf_d384 = random_gpt2(
                tmp, "d384", n_layer=6, n_embd=384, n_head=6, vocab_size=257, n_positions=256
            )
            gpt2_dir, hf_gpt2 = random_gpt2(tmp, "gpt2")
            rng = np.random.default_rng(0)
            shapes = [
                (
                    "tiny-adder (shipped, 4 layers, d128)",
                    adder_dir,
                    transformers.AutoModelForCausalLM.from_pretrained(adder_dir).eval(),
                    [ByteTokenizer().encode(p["prompt"]) for p in problems],
                    48,
                ),
                (
                    "6-layer d384 (random, byte vocabulary)",
                    d384_dir,
                    hf_d384,
                    rng.integers(1, 256, (32, 64)).tolist(),
                    64,
                ),
                (
                    "GPT-2-small (124M, random)",
                    gpt2_dir,
                    hf_gpt2,
                    rng.integers(1, 50000, (32, 64)).tolist(),
                    64,
                ),
            ]
        if args.only in (None, "fixed"):
            for name, path, hf, prompts, new in shapes:
                job = InferenceJob.from_checkpoint(path, tokenizer=ByteTokenizer(), per_device_batch_size=32)
                for B in (8, 32):
                    results[f"{name}, batch {B}"] = rollout_bench(
                        name, job, hf, prompts[:B], new, args.reps, peak, before
                    )
        if args.only in (None, "refill"):
            refill = refill_bench(args.reps)
        if args.only in (None, "where"):
            where_bench(peak, args.reps)
        if args.only in (None, "forward"):
            job = InferenceJob.from_checkpoint(
                shapes[2][1], tokenizer=ByteTokenizer(), per_device_batch_size=32
            )
            fwd = forward_bench(job, shapes[2][2], peak, args.reps)
    if args.only in (None, "adder"):
        adder_end_to_end(args.reps)
    if not args.quick and args.only is None:
        say("\n### Naive no-cache baseline (measured last: it is slow)")
        adder = InferenceJob.from_checkpoint(resolve_model("tiny-adder"), per_device_batch_size=32)
        naive_bench("tiny-adder", adder, shapes[0][3], 48, results[f"{shapes[0][0]}, batch 32"])

    peak_end = matmul_peak(10)
    peak = max(peak, peak_end)
    say(
        f"- matmul peak used for the summary: {peak:.0f} GFLOP/s (the larger of the start and end measurements)"
    )
    say(
        "\n### Summary (targets: rollout >= 2x transformers at every shape; GPT-2-small decode >= 60 % of peak)"
    )
    for name, r in results.items():
        before_txt = (
            f"; before: {r['before_step_ms']:.2f} ms = {100 * r['before_step_gfs'] / peak:.0f} % of peak"
            if "before_step_ms" in r
            else ""
        )
        say(
            f"- {name}: {r['tok_s']:.0f} new tok/s = **{r['tok_s'] / r['hf_tok_s']:.2f}x transformers**; decode "
            f"step {r['step_ms']:.2f} ms = **{100 * r['step_gfs'] / peak:.0f} % of peak**{before_txt}"
        )
    if refill is not None:
        say(
            f"- slot refill on the long-tailed workload: **{refill['ratio']:.2f}x static batching**, same outputs {refill['same']}"
        )
    if args.only in (None, "forward"):
        say(
            f"- GPT-2-small forward: {fwd['ours_tok_s']:.0f} tok/s = {fwd['ours_tok_s'] / fwd['hf_tok_s']:.2f}x "
            f"transformers, {100 * fwd['gfs'] / peak:.0f} % of peak"
        )
    if args.results:
        write_results(args.results, "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]))
        print(f"wrote {args.results}")


machine_line = ""
torch_version = ""

if __name__ == "__main__":
    main()
