"""Gating quality of --reward-compare-fail, by seeded simulation (issue 8).

Each trial builds a baseline run and a current run of N samples, compares them with the same code the plugin uses
(``pytest_reward.baseline.compare_runs`` + ``evaluate_rules``), and records whether the session would fail.

Noise model: a sample's true quality q_i ~ Beta(2, 2); a run scores it q_i + e, e ~ N(0, sd) independently per run
(a stochastic reward / judge). "Identical reruns" use the same q_i; a "drop" subtracts delta from every q_i.
Reported: the false-alarm rate on identical reruns and the detection rate of a drop, for the point rule and for
--reward-compare-strict, with the tolerance used; and that a run where every sample errored fails every rule.

    python bench/bench_gating.py [--trials 1000] [--n 1000] [--sd 0.1] [--seed 0]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from pytest_reward.baseline import compare_runs, evaluate_rules, parse_rules


def record(scores: np.ndarray, threshold: float, name: str) -> dict:
    samples = {
        f"id:s{i}": {
            "score": float(s),
            "verdict": "pass" if s >= threshold else "fail",
            "id": f"s{i}",
            "line": i + 1,
        }
        for i, s in enumerate(scores)
    }
    return {
        "format": "pytest-reward-run",
        "version": 1,
        "name": name,
        "groups": [{"function": "f", "file": "s.jsonl", "samples": samples}],
    }


def trial(
    rng: np.random.Generator, n: int, sd: float, delta: float, rules: list, *, resamples: int, seed: int
) -> tuple[bool, bool]:
    quality = rng.beta(2, 2, n)
    base = quality + rng.normal(0, sd, n)
    cur = quality - delta + rng.normal(0, sd, n)
    comps = compare_runs(
        record(cur, 0.5, "cur"), record(base, 0.5, "0001_base"), seed=seed, n_resamples=resamples
    )
    return bool(evaluate_rules(comps, rules, strict=False)), bool(evaluate_rules(comps, rules, strict=True))


def rate(flags: list[bool]) -> float:
    return sum(flags) / len(flags)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--sd", type=float, default=0.1)
    parser.add_argument("--drop", type=float, default=0.02)
    parser.add_argument("--tolerances", default="0.005,0.01,0.015")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(
        f"{args.trials} trials per cell, n={args.n} samples, per-run noise sd={args.sd}, drop={args.drop}, seed={args.seed}"
    )
    print(f"{'rule':<12} {'identical reruns fail':>22} {'(strict)':>10} {'drop caught':>12} {'(strict)':>10}")
    for tol in (float(t) for t in args.tolerances.split(",")):
        rules = parse_rules([f"mean:{tol}"])
        null = [
            trial(rng, args.n, args.sd, 0.0, rules, resamples=args.resamples, seed=i)
            for i in range(args.trials)
        ]
        alt = [
            trial(rng, args.n, args.sd, args.drop, rules, resamples=args.resamples, seed=i)
            for i in range(args.trials)
        ]
        print(
            f"mean:{tol:<7g} {rate([p for p, _ in null]):>22.1%} {rate([s for _, s in null]):>10.1%} "
            f"{rate([p for p, _ in alt]):>12.1%} {rate([s for _, s in alt]):>10.1%}"
        )
    # every sample errored: the current run has no scores at all
    rules = parse_rules(["mean:0.02,pass_rate:0.05,sample:0.3"])
    quality = rng.beta(2, 2, args.n)
    errored = {
        "format": "pytest-reward-run",
        "version": 1,
        "name": "cur",
        "groups": [
            {
                "function": "f",
                "file": "s.jsonl",
                "samples": {
                    f"id:s{i}": {"score": None, "verdict": "fail", "id": f"s{i}", "line": i + 1}
                    for i in range(args.n)
                },
            }
        ],
    }
    comps = compare_runs(errored, record(quality, 0.5, "0001_base"), seed=0, n_resamples=args.resamples)
    failures = evaluate_rules(comps, rules, strict=True)
    print(
        f"every sample errored: {len(failures)} of 3 rules fail under --reward-compare-strict ({'never passes' if len(failures) == 3 else 'PASSES A GATE'})"
    )
    print(f"({time.perf_counter() - start:.1f}s)")


if __name__ == "__main__":
    main()
