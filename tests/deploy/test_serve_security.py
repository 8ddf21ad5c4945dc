"""Auth, body limits, slow clients and bad bundles: what a server on a shared network must get right."""

from __future__ import annotations

import json
import select
import socket
import tarfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from .conftest import REWARDS, make_bundle, module_server, msgs, run_cli, server_env, write_module

TOKEN = "s3cret-token-for-tests"
BODY = {"messages": msgs("2+2?", "4"), "ground_truth": "4"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A server with a token (given in the environment), a 2000-byte body limit and a 1 s read timeout."""
    env = server_env(PYTEST_REWARD_TOKEN=TOKEN)
    with module_server(
        tmp_path_factory, REWARDS, "--max-body", "2000", "--read-timeout", "1", token=TOKEN, env=env
    ) as server:
        yield server


def post(url: str, path: str, **kwargs) -> httpx.Response:
    return httpx.post(url + path, timeout=30, **kwargs)


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


# --- auth ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": TOKEN},
        {"X-Api-Key": "wrong"},
        {"Authorization": "Basic " + TOKEN},
    ],
)
def test_missing_or_wrong_token_is_401(guarded, headers):
    response = post(guarded.url, "/reward", json=BODY, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(guarded.url + "/health", headers=headers, timeout=30).status_code == 401


def test_wrong_query_token_is_401(guarded):
    assert post(guarded.url, "/slime?token=nope", json={"response": "4"}).status_code == 401
    assert post(guarded.url, f"/slime?token={TOKEN}x", json={"response": "4"}).status_code == 401


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/reward", {"Authorization": f"Bearer {TOKEN}"}),
        ("/reward", {"authorization": f"bearer {TOKEN}"}),
        ("/reward", {"X-Api-Key": TOKEN}),
        (f"/reward?token={TOKEN}", {}),
        (f"/reward?format=dict&token={TOKEN}", {"X-Api-Key": "wrong"}),
    ],
)
def test_bearer_api_key_and_query_token_are_accepted(guarded, path, headers):
    response = post(guarded.url, path, json=BODY, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["score"] == pytest.approx(0.55)


def test_the_401_does_not_read_or_echo_the_body(guarded):
    response = post(guarded.url, "/reward", content=b"x" * 1500)
    assert response.status_code == 401 and "x" * 10 not in response.text


def test_command_line_token_wins_over_the_environment(start_server, tmp_path):
    path = write_module(tmp_path, "cli_token_rewards", REWARDS)
    server = start_server(
        path, "--token", "from-cli", env=server_env(PYTEST_REWARD_TOKEN="from-env"), token="from-cli"
    )
    assert post(server.url, "/reward", json=BODY, headers={"X-Api-Key": "from-cli"}).status_code == 200
    assert post(server.url, "/reward", json=BODY, headers={"X-Api-Key": "from-env"}).status_code == 401


# --- body size -------------------------------------------------------------------------------------------------------


def raw_request(url: str, data: bytes, *, read_timeout: float = 30) -> bytes:
    host, port = urlsplit(url).hostname, urlsplit(url).port
    with socket.create_connection((host, port), timeout=read_timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def test_declared_oversized_body_is_413_before_it_is_sent(guarded):
    head = (
        f"POST /reward HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{"
    )
    answer = raw_request(guarded.url, head.encode())
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in answer.lower()


def test_oversized_json_body_is_413(guarded):
    big = {"messages": msgs("q", "a" * 5000)}
    response = post(guarded.url, "/reward", json=big, headers=auth())
    assert response.status_code == 413
    assert "2000-byte limit" in response.json()["detail"]


def test_oversized_chunked_body_is_413(guarded):
    def chunks():
        for _ in range(10):
            yield b" " * 500

    response = post(guarded.url, "/reward", content=chunks(), headers=auth())
    assert response.status_code == 413


def test_body_under_the_limit_is_served(guarded):
    assert post(guarded.url, "/reward", json=BODY, headers=auth()).status_code == 200


# --- slow clients (slow-loris) -----------------------------------------------------------------------------------------


def trickle(url: str, head: bytes, payload: bytes, pause: float = 0.1) -> tuple[bytes, int]:
    """Send ``head`` then ``payload`` one byte per ``pause`` s until the server answers or closes. Returns what the
    server sent and how many payload bytes went out before that."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head)
        sent = 0
        for i in range(len(payload)):
            readable, _, _ = select.select([sock], [], [], pause)
            if readable:
                break
            try:
                sock.sendall(payload[i : i + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
        received = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            received.append(chunk)
        return b"".join(received), sent


def concurrent_health_checks(url: str, results: list[int], stop: threading.Event) -> None:
    with httpx.Client(timeout=30, headers=auth()) as client:
        while not stop.is_set():
            results.append(client.get(url + "/health").status_code)
            stop.wait(0.05)


def test_slow_body_is_cut_off_while_other_requests_are_served(guarded):
    body = json.dumps(BODY).encode()
    head = (
        f"POST /reward HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body) + 1000}\r\n\r\n"
    ).encode()
    statuses: list[int] = []
    stop = threading.Event()
    checker = threading.Thread(target=concurrent_health_checks, args=(guarded.url, statuses, stop))
    checker.start()
    try:
        answer, sent = trickle(guarded.url, head, body + b" " * 1000)
    finally:
        stop.set()
        checker.join(30)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert sent < len(body) + 1000  # the server gave up before the client finished
    assert statuses and set(statuses) == {200}
    assert '"POST /reward" 408' in guarded.log()


def test_slow_headers_are_cut_off(guarded):
    answer, sent = trickle(
        guarded.url, b"POST /reward HTTP/1.1\r\n", b"X-Padding: " + b"a" * 2000 + b"\r\n\r\n"
    )
    assert answer == b""  # closed without a response
    assert sent < 2000


def test_idle_connection_is_closed(guarded):
    host, port = urlsplit(guarded.url).hostname, urlsplit(guarded.url).port
    with socket.create_connection((host, port), timeout=30) as sock:
        assert sock.recv(1024) == b""


def test_keep_alive_connection_serves_several_requests(guarded):
    with httpx.Client(base_url=guarded.url, headers=auth(), timeout=30) as client:
        for _ in range(3):
            assert client.post("/reward", json=BODY).status_code == 200


# --- bad targets and bundles: a clear error and a non-zero exit --------------------------------------------------------


def test_serve_help(tmp_path):
    result = run_cli("serve", "--help", cwd=tmp_path)
    assert result.returncode == 0
    for text in (
        "BUNDLE_OR_MODULE",
        "--token",
        "--workers",
        "--timeout",
        "--max-body",
        "--function",
        "/openrlhf/get_reward",
    ):
        assert text in result.stdout
    assert "serve" in run_cli("--help", cwd=tmp_path).stdout


def serve_error(tmp_path: Path, *args: str) -> str:
    result = run_cli("serve", *args, "--port", "0", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("pytest-reward serve: error: ")
    return line


def test_a_good_hand_made_bundle_is_served_with_its_weights(start_server, tmp_path):
    bundle = make_bundle(tmp_path)
    server = start_server(bundle)
    health = httpx.get(server.url + "/health", timeout=30).json()
    assert (health["kind"], health["name"], health["version"]) == ("bundle", "rb_test", "v1")
    body = post(server.url, "/reward", json=BODY).json()
    assert body["score"] == pytest.approx((2 * 1.0 + 1 * 0.1) / 3)
    orl = post(server.url, "/get_reward", json={"query": ["q4"], "prompts": ["q"], "labels": ["4"]}).json()
    assert set(orl["extra_logs"]) == {"exact", "exact_valid", "exact/exact", "length", "length_valid"}


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"files": {"../../etc/passwd": "0" * 64}}, "'../../etc/passwd' leaves the bundle"),
        ({"files": {"/etc/passwd": "0" * 64}}, "'/etc/passwd' leaves the bundle"),
        ({"sys_path": ["../../.."]}, "leaves the bundle"),
        ({"name": "../evil"}, "invalid bundle name"),
        ({"name": "bad-name"}, "invalid bundle name"),
        ({"name": "other"}, "does not match the manifest's bundle name"),
        ({"format": "something-else"}, "not a version-1 pytest-reward bundle manifest"),
        (
            {"functions": [{"name": "x", "module": "os", "attr": "system"}]},
            "os:system is not a reward function",
        ),
    ],
)
def test_bad_manifest_is_refused(tmp_path, update, message):
    bundle = make_bundle(tmp_path, manifest_update=update)
    line = serve_error(tmp_path, str(bundle))
    assert "bad bundle" in line and message in line


def test_tampered_file_is_refused(tmp_path):
    bundle = make_bundle(tmp_path)
    source = next((bundle / "rb_test" / "src").glob("*.py"))
    source.write_text(source.read_text() + "\nimport os\n")
    assert "does not match its sha256" in serve_error(tmp_path, str(bundle))


def test_tarball_with_a_path_outside_is_refused(tmp_path):
    evil = tmp_path / "evil.py"
    evil.write_text("raise SystemExit('must never run')\n")
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(evil, arcname="../../evil.py")
    assert "cannot extract" in serve_error(tmp_path, str(archive))


def test_tarball_with_the_package_at_its_top_is_served(start_server, tmp_path):
    bundle = make_bundle(tmp_path / "build")
    archive = tmp_path / "rb_test.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle / "rb_test", arcname="rb_test")
    server = start_server(archive)
    assert httpx.get(server.url + "/health", timeout=30).json()["name"] == "rb_test"


def test_tarball_in_the_builders_layout_is_served(start_server, tmp_path):
    bundle = make_bundle(tmp_path / "build")
    archive = tmp_path / "rb_test-v1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle, arcname=bundle.name)
    server = start_server(archive)
    assert httpx.get(server.url + "/health", timeout=30).json()["name"] == "rb_test"


def test_package_directory_is_served(start_server, tmp_path):
    bundle = make_bundle(tmp_path)
    server = start_server(bundle / "rb_test", "--function", "exact")
    assert [f["name"] for f in httpx.get(server.url + "/health", timeout=30).json()["functions"]] == ["exact"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["does/not/exist.py"], "no such file"),
        (["../etc:passwd"], "no such file"),
        (["no_such_module_xyz"], "cannot import no_such_module_xyz"),
        (["json"], "no reward functions found"),
        (["json:dumps"], "'dumps' is not a reward function"),
        (["--timeout", "0", "json"], "--timeout must be a positive number"),
        (["--threads", "0", "json"], "--threads must be at least 1"),
        (["--workers", "0", "json"], "--workers must be at least 1"),
    ],
)
def test_bad_targets_and_options(tmp_path, args, message):
    assert message in serve_error(tmp_path, *args)


def test_text_file_and_module_without_rewards(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    assert "not a bundle directory" in serve_error(tmp_path, "notes.txt")
    (tmp_path / "plain.py").write_text("x = 1\n")
    assert "no reward functions found" in serve_error(tmp_path, "plain.py")
    (tmp_path / "broken.py").write_text("raise ValueError('broken at import')\n")
    assert "cannot import: ValueError: broken at import" in serve_error(tmp_path, "broken.py")
    write_module(tmp_path, "has_rewards", REWARDS)
    assert "no reward function named 'nope'" in serve_error(tmp_path, "has_rewards.py", "--function", "nope")


def test_port_in_use(tmp_path):
    write_module(tmp_path, "port_rewards", REWARDS)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", "port_rewards.py", "--port", str(port), cwd=tmp_path)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
