"""The CI recipe of ``docs/ci.md`` works: ``examples/ci/reward-ci.sh`` run step by step on a scratch git repository
(a baseline stored on main and deployed, a regressing branch failing its compare, a green branch passing), and the
GitHub workflow runs the very same commands."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import REPO

CI = REPO / "examples" / "ci"
SCRIPT = CI / "reward-ci.sh"
WORKFLOW = CI / "github-workflow.yml"

REWARD = '''
import pytest

from pytest_reward import EvaluateResult, reward_function


@pytest.mark.reward(threshold=0.5)
@reward_function
def answer_found(messages, ground_truth=None, **kwargs):
    found = str(ground_truth) in messages[-1]["content"]
    return EvaluateResult(score=SCORE if found else 0.0, reason="found" if found else "missing")
'''


def _samples() -> str:
    rows = []
    for i in range(6):
        a, b = i + 2, 3 * i + 1
        rows.append(
            {
                "id": f"add-{i}",
                "messages": [
                    {"role": "user", "content": f"What is {a} + {b}?"},
                    {"role": "assistant", "content": f"The sum is {a + b}."},
                ],
                "ground_truth": str(a + b),
            }
        )
    return "".join(json.dumps(r) + "\n" for r in rows)


def _pytest_commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("pytest ")]


def test_the_workflow_runs_the_scripts_commands() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    runs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    from_workflow = [cmd for run in runs for cmd in _pytest_commands(run)]
    assert from_workflow == _pytest_commands(SCRIPT.read_text(encoding="utf-8"))
    assert len(from_workflow) == 2
    # on: push to main and pull requests; the artifact is published whatever the outcome
    assert workflow[True]["push"]["branches"] == ["main"] and "pull_request" in workflow[True]
    upload = [s for s in workflow["jobs"]["rewards"]["steps"] if s.get("uses", "").startswith("actions/upload")]
    assert upload and upload[0]["if"] == "always()" and "reward-report/" in upload[0]["with"]["path"]


class Repo:
    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GIT_", "GITHUB_"))
        } | {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
            "HOME": str(home),
            "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.com",
            "GIT_COMMITTER_NAME": "ci", "GIT_COMMITTER_EMAIL": "ci@example.com",
            "COLUMNS": "120",
        }  # fmt: skip

    def sh(self, command: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.path,
            env=self.env | env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )

    def git(self, *args: str) -> str:
        done = self.sh(shlex.join(["git", *args]))
        assert done.returncode == 0, done.stdout
        return done.stdout.strip()

    def commit(self, score: str, message: str) -> None:
        (self.path / "rewards.py").write_text(REWARD.replace("SCORE", score).lstrip(), encoding="utf-8")
        self.git("add", "-A")
        self.git("commit", "-qm", message)

    def ci(self, step: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.sh(f"{shlex.quote(str(SCRIPT))} {step}", **env)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path / "project", tmp_path / "home")
    r.path.mkdir()
    (tmp_path / "home").mkdir()
    r.git("init", "-q", "-b", "main")
    (r.path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nreward_samples_glob = ["samples.jsonl"]\n', encoding="utf-8"
    )
    (r.path / ".gitignore").write_text(".reward/\nreward-report/\njunit.xml\n", encoding="utf-8")
    (r.path / "samples.jsonl").write_text(_samples(), encoding="utf-8")
    r.commit("1.0", "a reward and its samples")
    return r


def test_the_ci_recipe_on_a_scratch_repository(repo: Repo, tmp_path: Path) -> None:
    summary, target = tmp_path / "step-summary.md", tmp_path / "deployed"

    # main: the baseline is stored under the commit, the report and junit written, the green run deployed
    main = repo.ci("main", GITHUB_STEP_SUMMARY=str(summary), REWARD_DEPLOY_TARGET=f"dir:{target}")
    assert main.returncode == 0, main.stdout
    commit = repo.git("rev-parse", "HEAD")
    stored = list((repo.path / ".reward").glob("*.json"))
    assert [p.name for p in stored] == [f"0001_{commit[:10]}.json"]
    assert {p.name for p in (repo.path / "reward-report").iterdir()} >= {"report.html", "summary.json"}
    assert "answer_found" in (repo.path / "junit.xml").read_text(encoding="utf-8")
    assert "answer_found" in summary.read_text(encoding="utf-8")
    bundles = [p for p in target.iterdir() if p.is_dir()]
    assert len(bundles) == 1 and (bundles[0] / "manifest.json").is_file(), "a green run on main deploys a bundle"

    # a branch that pays less for the same answers: every sample still passes its threshold, but the compare fails
    repo.git("checkout", "-q", "-b", "regress")
    repo.commit("0.6", "pay less")
    regressed = repo.ci("pull-request")
    assert regressed.returncode == 1, regressed.stdout
    assert "FAIL answer_found on samples.jsonl: mean dropped 0.4" in regressed.stdout, regressed.stdout
    assert f"vs 0001_{commit[:10]}" in regressed.stdout
    assert "6 passed" in regressed.stdout  # the samples themselves pass: only the comparison failed

    # a branch that changes nothing the reward pays for: green against the same baseline
    repo.git("checkout", "-q", "main")
    repo.git("checkout", "-q", "-b", "green")
    (repo.path / "README.md").write_text("docs only\n", encoding="utf-8")
    repo.git("add", "-A")
    repo.git("commit", "-qm", "docs only")
    green = repo.ci("pull-request")
    assert green.returncode == 0, green.stdout
    assert len(list((repo.path / ".reward").glob("*.json"))) == 1  # pull requests store nothing


def test_a_red_main_does_not_deploy(repo: Repo, tmp_path: Path) -> None:
    repo.commit("0.3", "below every threshold")
    target = tmp_path / "deployed"
    red = repo.ci("main", REWARD_DEPLOY_TARGET=f"dir:{target}")
    assert red.returncode == 1, red.stdout
    assert not target.exists() or not any(target.iterdir())


def test_the_script_names_its_steps(repo: Repo) -> None:
    done = repo.ci("")
    assert done.returncode == 2 and "usage:" in done.stdout and "main|pull-request" in done.stdout
