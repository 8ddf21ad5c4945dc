"""Helpers for the reward-server tests: servers in subprocesses on loopback, and real trainer clients.

Real clients (OpenRLHF, verl, reward-kit) are installed from the package registry, so the tests that use them are
an explicit opt-in: they carry the marker ``clients`` and are deselected (reported as "deselected", never as passed
or skipped) unless the environment has ``PYTEST_REWARD_CLIENTS=1`` — ``make test-clients`` sets it. An environment
variable rather than a command-line option because this conftest is not loaded before pytest parses its options
when pytest is started on ``tests``. Opted in, a failed install is a failure with pip's output. Clients are
installed once into a cache directory outside the repository (``~/.cache/pytest-reward/clients``, or
``$PYTEST_REWARD_CLIENT_CACHE``), guarded by a lock file because the suite runs under xdist.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT_CACHE = Path(
    os.environ.get("PYTEST_REWARD_CLIENT_CACHE") or Path.home() / ".cache" / "pytest-reward" / "clients"
)
PIP_TIMEOUT = 480  # below pytest-timeout's 600 s, so that a hung install fails with pip's own output
CLIENTS_ENV = "PYTEST_REWARD_CLIENTS"
_LISTENING = re.compile(r"listening on (http://[^\s]+)")

# --- the opt-in for tests that install real clients -------------------------------------------------------------------


def clients_opted_in() -> bool:
    return os.environ.get(CLIENTS_ENV, "") not in ("", "0")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"clients: installs real trainer clients from the package registry; deselected unless {CLIENTS_ENV}=1 "
        "(make test-clients)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if clients_opted_in():
        return
    deselected = [item for item in items if item.get_closest_marker("clients") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.get_closest_marker("clients") is None]


# --- reward modules served in the tests ----------------------------------------------------------------------

REWARDS = '''
"""Reward functions for the server tests."""
import asyncio
import json
import math
import threading

from pytest_reward import EvaluateResult, MetricResult, reward_function


def _answer(messages):
    return str(messages[-1].get("content") or "").strip() if messages else ""


@reward_function
def exact(messages, ground_truth=None, **kwargs):
    ok = ground_truth is not None and _answer(messages) == str(ground_truth).strip()
    score = 1.0 if ok else 0.0
    return EvaluateResult(
        score=score,
        reason="match" if ok else "no match",
        metrics={"exact": MetricResult(score=score, reason="exact match")},
    )


@reward_function
def length(messages, **kwargs):
    score = min(1.0, len(_answer(messages)) / 10)
    return EvaluateResult(score=score, reason=f"{len(_answer(messages))} chars")
'''

ODD = '''
"""Reward functions that misbehave, and one that shows what it was called with."""
import json
import math

from pytest_reward import EvaluateResult, StepOutput, reward_function


@reward_function
def nan_steps(messages, **kwargs):
    return EvaluateResult(score=1.0, reason="steps", step_outputs=[StepOutput(step_index=0, base_reward=math.nan)])


@reward_function
def mutate(messages, ground_truth=None, **kwargs):
    messages.clear()
    if isinstance(ground_truth, list):
        ground_truth.clear()
    return EvaluateResult(score=1.0, reason="mutated its input")


@reward_function
def boom(messages, **kwargs):
    raise RuntimeError("kaboom")


@reward_function
def nan_score(messages, **kwargs):
    return EvaluateResult(score=math.nan, reason="nan")


@reward_function
def inf_score(messages, **kwargs):
    return {"score": math.inf}


@reward_function
def wrong_type(messages, **kwargs):
    return "not a result"


@reward_function
def echo(messages, ground_truth="<absent>", original_messages="<absent>", **kwargs):
    seen = {"messages": messages, "ground_truth": ground_truth, "original_messages": original_messages, "kwargs": kwargs}
    return EvaluateResult(score=0.5, reason=json.dumps(seen, sort_keys=True))


@reward_function(mode="batch")
def batch_len(rollouts_messages, ground_truth=None, **kwargs):
    return [EvaluateResult(score=min(1.0, len(m[-1]["content"]) / 10), reason="batch") for m in rollouts_messages]


@reward_function
async def async_exact(messages, ground_truth=None, **kwargs):
    ok = ground_truth is not None and str(messages[-1]["content"]).strip() == str(ground_truth).strip()
    return EvaluateResult(score=1.0 if ok else 0.0, reason="async")
'''

CONCURRENCY = '''
"""Reward functions that prove where calls run, without timing anything."""
import asyncio
import threading

from pytest_reward import EvaluateResult, reward_function

_BARRIER = threading.Barrier(4)
_ARRIVED = 0
_ALL_HERE = None


@reward_function
def rendezvous(messages, wait=20.0, **kwargs):
    # Returns only when 4 calls run at the same time: proof of 4 threads.
    _BARRIER.wait(timeout=wait)
    return EvaluateResult(score=1.0, reason=threading.current_thread().name)


@reward_function
async def gather(messages, expected=8, **kwargs):
    # Returns only when `expected` calls are awaiting together on the event loop.
    global _ARRIVED, _ALL_HERE
    if _ALL_HERE is None:
        _ALL_HERE = asyncio.Event()
    _ARRIVED += 1
    if _ARRIVED >= expected:
        _ALL_HERE.set()
    await asyncio.wait_for(_ALL_HERE.wait(), 30)
    return EvaluateResult(score=1.0, reason=threading.current_thread().name)


@reward_function
def hang(messages, **kwargs):
    threading.Event().wait(120)
    return EvaluateResult(score=1.0, reason="woke up")


@reward_function
async def hang_async(messages, **kwargs):
    await asyncio.sleep(3600)
    return EvaluateResult(score=1.0, reason="woke up")


@reward_function
def quick(messages, **kwargs):
    return EvaluateResult(score=1.0, reason="quick")
'''


def write_module(directory: Path, name: str, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def msgs(user: str, assistant: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


# --- hand-made bundles (the layout runtime.load_bundle reads) ---------------------------------------------------


def make_bundle(
    directory: Path,
    name: str = "rb_test",
    *,
    weights: dict[str, float] | None = None,
    manifest_update: dict[str, Any] | None = None,
) -> Path:
    """A bundle directory ``<directory>/<name>-v1/<name>/`` serving ``exact`` and ``length`` from REWARDS."""
    weights = weights or {"exact": 2.0, "length": 1.0}
    bundle_dir = directory / f"{name}-v1"
    package = bundle_dir / name
    (package / "src").mkdir(parents=True)
    source = package / "src" / f"{name}_rewards.py"
    source.write_text(textwrap.dedent(REWARDS).lstrip("\n"))
    (package / "__init__.py").write_text(
        "from pytest_reward.deploy.runtime import load_package\n\nMANIFEST, FUNCTIONS, WEIGHTS = load_package(__file__)\n"
    )
    manifest: dict[str, Any] = {
        "format": "pytest-reward-bundle",
        "version": 1,
        "name": name,
        "bundle_version": "v1",
        "content_hash": "0" * 64,
        "files": {f"src/{source.name}": hashlib.sha256(source.read_bytes()).hexdigest()},
        "sys_path": ["src"],
        "functions": [
            {
                "name": fn,
                "module": f"{name}_rewards",
                "attr": fn,
                "source": f"src/{source.name}",
                "weight": weight,
                "metrics": ["exact"] if fn == "exact" else [],
            }
            for fn, weight in weights.items()
        ],
    }
    manifest.update(manifest_update or {})
    (package / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return bundle_dir


# --- servers -------------------------------------------------------------------------------------------------------


def server_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_REWARD_TOKEN", "PYTEST_XDIST", "PYTEST_CURRENT"))
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class ServerProcess:
    """``pytest-reward serve TARGET --port 0 ...`` (or ``command``) in a subprocess; ``url`` once it answers
    ``/health``."""

    def __init__(
        self,
        target: str | Path,
        *args: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        token: str | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.cwd = cwd
        self.log_path = cwd / f"serve-{os.getpid()}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.command = command or [
            sys.executable,
            "-m",
            "pytest_reward.cli",
            "serve",
            str(target),
            "--port",
            "0",
            *args,
        ]
        self.proc = subprocess.Popen(
            self.command, cwd=cwd, env=env or server_env(), stdout=self._log, stderr=subprocess.STDOUT
        )
        self.url = ""
        self.returncode: int | None = None
        self._wait_ready(token)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def _wait_ready(self, token: str | None) -> None:
        import httpx

        deadline = time.monotonic() + 60
        while not self.url:
            match = _LISTENING.search(self.log())
            if match:
                self.url = match.group(1)
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"server did not start: {' '.join(self.command)}\n{self.log()}")
            else:
                time.sleep(0.05)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        while True:
            try:
                if httpx.get(f"{self.url}/health", headers=headers, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"server never answered /health: {' '.join(self.command)}\n{self.log()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 20) -> int | None:
        """SIGINT (what Ctrl-C sends), then SIGKILL if it has not exited within ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                self.returncode = None
                self._log.close()
                return None
        self.returncode = self.proc.returncode
        self._log.close()
        return self.returncode


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Any]:
    """Start servers for one test; all are stopped afterwards (their log is shown if the test failed)."""
    servers: list[ServerProcess] = []

    def start(
        target: str | Path, *args: str, env: dict[str, str] | None = None, token: str | None = None
    ) -> ServerProcess:
        server = ServerProcess(target, *args, cwd=tmp_path, env=env, token=token)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
        print(f"--- {' '.join(server.command)}\n{server.log()}")  # shown by pytest when the test failed


@contextlib.contextmanager
def module_server(
    tmp_path_factory: pytest.TempPathFactory,
    target_source: str,
    *args: str,
    token: str | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("serve")
    path = write_module(
        directory, "rewards_" + hashlib.sha1(target_source.encode()).hexdigest()[:8], target_source
    )
    server = ServerProcess(path, *args, cwd=directory, env=env, token=token)
    try:
        yield server
    finally:
        server.stop()
        print(f"--- {' '.join(server.command)}\n{server.log()}")  # shown by pytest if the last test failed


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``pytest-reward ARGS`` to completion (for commands that fail before serving)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest_reward.cli", *args],
        cwd=cwd,
        env=env or server_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- real clients ----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    CLIENT_CACHE.mkdir(parents=True, exist_ok=True)
    with open(CLIENT_CACHE / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _require_opt_in() -> None:
    """Every test that uses a real client says so, whether or not the client is already in the cache."""
    if not clients_opted_in():
        pytest.fail(
            f"this test uses a real trainer client: mark it @pytest.mark.clients (run with {CLIENTS_ENV}=1)"
        )


def _pip(python: str, *args: str) -> None:
    """Run pip; any failure (the registry unreachable included) fails the test with pip's output."""
    command = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(command)} did not finish within {PIP_TIMEOUT} s:\n{exc.stdout}{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-6000:]}")


def installed_target(package: str, version: str) -> Path:
    """``pip install --no-deps --target DIR package==version`` once; DIR is put on the client's sys.path."""
    _require_opt_in()
    name = f"{package}-{version}"
    directory = CLIENT_CACHE / name
    marker = directory / ".pytest-reward-complete"
    if marker.is_file():
        return directory
    with _locked(name):
        if not marker.is_file():
            shutil.rmtree(directory, ignore_errors=True)
            _pip(sys.executable, "--no-deps", "--target", str(directory), f"{package}=={version}")
            marker.write_text(f"{package}=={version}\n")
    return directory


def reward_kit_python() -> str:
    """The python of a venv holding reward-kit 0.4.1 with the pins it needs to import today."""
    _require_opt_in()
    name = "reward-kit-0.4.1"
    directory = CLIENT_CACHE / name
    python = directory / "bin" / "python"
    marker = directory / ".pytest-reward-complete"
    if marker.is_file() and python.exists():
        return str(python)
    with _locked(name):
        if not (marker.is_file() and python.exists()):
            shutil.rmtree(directory, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True, timeout=300)
            _pip(str(python), "reward-kit==0.4.1", "mcp==1.12.4", "pydantic<2.12")
            check = subprocess.run(
                [str(python), "-c", "import reward_kit, reward_kit.server; print(reward_kit.__file__)"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if check.returncode != 0:
                pytest.fail(f"reward-kit 0.4.1 installed but does not import:\n{check.stdout}{check.stderr}")
            marker.write_text("reward-kit==0.4.1 mcp==1.12.4 pydantic<2.12\n")
    return str(python)


def reward_kit_with_pytest() -> str:
    """reward-kit's venv plus this environment's pytest, pluggy, rich and numpy: a project where reward-kit 0.4.1
    is installed and our plugin runs from the checkout (PYTHONPATH), to collect reward-kit's own functions."""
    from importlib.metadata import version

    python = reward_kit_python()
    pins = " ".join(f"{d}=={version(d)}" for d in ("pytest", "pluggy", "rich", "numpy"))
    marker = Path(python).parent.parent / ".pytest-reward-test-deps"
    if marker.is_file() and marker.read_text() == pins:
        return python
    with _locked("reward-kit-0.4.1"):
        if not (marker.is_file() and marker.read_text() == pins):
            _pip(python, *pins.split())
            marker.write_text(pins)
    return python


def run_client(
    python: str, code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> Any:
    """Run a client script; it prints ``RESULT <json>`` last. Fails with its whole output otherwise."""
    try:
        proc = subprocess.run(
            [python, "-c", textwrap.dedent(code), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env or server_env(),
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"client timed out after {timeout} s\nstdout:\n{exc.stdout}\nstderr:\n{exc.stderr}")
    results = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not results:
        pytest.fail(f"client failed ({proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return json.loads(results[-1][len("RESULT ") :])


# --- a bundle built by the real builder (pytest --reward-deploy) ----------------------------------------------------

BUNDLE_NAME = "served_rewards"
BUNDLE_REWARDS = """
import pytest
from pytest_reward import EvaluateResult, MetricResult, reward_function
from helpers import answer


@reward_function
def exact(messages, ground_truth=None, **kwargs):
    ok = ground_truth is not None and answer(messages) == str(ground_truth).strip()
    score = 1.0 if ok else 0.0
    return EvaluateResult(
        score=score,
        reason="match" if ok else "no match",
        metrics={"exact": MetricResult(score=score, reason="exact match")},
    )


@pytest.mark.reward(threshold=0.0)
@reward_function
def length(messages, **kwargs):
    return EvaluateResult(score=min(1.0, len(answer(messages)) / 10), reason="chars")
"""
BUNDLE_HELPERS = """
def answer(messages):
    return str(messages[-1].get("content") or "").strip() if messages else ""
"""


@pytest.fixture(scope="session")
def built_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pytest --reward-deploy=dir:out`` on a small green project; the bundle directory it wrote."""
    project = tmp_path_factory.mktemp("bundle_project")
    write_module(project, "rewards", BUNDLE_REWARDS)
    write_module(project, "helpers", BUNDLE_HELPERS)
    (project / "pytest.ini").write_text(f"[pytest]\nreward_bundle_name = {BUNDLE_NAME}\n")
    sample = {"messages": msgs("2+2?", "4"), "ground_truth": "4"}
    (project / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--reward-samples",
            "samples.jsonl",
            "--reward-deploy=dir:out",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=server_env(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    bundles = [p for p in (project / "out").iterdir() if p.is_dir() and p.name.startswith(BUNDLE_NAME)]
    assert len(bundles) == 1, bundles
    return bundles[0]


# --- a bundle whose functions show what a trainer passed (tests of the adapters in trainers' processes) -------------

PROC_BUNDLE_NAME = "proc_rewards"
DEPLOY_ARGS = ("--reward-samples", "samples.jsonl", "--reward-deploy=dir:out")
PROC_REWARDS = """
import pytest
from pytest_reward import EvaluateResult, MetricResult, reward_function
from helpers import answer


@reward_function
def exact(messages, ground_truth=None, **kwargs):
    ok = ground_truth is not None and answer(messages) == str(ground_truth).strip()
    score = 1.0 if ok else 0.0
    return EvaluateResult(score=score, reason="match", metrics={"exact": MetricResult(score=score, reason="exact")})


@pytest.mark.reward(threshold=0.0)
@reward_function
def bonus(messages, bonus=0.0, **kwargs):
    # what a trainer passed besides the conversation: verl's reward_kwargs, slime's keyword arguments
    return EvaluateResult(score=float(bonus), reason=",".join(sorted(kwargs)))
"""


@pytest.fixture(scope="session")
def proc_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pytest --reward-deploy=dir:out`` on a green project with ``exact`` and ``bonus``; the bundle directory."""
    project = tmp_path_factory.mktemp("proc_project")
    write_module(project, "rewards", PROC_REWARDS)
    write_module(project, "helpers", BUNDLE_HELPERS)
    (project / "pytest.ini").write_text(f"[pytest]\nreward_bundle_name = {PROC_BUNDLE_NAME}\n")
    (project / "samples.jsonl").write_text(
        json.dumps({"messages": msgs("2+2?", "4"), "ground_truth": "4"}) + "\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *DEPLOY_ARGS],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=server_env(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (found,) = [p for p in (project / "out").iterdir() if p.is_dir()]
    return found
