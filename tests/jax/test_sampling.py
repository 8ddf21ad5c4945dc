"""The sampler (``generate.sample_categorical``): inverse transform sampling over two levels of cumulative sums.

It must draw token i with probability p_i (checked with Pearson's chi-square goodness-of-fit test on fixed keys, so
the verdict is deterministic, and shown to reject a wrong distribution), never draw a token of probability 0 (``-inf`` logits, whatever the block
boundaries and the rounding of the sums), and depend on the row's key only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from pytest_reward.jax import generate as gen_mod

sample = jax.jit(gen_mod.sample_categorical, static_argnames="block")


def _keys(n: int, seed: int = 0) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(jnp.arange(n))


def _chi_square_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's chi-square goodness-of-fit p-value over the ids of nonzero probability (scipy, a dependency of
    jax)."""
    keep = probs > 0
    return float(chisquare(counts[keep], counts.sum() * probs[keep]).pvalue)


@pytest.mark.parametrize("V, block", [(10, 4), (300, 256), (1000, 64)])
def test_draws_follow_the_distribution_across_block_boundaries(V, block):
    rng = np.random.default_rng(V)
    weights = rng.uniform(0.2, 1.0, V)  # every kept id expects >= 5 draws, as the test requires
    weights[rng.choice(V, V // 5, replace=False)] = 0.0  # some ids excluded, some at block edges
    weights[[0, V - 1]] = [0.0, 3.0]
    probs = weights / weights.sum()
    n = 40_000
    logits = jnp.asarray(np.where(probs > 0, np.log(np.maximum(probs, 1e-300)), -np.inf), jnp.float32)
    draws = np.asarray(sample(_keys(n), jnp.broadcast_to(logits, (n, V)), block=block))
    assert set(draws.tolist()) <= set(np.flatnonzero(probs).tolist())  # never an excluded id
    assert (n * probs[probs > 0]).min() >= 5
    assert _chi_square_p_value(np.bincount(draws, minlength=V), probs) > 1e-3


def test_a_wrong_distribution_is_rejected_by_the_same_check():
    """The check has power: draws from p compared with a slightly different q fail it."""
    V, n = 300, 40_000
    p = np.linspace(1.0, 2.0, V)
    p /= p.sum()
    q = np.full(V, 1.0 / V)
    draws = np.asarray(sample(_keys(n), jnp.broadcast_to(jnp.asarray(np.log(p), jnp.float32), (n, V))))
    assert _chi_square_p_value(np.bincount(draws, minlength=V), q) < 1e-6


@settings(max_examples=40, deadline=None)
@given(
    V=st.integers(1, 700),
    block=st.sampled_from([1, 3, 64, 256]),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([0.1, 3.0, 60.0]),
)
def test_an_excluded_id_is_never_drawn(V, block, seed, scale):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(V) * scale
    excluded = rng.random(V) < 0.6
    excluded[rng.integers(V)] = False  # at least one id stays
    logits = jnp.asarray(np.where(excluded, -np.inf, logits), jnp.float32)
    draws = np.asarray(sample(_keys(256, seed), jnp.broadcast_to(logits, (256, V)), block=block))
    assert ((draws >= 0) & (draws < V)).all()
    assert not excluded[draws].any()


def test_a_one_hot_distribution_gives_its_id_and_each_row_uses_its_own_key():
    V = 1000
    logits = np.full((3, V), -np.inf, np.float32)
    logits[0, 999], logits[1, 0], logits[2, 511] = 0.0, 5.0, -7.0
    assert np.asarray(sample(_keys(3), jnp.asarray(logits))).tolist() == [999, 0, 511]
    flat = jnp.zeros((64, V), jnp.float32)
    alone = np.asarray(sample(_keys(64)[5:6], flat[5:6]))
    together = np.asarray(sample(_keys(64), flat))
    assert together[5] == alone[0]
    assert len(set(together.tolist())) > 40  # uniform over 1000 ids: 64 rows rarely collide
