"""A report directory is one set: a kill at any moment leaves the previous complete set or the new one — never a
mix of two runs, never a leftover that a later run trips over. The run is killed (``os._exit``) just before each
filesystem step of its end-of-session writes in turn, on the atomic swap and on the two-rename fallback."""

from __future__ import annotations

import json

import pytest

from .conftest import msgs

REWARD = """
    import os
    from pytest_reward import reward_function

    @reward_function
    def value(messages, **kwargs):
        return {"score": float(os.environ["SCORE"])}
"""

KILLER = """
    import builtins, ctypes, os, shutil
    import pytest

    KILL_AT = int(os.environ.get("KILL_AT", "0"))
    state = {"armed": False, "steps": 0}

    def _step():
        if state["armed"]:
            state["steps"] += 1
            if state["steps"] == KILL_AT:
                os._exit(9)

    def _wrap(fn):
        def wrapper(*args, **kwargs):
            _step()
            return fn(*args, **kwargs)
        return wrapper

    for _mod, _name in [(os, "rename"), (os, "replace"), (os, "mkdir"), (os, "fsync"), (shutil, "rmtree")]:
        setattr(_mod, _name, _wrap(getattr(_mod, _name)))
    _open = builtins.open

    def _counted_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            _step()
        return _open(file, mode, *args, **kwargs)

    builtins.open = _counted_open
    if os.environ.get("NO_EXCHANGE"):
        class _NoLibc:
            def __init__(self, *args, **kwargs):
                raise OSError("no renameat2 here")
        ctypes.CDLL = _NoLibc

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(session):
        state["armed"] = True
"""


def _set(out):
    """The report set in ``out``: the score each file says, or an error string."""
    names = sorted(p.name for p in out.iterdir())
    assert names == ["report.html", "results.jsonl", "summary.json"], names
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    scores = {r["score"] for r in rows} | {g["summary"]["mean"] for g in summary["groups"]}
    assert len(scores) == 1, scores  # one run's files, not a mix
    html = (out / "report.html").read_text()
    (score,) = scores
    assert f"{score:.3f}" in html
    return score


@pytest.mark.parametrize("swap", ["exchange", "fallback"])
def test_a_kill_at_any_step_leaves_the_old_set_or_the_new_one(project, monkeypatch, swap):
    project.file("rewards.py", REWARD)
    project.file("conftest.py", KILLER)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    if swap == "fallback":
        monkeypatch.setenv("NO_EXCHANGE", "1")
    args = ("-p", "no:cacheprovider", "--reward-samples", "s.jsonl", "--reward-report", "out")
    monkeypatch.setenv("SCORE", "0.25")
    assert project.pytester.runpytest_subprocess(*args, timeout=120).ret == 0
    out = project.path / "out"
    assert _set(out) == 0.25
    monkeypatch.setenv("SCORE", "0.75")
    finished = False
    for kill_at in range(1, 60):
        monkeypatch.setenv("KILL_AT", str(kill_at))
        result = project.pytester.runpytest_subprocess(*args, timeout=120)
        if result.ret == 0:
            finished = True
            break
        assert result.ret == 9, result.stdout.str()
        # killed mid-write: whatever is at out is one complete set (a later run repairs a missing one)
        if out.exists():
            assert _set(out) in (0.25, 0.75)
    assert finished, "the run never got through its writes"
    assert kill_at > 3  # the loop really killed the writer at several steps
    assert _set(out) == 0.75
    leftovers = [p.name for p in project.path.iterdir() if p.name.startswith(".out.")]
    assert leftovers == []
    # a later run after a kill in the middle is not tripped over and cleans up
    monkeypatch.setenv("KILL_AT", "0")
    monkeypatch.setenv("SCORE", "0.5")
    assert project.pytester.runpytest_subprocess(*args, timeout=120).ret == 0
    assert _set(out) == 0.5
