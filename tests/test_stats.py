"""Intervals tested against closed-form and known cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.judge.stats import (
    bootstrap_mean_ci,
    normal_mean_ci,
    paired_bootstrap_delta,
    quantile,
    wilson_interval,
    z_value,
)


def test_z_value():
    assert z_value(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert z_value(0.90) == pytest.approx(1.644854, abs=1e-6)
    with pytest.raises(ValueError):
        z_value(1.0)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3.
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        (29, 29, 0.8830, 1.0),
    ],
)
def test_wilson_known_values(k, n, low, high):
    ci = wilson_interval(k, n, 0.95)
    assert ci.low == pytest.approx(low, abs=5e-5)
    assert ci.high == pytest.approx(high, abs=5e-5)
    assert ci.estimate == k / n and ci.method == "Wilson score"


def test_wilson_rejects_nonsense():
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


def test_bootstrap_is_seeded_and_degenerate_for_constant_data():
    data = np.random.default_rng(1).random(200)
    a = bootstrap_mean_ci(data, seed=3)
    assert a == bootstrap_mean_ci(data, seed=3)
    assert a != bootstrap_mean_ci(data, seed=4)
    assert "seed=3" in a.method
    c = bootstrap_mean_ci([0.5] * 10)
    assert (c.low, c.high) == (0.5, 0.5)


def test_bootstrap_matches_the_normal_interval_on_large_samples():
    data = np.random.default_rng(7).normal(0.6, 0.1, 5000)
    boot = bootstrap_mean_ci(data, 0.95, n_resamples=4000, seed=0)
    norm = normal_mean_ci(data, 0.95)
    half = (norm.high - norm.low) / 2
    assert boot.low == pytest.approx(norm.low, abs=0.1 * half)
    assert boot.high == pytest.approx(norm.high, abs=0.1 * half)


def test_bootstrap_switches_to_the_normal_approximation_and_says_so():
    data = np.random.default_rng(0).random(50)
    ci = bootstrap_mean_ci(data, exact_limit=10)
    assert ci.method.startswith("normal approximation")
    assert (ci.low, ci.high) == pytest.approx((normal_mean_ci(data).low, normal_mean_ci(data).high))


def test_bootstrap_coverage_is_close_to_nominal():
    # 300 seeded repetitions of n=60 draws from Beta(2, 5) (mean 2/7): coverage should be near 95 %.
    rng = np.random.default_rng(2024)
    true_mean = 2 / 7
    hits = sum(
        bootstrap_mean_ci(rng.beta(2, 5, 60), 0.95, n_resamples=1000, seed=i).contains(true_mean)
        for i in range(300)
    )
    assert 0.90 <= hits / 300 <= 0.985


def test_paired_delta_sees_a_small_shift_an_unpaired_view_would_miss():
    rng = np.random.default_rng(0)
    base = rng.beta(2, 2, 200)
    cur = base - 0.02 + rng.normal(0, 0.03, 200)
    ci = paired_bootstrap_delta(cur, base, seed=0)
    assert ci.high < 0 and ci.low > -0.04 and ci.method.startswith("paired")
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap_delta([1, 2], [1])


def test_quantile_type7():
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([0, 10], 0.1) == pytest.approx(1.0)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.integers(0, 2**32 - 1))
def test_bootstrap_interval_brackets_the_mean(values, seed):
    ci = bootstrap_mean_ci(values, n_resamples=200, seed=seed)
    mean = float(np.mean(values))
    assert ci.low <= mean + 1e-6 * max(1.0, abs(mean)) and ci.high >= mean - 1e-6 * max(1.0, abs(mean))
    assert min(values) - 1e-9 <= ci.low <= ci.high <= max(values) + 1e-9
    assert all(isinstance(x, float) and math.isfinite(x) for x in (ci.low, ci.high, ci.estimate))


@given(
    st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
    st.sampled_from([0.8, 0.9, 0.95, 0.99]),
)
def test_wilson_interval_contains_the_estimate(kn, conf):
    k, n = kn
    ci = wilson_interval(k, n, conf)
    assert 0 <= ci.low <= k / n <= ci.high <= 1
