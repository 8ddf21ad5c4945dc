"""--reward-executor thread|process: the same verdicts and the same files wherever samples are scored; a worker
that dies costs its chunk one retry and nothing else; the per-call timeout holds in workers; Ctrl-C ends the run
and its workers; a function that cannot be shipped is an error naming it; rollouts stay on the controller.

Runs are real: worker processes, real signals. Subprocess runs are bounded by generous timeouts (a regression shows
as a run cut off by the bound), never by a timing assertion."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import msgs

# Five kinds of function: pointwise with metrics and ground truth, async, batch mode (whose scores depend on how
# samples are batched: a changed batching changes the files), one that raises on some samples, and one whose calls
# on those samples outlast its timeout (marker timeout=).
PROJECT = """
    import asyncio
    import time

    import pytest
    from pytest_reward import EvaluateResult, MetricResult, reward_function

    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        answer = messages[-1]["content"]
        ok = ground_truth is not None and answer.strip() == str(ground_truth)
        return EvaluateResult(
            score=1.0 if ok else 0.0,
            reason=f"answer {answer!r}",
            metrics={"length": MetricResult(score=min(1.0, len(answer) / 10), reason="length / 10")},
        )

    @reward_function
    async def polite(messages, **kwargs):
        await asyncio.sleep(0)
        return {"score": 0.4 + 0.6 * ("please" in messages[-1]["content"]), "reason": "says please"}

    @reward_function(mode="batch")
    def batched(rollouts_messages, **kwargs):
        n = len(rollouts_messages)
        return [EvaluateResult(score=(i + 1) / n, reason=f"{i + 1} of a batch of {n}") for i in range(n)]

    @reward_function
    def touchy(messages, **kwargs):
        if "boom" in messages[-1]["content"]:
            raise ValueError("boom in the answer")
        return {"score": 1.0}

    @pytest.mark.reward(timeout=0.3)
    @reward_function
    def patient(messages, ground_truth=None, **kwargs):
        if messages[-1]["content"] == "boom" and ground_truth in ("5", "22"):
            time.sleep(2)  # over the marker's timeout, wherever it runs
        return {"score": 1.0}
"""


def rows(n: int, *, tag: str = "a") -> list:
    out: list = []
    for i in range(n):
        answer = str(i) if i % 4 else f"please {i}"
        if i % 17 == 5:
            answer = "boom"
        row = {"id": f"{tag}{i}", "messages": msgs(f"{i}?", answer), "ground_truth": str(i)}
        if i % 23 == 7:
            row["expect"] = {"score": 1.0}
        out.append(row)
    out.insert(30, "{not json")  # a malformed line
    out.insert(60, {"id": f"{tag}3", "messages": msgs("dup", "dup")})  # a duplicate id
    out.insert(90, {"id": f"{tag}-prompt", "messages": msgs("no answer yet")})  # prompt-only, no model
    return out


def make_project(project) -> None:
    project.file("rewards.py", PROJECT)
    project.jsonl("a.jsonl", rows(230, tag="a"))
    project.jsonl("b.jsonl", rows(70, tag="b"))


def run_args(report: str, save: str) -> list[str]:
    return [
        "--reward-samples", "a.jsonl", "--reward-samples", "b.jsonl",
        "--reward-granularity", "file", "--reward-threshold", "0.5", "--reward-batch-size", "7",
        "--reward-preview", "3", "--reward-report", report, f"--reward-save={save}",
    ]  # fmt: skip


_DURATION = re.compile(r'"duration": [0-9.e-]+')
_HTML_TIME = re.compile(r'<div class="muted">[0-9.]+ (?:ns|µs|ms|s)</div>')
_HTML_META = re.compile(r"<span>(?:generated|args) <b class=\"mono\">[^<]*</b></span>")


def normalized_files(root: Path, report: str, save: str) -> dict[str, object]:
    """The run's files, less what differs between any two runs (times, durations, the command line, the run's
    number in storage)."""

    def scrub(value: object) -> object:
        if isinstance(value, dict):
            return {
                k: scrub(v)
                for k, v in value.items()
                if k not in ("duration", "generated_at", "args", "name", "time")
            }
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    out_dir = root / report
    files: dict[str, object] = {
        "results.jsonl": _DURATION.sub("", (out_dir / "results.jsonl").read_text()),
        "summary.json": scrub(json.loads((out_dir / "summary.json").read_text())),
        "report.html": _HTML_META.sub("", _HTML_TIME.sub("", (out_dir / "report.html").read_text())),
    }
    (stored,) = sorted((root / ".reward").glob(f"*_{save}.json"))
    files["stored run"] = scrub(json.loads(stored.read_text()))
    return files


def test_process_and_xdist_runs_write_the_files_of_an_in_process_run(project):
    make_project(project)
    reference = project.run(*run_args("out-thread", "thread"))
    reference.assert_outcomes(failed=10)  # 5 functions x 2 files, each with a bad line, a duplicate, a prompt
    expected = normalized_files(project.path, "out-thread", "thread")
    assert '"id": "a3"' in expected["results.jsonl"] and '"verdict": "fail"' in expected["results.jsonl"]
    assert (
        expected["results.jsonl"].count("timed out after 0.3s") == 2 * 4
    )  # a5, a22, b5, b22: error and failure
    for name, extra in [
        ("process", ["--reward-executor", "process", "--reward-workers", "2"]),
        ("process-n2", ["--reward-executor", "process", "--reward-workers", "2", "-n", "2"]),
        ("thread-workers", ["--reward-workers", "3"]),
    ]:
        result = project.run(*run_args(f"out-{name}", name), *extra)
        result.assert_outcomes(failed=10)
        got = normalized_files(project.path, f"out-{name}", name)
        for file, text in expected.items():
            assert got[file] == text, f"{name}: {file} differs from the in-process run's"


def test_auto_granularity_means_file_items_with_worker_processes(project):
    project.file("rewards.py", PROJECT)
    project.jsonl("a.jsonl", rows(20))
    result = project.run(
        "--reward-samples", "a.jsonl", "--reward-executor", "process", "--reward-workers", "1"
    )
    # one item per function: exact, polite, batched, touchy, patient
    result.assert_outcomes(failed=5)


DIES = """
    import os, pathlib, signal
    from pytest_reward import reward_function

    HERE = pathlib.Path(__file__).parent

    @reward_function
    def fragile(messages, **kwargs):
        text = messages[-1]["content"]
        if text == "exit":
            os._exit(3)
        if text == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if text == "once":  # dies the first time only: a lost worker, not a poisonous sample
            marker = HERE / "died-once"
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os._exit(9)
        return {"score": 1.0, "reason": "survived"}
"""


def _death_rows(bad: str, n: int = 60, at: int = 37) -> list:
    return [{"id": f"s{i}", "messages": msgs("q", bad if i == at else "fine")} for i in range(n)]


@pytest.mark.parametrize(
    ("bad", "why"),
    [("exit", "exited with code 3"), ("sigkill", "was killed by SIGKILL")],
    ids=["exit", "sigkill"],
)
def test_a_worker_that_dies_fails_only_the_sample_that_killed_it(project, bad, why):
    project.file("rewards.py", DIES)
    project.jsonl("s.jsonl", _death_rows(bad))
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-executor", "process", "--reward-workers", "2",
        "--reward-report", "out",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    got = {
        r["id"]: r for r in map(json.loads, (project.path / "out" / "results.jsonl").read_text().splitlines())
    }
    assert len(got) == 60
    assert [i for i, r in got.items() if r["verdict"] != "pass"] == ["s37"]
    assert why in got["s37"]["error"] and "on the first try and on the retry" in got["s37"]["error"]
    assert all(r["reason"] == "survived" for i, r in got.items() if i != "s37")
    result.stdout.fnmatch_lines(
        [
            "*RewardExecutorWarning: fragile on s.jsonl: process workers died 2 times while scoring*retried once*"
        ]
    )


def test_a_worker_lost_once_is_retried_and_the_run_passes(project):
    project.file("rewards.py", DIES)
    project.jsonl("s.jsonl", _death_rows("once"))
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-executor", "process", "--reward-workers", "2"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*RewardExecutorWarning: fragile on s.jsonl: process workers died 1 time while scoring (worker process "
         "* exited with code 9)*retried once, one sample per task: * scored, 0 failed*"]
    )  # fmt: skip
    assert (project.path / "died-once").exists()


SPINS = """
    import os, pathlib, time
    from pytest_reward import reward_function

    HERE = pathlib.Path(__file__).parent

    @reward_function
    def spins(messages, **kwargs):
        if messages[-1]["content"] == "spin":
            (HERE / "spinner.pid").write_text(str(os.getpid()))
            while True:  # CPU-bound and never returns: a thread cannot stop it, ending its process can
                pass
        return {"score": 1.0}
"""


def _gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie (exited, not yet reaped by its parent) counts as gone
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.1)
    return False


def test_the_reward_timeout_holds_in_worker_processes_and_a_spinning_call_ends_with_its_worker(project):
    project.file("rewards.py", SPINS)
    project.jsonl(
        "s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "spin" if i == 5 else "ok")} for i in range(40)]
    )
    result = project.pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--reward-samples", "s.jsonl", "--reward-executor", "process",
        "--reward-workers", "2", "--reward-timeout", "0.5", "--reward-report", "out",
        timeout=120,
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    got = {
        r["id"]: r for r in map(json.loads, (project.path / "out" / "results.jsonl").read_text().splitlines())
    }
    assert "timed out after 0.5s" in got["s5"]["error"]
    assert all(r["verdict"] == "pass" for i, r in got.items() if i != "s5") and len(got) == 40
    # The worker that ran the spinning call retired after its chunk: the call ended with it, during the run.
    assert _gone(int((project.path / "spinner.pid").read_text()))


SLOW = """
    import os, pathlib, time
    from pytest_reward import reward_function

    HERE = pathlib.Path(__file__).parent

    @reward_function
    def slow(messages, **kwargs):
        (HERE / "pids").mkdir(exist_ok=True)
        (HERE / "pids" / str(os.getpid())).touch()
        time.sleep(0.2)
        return {"score": 1.0}
"""


def test_ctrl_c_ends_the_run_and_its_workers(project):
    project.file("rewards.py", SLOW)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(2000)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--reward-samples", "s.jsonl",
         "--reward-executor", "process", "--reward-workers", "2"],
        cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        pids_dir = project.path / "pids"
        while time.monotonic() < deadline and len(list(pids_dir.glob("*")) if pids_dir.exists() else []) < 2:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
        workers = [int(p.name) for p in pids_dir.glob("*")]
        assert len(workers) == 2, "both workers should be scoring by now"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out
    assert all(_gone(pid) for pid in workers), "a worker outlived the interrupted run"
    assert not (project.path / "out").exists()


UNSHIPPABLE = """
    import os
    from pytest_reward import reward_function

    def make():
        @reward_function
        def per_process(messages, **kwargs):
            return {"score": 1.0}
        return per_process

    # An attribute that exists only in the process that imported the module first: no worker can find it again.
    globals()[f"score_{os.getpid()}"] = make()
"""


def test_a_function_that_cannot_be_shipped_is_an_error_naming_it(project):
    project.file("rewards.py", UNSHIPPABLE)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "a")} for i in range(5)])
    result = project.run(
        "--reward-samples", "s.jsonl", "--reward-executor", "process", "--reward-workers", "1"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*per_process (*rewards.py::make.<locals>.per_process) cannot be scored by --reward-executor process "
         "workers: module rewards has no attribute 'score_*' in the worker*thread*"]
    )  # fmt: skip
    result.stdout.fnmatch_lines(["ERROR*per_process on s.jsonl*"])


def test_executor_usage_errors(project):
    project.file("rewards.py", PROJECT)
    project.jsonl("a.jsonl", rows(3))
    result = project.run(
        "--reward-samples", "a.jsonl", "--reward-executor", "process", "--reward-granularity", "sample"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--reward-granularity: sample items are scored in the pytest process*-n N*"]
    )
    result = project.run("--reward-samples", "a.jsonl", "--reward-ray-address", "127.0.0.1:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reward-ray-address: a Ray address needs --reward-executor ray*"])
    result = project.run("--reward-samples", "a.jsonl", "--reward-executor", "dask")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


ROLLOUT_JOB = """
    import os, pathlib
    from dataclasses import dataclass
    import pytest

    HERE = pathlib.Path(__file__).parent

    @dataclass
    class Out:
        text: str
        finish_reason: str = "eot"

    class Job:
        def rollout(self, prompts, max_new_tokens, *, temperature, top_k, top_p, stop, seed, n):
            (HERE / "rolled-by").write_text(str(os.getpid()))
            return [Out(str(sum(map(int, p[-1]["content"].rstrip("=").split("+"))))) for p in prompts for _ in range(n)]

    @pytest.fixture(scope="session")
    def inference_job():
        return Job()
"""

SCORES_WHERE = """
    import os, pathlib
    from pytest_reward import reward_function

    HERE = pathlib.Path(__file__).parent

    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        (HERE / "scored-by").mkdir(exist_ok=True)
        (HERE / "scored-by" / str(os.getpid())).touch()
        return {"score": float(messages[-1]["content"] == ground_truth)}
"""


def test_rollouts_stay_on_the_controller_and_only_scoring_fans_out(project):
    project.file("conftest.py", ROLLOUT_JOB)
    project.file("rewards.py", SCORES_WHERE)
    data = []
    for i in range(40):
        if i % 3:
            data.append({"id": f"p{i}", "messages": msgs(f"{i}+{i}="), "ground_truth": str(2 * i)})
        else:
            data.append(
                {"id": f"a{i}", "messages": msgs(f"{i}+{i}=", str(2 * i)), "ground_truth": str(2 * i)}
            )
    project.jsonl("s.jsonl", data)
    args = ["--reward-samples", "s.jsonl", "--reward-granularity", "file", "--reward-max-batch", "4"]
    project.run(*args, "--reward-report", "out-thread").assert_outcomes(passed=1)
    project.run(
        *args, "--reward-report", "out-process", "--reward-executor", "process", "--reward-workers", "2"
    )
    assert int((project.path / "rolled-by").read_text()) == os.getpid()  # the in-process run's own model
    scorers = {int(p.name) for p in (project.path / "scored-by").glob("*")}
    assert scorers - {os.getpid()}, "the answered samples were scored in worker processes"
    a = _DURATION.sub("", (project.path / "out-thread" / "results.jsonl").read_text())
    b = _DURATION.sub("", (project.path / "out-process" / "results.jsonl").read_text())
    assert a == b and a.count("\n") == 40


PROBE = """
import sys, pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", "--reward-samples", "a.jsonl", "--reward-executor", "process",
                    "--reward-workers", "1"])
print("RAY", "ray" in sys.modules)
sys.exit(code)
"""


def test_the_process_executor_does_not_import_ray(project):
    project.file("rewards.py", PROJECT)
    project.jsonl("a.jsonl", [{"id": "x", "messages": msgs("1?", "1"), "ground_truth": "1"}])
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=project.path, capture_output=True, text=True, timeout=120
    )
    assert "RAY False" in out.stdout, out.stdout + out.stderr


def test_workers_do_not_outlive_a_controller_killed_with_sigkill(project):
    project.file("rewards.py", SPINS)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "spin")} for i in range(4)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--reward-samples", "s.jsonl",
         "--reward-executor", "process", "--reward-workers", "1"],
        cwd=project.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        pid_file = project.path / "spinner.pid"
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert pid_file.exists(), "the worker never started scoring"
        worker = int(pid_file.read_text())
        proc.kill()  # no cleanup at all: the worker, spinning in a call that never returns, must end too
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _gone(worker), "a worker outlived its controller"


def test_workers_import_the_reward_modules_while_pytest_collects(project):
    project.file(
        "rewards.py",
        """
        import os, pathlib
        from pytest_reward import reward_function

        (pathlib.Path(__file__).parent / f"imported-by-{os.getpid()}").touch()

        @reward_function
        def ok(messages, **kwargs):
            return {"score": 1.0}
        """,
    )
    project.jsonl("s.jsonl", [{"id": "a", "messages": msgs("q", "a")}])
    # The session waits at the end of collection (bounded) until the workers have imported the module.
    project.file(
        "conftest.py",
        """
        import pathlib, time

        def pytest_collection_finish(session):
            deadline = time.monotonic() + 60
            while len(list(pathlib.Path(__file__).parent.glob("imported-by-*"))) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        """,
    )
    # Every item deselected: nothing is scored, yet both workers have imported the module (and the controller).
    result = project.run_subprocess(
        "--reward-samples",
        "s.jsonl",
        "--reward-executor",
        "process",
        "--reward-workers",
        "2",
        "-k",
        "nothing",
    )
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    importers = {int(p.name.rsplit("-", 1)[1]) for p in project.path.glob("imported-by-*")}
    assert len(importers) == 3, importers


# A pointwise function and a verl one whose scores tie and pass mostly (file items fold passing samples by their
# score, and make an outcome only for those they keep), with failures, a late lower score and a long reason.
FOLDED = """
    from pytest_reward import reward_function

    def score_of(i):
        if i % 50 == 13:
            return 0.2  # fails the threshold
        if i == 290:
            return 0.45  # the lowest passing score, late in the file
        return 0.5 + (i % 7) / 20  # ties: every seventh sample scores 0.5

    @reward_function
    def tied(messages, ground_truth=None, **kwargs):
        i = int(ground_truth)
        return {"score": score_of(i), "reason": "x" * 3000 if i == 290 else f"sample {i}"}

    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        return score_of(int(ground_truth))

    @reward_function
    def mixed(messages, ground_truth=None, **kwargs):
        i = int(ground_truth)
        if i % 50 == 13:
            raise ValueError(f"boom {i}")
        if i % 50 == 27:  # passes, low, with metrics: kept among the lowest, as an outcome all along
            return {"score": 0.41, "metrics": {"m": {"score": 0.5, "reason": "half"}}}
        if i % 50 == 31:
            return {"score": 0.9, "is_score_valid": False, "reason": "unsure"}
        if i % 50 == 41:
            return {"score": float("nan")}
        return {"score": score_of(i), "reason": f"sample {i}"}
"""


@pytest.mark.parametrize("fn", ["rewards.py::tied", "verl:rewards.py::compute_score", "rewards.py::mixed"])
def test_passing_samples_folded_by_score_give_every_executors_summary_lowest_and_preview(project, fn):
    project.file("rewards.py", FOLDED)
    project.jsonl("s.jsonl", [{"messages": msgs(f"{i}?", f"{i}"), "ground_truth": str(i)} for i in range(300)])
    args = ["--reward-samples", "s.jsonl", "--reward-fn", fn, "--reward-granularity", "file",
            "--reward-threshold", "0.4", "--reward-preview", "7"]  # fmt: skip

    def kept(outcomes: tuple) -> list[tuple]:
        return [(o.line, o.sample_id, o.key, o.verdict, o.score, o.reason, o.failures, o.user, o.response) for o in outcomes]  # fmt: skip

    def seen(*extra: str) -> tuple:
        (group,) = project.result(*args, *extra).groups
        return group.verdict, group.summary.to_dict(), kept(group.outcomes), kept(group.preview_pool)

    folded = seen()
    verdict, summary, lowest, preview = folded
    assert len(preview) == 7 and len({p[0] for p in preview}) == 7
    for extra in (["--reward-workers", "2"], ["--reward-executor", "process", "--reward-workers", "2"]):
        assert seen(*extra) == folded, extra
    if fn == "rewards.py::mixed":
        assert verdict == "FAIL" and (summary["n"], summary["n_fail"], summary["n_pass"]) == (300, 18, 282)
        assert [line for line, *_ in lowest[18:]] == [28, 78]  # 18 failures, then the two lowest passing scores
        assert [o[4] for o in lowest[18:]] == [0.41, 0.41]
        return
    assert verdict == "FAIL" and (summary["n"], summary["n_fail"], summary["n_pass"]) == (300, 6, 294)
    # the six failures, then the lowest passing scores: the late 0.45, then the ties at 0.5 in file order
    assert [line for line, *_ in lowest] == [14, 64, 114, 164, 214, 264, 291, 1, 8, 15, 22, 29, 36, 43, 50, 57, 71, 78, 85, 92]  # fmt: skip
    assert lowest[6][4] == 0.45 and all(o[4] == 0.5 for o in lowest[7:])
    if fn == "rewards.py::tied":
        assert lowest[6][5].startswith("x" * 2000) and "the whole text is in results.jsonl" in lowest[6][5]
