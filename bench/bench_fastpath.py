"""In-process cost of the hot loops that call a reward function, for before/after comparisons of one change.

Three loops over a trivial reward (``EvaluateResult(score=...)``, threshold 0.5), each timed in process CPU time,
best of ``--repeat``: a sample item's call and outcome (``Invoker.call`` + ``Invoker.outcome``), the file path
(``Invoker.sample_scorer`` of a light invoker, with and without ``Passed`` tuples) and the probe run
(``run_probe``, the six default probes, for the trivial reward and ``format_reward``). It measures the
``pytest_reward`` on ``sys.path``: run it once per tree, alternating, e.g.::

    for i in 1 2 3; do
        PYTHONPATH=../before python bench/bench_fastpath.py --label before
        PYTHONPATH=. python bench/bench_fastpath.py --label after
    done
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench_probes import make_samples, target_for, trivial

from pytest_reward import EvaluateResult, reward_function
from pytest_reward.data.samples import Sample
from pytest_reward.judge.gates import Gates
from pytest_reward.plugin.probe_items import run_probe
from pytest_reward.probes import BUILTIN_PROBES, DEFAULT_PROBES
from pytest_reward.project.functions import RewardFn
from pytest_reward.reward.decorator import get_spec
from pytest_reward.rewards import format_reward
from pytest_reward.scoring.invoker import Invoker


@reward_function
def exact(messages, ground_truth=None, **kwargs):
    """1.0 when the response is the ground truth."""
    return EvaluateResult(score=1.0 if messages[-1]["content"] == ground_truth else 0.0, reason="ok")


def _invoker(light: bool) -> Invoker:
    spec = get_spec(exact)
    gates = Gates(threshold=0.5)
    try:  # the marker's settings apart from its gates (judge.gates.Marker), or a tree from before that split
        from pytest_reward.judge.gates import Marker

        settings = {"marker": Marker(gates=gates)}
    except ImportError:
        settings = {"gates": gates}
    fn = RewardFn(
        obj=exact,
        spec=spec,
        name=spec.name,
        qualname=spec.name,
        module=__name__,
        path=Path("r.py"),
        lineno=1,
        **settings,
    )
    invoker = Invoker(fn, "s.jsonl")
    invoker.light = light  # an attribute before and after the change (a constructor argument after it)
    return invoker


def _samples(n: int) -> list[Sample]:
    return [
        Sample(
            Path("s.jsonl"),
            i + 1,
            None,
            [
                {"role": "user", "content": f"{i}+1?"},
                {"role": "assistant", "content": str(i + 1 if i % 3 else i)},
            ],
            None,
            str(i + 1),
        )
        for i in range(n)
    ]


def _best(repeat: int, loop: Any) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        loop()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--label", default="tree", help="name printed with the figures")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    samples = _samples(args.samples)
    n = len(samples)

    item = _invoker(light=False)

    def items() -> None:
        for s in samples:
            result, runs = item.call(s)
            item.outcome(s, result, runs=runs, duration=0.0)

    light = _invoker(light=True)

    def file_path(passes: bool) -> Any:
        def loop() -> None:
            one = light.sample_scorer(passes=passes)
            for s in samples:
                one(s)

        return loop

    figures = [
        f"sample item {_best(args.repeat, items) / n * 1e6:.2f}",
        f"file path {_best(args.repeat, file_path(True)) / n * 1e6:.2f} (outcomes {_best(args.repeat, file_path(False)) / n * 1e6:.2f})",
    ]
    probes = [(BUILTIN_PROBES[p], BUILTIN_PROBES[p].rule) for p in DEFAULT_PROBES]
    for name, fn in (("trivial", trivial), ("format_reward", format_reward)):
        target = target_for(fn, make_samples(1000))
        target.originals()
        calls = 0

        def probe_loop(target: Any = target) -> None:
            nonlocal calls
            calls = 0
            for probe, rule in probes:
                calls += run_probe(target, probe, rule).checked

        seconds = _best(args.repeat, probe_loop)
        figures.append(f"probes/{name} {seconds / calls * 1e6:.2f}")
    print(f"{args.label}: µs per sample or mutated call: " + ", ".join(figures))


if __name__ == "__main__":
    main()
