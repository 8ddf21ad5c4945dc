"""Core plugin benchmarks (issue 3, "Granularity and speed"), each against a reference measured in the same run.

1. ``sample`` granularity: a whole ``pytest -q -p no:cacheprovider --reward-samples`` run with N per-sample items
   vs a plain parametrized pytest test over the same N samples (``json.loads`` at import, the raw function and an
   assert in the test body, plugin disabled); median wall time of ``--runs`` runs each.  Target ≤ 1.2×.
2. ``file`` granularity: the same trivial function on 1M samples (one item, streamed) vs a plain Python loop that
   parses the same JSONL and calls the raw (undecorated) function; median wall of ``--runs`` runs each; peak RSS of
   the pytest process at 100k and 1M samples.  Targets ≤ 3× and < 300 MB, flat.
3. ``@reward_function`` call vs the raw call of the same trivial function returning an ``EvaluateResult``
   (``timeit`` on process CPU time, 21 paired rounds, median), untyped params with dict messages and
   ``messages: list[Message]`` given ``Message`` objects.  Target ≤ 1.5×.
4. start-up cost of the installed plugin on an unrelated one-test pytest run: default (plugin loaded) vs
   ``-p no:reward``, interleaved runs (hyperfine when it is on PATH); plus the top ``-X importtime`` entries of
   ``import pytest_reward.plugin``.  Target ≤ 50 ms.
5. ``-n 2`` vs ``-n 0`` on a CPU-bound function (pure-Python loop of ~5 ms per sample, 400 samples), whole wall
   time.  Target ≥ 1.7× (2 cores).  For context, the same at ~50 ms per sample, and the fixed cost of ``-n 2``
   on 2 samples and on one plain test with the plugin disabled (xdist's own start-up).

Every pytest run is a fresh subprocess, timed (and its peak RSS read with ``getrusage(RUSAGE_CHILDREN)``) by a
small intermediate process, so the benchmark's own memory never leaks into the figures. Data files live in a
temporary directory that is deleted at the end (``--keep`` keeps it).

Usage::

    .venv/bin/python bench/bench_core.py [--quick] [--results bench/RESULTS.md] [--profile]

``--results`` replaces (or appends) only the "## Core plugin (issue 3)" section of that file. ``--profile``
prints profiles (py-spy when it is on PATH or given with ``--py-spy``, else cProfile) of the plain reference and
the ``sample`` run at ``--profile-samples`` and of the ``file`` run at ``--profile-file-samples``: self time by
area, top functions, and the inclusive time of pytest_reward's functions. The code measured is ``pytest_reward/``
at ``--ref`` (default HEAD, exported to the work directory, since others edit the working tree meanwhile).
"""

import argparse
import datetime as _dt
import json
import os
import pstats
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections import defaultdict
from pathlib import Path
from typing import Any

from _common import machine, user_env, write_section

SECTION = "## Core plugin (issue 3)"
ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

TRIVIAL_REWARDS = '''\
from pytest_reward import EvaluateResult, reward_function


@reward_function
def trivial(messages, ground_truth=None, **kwargs):
    """1.0 when the last turn says something."""
    text = messages[-1].get("content") or ""
    return EvaluateResult(score=1.0 if text else 0.0, reason="non-empty answer")
'''

BUSY_REWARDS = '''\
from pytest_reward import EvaluateResult, reward_function

LOOPS = {loops}


@reward_function
def busy(messages, **kwargs):
    """A CPU-bound reward: a pure-Python loop of about {ms} ms."""
    acc = 0
    for i in range(LOOPS):
        acc += i * i % 7
    return EvaluateResult(score=1.0, reason=str(acc % 2))
'''

PLAIN_TEST = """\
import json
import sys

import pytest

sys.path.insert(0, {reward_dir!r})
from rewards import trivial  # noqa: E402

raw = trivial.__wrapped__
with open({samples!r}, encoding="utf-8") as fh:
    CASES = [json.loads(line) for line in fh if line.strip()]


@pytest.mark.parametrize("sample", CASES, ids=[f"line-{{i}}" for i in range(1, len(CASES) + 1)])
def test_trivial(sample):
    result = raw(**sample)
    assert result.score >= 0.5, result.reason
"""

PLAIN_LOOP = """\
import json
import sys

sys.path.insert(0, {reward_dir!r})
from rewards import trivial  # noqa: E402

raw = trivial.__wrapped__
n = passed = 0
with open(sys.argv[1], encoding="utf-8") as fh:
    for line in fh:
        if not line.strip():
            continue
        sample = json.loads(line)
        result = raw(**sample)
        n += 1
        passed += result.score >= 0.5
print(n, passed)
"""

TINY_TEST = "def test_nothing():\n    assert 1 + 1 == 2\n"
PYTEST_INI = "[pytest]\n"
PYTEST = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


# --- environment -----------------------------------------------------------------------------------------


def clean_env(workdir: Path, src: Path | None) -> dict[str, str]:
    """No PYTEST_* settings; bytecode caching on, as for users (without it pytest re-compiles the assertion-
    rewritten modules of every installed plugin on every run), with the caches kept in the work directory;
    ``src`` (a snapshot of the package) ahead of the editable install."""
    env = {k: v for k, v in user_env().items() if not k.startswith(("PYTEST_", "PY_COLORS", "COV_"))}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    return env


def snapshot(rev: str, dest: Path) -> tuple[Path | None, str]:
    """Export ``pytest_reward/`` at ``rev`` into ``dest`` (other people edit the working tree while this runs);
    ``rev == "worktree"``: use the installed (editable) working tree as it is."""
    if rev == "worktree":
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "pytest_reward"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        return None, f"working tree at {head}" + (" with uncommitted changes" if dirty else "")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "pytest_reward"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest, f"commit {commit}"


def load() -> float:
    return os.getloadavg()[0]


# --- data ------------------------------------------------------------------------------------------------


def sample_line(i: int) -> str:
    a, b = 7 + (i * 37) % 990, 3 + (i * 101) % 997
    return json.dumps(
        {
            "messages": [
                {"role": "user", "content": f"What is {a} + {b}?"},
                {"role": "assistant", "content": f"{a} + {b} = {a + b}, so the answer is {a + b}."},
            ],
            "ground_truth": str(a + b),
        }
    )


def write_samples(path: Path, n: int, also: dict[int, Path] | None = None) -> None:
    """``n`` samples (no ``id``: items are named ``line-N``); ``also`` = {k: path} gets the first k lines too."""
    extra = {k: open(p, "w", encoding="utf-8") for k, p in (also or {}).items()}  # noqa: SIM115
    try:
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(n):
                line = sample_line(i) + "\n"
                fh.write(line)
                for k, out in extra.items():
                    if i < k:
                        out.write(line)
    finally:
        for out in extra.values():
            out.close()


def project(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pytest.ini").write_text(PYTEST_INI)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


# --- running ---------------------------------------------------------------------------------------------


def measure_main(argv: list[str]) -> int:
    """``--measure LOG -- CMD...``: run CMD, print {"wall", "cpu", "rss_mb", "rc"} (this process is small and fresh, so
    ``RUSAGE_CHILDREN`` is the peak RSS of CMD alone)."""
    import resource

    log, cmd = argv[0], argv[2:]
    with open(log, "wb") as out:
        start = time.perf_counter()
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
        wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time includes reaped grandchildren (xdist workers); peak RSS is the largest single process.
    print(
        json.dumps(
            {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024, "rc": rc}
        )
    )
    return 0


class Runner:
    def __init__(self, workdir: Path, src: Path | None) -> None:
        self.workdir = workdir
        self.env = clean_env(workdir, src)
        self.count = 0

    def run(self, cmd: list[str], cwd: Path, expect: str | None = None) -> dict[str, Any]:
        """Run ``cmd`` in ``cwd`` through the measuring process; check exit status 0 and ``expect`` in output."""
        self.count += 1
        log = self.workdir / "logs" / f"run-{self.count:04d}.log"
        log.parent.mkdir(exist_ok=True)
        proc = subprocess.run(
            [PY, str(Path(__file__).resolve()), "--measure", str(log), "--", *cmd],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"measuring process failed: {proc.stderr}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        output = log.read_text(errors="replace")
        if result["rc"] != 0 or (expect is not None and expect not in output):
            tail = "\n".join(output.splitlines()[-25:])
            raise RuntimeError(
                f"{shlex.join(cmd)} (in {cwd}) exited {result['rc']}, expected {expect!r}:\n{tail}"
            )
        result["output"] = output
        return result

    def median_runs(
        self, cases: dict[str, tuple[list[str], Path, str | None]], runs: int
    ) -> dict[str, dict[str, Any]]:
        """One warm-up run each (bytecode and page caches), then the cases interleaved ``runs`` times, so that
        load changes hit all alike; median wall, max RSS."""
        walls: dict[str, list[float]] = defaultdict(list)
        cpus: dict[str, list[float]] = defaultdict(list)
        rss: dict[str, list[float]] = defaultdict(list)
        for cmd, cwd, expect in cases.values():
            self.run(cmd, cwd, expect)
        for _ in range(runs):
            for name, (cmd, cwd, expect) in cases.items():
                r = self.run(cmd, cwd, expect)
                walls[name].append(r["wall"])
                cpus[name].append(r["cpu"])
                rss[name].append(r["rss_mb"])
        return {
            name: {
                "wall": statistics.median(walls[name]),
                "walls": walls[name],
                "cpu": statistics.median(cpus[name]),
                "rss_mb": max(rss[name]),
            }
            for name in cases
        }


# --- 1. sample granularity vs plain parametrized tests ---------------------------------------------------


def bench_sample_items(runner: Runner, reward_dir: Path, n: int, runs: int) -> dict[str, Any]:
    data = reward_dir / "data" / f"samples_{n}.jsonl"
    write_samples(data, n)
    plain_dir = project(
        runner.workdir / f"plain_{n}",
        {"test_plain.py": PLAIN_TEST.format(reward_dir=str(reward_dir), samples=str(data))},
    )
    cases = {
        "reward": (
            [
                *PYTEST,
                "--reward-samples",
                str(data.relative_to(reward_dir)),
                "--reward-granularity",
                "sample",
                "--reward-threshold",
                "0.5",
            ],
            reward_dir,
            f"{n} passed",
        ),
        "plain": ([*PYTEST, "-p", "no:reward", "test_plain.py"], plain_dir, f"{n} passed"),
    }
    load_before = load()
    res = runner.median_runs(cases, runs)
    return {
        "n": n,
        "runs": runs,
        "reward": res["reward"],
        "plain": res["plain"],
        "ratio": res["reward"]["wall"] / res["plain"]["wall"],
        "load": (load_before, load()),
        "command": shlex.join(cases["reward"][0][1:]).replace(PY, "python"),
    }


# --- 2. file granularity vs a plain loop; peak RSS ------------------------------------------------------


def bench_file_mode(runner: Runner, reward_dir: Path, sizes: list[int], runs: int) -> dict[str, Any]:
    sizes = sorted(sizes)
    biggest = reward_dir / "data" / f"file_{sizes[-1]}.jsonl"
    write_samples(biggest, sizes[-1], {k: reward_dir / "data" / f"file_{k}.jsonl" for k in sizes[:-1]})
    loop = runner.workdir / "plain_loop.py"
    loop.write_text(PLAIN_LOOP.format(reward_dir=str(reward_dir)))
    out: dict[str, Any] = {"runs": runs, "sizes": {}}
    load_before = load()
    for n in sizes:
        data = reward_dir / "data" / f"file_{n}.jsonl"
        cases = {
            "reward": (
                [
                    *PYTEST,
                    "--reward-samples",
                    str(data.relative_to(reward_dir)),
                    "--reward-granularity",
                    "file",
                    "--reward-threshold",
                    "0.5",
                ],
                reward_dir,
                "1 passed",
            ),
            "loop": ([PY, str(loop), str(data)], reward_dir, f"{n} {n}"),
        }
        res = runner.median_runs(cases, runs)
        out["sizes"][n] = {
            "reward": res["reward"],
            "loop": res["loop"],
            "ratio": res["reward"]["wall"] / res["loop"]["wall"],
            "per_sample_us": res["reward"]["wall"] / n * 1e6,
            "loop_per_sample_us": res["loop"]["wall"] / n * 1e6,
        }
        out["command"] = shlex.join(cases["reward"][0][1:])
    out["load"] = (load_before, load())
    return out


# --- 3. decorator overhead -------------------------------------------------------------------------------


def bench_decorator(src: Path | None, number: int, rounds: int = 21) -> dict[str, Any]:
    sys.path.insert(0, str(src or ROOT))
    from pytest_reward import EvaluateResult, Message, reward_function
    from pytest_reward.reward.decorator import get_spec

    def untyped(messages, ground_truth=None, **kwargs):
        text = messages[-1].get("content") or ""
        return EvaluateResult(score=1.0 if text else 0.0, reason="non-empty answer")

    def typed(messages: list[Message], ground_truth=None, **kwargs) -> EvaluateResult:
        text = messages[-1].content or ""
        return EvaluateResult(score=1.0 if text else 0.0, reason="non-empty answer")

    dec_untyped = reward_function(untyped)
    dec_typed = reward_function(typed)
    assert get_spec(dec_typed).coerce_messages and not get_spec(dec_untyped).coerce_messages
    dict_msgs = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "2 + 3 = 5, so the answer is 5."},
    ]
    msg_objs = [Message(**m) for m in dict_msgs]

    def per_call(fn: Any, msgs: Any) -> float:
        # CPU time of this process, not wall time: on a shared machine other processes' bursts then cost
        # nothing (a call's overhead is CPU work either way).
        timer = timeit.Timer(
            "fn(messages=msgs, ground_truth='5')", timer=time.process_time, globals={"fn": fn, "msgs": msgs}
        )
        return min(timer.repeat(repeat=3, number=number)) / number * 1e6

    cases = {
        "untyped, dict messages": (dec_untyped, untyped, dict_msgs, dict_msgs),
        "list[Message], Message objects": (dec_typed, typed, msg_objs, msg_objs),
        "list[Message], dict messages (coerced; info)": (dec_typed, typed, dict_msgs, msg_objs),
    }
    out: dict[str, Any] = {"number": number, "rounds": rounds, "cases": {}}
    for name, (dec, raw, dec_in, raw_in) in cases.items():
        per_call(dec, dec_in)  # warm-up (first-use imports, caches)
        # Paired rounds, raw and decorated back to back (order alternating), so that load changes on a shared
        # machine hit both alike; the figure is the median over rounds.
        raws, decs, ratios = [], [], []
        for i in range(rounds):
            if i % 2:
                d, r = per_call(dec, dec_in), per_call(raw, raw_in)
            else:
                r, d = per_call(raw, raw_in), per_call(dec, dec_in)
            raws.append(r)
            decs.append(d)
            ratios.append(d / r)
        r, d = statistics.median(raws), statistics.median(decs)
        out["cases"][name] = {
            "raw_us": r,
            "decorated_us": d,
            "ratio": statistics.median(ratios),
            "overhead_us": d - r,
            "min_ratio": min(decs) / min(raws),
        }
    return out


# --- 4. start-up overhead --------------------------------------------------------------------------------


def bench_startup(runner: Runner, runs: int) -> dict[str, Any]:
    tiny = project(runner.workdir / "tiny", {"test_tiny.py": TINY_TEST})
    with_plugin = [*PYTEST, "test_tiny.py"]
    without = [*PYTEST, "-p", "no:reward", "test_tiny.py"]
    # Sanity: the plugin really is loaded by default, and really is not with -p no:reward.
    for cmd, present in ((with_plugin, True), (without, False)):
        check = subprocess.run(
            [*cmd, "--help"], cwd=tiny, env=runner.env, capture_output=True, text=True, check=True
        )
        if ("--reward-samples" in check.stdout) != present:
            raise RuntimeError(f"plugin presence check failed for {shlex.join(cmd)}")
    load_before = load()
    hyperfine = shutil.which("hyperfine")
    if hyperfine:
        export = runner.workdir / "hyperfine.json"
        subprocess.run(
            [
                hyperfine,
                "-N",
                "--warmup",
                "3",
                "--runs",
                str(runs),
                "--export-json",
                str(export),
                shlex.join(with_plugin),
                shlex.join(without),
            ],
            cwd=tiny,
            env=runner.env,
            check=True,
            capture_output=True,
        )
        res = json.loads(export.read_text())["results"]
        walls = {"with": res[0]["times"], "without": res[1]["times"]}
        tool = "hyperfine"
        cpus = None
    else:
        walls = {"with": [], "without": []}
        cpus = {"with": [], "without": []}
        for _ in range(3):  # warm-up
            for cmd in (with_plugin, without):
                timed_run(cmd, tiny, runner.env)
        for i in range(runs):
            order = (("with", with_plugin), ("without", without))
            for key, cmd in order if i % 2 == 0 else order[::-1]:
                wall, cpu = timed_run(cmd, tiny, runner.env)
                walls[key].append(wall)
                cpus[key].append(cpu)
        tool = "subprocess loop, order alternating"
    med = {k: statistics.median(v) for k, v in walls.items()}
    best = {k: min(v) for k, v in walls.items()}
    diffs = [a - b for a, b in zip(walls["with"], walls["without"], strict=True)]
    out = {
        "runs": runs,
        "tool": tool,
        "with_ms": med["with"] * 1e3,
        "without_ms": med["without"] * 1e3,
        "diff_ms": (med["with"] - med["without"]) * 1e3,
        "min_diff_ms": (best["with"] - best["without"]) * 1e3,
        "paired_median_diff_ms": statistics.median(diffs) * 1e3,
        "load": (load_before, load()),
        "importtime": importtime(runner.env),
    }
    if cpus is not None:
        out["cpu_with_ms"] = statistics.median(cpus["with"]) * 1e3
        out["cpu_without_ms"] = statistics.median(cpus["without"]) * 1e3
        out["cpu_diff_ms"] = out["cpu_with_ms"] - out["cpu_without_ms"]
    return out


def timed_run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, user + system CPU) seconds of one run of ``cmd``; exit status 0 required."""
    with open(os.devnull, "wb") as devnull:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=devnull, stderr=devnull)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def importtime(env: dict[str, str], top: int = 8) -> dict[str, Any]:
    """Top ``-X importtime`` entries of ``import pytest_reward.plugin``, alone and on top of ``import pytest``."""

    def parse(stderr: str) -> list[tuple[int, int, str]]:
        rows = []
        for line in stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
            if m:
                rows.append((int(m.group(1)), int(m.group(2)), m.group(3)[1:] + m.group(4)))
        return rows

    samples = []
    for _ in range(5):
        proc = subprocess.run(
            [PY, "-X", "importtime", "-c", "import pytest_reward.plugin"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=tempfile.gettempdir(),
        )
        samples.append(parse(proc.stderr))
    best = min(samples, key=lambda rows: next(c for _, c, n in rows if n == "pytest_reward.plugin"))
    alone = sorted(best, key=lambda r: -r[1])[:top]
    # On top of an already imported pytest (what a pytest run pays): split the output at a marker.
    incr_runs = []
    for _ in range(5):
        proc = subprocess.run(
            [
                PY,
                "-X",
                "importtime",
                "-c",
                "import pytest, sys; sys.stderr.write('@@mark\\n'); import pytest_reward.plugin",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=tempfile.gettempdir(),
        )
        incr_runs.append(parse(proc.stderr.split("@@mark\n", 1)[1]))
    incr = min(incr_runs, key=lambda rows: sum(s for s, _, _ in rows))
    return {
        "alone_top": alone,
        "incremental_total_ms": sum(s for s, _, _ in incr) / 1e3,
        "incremental_top": sorted(incr, key=lambda r: -r[0])[:top],
    }


# --- 5. -n 2 vs -n 0 on a CPU-bound function ------------------------------------------------------------


def calibrate_loops(ms: float) -> int:
    def busy(loops: int) -> None:
        acc = 0
        for i in range(loops):
            acc += i * i % 7

    probe = 100_000
    best = min(timeit.repeat(lambda: busy(probe), number=1, repeat=15))
    return max(1000, int(probe * ms / 1e3 / best))


def bench_xdist(runner: Runner, n: int, ms_list: list[float], runs: int) -> dict[str, Any]:
    """``-n 2`` vs ``-n 0`` for each per-sample cost in ``ms_list`` (the first is the one with a target), and the
    fixed cost of xdist: the same runs on a 2-sample file."""
    out: dict[str, Any] = {"n": n, "runs": runs, "cases": {}, "load": (load(), 0.0)}
    for ms in ms_list:
        loops = calibrate_loops(ms)
        cpu_dir = project(
            runner.workdir / f"cpu_{ms:g}ms", {"rewards.py": BUSY_REWARDS.format(loops=loops, ms=ms)}
        )
        (cpu_dir / "data").mkdir(exist_ok=True)
        cases = {}
        for size in (n, 2) if ms == ms_list[0] else (n,):
            data = cpu_dir / "data" / f"samples_{size}.jsonl"
            write_samples(data, size)
            base = [
                *PYTEST,
                "--reward-samples",
                str(data.relative_to(cpu_dir)),
                "--reward-granularity",
                "sample",
            ]
            for workers in (0, 2):
                cases[f"{size}-n{workers}"] = ([*base, "-n", str(workers)], cpu_dir, f"{size} passed")
        if ms == ms_list[0]:
            tiny = project(runner.workdir / "tiny_xdist", {"test_tiny.py": TINY_TEST})
            for workers in (0, 2):
                cases[f"tiny-n{workers}"] = (
                    [*PYTEST, "-p", "no:reward", "-n", str(workers), "test_tiny.py"],
                    tiny,
                    "1 passed",
                )
        res = runner.median_runs(cases, runs)
        out["cases"][ms] = {
            "loops": loops,
            "n0": res[f"{n}-n0"],
            "n2": res[f"{n}-n2"],
            "speedup": res[f"{n}-n0"]["wall"] / res[f"{n}-n2"]["wall"],
        }
        if "2-n0" in res:
            out["fixed"] = {"n0": res["2-n0"], "n2": res["2-n2"]}
            out["plain_fixed"] = {"n0": res["tiny-n0"], "n2": res["tiny-n2"]}
            out["command"] = shlex.join(cases[f"{n}-n2"][0][1:])
    out["ms"] = ms_list[0]
    out["speedup"] = out["cases"][ms_list[0]]["speedup"]
    out["load"] = (out["load"][0], load())
    return out


VERBOSE_REWARDS = """
from pytest_reward import EvaluateResult, reward_function


@reward_function
def verbose(messages, ground_truth=None, **kwargs):
    return EvaluateResult(score=1.0, reason="x" * {size})
"""


def bench_memory(runner: Runner, n: int, reason_bytes: int, runs: int) -> dict[str, Any]:
    """Peak RSS of a run whose reward returns a ``reason_bytes`` reason on each of ``n`` samples: one item per
    sample vs one item for the file (the reference), with and without ``--reward-report``."""
    directory = project(runner.workdir / "verbose", {"rewards.py": VERBOSE_REWARDS.format(size=reason_bytes)})
    data = directory / "samples.jsonl"
    write_samples(data, n)
    cases = {}
    for report in (False, True):
        for gran in ("sample", "file"):
            cmd = [*PYTEST, "--reward-samples", "samples.jsonl", "--reward-granularity", gran]
            if report:
                cmd += ["--reward-report", f"out-{gran}"]
            cases[f"{gran}{'-report' if report else ''}"] = (
                cmd,
                directory,
                f"{n} passed" if gran == "sample" else "1 passed",
            )
    res = runner.median_runs(cases, runs)
    out: dict[str, Any] = {"n": n, "reason_bytes": reason_bytes, "runs": runs, "cases": res}
    out["ratio"] = res["sample"]["rss_mb"] / res["file"]["rss_mb"]
    out["ratio_report"] = res["sample-report"]["rss_mb"] / res["file-report"]["rss_mb"]
    return out


# --- profiling -------------------------------------------------------------------------------------------


def _area(filename: str) -> str:
    if "/pytest_reward/" in filename or filename.startswith("pytest_reward/"):
        return "pytest_reward/" + Path(filename).name
    for key in ("_pytest", "pluggy", "pydantic", "xdist", "execnet", "rich", "numpy"):
        if f"/{key}/" in filename or f"/{key}_core/" in filename:
            return key
    if filename.startswith("~") or filename == "{built-in}":
        return "builtins (C)"
    if "json" in filename:
        return "json"
    return "stdlib/other"


def _frame_key(frame: str) -> tuple[str, str]:
    """``func (path/file.py:123)`` → (``file.py(func)``, path) without the line number."""
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame, ""
    name, path = m.groups()
    return f"{Path(path).name}({name})", path


def _py_spy_profile(py_spy: str, runner: Runner, cmd: list[str], cwd: Path, expect: str) -> dict[str, Any]:
    out = runner.workdir / f"py-spy-{runner.count + 1}.txt"
    runner.run([py_spy, "record", "-r", "500", "-f", "raw", "-o", str(out), "--", *cmd], cwd, expect)
    self_t: dict[str, float] = defaultdict(float)
    incl: dict[str, float] = defaultdict(float)
    areas: dict[str, float] = defaultdict(float)
    ours: set[str] = set()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        keys = [_frame_key(f) for f in stack.split(";")]
        self_t[keys[-1][0]] += count
        areas[_area(keys[-1][1])] += count
        for key in {k for k, _ in keys}:
            incl[key] += count
        ours.update(k for k, path in keys if "pytest_reward" in path)
    plugin = sorted(((k, v) for k, v in incl.items() if k in ours), key=lambda kv: -kv[1])
    return {
        "tool": "py-spy (500 Hz sampling)",
        "total_s": total / 500,
        "areas": sorted(((a, t / total) for a, t in areas.items()), key=lambda x: -x[1]),
        "top_self": [(k, v / total, None) for k, v in sorted(self_t.items(), key=lambda kv: -kv[1])[:18]],
        "plugin_inclusive": [(k, v / total, None) for k, v in plugin[:18]],
    }


def _cprofile(runner: Runner, cmd: list[str], cwd: Path, expect: str, top: int = 18) -> dict[str, Any]:
    prof = runner.workdir / f"profile-{runner.count + 1}.prof"
    runner.run([PY, "-m", "cProfile", "-o", str(prof), *cmd[1:]], cwd, expect)
    stats = pstats.Stats(str(prof))
    total = stats.total_tt  # type: ignore[attr-defined]
    by_area: dict[str, float] = defaultdict(float)
    rows = []
    for (filename, lineno, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        area = _area(filename)
        by_area[area] += tt
        rows.append((tt, ct, nc, f"{Path(filename).name}:{lineno}({name})", area))
    plugin_cum = sorted((r for r in rows if r[4].startswith("pytest_reward")), key=lambda r: -r[1])[:top]
    return {
        "tool": "cProfile",
        "total_s": total,
        "areas": sorted(((a, t / total) for a, t in by_area.items()), key=lambda x: -x[1]),
        "top_self": [
            (name, tt / total, nc) for tt, _ct, nc, name, _ in sorted(rows, key=lambda r: -r[0])[:top]
        ],
        "plugin_inclusive": [(name, ct / total, nc) for _tt, ct, nc, name, _ in plugin_cum],
    }


def profile_run(runner: Runner, cmd: list[str], cwd: Path, expect: str, py_spy: str | None) -> dict[str, Any]:
    """Profile one pytest command: self time by area, top functions, pytest_reward functions inclusive."""
    if py_spy:
        return _py_spy_profile(py_spy, runner, cmd, cwd, expect)
    return _cprofile(runner, cmd, cwd, expect)


def print_profile(title: str, prof: dict[str, Any]) -> None:
    print(f"\n### profile ({prof['tool']}): {title} (total {prof['total_s']:.2f} s profiled)")
    print("self time by area: " + ", ".join(f"{a} {p:.1%}" for a, p in prof["areas"][:12]))
    print("top functions by self time:")
    for name, share, calls in prof["top_self"]:
        print(f"  {share:6.1%}  {calls if calls is not None else '':>9}  {name}")
    print("pytest_reward functions, inclusive time:")
    for name, share, calls in prof["plugin_inclusive"]:
        print(f"  {share:6.1%}  {calls if calls is not None else '':>9}  {name}")


# --- report ----------------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def table_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    if "sample" in report:
        s = report["sample"]
        rows.append(
            (
                f"1. `sample` items, {s['n']:,} samples, whole pytest wall (median of {s['runs']})",
                f"{s['reward']['wall']:.2f} s (CPU {s['reward']['cpu']:.2f} s)",
                f"{s['plain']['wall']:.2f} s (CPU {s['plain']['cpu']:.2f} s), parametrized test",
                f"{s['ratio']:.2f}× (CPU {s['reward']['cpu'] / s['plain']['cpu']:.2f}×)",
                "≤ 1.2×",
                verdict(s["ratio"] <= 1.2),
            )
        )
    if "file" in report:
        f = report["file"]
        sizes = sorted(f["sizes"])
        for n in sizes:
            r = f["sizes"][n]
            rows.append(
                (
                    f"2. `file` item, {n:,} samples, wall (median of {f['runs']})",
                    f"{r['reward']['wall']:.2f} s ({r['per_sample_us']:.1f} µs/sample; CPU {r['reward']['cpu']:.2f} s)",
                    f"{r['loop']['wall']:.2f} s ({r['loop_per_sample_us']:.1f} µs/sample; CPU {r['loop']['cpu']:.2f} s), plain loop",
                    f"{r['ratio']:.2f}× (CPU {r['reward']['cpu'] / r['loop']['cpu']:.2f}×)",
                    "≤ 3×" if n == sizes[-1] else "(info)",
                    verdict(r["ratio"] <= 3) if n == sizes[-1] else "",
                )
            )
        rss = [f["sizes"][n]["reward"]["rss_mb"] for n in sizes]
        per_sample = (rss[-1] - rss[0]) * 2**20 / max(1, sizes[-1] - sizes[0])
        rows.append(
            (
                "2. peak RSS of pytest, `file` item, " + " / ".join(f"{n:,}" for n in sizes),
                " / ".join(f"{x:.0f} MB" for x in rss),
                " / ".join(f"{f['sizes'][n]['loop']['rss_mb']:.0f} MB" for n in sizes) + " (plain loop)",
                f"{rss[-1] - rss[0]:+.0f} MB = {per_sample:.0f} B per extra sample",
                "< 300 MB, flat (< 64 B/sample: no object kept per sample)",
                verdict(max(rss) < 300 and per_sample < 64),
            )
        )
    if "memory" in report:
        m = report["memory"]
        for suffix, label, key in (("", "", "ratio"), ("-report", " with `--reward-report`", "ratio_report")):
            sample, file = m["cases"][f"sample{suffix}"], m["cases"][f"file{suffix}"]
            rows.append(
                (
                    f"6. peak RSS, {m['n']} `sample` items whose reward returns a {m['reason_bytes'] / 2**20:.0f} MB "
                    f"reason{label} (median of {m['runs']})",
                    f"{sample['rss_mb']:.0f} MB",
                    f"{file['rss_mb']:.0f} MB, one `file` item",
                    f"{m[key]:.2f}×",
                    "≤ 1.5×",
                    verdict(m[key] <= 1.5),
                )
            )
    if "decorator" in report:
        for name, c in report["decorator"]["cases"].items():
            info = "info" in name
            rows.append(
                (
                    f"3. decorated vs raw call, {name} (median of {report['decorator']['rounds']} paired rounds)",
                    f"{c['decorated_us']:.2f} µs",
                    f"{c['raw_us']:.2f} µs",
                    f"{c['ratio']:.2f}× ({c['overhead_us']:+.2f} µs; best vs best {c['min_ratio']:.2f}×)",
                    "(info)" if info else "≤ 1.5×",
                    "" if info else verdict(c["ratio"] <= 1.5),
                )
            )
    if "startup" in report:
        s = report["startup"]
        cpu = (
            f"; CPU {s['cpu_with_ms']:.0f} vs {s['cpu_without_ms']:.0f} ms: {s['cpu_diff_ms']:+.0f} ms"
            if "cpu_diff_ms" in s
            else ""
        )
        rows.append(
            (
                f"4. start-up, one-test run, plugin loaded vs `-p no:reward` (median of {s['runs']})",
                f"{s['with_ms']:.0f} ms",
                f"{s['without_ms']:.0f} ms",
                f"{s['diff_ms']:+.0f} ms (paired median {s['paired_median_diff_ms']:+.0f}, best vs best"
                f" {s['min_diff_ms']:+.0f}{cpu})",
                "≤ 50 ms",
                verdict(s["diff_ms"] <= 50),
            )
        )
    if "xdist" in report:
        x = report["xdist"]
        for ms, c in x["cases"].items():
            first = ms == x["ms"]
            rows.append(
                (
                    f"5. `-n 2` vs `-n 0`, {x['n']} samples × ~{ms:g} ms CPU (median of {x['runs']})",
                    f"{c['n2']['wall']:.2f} s (CPU {c['n2']['cpu']:.2f} s, all processes)",
                    f"{c['n0']['wall']:.2f} s (CPU {c['n0']['cpu']:.2f} s), `-n 0`",
                    f"{c['speedup']:.2f}× speed-up",
                    "≥ 1.7×" if first else "(info)",
                    verdict(c["speedup"] >= 1.7) if first else "",
                )
            )
        if "fixed" in x:
            f = x["fixed"]
            rows.append(
                (
                    "5. fixed cost: the same, 2 samples",
                    f"{f['n2']['wall']:.2f} s (CPU {f['n2']['cpu']:.2f} s)",
                    f"{f['n0']['wall']:.2f} s (CPU {f['n0']['cpu']:.2f} s), `-n 0`",
                    f"{f['n2']['wall'] - f['n0']['wall']:+.2f} s for `-n 2`",
                    "(info)",
                    "",
                )
            )
            p = x["plain_fixed"]
            rows.append(
                (
                    "5. fixed cost of xdist alone: one plain test, `-p no:reward`",
                    f"{p['n2']['wall']:.2f} s (CPU {p['n2']['cpu']:.2f} s)",
                    f"{p['n0']['wall']:.2f} s (CPU {p['n0']['cpu']:.2f} s), `-n 0`",
                    f"{p['n2']['wall'] - p['n0']['wall']:+.2f} s for `-n 2`",
                    "(info)",
                    "",
                )
            )
    return rows


def render(report: dict[str, Any], command: str) -> str:
    lines = [
        SECTION,
        "",
        f"- Date: {report['date']}",
        f"- Machine: {report['machine']}",
        f"- Code measured: `pytest_reward` at {report['code']}",
        f"- Command: `{command}`",
        "- Every pytest run is a fresh subprocess: `python -m pytest -q -p no:cacheprovider`, no ini options"
        " (a temporary project with an empty `pytest.ini`); cases are interleaved run by run. Samples: two-turn"
        " arithmetic chats with `ground_truth`, no `id`; trivial function: `EvaluateResult(score=1.0 if"
        " messages[-1]['content'] else 0.0, ...)`, `--reward-threshold 0.5` (the references assert the same).",
        "",
        "| benchmark | pytest-reward | reference | ratio | target | |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report)]
    lines.append("")
    if "startup" in report:
        imp = report["startup"]["importtime"]
        lines.append(
            "`python -X importtime -c 'import pytest_reward.plugin'`, top cumulative entries (µs, best of 5): "
            + ", ".join(f"`{name.strip()}` {cum:,}" for _s, cum, name in imp["alone_top"][:6])
            + f". On top of an imported pytest, the plugin's own imports take {imp['incremental_total_ms']:.1f} ms"
            " (self time: "
            + ", ".join(f"`{name.strip()}` {s / 1e3:.1f} ms" for s, _c, name in imp["incremental_top"][:5])
            + ")."
        )
        lines.append("")
    loads = {k: report[k]["load"] for k in ("sample", "file", "startup", "xdist") if k in report}
    if loads:
        lines.append(
            "Load average (1 min) before → after each benchmark, on "
            f"{os.cpu_count()} cores (the machine is shared): "
            + ", ".join(f"{k} {a:.1f} → {b:.1f}" for k, (a, b) in loads.items())
            + "."
        )
        lines.append("")
    if loads and max(max(pair) for pair in loads.values()) > 1.5 * (os.cpu_count() or 1):
        lines.append(
            "The load average was well above the core count: other processes competed for the CPU, so wall-time"
            " figures are inflated and noisy (CPU-time figures much less so), and `-n 2` gains little: with Linux"
            " autogroup scheduling each session gets its share of the cores however many processes it runs."
        )
        lines.append("")
    for extra in report.get("notes", []):
        lines += [extra, ""]
    return "\n".join(lines)


def print_table(report: dict[str, Any]) -> None:
    rows = [("benchmark", "pytest-reward", "reference", "ratio", "target", ""), *table_rows(report)]
    widths = [max(len(r[i].replace("*", "")) for r in rows) for i in range(6)]
    print()
    for j, row in enumerate(rows):
        print("  ".join(cell.replace("*", "").ljust(w) for cell, w in zip(row, widths, strict=True)))
        if j == 0:
            print("  ".join("-" * w for w in widths))


# --- main ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--measure"]:
        return measure_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, one run each")
    parser.add_argument(
        "--only", default="1,2,3,4,5,6", help="comma-separated benchmark numbers (default all)"
    )
    parser.add_argument("--runs", type=int, help="runs per pytest case (default 3; quick 1)")
    parser.add_argument("--samples", type=int, help="benchmark 1 samples (default 10000; quick 500)")
    parser.add_argument(
        "--file-samples", help="benchmark 2 sizes, comma-separated (default 100000,1000000; quick 5000,20000)"
    )
    parser.add_argument("--startup-runs", type=int, help="runs per case of benchmark 4 (default 40; quick 5)")
    parser.add_argument("--cpu-samples", type=int, help="benchmark 5 samples (default 400; quick 40)")
    parser.add_argument(
        "--cpu-ms",
        default="5,50",
        help="CPU ms per sample in benchmark 5, comma-separated; the first has the target (default 5,50)",
    )
    parser.add_argument("--calls", type=int, help="timeit calls per repetition (default 20000; quick 2000)")
    parser.add_argument("--profile", action="store_true", help="cProfile the pytest runs of 1 and 2, split 5")
    parser.add_argument(
        "--profile-samples", type=int, default=10_000, help="samples of the profiled `sample` runs"
    )
    parser.add_argument(
        "--profile-file-samples", type=int, default=200_000, help="samples of the profiled `file` run"
    )
    parser.add_argument("--py-spy", help="py-spy executable for --profile (default: on PATH; else cProfile)")
    parser.add_argument("--workdir", type=Path, help="where data and projects go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--ref",
        default="HEAD",
        help="git revision of pytest_reward/ to measure (exported to the work dir; default HEAD), "
        "or 'worktree' for the installed working tree as it is",
    )
    parser.add_argument("--results", type=Path, help="markdown file whose issue-3 section is replaced")
    parser.add_argument("--json", type=Path, help="also write every measurement (all runs) to this JSON file")
    args = parser.parse_args(argv)
    q = args.quick
    runs = args.runs or (1 if q else 3)
    n_sample = args.samples or (500 if q else 10_000)
    sizes = [int(x) for x in (args.file_samples or ("5000,20000" if q else "100000,1000000")).split(",")]
    startup_runs = args.startup_runs or (5 if q else 40)
    cpu_samples = args.cpu_samples or (40 if q else 400)
    calls = args.calls or (2000 if q else 20_000)
    only = {int(x) for x in args.only.split(",")}

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-core-"))
    workdir.mkdir(parents=True, exist_ok=True)
    src, code = snapshot(args.ref, workdir / "src")
    runner = Runner(workdir, src)
    where = subprocess.run(
        [PY, "-c", "import pytest_reward.plugin as p; print(p.__file__)"],
        env=runner.env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if src is not None and not where.startswith(str(src)):
        raise RuntimeError(f"the snapshot is not the imported package: {where}")
    reward_dir = project(workdir / "reward", {"rewards.py": TRIVIAL_REWARDS})
    (reward_dir / "data").mkdir(exist_ok=True)
    report: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "code": code,
    }
    print(f"machine: {report['machine']}; code: {code}; work dir {workdir}; load {load():.2f}", flush=True)
    try:
        if 3 in only:
            print("3. decorator overhead ...", flush=True)
            report["decorator"] = bench_decorator(src, calls)
        if 1 in only:
            print(
                f"1. sample items vs parametrized tests, {n_sample:,} samples × {runs} runs ...", flush=True
            )
            report["sample"] = bench_sample_items(runner, reward_dir, n_sample, runs)
        if 2 in only:
            print(f"2. file item vs plain loop, {sizes} samples × {runs} runs ...", flush=True)
            report["file"] = bench_file_mode(runner, reward_dir, sizes, runs)
        if 4 in only:
            print(f"4. start-up, {startup_runs} runs per case ...", flush=True)
            report["startup"] = bench_startup(runner, startup_runs)
        if 6 in only:
            print(f"6. peak RSS, {cpu_samples} samples × 1 MB reasons × {runs} runs ...", flush=True)
            report["memory"] = bench_memory(runner, cpu_samples, 1 << 20, runs)
        if 5 in only:
            cpu_ms = [float(x) for x in args.cpu_ms.split(",")]
            print(f"5. -n 2 vs -n 0, {cpu_samples} samples × {cpu_ms} ms × {runs} runs ...", flush=True)
            report["xdist"] = bench_xdist(runner, cpu_samples, cpu_ms, runs)
        print_table(report)
        if "startup" in report:
            imp = report["startup"]["importtime"]
            print(
                "\npython -X importtime -c 'import pytest_reward.plugin' (self µs | cumulative µs | module):"
            )
            for s, c, name in imp["alone_top"]:
                print(f"  {s:>7} | {c:>7} | {name}")
            print(
                f"plugin imports on top of pytest: {imp['incremental_total_ms']:.1f} ms; largest self times:"
            )
            for s, c, name in imp["incremental_top"]:
                print(f"  {s:>7} | {c:>7} | {name}")
        if args.profile:
            n = args.profile_samples
            data = reward_dir / "data" / f"samples_{n}.jsonl"
            if not data.exists():
                write_samples(data, n)
            rel = str(data.relative_to(reward_dir))
            base = [*PYTEST, "--reward-samples", rel, "--reward-threshold", "0.5", "--reward-granularity"]
            py_spy = args.py_spy or shutil.which("py-spy")
            plain_dir = runner.workdir / f"plain_{n}"
            if not plain_dir.exists():
                project(
                    plain_dir,
                    {"test_plain.py": PLAIN_TEST.format(reward_dir=str(reward_dir), samples=str(data))},
                )
            print_profile(
                f"plain parametrized reference, {n:,} samples",
                profile_run(
                    runner, [*PYTEST, "-p", "no:reward", "test_plain.py"], plain_dir, f"{n} passed", py_spy
                ),
            )
            print_profile(
                f"`sample` items, {n:,} samples",
                profile_run(runner, [*base, "sample"], reward_dir, f"{n} passed", py_spy),
            )
            nf = args.profile_file_samples
            fdata = reward_dir / "data" / f"file_{nf}.jsonl"
            if not fdata.exists():
                write_samples(fdata, nf)
            fcmd = [
                *PYTEST,
                "--reward-samples",
                str(fdata.relative_to(reward_dir)),
                "--reward-threshold",
                "0.5",
            ]
            print_profile(
                f"`file` item, {nf:,} samples",
                profile_run(runner, [*fcmd, "--reward-granularity", "file"], reward_dir, "1 passed", py_spy),
            )
        if args.json:
            args.json.write_text(json.dumps(report, indent=1, default=str))
        if args.results:
            command = ".venv/bin/python bench/bench_core.py " + shlex.join(argv)
            write_section(args.results, SECTION, render(report, command.strip()))
            print(f"\nwrote {SECTION!r} to {args.results}")
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
