"""Prompt-only samples (issue 4): one pytest session with 3 reward functions over N prompt-only samples, against
the bare work it stands for, in the same run.

* **pytest-reward**: ``pytest --reward-samples prompts.jsonl --reward-model tiny-adder`` in a fresh process; the
  three functions share one rollout setting, so every prompt must be rolled out once. Twice: with one item per
  function x prompt (``--reward-granularity sample``, the default for files this size) and with one item per
  function (``--reward-granularity file``, same rollouts, the mode for large prompt sets).
* **reference**: a fresh ``python`` process that does the same work by hand: import the engine, load the shipped
  model, ``InferenceJob.rollout`` the same prompts in the same chunks (``--reward-max-batch``) with the same
  settings, and call the three reward functions on every response in a plain loop.

Both are timed as whole processes (interpreter start, jax import, model load, compilation, rollouts, scoring),
interleaved, medians of ``--repeat`` rounds, once with jax's persistent compilation cache warm (the usual
developer re-run) and once with it off (a fresh CI machine). A third, counted run wraps the session's job in a
proxy (the user-overridable ``inference_job`` fixture) that logs every ``rollout`` call: the prompts rolled out
must be exactly the N samples, each once. Issue target: the session within 1.2x of the reference.

    python bench/bench_prompt_only.py [--n 256] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import user_env

REWARDS = """
import pytest
from pytest_reward import reward_function

ROLLOUT = {"n": PER_PROMPT, "temperature": 0.7, "max_new_tokens": 6, "seed": 0}


@pytest.mark.reward(threshold=1.0, pass_rate=0.0, rollout=ROLLOUT)
@reward_function
def exact(messages, ground_truth=None, **kwargs):
    return {"score": float(messages[-1]["content"].strip() == ground_truth)}


@pytest.mark.reward(rollout=ROLLOUT)
@reward_function
def digits(messages, **kwargs):
    text = messages[-1]["content"].strip()
    return {"score": float(text.isdigit())}


@pytest.mark.reward(rollout=ROLLOUT)
@reward_function
def length(messages, **kwargs):
    return {"score": min(1.0, len(messages[-1]["content"]) / 4)}
"""

REFERENCE = """
import json, sys, time
t0 = time.perf_counter()
from pytest_reward.jax import InferenceJob
from pytest_reward.jax.zoo import resolve_model
from pytest_reward.scoring.rollouts import _chunk_seed
import rewards

job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"), per_device_batch_size=BATCH, compilation_cache_dir=CACHE)
t1 = time.perf_counter()
rows = [json.loads(line) for line in open("prompts.jsonl")]
responses = []
for index, start in enumerate(range(0, len(rows), BATCH)):
    chunk = rows[start : start + BATCH]
    out = job.rollout([r["prompt"] for r in chunk], 6, temperature=0.7, seed=_chunk_seed(0, "prompts.jsonl", index), n=N)
    responses.extend(o.text for o in out)
t2 = time.perf_counter()
fns = [rewards.exact, rewards.digits, rewards.length]
total = 0.0
for i, text in enumerate(responses):
    row = rows[i // N]
    messages = [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": text}]
    for fn in fns:
        total += fn(messages=messages, ground_truth=row["ground_truth"]).score
t3 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "rollout": t2 - t1, "score": t3 - t2, "checksum": total}))
"""

COUNTING_CONFTEST = """
import json, pathlib
import pytest


class Counting:
    def __init__(self, job):
        self._job = job

    def __getattr__(self, name):
        return getattr(self._job, name)

    def rollout(self, prompts, *args, **kwargs):
        with open(pathlib.Path(__file__).parent / "calls.jsonl", "a") as log:
            log.write(json.dumps({"prompts": list(prompts), "n": kwargs.get("n")}) + "\\n")
        return self._job.rollout(prompts, *args, **kwargs)


@pytest.fixture(scope="session")
def inference_job(request):
    from pytest_reward.plugin import session_key
    return Counting(request.config.stash[session_key].inference_job())
"""


def make_project(root: Path, n: int, per_prompt: int, cache: str) -> None:
    from pytest_reward.jax.zoo import resolve_model

    heldout = [json.loads(line) for line in (resolve_model("tiny-adder") / "heldout.jsonl").open()]
    rows = [heldout[i % len(heldout)] for i in range(n)]
    (root / "pytest.ini").write_text(f"[pytest]\nreward_jax_cache_dir = {cache}\n")
    (root / "rewards.py").write_text(REWARDS.replace("PER_PROMPT", str(per_prompt)))
    with open(root / "prompts.jsonl", "w") as fh:
        for i, r in enumerate(rows):
            fh.write(json.dumps({"id": f"p{i}", "prompt": r["prompt"], "ground_truth": r["answer"]}) + "\n")


def env() -> dict[str, str]:
    return user_env(JAX_PLATFORMS="cpu")


def run_session(root: Path, batch: int, granularity: str = "sample") -> tuple[float, str]:
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
        "--reward-samples", "prompts.jsonl", "--reward-model", "tiny-adder", "--reward-max-batch", str(batch),
        "--reward-granularity", granularity,
    ]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env())
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"pytest session failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        )
    return elapsed, proc.stdout


def run_reference(root: Path, batch: int, per_prompt: int, cache: str) -> tuple[float, dict]:
    cache_arg = repr(str(root / cache)) if cache else "None"
    code = (
        REFERENCE.replace("BATCH", str(batch)).replace("CACHE", cache_arg).replace("=N)", f"={per_prompt})")
    )
    code = code.replace("i // N", f"i // {per_prompt}")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=env())
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"reference failed:\n{proc.stderr[-4000:]}")
    return elapsed, json.loads(proc.stdout.strip().splitlines()[-1])


def run_floor(root: Path, items: int) -> float:
    """Plain pytest, no plugin: a session of ``items`` trivial parametrized tests (the cost of being that many
    pytest items, whatever they do)."""
    floor = root / "floor"
    floor.mkdir(exist_ok=True)
    (floor / "pytest.ini").write_text("[pytest]\n")
    (floor / "test_floor.py").write_text(
        f"import pytest\n\n@pytest.mark.parametrize('i', range({items}))\ndef test_item(i):\n    assert i >= 0\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:reward",
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=floor, capture_output=True, text=True, env=env())
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"plain pytest failed:\n{proc.stdout[-2000:]}")
    return elapsed


def count_calls(root: Path, batch: int, n: int, granularity: str) -> dict:
    (root / "conftest.py").write_text(COUNTING_CONFTEST)
    (root / "calls.jsonl").unlink(missing_ok=True)
    try:
        _, out = run_session(root, batch, granularity)
    finally:
        (root / "conftest.py").unlink()
    calls = [json.loads(line) for line in (root / "calls.jsonl").read_text().splitlines()]
    prompts = [p for c in calls for p in c["prompts"]]
    expected = [json.loads(line)["prompt"] for line in (root / "prompts.jsonl").open()]
    return {
        "calls": len(calls),
        "prompts_rolled_out": len(prompts),
        "each_prompt_once": sorted(prompts) == sorted(expected) and len(prompts) == n,
        "plugin_line": next((line for line in out.splitlines() if line.startswith("reward: rollouts:")), ""),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=256, help="prompt-only samples")
    parser.add_argument("--per-prompt", type=int, default=4, help="responses per prompt (rollout n)")
    parser.add_argument("--batch", type=int, default=32, help="--reward-max-batch (prompts per rollout call)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-prompt-only-"))
    results: dict[str, dict] = {}
    try:
        for label, cache in (("warm compilation cache", ".reward/jax-cache"), ("no compilation cache", "")):
            make_project(root, args.n, args.per_prompt, cache)
            if cache:  # warm both: the first run of each fills the shared cache
                run_session(root, args.batch)
                run_reference(root, args.batch, args.per_prompt, cache)
            sessions, file_sessions, references, parts, floors = [], [], [], [], []
            for _ in range(args.repeat):
                sessions.append(run_session(root, args.batch)[0])
                file_sessions.append(run_session(root, args.batch, "file")[0])
                elapsed, detail = run_reference(root, args.batch, args.per_prompt, cache)
                references.append(elapsed)
                parts.append(detail)
                floors.append(run_floor(root, 3 * args.n))
            s, r = statistics.median(sessions), statistics.median(references)
            f = statistics.median(file_sessions)
            results[label] = {
                "session": s,
                "file_session": f,
                "reference": r,
                "ratio": s / r,
                "file_ratio": f / r,
                "reference_rollout": statistics.median(p["rollout"] for p in parts),
                "reference_load": statistics.median(p["load"] for p in parts),
                "reference_score": statistics.median(p["score"] for p in parts),
                "floor": statistics.median(floors),
            }
            shutil.rmtree(root / ".reward", ignore_errors=True)
        counted = {g: count_calls(root, args.batch, args.n, g) for g in ("sample", "file")}
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"workload: {args.n} prompt-only samples x {args.per_prompt} responses (temperature 0.7, 6 new tokens), "
          f"3 reward functions, rollout chunks of {args.batch}; medians of {args.repeat} interleaved rounds")  # fmt: skip
    for granularity, c in counted.items():
        print(
            f"rollout calls ({granularity} items): {c['calls']} for {c['prompts_rolled_out']} prompts "
            f"(each prompt once: {c['each_prompt_once']}); plugin says: {c['plugin_line']!r}"
        )
    print(
        "| condition | session, sample items s | session, file items s | reference s | ratio sample / file "
        f"| reference: start+load s | rollout s | scoring s | plain pytest, {3 * args.n} trivial items s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, res in results.items():
        print(
            f"| {label} | {res['session']:.2f} | {res['file_session']:.2f} | {res['reference']:.2f} | "
            f"{res['ratio']:.2f}x / {res['file_ratio']:.2f}x | {res['reference_load']:.2f} | "
            f"{res['reference_rollout']:.2f} | {res['reference_score']:.3f} | {res['floor']:.2f} |"
        )
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    calls = -(-args.n // args.batch)
    ok = all(c["each_prompt_once"] and c["calls"] == calls for c in counted.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
