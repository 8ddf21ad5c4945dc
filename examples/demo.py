"""``make demo``: run the shipped example projects with pytest-reward, offline, and show their reward tables.

Each project runs in its own directory exactly as a user would run it there; the demo fails if any does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (directory, pytest arguments, what it shows)
PROJECTS: list[tuple[str, list[str], str]] = [
    (
        "first-reward-function",
        ["--reward-samples", "samples.jsonl"],
        "reward-kit's first tutorial project, unchanged but for the import line",
    ),
    (
        "advanced",
        ["--reward-samples", "samples.jsonl"],
        "the advanced tutorial: multi-component, composite and contextual rewards, legacy RewardOutput",
    ),
    (
        "tiny-model-eval",
        [],
        "the shipped tiny JAX model: rollout, perplexity and comparison evaluations as tests, and prompt-only "
        "samples rolled out 4 times each and scored by reward functions",
    ),
    (
        "preference-suite",
        [],
        "the shipped tiny reward model (tiny-sum-rm) and a rule scored on the same preference pairs, with "
        "pair_accuracy and subset_accuracy gates, and the reward model alone on correct answers",
    ),
]


def main() -> int:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    color = ["--color=yes"] if sys.stdout.isatty() else []
    failed = []
    for name, args, what in PROJECTS:
        directory = HERE / name
        if not directory.is_dir():
            print(f"missing example project {directory}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"\n### {name}: {what}\n$ cd examples/{name} && pytest {' '.join(args)}", flush=True)
        start = time.perf_counter()
        code = subprocess.call(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *color, *args], cwd=directory, env=env
        )
        print(f"### {name}: exit code {code} in {time.perf_counter() - start:.1f}s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"\ndemo FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"\ndemo passed: {len(PROJECTS)} example projects green")
    return 0


if __name__ == "__main__":
    sys.exit(main())
