"""Where reward calls run (threads, the event loop, processes) and what a hung reward does. No timing is asserted:
rendezvous points prove concurrency, because they can only be passed by calls that run at the same time."""

from __future__ import annotations

import concurrent.futures
import os
import time

import httpx
import pytest

from .conftest import CONCURRENCY, REWARDS, msgs, write_module

BODY = {"messages": msgs("q", "a")}


def post_many(url: str, path: str, bodies: list[dict]) -> list[dict]:
    def one(body: dict) -> dict:
        response = httpx.post(url + path, json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(one, bodies))


@pytest.fixture
def conc(tmp_path):
    return write_module(tmp_path, "conc_rewards", CONCURRENCY)


def test_sync_rewards_run_in_as_many_threads_as_asked(start_server, conc):
    server = start_server(conc, "--threads", "4")
    results = post_many(server.url, "/functions/rendezvous/reward", [BODY] * 4)
    assert all(r["is_score_valid"] for r in results), results
    assert len({r["reason"] for r in results}) == 4  # four different threads met at the barrier


def test_fewer_threads_cannot_meet(start_server, conc):
    server = start_server(conc, "--threads", "3")
    body = {**BODY, "wait": 2}
    results = post_many(server.url, "/functions/rendezvous/reward", [body] * 4)
    assert all(not r["is_score_valid"] and "BrokenBarrierError" in r["error"] for r in results)


def test_async_rewards_run_together_on_the_event_loop(start_server, conc):
    server = start_server(conc, "--threads", "1")
    results = post_many(server.url, "/functions/gather/reward", [{**BODY, "expected": 8}] * 8)
    assert all(r["is_score_valid"] for r in results), results
    assert {r["reason"] for r in results} == {"MainThread"}


def test_a_busy_thread_pool_does_not_block_the_loop(start_server, conc):
    server = start_server(conc, "--threads", "1", "--timeout", "60")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        hung = pool.submit(httpx.post, server.url + "/functions/hang/reward", json=BODY, timeout=90)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for _ in range(3000):  # until the only thread is taken by the hung call
                if client.get("/health").json()["threads"]["busy"] or hung.done():
                    break
                time.sleep(0.01)
            assert not hung.done(), hung.result()
            result = client.post("/functions/gather/reward", json={**BODY, "expected": 1}).json()
            assert result["is_score_valid"] and result["reason"] == "MainThread"
            assert client.get("/health").json()["threads"] == {"size": 1, "busy": 1}
        server.stop()  # the hung request is abandoned; the server must still exit
        hung.cancel()


@pytest.mark.parametrize("name", ["hang", "hang_async"])
def test_a_hung_reward_times_out_as_an_invalid_200(start_server, conc, name):
    # Each of the four hung sync calls keeps its thread; the fifth thread stays free for other requests.
    server = start_server(conc, "--timeout", "1", "--threads", "5")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for route in ("reward", "evaluate"):
            response = client.post(f"/functions/{name}/{route}", json=BODY)
            assert response.status_code == 200
            body = response.json()
            assert body["score"] == 0.0 and body["is_score_valid"] is False
            assert (
                body["error"]
                == f"TimeoutError: {name} did not finish within the server's 1 s request timeout"
            )
        assert client.post(f"/functions/{name}/slime", json={"response": "a"}).json() == 0.0
        orl = client.post(f"/functions/{name}/get_reward", json={"query": ["a"]}).json()
        assert orl["extra_logs"][f"{name}_valid"] == [0.0]
        # the server still answers other requests
        assert client.post("/functions/quick/reward", json=BODY).json()["is_score_valid"] is True
        busy = client.get("/health").json()["threads"]["busy"]
    assert busy == (4 if name == "hang" else 0)  # abandoned sync calls keep their threads
    assert server.stop() == 0
    if name == "hang":
        assert "exiting with 4 reward call(s) still running in threads" in server.log()


def test_calls_waiting_for_a_thread_time_out_and_are_dropped(start_server, conc):
    server = start_server(conc, "--timeout", "1", "--threads", "1")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.post("/functions/hang/reward", json=BODY).json()["error"].startswith("TimeoutError")
        queued = client.post("/functions/quick/reward", json=BODY).json()
        assert queued["is_score_valid"] is False and queued["error"].startswith("TimeoutError: quick")
        assert client.get("/health").json()["threads"]["busy"] == 1  # only the hung call holds a thread
    assert server.stop() == 0


def test_timeout_keeps_the_results_that_finished(start_server, tmp_path):
    source = CONCURRENCY.replace("@reward_function\ndef rendezvous", "def rendezvous").replace(
        "@reward_function\nasync def gather", "async def gather"
    )
    path = write_module(tmp_path, "mixed_rewards", source)
    server = start_server(path, "--timeout", "1")
    body = httpx.post(server.url + "/get_reward", json={"query": ["a"]}, timeout=60).json()
    logs = body["extra_logs"]
    assert logs["quick_valid"] == [1.0] and logs["hang_valid"] == [0.0] and logs["hang_async_valid"] == [0.0]
    assert body["rewards"] == pytest.approx([1 / 3])


def test_worker_processes_serve_the_same_routes(start_server, tmp_path):
    path = write_module(tmp_path, "workers_rewards", REWARDS)
    server = start_server(path, "--workers", "2")
    pids = set()
    for _ in range(12):
        with httpx.Client(base_url=server.url, timeout=30) as client:  # a new connection each time
            pids.add(client.get("/health").json()["pid"])
            body = client.post("/reward", json={"messages": msgs("q", "4"), "ground_truth": "4"}).json()
            assert body["score"] == pytest.approx(0.55)
    assert server.proc.pid not in pids  # answered by worker processes, not the supervisor
    assert all(pid != os.getpid() for pid in pids)
    assert server.stop() == 0


def test_connections_are_not_delayed_by_nagle(tmp_path):
    """Responses go out as two writes; without TCP_NODELAY each request waits for a delayed ACK (~40 ms)."""
    import socket
    import threading

    import uvicorn

    from pytest_reward.deploy import serve

    target = serve.load_target(str(write_module(tmp_path, "nodelay_rewards", REWARDS)))
    sock = serve.bind("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY only on sockets that say TCP
    config = uvicorn.Config(serve.create_app(target), http=serve.GuardedH11Protocol, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/health").status_code == 200  # the socket already listens; served once started
            (connection,) = server.server_state.connections
            raw = connection.transport.get_extra_info("socket")
            assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.should_exit = True
        thread.join(30)
