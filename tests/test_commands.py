"""Commands that do what they look like: options with an optional value never swallow the path
after them, plain ``pytest`` in a reward project says what it found, untyped messages are dicts, the legacy
``(score, metrics)`` tuple is converted with a warning, and ``make demo`` installs only what the demo runs."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .conftest import IN_PROCESS, REPO, msgs

SCORER = """
    from pytest_reward import reward_function

    @reward_function
    def echo(messages, **kwargs):
        return {"score": 1.0, "reason": "ok"}
"""

GOOD = {"messages": msgs("q", "a")}

# --- optional values never swallow a path ------------------------------------------------------------------------

OPTIONAL = [
    ("--reward-save", "NAME"),
    ("--reward-compare", "RUN"),
    ("--reward-preview", "N"),
    ("--reward-deploy", "TARGET"),
]


@pytest.fixture
def samples_project(project):
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [GOOD, GOOD])
    (project.path / "data").mkdir()
    project.jsonl("data/more.jsonl", [GOOD])
    return project


@pytest.mark.parametrize(("flag", "metavar"), OPTIONAL)
@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("s.jsonl", "a samples file to test"),
        ("missing.jsonl", "a samples file to test"),
        ("data", "a directory"),
        ("test_x.py::test_a", "a Python file to test"),
    ],
)
def test_optional_value_that_is_a_path_is_a_usage_error_with_the_fix(
    samples_project, flag, metavar, value, what
):
    """Regression: `--reward-save samples.jsonl` saved nothing and exited 5; --reward-compare said "corrupt JSON",
    --reward-preview "invalid int", --reward-deploy "not green"."""
    result = samples_project.run(flag, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: {flag} {value}: {flag} took '{value}' as its {metavar}, but that is {what}. "
            f"Write {flag}={metavar} to give the option a value, or put {flag} after the paths "
            f"(pytest {value} {flag})."
        ]
    )
    assert not (samples_project.path / ".reward").exists()  # nothing was saved or deployed


@pytest.mark.parametrize(("flag", "metavar"), [("--reward-save", "NAME"), ("--reward-preview", "N")])
def test_an_existing_file_is_refused_too(samples_project, flag, metavar):
    samples_project.file("notes.txt", "x")
    result = samples_project.run("--reward-samples", "s.jsonl", flag, "notes.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*{flag} took 'notes.txt' as its {metavar}, but that is an existing file.*"]
    )


def test_the_spelled_out_forms_still_work(samples_project):
    project = samples_project
    # The option after the paths takes its default; `=` gives a value, whatever it looks like.
    project.run("s.jsonl", "--reward-save").assert_outcomes(passed=2)
    project.run("s.jsonl", "--reward-save=nightly").assert_outcomes(passed=2)
    saved = sorted(p.name for p in (project.path / ".reward").iterdir())
    assert len(saved) == 2 and saved[1] == "0002_nightly.json"
    # A separate value that is not a path is taken as before; a stored run's file may be given as a path.
    result = project.run("--reward-compare", "nightly", "--reward-preview", "1", "s.jsonl")
    result.assert_outcomes(passed=2)
    stored = project.path / ".reward" / "0002_nightly.json"
    project.run("--reward-compare", str(stored), "s.jsonl").assert_outcomes(passed=2)
    project.run("--reward-compare=latest", "s.jsonl").assert_outcomes(passed=2)


@pytest.mark.parametrize("source", ["ini addopts", "PYTEST_ADDOPTS"])
def test_a_bare_option_in_addopts_does_not_swallow_the_command_line(samples_project, monkeypatch, source):
    """`addopts = --reward-compare` and then `pytest s.jsonl`: pytest puts addopts first, so the flag took the
    path. The error names where the flag came from and how to write it there."""
    if source == "ini addopts":
        samples_project.pytester.makeini("[pytest]\naddopts = --reward-save\n")
    else:
        monkeypatch.setenv("PYTEST_ADDOPTS", "--reward-save")
    result = samples_project.pytester.runpytest("s.jsonl", *IN_PROCESS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --reward-save (in {source}) s.jsonl: --reward-save took 's.jsonl' as its NAME, but that is "
            f"a samples file to test. Write --reward-save= in {source} for the default, or --reward-save=NAME."
        ]
    )


def test_the_options_reference_says_why_values_are_optional_and_how_to_give_one():
    page = (REPO / "docs" / "reference" / "options.md").read_text(encoding="utf-8")
    options = page[page.index("## Options with an optional value") :]
    assert "`--reward-save[=NAME]`" in options and "use `--reward-save=NAME`" in options


# --- plain pytest in a reward project --------------------------------------------------------------------------

NOTE = [
    "pytest-reward: found 1 reward function (rewards.py::echo) but no samples to score them on.",
    "  Give them samples: pytest --reward-samples FILE (or a .jsonl path argument), ini reward_samples_glob = "
    "*.jsonl, or @pytest.mark.reward(samples=FILE) on the function.",
]


def test_plain_pytest_names_the_reward_functions_and_how_to_give_them_samples(project):
    """Regression: plain `pytest` said "collected 0 items" and nothing else."""
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [GOOD])  # not named anywhere: it is not a samples file of the run
    result = project.run()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED  # the exit status is pytest's, as before
    result.stdout.fnmatch_lines(["collected 0 items", "", *NOTE])


def test_ordinary_tests_run_as_before_and_the_note_is_shown(project):
    project.file("rewards.py", SCORER)
    project.file("test_plain.py", "def test_ok():\n    assert True\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(NOTE)


@pytest.mark.parametrize(
    "args", [(), ("--reward-samples", "s.jsonl")], ids=["no-reward-functions", "samples-given"]
)
def test_no_note_when_there_is_nothing_to_say(project, args):
    project.file("test_plain.py", "def test_ok():\n    assert True\n")
    if args:
        project.file("rewards.py", SCORER)
        project.jsonl("s.jsonl", [GOOD])
    result = project.run(*args)
    assert result.ret == pytest.ExitCode.OK
    assert "pytest-reward: found" not in result.stdout.str()


# --- untyped messages are dicts --------------------------------------------------------------------------------


def test_untyped_messages_arrive_as_dicts_and_typed_ones_as_messages(project):
    project.file(
        "rewards.py",
        """
        from typing import List
        from pytest_reward import Message, reward_function

        @reward_function
        def untyped(messages, **kwargs):
            return {"score": 1.0, "reason": type(messages[-1]).__name__ + " " + messages[-1]["content"]}

        @reward_function
        def typed(messages: List[Message], **kwargs):
            return {"score": 1.0, "reason": type(messages[-1]).__name__ + " " + messages[-1].content}
        """,
    )
    project.jsonl("s.jsonl", [GOOD])
    reasons = {o["function"]: o["reason"] for o in project.outcomes("--reward-samples", "s.jsonl")}
    assert reasons == {"untyped": "dict a", "typed": "Message a"}


def test_the_docs_say_how_messages_arrive_where_the_decorator_is_shown():
    page = (REPO / "docs" / "writing-rewards.md").read_text(encoding="utf-8")
    section = page[page.index("## The decorator and its models") : page.index("## Samples files")]
    assert "def word_overlap(messages" in section
    assert "`messages` annotated `List[Message]` arrive as\n  `Message` objects" in section
    assert 'unannotated, as the dicts of the samples file (`m["content"]`)' in section


# --- the legacy (score, metrics) tuple -------------------------------------------------------------------------

LEGACY = """
    from pytest_reward import MetricResult, reward_function

    @reward_function
    def pointwise(messages, **kwargs):
        return 0.75, {"overlap": 0.5, "tone": MetricResult(score=1.0, reason="polite")}

    @reward_function(mode="batch")
    def batch(rollouts_messages, **kwargs):
        return [(0.25, {"overlap": 0.5}) for _ in rollouts_messages]
"""


@pytest.mark.parametrize("granularity", ["sample", "file"])
def test_legacy_tuples_are_scored_with_one_warning_per_function_at_the_users_line(project, granularity):
    project.file("rewards.py", LEGACY)
    project.jsonl("s.jsonl", [GOOD] * 3)
    result = project.run("--reward-samples", "s.jsonl", "--reward-granularity", granularity, "-W", "default")
    result.assert_outcomes(passed=6 if granularity == "sample" else 2)
    # exactly one per function (not counted from pytest's total: under the console script an editable install is
    # imported before pytester's inner run marks it for rewriting, which adds pytest's own warning)
    assert sum("returned a legacy" in line for line in result.stdout.lines) == 2
    for name, line in (("pointwise", 3), ("batch", 7)):
        result.stdout.fnmatch_lines(
            [
                f"*/rewards.py:{line}: DeprecationWarning: reward function '{name}' returned a legacy "
                "(score, {metric: score | MetricResult}) tuple; return EvaluateResult instead*"
            ]
        )
    result.stdout.fnmatch_lines(["pointwise *| s.jsonl | 3*| 0.750 |*"])
    result.stdout.fnmatch_lines(["batch *| s.jsonl | 3*| 0.250 |*"])


def test_legacy_tuple_metrics_are_kept(project):
    project.file("rewards.py", LEGACY)
    project.jsonl("s.jsonl", [GOOD])
    rows = {o["function"]: o for o in project.outcomes("--reward-samples", "s.jsonl", "-W", "ignore")}
    assert rows["pointwise"]["metrics"] == {
        "overlap": {
            "score": 0.5,
            "valid": True,
            "reason": "overlap score",
        },  # reward-kit's reason for a bare score
        "tone": {"score": 1.0, "valid": True, "reason": "polite"},
    }
    assert rows["batch"]["score"] == 0.25


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("(0.5,)", "got 1 items"),
        ("(0.5, {'m': 0.5}, 'extra')", "got 3 items"),
        ("('high', {'m': 0.5})", "the score is str, not a number"),
        ("(0.5, [0.5])", "the metrics are list, not a dict"),
        ("(0.5, {'m': 'good'})", "metric 'm' is str, not a number or a MetricResult"),
    ],
)
def test_other_tuples_fail_the_sample_with_the_reason(project, value, why):
    project.file(
        "rewards.py",
        f"""
        from pytest_reward import reward_function

        @reward_function
        def tupled(messages, **kwargs):
            return {value}
        """,
    )
    project.jsonl("s.jsonl", [GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*tupled returned tuple *: expected EvaluateResult (or a dict with 'score')",
            "*a tuple is accepted only in the deprecated legacy form (score, {metric: score | MetricResult}): "
            + why.replace("[", "[[]"),
        ]
    )


# --- make demo / make test -------------------------------------------------------------------------------------


def _make_n(tmp_path, *targets: str) -> list[str]:
    """What ``make`` would run for ``targets`` in a checkout whose .venv is in ``tmp_path`` (a dry run)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(
        [make, "-n", "--no-print-directory", *targets],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


@pytest.fixture
def checkout(tmp_path):
    """The Makefile and pyproject.toml of the repository, in a directory of their own."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(REPO / name, tmp_path / name)
    return tmp_path


def _installs(lines: list[str]) -> list[str]:
    return [line.split(" -e ")[1] for line in lines if "pip install" in line and " -e " in line]


def test_make_demo_installs_the_runtime_and_jax_only(checkout):
    lines = _make_n(checkout, "demo")
    assert lines[0] == "python3.11 -m venv .venv"
    assert _installs(lines) == ["'.[jax]'"]
    assert lines[-1] == ".venv/bin/python examples/demo.py"


def test_make_test_installs_the_dev_extra_and_runs_the_checks(checkout):
    lines = _make_n(checkout, "test")
    assert lines[0] == "python3.11 -m venv .venv"
    assert _installs(lines) == ["'.[dev]'"]
    assert "lint-imports" in lines[-1] and any("-m pytest" in line for line in lines)
    # The dev extra holds everything the jax extra does: a test install serves the demo too.
    pyproject = (REPO / "pyproject.toml").read_text()
    assert "pytest-reward[jax," in pyproject


def test_make_is_idempotent_per_extra_set(checkout):
    venv = checkout / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    # After `make demo`: demo installs nothing again, test adds the dev extra (no new venv).
    (venv / ".installed-demo").touch()
    assert _installs(_make_n(checkout, "demo")) == []
    test = _make_n(checkout, "test")
    assert _installs(test) == ["'.[dev]'"] and not any("-m venv" in line for line in test)
    # After `make test`: neither installs anything.
    (venv / ".installed-test").touch()
    assert _installs(_make_n(checkout, "demo", "test", "test-clients", "lint")) == []
    # A changed pyproject.toml re-installs the set that is asked for.
    later = os.stat(venv / ".installed-test").st_mtime + 10
    os.utime(checkout / "pyproject.toml", (later, later))
    assert _installs(_make_n(checkout, "demo")) == ["'.[jax]'"]


def test_make_keeps_the_client_tests_and_the_import_contracts():
    makefile = (REPO / "Makefile").read_text()
    assert "\ntest-clients:" in makefile and "lint-imports" in makefile.split("\ntest:")[1].split("\n\n")[0]
