"""Slot refill (continuous batching): the same tokens as static batching, in input order, whatever the batch.

Exact expectations come from a *chain* model (``conftest.bigram_job``: logits are a table of the previous token):
greedy, token ``k`` is followed by ``k - 1`` down to the stop token 0, so a prompt ending in ``k`` generates
``[k - 1, ..., 1, 0]``, ``k`` tokens, and a prompt ending in 1 stops at its first token. Cache reuse (a slot's
cache holding the previous row's keys and values) is checked on real transformers (GPT-2 and grouped-query
Llama with RoPE) and on the shipped tiny-adder against the static path.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from pytest_reward.jax import ByteTokenizer, InferenceJob, ModelConfig, init_params

from .conftest import bigram_job, random_prompts

V = 300  # byte ids and <|endoftext|> (256) are in the vocabulary
STOP = 0


def _chain_table(p_stop: float = 0.0) -> np.ndarray:
    """Token k -> k - 1 (greedy); with ``p_stop`` > 0, k -> 0 with that probability (geometric lengths)."""
    t = np.full((V, V), -30.0, np.float32)
    for k in range(1, V):
        t[k, k - 1] = np.log(1 - p_stop) if p_stop else 10.0
        if p_stop:
            t[k, STOP] = np.log(p_stop)
    t[STOP, STOP] = 10.0
    return t


def chain_job(per_device_batch_size: int, p_stop: float = 0.0) -> InferenceJob:
    return bigram_job(_chain_table(p_stop), max_positions=128, per_device_batch_size=per_device_batch_size)


def _gpt(per_device_batch_size: int) -> InferenceJob:
    cfg = ModelConfig.gpt2(vocab_size=257, d_model=64, n_layers=2, n_heads=4, max_positions=128)
    return InferenceJob(cfg, init_params(cfg, seed=1, std=0.2), per_device_batch_size=per_device_batch_size)


def _frequent_stops(job: InferenceJob, ids: list[list[int]], new: int, k: int = 2) -> list[int]:
    """The ``k`` tokens the model emits most often: stop ids that end rows after varied numbers of tokens."""
    free, _ = job.generate_tokens(ids, new, ignore_eos=True, batching="static")
    return [t for t, _ in Counter(t for g in free for t in g).most_common(k)]


# ---------------------------------------------------------------------------------------------- exact outputs
def test_results_come_back_in_input_order():
    job = chain_job(per_device_batch_size=4)
    ends = [30, 2, 17, 1, 25, 5, 40, 3, 9, 1, 33, 12, 6, 21, 2, 38, 7, 14, 1, 26, 11, 4, 35, 8]
    prompts = [[50, 60, k] for k in ends]  # long and short rows interleaved: they finish out of order
    gens, fed = job.generate_tokens(prompts, 45, stop_token_ids=[STOP])
    assert fed == prompts
    assert gens == [list(range(k - 1, -1, -1)) for k in ends]
    assert job.stats.compiles == 1  # one executable for all 24 rows through 4 slots


def test_a_prompt_that_ends_at_once():
    job = chain_job(per_device_batch_size=4)
    ends = [1, 20, 1, 1, 7, 1, 1, 1, 15, 1]  # a row ending with 1 emits the stop token first
    gens, _ = job.generate_tokens([[9, k] for k in ends], 30, stop_token_ids=[STOP])
    assert gens == [list(range(k - 1, -1, -1)) for k in ends]
    # every row ends at once: max_new_tokens=1
    gens, _ = job.generate_tokens([[9, k] for k in ends], 1, stop_token_ids=[STOP])
    assert gens == [[k - 1] for k in ends]
    # a text rollout: the empty text with the reason
    out = job.rollout(["\x01", "\x05"], 10, stop=["\x00"])
    assert [(r.text, r.finish_reason, r.tokens) for r in out] == [
        ("", "stop", (0,)),
        ("\x04\x03\x02\x01", "stop", (4, 3, 2, 1, 0)),
    ]


def test_rows_stop_at_max_new_tokens_and_slots_are_reused():
    job = chain_job(per_device_batch_size=2)
    ends = [50, 3, 50, 3, 50, 3, 50, 3]
    gens, _ = job.generate_tokens([[k] for k in ends], 10, stop_token_ids=[STOP])
    assert gens == [list(range(k - 1, k - 11, -1)) if k > 10 else list(range(k - 1, -1, -1)) for k in ends]
    job.reset_stats()
    job.generate_tokens([[k] for k in ends], 10, stop_token_ids=[STOP])
    refill_steps = job.stats.decode_steps
    job.reset_stats()
    job.generate_tokens([[k] for k in ends], 10, stop_token_ids=[STOP], batching="static")
    assert refill_steps < job.stats.decode_steps  # 4 batches of (10, 3) rows wait for their long row


def _steps_of_immediate_refill(lengths: list[int], slots: int, max_new: int) -> int:
    """Decode steps when a free slot takes the next row at once: a row of L tokens has its first from the prefill
    and L - 1 from decode steps; every step advances every row in a slot."""
    queue, left, steps = list(lengths), [], 0
    while queue or left:
        while len(left) < slots and queue:
            n = min(queue.pop(0), max_new) - 1
            if n > 0:
                left.append(n)
        steps += 1
        left = [n - 1 for n in left if n > 1]
    return steps


@pytest.mark.parametrize("slots", [1, 3, 8])
def test_a_free_slot_takes_the_next_row_at_the_next_step(slots):
    """Refill is immediate and one row at a time: the decode steps are exactly those of the ideal schedule, not
    those of waiting for several free slots (a regression: refills went by groups of slots // 8)."""
    job = chain_job(per_device_batch_size=slots)
    rng = np.random.default_rng(slots)
    ends = rng.integers(2, 40, 61).tolist()
    gens, _ = job.generate_tokens([[k] for k in ends], 30, stop_token_ids=[STOP])
    assert gens == [list(range(k - 1, max(k - 31, -1), -1)) for k in ends]
    job.reset_stats()
    job.generate_tokens([[k] for k in ends], 30, stop_token_ids=[STOP])
    assert job.stats.decode_steps == _steps_of_immediate_refill(ends, slots, 30)


def test_more_rows_than_one_window_take_several_calls_in_order():
    job = chain_job(per_device_batch_size=2)  # 2 slots: a call takes at most 128 rows
    rng = np.random.default_rng(0)
    ends = rng.integers(1, 12, 300).tolist()
    gens, _ = job.generate_tokens([[k] for k in ends], 12, stop_token_ids=[STOP])
    assert gens == [list(range(k - 1, -1, -1)) for k in ends]
    assert job.stats.compiles == 1
    static, _ = job.generate_tokens([[k] for k in ends], 12, stop_token_ids=[STOP], batching="static")
    assert static == gens


# ---------------------------------------------------------------------------------------------- greedy = static
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_greedy_refill_gives_the_tokens_of_static_batching(hf_checkpoints, model):
    if model == "gpt2":
        job = _gpt(per_device_batch_size=4)
    else:
        job = InferenceJob.from_checkpoint(
            hf_checkpoints["llama"][0], tokenizer=ByteTokenizer(), per_device_batch_size=4
        )
    ids = ByteTokenizer().encode_batch(random_prompts(40, 1, 40, seed=12))
    stops = _frequent_stops(job, ids, 24)
    refill, fed = job.generate_tokens(ids, 24, stop_token_ids=stops)
    static, fed_static = job.generate_tokens(ids, 24, stop_token_ids=stops, batching="static")
    assert fed == fed_static
    assert refill == static
    lengths = Counter(map(len, refill))
    assert len(lengths) >= 4 and lengths[24] < len(refill)  # rows of varied lengths: slots were refilled


def test_greedy_refill_on_the_shipped_model(adder_dir):
    job = InferenceJob.from_checkpoint(adder_dir, per_device_batch_size=8)
    problems = [json.loads(x) for x in (adder_dir / "heldout.jsonl").read_text().splitlines()][:120]
    prompts = [p["prompt"] for p in problems]
    refill = job.rollout(prompts, 8)
    static = job.rollout(prompts, 8, batching="static")
    assert [r.tokens for r in refill] == [r.tokens for r in static]
    assert [r.finish_reason for r in refill] == [r.finish_reason for r in static]
    assert np.mean([r.text == p["answer"] for r, p in zip(refill, problems, strict=True)]) > 0.85


# ---------------------------------------------------------------------------------------------- sampling
@pytest.mark.parametrize("kind", ["chain", "gpt2"])
def test_sampled_rows_depend_on_their_prompt_position_and_sample_index_only(kind):
    if kind == "chain":
        jobs = [chain_job(b, p_stop=0.25) for b in (2, 8, 32, 64)]  # 64: all 60 rows in one batch
        prompts = [[40 + i % 7] for i in range(20)]
        others = [[20 + i % 5] for i in range(20)]
    else:
        jobs = [_gpt(b) for b in (2, 8, 32, 64)]
        prompts = ByteTokenizer().encode_batch(random_prompts(20, 1, 30, seed=13))
        others = ByteTokenizer().encode_batch(random_prompts(20, 1, 30, seed=14))
    stops = [STOP] if kind == "chain" else _frequent_stops(jobs[1], prompts, 20)
    kw = {"temperature": 1.3, "seed": 21, "n": 3, "stop_token_ids": stops}
    base, _ = jobs[0].generate_tokens(prompts, 20, **kw)
    assert len(Counter(map(len, base))) >= 3  # varied lengths: slots were refilled at different steps
    for job in jobs[1:]:  # the number of slots does not matter, nor whether the queue fits them (one chunk)
        assert job.generate_tokens(prompts, 20, **kw)[0] == base
    assert jobs[1].generate_tokens(prompts, 20, **kw)[0] == base  # reproducible
    assert jobs[1].generate_tokens(prompts, 20, batching="static", **kw)[0] == base  # = static batching
    # other prompts around rows 0, 5, 10 and 15: those rows keep their samples
    mixed = [p if i % 5 == 0 else others[i] for i, p in enumerate(prompts)]
    got, _ = jobs[1].generate_tokens(mixed, 20, **kw)
    for i in range(0, 20, 5):
        assert got[3 * i : 3 * i + 3] == base[3 * i : 3 * i + 3]
    assert got != base
    # the seed matters, and the n samples of a prompt differ
    assert jobs[1].generate_tokens(prompts, 20, **{**kw, "seed": 22})[0] != base
    assert any(len({tuple(g) for g in base[3 * i : 3 * i + 3]}) > 1 for i in range(20))


def test_n_samples_per_prompt_are_consecutive_and_match_static():
    job = chain_job(per_device_batch_size=4, p_stop=0.3)
    out = job.rollout(["\x30", "\x20", "\x28"], 25, temperature=1.0, seed=5, n=4, stop=["\x00"])
    assert [(r.prompt_index, r.sample_index) for r in out] == [(i, j) for i in range(3) for j in range(4)]
    static = job.rollout(
        ["\x30", "\x20", "\x28"], 25, temperature=1.0, seed=5, n=4, stop=["\x00"], batching="static"
    )
    assert [r.tokens for r in out] == [r.tokens for r in static]
    for r in out:  # every sample follows the chain down from its prompt's last byte until it stops
        start = ord(r.prompt[-1])
        assert list(r.tokens[:-1]) == list(range(start - 1, start - len(r.tokens), -1))
    assert len({r.tokens for r in out[:4]}) > 1


# ---------------------------------------------------------------------------------------------- every path refills
def test_rollout_raw_and_rollout_evaluation_use_refill():
    from pytest_reward.evaluation import RolloutEvaluation

    job = _gpt(per_device_batch_size=4)
    prompts = random_prompts(10, 2, 20, seed=15)
    ids = ByteTokenizer().encode_batch(prompts)
    raw = job.rollout_raw(ids, 12)
    assert {k[0] for k in job.stats.compile_keys} == {"rollout_refill"}
    static = job.rollout_raw(ids, 12, batching="static")
    assert (raw == static).all()

    class Echo(RolloutEvaluation):
        name = "echo"

        def __len__(self):
            return len(prompts)

        def get(self, i):
            return prompts[i], ""

        def max_new_tokens(self, inference):
            return 12

        def clean(self, y_hat):
            return y_hat

        def check(self, y, y_hat):
            return True

    job = _gpt(per_device_batch_size=4)  # a fresh job: its compiled programs say which path ran
    samples = Echo().evaluate_samples(job, job.tokenizer)
    assert {k[0] for k in job.stats.compile_keys} == {"rollout_refill"}
    expected = job.rollout(prompts, 12, batching="static", truncate="left")
    assert [s.output for s in samples] == [r.text for r in expected]
