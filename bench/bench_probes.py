"""Cost of the reward-hacking probes (issue 18), each against a reference measured in the same run.

1. Per-call overhead of the machinery, in process: for each default probe, ``run_probe`` over N samples vs a direct
   call of the same reward function on the same mutated inputs, built beforehand (``fn(messages=...,
   ground_truth=...)``); process CPU time of ``--rounds`` interleaved rounds, median. Also measured: the same inputs
   scored the way a sample item scores a sample (``Invoker.score_one``: the reference the probes must not fall
   below in guarantees), and the building of the mutated inputs alone (each sample's ``ProbeSample`` view seeded
   for the probe, the probe's mutation, the conversation ending with it: what a harness calling the function
   directly would do too), of which the mutation alone. Machinery = through the probes − building the inputs:
   isolating each call's input, the call, the verdict, the rule and the counter-examples. The original scores the
   rules compare with are computed once before timing (a run takes them from the sample items; benchmark 2 counts
   every call). Rewards: the built-ins ``math_reward``, ``accuracy_reward`` and ``format_reward``, a ~100 µs one,
   and a trivial one whose machinery is the fixed cost per call. Target: machinery ≤ 1.2× a direct call.
2. A whole ``pytest --reward-samples`` run with ``probes="default"`` vs the same run without probes (fresh
   subprocesses, interleaved, median of ``--runs``): wall and CPU time, and the reward calls each made, counted by
   the reward itself (expected with probes: the samples once, plus one call per mutated response, in either
   granularity: the rules read the samples' own scores from their items).

Usage::

    .venv/bin/python bench/bench_probes.py [--quick] [--results bench/RESULTS.md]

``--results`` replaces (or appends) only the "## Reward-hacking probes (issue 18)" section of that file.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _common import machine, user_env, write_section

from pytest_reward.data.samples import Sample
from pytest_reward.plugin.options import Settings
from pytest_reward.plugin.probe_items import ProbeTarget, run_probe
from pytest_reward.probes import BUILTIN_PROBES, DEFAULT_PROBES, ProbeSample, with_response_text
from pytest_reward.project.functions import RewardFn
from pytest_reward.reward.decorator import get_spec, reward_function
from pytest_reward.reward.models import EvaluateResult
from pytest_reward.scoring.executors import InProcess

SECTION = "## Reward-hacking probes (issue 18)"
STAT = statistics.median
ROOT = Path(__file__).resolve().parents[1]


@reward_function
def trivial(messages, ground_truth=None, **kwargs):
    """1.0 when the last turn says something."""
    return EvaluateResult(score=1.0 if messages[-1].get("content") else 0.0, reason="non-empty answer")


BUSY_LOOPS = 1000
"""Iterations of :func:`busy`'s loop; calibrated at start to about 100 µs per call (an LLM judge takes far more)."""


@reward_function
def busy(messages, ground_truth=None, **kwargs):
    """A CPU-bound reward of about 100 µs per call (a pure-Python loop), then a containment check."""
    acc = 0
    for i in range(BUSY_LOOPS):
        acc += i * i % 7
    return EvaluateResult(score=float(str(ground_truth) in messages[-1]["content"]), reason=f"busy {acc}")


def calibrate(target_us: float = 100.0) -> None:
    global BUSY_LOOPS
    messages = [{"role": "assistant", "content": "1"}]
    for _ in range(3):
        start = time.process_time()
        for _ in range(200):
            busy(messages=messages, ground_truth="1")
        per_call = (time.process_time() - start) / 200 * 1e6
        BUSY_LOOPS = max(10, int(BUSY_LOOPS * target_us / per_call))


def make_samples(n: int, seed: int = 0) -> list[Sample]:
    """``n`` arithmetic samples in five answer styles (boxed, plain, tagged, GSM8K, "the answer is"), 70 % right."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        truth = a + b
        answer = truth if rng.random() < 0.7 else truth + rng.randint(1, 9)
        text = [
            f"We add {a} and {b}. The answer is \\boxed{{{answer}}}.",
            f"Adding the numbers gives {answer}",
            f"<think>\n{a} + {b}\n</think>\n<answer>\n{answer}\n</answer>",
            f"First {a}, then {b}.\n#### {answer}",
            f"{a} plus {b} is {answer}, so the answer is {answer}.",
        ][i % 5]
        messages = [
            {"role": "user", "content": f"What is {a} + {b}?"},
            {"role": "assistant", "content": text},
        ]
        out.append(Sample(Path("bench.jsonl"), i + 1, None, messages, ground_truth=str(truth)))
    return out


def target_for(fn: Any, samples: list[Sample]) -> ProbeTarget:
    """The probe target of ``fn`` on ``samples``, with the in-process executor of a default run."""
    spec = get_spec(fn)
    reward = RewardFn(
        obj=fn,
        spec=spec,
        name=spec.name,
        qualname=spec.name,
        module=fn.__module__,
        path=ROOT,
        lineno=1,
    )
    settings = Settings()
    session = SimpleNamespace(settings=settings, executor=InProcess(1), config=SimpleNamespace(rootpath=ROOT))
    return ProbeTarget(reward, "bench.jsonl", ROOT / "bench.jsonl", session, samples)  # type: ignore[arg-type]


def _view(target: ProbeTarget, probe_name: str, index: int, sample: Sample, text: str) -> ProbeSample:
    orig = target.originals()
    return ProbeSample(
        text,
        sample.messages or [],
        ground_truth=sample.ground_truth,
        has_ground_truth=True,
        line=sample.line,
        original_score=orig.score(index),
        original_passed=bool(orig.passed[index]),
        seed=f"0:{probe_name}:{sample.line}",
    )


def mutated_inputs(target: ProbeTarget, probe_name: str) -> list[tuple[list[Any], Any, Sample]]:
    """The (messages, ground truth, sample) the probe scores, built the way ``run_probe`` builds them."""
    probe = BUILTIN_PROBES[probe_name]
    out = []
    for index, (sample, text) in enumerate(target.answered()):
        new = probe.mutate(text, _view(target, probe_name, index, sample, text))
        if new is not None:
            messages = with_response_text(sample.messages or [], new)
            out.append(
                (
                    messages,
                    sample.ground_truth,
                    Sample(sample.path, sample.line, None, messages, None, sample.ground_truth),
                )
            )
    return out


def bench_overhead(name: str, fn: Any, n: int, rounds: int) -> dict[str, Any]:
    samples = make_samples(n)
    target = target_for(fn, samples)
    target.originals()  # computed once per function x file in a run; not what is measured here
    probes = [(BUILTIN_PROBES[p], BUILTIN_PROBES[p].rule) for p in DEFAULT_PROBES]
    inputs = {p.name: mutated_inputs(target, p.name) for p, _ in probes}
    calls = sum(len(v) for v in inputs.values())

    def machinery() -> float:
        start = time.process_time()
        for probe, rule in probes:
            run_probe(target, probe, rule)
        return time.process_time() - start

    def direct() -> float:
        start = time.process_time()
        for probe, _ in probes:
            for messages, truth, _sample in inputs[probe.name]:
                fn(messages=messages, ground_truth=truth)
        return time.process_time() - start

    invoker = target.invoker

    def as_sample() -> float:
        # the path a sample item takes for the same input: copies, the call, the verdict (what probes reuse)
        start = time.process_time()
        for probe, _ in probes:
            for _messages, _truth, sample in inputs[probe.name]:
                invoker.score_one(sample)
        return time.process_time() - start

    prefix = {probe.name: f"{target.settings.seed}:{probe.name}:" for probe, _ in probes}
    prepared = [entry for block in target.prepared() for entry in block]

    def mutations() -> float:
        # building the mutated inputs, as a harness calling the function directly would: each sample's view (a
        # fresh ProbeSample, seeded for the probe), the probe's mutation, the conversation ending with it
        start = time.process_time()
        view = ProbeSample._of
        for probe, _ in probes:
            mutate, p = probe.mutate, prefix[probe.name]
            for _index, _sample, text, fields_of_view, messages, *_ in prepared:
                new = mutate(text, view(*fields_of_view, p))
                if new is not None:
                    with_response_text(messages, new)
        return time.process_time() - start

    views = {
        probe.name: [(text, view_fields) for _, _, text, view_fields, *_ in prepared] for probe, _ in probes
    }

    def mutate_only() -> float:
        # the views and the probes' mutate() (views_only is subtracted: what remains is mutate() alone)
        start = time.process_time()
        view = ProbeSample._of
        for probe, _ in probes:
            mutate, p = probe.mutate, prefix[probe.name]
            for text, fields_of_view in views[probe.name]:
                mutate(text, view(*fields_of_view, p))
        return time.process_time() - start

    def views_only() -> float:
        start = time.process_time()
        view = ProbeSample._of
        for probe, _ in probes:
            p = prefix[probe.name]
            for _text, fields_of_view in views[probe.name]:
                view(*fields_of_view, p)
        return time.process_time() - start

    cases = (machinery, direct, as_sample, mutations, mutate_only, views_only)
    for case in cases:
        case()  # warm up (imports, regex caches)
    times: dict[Any, list[float]] = {case: [] for case in cases}
    for i in range(rounds):
        k = i % len(cases)
        for case in cases[k:] + cases[:k]:
            times[case].append(case())
    m, r, s, mut, mut_only, views_cost = (STAT(times[c]) for c in cases)
    mut_only = max(0.0, mut_only - views_cost)
    # ratios round by round (the cases of one round ran back to back, under the same load), then their median
    rounds_ = range(len(times[machinery]))
    ratio = STAT([times[machinery][i] / times[direct][i] for i in rounds_])
    ratio_machinery = STAT([(times[machinery][i] - times[mutations][i]) / times[direct][i] for i in rounds_])
    ratio_old = STAT(
        [
            (times[machinery][i] - times[mutate_only][i] + times[views_only][i]) / times[direct][i]
            for i in rounds_
        ]
    )
    per_probe = {p.name: len(inputs[p.name]) for p, _ in probes}
    return {
        "reward": name,
        "samples": n,
        "calls": calls,
        "per_probe": per_probe,
        "ours_us": m / calls * 1e6,
        "direct_us": r / calls * 1e6,
        "sample_us": s / calls * 1e6,
        "mutation_us": mut / calls * 1e6,
        "mutate_only_us": mut_only / calls * 1e6,
        "ratio": ratio,
        "ratio_sample": m / s,
        "ratio_machinery": ratio_machinery,
        "ratio_machinery_old": ratio_old,
        "overhead_us": (m - mut - r) / calls * 1e6,
    }


# --- 2. whole runs -------------------------------------------------------------------------------------------

PROJECT_REWARDS = """\
import os
import pytest
from pytest_reward import reward_function
from pytest_reward.rewards import math_reward

COUNT = os.environ.get("PROBE_BENCH_COUNT")
PROBES = os.environ.get("PROBE_BENCH_PROBES") == "1"


def _count():
    if COUNT:
        with open(COUNT, "a") as fh:
            fh.write("x")


@pytest.mark.reward(**({"probes": "default"} if PROBES else {}))
@reward_function
def math(messages, ground_truth=None, **kwargs):
    _count()
    return math_reward(messages=messages, ground_truth=ground_truth)
"""


def write_project(directory: Path, n: int) -> None:
    import json

    (directory / "pytest.ini").write_text("[pytest]\n")
    (directory / "rewards.py").write_text(PROJECT_REWARDS)
    with open(directory / "s.jsonl", "w") as fh:
        for s in make_samples(n):
            fh.write(json.dumps({"messages": s.messages, "ground_truth": s.ground_truth}) + "\n")


def run_pytest(directory: Path, probes: bool, granularity: str) -> tuple[float, float, int]:
    """Wall and CPU (user + system) seconds of one pytest run, and the reward calls it made."""
    count = directory / f"count-{os.getpid()}-{time.monotonic_ns()}"
    env = user_env(
        PROBE_BENCH_COUNT=str(count), PROBE_BENCH_PROBES="1" if probes else "0", PYTHONPATH=str(ROOT)
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--reward-samples", "s.jsonl"]
    cmd += ["--reward-granularity", granularity]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=directory, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    calls = len(count.read_text()) if count.exists() else 0
    count.unlink(missing_ok=True)
    return wall, cpu, calls


def bench_runs(n: int, runs: int, granularity: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-probes-") as tmp:
        directory = Path(tmp)
        write_project(directory, n)
        walls: dict[bool, list[float]] = {False: [], True: []}
        cpus: dict[bool, list[float]] = {False: [], True: []}
        calls: dict[bool, int] = {}
        run_pytest(directory, False, granularity)  # warm the bytecode caches
        for i in range(runs):
            for probes in (False, True) if i % 2 == 0 else (True, False):
                wall, cpu, count = run_pytest(directory, probes, granularity)
                walls[probes].append(wall)
                cpus[probes].append(cpu)
                calls[probes] = count
    plain, probed = statistics.median(walls[False]), statistics.median(walls[True])
    plain_cpu, probed_cpu = statistics.median(cpus[False]), statistics.median(cpus[True])
    return {
        "samples": n,
        "granularity": granularity,
        "plain_s": plain,
        "probed_s": probed,
        "ratio": probed / plain,
        "plain_cpu": plain_cpu,
        "probed_cpu": probed_cpu,
        "cpu_ratio": probed_cpu / plain_cpu,
        "plain_calls": calls[False],
        "probed_calls": calls[True],
    }


# --- report --------------------------------------------------------------------------------------------------


def load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:  # pragma: no cover
        return "?"


READING = (
    "Reading: *machinery* is what the probes add to a direct call once the mutated input exists: a private copy of "
    "the conversation for the call (a list and a last turn of its own over the sample's private copy, compared with "
    "the sample's conversation after the call), the call, the verdict a sample gets, the rule and the counter-"
    "examples; with no timeout the calls run in the test's thread (with one, one watchdog thread per block of "
    "calls). The trivial row's *machinery − direct* is that fixed cost per call; for a reward of a few µs it is a "
    "large share, for one of ~50 µs or more a small one. *As a sample* is the path a sample item takes for the same "
    "input (copies, the call, the input check, the verdict, the outcome record): probes no longer take it in "
    "process, they keep its guarantees. *Previous definition* subtracts only the probe's mutate() (views and "
    "conversations counted as machinery), as the earlier runs of this benchmark did. The machine is shared: "
    "figures move by ±10 % between runs (compare the rows of one run, not across runs)."
)


def render(overheads: list[dict[str, Any]], runs: list[dict[str, Any]], command: str, args: Any) -> str:
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    lines = [
        SECTION,
        "",
        f"- Date: {now}",
        f"- Machine: {machine()} (shared with other jobs: the load average is below)",
        f"- Code measured: the working tree at commit {commit.strip() or '?'}",
        f"- Command: `{command}`",
        f'- Samples: {args.samples} generated arithmetic samples (seed 0; boxed, plain, tagged, GSM8K and "the answer '
        'is" styles, 70 % right), the six default probes.',
        "",
        "1. Per-call cost, in µs of process CPU time per mutated call (median of "
        f"{args.rounds} interleaved rounds; the ratios are medians of each round's ratio): a direct call of the function on the mutated input (`fn(messages=..., "
        "ground_truth=...)`, the input built beforehand); as a sample: the same input scored the way a sample item "
        "scores it (`Invoker.score_one`); through the probes (`run_probe`: everything); building the inputs: each "
        "sample's `ProbeSample` view seeded for the probe, the probe's mutation and the conversation ending with it "
        "(what a harness calling the function directly does too), of which the mutation alone. Machinery = through "
        "the probes − building the inputs.",
        "",
        "| reward | mutated calls | direct call | as a sample | through the probes | building the inputs | "
        "of which mutate() | machinery ÷ direct | target (≤ 1.2×) | machinery − direct | previous definition | "
        "everything ÷ direct |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for o in overheads:
        info = o["reward"].startswith("trivial")
        met = (
            "(info: the fixed cost)"
            if info
            else ("**met**" if o["ratio_machinery"] <= 1.2 else "**not met**")
        )
        lines.append(
            f"| `{o['reward']}` | {o['calls']:,} | {o['direct_us']:.2f} | {o['sample_us']:.2f} | {o['ours_us']:.2f} | "
            f"{o['mutation_us']:.2f} | {o['mutate_only_us']:.2f} | {o['ratio_machinery']:.2f}× | {met} | "
            f"{o['overhead_us']:.2f} µs | {o['ratio_machinery_old']:.2f}× | {o['ratio']:.2f}× |"
        )
    per_probe = ", ".join(f"{k} {v:,}" for k, v in overheads[0]["per_probe"].items())
    lines += ["", READING]
    lines += [
        "",
        f"Mutated calls per probe (of {args.samples} samples): {per_probe} (`format_only` applies only to the "
        "tagged and boxed styles).",
        "",
        f'2. Whole `pytest --reward-samples` runs of a `math_reward` wrapper, with `probes="default"` and without '
        f"(fresh subprocesses, interleaved, median of {args.runs}); calls counted by the reward.",
        "",
        "| granularity | samples | wall without probes | with the 6 default probes | ratio | "
        "CPU without → with | ratio | reward calls without → with | expected with probes |",
        "|---|---:|---:|---:|---:|---|---:|---|---|",
    ]
    mutated = sum(overheads[0]["per_probe"].values()) if args.run_samples == args.samples else None
    for r in runs:
        if mutated is None:
            expected = "–"
        else:
            expected = f"{r['samples']:,} + {mutated:,} mutated = {r['samples'] + mutated:,}"
        lines.append(
            f"| {r['granularity']} | {r['samples']:,} | {r['plain_s']:.2f} s | {r['probed_s']:.2f} s | "
            f"{r['ratio']:.2f}× | {r['plain_cpu']:.2f} s → {r['probed_cpu']:.2f} s | {r['cpu_ratio']:.2f}× | "
            f"{r['plain_calls']:,} → {r['probed_calls']:,} ({r['probed_calls'] / max(1, r['plain_calls']):.1f}×) | "
            f"{expected} |"
        )
    lines += ["", f"Load average (1 min) when the run ended: {load()} on {os.cpu_count()} cores."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, few rounds")
    parser.add_argument("--samples", type=int, help="samples of benchmark 1 (default 2000; quick 200)")
    parser.add_argument("--rounds", type=int, help="rounds of benchmark 1 (default 11; quick 3)")
    parser.add_argument("--run-samples", type=int, help="samples of benchmark 2 (default 2000; quick 100)")
    parser.add_argument("--runs", type=int, help="runs per case of benchmark 2 (default 3; quick 1)")
    parser.add_argument("--results", type=Path, help="write the section into this RESULTS.md")
    args = parser.parse_args(argv)
    args.samples = args.samples or (200 if args.quick else 2000)
    args.rounds = args.rounds or (3 if args.quick else 11)
    args.run_samples = args.run_samples or (100 if args.quick else 2000)
    args.runs = args.runs or (1 if args.quick else 3)

    from pytest_reward.rewards import accuracy_reward, format_reward, math_reward

    calibrate()
    overheads = []
    for name, fn in (
        ("math_reward", math_reward),
        ("accuracy_reward", accuracy_reward),
        ("format_reward", format_reward),
        ("busy (~100 µs)", busy),
        ("trivial (fixed cost)", trivial),
    ):
        result = bench_overhead(name, fn, args.samples, args.rounds)
        print(
            f"{name:22} {result['calls']:6} calls  direct {result['direct_us']:7.2f} µs  as a sample "
            f"{result['sample_us']:7.2f} µs  probes {result['ours_us']:7.2f} µs (inputs {result['mutation_us']:.2f}, "
            f"mutate() {result['mutate_only_us']:.2f})  machinery {result['ratio_machinery']:.2f}× direct "
            f"(+{result['overhead_us']:.2f} µs; previous definition {result['ratio_machinery_old']:.2f}×); all "
            f"{result['ratio']:.2f}× direct",
            flush=True,
        )
        overheads.append(result)
    runs = []
    for granularity in ("sample", "file"):
        result = bench_runs(args.run_samples, args.runs, granularity)
        print(
            f"{granularity:6} {result['samples']} samples: {result['plain_s']:.2f} s -> {result['probed_s']:.2f} s "
            f"({result['ratio']:.2f}x; CPU {result['plain_cpu']:.2f} s -> {result['probed_cpu']:.2f} s, "
            f"{result['cpu_ratio']:.2f}x), calls {result['plain_calls']} -> {result['probed_calls']}",
            flush=True,
        )
        runs.append(result)
    if args.results:
        command = "python bench/bench_probes.py " + shlex.join(argv if argv is not None else sys.argv[1:])
        write_section(args.results, SECTION, render(overheads, runs, command.strip(), args))
        print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
