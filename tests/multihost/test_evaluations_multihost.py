"""Evaluations under ``jax.distributed``: two local processes (coordinator on 127.0.0.1, two CPU devices each, four
global devices) against one process alone, the shipped tiny model. Every process is killed by process group at the
end of its run (:mod:`.launch`); every wait has a deadline."""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

from .launch import PYTHON, ROOT, Finished, run_processes

pytestmark = pytest.mark.multihost

WORKER = str(Path(__file__).with_name("worker.py"))
HELDOUT = [
    json.loads(line) for line in (ROOT / "examples" / "tiny-model-eval" / "data" / "heldout.jsonl").open()
]
KINDS = ("sums", "answers", "ppl", "choice")


def together_and_alone(scenario: str, tmp_path: Path) -> tuple[list[Finished], Finished]:
    """The scenario on two processes and, at the same time, on one process alone (the reference)."""
    alone: list[Finished] = []
    solo = tmp_path / "alone"
    solo.mkdir()
    thread = threading.Thread(
        target=lambda: alone.extend(run_processes([PYTHON, WORKER, scenario, str(solo)], solo, alone=True))
    )
    thread.start()
    try:
        two = run_processes([PYTHON, WORKER, scenario, str(tmp_path)], tmp_path)
    finally:
        thread.join(timeout=180)
    for i, f in enumerate([*two, *alone]):
        assert f.returncode == 0, f"process {i}: {f.returncode}\n{f.stdout[-2000:]}\n{f.stderr[-4000:]}"
    return two, alone[0]


def load(path: Path) -> dict:
    return pickle.loads(path.read_bytes())


def test_every_kind_and_the_evaluator_agree_with_one_process(tmp_path):
    together_and_alone("same", tmp_path)
    p0, p1, ref = load(tmp_path / "0.pkl"), load(tmp_path / "1.pkl"), load(tmp_path / "alone" / "alone.pkl")
    assert (p0["devices"], p1["devices"], ref["devices"]) == (4, 4, 2)  # the mesh spans both processes
    assert (p0["local_devices"], p1["local_devices"]) == (2, 2)
    assert p0["accumulation"] == (4, 2) and ref["accumulation"] == (
        4,
        4,
    )  # data parallel over 4 devices, not 2
    assert p0["hosts"].startswith("Hosts(process 0 of 2") and p1["hosts"].startswith("Hosts(process 1 of 2")
    for kind in KINDS:
        assert p0[kind] == p1[kind], kind  # bit for bit the same on both processes
        assert p0[kind]["outputs"] == ref[kind]["outputs"], kind  # the same greedy tokens and predictions
        assert p0[kind]["intermediates"] == ref[kind]["intermediates"], kind
        np.testing.assert_allclose(p0[kind]["per_sample"], ref[kind]["per_sample"], rtol=0, atol=1e-6)
        assert abs(p0[kind]["score"] - ref[kind]["score"]) <= 1e-6
        assert len(p0[kind]["per_sample"]) == 11
    assert p0["evaluate"] == p1["evaluate"]
    assert p0["run"] == p1["run"] == p0["again"] == p1["again"]
    for kind in KINDS:
        assert abs(p0["run"][kind] - ref["run"][kind]) <= 1e-6
    # only process 0 writes results.json; `done` is true on both afterwards
    assert (p0["wrote"], p1["wrote"]) == (True, False)
    assert (p0["done"], p1["done"]) == (True, True)
    assert not (tmp_path / "results-1").exists()


def test_unequal_sample_counts_per_process_are_one_dataset(tmp_path):
    """Process 0 holds 7 samples, process 1 holds 4: no abort, no hang; both get the union (11 samples, process
    0's first), equal to one process evaluating all 11."""
    together_and_alone("uneven", tmp_path)
    p0, p1, ref = load(tmp_path / "0.pkl"), load(tmp_path / "1.pkl"), load(tmp_path / "alone" / "alone.pkl")
    for kind in KINDS:
        assert p0[kind] == p1[kind], kind
        assert len(p0[kind]["per_sample"]) == 11
        assert p0[kind]["outputs"] == ref[kind]["outputs"], kind
        assert p0[kind]["intermediates"] == ref[kind]["intermediates"], kind
        np.testing.assert_allclose(p0[kind]["per_sample"], ref[kind]["per_sample"], rtol=0, atol=1e-6)
    assert p0["run"] == p1["run"]


@pytest.mark.parametrize("dead", [1, 0], ids=["worker-dies", "coordinator-dies"])
def test_a_process_killed_mid_evaluation_fails_the_other_within_the_timeout(tmp_path, dead):
    scenario = "die" if dead == 1 else "die0"
    done = run_processes(
        [PYTHON, WORKER, scenario, str(tmp_path)],
        tmp_path,
        deadline=90,
        env={"PYTEST_REWARD_COLLECTIVE_TIMEOUT": "10"},
    )
    killed, other = done[dead], done[1 - dead]
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert other.returncode is not None, "the surviving process hung"
    assert other.returncode != 0, other.stderr[-3000:]
    assert other.seconds < 60
    assert f"process {dead}: scored, now {scenario}" in killed.stdout
    if dead == 1:  # our collective names the missing process, and the survivor exits with status 1
        assert other.returncode == 1, other.stderr[-3000:]
        # usually at the next collective; under load process 1 may die while process 0 still reads its part of
        # the last gather, which gloo reports as a broken connection
        assert (
            "HostsError: process 1 did not arrive within 10 s at collective" in other.stderr
            or "another process died or its host went away during it" in other.stderr
        ), other.stderr[-3000:]
    else:
        # The coordinator's death is seen first by JAX's own error polling, which ends the process (SIGABRT)
        # with its reason; a collective waiting at that moment reports the lost coordinator instead.
        assert other.returncode in (1, -6), other.stderr[-3000:]
        assert (
            "leader task was preempted/died" in other.stderr
            or "the coordinator (process 0) cannot be reached" in other.stderr
        ), other.stderr[-3000:]
    assert "finished" not in other.stdout


def test_sigterm_ends_processes_blocked_in_a_collective(tmp_path):
    """Process 1 stalls mid-evaluation, process 0 waits for it at a collective: SIGTERM ends both at once (JAX's
    preemption notifier would catch it and leave them running)."""
    import os
    import signal
    import time

    def terminate(procs):
        ready = tmp_path / "stdout-1.txt"
        end = time.monotonic() + 90
        while time.monotonic() < end and "now stall" not in ready.read_text(errors="replace"):
            time.sleep(0.1)
        time.sleep(1.0)  # process 0 is in its wait at the next collective by now
        for p in procs:
            os.kill(p.pid, signal.SIGTERM)

    done = run_processes([PYTHON, WORKER, "stall", str(tmp_path)], tmp_path, deadline=120, during=terminate)
    for f in done:
        assert f.returncode == -signal.SIGTERM, (f.returncode, f.stderr[-2000:])
    assert "process 1: scored, now stall" in done[1].stdout


def test_mismatched_collectives_raise_on_every_process_and_the_run_goes_on(tmp_path):
    """Different shapes, settings or code paths on the two processes: a HostsError naming each process's side on
    both (gloo would abort the process, or hang); None on the non-source process of a broadcast is fine."""
    done = run_processes([PYTHON, WORKER, "collectives", str(tmp_path)], tmp_path, deadline=120)
    for i, f in enumerate(done):
        assert f.returncode == 0, f"process {i}: {f.returncode}\n{f.stderr[-4000:]}"
    p0, p1 = load(tmp_path / "0.pkl"), load(tmp_path / "1.pkl")
    assert p0["broadcast_none"] == p1["broadcast_none"] == ("ok", {"step": 7})
    assert p0["rows"] == p1["rows"] == ("ok", [[0, 1, 2, 3, 4], [0, 1]])
    assert p0["large"] == p1["large"] == ("ok", [400_000, 400_001])
    for seen in (p0, p1):
        kind, message = seen["shape_mismatch"]
        assert kind == "HostsError" and "process 0: (2, 3) float32; process 1: (2, 4) float32" in message
        kind, message = seen["settings"]
        assert kind == "HostsError" and "the processes called with different settings" in message
        assert "process 0: (6," in message and "process 1: (7," in message
        kind, message = seen["other_code"]
        assert kind == "HostsError" and "the processes ran different code" in message
    assert p0["other_code"][1].count("barrier of process") == 2
    # each process gets the results of the prompts it passed (the global batch is both processes' prompts)
    answers = [row["answer"] for row in HELDOUT[:2]]  # both right when the model runs alone
    assert p0["after"] == ("ok", answers) and p1["after"] == ("ok", answers[:1])


def test_a_process_that_dies_inside_a_gather_fails_the_other_at_once(tmp_path):
    """Process 1 arrives at a gather (its shapes match) and dies before entering it: process 0, already inside the
    gloo gather, gets a broken connection, reported as a HostsError (not a hang, not an abort at exit)."""
    done = run_processes(
        [PYTHON, WORKER, "die_in_gather", str(tmp_path)],
        tmp_path,
        deadline=90,
        env={"PYTEST_REWARD_COLLECTIVE_TIMEOUT": "30"},
    )
    assert done[1].returncode == -9 and "arrived, now dying" in done[1].stdout
    assert done[0].returncode == 1, done[0].stderr[-3000:]
    assert "HostsError: rows: the gather among the 2 processes failed in process 0" in done[0].stderr
    assert "another process died or its host went away during it" in done[0].stderr
    assert done[0].seconds < 60


def test_an_exception_on_one_process_ends_it_at_once_and_fails_the_other(tmp_path):
    """An uncaught exception on process 1 alone: process 1 exits with status 1 at once (not after JAX's shutdown
    barrier waited for process 0, then aborted), and process 0 fails at its next collective naming it."""
    done = run_processes(
        [PYTHON, WORKER, "raise", str(tmp_path)],
        tmp_path,
        deadline=90,
        env={"PYTEST_REWARD_COLLECTIVE_TIMEOUT": "10"},
    )
    assert done[1].returncode == 1 and "RuntimeError: a bug on process 1 only" in done[1].stderr
    assert done[1].seconds < done[0].seconds  # it did not wait for process 0
    assert done[0].returncode == 1, done[0].stderr[-3000:]
    assert "HostsError: process 1 did not arrive within 10 s" in done[0].stderr


def test_a_reward_model_runs_on_each_process_own_device(tmp_path):
    """``RewardModel`` defaults to a device of the process that builds it (``jax.devices()[0]`` belongs to process
    0 in a multi-host run): each process scores, with the scores of a process alone."""
    together_and_alone("reward_model", tmp_path)
    p0, p1, ref = load(tmp_path / "0.pkl"), load(tmp_path / "1.pkl"), load(tmp_path / "alone" / "alone.pkl")
    assert p0["device"] != p1["device"]  # each its own
    assert p0["scores"] == p1["scores"] == ref["scores"]
    assert ref["scores"][0] > ref["scores"][3]  # 25+69=94 above 25+69=84
