"""Bad input: each case a clear error, nothing else lost, never an INTERNALERROR."""

from __future__ import annotations

import json
import os
import socket

import pytest

from .conftest import msgs

SCORER = """
    from pytest_reward import reward_function

    @reward_function
    def echo(messages, **kwargs):
        return {"score": 1.0, "reason": "ok"}
"""

GOOD = {"messages": msgs("q", "a")}


def _check_clean(result: pytest.RunResult) -> None:
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json {", "s.jsonl:2: invalid JSON: Expecting value at column 1"),
        ("[1, 2, 3]", "s.jsonl:2: each line must be a JSON object, got list"),
        ('{"id": "x"}', "s.jsonl:2: missing 'messages'*"),
        ('{"messages": {"role": "user"}}', "s.jsonl:2: 'messages' must be a list, got dict"),
        (
            '{"messages": [{"role": "", "content": "x"}]}',
            "s.jsonl:2: messages?0?.role must be a non-empty string*",
        ),
        (
            '{"messages": [{"role": "user", "content": 1}]}',
            "s.jsonl:2: messages?0?.content must be a string*",
        ),
    ],
)
def test_malformed_line_is_an_error_item_and_other_samples_run(project, line, message):
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [GOOD, line, GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"FAILED s.jsonl::line-2 - {message}"])
    _check_clean(result)


def test_non_utf8_bytes(project):
    project.file("rewards.py", SCORER)
    (project.path / "s.jsonl").write_bytes(
        json.dumps(GOOD).encode()
        + b'\n{"messages": [{"role": "user", "content": "\xff\xfe"}]}\n'
        + json.dumps(GOOD).encode()
        + b"\n"
    )
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["FAILED s.jsonl::line-2 - s.jsonl:2: not valid UTF-8*"])


def test_ten_megabyte_line(project):
    project.file("rewards.py", SCORER)
    big = json.dumps({**GOOD, "blob": "x" * (10 * 2**20)})
    project.jsonl("s.jsonl", [GOOD, big, GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["FAILED s.jsonl::line-2 - s.jsonl:2: line is 10.0 MiB, over the 8 MiB limit*"]
    )
    # The limit is a setting: raised, the same line is scored.
    project.pytester.makeini("[pytest]\nreward_max_line_bytes = 16777216\n")
    project.run("--reward-samples", "s.jsonl").assert_outcomes(passed=3)


def test_empty_file(project):
    project.file("rewards.py", SCORER)
    (project.path / "s.jsonl").write_text("")
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*s.jsonl:1: the file has no samples (it is empty)"])


def test_duplicate_ids(project):
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [{**GOOD, "id": "a"}, {**GOOD, "id": "b"}, {**GOOD, "id": "a"}])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["FAILED s.jsonl::line-3 - s.jsonl:3: duplicate id 'a' (first at line 1)"])


def test_missing_samples_file_is_a_usage_error(project):
    project.file("rewards.py", SCORER)
    result = project.run("--reward-samples", "nope.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reward-samples nope.jsonl: file not found*"])


def test_directory_passed_as_samples_file(project):
    project.file("rewards.py", SCORER)
    (project.path / "data").mkdir()
    result = project.run("--reward-samples", "data")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--reward-samples data: is a directory; pass JSONL files or a glob such as data/*.jsonl*"]
    )


def test_glob_with_no_match(project):
    project.file("rewards.py", SCORER)
    result = project.run("--reward-samples", "data/*.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no file matches this pattern*"])


def test_missing_samples_file_under_xdist_is_still_a_usage_error(project):
    project.file("rewards.py", SCORER)
    result = project.run_subprocess("--reward-samples", "nope.jsonl", "-n", "2", "-p", "xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("treshold=0.5", "*unknown key 'treshold' (did you mean 'threshold'?)*"),
        ("threshold='high'", "*threshold must be a number, got str 'high'*"),
        ("pass_rate=1.5", "*pass_rate must be in ?0, 1?, got 1.5*"),
        ("quantile=0.1", "*quantile must be a non-empty dict*"),
        ("metrics={'m': {'pass_rate': 0.9}}", "*pass_rate needs a threshold for this metric*"),
        ("0.5", "*takes keyword arguments only*"),
        ("samples='missing.jsonl'", "*samples file 'missing.jsonl' not found*"),
    ],
)
def test_bad_marker_is_a_collection_error_naming_the_function(project, marker, message):
    project.file(
        "rewards.py",
        f"""
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward({marker})
        @reward_function
        def picky(messages, **kwargs):
            return {{"score": 1.0}}
        """,
    )
    project.jsonl("s.jsonl", [GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*ERROR collecting s.jsonl*", "@pytest.mark.reward on rewards.py::picky" + message]
    )
    _check_clean(result)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("treshold=0.5, samples='s.jsonl'", "*unknown key 'treshold' (did you mean 'threshold'?)*"),
        (
            "samples='s.jsonl', rollout={'temprature': 0.5}",
            "*unknown key 'temprature' (did you mean 'temperature'?)*",
        ),
        ("treshold=0.5", "*unknown key 'treshold' (did you mean 'threshold'?)*"),
    ],
)
def test_bad_marker_is_a_usage_error_when_the_marker_binds_the_samples(project, marker, message):
    # Plain ``pytest``: nothing asked for reward testing but the marker. The function must not vanish behind the
    # "no samples" note while an ordinary test passes.
    project.file(
        "rewards.py",
        f"""
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward({marker})
        @reward_function
        def picky(messages, **kwargs):
            return {{"score": 1.0}}
        """,
    )
    project.file("test_other.py", "def test_ok():\n    pass\n")
    project.jsonl("s.jsonl", [GOOD])
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*invalid reward functions:", "  @pytest.mark.reward on rewards.py::picky" + message]
    )
    assert "no samples to score" not in result.stdout.str()
    _check_clean(result)


def test_bad_marker_is_a_usage_error_when_the_samples_glob_matches_nothing(project):
    project.file(
        "rewards.py",
        """
        import pytest
        from pytest_reward import reward_function

        @pytest.mark.reward(treshold=0.5)
        @reward_function
        def picky(messages, **kwargs):
            return {"score": 1.0}
        """,
    )
    project.file("test_other.py", "def test_ok():\n    pass\n")
    project.pytester.makeini("[pytest]\nreward_samples_glob = *.evals.jsonl\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*rewards.py::picky: unknown key 'treshold' (did you mean 'threshold'?)*"])


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--reward-threshold", "abc"), "*--reward-threshold: expected a number, got 'abc'*"),
        (("--reward-pass-rate", "2"), "*--reward-pass-rate: pass_rate must be in ?0, 1?, got 2*"),
        (("--reward-quantile", "0.1"), "*--reward-quantile: expected Q:BOUND pairs*"),
        (("--reward-workers", "0"), "*--reward-workers: --reward-workers must be ≥ 1, got 0*"),
    ],
)
def test_bad_option_values_name_their_source(project, option, message):
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [GOOD])
    result = project.run("--reward-samples", "s.jsonl", *option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_value_names_the_ini_key(project):
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [GOOD])
    project.pytester.makeini("[pytest]\nreward_mean = lots\n")
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini reward_mean: expected a number, got 'lots'*"])


BROKEN = """
    import math, time
    from pytest_reward import reward_function, EvaluateResult

    @reward_function
    def broken(messages, **kwargs):
        kind = messages[-1]["content"]
        if kind == "raise":
            raise KeyError("ground_truth")
        if kind == "nan":
            return EvaluateResult(score=math.nan)
        if kind == "inf":
            return {"score": float("inf")}
        if kind == "none":
            return None
        if kind == "tuple":
            return (0.5, "m")
        if kind == "invalid":
            return EvaluateResult(score=0.0, is_score_valid=False, reason="judge unavailable")
        if kind == "error":
            return EvaluateResult(score=0.0, error="timeout calling judge")
        if kind == "hang":
            time.sleep(30)
        return {"score": 1.0}
"""


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("raise", "broken raised KeyError: 'ground_truth'"),
        ("nan", "score is nan: a reward must be a finite number"),
        ("inf", "score is inf: a reward must be a finite number"),
        ("none", "broken returned None: expected EvaluateResult (or a dict with 'score')"),
        ("tuple", "broken returned tuple (0.5, 'm'): expected EvaluateResult*"),
        ("invalid", "the result is marked is_score_valid=False: judge unavailable"),
        ("error", "the reward function reported an error: timeout calling judge"),
    ],
)
def test_misbehaving_reward_function_fails_that_item_with_the_reason(project, kind, message):
    project.file("rewards.py", BROKEN)
    project.jsonl("s.jsonl", [GOOD, {"messages": msgs("q", kind)}, GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([f"FAILED s.jsonl::broken?line-2? - {message}"])
    _check_clean(result)


def test_hanging_reward_function_is_stopped_by_pytest_timeout(project):
    project.file("rewards.py", BROKEN)
    project.jsonl("s.jsonl", [GOOD, {"messages": msgs("q", "hang")}, GOOD])
    result = project.run_subprocess("--reward-samples", "s.jsonl", "-p", "timeout", "--timeout", "1")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["FAILED s.jsonl::broken?line-2? - *Timeout*"])
    result.stdout.fnmatch_lines(["*broken*s.jsonl*3 (1 err)*FAIL*"])


def test_reward_module_that_cannot_be_imported(project):
    project.file("rewards.py", "from pytest_reward import reward_function\n\ndef broken(:\n")
    project.jsonl("s.jsonl", [GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*no reward functions found*",
            "*Could not import *rewards.py: SyntaxError: invalid syntax (line 3)*",
        ]
    )


def test_broken_module_next_to_a_good_one_is_a_collection_error(project):
    project.file("rewards.py", SCORER)
    project.file("other_reward.py", "from pytest_reward import reward_function\nimport does_not_exist\n")
    project.jsonl("s.jsonl", [GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*other_reward.py: ModuleNotFoundError: No module named 'does_not_exist'*"])


def test_nothing_found_says_where_it_looked(project):
    project.file("helpers.py", "def f():\n    return 1\n")
    project.jsonl("s.jsonl", [GOOD])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*pytest-reward: no reward functions found.",
            f"*Looked in: {project.path}*",
            "*main.py reward_*.py *_reward.py rewards.py (ini reward_modules)*",
        ]
    )


# --- a bad line is a line error, never a lost file ---------------------------------------------------------------

DEEP = json.dumps(GOOD)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
HUGE_INT = json.dumps(GOOD)[:-1] + ', "x": ' + "7" * 5000 + "}"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (DEEP, "nested more than 128 levels deep (arrays and objects inside each other)"),
        (HUGE_INT, "invalid JSON: Exceeds the limit (4300 digits) for integer string conversion*"),
    ],
    ids=["100k-deep", "5000-digits"],
)
def test_line_that_breaks_the_json_decoder_is_a_line_error_in_sample_granularity(project, line, message):
    """Regression: the whole file was lost (a collection error, exit 2)."""
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [GOOD, line, GOOD])
    result = project.run("--reward-samples", "s.jsonl", "--reward-granularity", "sample")
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"FAILED s.jsonl::line-2 - s.jsonl:2: {message[:40]}*"])
    _check_clean(result)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (DEEP, "nested more than 128 levels deep (arrays and objects inside each other)"),
        (HUGE_INT, "invalid JSON: Exceeds the limit (4300 digits) for integer string conversion*"),
    ],
    ids=["100k-deep", "5000-digits"],
)
def test_line_that_breaks_the_json_decoder_is_a_line_error_in_file_granularity(project, line, message):
    """Regression: the file's one item failed with the RecursionError / ValueError and no sample was scored."""
    project.file("rewards.py", SCORER)
    project.jsonl("s.jsonl", [GOOD, line, GOOD])
    result = project.run("--reward-samples", "s.jsonl", "--reward-granularity", "file")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*1 of 3 samples failed (echo on s.jsonl)*", f"*s.jsonl:2 [[]line-2[]]  {message}"]
    )
    # The good lines were scored: two rows at score 1, the bad one an error.
    result.stdout.fnmatch_lines(["echo *| s.jsonl | 3 (1 err) | 0.667 | 0.000 |*"])
    _check_clean(result)


def _special_files(path, monkeypatch):
    """A FIFO and a bound unix socket, each named like a samples file (bound by a relative name: a unix socket's
    path must be short)."""
    os.mkfifo(path / "pipe.jsonl")
    monkeypatch.chdir(path)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock.jsonl")
    return sock


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--reward-samples", "pipe.jsonl"),
            "--reward-samples pipe.jsonl: is a FIFO (named pipe), not a regular file*",
        ),
        (("--reward-samples", "sock.jsonl"), "--reward-samples sock.jsonl: is a socket, not a regular file*"),
        (
            ("--reward-samples", "/dev/null"),
            "--reward-samples /dev/null: is a character device, not a regular file*",
        ),
        (
            ("--reward-samples", "p*.jsonl"),
            "--reward-samples p?.jsonl: */pipe.jsonl: is a FIFO (named pipe)*",
        ),
        (("pipe.jsonl",), "pipe.jsonl: is a FIFO (named pipe), not a regular file*"),
        (("sock.jsonl::echo",), "sock.jsonl: is a socket, not a regular file*"),
    ],
    ids=["fifo", "socket", "device", "glob", "positional-fifo", "positional-socket"],
)
def test_fifo_socket_or_device_as_samples_file_is_a_usage_error_naming_it(
    project, monkeypatch, args, message
):
    """Regression: these ran nothing and exited 5 ("no tests ran"), or pytest said "not found". Opening a FIFO
    without a writer would block: the check never opens it (a hang here would be the bug)."""
    project.file("rewards.py", SCORER)
    project.jsonl("good.jsonl", [GOOD])
    sock = _special_files(project.path, monkeypatch)
    try:
        result = project.run(*args)
    finally:
        sock.close()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}samples files must be JSONL files on disk"])
