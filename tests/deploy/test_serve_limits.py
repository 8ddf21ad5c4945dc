"""What one request may carry: a bounded batch, a bounded nesting depth, and a server that keeps answering
``/health`` while a large request is decoded and scored. A real server on loopback, real HTTP clients."""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import pytest

from .conftest import REWARDS, module_server, msgs, run_cli

HEALTH_TIMEOUT = 1.0  # what a load balancer would allow


def queries(n: int, *, prompts: bool = False) -> bytes:
    """An OpenRLHF body of ``n`` queries (about 74 bytes a query without prompts, as in the report)."""
    prompt = [f"<|im_start|>user\nq{i}<|im_end|>\n<|im_start|>assistant\n" for i in range(n)]
    body = {"query": [f"{p}a{i}<|im_end|>" for i, p in enumerate(prompt)]}
    if prompts:
        body["prompts"] = prompt
    return json.dumps(body).encode()


def health_while(url: str, request: concurrent.futures.Future) -> list[float]:
    """Poll ``/health`` (each with a short timeout) until ``request`` is done; the time each poll took. A poll
    that times out fails the test."""
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=HEALTH_TIMEOUT) as client:
        deadline = time.monotonic() + 60
        while not request.done() and time.monotonic() < deadline and len(times) < 2000:
            started = time.perf_counter()
            try:
                assert client.get("/health").status_code == 200
            except httpx.TimeoutException:
                pytest.fail(f"/health did not answer within {HEALTH_TIMEOUT} s while a large request ran")
            times.append(time.perf_counter() - started)
            time.sleep(0.01)
    if times:
        print(f"/health: {len(times)} polls, slowest {max(times) * 1000:.0f} ms")
    return times


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with module_server(tmp_path_factory, REWARDS) as server:  # the default limits
        yield server


def post_raw(url: str, path: str, body: bytes, timeout: float = 30) -> httpx.Response:
    return httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=timeout)


def test_an_oversized_batch_is_413_naming_the_limit_and_health_keeps_answering(server):
    body = queries(100_000)
    assert 7_000_000 < len(body) < 8 << 20  # under --max-body: the batch size is what is refused
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        big = pool.submit(post_raw, server.url, "/get_reward", body)
        times = health_while(server.url, big)
        response = big.result()
    assert response.status_code == 413, response.text[:300]
    assert response.json() == {
        "detail": "a batch of 100000 samples is over the server's limit of 1024 (--max-batch)"
    }
    assert times and max(times) < HEALTH_TIMEOUT


def test_a_batch_at_the_limit_is_scored_while_health_keeps_answering(server):
    body = queries(1024, prompts=True)

    def several() -> list[httpx.Response]:
        return [post_raw(server.url, "/openrlhf/get_reward", body, timeout=60) for _ in range(5)]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        batches = pool.submit(several)
        times = health_while(server.url, batches)
        responses = batches.result()
    for response in responses:
        assert response.status_code == 200, response.text[:300]
        rewards = response.json()["rewards"]
        assert len(rewards) == 1024 and rewards[0] == pytest.approx(0.1)  # "a0": exact 0, length 0.2
    assert times and max(times) < HEALTH_TIMEOUT


def test_max_batch_is_a_setting_of_the_serve_command(tmp_path_factory):
    with module_server(tmp_path_factory, REWARDS, "--max-batch", "2") as small:
        assert post_raw(small.url, "/get_reward", queries(2)).status_code == 200
        response = post_raw(small.url, "/get_reward", queries(3))
        assert response.status_code == 413
        assert (
            response.json()["detail"] == "a batch of 3 samples is over the server's limit of 2 (--max-batch)"
        )
        # the other lists count too: a batch is as long as its longest list
        body = {"query": ["a"], "labels": ["1", "2", "3"]}
        assert post_raw(small.url, "/get_reward", json.dumps(body).encode()).status_code == 413


def test_max_batch_is_documented_and_checked(tmp_path):
    help_text = run_cli("serve", "--help", cwd=tmp_path).stdout
    assert "--max-batch N" in help_text and "(default 1024)" in help_text
    bad = run_cli("serve", "nowhere.py", "--max-batch", "0", cwd=tmp_path)
    assert bad.returncode == 2
    assert "error: --max-batch must be at least 1 sample, not 0" in bad.stderr


def nested(depth: int) -> object:
    value: object = "4"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/reward", {"messages": msgs("2+2?", "4"), "ground_truth": nested(600)}),  # two functions: was a 500
        (
            "/functions/exact/reward",
            {"messages": msgs("2+2?", "4"), "ground_truth": nested(600)},
        ),  # was blamed on it
        ("/evaluate", {"messages": msgs("2+2?", "4"), "kwargs": {"deep": nested(600)}}),
        ("/get_reward", {"query": ["4"], "labels": [nested(600)]}),
        ("/slime", {"response": "4", "label": nested(600)}),
    ],
)
def test_a_deeply_nested_body_is_400_naming_the_depth_limit(server, path, body):
    response = post_raw(server.url, path, json.dumps(body).encode())
    assert response.status_code == 400, response.text[:300]
    assert response.json() == {
        "detail": "request body nests lists and objects deeper than 100 levels "
        "(the server's limit, counting the body itself)"
    }


def test_too_deep_for_the_json_parser_is_the_same_400(server):
    body = '{"messages": [], "ground_truth": ' + "[" * 5000 + "]" * 5000 + "}"
    response = post_raw(server.url, "/reward", body.encode())
    assert response.status_code == 400
    assert "deeper than 100 levels" in response.json()["detail"]


def test_nesting_within_the_limit_is_scored(server):
    body = {"messages": msgs("2+2?", "4"), "ground_truth": nested(90)}
    response = post_raw(server.url, "/functions/exact/reward", json.dumps(body).encode())
    assert response.status_code == 200
    assert response.json()["is_score_valid"] is True
