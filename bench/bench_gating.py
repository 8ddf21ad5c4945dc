"""Gating quality of --reward-compare-fail, by seeded simulation (issue 8; model regressions: issue 13.1).

Each trial builds a baseline and a current stored run of N samples and compares them with the code the plugin uses
(``pytest_reward.run.baseline.compare_runs`` + ``evaluate_rules``); every tolerance is judged on the same comparison.
Samples are real sample lines without ``id`` (a question, a ground truth, an answer), keyed by
``pytest_reward.data.samples`` exactly as a run keys them, with their response hashes.

Noise model: a sample's true quality q_i ~ Beta(2, 2); a run scores it q + e, e ~ N(0, sd) independently per run
(a stochastic reward or judge). Two scenarios, each with a null (nothing got worse) and a drop of the group's mean
by ``--drop``:

* reward change: the same answers in both runs; the reward moves every score by −drop (null: identical reruns).
* model regression: a fraction ``--changed`` of the samples get a new answer, whose quality is a fresh Beta(2, 2)
  draw, lowered by drop / changed (null: not lowered, an equally good new model), so the group's mean falls by drop
  on average. Also judged as before issue 13.1: keys hashing the whole sample (a new answer is a new sample) and
  the rules reading the paired samples only.

Reported: the false-alarm rate (null) and the detection rate (drop) for ``mean:TOL``, point rule and
``--reward-compare-strict``, each with its Wilson score 95 % interval over the trials; and that a run where every
sample errored fails every rule.

    python bench/bench_gating.py [--trials 1000] [--n 1000] [--sd 0.1] [--drop 0.02] [--changed 0.3] [--seed 0]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import time
from pathlib import Path

import numpy as np
from _common import machine

from pytest_reward.data.samples import parse_record
from pytest_reward.judge.stats import wilson_interval
from pytest_reward.run.baseline import compare_runs, evaluate_rules, exceeds, parse_rules


class Samples:
    """N questions with two answers each (v0: the baseline's, v1: a new one): their keys as the plugin computes
    them (new scheme) and as format 1 did (a hash of the whole line), and their response hashes."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.keys: list[str] = []
        self.responses: tuple[list[str | None], list[str | None]] = ([], [])
        self.old_keys: tuple[list[str], list[str]] = ([], [])
        for i in range(n):
            for v in (0, 1):
                line = {
                    "messages": [
                        {"role": "user", "content": f"Question {i}: what is {i} + {i}?"},
                        {"role": "assistant", "content": f"Answer {v}: {2 * i}."},
                    ],
                    "ground_truth": str(2 * i),
                }
                sample = parse_record(line, Path("s.jsonl"), i + 1)
                if v == 0:
                    self.keys.append(sample.key)
                self.responses[v].append(sample.response_hash)
                canonical = json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                self.old_keys[v].append("sha1:" + hashlib.sha1(canonical.encode()).hexdigest()[:16])
        assert len(set(self.keys)) == n  # one question per key

    def record(self, scores: np.ndarray, changed: np.ndarray | None, name: str, *, old: bool = False) -> dict:
        samples = {}
        for i, s in enumerate(scores):
            v = int(changed[i]) if changed is not None else 0
            key = self.old_keys[v][i] if old else self.keys[i]
            samples[key] = {
                "score": float(s),
                "verdict": "pass" if s >= 0.5 else "fail",
                "id": f"line-{i + 1}",
                "line": i + 1,
                "response": None if old else self.responses[v][i],
            }
        return {
            "format": "pytest-reward-run",
            "version": 2,
            "name": name,
            "groups": [{"function": "f", "file": "s.jsonl", "samples": samples}],
        }


def verdicts(comps: list, tolerances: list[float], *, paired_only: bool = False) -> list[tuple[bool, bool]]:
    """(point rule fails, strict rule fails) per tolerance; ``paired_only``: the rule before issue 13.1."""
    out = []
    for tol in tolerances:
        if paired_only:
            (comp,) = comps
            d, ds = comp.mean_delta, comp.mean_delta_strict
            point = d is not None and bool(exceeds(-d["estimate"], tol))
            strict = ds is not None and bool(exceeds(-ds["estimate"], tol)) and ds["high"] < 0
            out.append((point, strict))
        else:
            rules = parse_rules([f"mean:{tol}"])
            out.append(
                (
                    bool(evaluate_rules(comps, rules, strict=False)),
                    bool(evaluate_rules(comps, rules, strict=True)),
                )
            )
    return out


def trial(
    rng: np.random.Generator, data: Samples, args: argparse.Namespace, tolerances: list[float], seed: int
) -> dict[str, list[tuple[bool, bool]]]:
    n, sd, drop = data.n, args.sd, args.drop
    kw = {"seed": seed, "n_resamples": args.resamples}
    out: dict[str, list[tuple[bool, bool]]] = {}
    quality = rng.beta(2, 2, n)
    base = quality + rng.normal(0, sd, n)
    base_record = data.record(base, None, "0001_base")
    old_base_record = data.record(base, None, "0001_base", old=True)
    # reward change: same answers, every score moved by -drop (or not)
    for label, delta in (("reward null", 0.0), ("reward drop", drop)):
        cur = quality - delta + rng.normal(0, sd, n)
        out[label] = verdicts(compare_runs(data.record(cur, None, "cur"), base_record, **kw), tolerances)
    # model regression: a fraction of the answers replaced by new ones (worse by drop / changed, or not)
    for label, delta in (("model null", 0.0), ("model drop", drop / args.changed)):
        changed = rng.random(n) < args.changed
        new_quality = rng.beta(2, 2, n) - delta
        cur = np.where(changed, new_quality, quality) + rng.normal(0, sd, n)
        out[label] = verdicts(compare_runs(data.record(cur, changed, "cur"), base_record, **kw), tolerances)
        old = compare_runs(data.record(cur, changed, "cur", old=True), old_base_record, **kw)
        out[label + " (before 13.1)"] = verdicts(old, tolerances, paired_only=True)
    return out


def rate(flags: list[bool]) -> str:
    k, n = sum(flags), len(flags)
    ci = wilson_interval(k, n)
    return f"{k / n:.1%} [{ci.low:.1%}, {ci.high:.1%}]"


ROWS = (
    ("reward change (same answers, scores moved)", "reward null", "reward drop"),
    ("model regression, keys by what was asked (this version)", "model null", "model drop"),
    (
        "model regression, before 13.1 (keys by whole content, paired rule only)",
        "model null (before 13.1)",
        "model drop (before 13.1)",
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--sd", type=float, default=0.1)
    parser.add_argument("--drop", type=float, default=0.02)
    parser.add_argument(
        "--changed", type=float, default=0.3, help="fraction of answers a model regression changes"
    )
    parser.add_argument("--tolerances", default="0.005,0.01,0.015")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tolerances = [float(t) for t in args.tolerances.split(",")]
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    data = Samples(args.n)
    results: dict[str, list[list[tuple[bool, bool]]]] = {}
    for i in range(args.trials):
        for label, flags in trial(rng, data, args, tolerances, seed=i).items():
            results.setdefault(label, []).append(flags)
    elapsed = time.perf_counter() - start
    print(f"date: {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; machine: {machine()}")
    print(
        f"{args.trials} trials, n={args.n} samples, per-run noise sd={args.sd}, drop of the group mean={args.drop}, "
        f"answers changed by a model regression={args.changed:.0%}, B={args.resamples}, seed={args.seed}; "
        f"{elapsed:.0f} s"
    )
    print("rates with their Wilson score 95 % interval over the trials\n")
    print("| scenario | rule | false alarms | (strict) | drop caught | (strict) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for title, null, alt in ROWS:
        for t, tol in enumerate(tolerances):
            nf = [r[t] for r in results[null]]
            af = [r[t] for r in results[alt]]
            print(
                f"| {title if t == 0 else ''} | `mean:{tol:g}` | {rate([p for p, _ in nf])} | "
                f"{rate([s for _, s in nf])} | {rate([p for p, _ in af])} | {rate([s for _, s in af])} |"
            )
    # every sample errored: the current run has no scores at all
    rules = parse_rules(["mean:0.02,pass_rate:0.05,sample:0.3"])
    quality = rng.beta(2, 2, args.n)
    errored = data.record(np.zeros(args.n), None, "cur")
    for entry in errored["groups"][0]["samples"].values():
        entry.update(score=None, verdict="fail")
    comps = compare_runs(errored, data.record(quality, None, "0001_base"), seed=0, n_resamples=args.resamples)
    failures = evaluate_rules(comps, rules, strict=True)
    print(
        f"\nevery sample errored: {len(failures)} of 3 rules fail under --reward-compare-strict "
        f"({'never passes' if len(failures) == 3 else 'PASSES A GATE'})"
    )


if __name__ == "__main__":
    main()
