"""pytest --reward-deploy: bundles, the green-run gate, targets, and fn.deploy()."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import threading
from pathlib import Path

import pytest

from ..conftest import msgs

HELPER = """
    STOP = {"the", "a", "is"}


    def words(text):
        return {w.strip("?.,!").lower() for w in text.split()} - STOP
"""

RELEVANCE = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult, MetricResult
    from helpers import words
    from scoring.weights import BONUS

    @pytest.mark.reward(threshold=0.2, mean=0.3)
    @reward_function(requirements=["regex>=2024.1"])
    def relevance(messages, ground_truth=None, **kwargs):
        user = next(m["content"] for m in messages if m["role"] == "user")
        answer = messages[-1]["content"]
        overlap = len(words(user) & words(answer)) / max(1, len(words(user)))
        score = min(1.0, overlap + (BONUS if ground_truth and ground_truth in answer else 0.0))
        return EvaluateResult(score=score, reason=f"overlap {overlap:.2f}",
                              metrics={"overlap": MetricResult(score=overlap, reason="words")})
"""


def make_project(project) -> Path:
    project.file("metrics/relevance/main.py", RELEVANCE)
    project.file("metrics/relevance/helpers.py", HELPER)
    project.file("scoring/__init__.py", "")
    project.file("scoring/weights.py", "BONUS = 0.25\n")
    project.file("requirements.txt", "numpy>=1.26  # used by the project\n")
    project.pytester.makeini("[pytest]\npythonpath = .\nreward_bundle_name = demo_rewards\n")
    project.jsonl(
        "samples.jsonl",
        [
            {
                "id": "ml",
                "messages": msgs("What is machine learning?", "Machine learning learns from data"),
                "ground_truth": "data",
            },
            {
                "id": "cook",
                "messages": msgs("How to cook rice?", "Rinse rice, then cook it in water"),
                "ground_truth": "water",
            },
        ],
    )
    return project.path / ".reward" / "deploy"


def bundle_dir(deploy: Path) -> Path:
    (latest,) = [p for p in deploy.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert (deploy / "LATEST").read_text().strip() == latest.name
    return latest


def run_in_fresh_python(code: str, path: Path) -> str:
    """Run code in a new interpreter, away from the project (its directory is not on sys.path)."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd="/",
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_green_run_ships_an_importable_bundle(project):
    deploy = make_project(project)
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*reward deploy: deployed demo_rewards * to dir:*/.reward/deploy: demo_rewards-*"]
    )
    bundle = bundle_dir(deploy)
    pkg = bundle / "demo_rewards"
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert manifest["format"] == "pytest-reward-bundle" and manifest["name"] == "demo_rewards"
    assert bundle.name == f"demo_rewards-{manifest['bundle_version']}"
    assert manifest["content_hash"].startswith(manifest["bundle_version"])
    (fn,) = manifest["functions"]
    assert (fn["name"], fn["module"], fn["attr"]) == ("relevance", "metrics.relevance.main", "relevance")
    assert fn["metrics"] == ["overlap"] and fn["gates"] == {"threshold": 0.2, "mean": 0.3}
    (ev,) = fn["evidence"]
    assert (
        ev["samples"] == "samples.jsonl"
        and ev["n"] == 2
        and ev["verdict"] == "PASS"
        and len(ev["sha256"]) == 64
    )
    # frozen sources: the module, its sibling helper, the package it imports
    for rel in (
        "src/metrics/relevance/main.py",
        "src/metrics/relevance/helpers.py",
        "src/scoring/weights.py",
        "src/scoring/__init__.py",
    ):
        assert (pkg / rel).is_file(), rel
        assert rel in manifest["files"]
    runtime = manifest["runtime"]
    assert re.fullmatch(r"0\.1\.0\+[0-9a-f]{12}", runtime["version"]), runtime
    assert runtime["wheel"] == f"wheels/pytest_reward-{runtime['version']}-py3-none-any.whl"
    assert hashlib.sha256((bundle / runtime["wheel"]).read_bytes()).hexdigest() == runtime["sha256"]
    assert (bundle / "requirements.txt").read_text().splitlines() == [
        "--find-links ./wheels",
        "regex>=2024.1",
        "numpy>=1.26",
        f"pytest-reward=={runtime['version']}",
    ]
    with tarfile.open(deploy / f"{bundle.name}.tar.gz") as tar:
        assert f"{bundle.name}/demo_rewards/src/scoring/weights.py" in tar.getnames()
    # every adapter, from a fresh interpreter without the project on sys.path
    out = run_in_fresh_python(
        f"""
        import asyncio, importlib.util, json, sys, types
        sys.path.insert(0, {str(bundle)!r})
        import demo_rewards
        from demo_rewards import trl, slime
        print("FUNCTIONS", sorted(demo_rewards.FUNCTIONS))
        r = trl.REWARD_FUNCS[0](["What is machine learning?"], ["machine learning from data"], ground_truth=["data"], trainer_state=object())
        print("TRL", r, trl.REWARD_WEIGHTS, trl.relevance.__name__)
        print("TRL_ASYNC", asyncio.run(trl.REWARD_FUNCS_ASYNC[0](["q"], [[{{"role": "assistant", "content": "a"}}]])))
        spec = importlib.util.spec_from_file_location("reward_func", {str(pkg / "openrlhf_reward.py")!r})
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
        p = "<|im_start|>user\\nWhat is machine learning?<|im_end|>\\n<|im_start|>assistant\\n"
        print("OPENRLHF", json.dumps(mod.reward_func([p + "machine learning<|im_end|>"], [p], ["x"])))
        spec = importlib.util.spec_from_file_location("verl_fn", {str(pkg / "verl.py")!r})
        verl = importlib.util.module_from_spec(spec); spec.loader.exec_module(verl)
        print("VERL", json.dumps(verl.compute_score("demo", "machine learning", "x", {{"messages": [{{"role": "user", "content": "What is machine learning?"}}]}})))
        print("SLIME", asyncio.run(slime.custom_rm(None, types.SimpleNamespace(prompt="What is machine learning?", response="machine learning", label="x"))))
        print("PATHS", all("/metrics" not in p or p.startswith({str(bundle)!r}) for p in sys.path))
        """,
        bundle,
    )
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert lines["FUNCTIONS"] == "['relevance']"
    # "What is machine learning?" -> {what, machine, learning}; the answer shares {machine, learning}: 2/3 + 0.25
    assert lines["TRL"] == f"[{min(1.0, 2 / 3 + 0.25)}] [1.0] relevance"
    assert lines["TRL_ASYNC"] == "[0.0]"
    openrlhf = json.loads(lines["OPENRLHF"])
    assert openrlhf["rewards"] == [pytest.approx(2 / 3)] and openrlhf["extra_logs"]["relevance/overlap"] == [
        pytest.approx(2 / 3)
    ]
    verl = json.loads(lines["VERL"])
    assert verl == {
        "score": pytest.approx(2 / 3),
        "relevance": pytest.approx(2 / 3),
        "relevance_valid": 1.0,
        "relevance/overlap": pytest.approx(2 / 3),
    }
    assert float(lines["SLIME"]) == pytest.approx(2 / 3)


def test_same_code_same_bundle_and_the_second_deploy_is_a_no_op(project):
    deploy = make_project(project)
    project.run("--reward-samples", "samples.jsonl", "--reward-deploy").assert_outcomes(passed=2)
    first = bundle_dir(deploy).name
    again = project.run("--reward-samples", "samples.jsonl", "--reward-deploy")
    again.stdout.fnmatch_lines(["*reward deploy: already deployed (unchanged) demo_rewards*"])
    assert bundle_dir(deploy).name == first


def test_a_red_run_is_not_deployed(project):
    deploy = make_project(project)
    project.jsonl("samples.jsonl", [{"id": "bad", "messages": msgs("What is machine learning?", "bananas")}])
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["ERROR reward deploy: not deploying: the session is not green (exit status 1)"]
    )
    assert not deploy.exists()


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["-k", "ml"], "-k 'ml'"),
        (["--deselect", "samples.jsonl::relevance[cook]"], "--deselect"),
    ],
)
def test_partial_runs_are_refused_unless_asked(project, args, reason):
    deploy = make_project(project)
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy", *args)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            f"ERROR reward deploy: not deploying a partial run ({reason}*); pass --reward-deploy-partial to deploy anyway"
        ]
    )
    assert not deploy.exists()
    result = project.run(
        "--reward-samples", "samples.jsonl", "--reward-deploy", "--reward-deploy-partial", *args
    )
    assert result.ret == 0
    manifest = json.loads((bundle_dir(deploy) / "manifest.json").read_text())
    assert manifest["partial"] is True


def test_dry_run_ships_nothing(project):
    deploy = make_project(project)
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy", "--reward-deploy-dry-run")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "reward deploy: dry run: would deploy to dir:.reward/deploy",
            "bundle demo_rewards *",
            "  relevance: metrics.relevance.main:relevance  tested on samples.jsonl n=2 mean=*",
            "  requirements: regex>=2024.1, numpy>=1.26, pytest-reward==0.1.0+*",
        ]
    )
    assert not deploy.exists()


def test_deploy_runs_once_under_xdist(project):
    deploy = make_project(project)
    result = project.run_subprocess(
        "--reward-samples", "samples.jsonl", "--reward-deploy", "-n", "2", "-p", "xdist"
    )
    assert result.ret == 0
    assert result.stdout.str().count("reward deploy: deployed") == 1
    bundle_dir(deploy)


def test_interrupted_deploy_leaves_the_target_as_it_was(project):
    deploy = make_project(project)
    project.run("--reward-samples", "samples.jsonl", "--reward-deploy").assert_outcomes(passed=2)
    latest = (deploy / "LATEST").read_text()
    # change the code; the dry run names the new bundle (its version is its content hash)
    (project.path / "scoring" / "weights.py").write_text("BONUS = 0.3\n")
    dry = project.run("--reward-samples", "samples.jsonl", "--reward-deploy", "--reward-deploy-dry-run")
    (version,) = re.findall(r"^bundle demo_rewards (\w+)$", dry.stdout.str(), re.M)
    new = f"demo_rewards-{version}"
    assert new != latest.strip()
    # something in the way of the new bundle: the copy is staged, then cannot be moved into place
    (deploy / new).write_text("not a bundle\n")
    before = sorted(p.name for p in deploy.iterdir())
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["ERROR reward deploy: deploy to dir:.reward/deploy failed: could not write to *: *Not a directory*"]
    )
    assert sorted(p.name for p in deploy.iterdir()) == before  # no staging directory left, no new tarball
    assert (deploy / "LATEST").read_text() == latest
    assert (deploy / new).read_text() == "not a bundle\n"


@pytest.mark.parametrize("name", ["../evil", "a/b", "1abc", "x-y"])
def test_bundle_names_cannot_escape(project, name):
    make_project(project)
    project.pytester.makeini(f"[pytest]\npythonpath = .\nreward_bundle_name = {name}\n")
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy")
    assert result.ret != 0
    assert "must be a Python identifier" in result.stdout.str() + result.stderr.str()
    assert not any((project.path / ".reward").rglob("*evil*"))


def test_unknown_target_fails_the_session(project):
    make_project(project)
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=s3://bucket/x")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*deploy to s3://bucket/x failed: unknown deploy target 's3://bucket/x'; known schemes: dir:, fireworks:, http:, https:"
        ]
    )


@pytest.mark.parametrize(
    ("args", "last_line"),
    [
        (["--reward-deploy", "-k", "ml"], "*= 1 passed, 1 deselected, 1 deploy refused in *"),
        (["--reward-deploy=https://127.0.0.1:9/x"], "*= 2 passed, 1 deploy failed in *"),
    ],
)
def test_a_deploy_that_fails_the_session_ends_on_a_red_line_naming_it(project, args, last_line):
    make_project(project)
    result = project.run("--reward-samples", "samples.jsonl", "--color=yes", *args)
    assert result.ret == 1
    last = result.stdout.lines[-1]
    # the line is red, as is the part that says why
    assert last.startswith("\x1b[31m") and "\x1b[31m\x1b[1m1 deploy " in last, repr(last)
    result = project.run("--reward-samples", "samples.jsonl", *args)
    assert result.ret == 1
    result.stdout.fnmatch_lines([last_line])


def test_plugins_add_targets_and_hear_about_deploys(project):
    make_project(project)
    project.file(
        "conftest.py",
        """
        import json
        from pytest_reward.deploy.targets import Receipt

        class Memory:
            def __init__(self, spec, config):
                self.spec = spec
            def deploy(self, bundle):
                return Receipt(target="memory:" + self.spec, id="mem-" + bundle.version, location="ram")

        def pytest_reward_register_targets(targets):
            targets.register("memory", Memory, "keep it in memory")

        def pytest_reward_bundle_manifest(manifest, config):
            manifest["team"] = "rl-infra"

        def pytest_reward_deployed(receipt, bundle, config):
            (config.rootpath / "deployed.json").write_text(json.dumps({"id": receipt.id, "team": bundle.manifest["team"]}))
        """,
    )
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=memory:x")
    assert result.ret == 0, result.stdout.str()
    record = json.loads((project.path / "deployed.json").read_text())
    assert record["id"].startswith("mem-") and record["team"] == "rl-infra"


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A loopback HTTP server that records requests and answers from a script."""

    def log_message(self, *args):  # keep test output clean
        pass

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        status, payload = self.server.script(self.command, self.path, dict(self.headers), body)
        data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _handle


@pytest.fixture
def http_server():
    servers = []

    def start(script):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        server.requests = []
        server.script = script
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_http_target_posts_the_tarball_with_a_token_and_retries(project, http_server, monkeypatch):
    make_project(project)
    calls = {"n": 0}

    def script(method, path, headers, body):
        calls["n"] += 1
        if calls["n"] == 1:
            return 503, {"error": "warming up"}
        return 201, {"id": "dep-42", "content_hash": headers["X-Reward-Bundle-Hash"]}

    server = http_server(script)
    monkeypatch.setenv("REWARD_DEPLOY_TOKEN", "s3cret")
    url = f"http://127.0.0.1:{server.server_address[1]}/bundles"
    result = project.run("--reward-samples", "samples.jsonl", f"--reward-deploy={url}")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"reward deploy: deployed demo_rewards * to {url}: dep-42"])
    method, path, headers, body = server.requests[-1]
    assert (method, path) == ("POST", "/bundles") and len(server.requests) == 2
    assert headers["Authorization"] == "Bearer s3cret" and headers["Content-Type"] == "application/gzip"
    with tarfile.open(fileobj=__import__("io").BytesIO(body)) as tar:
        names = tar.getnames()
    assert any(n.endswith("demo_rewards/manifest.json") for n in names)
    assert gzip.decompress(body)  # a real gzip stream


def test_http_target_rejection_fails_the_session_with_the_answer(project, http_server):
    make_project(project)
    server = http_server(lambda *a: (400, {"error": "bundle too large"}))
    url = f"http://127.0.0.1:{server.server_address[1]}/bundles"
    result = project.run("--reward-samples", "samples.jsonl", f"--reward-deploy={url}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [f"*deploy to {url} failed: POST {url} failed (HTTP 400: *bundle too large*)"]
    )
    assert len(server.requests) == 1  # 4xx is not retried


def test_fireworks_target_sends_reward_kits_payload_with_files_and_requirements(
    project, http_server, monkeypatch
):
    make_project(project)
    uploaded = {}

    def script(method, path, headers, body):
        assert headers["Authorization"] == "Bearer fw-key"
        if method == "GET":
            return 200, {"name": "accounts/acct/evaluators/demo-rewards"}  # exists: replaced
        if method == "DELETE":
            return 200, {}
        payload = json.loads(body)
        assert set(payload) == {"evaluatorId", "evaluator"}
        ev = payload["evaluator"]
        assert ev["multiMetrics"] is True and ev["rollupSettings"] == {"skipRollup": True}
        assert "regex>=2024.1" in ev["requirements"]
        (criterion,) = ev["criteria"]
        assert criterion["type"] == "CODE_SNIPPETS" and criterion["codeSnippets"]["language"] == "python"
        files = criterion["codeSnippets"]["fileContents"]
        assert "def evaluate(messages, ground_truth=None, tools=None, **kwargs)" in files["main.py"]
        assert "demo_rewards/src/metrics/relevance/helpers.py" in files
        uploaded.update(files)
        return 200, {"name": f"accounts/acct/evaluators/{payload['evaluatorId']}", "state": "ACTIVE"}

    server = http_server(script)
    monkeypatch.setenv("FIREWORKS_API_BASE", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-key")
    monkeypatch.setenv("FIREWORKS_ACCOUNT_ID", "acct")
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=fireworks")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*deployed demo_rewards * to fireworks: accounts/acct/evaluators/demo-rewards"]
    )
    assert [(m, p) for m, p, *_ in server.requests] == [
        ("GET", "/v1/accounts/acct/evaluators/demo-rewards"),
        ("DELETE", "/v1/accounts/acct/evaluators/demo-rewards"),
        ("POST", "/v1/accounts/acct/evaluators"),
    ]
    # the evaluator as Fireworks runs it: the files in a directory, main.evaluate called with the sample's fields
    evaluator = project.path.parent / "fireworks-evaluator"
    for name, text in uploaded.items():
        (evaluator / name).parent.mkdir(parents=True, exist_ok=True)
        (evaluator / name).write_text(text)
    out = run_in_fresh_python(
        f"""
        import json, sys
        sys.path.insert(0, {str(evaluator)!r})
        from main import evaluate
        messages = [{{"role": "user", "content": "How to cook rice?"}}, {{"role": "assistant", "content": "cook rice in water"}}]
        print(json.dumps([evaluate(messages, ground_truth="water"), evaluate(messages, tools=None, fn="x")]))
        """,
        evaluator,
    )
    with_truth, without = json.loads(out)
    # `fn` is a field like any other (it used to collide with call_reward's own parameter: a TypeError)
    assert with_truth["is_score_valid"] is True and with_truth["score"] == pytest.approx(0.5 + 0.25)
    assert without["score"] == pytest.approx(0.5) and without["error"] is None


def test_fireworks_target_refuses_without_credentials(project, monkeypatch):
    make_project(project)
    monkeypatch.delenv("FIREWORKS_API_KEY", raising=False)
    result = project.run("--reward-samples", "samples.jsonl", "--reward-deploy=fireworks")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*fireworks target needs FIREWORKS_API_KEY and FIREWORKS_ACCOUNT_ID; refusing to upload"]
    )


def test_function_deploy_method(project):
    make_project(project)
    project.file(
        "deploy_it.py",
        """
        import sys
        sys.path[:0] = [".", "metrics/relevance"]
        from metrics.relevance.main import relevance
        from pytest_reward.plugin.deploy_function import RewardDeployError

        print("ID", relevance.deploy(name="relevance_only", samples="samples.jsonl", target="dir:out"))
        try:
            relevance.deploy(name="relevance_only", samples="bad.jsonl", target="dir:out2")
        except RewardDeployError as exc:
            print("RAISED", str(exc).replace("\\n", " | "))
        """,
    )
    project.jsonl("bad.jsonl", [{"id": "nope", "messages": msgs("What is machine learning?", "bananas")}])
    out = subprocess.run(
        [sys.executable, "deploy_it.py"], cwd=project.path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line for line in out.stdout.splitlines() if line.startswith("ID ")]
    (installed,) = [p for p in (project.path / "out").glob("relevance_only-*") if p.is_dir()]
    assert ids == [f"ID {installed.name}"]
    (error,) = [line for line in out.stdout.splitlines() if line.startswith("RAISED ")]
    assert "relevance was not deployed (pytest exit code 1)" in error
    assert "bad.jsonl::relevance[nope]: score 0 < threshold 0.2" in error
    assert not (project.path / "out2").exists()


def test_adapters_pass_original_messages_like_a_test_run():
    import functools

    from pytest_reward import reward_function
    from pytest_reward.deploy.adapters import call_reward

    @reward_function
    def uses_context(messages, original_messages=None, **kwargs):
        return {"score": float(len(original_messages or []))}

    conversation = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
    assert call_reward(uses_context, conversation).score == 2.0
    assert call_reward(functools.partial(uses_context, x=1), conversation).score == 2.0
    assert call_reward(functools.partial(uses_context, original_messages=[]), conversation).score == 0.0
