"""The members of the job that theseus-style evaluation classes read and call (the theseus duck type)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_reward.jax import ByteTokenizer, InferenceJob


def test_pad_left_pads_with_a_mask():
    x, m = InferenceJob.pad([[1, 2, 3], [4]], pad_token=0)
    assert x.dtype == np.int32 and m.dtype == np.bool_
    assert x.tolist() == [[1, 2, 3], [0, 0, 4]]
    assert m.tolist() == [[True, True, True], [False, False, True]]
    x, m = InferenceJob.pad([[5], []], pad_token=9, pad_to=3)
    assert x.tolist() == [[9, 9, 5], [9, 9, 9]] and m.tolist() == [
        [False, False, True],
        [False, False, False],
    ]
    with pytest.raises(ValueError, match="more than pad_to=2"):
        InferenceJob.pad([[1, 2, 3]], pad_to=2)


def test_members(random_gpt):
    job = random_gpt
    assert job.block_size == 128
    assert job.mesh.axis_names == ("batch", "shard")
    assert job.replicas == job.local_replicas == len(jax.devices())
    assert job.per_device_batch_size == 8
    assert job.state.params is job.params
    assert jax.tree_util.tree_structure(job.state_sharding.params) == jax.tree_util.tree_structure(job.params)
    assert job.key.shape == (2,)
    assert job.length == -1
    job.log({"anything": 1.0})  # a no-op hook


def test_forward_is_traceable_and_matches_logits(random_gpt):
    """The evaluation classes jit their own step around ``forward(state, params, (x, None, mask))``."""
    job = random_gpt
    seqs = ByteTokenizer().encode_batch(["hello world", "hi"])
    x, mask = job.pad(seqs, pad_token=0, pad_to=16)

    @jax.jit
    def step(params, x, mask):
        logits, loss, meta = job.forward(job.state, params, (x, None, mask), None, deterministic=True)
        assert loss is None and meta == {}
        return jnp.argmax(logits[:, :-1], -1)

    pred = np.asarray(step(job.state.params, x, mask))
    expected = [lg.argmax(-1) for lg in job.logits(seqs)]
    for row, exp, s in zip(pred, expected, seqs, strict=True):
        assert row[16 - len(s) : 15].tolist() == exp[:-1].tolist()


def test_forward_loss_with_targets(random_gpt):
    job = random_gpt
    seq = ByteTokenizer().encode("abcdef")
    x, mask = job.pad([seq[:-1]], pad_to=8)
    y, _ = job.pad([seq[1:]], pad_token=-1, pad_to=8)
    _, loss, _ = job.forward(job.state, job.params, (x, y, mask))
    [ll] = job.loglikelihood([("a", "bcdef")])  # the same inputs and targets
    assert float(loss) == pytest.approx(-ll.logprob / 5, rel=1e-4)


def test_rollout_raw_layout(random_gpt):
    job = random_gpt
    prompts = ByteTokenizer().encode_batch(["hello", "a" * 120])
    raw = job.rollout_raw(prompts, 16)
    P = 128 - 16
    assert raw.shape == (2, 128) and raw.dtype == np.int32
    assert raw[0, P - 5 : P].tolist() == prompts[0]
    assert (raw[0, : P - 5] == job.tokenizer.pad_token).all()
    assert raw[1, :P].tolist() == prompts[1][-P:]  # too long: the head is dropped
    gens, _ = job.generate_tokens([prompts[0]], 16)
    assert raw[0, P : P + len(gens[0])].tolist() == gens[0]
    with pytest.raises(ValueError, match="must fit block_size=128"):
        job.rollout_raw(prompts, 16, max_prompt_length=120)
