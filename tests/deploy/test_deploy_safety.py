"""Deploys that cannot ship the wrong thing: what the plugin wrote is never collected or bundled again,
a bundle ships what the reward functions really import (a symlink's target) and is imported in a fresh interpreter
before it ships, bad ``reward_bundle_include`` patterns are usage errors before the run, and the deploy summary names
only paths that exist."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from ..conftest import msgs
from .test_deploy import bundle_dir, make_project, run_in_fresh_python

EXACT = """
    from pytest_reward import EvaluateResult, reward_function
    from words import norm


    @reward_function
    def exact(messages, ground_truth=None, **kwargs):
        ok = norm(messages[-1]["content"]) == norm(ground_truth)
        return EvaluateResult(score=1.0 if ok else 0.0, reason="match" if ok else "no match")
"""
WORDS = """
    def norm(text):
        return str(text).strip().lower()
"""
IN_A_TEST_MODULE = """
    from pytest_reward import EvaluateResult, reward_function


    @reward_function
    def nonempty(messages, **kwargs):
        return EvaluateResult(score=1.0 if messages[-1]["content"] else 0.0, reason="length")
"""


def small_project(project, ini: str = "") -> None:
    project.file("rewards.py", EXACT)
    project.file("words.py", WORDS)
    project.file("tests/test_nonempty.py", IN_A_TEST_MODULE)
    project.pytester.makeini(f"[pytest]\npythonpath = .\nreward_bundle_name = demo\n{ini}")
    project.jsonl("samples.jsonl", [{"id": "a", "messages": msgs("2+2?", "4"), "ground_truth": "4"}])


def bundle_files(bundle: Path) -> list[str]:
    return sorted(json.loads((bundle / "demo" / "manifest.json").read_text())["files"])


# --- nothing the plugin wrote is collected or bundled --------------------------------------------------------


def test_a_bundle_deployed_inside_the_project_is_neither_collected_nor_bundled_again(project):
    """The docs' ``--reward-deploy=dir:deploy``: the frozen copies (a reward module, a test module) sit in the
    project, where pytest and discovery look; the next runs see the project's functions only."""
    small_project(project)
    first = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=dir:deploy")
    assert first.ret == 0, first.stdout.str()
    deployed = bundle_dir(project.path / "deploy")
    assert (deployed / "demo" / "src" / "tests" / "test_nonempty.py").is_file()
    assert (deployed / "demo" / "src" / "rewards.py").is_file()

    second = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=dir:deploy")
    assert second.ret == 0, second.stdout.str()
    second.assert_outcomes(passed=2)  # exact and nonempty on one sample: no frozen copy of either
    second.stdout.fnmatch_lines(["*already deployed (unchanged) demo *"])
    assert "src." not in second.stdout.str() and "import file mismatch" not in second.stdout.str()
    # another target: the bundle in deploy/ is still recognised (by its manifest, not by the target's name)
    third = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=dir:elsewhere")
    assert third.ret == 0, third.stdout.str()
    third.assert_outcomes(passed=2)
    again = bundle_dir(project.path / "elsewhere")
    assert again.name == deployed.name  # the same code and evidence: the same bundle
    assert not any(f.startswith("src/deploy/") for f in bundle_files(again))


def test_include_patterns_never_bundle_what_the_plugin_wrote(project):
    small_project(project, "reward_bundle_include = **/*.json **/*.jsonl\nreward_storage = runs\n")
    project.file("data/table.json", '{"keep": true}\n')
    assert project.run("--reward-samples", "samples.jsonl", "--reward-save=base").ret == 0
    assert list((project.path / "runs").glob("*_base.json"))
    first = project.run(
        "--reward-samples", "samples.jsonl", "--reward-deploy=dir:deploy", "--reward-report=report"
    )
    assert first.ret == 0, first.stdout.str()
    assert (project.path / "report" / "results.jsonl").is_file()
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=dir:out")
    assert result.ret == 0, result.stdout.str()
    files = bundle_files(bundle_dir(project.path / "out"))
    assert "src/data/table.json" in files and "src/samples.jsonl" in files
    assert not [f for f in files if f.startswith(("src/deploy/", "src/runs/", "src/report/"))], files


def test_reports_are_never_collected_as_samples(project):
    """A samples glob that matches every JSONL file, and a function chosen with --reward-fn (which meets every
    samples file): the results.jsonl of an earlier run's report is not a samples file."""
    small_project(project, "reward_samples_glob = *.jsonl\n")
    first = project.run("--reward-report=report")
    assert first.ret == 0, first.stdout.str()
    first.assert_outcomes(passed=2)
    assert (project.path / "report" / "results.jsonl").is_file()
    second = project.run("--reward-fn", "rewards.py::exact", "--collect-only", "-q")
    assert second.ret == 0, second.stdout.str()
    second.stdout.fnmatch_lines(["samples.jsonl::exact[a]", "1 test collected*"])


# --- a bundle ships what the functions really import, or is not deployed ----------------------------------------


@pytest.mark.parametrize("link", ["file", "directory"])
def test_a_reward_module_reached_through_a_symlink_is_bundled(project, link):
    """The module and the sibling it imports live outside the project; the project links to them. The bundle holds
    the files the links point to and imports them in a fresh interpreter (no project, no link target on sys.path)."""
    shared = project.path.parent / f"shared_{link}"
    shared.mkdir()
    (shared / "rewards.py").write_text(EXACT.replace("\n    ", "\n").lstrip())
    (shared / "words.py").write_text(WORDS.replace("\n    ", "\n").lstrip())
    if link == "file":
        (project.path / "rewards.py").symlink_to(shared / "rewards.py")
    else:
        (project.path / "metrics").symlink_to(shared, target_is_directory=True)
    project.pytester.makeini("[pytest]\nreward_bundle_name = demo\n")
    project.jsonl("samples.jsonl", [{"id": "a", "messages": msgs("2+2?", "4"), "ground_truth": "4"}])
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=dir:out")
    assert result.ret == 0, result.stdout.str()
    bundle = bundle_dir(project.path / "out")
    out = run_in_fresh_python(
        f"""
        import asyncio, json, sys, types
        sys.path.insert(0, {str(bundle)!r})
        import demo
        from demo import slime
        sample = types.SimpleNamespace(prompt="2+2?", response=" 4 ", label="4")
        print(json.dumps({{
            "file": sys.modules[demo.FUNCTIONS["exact"].__module__].__file__,
            "score": asyncio.run(slime.custom_rm(None, sample)),
            "outside": [
                p for p in sys.path
                if p.startswith(({str(shared)!r}, {str(project.path)!r})) and not p.startswith({str(bundle)!r})
            ],
        }}))
        """,
        bundle,
    )
    seen = json.loads(out)
    assert seen["score"] == 1.0 and seen["outside"] == []
    assert seen["file"].startswith(str(bundle)), seen["file"]


def test_a_bundle_that_does_not_import_in_a_fresh_interpreter_is_not_deployed(project):
    """A reward module imports a module that only the test session's ``pythonpath`` (outside the project) reaches:
    the bundle cannot hold it and would fail in the trainer, so the deploy fails and ships nothing."""
    outside = project.path.parent / "sharedlib_home"
    outside.mkdir()
    (outside / "sharedlib.py").write_text("def norm(text):\n    return str(text).strip()\n")
    project.file("rewards.py", EXACT.replace("from words import norm", "from sharedlib import norm"))
    project.pytester.makeini(f"[pytest]\npythonpath = {outside}\nreward_bundle_name = demo\n")
    project.jsonl("samples.jsonl", [{"id": "a", "messages": msgs("2+2?", "4"), "ground_truth": "4"}])
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=dir:out")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "ERROR reward deploy: not deploying: the bundle does not import in a fresh interpreter (as a trainer "
            "loads it): *cannot import rewards for exact: ModuleNotFoundError: No module named 'sharedlib'"
        ]
    )
    assert not (project.path / "out").exists()
    dry = project.run(
        "--reward-samples", "samples.jsonl", "--reward-deploy=dir:out", "--reward-deploy-dry-run"
    )
    assert dry.ret == 1 and "No module named 'sharedlib'" in dry.stdout.str()


# --- usage errors before the run -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("/etc/*", "is an absolute path; patterns are relative to the rootdir"),
        ("../secrets/*", "leaves the rootdir ('..'); a bundle holds project files only"),
        ("data/../../x", "leaves the rootdir ('..')"),
        ("data/**.json", "has '**' inside a path component; '**' must be a whole one"),
    ],
)
def test_bad_include_patterns_are_usage_errors_before_the_run(project, pattern, message):
    make_project(project)
    project.pytester.makeini(
        f"[pytest]\npythonpath = .\nreward_bundle_name = demo_rewards\nreward_bundle_include = {pattern}\n"
    )
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ini reward_bundle_include: pattern {pattern!r} {message}" in result.stderr.str()
    assert "passed" not in result.stdout.str() and "Traceback" not in result.stderr.str()


# --- the summary ----------------------------------------------------------------------------------------------


def _paths(text: str) -> list[str]:
    """Absolute paths in the summary: after a space, a parenthesis or ``dir:``."""
    return [p.rstrip(":,") for p in re.findall(r"(?:(?<=[\s(])|(?<=dir:))(/[^\s()]+)", text)]


def _summary(output: str) -> str:
    return output.split("reward deploy ---", 1)[1]


@pytest.mark.parametrize(
    "args",
    [
        ["--reward-deploy=dir:deploy"],
        ["--reward-deploy=dir:deploy", "--reward-deploy-dry-run"],
        ["--reward-deploy=memory:x"],
    ],
    ids=["dir", "dry-run", "plugin-target"],
)
def test_the_deploy_summary_names_only_paths_that_exist(project, args):
    """The bundle is built in a staging directory that is gone when the summary is printed."""
    small_project(project)
    project.file(
        "conftest.py",
        """
        from pytest_reward.deploy.targets import Receipt

        class Memory:
            def __init__(self, spec, config):
                pass
            def deploy(self, bundle):
                return Receipt(target="memory", id="mem-" + bundle.version, location="ram")

        def pytest_reward_register_targets(targets):
            targets.register("memory", Memory)
        """,
    )
    result = project.run("--reward-samples", "samples.jsonl", *args)
    assert result.ret == 0, result.stdout.str()
    summary = _summary(result.stdout.str())
    assert re.search(r"^bundle demo \w{12}", summary, re.M), summary
    paths = _paths(summary)
    assert all(Path(p).exists() for p in paths), (paths, summary)
    if args == ["--reward-deploy=dir:deploy"]:  # where the bundle now is
        assert str(bundle_dir(project.path / "deploy")) in paths, summary


def test_the_tarball_is_the_bundle_directory(project):
    small_project(project)
    assert project.run("--reward-samples", "samples.jsonl", "--reward-deploy=dir:deploy").ret == 0
    bundle = bundle_dir(project.path / "deploy")
    with tarfile.open(bundle.parent / f"{bundle.name}.tar.gz") as tar:
        names = {n for n in tar.getnames()}
    on_disk = {str(p.relative_to(bundle.parent)) for p in bundle.rglob("*") if p.is_file()}
    assert names == on_disk
