"""The pytest form of a multi-host run: two processes run the same ``pytest --reward-model tiny-adder`` command,
each in its own copy of the project (two hosts' disks). Evaluation items run on both, together; the reward
function's samples (no model) on process 0 only; the verdicts and the exit status are the same on both; only
process 0 writes the report and the stored run."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from .launch import PYTHON, run_processes

pytestmark = pytest.mark.multihost

EVALS = """
    import json
    from pathlib import Path

    import pytest

    from pytest_reward.evaluation import PerplexityEvaluation, RolloutEvaluation

    ROWS = [json.loads(line) for line in Path("heldout.jsonl").open()][:11]

    @pytest.mark.reward(mean={mean})
    class Sums(RolloutEvaluation):
        name = "sums"
        def __len__(self):
            return len(ROWS)
        def get(self, i):
            return ROWS[i]["prompt"], ROWS[i]["answer"]
        def max_new_tokens(self, inference):
            return 6
        def check(self, y, y_hat):
            return y == y_hat

    @pytest.mark.reward(max_mean=100.0)
    class Ppl(PerplexityEvaluation):
        name = "ppl"
        def __len__(self):
            return len(ROWS)
        def get(self, i):
            return ROWS[i]["prompt"] + ROWS[i]["answer"]
"""

REWARDS = """
    from pytest_reward import reward_function

    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        return {"score": float(messages[-1]["content"].strip() == ground_truth), "reason": "exact match"}
"""

SAMPLES = "\n".join(
    json.dumps(
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}], "ground_truth": a}
    )
    for q, a in [("1+1=", "2"), ("2+2=", "4"), ("3+3=", "6")]
)


def project(root: Path, mean: float, rewards: str = REWARDS) -> None:
    root.mkdir()
    (root / "test_evals.py").write_text(textwrap.dedent(EVALS.format(mean=mean)))
    (root / "rewards.py").write_text(textwrap.dedent(rewards))
    (root / "samples.jsonl").write_text(SAMPLES + "\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    heldout = Path(__file__).resolve().parents[2] / "examples" / "tiny-model-eval" / "data" / "heldout.jsonl"
    shutil.copy(heldout, root / "heldout.jsonl")


def run_both(tmp_path: Path, mean: float, *extra: str, rewards: str = REWARDS):
    hosts = [tmp_path / "host0", tmp_path / "host1"]
    for root in hosts:
        project(root, mean, rewards)
    argv = [PYTHON, "-m", "pytest", "--reward-model", "tiny-adder", "--reward-samples", "samples.jsonl"]
    argv += ["--reward-report", "out", "-p", "no:randomly", "-p", "no:cacheprovider", "-rA", *extra]
    return hosts, run_processes(argv, tmp_path, cwds=hosts, deadline=150)


def test_the_same_command_on_two_processes_is_one_run_with_one_writer(tmp_path):
    hosts, (p0, p1) = run_both(tmp_path, 0.5, "--reward-save", "base")
    assert (p0.returncode, p1.returncode) == (0, 0), p0.stdout[-3000:] + p1.stdout[-3000:] + p1.stderr[-3000:]
    # the evaluations ran on both processes; the reward function's 3 samples on process 0 only
    assert "PASSED test_evals.py::Sums" in p0.stdout and "PASSED test_evals.py::Sums" in p1.stdout
    assert "PASSED test_evals.py::Ppl" in p0.stdout and "PASSED test_evals.py::Ppl" in p1.stdout
    assert p0.stdout.count("PASSED samples.jsonl::exact") == 3
    assert "samples.jsonl::exact" not in p1.stdout.replace("deselected", "")
    assert "3 deselected" in p1.stdout
    # one writer: process 0's report and stored run; process 1 says where they are
    assert (hosts[0] / "out" / "report.html").is_file()
    assert any((hosts[0] / ".reward").rglob("*.json*"))
    assert not (hosts[1] / "out").exists() and not (hosts[1] / ".reward" / "runs").exists()
    assert (
        "pytest-reward: process 1 of 2: process 0 wrote the run's reports, baselines and deploys ("
        in p1.stdout
    )
    assert "out/report.html" in p1.stdout
    assert "reward: multi-host run, process 0 of 2 (writes the reports); coordinator 127.0.0.1:" in p0.stdout
    assert "reward: multi-host run, process 1 of 2 (process 0 writes the reports)" in p1.stdout


def test_a_gate_that_fails_on_process_0_fails_both(tmp_path):
    """The aggregate gate is judged by process 0 (the run's controller); process 1 takes its exit status."""
    _, (p0, p1) = run_both(tmp_path, 0.99)
    assert p0.returncode == 1, p0.stdout[-3000:]
    assert p1.returncode == 1, p1.stdout[-3000:] + p1.stderr[-2000:]
    assert "FAIL sums on test_evals.py: mean" in p0.stdout
    assert "exit status 1, as process 0's" in p1.stdout


def test_different_collections_are_a_usage_error_on_every_process(tmp_path):
    hosts, _ = run_both(tmp_path, 0.5, "--co")  # (a warm-up that also checks --collect-only works)
    (hosts[1] / "test_evals.py").write_text((hosts[1] / "test_evals.py").read_text().replace("Ppl", "Perp"))
    argv = [
        PYTHON,
        "-m",
        "pytest",
        "--reward-model",
        "tiny-adder",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    ]
    p0, p1 = run_processes(argv, tmp_path, cwds=hosts, deadline=120)
    for f in (p0, p1):
        assert f.returncode == 4, f.stdout[-2000:] + f.stderr[-2000:]
        assert "collected other items than process" in f.stderr, f.stderr[-2000:]


def test_the_others_wait_for_process_0_while_it_keeps_finishing_items(tmp_path):
    """Process 0 scores the reward function's samples alone, 2.5 s each (7.5 s), longer than the 5 s collective
    timeout: process 1 waits at the end as long as process 0 finishes items, and both pass."""
    slow = REWARDS.replace("    def exact(", "    def exact(").replace(
        "        return {", "        import time\n\n        time.sleep(2.5)\n        return {"
    )
    assert "time.sleep(2.5)" in slow
    _, (p0, p1) = run_both(tmp_path, 0.5, "--reward-collective-timeout", "5", rewards=slow)
    assert (p0.returncode, p1.returncode) == (0, 0), p1.stdout[-3000:] + p1.stderr[-3000:]
    assert p0.stdout.count("PASSED samples.jsonl::exact") == 3
    assert "collective timeout 5 s" in p1.stdout
    assert "exit status 0, as process 0's" in p1.stdout


def test_a_process_killed_mid_run_fails_the_items_of_the_others_once(tmp_path):
    """Process 1 is killed inside the first evaluation: on process 0 that item fails after the 5 s timeout naming
    process 1, the next evaluation fails at once (no second timeout), the samples still run, and the run ends
    with status 1 instead of hanging."""
    hosts = [tmp_path / "host0", tmp_path / "host1"]
    dying = EVALS.replace(
        "        def check(self, y, y_hat):\n",
        "        def check(self, y, y_hat):\n"
        "            import os, signal\n"
        "            if os.environ['JAX_PROCESS_ID'] == '1':\n"
        "                os.kill(os.getpid(), signal.SIGKILL)\n",
    )
    assert dying != EVALS
    for root in hosts:
        project(root, 0.5)
        (root / "test_evals.py").write_text(textwrap.dedent(dying.format(mean=0.5)))
    argv = [PYTHON, "-m", "pytest", "--reward-model", "tiny-adder", "--reward-samples", "samples.jsonl"]
    argv += ["--reward-collective-timeout", "5", "-p", "no:randomly", "-p", "no:cacheprovider", "-rA"]
    p0, p1 = run_processes(argv, tmp_path, cwds=hosts, deadline=150)
    assert p1.returncode == -9
    assert p0.returncode == 1, p0.stdout[-3000:] + p0.stderr[-3000:]
    assert "process 1 did not arrive within 5 s at collective" in p0.stdout
    assert "an earlier collective of this run failed, so no other can run" in p0.stdout
    assert p0.stdout.count("PASSED samples.jsonl::exact") == 3
    assert "FAILED test_evals.py::Sums" in p0.stdout and "FAILED test_evals.py::Ppl" in p0.stdout
