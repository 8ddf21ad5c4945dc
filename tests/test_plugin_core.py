"""End-to-end: real pytest sessions of reward projects (pytester)."""

from __future__ import annotations

import shutil

import pytest

from .conftest import EXAMPLES, msgs

REWARDS = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult, MetricResult

    @pytest.mark.reward(threshold=0.5)
    @reward_function
    def length(messages, **kwargs):
        n = len(messages[-1]["content"])
        s = min(1.0, n / 10)
        return EvaluateResult(score=s, reason=f"{n} chars", metrics={"len": MetricResult(score=s, reason=f"{n}")})
"""


def test_seed_tutorial_project_scores_what_its_code_computes(pytester, project):
    shutil.copytree(EXAMPLES / "first-reward-function", pytester.path, dirs_exist_ok=True)
    outcomes = project.outcomes("--reward-samples", "samples.jsonl")
    # Derived by hand from the tutorial's code (whitespace split, stop words removed; "learning?" keeps its "?"):
    #  1: user keywords {what, machine, learning?}; the answer shares only "machine"                -> 1/3
    #  2: the answer shares none of {what, machine, learning?}                                      -> 0
    #  3: user keywords {how, can, i, improve, my, cooking, skills?}; shared {i, cooking} = 2/7,
    #     plus 0.2 for "to answer your question"                                                    -> 2/7 + 0.2
    # (The tutorial prints 0.67, 0.33 and 1.00, which its own code does not compute.)
    assert [o["sample_id"] for o in outcomes] == ["line-1", "line-2", "line-3"]
    assert [o["score"] for o in outcomes] == pytest.approx([1 / 3, 0.0, 2 / 7 + 0.2])
    assert [o["metrics"]["keyword_overlap"]["score"] for o in outcomes] == pytest.approx([1 / 3, 0.0, 2 / 7])
    assert [o["metrics"]["direct_answer"]["score"] for o in outcomes] == [0.0, 0.0, 1.0]
    result = project.run("--reward-samples", "samples.jsonl")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*reward summary*", "*evaluate*samples.jsonl*3*0.273*0.000*–*NO GATE"])


def test_items_are_named_file_function_sample(project):
    project.file("rewards.py", REWARDS)
    project.jsonl(
        "s.jsonl", [{"messages": msgs("q", "a long answer")}, {"id": "short", "messages": msgs("q", "no")}]
    )
    result = project.run("--reward-samples", "s.jsonl", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["s.jsonl::length?line-1?", "s.jsonl::length?short?"])
    assert result.ret == 0


def test_failure_report_shows_the_sample_and_the_verdict(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", [{"messages": msgs("Is it long?", "tiny")}])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*score 0.4 < threshold 0.5",
            "*sample*s.jsonl:1*line-1*",
            "*function*length*(rewards.py:*)",
            "*user*Is it long?",
            "*assistant*tiny",
            "*score*0.4*(threshold 0.5)",
            "*reason*4 chars",
            "*metrics*",
            "*len*0.4*4",
            "FAILED s.jsonl::length?line-1? - score 0.4 < threshold 0.5",
        ]
    )


def test_exception_traceback_is_limited_to_user_code(project):
    project.file(
        "rewards.py",
        """
        from pytest_reward import reward_function

        def parse(text):
            return int(text)

        @reward_function
        def numeric(messages, **kwargs):
            return {"score": parse(messages[-1]["content"])}
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("n?", "seven")}])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*numeric raised ValueError: invalid literal for int() with base 10: 'seven'",
            "*sample*s.jsonl:1*",
            '*return {"score": parse(messages?-1??"content"?)}',
            "*return int(text)",
            "E*ValueError*",
        ]
    )
    failure = result.stdout.str().split("FAILURES")[1].split("reward summary")[0]
    assert "pytest_reward/" not in failure and "_pytest/" not in failure and "pluggy" not in failure


def test_k_selects_samples_and_x_stops(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "x" * i)} for i in range(1, 8)])
    project.run("--reward-samples", "s.jsonl", "-k", "s6 or s7").assert_outcomes(passed=2, deselected=5)
    result = project.run("--reward-samples", "s.jsonl", "-x")
    result.assert_outcomes(failed=1)


def test_last_failed_reruns_only_failing_samples(pytester, project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", [{"id": f"s{i}", "messages": msgs("q", "x" * i)} for i in (2, 12, 3, 20)])
    first = pytester.runpytest("--reward-samples", "s.jsonl")
    first.assert_outcomes(passed=2, failed=2)
    again = pytester.runpytest("--reward-samples", "s.jsonl", "--lf")
    again.assert_outcomes(failed=2)
    again.stdout.fnmatch_lines(["run-last-failure: rerun previous 2 failures*"])
    again.stdout.fnmatch_lines(["*length?s2?*", "*length?s3?*"])


def test_positional_jsonl_path_works_like_reward_samples(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("data/s.jsonl", [{"messages": msgs("q", "a long answer")}])
    project.run("data/s.jsonl").assert_outcomes(passed=1)


def test_color_follows_pytest(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a long answer")}])
    colored = project.run_subprocess("--reward-samples", "s.jsonl", "--color=yes")
    assert "\x1b[" in colored.stdout.str().split("reward summary")[1]
    plain = project.run_subprocess("--reward-samples", "s.jsonl", "--color=no")
    assert "\x1b[" not in plain.stdout.str()


def test_quiet_modes(project):
    project.file("rewards.py", REWARDS)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a long answer")}, {"messages": msgs("q", "no")}])
    q = project.run("--reward-samples", "s.jsonl", "-q")
    q.stdout.fnmatch_lines(["FAIL*length on s.jsonl: n=2 mean=0.600 pass rate 50.0%"])
    assert "95% CI" not in q.stdout.str()
    qq = project.run("--reward-samples", "s.jsonl", "-qq")
    assert "reward summary" not in qq.stdout.str()


def test_plugin_is_inert_in_unrelated_projects(pytester):
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    # (the warning filter: in-process runs under ``.venv/bin/pytest`` see pytest_reward already imported)
    result = pytester.runpytest("-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=1)
    assert "reward" not in result.stdout.str().split("collected")[1]


def test_reward_functions_are_never_collected_as_plain_tests(project):
    project.file(
        "test_things.py",
        """
        from pytest_reward import reward_function

        @reward_function
        def test_looks_like_a_test(messages, **kwargs):
            return {"score": 1.0}

        def test_regular():
            assert True
        """,
    )
    project.run().assert_outcomes(passed=1)
