"""One process of the multi-host tests (run as a script, once per process, by :mod:`.launch`): the shipped tiny
model evaluated under ``jax.distributed`` (or alone, as the reference), results pickled to ``OUT/<process>.pkl``.

    python worker.py SCENARIO OUT

Scenarios: ``same`` (every process evaluates the same data: four Evaluation kinds and an Evaluator),
``uneven`` (process p evaluates its own shard; the shards differ in size), ``die`` (process 1 is killed by
SIGKILL in the middle of an evaluation), ``die0`` (the same for process 0, the coordinator), ``stall`` (process 1
sleeps in the middle of an evaluation: for SIGTERM), ``collectives`` (the failure modes of raw collectives),
``die_in_gather`` (process 1 arrives at a gather and dies before entering it), ``reward_model`` (each
process scores texts with the shipped reward model, on a device of its own). The coordinator and process id come from the standard
``JAX_*`` environment variables; without them the process runs alone.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = [
    json.loads(line) for line in (ROOT / "examples" / "tiny-model-eval" / "data" / "heldout.jsonl").open()
][:11]
#: the shards of scenario ``uneven``: 7 samples on process 0, 4 on process 1 (the reference reads all 11)
SHARDS = {0: HELDOUT[:7], 1: HELDOUT[7:]}


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    if os.environ.get("MULTIHOST_ONE_GPU_EACH"):  # bench/multihost_check.py on a GPU machine
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("JAX_PROCESS_ID", "0")
    from pytest_reward.evaluation import (
        EncodingEvaluation,
        Evaluator,
        PerplexityComparisonEvaluation,
        PerplexityEvaluation,
        RolloutEvaluation,
    )
    from pytest_reward.jax import InferenceJob, hosts, resolve_model

    launch = hosts.Launch.resolve()
    me = 0 if launch is None else launch.process_id
    if launch is not None:
        hosts.initialize(launch)
    rows = SHARDS[me] if scenario == "uneven" and launch is not None else HELDOUT

    class Sums(RolloutEvaluation):
        name = "sums"

        def __len__(self):
            return len(rows)

        def get(self, i):
            return rows[i]["prompt"], rows[i]["answer"]

        def max_new_tokens(self, inference):
            return 6

        def check(self, y, y_hat):
            return y == y_hat

        def score(self, ys, y_hats):
            if scenario in ("die", "die0", "stall", "raise") and me == (0 if scenario == "die0" else 1):
                print(f"process {me}: scored, now {scenario}", flush=True)
                if scenario == "stall":
                    time.sleep(600)
                if scenario == "raise":
                    raise RuntimeError("a bug on process 1 only")
                os.kill(os.getpid(), signal.SIGKILL)
            return super().score(ys, y_hats)

    class Answers(EncodingEvaluation):
        name = "answers"

        def __len__(self):
            return len(rows)

        def get(self, i):
            return rows[i]["prompt"] + rows[i]["answer"] + "<|endoftext|>"

        def clean(self, y_hat):
            return y_hat

        def check(self, x, y_hat):
            return y_hat.endswith(x.split("=")[1])

    class Ppl(PerplexityEvaluation):
        name = "ppl"

        def __len__(self):
            return len(rows)

        def get(self, i):
            return rows[i]["prompt"] + rows[i]["answer"]

    class Choice(PerplexityComparisonEvaluation):
        name = "choice"

        def __len__(self):
            return len(rows)

        def get(self, i):
            answer = rows[i]["answer"]
            return rows[i]["prompt"], [answer, str(int(answer) + 1), str(int(answer) + 10)], 0

    job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"), per_device_batch_size=2)
    if scenario == "die_in_gather":  # process 1 arrives at a gather and dies before entering it
        import numpy as np

        h = hosts.current()
        if me == 1:
            h._arrive("rows", pickle.dumps((3, ((), np.dtype(np.int64).str))))
            print("process 1: arrived, now dying", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        h.gather_rows("rows", np.arange(3))
        return
    if scenario == "reward_model":  # every process loads the shipped reward model on its own first device
        from pytest_reward.jax import RewardModel
        from pytest_reward.rewards.reward_model import locate_model

        rm = RewardModel.from_checkpoint(locate_model("tiny-sum-rm"))
        chats = [
            [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            for q, a in (("25+69=", "94"), ("585+92=", "677"), ("6+4=", "10"), ("25+69=", "84"))
        ]
        result = {"device": str(rm.device), "scores": rm.score_conversations(chats).tolist()}
        (out / f"{me if launch is not None else 'alone'}.pkl").write_bytes(pickle.dumps(result))
        print(f"process {me}: finished", flush=True)
        return
    if scenario == "collectives":
        (out / f"{me}.pkl").write_bytes(pickle.dumps(collectives(job, hosts.current(), hosts.HostsError)))
        print(f"process {me}: finished", flush=True)
        return
    evaluations = [Sums(), Answers(), Ppl(), Choice()]
    result: dict = {
        "process": me,
        "devices": job.replicas,
        "local_devices": job.local_replicas,
        "hosts": repr(job.hosts),
        # the seed's split of 32 samples at 4 rows per device over every device of the run
        "accumulation": Sums.find_accumulation_steps(32, 4, job.replicas),
    }
    for evaluation in evaluations:
        score = evaluation(job)
        per_sample, inter = evaluation(job, reduce="none", return_intermediates=True)
        samples = evaluation.shared_samples(job)
        result[evaluation.name] = {
            "score": score,
            "per_sample": per_sample.tolist(),
            "intermediates": [(r.x.tolist(), r.padding_mask.tolist(), r.action_mask.tolist()) for r in inter],
            "outputs": [s.output for s in samples],
        }
    evaluator = Evaluator(job, evaluations, results_dir=out / f"results-{me}", name="mh")
    result["evaluate"] = {k: v.tolist() for k, v in evaluator.evaluate(reduce="none").items()}
    result["run"] = evaluator.run()
    result["done"] = evaluator.done
    result["wrote"] = evaluator.results_path.exists()
    result["again"] = evaluator()
    (out / f"{me if launch is not None else 'alone'}.pkl").write_bytes(pickle.dumps(result))
    print(f"process {me}: finished", flush=True)


def collectives(job, h, HostsError) -> dict:
    """What each process saw of the failure modes the collectives turn into errors: every one raised on both
    processes (or answered the same on both), and the run goes on afterwards."""
    import numpy as np

    seen: dict = {}

    def attempt(label, fn):
        try:
            seen[label] = ("ok", fn())
        except HostsError as exc:
            seen[label] = ("HostsError", str(exc))

    me = h.index
    # theseus-style broadcast: the non-source process passes None
    attempt("broadcast_none", lambda: h.broadcast("weights", {"step": 7} if me == 0 else None))
    # one host holding fewer rows: lengths agreed, padded, gathered, cut
    attempt(
        "rows", lambda: [r.tolist() for r in h.gather_rows("rows", np.arange(5 - 3 * me, dtype=np.int32))]
    )
    # other trailing shapes: an error on both, not an abort
    attempt("shape_mismatch", lambda: h.gather_rows("bad rows", np.zeros((2, 3 + me), np.float32)))
    # a large payload (bytes through the gather)
    attempt("large", lambda: [len(x) for x in h.exchange("large", "x" * (400_000 + me))])
    # the engine called with other settings on each process
    attempt("settings", lambda: job.rollout(["12+345="], max_new_tokens=6 + me))
    # the processes at different collectives
    attempt("other_code", lambda: h.barrier(f"barrier of process {me}"))
    # and the run goes on: a rollout of different prompts per process (each gets its own)
    prompts = [row["prompt"] for row in HELDOUT[:2]][: 2 - me]
    attempt("after", lambda: [r.text for r in job.rollout(prompts, max_new_tokens=6)])
    return seen


if __name__ == "__main__":
    main()
