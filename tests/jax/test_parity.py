"""Our models against transformers on the same weights: logits, greedy generation, loglikelihoods."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pytest_reward.jax import ByteTokenizer, InferenceJob, load_checkpoint  # noqa: E402

from .conftest import VOCAB, random_prompts  # noqa: E402

NAMES = ["gpt2", "llama", "qwen2"]


@pytest.fixture(scope="module")
def jobs(hf_checkpoints):
    return {
        name: InferenceJob.from_checkpoint(path, tokenizer=ByteTokenizer())
        for name, (path, _) in hf_checkpoints.items()
    }


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_config_is_translated(hf_checkpoints, name):
    path, _ = hf_checkpoints[name]
    cfg, _ = load_checkpoint(path)
    assert cfg.vocab_size == VOCAB
    assert cfg.n_layers == 2
    assert cfg.model_type == name
    if name == "llama":
        assert (cfg.n_heads, cfg.n_kv_heads, cfg.rope_theta, cfg.tie_embeddings) == (4, 2, 5000.0, False)
    if name == "qwen2":
        assert (cfg.n_kv_heads, cfg.qkv_bias, cfg.tie_embeddings, cfg.rope_theta) == (1, True, True, 1e6)


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_transformers(hf_checkpoints, jobs, name):
    _, hf = hf_checkpoints[name]
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, (3, 40))
    with torch.no_grad():
        ref = hf(torch.tensor(tokens)).logits.numpy()
    ours = np.stack(jobs[name].logits(tokens.tolist()))
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_left_padded_logits_match_transformers_per_row(hf_checkpoints, jobs, name):
    """A short row padded into a batch gives transformers' logits of that row alone."""
    _, hf = hf_checkpoints[name]
    rng = np.random.default_rng(1)
    rows = [rng.integers(1, VOCAB, n).tolist() for n in (5, 33, 17)]
    ours = jobs[name].logits(rows)
    for row, got in zip(rows, ours, strict=True):
        with torch.no_grad():
            ref = hf(torch.tensor([row])).logits.numpy()[0]
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_greedy_rollout_matches_generate(hf_checkpoints, jobs, name):
    _, hf = hf_checkpoints[name]
    job = jobs[name]
    prompts = random_prompts(5, 3, 20, seed=2)
    new = 24
    gens, fed = job.generate_tokens(ByteTokenizer().encode_batch(prompts), new)
    for ids, got in zip(fed, gens, strict=True):
        x = torch.tensor([ids])
        with torch.no_grad():
            out = hf.generate(
                x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=new,
                do_sample=False,
                eos_token_id=256,
                pad_token_id=256,
            )[0, len(ids) :].tolist()
        if 256 in out:
            out = out[: out.index(256) + 1]
        assert got == out
    assert any(len(g) > 3 for g in gens)


@pytest.mark.parametrize("name", NAMES)
def test_loglikelihood_matches_transformers(hf_checkpoints, jobs, name):
    _, hf = hf_checkpoints[name]
    job = jobs[name]
    requests = [("the cat sat on", " the mat"), ("", "hello"), ("abc ", "def"), ("x" * 30, "yz")]
    results = job.loglikelihood(requests)
    tok = ByteTokenizer()
    for (ctx, cont), res in zip(requests, results, strict=True):
        ctx_ids = tok.encode(ctx.rstrip()) or [256]
        cont_ids = tok.encode(ctx[len(ctx.rstrip()) :] + cont)
        whole = ctx_ids + cont_ids
        with torch.no_grad():
            logp = torch.log_softmax(hf(torch.tensor([whole[:-1]])).logits[0], -1).numpy()
        positions = range(len(ctx_ids) - 1, len(whole) - 1)
        expected = sum(float(logp[p, whole[p + 1]]) for p in positions)
        greedy = all(int(logp[p].argmax()) == whole[p + 1] for p in positions)
        assert res.num_tokens == len(cont_ids)
        assert res.logprob == pytest.approx(expected, abs=1e-4)
        assert res.is_greedy == greedy


@pytest.mark.parametrize("start", [None, 256], ids=["bare", "start-token"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_token_nll_matches_transformers(hf_checkpoints, name, start):
    path, hf = hf_checkpoints[name]
    job = InferenceJob.from_checkpoint(path, tokenizer=ByteTokenizer(), start_token=start)
    text = "pack my box with five dozen liquor jugs"
    seq = ([] if start is None else [start]) + ByteTokenizer().encode(text)
    with torch.no_grad():
        logp = torch.log_softmax(hf(torch.tensor([seq[:-1]])).logits[0], -1).numpy()
    expected = -logp[np.arange(len(seq) - 1), seq[1:]]
    [got] = job.token_nll([text])
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert job.perplexity([text]) == pytest.approx(float(np.exp(expected.mean())), rel=1e-4)


@pytest.mark.parametrize("name", ["gpt2", "llama"])  # tied and untied unembedding
def test_chunked_scoring_equals_full_log_softmax(jobs, name):
    import jax

    from pytest_reward.jax import generate

    job = jobs[name]
    rng = np.random.default_rng(5)
    tokens = rng.integers(1, VOCAB, (2, 16)).astype(np.int32)
    mask = np.ones_like(tokens, bool)
    mask[1, :5] = False  # a left-padded row
    targets = rng.integers(0, VOCAB, (2, 16)).astype(np.int32)
    targets[0, :3] = -1
    targets[1, 4] = VOCAB - 1  # the last id, in the last (partial) chunk
    full = jax.nn.log_softmax(np.asarray(generate.logits_jit(job.params, tokens, mask, cfg=job.config)), -1)
    expected = np.where(
        targets >= 0, np.take_along_axis(np.asarray(full), np.maximum(targets, 0)[..., None], -1)[..., 0], 0
    )
    greedy_expected = (np.asarray(full).argmax(-1) == targets) & (targets >= 0)
    for chunk in (7, 128, 10**6):
        logp, greedy = generate.score_jit(
            job.params, tokens, mask, targets, cfg=job.config, vocab_chunk=chunk
        )
        np.testing.assert_allclose(np.asarray(logp), expected, atol=1e-5)
        assert (np.asarray(greedy) == greedy_expected).all()
