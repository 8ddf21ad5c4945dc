"""Data parallelism: two (forced) CPU devices give the same outputs as one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax
    from pytest_reward.jax import InferenceJob, ModelConfig, init_params

    cfg = ModelConfig.gpt2(vocab_size=257, d_model=64, n_layers=2, n_heads=4, max_positions=128)
    job = InferenceJob(cfg, init_params(cfg, seed=1, std=0.2), per_device_batch_size=2)
    prompts = ["hello", "a", "the quick brown fox", "xyz" * 5, "q", "data parallel"]
    greedy = job.rollout(prompts, 12)
    sampled = job.rollout(prompts, 12, temperature=1.5, top_p=0.9, seed=7, n=2)
    ll = job.loglikelihood([("hello ", "world"), ("", "abc"), ("x" * 40, "y")])
    nll = job.token_nll(["some text to score, long enough to share the 64-token bucket", "b"])
    job.reset_stats()
    job.token_nll(["ab", "cd", "ef", "gh"])  # four rows: 2 per device per batch
    score_batches = job.stats.max_batches_in_flight
    print(json.dumps({
        "devices": jax.device_count(),
        "replicas": job.replicas,
        "mesh": dict(job.mesh.shape),
        "score_batches": score_batches,
        "greedy": [r.tokens for r in greedy],
        "sampled": [r.tokens for r in sampled],
        "ll": [[x.logprob, x.num_tokens, x.is_greedy] for x in ll],
        "nll": [x.tolist() for x in nll],
    }))
    """
)


def _run(devices: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_two_devices_match_one():
    one, two = _run(1), _run(2)
    assert (one["devices"], one["replicas"], one["mesh"]) == (1, 1, {"batch": 1, "shard": 1})
    assert (two["devices"], two["replicas"], two["mesh"]) == (2, 2, {"batch": 2, "shard": 1})
    # a batch holds per_device_batch_size rows on every device: four rows are two batches on one device, one on two
    assert (one["score_batches"], two["score_batches"]) == (2, 1)
    assert two["greedy"] == one["greedy"]
    assert two["sampled"] == one["sampled"]
    for a, b in zip(one["ll"], two["ll"], strict=True):
        assert a[1:] == b[1:]
        assert a[0] == pytest.approx(b[0], abs=1e-4)
    for a, b in zip(one["nll"], two["nll"], strict=True):
        assert a == pytest.approx(b, abs=1e-4)


CACHE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pytest_reward.jax import InferenceJob, ModelConfig, backend_compile_count, init_params, persistent_cache_hits

    cfg = ModelConfig.gpt2(vocab_size=257, d_model=32, n_layers=1, n_heads=2, max_positions=64)
    job = InferenceJob(cfg, init_params(cfg, seed=0), compilation_cache_dir=sys.argv[1])
    before, hits = backend_compile_count(), persistent_cache_hits()
    out = job.rollout(["abc", "de"], 8)
    print(json.dumps({"built": backend_compile_count() - before, "loaded": persistent_cache_hits() - hits,
                      "text": [r.text for r in out]}))
    """
)


def test_persistent_compilation_cache_is_used_by_a_new_process(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", CACHE_SCRIPT, str(tmp_path / "cache")],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert runs[0]["built"] >= 1 and runs[0]["loaded"] == 0
    assert runs[1]["built"] == 0 and runs[1]["loaded"] >= 1
    assert runs[0]["text"] == runs[1]["text"]
    assert any((tmp_path / "cache").iterdir())
