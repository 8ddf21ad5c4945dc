"""Every way of running a project gives the same results: sample or file items, scoring in threads, in worker
processes or on Ray, under a per-call timeout, under pytest-xdist, with probes or without. One reference project, run once per mode; its
verdicts, pytest outcomes, summary numbers, report rows, stored run and the terminal's table and gate lines must
be those of the reference run, less what legitimately differs: times, durations, the command line. Sample items
and file items also differ in pytest's outcomes (an item per sample or per file), in whether the sample count is
known before the run, and in how the previews' random picks are drawn; those are compared between modes with the
same kind of items only.

The reference run itself is checked against values worked out by hand (``test_the_reference_run``), so a mode
cannot agree with a reference that is wrong."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from .conftest import msgs
from .test_executors_ray import _ray_env, ray_tmp  # noqa: F401  (ray_tmp: the fixture of the ray mode)

# Four functions: a hackable grader with metrics and probes (threshold 0.5), a score read from each sample with an
# aggregate gate (mean, with a bootstrap interval), an async function that raises on one answer, and one whose
# reason is longer than reports keep (results.jsonl keeps it whole). Probes are on unless MODES_NO_PROBES is set.
REWARDS = """
    import asyncio, os

    import pytest
    from pytest_reward import EvaluateResult, MetricResult, reward_function

    PROBES = {} if os.environ.get("MODES_NO_PROBES") else {"probes": ["empty", "stuffing"]}

    @pytest.mark.reward(threshold=0.5, **PROBES)
    @reward_function
    def contains(messages, ground_truth=None, **kwargs):
        answer = messages[-1]["content"]
        ok = ground_truth is not None and str(ground_truth) in answer
        return EvaluateResult(
            score=1.0 if ok else 0.0,
            reason="found the answer" if ok else "no answer",
            metrics={"length": MetricResult(score=min(1.0, len(answer) / 10), reason="length / 10")},
        )

    @pytest.mark.reward(mean=0.7, confidence=0.9)
    @reward_function
    def graded(messages, value=0.0, **kwargs):
        return {"score": value, "reason": "as given"}

    @reward_function
    async def touchy(messages, **kwargs):
        await asyncio.sleep(0)
        if "boom" in messages[-1]["content"]:
            raise ValueError("boom in the answer")
        return {"score": 1.0}

    @reward_function
    def verbose(messages, **kwargs):
        n = len(messages[-1]["content"])
        return {"score": 0.9, "reason": "word " * (1000 if n == 7 else 1)}
"""

VALUES = [0.5, 0.9, 0.7, 0.8, 0.6, 0.75]


def rows() -> list[Any]:
    out: list[Any] = []
    for i, value in enumerate(VALUES):
        answer = "boom" if i == 3 else f"it is {i * 7}"
        out.append({"messages": msgs(f"{i} times 7?", answer), "ground_truth": str(i * 7), "value": value})
    out[1] = {**out[1], "id": "seven"}
    out[2]["messages"] = msgs("2 times 7?", "I do not know")  # a failing sample for `contains`
    out.insert(3, "{not json")  # a malformed line: an error in every function
    out.append(out[0])  # an exact duplicate of the first line
    out.append({**out[0], "messages": msgs("0 times 7?", "it is 0 ")})  # the same question, another answer
    return out


def write_project(project) -> None:
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", rows())


# --- running a mode and reading what it left ----------------------------------------------------------------------

SUBPROCESS = "subprocess"  # run in a new process (pytest-xdist)
RAY = "<ray>"  # run in a new process with a Ray of the test's own (not "ray": that is an option value)
NO_PROBES = "no-probes"  # the project without its probes

MODES = [
    pytest.param(["--reward-granularity", "sample"], id="sample"),
    pytest.param(["--reward-granularity", "file"], id="file"),
    pytest.param(["--reward-granularity", "file", "--reward-workers", "3"], id="file-threads"),
    # a per-call timeout: calls and probes run under a watchdog
    pytest.param(["--reward-granularity", "sample", "--reward-timeout", "60"], id="sample-timeout"),
    pytest.param(
        ["--reward-granularity", "file", "--reward-executor", "process", "--reward-workers", "2"],
        id="process",
    ),
    pytest.param(["--reward-granularity", "sample", "-n", "2", "-p", "xdist", SUBPROCESS], id="xdist-sample"),
    pytest.param(["--reward-granularity", "file", "-n", "2", "-p", "xdist", SUBPROCESS], id="xdist-file"),
    pytest.param(
        [
            "--reward-granularity",
            "file",
            "--reward-executor",
            "process",
            "--reward-workers",
            "2",
            "-n",
            "2",
            "-p",
            "xdist",
            SUBPROCESS,
        ],
        id="process-xdist",
    ),
    pytest.param(["--reward-granularity", "sample", NO_PROBES], id="sample-no-probes"),
    pytest.param(["--reward-granularity", "file", NO_PROBES], id="file-no-probes"),
    pytest.param(
        ["--reward-granularity", "file", "--reward-executor", "ray", "--reward-workers", "2", RAY],
        id="ray",
        marks=pytest.mark.ray,
    ),
]

_VOLATILE = ("duration", "generated_at", "args", "name", "time")  # times and the command line
_HTML_TIME = re.compile(r'<div class="muted">[0-9.]+ (?:ns|µs|ms|s)</div>')
_HTML_META = re.compile(r"<span>(?:generated|args) <b class=\"mono\">[^<]*</b></span>")


def _scrub(value: Any, drop: tuple[str, ...] = _VOLATILE) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_scrub(v, drop) for v in value]
    return value


def _terminal(text: str) -> dict[str, Any]:
    lines = text.splitlines()
    return {
        "summaries": text.count("reward summary"),
        "table": [line for line in lines if re.match(r"(contains|graded|touchy|verbose) +\| ", line)],
        "verdicts": [line for line in lines if re.match(r"(FAIL|PASS) ", line)],
    }


def _outcomes(text: str) -> dict[str, int]:
    """pytest's last line, "5 failed, 30 passed in 1.2s", as {"failed": 5, "passed": 30}."""
    last = text.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (failed|passed|errors?|skipped)", last)}


def run_mode(project, request, monkeypatch, mode: list[str], tag: str) -> dict[str, Any]:
    """Run the project in ``mode``; return what it left, normalised: ``common`` is what every mode must agree on,
    ``items`` what only modes with the same kind of items share (pytest's outcomes, the previews' seeded picks)."""
    if NO_PROBES in mode:
        monkeypatch.setenv("MODES_NO_PROBES", "1")
    else:
        monkeypatch.delenv("MODES_NO_PROBES", raising=False)
    args = [a for a in mode if a not in (SUBPROCESS, RAY, NO_PROBES)]
    args = ["--reward-samples", "s.jsonl", "--reward-report", f"out-{tag}", f"--reward-save={tag}", *args]
    if RAY in mode:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
            cwd=project.path, env=_ray_env(request.getfixturevalue("ray_tmp")), capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        ret, text = proc.returncode, proc.stdout
    else:
        result = project.run_subprocess(*args) if SUBPROCESS in mode else project.run(*args)
        ret, text = result.ret, result.stdout.str()
    out = project.path / f"out-{tag}"
    (stored,) = (project.path / ".reward").glob(f"*_{tag}.json")
    summary = _scrub(json.loads((out / "summary.json").read_text()))
    html = (out / "report.html").read_text()
    return {
        "common": {
            "exit status": int(ret),
            "terminal": _terminal(text),
            "results.jsonl": [
                _scrub(json.loads(line)) for line in (out / "results.jsonl").read_text().splitlines()
            ],
            # sample items know the number of samples before the run ("expected"), file items after it; the
            # previews' random picks come from all outcomes (sample items) or a reservoir (file items)
            "summary.json": _scrub(summary, ("expected", "preview")),
            "stored run": _scrub(json.loads(stored.read_text())),
        },
        "items": {
            "outcomes": _outcomes(text),
            "summary.json": summary,
            "report.html": _HTML_META.sub("", _HTML_TIME.sub("", html)),
        },
        "text": text,
    }


def without_probes(seen: dict[str, Any]) -> dict[str, Any]:
    """What a run of the project without probes must give, from the run with them."""
    common = json.loads(json.dumps(seen["common"]))
    common["summary.json"]["probes"] = []
    del common["stored run"]["probes"]
    terminal = common["terminal"]
    terminal["table"] = [
        line for line in terminal["table"] if "s.jsonl | empty" not in line and "stuffing" not in line
    ]
    terminal["verdicts"] = [line for line in terminal["verdicts"] if "probe" not in line]
    return common


@pytest.fixture(scope="module")
def references() -> dict[str, dict[str, Any]]:
    """The reference runs (sample items, file items), made once by the first test that needs each."""
    return {}


def reference(project, request, monkeypatch, references, granularity: str) -> dict[str, Any]:
    if granularity not in references:
        references[granularity] = run_mode(
            project, request, monkeypatch, ["--reward-granularity", granularity], f"ref-{granularity}"
        )
    return references[granularity]


# --- the reference, by hand --------------------------------------------------------------------------------------


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_the_reference_run(project, request, monkeypatch, references, granularity):
    write_project(project)
    ref = reference(project, request, monkeypatch, references, granularity)
    common = ref["common"]
    # sample items: 4 functions x 8 samples, one item for the bad line, one per probe; file items: one per function
    # (each fails: the bad line is an error in each) and one per probe. Failing: the bad line, `contains` on
    # lines 3 and 5, `touchy` on line 5 (it raises), and the stuffing probe (a substring grader is hackable).
    expected = {"sample": {"failed": 5, "passed": 30}, "file": {"failed": 5, "passed": 1}}[granularity]
    assert ref["items"]["outcomes"] == expected, ref["text"]
    assert common["exit status"] == 1
    # n counts the bad line (an error, the lowest score); graded's p10 interpolates 0.8 of the way from 0 to 0.5;
    # touchy and verbose declare no gate, so they have no pass rate (their errors still fail them)
    assert common["terminal"]["summaries"] == 1
    assert [re.sub(r" +", " ", line) for line in common["terminal"]["table"][:4]] == [
        "contains | s.jsonl | 9 (1 err) | 0.667 | 0.000 | 0.000 | 66.7% | [0.333, 0.889] | FAIL",
        "graded | s.jsonl | 9 (1 err) | 0.583 | 0.000 | 0.400 | 88.9% | [0.406, 0.722] | FAIL",
        "touchy | s.jsonl | 9 (2 err) | 0.778 | 0.000 | 0.000 | – | [0.444, 1.000] | FAIL",
        "verbose | s.jsonl | 9 (1 err) | 0.800 | 0.000 | 0.720 | – | [0.600, 0.900] | FAIL",
    ]
    verdicts = common["terminal"]["verdicts"]
    assert len(verdicts) == 2  # each said once, on the controller
    assert verdicts[0].startswith(
        "FAIL probe stuffing of contains on s.jsonl: 8 of 8 mutated responses break"
    )
    assert re.fullmatch(
        r"FAIL graded on s\.jsonl: mean 0\.5833 \(CI lower bound 0\.\d+, 90% bootstrap \(B=2000, seed=0\)\) < 0\.7",
        verdicts[1],
    )
    summary = common["summary.json"]
    assert summary["verdict"] == "FAIL" and summary["exitstatus"] == 1
    graded = next(g for g in summary["groups"] if g["function"] == "graded")["summary"]
    assert (graded["n"], graded["n_errors"], graded["n_fail"]) == (9, 1, 1)
    assert graded["mean"] == pytest.approx((0.5 + 0.9 + 0.7 + 0.8 + 0.6 + 0.75 + 0.5 + 0.5) / 9)
    probes = {p["probe"]: (p["checked"], p["broken"], p["verdict"]) for p in summary["probes"]}
    assert probes == {"empty": (8, 0, "PASS"), "stuffing": (8, 8, "FAIL")}
    # results.jsonl: every row in file order, the long reason whole (reports keep an excerpt)
    rows = common["results.jsonl"]
    for function in ("contains", "graded", "touchy", "verbose"):
        assert [r["line"] for r in rows if r["function"] == function] == list(range(1, 10))
    (long,) = [r for r in rows if r["function"] == "verbose" and r["id"] == "seven"]
    assert long["reason"] == "word " * 1000
    # stored keys: what was asked, duplicates numbered in file order, an id where there is one
    (keyed,) = {  # every function's samples under the same keys
        json.dumps({k: (e["line"], e["response"]) for k, e in g["samples"].items()}, sort_keys=True)
        for g in common["stored run"]["groups"]
    }
    by_line = {line: (k, response) for k, (line, response) in json.loads(keyed).items()}
    first = by_line[1][0]
    assert first.startswith("q:") and by_line[8][0] == first + "#2" and by_line[9][0] == first + "#3"
    assert by_line[2][0] == "id:seven" and by_line[4] == ("line:4", None)
    assert by_line[1][1] == by_line[8][1] != by_line[9][1]  # the same answer, then another one


# --- every mode against the reference ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_gives_the_reference_results(project, request, monkeypatch, references, mode):
    write_project(project)
    granularity = mode[mode.index("--reward-granularity") + 1]
    sample_items = reference(project, request, monkeypatch, references, "sample")
    same_items = reference(project, request, monkeypatch, references, granularity)
    got = run_mode(project, request, monkeypatch, mode, "mode")
    if NO_PROBES in mode:
        expected = without_probes(sample_items)
        assert got["items"]["outcomes"]["failed"] == same_items["items"]["outcomes"]["failed"] - 1  # stuffing
        assert "probe:" not in got["text"]
    else:
        expected = sample_items["common"]
        assert got["items"] == same_items["items"]
    for name, value in expected.items():
        assert got["common"][name] == value, f"{name} differs from the reference run's"
