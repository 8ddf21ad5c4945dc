"""The two-process equality check of issue 33 on a GPU machine: two ``jax.distributed`` processes with one GPU each
(coordinator on 127.0.0.1) evaluate the shipped tiny model with the four Evaluation kinds and an ``Evaluator``,
and one process alone on one GPU does the same; the results must agree (the same greedy tokens, predictions and
intermediates; scores within ``--atol``) and be identical on both processes.

It runs the scenario ``same`` of ``tests/multihost/worker.py`` (the CPU test suite's, ``make test-multihost``),
so the two cannot drift apart. With fewer than two GPUs (``nvidia-smi -L``) it says so and exits 0 (skipped);
``--cpu`` runs the same check on the CPU (two processes with two host devices each) anywhere.

Usage: ``python bench/multihost_check.py [--cpu] [--atol 1e-5] [--deadline 600]``
"""

from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.multihost.launch import PYTHON, run_processes  # noqa: E402

WORKER = str(ROOT / "tests" / "multihost" / "worker.py")
KINDS = ("sums", "answers", "ppl", "choice")


def gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (two host devices per process)")
    parser.add_argument("--atol", type=float, default=1e-5, help="largest score difference allowed")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds for the whole run")
    args = parser.parse_args()
    env = {}
    if not args.cpu:
        found = gpus()
        if found < 2:
            print(f"multihost_check: skipped: {found} GPU(s) here, the check needs 2 (or pass --cpu)")
            return 0
        env = {"MULTIHOST_ONE_GPU_EACH": "1", "JAX_PLATFORMS": "cuda", "XLA_FLAGS": ""}
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    with tempfile.TemporaryDirectory(prefix="multihost-check-") as tmp:
        work, alone_dir = Path(tmp), Path(tmp) / "alone"
        alone_dir.mkdir()
        alone: list = []
        reference = threading.Thread(
            target=lambda: alone.extend(
                run_processes(
                    [PYTHON, WORKER, "same", str(alone_dir)],
                    alone_dir,
                    alone=True,
                    env=env,
                    deadline=args.deadline,
                )
            )
        )
        reference.start()
        two = run_processes([PYTHON, WORKER, "same", str(work)], work, env=env, deadline=args.deadline)
        reference.join(timeout=args.deadline + 60)
        for name, f in [("process 0", two[0]), ("process 1", two[1]), ("alone", alone[0])]:
            if f.returncode != 0:
                print(f"multihost_check: {name} failed ({f.returncode}):\n{f.stderr[-4000:]}")
                return 1
        p0, p1, ref = (
            pickle.loads(p.read_bytes()) for p in (work / "0.pkl", work / "1.pkl", alone_dir / "alone.pkl")
        )
    print(f"devices: two processes {p0['devices']} in all, alone {ref['devices']}; {p0['hosts']}")
    print(
        f"{'evaluation':<10} {'two processes':>14} {'alone':>14} {'max |diff|':>11}  same tokens  same on both"
    )
    ok = True
    for kind in KINDS:
        diff = max(abs(a - b) for a, b in zip(p0[kind]["per_sample"], ref[kind]["per_sample"], strict=True))
        tokens = (
            p0[kind]["outputs"] == ref[kind]["outputs"]
            and p0[kind]["intermediates"] == ref[kind]["intermediates"]
        )
        both = p0[kind] == p1[kind]
        ok &= tokens and both and diff <= args.atol
        print(
            f"{kind:<10} {p0[kind]['score']:>14.8f} {ref[kind]['score']:>14.8f} {diff:>11.2e}  {tokens!s:<11}  {both}"
        )
    one_writer = (p0["wrote"], p1["wrote"], p0["done"], p1["done"]) == (True, False, True, True)
    print(f"results.json written by process 0 only, done on both: {one_writer}")
    ok &= one_writer
    print("multihost_check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
