"""Rollout behaviour: cache correctness, padding invariance, compile counts, seeding, stopping, truncation."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from pytest_reward.jax import ByteTokenizer, InferenceJob, ModelConfig, backend_compile_count, init_params
from pytest_reward.jax import generate as gen_mod

from .conftest import random_prompts


def _fresh_random_gpt(max_positions: int = 128, **kw) -> InferenceJob:
    cfg = ModelConfig.gpt2(vocab_size=257, d_model=64, n_layers=2, n_heads=4, max_positions=max_positions)
    return InferenceJob(cfg, init_params(cfg, seed=1, std=0.2), **kw)


def test_kv_cache_rollout_equals_no_cache_recomputation(random_gpt):
    job = random_gpt
    prompts = random_prompts(6, 1, 30, seed=3)
    ids = ByteTokenizer().encode_batch(prompts)
    new = 20
    gens, _ = job.generate_tokens(ids, new)
    tokens, mask = job.pad(ids, job.tokenizer.pad_token, 32)
    reference = np.asarray(
        gen_mod.rollout_no_cache_jit(job.params, tokens, mask, cfg=job.config, new_tokens=new)
    )
    stop = set(job.stop_token_ids)
    compared = 0
    for got, ref in zip(gens, reference.tolist(), strict=True):
        cut = next((k + 1 for k, t in enumerate(ref) if t in stop), new)
        assert got == ref[:cut]
        compared += cut
    assert compared >= 40  # the comparison covered real decoding, not just immediate stops


def test_kv_cache_equals_no_cache_for_llama(hf_checkpoints):
    job = InferenceJob.from_checkpoint(hf_checkpoints["llama"][0], tokenizer=ByteTokenizer())
    ids = ByteTokenizer().encode_batch(random_prompts(4, 2, 25, seed=4))
    gens, _ = job.generate_tokens(ids, 16)
    tokens, mask = job.pad(ids, 0, 32)
    ref = np.asarray(
        gen_mod.rollout_no_cache_jit(job.params, tokens, mask, cfg=job.config, new_tokens=16)
    ).tolist()
    for got, r in zip(gens, ref, strict=True):
        assert got == r[: len(got)]
        if len(got) < 16:
            assert got[-1] in job.stop_token_ids


@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_prompt_rollout_is_the_same_alone_and_in_a_padded_batch(random_gpt, temperature):
    target = "hello there"
    others = random_prompts(5, 1, 60, seed=5)  # a 60-character neighbour forces a bigger length bucket
    batch = [target, *others]
    alone = random_gpt.rollout([target], 24, temperature=temperature, seed=11)
    mixed = random_gpt.rollout(batch, 24, temperature=temperature, seed=11)
    assert mixed[0].tokens == alone[0].tokens
    assert mixed[0].text == alone[0].text


def test_compile_count_is_constant_as_prompts_grow():
    counts = []
    for k, n_prompts in enumerate((8, 64, 256)):
        # A distinct context length per job gives a distinct program, so jax's in-process cache cannot hide
        # a compile and the backend counter sees every one.
        job = _fresh_random_gpt(max_positions=128 + k, per_device_batch_size=32)
        prompts = random_prompts(n_prompts, 3, 40, seed=n_prompts)  # same length range every time
        before = backend_compile_count()
        out = job.rollout(prompts, max_new_tokens=8)
        job.rollout(prompts[::-1], max_new_tokens=8)  # a second call reuses the executable
        counts.append((job.stats.compiles, backend_compile_count() - before))
        assert len(out) == n_prompts
        assert job.stats.rollout_calls == 2
        assert job.stats.rollout_rows == 2 * n_prompts
    assert counts[0] == counts[1] == counts[2] == (1, 1)


@pytest.mark.parametrize("batching", ["refill", "static"])
def test_one_job_compiles_one_executable_per_batch_bucket(batching):
    job = _fresh_random_gpt(max_positions=125, per_device_batch_size=32)
    for n_prompts in (8, 64, 256, 100):
        job.rollout(random_prompts(n_prompts, 3, 40, seed=n_prompts), max_new_tokens=8, batching=batching)
    assert job.stats.compiles == 2  # 8 rows -> a batch of 8; more rows -> batches of 32
    if batching == "static":
        assert sorted(key[1][0][0] for key in job.stats.compile_keys) == [(8, 64), (32, 64)]
    else:  # slots per device; a queue of more rows than slots holds 64 batches of rows whatever their number,
        # one that fits the slots is one batch (a program without the loop over prefills)
        assert sorted(dict(key[2])["batch"] for key in job.stats.compile_keys) == [8, 32]
        assert sorted(key[1][0][0] for key in job.stats.compile_keys) == [(8, 64), (32 * 64, 64)]
        job.rollout(random_prompts(32, 3, 40, seed=32), max_new_tokens=8, batching=batching)
        assert job.stats.compiles == 3  # 32 rows fill the 32 slots: the one-batch program of that bucket
        job.rollout(random_prompts(20, 3, 40, seed=20), max_new_tokens=8, batching=batching)
        assert job.stats.compiles == 3


def test_compile_count_grows_with_new_shape_buckets():
    """The counter is not stuck: a new length bucket or sampling mode is a new executable."""
    job = _fresh_random_gpt(per_device_batch_size=8)
    job.rollout(["ab"], 4)
    job.rollout(["cd"], 4)
    assert job.stats.compiles == 1
    job.rollout(["x" * 40], 4)  # prompt bucket 16 -> 64
    job.rollout(["ab"], 4, temperature=1.0)  # greedy -> sample
    assert job.stats.compiles == 3
    assert {k[0] for k in job.stats.compile_keys} == {"rollout_refill"}
    job.rollout(["ab"], 4, batching="static")  # the other program
    assert job.stats.compiles == 4


def test_same_seed_same_text_and_different_seed_different_text(random_gpt):
    prompts = random_prompts(8, 2, 12, seed=6)
    a = random_gpt.rollout(prompts, 16, temperature=2.0, seed=123)
    b = random_gpt.rollout(prompts, 16, temperature=2.0, seed=123)
    c = random_gpt.rollout(prompts, 16, temperature=2.0, seed=124)
    assert [r.text for r in a] == [r.text for r in b]
    assert [r.text for r in a] != [r.text for r in c]


def test_samples_do_not_depend_on_batching_or_neighbours():
    prompts = random_prompts(10, 2, 12, seed=7)
    small = _fresh_random_gpt(per_device_batch_size=2)  # 5 batches of 2 rows... (10 * 3 samples = 30 rows)
    large = _fresh_random_gpt(per_device_batch_size=32)
    kw = {"temperature": 1.5, "seed": 99, "n": 3}
    r_small = small.rollout(prompts, 12, **kw)
    r_large = large.rollout(prompts, 12, **kw)
    assert [r.tokens for r in r_small] == [r.tokens for r in r_large]
    changed = list(prompts)
    changed[3:] = random_prompts(7, 2, 12, seed=8)  # new neighbours after prompt 2
    r_changed = large.rollout(changed, 12, **kw)
    assert [r.tokens for r in r_changed[:9]] == [r.tokens for r in r_large[:9]]


def test_n_samples_are_consecutive_per_prompt(random_gpt):
    prompts = ["abc", "xyz"]
    out = random_gpt.rollout(prompts, 10, temperature=2.0, seed=1, n=4)
    assert [(r.prompt_index, r.sample_index) for r in out] == [(i, j) for i in range(2) for j in range(4)]
    assert [r.prompt for r in out] == ["abc"] * 4 + ["xyz"] * 4
    assert len({r.tokens for r in out[:4]}) > 1  # sampled: not all identical
    greedy = random_gpt.rollout(prompts, 10, n=3)
    assert greedy[0].tokens == greedy[1].tokens == greedy[2].tokens


def test_top_k_one_and_tiny_top_p_are_greedy(random_gpt):
    prompts = random_prompts(4, 2, 10, seed=9)
    greedy = [r.tokens for r in random_gpt.rollout(prompts, 12)]
    assert [r.tokens for r in random_gpt.rollout(prompts, 12, temperature=1.0, top_k=1, seed=3)] == greedy
    assert [r.tokens for r in random_gpt.rollout(prompts, 12, temperature=1.0, top_p=1e-6, seed=3)] == greedy


def test_sampling_follows_the_model_distribution(random_gpt):
    prompt = "qu"
    ids = ByteTokenizer().encode(prompt)
    logits = random_gpt.logits([ids])[0][-1]
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    n = 400

    def first_tokens(count: int, **kw) -> list[int]:
        gens, _ = random_gpt.generate_tokens([ids], 1, temperature=1.0, seed=5, n=count, **kw)
        return [g[0] for g in gens]

    first = first_tokens(n)
    top = int(np.argmax(probs))
    freq = first.count(top) / n
    sigma = np.sqrt(probs[top] * (1 - probs[top]) / n)
    assert abs(freq - probs[top]) < 5 * sigma + 1e-3
    assert len(set(first)) > 2
    order = np.argsort(-probs)
    assert set(first_tokens(200, top_k=2)) <= set(order[:2].tolist())
    nucleus_size = int(np.searchsorted(np.cumsum(probs[order]), 0.5) + 1)  # inclusive nucleus
    assert set(first_tokens(200, top_p=0.5)) <= set(order[:nucleus_size].tolist())


def test_stop_strings_cut_the_text(random_gpt):
    prompts = random_prompts(3, 4, 10, seed=10)
    free = random_gpt.rollout(prompts, 30)
    for prompt, r in zip(prompts, free, strict=True):
        if len(r.text) < 6:
            continue
        stop = r.text[3:5]
        [cut] = random_gpt.rollout([prompt], 30, stop=[stop, "\x00never"])
        assert cut.finish_reason == "stop"
        assert cut.text == r.text[: r.text.find(stop)]
        assert stop in ByteTokenizer().decode(cut.tokens)
        assert r.tokens[: len(cut.tokens)] == cut.tokens
        break
    else:  # pragma: no cover - the random model always produces some text
        pytest.fail("no rollout long enough to test stop strings")


def test_eot_ends_a_rollout(adder):
    [r] = adder.rollout(["12+345="], 8)
    assert r.text == "357"
    assert r.finish_reason == "eot"
    assert r.tokens == tuple(b"357")
    [r] = adder.rollout(["12+345="], 2)
    assert (r.text, r.finish_reason) == ("35", "length")


def test_too_long_prompt_is_a_clear_error_or_truncated_left(random_gpt):
    long = "a" * 100 + "tail"
    with pytest.raises(ValueError, match=r"prompt 0 has 104 tokens.*block_size is 128.*truncate='left'"):
        random_gpt.rollout([long], 40)
    [r] = random_gpt.rollout([long], 40, truncate="left")
    assert len(r.prompt_tokens) == 128 - 40
    assert bytes(r.prompt_tokens).endswith(b"tail")
    with pytest.raises(ValueError, match="max_new_tokens"):
        random_gpt.rollout(["a"], 128)


def test_chat_prompts_are_rendered(random_gpt):
    [r] = random_gpt.rollout([[{"role": "user", "content": "hi"}]], 2)
    assert r.prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_counters(random_gpt):
    random_gpt.reset_stats()
    out = random_gpt.rollout(["ab", "cd"], 5, n=2, temperature=1.0, seed=0)
    s = random_gpt.stats
    assert (s.rollout_calls, s.rollout_rows) == (1, 4)
    assert s.tokens_generated == sum(len(r.tokens) + (r.finish_reason == "eot") for r in out)
    assert 1 <= s.decode_steps <= 5


def test_bfloat16_job_tracks_float32(random_gpt):
    job16 = InferenceJob(random_gpt.config, random_gpt.params, dtype="bfloat16", per_device_batch_size=8)
    assert job16.params["embed"].dtype == np.dtype("bfloat16")
    seq = ByteTokenizer().encode("bfloat16 keeps the shape of the distribution")
    lg32, lg16 = random_gpt.logits([seq])[0], job16.logits([seq])[0]
    assert lg16.dtype == np.float32
    assert np.abs(lg16 - lg32).max() < 0.1 * np.abs(lg32).max()
    assert (lg16.argmax(-1) == lg32.argmax(-1)).mean() > 0.8
    [r] = job16.rollout(["abc"], 8)
    assert len(r.tokens) + (r.finish_reason == "eot") >= 1


def test_top_k_and_inclusive_top_p_keep_the_right_support():
    import jax.numpy as jnp

    logits = jnp.log(jnp.asarray([[0.5, 0.3, 0.15, 0.05]] * 256, jnp.float32))  # 256 rows, one distribution
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(256))

    def support(top_k: int, top_p: float) -> set[int]:
        mode = gen_mod.sampling_mode(1.0, top_k, top_p)
        picked = gen_mod.choose_tokens(
            logits, keys, jnp.int32(0), 1.0, jnp.int32(top_k), jnp.float32(top_p), mode
        )
        return set(np.asarray(picked).tolist())

    assert support(0, 1.0) == {0, 1, 2, 3}
    assert support(2, 1.0) == {0, 1}
    assert support(0, 0.7) == {0, 1}  # inclusive nucleus: 0.5 < 0.7, so the token crossing 0.7 stays
    assert support(0, 0.85) == {0, 1, 2}
    assert support(3, 0.5) == {0}
    assert support(1, 1.0) == {0}


@pytest.mark.parametrize("temperature", [0.0, 1.2])
def test_a_single_token_stop_string_ends_decoding_with_the_same_text(random_gpt, temperature):
    prompts = random_prompts(6, 2, 12, seed=21)
    free = random_gpt.rollout(prompts, 40, temperature=temperature, seed=4, ignore_eos=False)
    # the most frequent generated ASCII character: a stop string the byte tokenizer spells with one token
    counts: dict[str, int] = {}
    for r in free:
        for ch in r.text:
            if ch.isascii():
                counts[ch] = counts.get(ch, 0) + 1
    stop = max(counts, key=counts.__getitem__)
    assert random_gpt.single_token_stops([stop, "two chars", "<|endoftext|>"]) == tuple(
        sorted({ord(stop), random_gpt.tokenizer.eot_token})
    )
    before = random_gpt.stats.decode_steps
    stopped = random_gpt.rollout(prompts, 40, temperature=temperature, seed=4, stop=stop)
    steps_with_stop = random_gpt.stats.decode_steps - before
    before = random_gpt.stats.decode_steps
    random_gpt.rollout(prompts, 40, temperature=temperature, seed=4)
    steps_without = random_gpt.stats.decode_steps - before
    for a, b in zip(stopped, free, strict=True):
        assert a.text == b.text.split(stop)[0]
        assert a.finish_reason == ("stop" if stop in b.text else b.finish_reason)
        assert a.tokens == b.tokens[: len(a.tokens)]
    if all(stop in b.text[:-1] for b in free):  # every row stops before its last token: less decoding
        assert steps_with_stop < steps_without
    assert steps_with_stop <= steps_without


def test_predictions_are_the_argmax_of_the_logits(random_gpt, hf_checkpoints):
    llama = InferenceJob.from_checkpoint(hf_checkpoints["llama"][0], tokenizer=ByteTokenizer())
    for job in (random_gpt, llama):
        seqs = ByteTokenizer().encode_batch(random_prompts(5, 1, 40, seed=31))
        expected = [lg.argmax(-1) for lg in job.logits(seqs)]
        got = job.predictions(seqs)
        assert [g.tolist() for g in got] == [e.tolist() for e in expected]
        # several vocabulary chunks (the running max must keep the first index of the maximum)
        tokens, mask = job.pad(seqs, job.tokenizer.pad_token, 48)
        chunked = np.asarray(gen_mod.predict_jit(job.params, tokens, mask, cfg=job.config, vocab_chunk=50))
        for row, seq, e in zip(chunked, seqs, expected, strict=True):
            assert row[48 - len(seq) :].tolist() == e.tolist()


def test_chunked_argmax_keeps_the_first_of_equal_maxima():
    cfg = ModelConfig.gpt2(vocab_size=257, d_model=16, n_layers=1, n_heads=2, max_positions=16)
    params = init_params(cfg, seed=0, std=0.0)  # all-zero weights: every logit equal
    tokens = np.zeros((1, 4), np.int32)
    mask = np.ones((1, 4), bool)
    got = np.asarray(gen_mod.predict_jit(params, tokens, mask, cfg=cfg, vocab_chunk=64))
    assert got.tolist() == [[0, 0, 0, 0]]  # as argmax over the whole row


def test_predictions_of_a_sequence_longer_than_the_context_is_a_clear_error(random_gpt):
    assert random_gpt.predictions([]) == []
    with pytest.raises(ValueError, match=f"longer than block_size={random_gpt.block_size}"):
        random_gpt.predictions([[1] * (random_gpt.block_size + 1)])
