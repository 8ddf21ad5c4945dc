"""Jit-compiled programs of the inference engine: rollouts (prefill + cached decode), scoring, plain logits.

Each program is one module-level function; the shapes and the static arguments (model config, number of cache
slots for new tokens, sampling mode, stop ids) pick a compiled executable. :class:`~.inference.InferenceJob`
compiles them ahead of time per shape bucket and keeps the executables in a dict, so Python only loops over
batches.

Two rollout programs compute the same tokens. :func:`rollout` decodes a static batch until its longest row stopped;
:func:`rollout_refill` (continuous batching) keeps ``batch`` slots busy over a queue of prompts, a stopped row's
slot taking the next prompt, so a batch no longer waits for its longest row.

Sampling is reproducible per row: row ``r`` with ids ``(prompt_index, sample_index)`` draws token ``t`` with
``fold_in(fold_in(fold_in(PRNGKey(seed), prompt_index), sample_index), t)`` (one uniform number per token:
:func:`sample_categorical`). A prompt's samples therefore do not depend on the batch it lands in, on its neighbours
or on the number of devices.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from . import kernels, model
from .config import ModelConfig

Mode = Literal["greedy", "sample", "filtered"]


def sampling_mode(temperature: float, top_k: int, top_p: float) -> Mode:
    """``greedy`` at temperature 0; ``filtered`` if top-k or top-p cut the distribution; else ``sample``."""
    if temperature <= 0.0:
        return "greedy"
    return "filtered" if (top_k > 0 or top_p < 1.0) else "sample"


def _row_keys(seed: jax.Array, row_ids: jax.Array) -> jax.Array:
    """seed () uint32, row_ids (B, 2) int32 -> per-row PRNG keys (B, 2) uint32."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda p, s: jax.random.fold_in(jax.random.fold_in(base, p), s))(
        row_ids[:, 0], row_ids[:, 1]
    )


def argmax_first(x: jax.Array, axis: int = -1) -> jax.Array:
    """``jnp.argmax``: the first index of the maximum, a NaN counting as larger than any number (the first NaN
    wins). As plain reductions (a max, then a min over the indices that reach it): XLA's CPU backend runs them
    vectorised, while its (value, index) argmax reduction is scalar (7 ms against 1.3 ms for 32 x 50257 logits).
    XLA's vectorised max may drop a NaN, so NaNs are looked for on their own. int32."""
    n = x.shape[axis]
    axis %= x.ndim
    idx = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
    nan = jnp.isnan(x)
    top = jnp.max(jnp.where(nan, jnp.inf, x), axis=axis, keepdims=True)
    hit = jnp.where(jnp.any(nan, axis=axis, keepdims=True), nan, x == top)
    return jnp.min(jnp.where(hit, idx, n), axis=axis)  # every slice has a hit: never n


def greedy_tokens(logits: jax.Array, vocab_axis: int = -1) -> jax.Array:
    """:func:`argmax_first` over ``vocab_axis`` of 2-D float32 logits: (B, V), or (V, B) with ``vocab_axis=0``.
    For the (V, B) logits of a decode step on the CPU this is the one-pass kernel of :mod:`.kernels` where it is
    available (XLA takes three passes: ~1 ms per token for GPT-2's vocabulary at batch 32); elsewhere, and on
    every other platform of the same program, the XLA path."""
    if not (
        vocab_axis % logits.ndim == 0
        and logits.ndim == 2
        and logits.dtype == jnp.float32
        and kernels.available()
    ):
        return argmax_first(logits, axis=vocab_axis)
    return jax.lax.platform_dependent(
        logits, cpu=kernels.argmax_columns, default=lambda x: argmax_first(x, axis=0)
    )


def choose_tokens(
    logits: jax.Array,
    keys: jax.Array,
    step: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    mode: Mode,
    vocab_axis: int = -1,
) -> jax.Array:
    """Pick one token per row. logits (B, V) float32 (or (V, B) with ``vocab_axis=0``: the transposed logits of
    :func:`~.model.decode_step`), keys (B, 2), step () or (B,) int32 the index of the token in its row's generation
    -> (B,) int32.

    ``greedy``: argmax (over the logits as they are). Otherwise ``logits / temperature``, then (``filtered``) keep
    the ``top_k`` largest (``0`` = all) and the smallest set whose probability reaches ``top_p`` (inclusive
    nucleus: the token that crosses the threshold is kept), then sample (per-row sort and draw: on rows).
    """
    if mode == "greedy":
        return greedy_tokens(logits, vocab_axis)
    if vocab_axis % logits.ndim == 0:
        logits = logits.T
    x = logits / temperature
    if mode == "filtered":
        V = x.shape[-1]
        srt = -jnp.sort(-x, axis=-1)  # (B, V) descending
        k = jnp.where(top_k > 0, jnp.minimum(top_k, V), V)
        in_top_k = jnp.arange(V) < k
        probs = jax.nn.softmax(jnp.where(in_top_k, srt, -jnp.inf), axis=-1)
        keep = in_top_k & ((jnp.cumsum(probs, axis=-1) - probs) < top_p)  # (B, V), always keeps the first
        last = jnp.sum(keep, axis=-1, keepdims=True) - 1
        threshold = jnp.take_along_axis(srt, last, axis=-1)  # (B, 1)
        x = jnp.where(x >= threshold, x, -jnp.inf)
    step_keys = jax.vmap(jax.random.fold_in)(keys, jnp.broadcast_to(step, keys.shape[:1]))
    return sample_categorical(step_keys, x)


def sample_categorical(keys: jax.Array, logits: jax.Array, block: int = 256) -> jax.Array:
    """One draw per row from ``softmax(logits)``: keys (B, 2), logits (B, V) float32 (``-inf`` = excluded) ->
    (B,) int32.

    Inverse transform sampling with one uniform number per row: ``t = u * total`` with u in (0, 1] picks the token
    whose cumulative (unnormalised) probability first reaches ``t``, so token i is drawn with probability
    ``p_i / total`` and a token of probability 0 never is. The cumulative sum runs in two levels, over blocks of
    ``block`` ids and then inside the chosen block. ``jax.random.categorical`` draws V Gumbel numbers per row
    instead: for GPT-2's 50257 ids at batch 32 that is 19 ms per token on a 2-core CPU, against 1.2 ms here.
    """
    B, V = logits.shape
    nb = -(-V // block)
    u = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)  # (B,) in (0, 1]
    p = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))  # (B, V), the largest is 1
    p = jnp.pad(p, ((0, 0), (0, nb * block - V))).reshape(B, nb, block)
    ends = jnp.cumsum(jnp.sum(p, axis=-1), axis=-1)  # (B, nb): the cumulative mass at each block's end
    t = u * ends[:, -1]
    blk = jnp.minimum(jnp.sum(ends < t[:, None], axis=-1), nb - 1)  # the first block whose end reaches t
    start = jnp.where(blk > 0, jnp.take_along_axis(ends, jnp.maximum(blk - 1, 0)[:, None], axis=1)[:, 0], 0.0)
    inside = jnp.cumsum(jnp.take_along_axis(p, blk[:, None, None], axis=1)[:, 0], axis=-1)  # (B, block)
    # t - start in (0, the block's mass], whatever the rounding of the two sums: never a token of mass 0
    rest = jnp.clip(t - start, jnp.finfo(jnp.float32).tiny, inside[:, -1])
    return (blk * block + jnp.sum(inside < rest[:, None], axis=-1)).astype(jnp.int32)


def rollout(
    params: model.Params,
    dparams: model.Params,
    tokens: jax.Array,
    mask: jax.Array,
    row_ids: jax.Array,
    seed: jax.Array,
    max_new: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    *,
    cfg: ModelConfig,
    new_slots: int,
    mode: Mode,
    stop_ids: tuple[int, ...],
) -> tuple[jax.Array, jax.Array]:
    """Prefill a left-padded prompt batch, then decode with a KV cache until every row stopped.

    ``params`` (the prefill reads them) and ``dparams``, the same weights as :func:`~.model.decode_weights` lays
    them out for the decode step. tokens (B, P) int32 and mask (B, P) bool are the left-padded prompts; row_ids
    (B, 2) int32 are
    (prompt index, sample index) for the PRNG; seed () uint32; max_new () int32 <= new_slots; temperature ()
    float32; top_k () int32; top_p () float32. A row stops after emitting one of ``stop_ids`` (later slots hold
    that stop id) or after ``max_new`` tokens; the loop ends when all rows stopped.

    Returns the new tokens (B, new_slots) int32 (columns past the last step are undefined) and the number of
    tokens produced per row before the loop ended, () int32.
    """
    B, P = tokens.shape
    x, kvs = model.hidden_states(params, cfg, tokens, mask, last_only=True)  # x (B, 1, D)
    logits = model.unembed(params, cfg, x[:, -1])  # (B, V): left padding puts every prompt's end last
    cache = model.init_cache(kvs, new_slots)  # (B, KV, P + new_slots, Dh) per layer
    valid = jnp.concatenate([mask, jnp.ones((B, new_slots), bool)], axis=1)  # (B, S)
    slots = jnp.arange(P + new_slots)
    stops = jnp.asarray(stop_ids, jnp.int32)
    keys = _row_keys(seed, row_ids)

    first = choose_tokens(logits, keys, jnp.int32(0), temperature, top_k, top_p, mode)  # (B,)
    out = jnp.zeros((B, new_slots), jnp.int32).at[:, 0].set(first)
    done = jnp.isin(first, stops)
    pos = jnp.sum(mask, axis=-1).astype(jnp.int32)  # position of the first new token

    def cond(carry):
        i, _, _, _, _, done = carry
        return (i < max_new) & ~jnp.all(done)

    def body(carry):
        i, out, cache, tok, pos, done = carry  # i tokens exist; tok = out[:, i - 1] sits at slot P + i - 1
        slot = P + i - 1
        logits_t, cache = model.decode_step(dparams, cfg, cache, tok, pos, slot, valid & (slots <= slot))
        nxt = choose_tokens(logits_t, keys, i, temperature, top_k, top_p, mode, vocab_axis=0)
        nxt = jnp.where(done, tok, nxt)  # a stopped row repeats its stop token
        out = jax.lax.dynamic_update_slice(out, nxt[:, None], (0, i))
        return i + 1, out, cache, nxt, pos + 1, done | jnp.isin(nxt, stops)

    steps, out, *_ = jax.lax.while_loop(cond, body, (jnp.int32(1), out, cache, first, pos, done))
    return out, steps


class Slots(NamedTuple):
    """The decoding slots of a refill rollout (:func:`rollout_refill`): B rows in flight and the queue's outputs."""

    cache: model.KVCache  # per layer (B, KV, P + N, Dh) keys and values
    prompt_mask: jax.Array  # (B, P) bool: the prompt columns of the row in the slot
    row: jax.Array  # (B,) int32: the queue row in the slot
    made: jax.Array  # (B,) int32: tokens that row has produced
    tok: jax.Array  # (B,) int32: the last of them, at cache column P + made - 1
    pos: jax.Array  # (B,) int32: the position of tok
    keys: jax.Array  # (B, 2) uint32: the row's PRNG key
    active: jax.Array  # (B,) bool: the row is still decoding (False: the slot is free)
    out: jax.Array  # (Q, N) int32: the tokens of every queue row
    next: jax.Array  # () int32: the next queue row to prefill
    waiting: jax.Array  # () int32: the first prefilled row not yet in a slot (B: none waits)
    steps: jax.Array  # () int32: decode steps run


class Prefilled(NamedTuple):
    """Up to B prompts prefilled together, waiting for slots (loop-invariant while they are placed)."""

    kv: model.KVCache  # per layer (B, KV, P, Dh) the prompts' keys and values
    mask: jax.Array  # (B, P) bool
    row: jax.Array  # (B,) int32 queue rows
    first: jax.Array  # (B,) int32 first tokens
    keys: jax.Array  # (B, 2) uint32 PRNG keys
    n: jax.Array  # () int32 real rows


def rollout_refill(
    params: model.Params,
    dparams: model.Params,
    tokens: jax.Array,
    mask: jax.Array,
    row_ids: jax.Array,
    n_rows: jax.Array,
    seed: jax.Array,
    max_new: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    *,
    cfg: ModelConfig,
    batch: int,
    new_slots: int,
    mode: Mode,
    stop_ids: tuple[int, ...],
) -> tuple[jax.Array, jax.Array]:
    """Continuous batching: decode a queue of prompts through ``batch`` slots, a finished row's slot taking the next
    prompt, until the queue is empty and every row stopped.

    tokens (Q, P) int32 and mask (Q, P) bool are the queue's left-padded prompts, row_ids (Q, 2) int32 their
    (prompt index, sample index); the first n_rows (1,) int32 rows are real, in the order they are admitted. The
    other arguments are those of :func:`rollout`. The compiled step has one shape, whatever the mix of rows: each
    slot holds a cache of ``P + new_slots`` columns laid out as :func:`rollout` lays out a row (its prompt in
    ``[0, P)``, its token ``t`` in column ``P + t``) and its own step counter, so a row's tokens are computed as
    :func:`rollout` computes them, from its own prompt and PRNG key only, whichever rows share the batch.

    Prompts are prefilled ``batch`` at a time, as :func:`rollout` prefills a batch (one (batch, P) forward: the
    efficient shape); a free slot takes the next prefilled row by copying its prompt's keys and values (one row, no
    model call), so a slot is refilled as soon as it is free, one row at a time. The loops nest so that the
    prefilled rows are loop-invariant while they are placed (a loop carry would be copied at every placement):
    prefill B rows, then place and decode until they are all placed and a slot is free, and again. A row stops
    after a stop id or ``max_new`` tokens, as in :func:`rollout`.

    Returns out (Q, N) int32, row q's tokens in ``out[q, :made]`` (later columns are 0), and the number of decode
    steps run, (1,) int32.
    """
    Q, P = tokens.shape
    B, N = batch, new_slots
    n_rows = n_rows[0]
    stops = jnp.asarray(stop_ids, jnp.int32)
    dtype = params["embed"].dtype
    shape = (B, cfg.n_kv_heads, P + N, cfg.head_dim)
    zeros_b = jnp.zeros((B,), jnp.int32)
    s0 = Slots(
        cache=tuple((jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(cfg.n_layers)),
        prompt_mask=jnp.zeros((B, P), bool),
        row=zeros_b,
        made=zeros_b,
        tok=zeros_b,
        pos=zeros_b,
        keys=jnp.zeros((B, 2), jnp.uint32),
        active=jnp.zeros((B,), bool),
        out=jnp.zeros((Q, N), jnp.int32),
        next=jnp.int32(0),
        waiting=jnp.int32(B),
        steps=jnp.int32(0),
    )

    def prefill(s: Slots) -> tuple[Slots, Prefilled]:
        """Prefill the next (up to) B queue rows and pick their first tokens."""
        k = jnp.minimum(B, n_rows - s.next)
        q = jnp.minimum(s.next + jnp.arange(B), Q - 1)  # (B,) queue rows
        mk = mask[q] & (jnp.arange(B) < k)[:, None]  # (B, P)
        x, kvs = model.hidden_states(params, cfg, tokens[q], mk, last_only=True)  # x (B, 1, D)
        keys = _row_keys(seed, row_ids[q])
        logits = model.unembed(params, cfg, x[:, -1])  # (B, V)
        first = choose_tokens(logits, keys, jnp.int32(0), temperature, top_k, top_p, mode)
        kv = tuple((kn.astype(dtype), vn.astype(dtype)) for kn, vn in kvs)
        return s._replace(next=s.next + k, waiting=jnp.int32(0)), Prefilled(kv, mk, q, first, keys, k)

    def place(s: Slots, w: Prefilled) -> Slots:
        """The next waiting row into the first free slot."""
        j, slot = s.waiting, jnp.argmax(~s.active)
        first, q, mk = w.first[j], w.row[j], w.mask[j]
        cache = tuple(
            (
                jax.lax.dynamic_update_slice(ck, jax.lax.dynamic_slice_in_dim(wk, j, 1), (slot, 0, 0, 0)),
                jax.lax.dynamic_update_slice(cv, jax.lax.dynamic_slice_in_dim(wv, j, 1), (slot, 0, 0, 0)),
            )
            for (ck, cv), (wk, wv) in zip(s.cache, w.kv, strict=True)
        )
        return s._replace(
            cache=cache,
            prompt_mask=s.prompt_mask.at[slot].set(mk),
            row=s.row.at[slot].set(q),
            made=s.made.at[slot].set(1),
            tok=s.tok.at[slot].set(first),
            pos=s.pos.at[slot].set(jnp.sum(mk).astype(jnp.int32)),
            keys=s.keys.at[slot].set(w.keys[j]),
            # a row whose first token ends it leaves its slot free
            active=s.active.at[slot].set(~(jnp.isin(first, stops) | (max_new <= 1))),
            out=s.out.at[q, 0].set(first),
            waiting=jnp.where(j + 1 < w.n, j + 1, B),
        )

    def step(s: Slots) -> Slots:
        """One token for every slot; a row that stops frees its slot."""
        valid = jnp.concatenate([s.prompt_mask, jnp.arange(N)[None, :] < s.made[:, None]], axis=1)  # (B, S)
        logits_t, cache = model.decode_step(dparams, cfg, s.cache, s.tok, s.pos, P + s.made - 1, valid)
        nxt = choose_tokens(logits_t, s.keys, s.made, temperature, top_k, top_p, mode, vocab_axis=0)
        out = s.out.at[jnp.where(s.active, s.row, Q), jnp.minimum(s.made, N - 1)].set(nxt, mode="drop")
        made = s.made + s.active
        stopped = jnp.isin(nxt, stops) | (made >= max_new)
        return s._replace(
            cache=cache,
            made=made,
            tok=jnp.where(s.active, nxt, s.tok),
            pos=s.pos + s.active,
            active=s.active & ~stopped,
            out=out,
            steps=s.steps + 1,
        )

    def decode(s: Slots, w: Prefilled) -> Slots:
        """Place the prefilled rows as slots free up and decode, until they are all placed and a slot is free for
        the next prefill (or, with the queue empty, until every row stopped)."""

        def room(s: Slots) -> jax.Array:
            return (s.waiting < B) & jnp.any(~s.active)

        def place_all(s: Slots) -> Slots:
            return jax.lax.while_loop(room, lambda s: place(s, w), s)

        def more(s: Slots) -> jax.Array:
            want_prefill = (s.waiting >= B) & jnp.any(~s.active) & (s.next < n_rows)
            return jnp.any(s.active) & ~want_prefill

        return jax.lax.while_loop(more, lambda s: place_all(step(s)), place_all(s))

    def chunk(s: Slots) -> Slots:
        s, w = prefill(s)
        return decode(s, w)

    # A queue that fits the slots is one chunk, with no loop around it: inside one, XLA's CPU backend gave the
    # prefill slower fusions (its masked softmax and product, layout copies of the prompts' keys and values: ~40 ms
    # of 0.8 s for the 6-layer d384 model at batch 32).
    s = chunk(s0) if Q <= B else jax.lax.while_loop(lambda s: s.next < n_rows, chunk, s0)
    return s.out, s.steps[None]


def rollout_no_cache(
    params: model.Params, tokens: jax.Array, mask: jax.Array, *, cfg: ModelConfig, new_tokens: int
) -> jax.Array:
    """Reference greedy decoding without a cache: one full forward over the whole buffer per new token.

    tokens/mask (B, P) left-padded -> new tokens (B, new_tokens) int32. Used by tests (the cached path must
    agree token for token) and by the benchmark as the naive baseline.
    """
    B, P = tokens.shape
    buf = jnp.concatenate([tokens, jnp.zeros((B, new_tokens), jnp.int32)], axis=1)  # (B, P + N)
    full_mask = jnp.concatenate([mask, jnp.ones((B, new_tokens), bool)], axis=1)

    def body(i, buf):  # causal attention: the zeros after column P + i - 1 cannot influence it
        logits = model.forward(params, cfg, buf, full_mask)  # (B, P + N, V)
        nxt = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, P + i - 1, 1, keepdims=False), -1)
        return jax.lax.dynamic_update_slice(buf, nxt.astype(jnp.int32)[:, None], (0, P + i))

    return jax.lax.fori_loop(0, new_tokens, body, buf)[:, P:]


def score(
    params: model.Params,
    tokens: jax.Array,
    mask: jax.Array,
    targets: jax.Array,
    *,
    cfg: ModelConfig,
    vocab_chunk: int = 8192,
) -> tuple[jax.Array, jax.Array]:
    """Log-probability of ``targets`` under teacher forcing.

    tokens/mask (B, T) left-padded inputs; targets (B, T) int32, the token expected after each input position
    (negative = not scored). Returns logp (B, T) float32 (0 where not scored) and greedy (B, T) bool (target is
    the argmax). The (B, T, V) logits are never materialised: the vocabulary is unembedded ``vocab_chunk`` ids at
    a time with a running max and sum of exponentials (an online log-sum-exp), which is faster on CPU (each
    chunk stays in cache) and bounds memory for large vocabularies.
    """
    x, _ = model.hidden_states(params, cfg, tokens, mask)
    h = model.final_norm(params, cfg, x)  # (B, T, D)
    top = jnp.full(targets.shape, -jnp.inf, jnp.float32)  # running max logit
    total = jnp.zeros(targets.shape, jnp.float32)  # running sum of exp(logit - top)
    target_logit = jnp.zeros(targets.shape, jnp.float32)
    for start in range(0, cfg.vocab_size, vocab_chunk):
        size = min(vocab_chunk, cfg.vocab_size - start)
        lg = model.unembed_slice(params, cfg, h, start, size)  # (B, T, size)
        new_top = jnp.maximum(top, jnp.max(lg, axis=-1))
        total = total * jnp.exp(top - new_top) + jnp.sum(jnp.exp(lg - new_top[..., None]), axis=-1)
        top = new_top
        local = targets - start
        inside = (local >= 0) & (local < size)
        picked = jnp.take_along_axis(lg, jnp.clip(local, 0, size - 1)[..., None], axis=-1)[..., 0]
        target_logit = jnp.where(inside, picked, target_logit)
    scored = targets >= 0
    logp = target_logit - (top + jnp.log(total))
    return jnp.where(scored, logp, 0.0), (target_logit >= top) & scored


def predict(
    params: model.Params, tokens: jax.Array, mask: jax.Array, *, cfg: ModelConfig, vocab_chunk: int = 8192
) -> jax.Array:
    """The argmax next token at every position, (B, T) int32, without materialising the (B, T, V) logits: the
    vocabulary is unembedded ``vocab_chunk`` ids at a time, keeping a running max and its index (the lowest
    index among equal maxima, as ``argmax`` over the whole row)."""
    x, _ = model.hidden_states(params, cfg, tokens, mask)
    h = model.final_norm(params, cfg, x)
    top = jnp.full(tokens.shape, -jnp.inf, jnp.float32)
    best = jnp.zeros(tokens.shape, jnp.int32)
    for start in range(0, cfg.vocab_size, vocab_chunk):
        size = min(vocab_chunk, cfg.vocab_size - start)
        lg = model.unembed_slice(params, cfg, h, start, size)  # (B, T, size)
        chunk_top = jnp.max(lg, axis=-1)
        better = chunk_top > top  # strictly: an equal maximum in a later chunk has a higher index
        best = jnp.where(better, jnp.argmax(lg, axis=-1).astype(jnp.int32) + start, best)
        top = jnp.where(better, chunk_top, top)
    return best


def logits(params: model.Params, tokens: jax.Array, mask: jax.Array, *, cfg: ModelConfig) -> jax.Array:
    """tokens/mask (B, T) -> logits (B, T, V) float32."""
    return model.forward(params, cfg, tokens, mask)


@functools.cache
def refill_program(mesh: Mesh) -> Any:
    """:func:`rollout_refill` jitted for ``mesh``: every device of its ``"batch"`` axis runs its own slots over its
    share of the queue (the queue's rows and ``n_rows`` are sharded on axis 0, parameters and scalars replicated),
    so devices never wait for each other. Static arguments as :func:`rollout_refill`'s, ``batch`` per device."""
    rows, same = PartitionSpec("batch"), PartitionSpec()

    def rollout_refill_sharded(params, dparams, tokens, mask, row_ids, n_rows, *scalars, **static):  # type: ignore[no-untyped-def]
        local = functools.partial(rollout_refill, **static)
        specs = (same, same, rows, rows, rows, rows, *[same] * len(scalars))
        run = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=(rows, rows), check_vma=False)
        return run(params, dparams, tokens, mask, row_ids, n_rows, *scalars)

    return jax.jit(rollout_refill_sharded, static_argnames=("cfg", "batch", "new_slots", "mode", "stop_ids"))


rollout_jit = jax.jit(rollout, static_argnames=("cfg", "new_slots", "mode", "stop_ids"))
rollout_no_cache_jit = jax.jit(rollout_no_cache, static_argnames=("cfg", "new_tokens"))
score_jit = jax.jit(score, static_argnames=("cfg", "vocab_chunk"))
logits_jit = jax.jit(logits, static_argnames=("cfg",))
predict_jit = jax.jit(predict, static_argnames=("cfg", "vocab_chunk"))
