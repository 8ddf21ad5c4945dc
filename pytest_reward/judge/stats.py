"""Intervals and paired comparisons, numpy only.

Every interval says what it is:

* ``bootstrap_mean_ci``: percentile bootstrap of the mean, ``n_resamples`` resamples drawn with a seeded
  ``numpy.random.Generator`` (PCG64), so the same data and seed give the same interval on every machine. Above
  ``exact_limit`` samples it switches to the normal approximation (the bootstrap distribution of a mean of that
  many values is normal to well within the resampling noise) and says so in ``Interval.method``.
* ``wilson_interval``: Wilson score interval of a binomial proportion (no continuity correction).
* ``paired_bootstrap_delta``: percentile bootstrap of the mean of per-sample differences (current − baseline),
  resampling sample indices, seeded.
* ``group_bootstrap_delta``: percentile bootstrap of mean(current group) − mean(baseline group) when only some
  samples pair: paired samples are resampled as pairs, new and removed samples each on their own side; seeded.

All functions return plain Python floats (xdist cannot serialise numpy scalars).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "Interval",
    "bootstrap_mean_ci",
    "bootstrap_mean_cis",
    "group_bootstrap_delta",
    "normal_mean_ci",
    "paired_bootstrap_delta",
    "quantile",
    "wilson_interval",
    "z_value",
]

#: Above this many values the mean's bootstrap is replaced by the normal approximation.
BOOTSTRAP_EXACT_LIMIT = 10_000


@dataclass(frozen=True)
class Interval:
    """A two-sided interval for an estimate, with the method that produced it."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "method": self.method,
        }

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def z_value(confidence: float) -> float:
    """Two-sided standard normal quantile for ``confidence`` (1.959964 for 0.95)."""
    _check_confidence(confidence)
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _as_array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("expected a one-dimensional sequence of numbers")
    return arr


def normal_mean_ci(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Interval:
    """Normal-approximation interval of the mean: mean ± z·s/√n (s = sample standard deviation)."""
    arr = _as_array(values)
    n = arr.size
    if n == 0:
        raise ValueError("no values")
    mean = float(arr.mean())
    if n == 1:
        return Interval(mean, mean, mean, confidence, "normal")
    half = z_value(confidence) * float(arr.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, confidence, "normal")


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    exact_limit: int = BOOTSTRAP_EXACT_LIMIT,
) -> Interval:
    """Percentile-bootstrap interval of the mean (seeded); normal approximation above ``exact_limit`` values."""
    return bootstrap_mean_cis(
        values, (confidence,), n_resamples=n_resamples, seed=seed, exact_limit=exact_limit
    )[0]


def bootstrap_mean_cis(
    values: Sequence[float] | np.ndarray,
    confidences: Sequence[float],
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    exact_limit: int = BOOTSTRAP_EXACT_LIMIT,
) -> list[Interval]:
    """``bootstrap_mean_ci`` at several confidence levels from one set of resamples (same seed, same draws)."""
    for confidence in confidences:
        _check_confidence(confidence)
    arr = _as_array(values)
    n = arr.size
    if n == 0:
        raise ValueError("no values")
    mean = float(arr.mean())
    method = f"bootstrap (B={n_resamples}, seed={seed})"
    if n == 1 or float(arr.max()) == float(arr.min()):
        return [Interval(mean, mean, mean, c, method) for c in confidences]
    if n > exact_limit:
        out = []
        for c in confidences:
            ci = normal_mean_ci(arr, c)
            out.append(Interval(mean, ci.low, ci.high, c, f"normal approximation (n={n} > {exact_limit})"))
        return out
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=np.float64)
    # Resample in blocks so memory stays bounded (block x n indices at a time).
    block = max(1, min(n_resamples, 4_000_000 // n))
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = arr[idx].mean(axis=1)
    out = []
    for c in confidences:
        alpha = (1.0 - c) / 2.0
        low, high = np.quantile(means, [alpha, 1.0 - alpha])
        out.append(Interval(mean, float(low), float(high), c, method))
    return out


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for ``successes`` out of ``n`` trials."""
    if n <= 0:
        raise ValueError("n must be positive")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    z = z_value(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the edges (no rounding residue)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high, confidence, "Wilson score")


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q`` quantile with linear interpolation (numpy's default, type 7)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q!r}")
    arr = _as_array(values)
    if arr.size == 0:
        raise ValueError("no values")
    return float(np.quantile(arr, q))


def paired_bootstrap_delta(
    current: Sequence[float] | np.ndarray,
    baseline: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    exact_limit: int = BOOTSTRAP_EXACT_LIMIT,
) -> Interval:
    """Interval of mean(current − baseline) over paired samples: percentile bootstrap over sample indices."""
    cur = _as_array(current)
    base = _as_array(baseline)
    if cur.shape != base.shape:
        raise ValueError(f"paired arrays differ in length: {cur.size} vs {base.size}")
    ci = bootstrap_mean_ci(
        cur - base, confidence, n_resamples=n_resamples, seed=seed, exact_limit=exact_limit
    )
    return Interval(ci.estimate, ci.low, ci.high, confidence, "paired " + ci.method)


def group_bootstrap_delta(
    after_paired: Sequence[float] | np.ndarray,
    before_paired: Sequence[float] | np.ndarray,
    new: Sequence[float] | np.ndarray,
    removed: Sequence[float] | np.ndarray,
    confidences: Sequence[float] = (0.95,),
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    exact_limit: int = BOOTSTRAP_EXACT_LIMIT,
) -> list[Interval]:
    """Intervals of mean(after) − mean(before) for two groups that share some samples: after = ``after_paired`` +
    ``new``, before = ``before_paired`` + ``removed`` (``after_paired[i]`` and ``before_paired[i]`` are one sample).

    Percentile bootstrap, seeded: each resample draws the paired samples as pairs (one index for both sides) and
    the new and the removed samples each on their own side, so the pairing's correlation is kept. Without new or
    removed samples this is ``paired_bootstrap_delta`` (same draws, same interval). Above ``exact_limit`` samples
    in all, the normal approximation with the same variance decomposition (paired terms with their covariance,
    the unpaired ones independent)."""
    for confidence in confidences:
        _check_confidence(confidence)
    ap, bp, nw, rm = (_as_array(a) for a in (after_paired, before_paired, new, removed))
    if ap.shape != bp.shape:
        raise ValueError(f"paired arrays differ in length: {ap.size} vs {bp.size}")
    if not nw.size and not rm.size:
        if not ap.size:
            raise ValueError("no values")
        ci = bootstrap_mean_cis(
            ap - bp, confidences, n_resamples=n_resamples, seed=seed, exact_limit=exact_limit
        )
        return [Interval(c.estimate, c.low, c.high, c.confidence, "paired " + c.method) for c in ci]
    n_p = ap.size
    m_after, m_before = n_p + nw.size, n_p + rm.size
    if not m_after or not m_before:
        raise ValueError("both groups need at least one value")
    estimate = float((ap.sum() + nw.sum()) / m_after - (bp.sum() + rm.sum()) / m_before)
    total = n_p + nw.size + rm.size
    method = f"bootstrap over paired, new and removed samples (B={n_resamples}, seed={seed})"
    if total > exact_limit:
        # Var of Σ_paired (a/m_a − b/m_b) + Σ_new x/m_a − Σ_removed y/m_b, terms independent across samples.
        var = 0.0
        if n_p > 1:
            var += n_p * float(np.var(ap / m_after - bp / m_before, ddof=1))
        if nw.size > 1:
            var += nw.size * float(np.var(nw, ddof=1)) / m_after**2
        if rm.size > 1:
            var += rm.size * float(np.var(rm, ddof=1)) / m_before**2
        half = math.sqrt(var)
        return [
            Interval(
                estimate,
                estimate - z_value(c) * half,
                estimate + z_value(c) * half,
                c,
                f"normal approximation over paired, new and removed samples (n={total} > {exact_limit})",
            )
            for c in confidences
        ]
    rng = np.random.default_rng(seed)
    stats = np.empty(n_resamples, dtype=np.float64)
    block = max(1, min(n_resamples, 4_000_000 // total))
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        size = stop - start
        after_sum = np.zeros(size)
        before_sum = np.zeros(size)
        if n_p:
            idx = rng.integers(0, n_p, size=(size, n_p))
            after_sum += ap[idx].sum(axis=1)
            before_sum += bp[idx].sum(axis=1)
        if nw.size:
            after_sum += nw[rng.integers(0, nw.size, size=(size, nw.size))].sum(axis=1)
        if rm.size:
            before_sum += rm[rng.integers(0, rm.size, size=(size, rm.size))].sum(axis=1)
        stats[start:stop] = after_sum / m_after - before_sum / m_before
    out = []
    for c in confidences:
        alpha = (1.0 - c) / 2.0
        low, high = np.quantile(stats, [alpha, 1.0 - alpha])
        out.append(Interval(estimate, float(low), float(high), c, method))
    return out
