"""reward-kit's workflow commands with pytest-reward: ``pytest-reward preview`` / ``deploy`` on metrics folders and
``pytest_reward.evaluation.create_evaluation`` / ``preview_evaluation``, through real subprocesses. Every deploy
goes to a ``dir:`` target under tmp_path or to a loopback HTTP server."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "first-reward-function"
FOLDER = "relevance=./metrics/relevance"


def run(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(cwd, "-m", "pytest_reward.cli", *args)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    root = tmp_path / "my_reward_function"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", ".reward"))
    return root


def bundles(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("relevance_evaluator-*") if p.is_dir())


def manifest(directory: Path) -> dict:
    (only,) = bundles(directory)
    return json.loads((directory / only / "manifest.json").read_text())


def clean(out: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in out.stderr + out.stdout and "INTERNALERROR" not in out.stderr + out.stdout


def test_the_seed_steps_5_to_8_run_as_written(example):
    step5 = run(example, "test_reward.py")
    assert step5.returncode == 0, step5.stderr
    assert "Loaded 3 sample conversations." in step5.stdout and "Overall Score: 0.33" in step5.stdout

    step6 = cli(example, "preview", "--metrics-folders", FOLDER, "--samples", "./samples.jsonl")
    assert step6.returncode == 0, step6.stdout + step6.stderr
    assert "reward preview" in step6.stdout and "3 passed" in step6.stdout
    assert "evaluate on samples.jsonl: n=3 mean 0.273" in step6.stdout  # the summary at 80 columns

    step7 = cli(
        example,
        "deploy",
        "--id",
        "relevance-evaluator",
        "--metrics-folders",
        FOLDER,
        "--display-name",
        "Response Relevance Evaluator",
        "--description",
        "Evaluates how well a response addresses the user's query",
        "--force",
    )
    assert step7.returncode == 0, step7.stdout + step7.stderr
    deployed = example / ".reward" / "deploy"  # the default target: nothing leaves the machine
    assert manifest(deployed)["deployment"] == {
        "id": "relevance-evaluator",
        "display_name": "Response Relevance Evaluator",
        "description": "Evaluates how well a response addresses the user's query",
        "metrics": {"relevance": str((example / "metrics" / "relevance").resolve())},
    }
    assert "/relevance-evaluator" in step7.stdout

    step8 = run(example, "deploy_relevance.py")
    assert step8.returncode == 0, step8.stderr
    assert "Use this ID for training jobs: relevance-evaluator" in step8.stdout, step8.stdout
    assert "Error" not in step8.stdout
    assert len(bundles(deployed)) == 1


def test_an_existing_deployment_is_replaced_only_with_force(example, tmp_path):
    target = tmp_path / "deployed"
    base = ["deploy", "--id", "relevance-evaluator", "-m", FOLDER, "--target", f"dir:{target}"]
    assert cli(example, *base).returncode == 0
    again = cli(example, *base, "--description", "new")
    assert again.returncode == 1
    assert "already holds deployment 'relevance-evaluator'" in again.stderr
    assert "pass --force to replace it" in again.stderr
    clean(again)
    assert manifest(target)["deployment"]["description"] == ""
    forced = cli(example, *base, "--description", "new", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert manifest(target)["deployment"]["description"] == "new"
    # a changed function is a new version: with --force the old one goes
    main = example / "metrics" / "relevance" / "main.py"
    main.write_text(main.read_text() + "\n# changed\n")
    assert cli(example, *base, "--force").returncode == 0
    assert len(bundles(target)) == 1


def test_deploy_refuses_without_samples_and_says_how_to_give_them(example):
    (example / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    out = cli(example, "deploy", "--id", "relevance-evaluator", "-m", FOLDER)
    assert out.returncode == 4
    assert "no samples to test relevance=./metrics/relevance on: pass --samples FILE" in out.stderr
    clean(out)
    assert not (example / ".reward" / "deploy").exists()
    given = cli(example, "deploy", "--id", "relevance-evaluator", "-m", FOLDER, "--samples", "samples.jsonl")
    assert given.returncode == 0, given.stdout + given.stderr


def test_a_failing_run_deploys_nothing(example):
    (example / "bad.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]})
        + "\n"
    )
    (example / "metrics" / "relevance" / "main.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from pytest_reward import EvaluateResult, reward_function

            @pytest.mark.reward(threshold=0.5)
            @reward_function
            def evaluate(messages, **kwargs):
                return EvaluateResult(score=0.0, reason="never", metrics={})
            """
        )
    )
    out = cli(example, "deploy", "--id", "relevance-evaluator", "-m", FOLDER, "--samples", "bad.jsonl")
    assert out.returncode == 1
    assert "relevance-evaluator was not deployed" in out.stderr
    assert not bundles(example / ".reward" / "deploy")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("relevance", "'relevance': expected NAME=PATH"),
        ("=./metrics/relevance", "expected NAME=PATH"),
        ("relevance=./nowhere", "folder ./nowhere not found"),
        ("relevance=./samples.jsonl", "./samples.jsonl is not a directory"),
        ("relevance=./metrics", "./metrics has no main.py"),
    ],
)
def test_bad_metrics_folders_are_usage_errors_naming_them(example, spec, message):
    for command in (["preview", "-s", "samples.jsonl"], ["deploy", "--id", "x"]):
        out = cli(example, *command, "-m", spec)
        assert out.returncode == 4, out.stdout + out.stderr
        assert f"--metrics-folders {spec!r}" in out.stderr and message in out.stderr
        clean(out)


def test_a_folder_without_a_reward_function_or_that_cannot_import_is_named(example):
    empty = example / "metrics" / "empty"
    empty.mkdir()
    (empty / "main.py").write_text("def evaluate(messages, **kwargs):\n    return 1.0\n")
    out = cli(example, "preview", "-m", "empty=./metrics/empty", "-s", "samples.jsonl")
    assert out.returncode == 4
    assert "empty=./metrics/empty:" in out.stderr and "defines no reward function" in out.stderr
    clean(out)
    (empty / "main.py").write_text("import not_a_module_anywhere\n")
    out = cli(example, "preview", "-m", "empty=./metrics/empty", "-s", "samples.jsonl")
    assert out.returncode == 4
    assert "could not import" in out.stderr and "not_a_module_anywhere" in out.stderr
    clean(out)


def test_preview_errors_name_the_samples_file_and_the_id(example):
    out = cli(example, "preview", "-m", FOLDER, "--samples", "missing.jsonl")
    assert out.returncode == 4 and "--samples missing.jsonl: file not found" in out.stderr
    out = cli(example, "deploy", "--id", "has space", "-m", FOLDER)
    assert out.returncode == 4 and "--id 'has space': an evaluator id" in out.stderr
    out = cli(example, "preview", "-m", FOLDER)
    assert out.returncode == 2 and "--samples" in out.stderr  # argparse: required, as in reward-kit


def test_max_samples_runs_the_first_n_samples(example):
    out = cli(example, "preview", "-m", FOLDER, "-s", "samples.jsonl", "--max-samples", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed, 1 deselected" in out.stdout and "line-3" not in out.stdout
    assert "partial" in out.stdout  # the summary says the file was not fully run


def test_the_python_forms(example, tmp_path):
    script = textwrap.dedent(
        f"""
        import json, sys
        from pytest_reward.evaluation import create_evaluation, preview_evaluation
        assert "pytest_reward.plugin" not in sys.modules
        preview = preview_evaluation(metric_folders=["{FOLDER}"], sample_file="samples.jsonl", max_samples=0)
        first = create_evaluation("relevance-evaluator", ["{FOLDER}"], target="dir:{tmp_path / "d"}")
        try:
            create_evaluation("relevance-evaluator", ["{FOLDER}"], target="dir:{tmp_path / "d"}")
        except Exception as exc:
            refused = str(exc)
        try:
            preview_evaluation(metric_folders=["relevance"], sample_file="samples.jsonl")
        except Exception as exc:
            bad = str(exc)
        print(json.dumps({{"code": preview.exit_code, "results": preview.results, "first": first,
                          "refused": refused, "bad": bad}}))
        """
    )
    out = run(example, "-c", script)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["code"] == 0
    assert [r["metric"] for r in got["results"]] == ["relevance"] * 3
    assert [r["score"] for r in got["results"]] == pytest.approx([1 / 3, 0.0, 2 / 7 + 0.2])
    assert got["results"][2]["metrics"]["direct_answer"]["score"] == 1.0
    assert got["first"]["name"].split("/")[-1] == "relevance-evaluator"
    assert got["first"]["displayName"] == "relevance-evaluator"
    assert "pass force=True to replace it" in got["refused"]
    assert "metric_folders 'relevance': expected NAME=PATH" in got["bad"]


class _Server(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.headers.append(dict(self.headers))
        exists = self.headers.get("X-Reward-Replace") != "1"
        body = b'{"error": "exists"}' if exists else b'{"id": "evaluators/relevance-evaluator"}'
        self.send_response(409 if exists else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_an_http_target_answering_409_asks_for_force(example):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    server.headers = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/deploy"
        base = ["deploy", "--id", "relevance-evaluator", "-m", FOLDER, "--target", url]
        out = cli(example, *base)
        assert out.returncode == 1
        assert "already holds deployment 'relevance-evaluator' (HTTP 409" in out.stderr
        assert "pass --force to replace it" in out.stderr
        forced = cli(example, *base, "--force")
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert f"{url}/relevance-evaluator" not in forced.stdout  # the server's id, which ends with the id
        assert "evaluators/relevance-evaluator" in forced.stdout
        assert [h["X-Reward-Deployment-Id"] for h in server.headers] == ["relevance-evaluator"] * 2
    finally:
        server.shutdown()
        server.server_close()


def test_importing_the_evaluation_package_imports_no_pytest_layer():
    out = run(
        REPO,
        "-c",
        "import sys; import pytest_reward.evaluation as e; e.create_evaluation; "
        "print(sorted(m for m in sys.modules if m in ('pytest', 'pytest_reward.plugin', 'jax')))",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
