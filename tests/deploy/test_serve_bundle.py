"""Serving a bundle written by ``pytest --reward-deploy``: what /health and /manifest report, the same numbers as
the bundle's own in-process adapters, ``python -m <bundle>``, and refusing tampered copies."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .conftest import BUNDLE_NAME, ServerProcess, msgs, run_cli, server_env

PROMPT = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"


def test_health_and_manifest_describe_the_bundle(start_server, built_bundle):
    manifest = json.loads((built_bundle / BUNDLE_NAME / "manifest.json").read_text())
    server = start_server(built_bundle)
    health = httpx.get(server.url + "/health", timeout=30).json()
    assert health["kind"] == "bundle" and health["name"] == BUNDLE_NAME
    assert health["version"] == manifest["bundle_version"]
    assert health["content_hash"] == manifest["content_hash"]
    assert [f["name"] for f in health["functions"]] == ["exact", "length"]
    assert health["functions"][0]["metrics"] == ["exact"]
    assert httpx.get(server.url + "/manifest", timeout=30).json() == manifest


def test_http_answers_equal_the_bundles_in_process_adapters(start_server, built_bundle, tmp_path):
    server = start_server(built_bundle)
    payload = {
        "query": [PROMPT + "4<|im_end|>", PROMPT + "five<|im_end|>"],
        "prompts": [PROMPT] * 2,
        "labels": ["4", "4"],
    }
    over_http = httpx.post(server.url + "/openrlhf/get_reward", json=payload, timeout=30).json()
    slime_http = httpx.post(
        server.url + "/slime", json={"prompt": PROMPT, "response": "4", "label": "4"}, timeout=30
    )
    code = f"""
import asyncio, importlib.util, json, sys, types
spec = importlib.util.spec_from_file_location("reward_func", {str(built_bundle / BUNDLE_NAME / "openrlhf_reward.py")!r})
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
sys.path.insert(0, {str(built_bundle)!r})
from {BUNDLE_NAME} import slime
sample = types.SimpleNamespace(prompt={PROMPT!r}, response="4", label="4")
print(json.dumps([module.reward_func({payload["query"]!r}, {payload["prompts"]!r}, ["4", "4"]), asyncio.run(slime.custom_rm(None, sample))]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    in_process, slime_local = json.loads(out.stdout)
    assert over_http == in_process
    assert over_http["rewards"] == pytest.approx([0.55, 0.2])
    assert slime_http.json() == slime_local == pytest.approx(0.55)


def test_reward_route_on_the_bundle(start_server, built_bundle):
    server = start_server(built_bundle, "--function", "exact")
    body = httpx.post(
        server.url + "/reward", json={"messages": msgs("2+2?", "4"), "ground_truth": "4"}, timeout=30
    )
    assert body.json()["score"] == 1.0 and body.json()["metrics"]["exact"]["score"] == 1.0


def test_python_dash_m_bundle_serves_it(built_bundle, tmp_path):
    """The bundle's own entry point (``python -m <bundle>``) hands over to ``pytest-reward serve``."""
    command = [sys.executable, "-m", BUNDLE_NAME, "--port", "0", "--token", "t0k"]
    env = server_env(PYTHONPATH=str(built_bundle))
    server = ServerProcess(built_bundle, cwd=tmp_path, env=env, token="t0k", command=command)
    try:
        health = httpx.get(server.url + "/health?token=t0k", timeout=30).json()
        assert health["name"] == BUNDLE_NAME
        assert httpx.get(server.url + "/health", timeout=30).status_code == 401
    finally:
        assert server.stop() == 0


def test_the_builders_tarball_is_served(start_server, built_bundle):
    """The .tar.gz next to the bundle directory (``<name>-<version>/<name>/`` inside) serves the same bundle."""
    archive = built_bundle.parent / f"{built_bundle.name}.tar.gz"
    server = start_server(archive)
    health = httpx.get(server.url + "/health", timeout=30).json()
    assert health["name"] == BUNDLE_NAME
    manifest = json.loads((built_bundle / BUNDLE_NAME / "manifest.json").read_text())
    assert health["content_hash"] == manifest["content_hash"]


@pytest.mark.parametrize(
    ("sig", "workers"),
    [(signal.SIGINT, "1"), (signal.SIGTERM, "1"), (signal.SIGTERM, "2")],
    ids=["SIGINT", "SIGTERM", "SIGTERM-workers-2"],
)
def test_a_served_tarball_leaves_no_extraction_directory(built_bundle, tmp_path, sig, workers):
    """A real server process on 127.0.0.1, stopped by a real signal: the directory the .tar.gz was extracted to
    (in the server's temp dir) is gone, and the server exits 0."""
    archive = built_bundle.parent / f"{built_bundle.name}.tar.gz"
    temp = tmp_path / "tmp"
    temp.mkdir()
    server = ServerProcess(archive, "--workers", workers, cwd=tmp_path, env=server_env(TMPDIR=str(temp)))
    try:
        (extracted,) = [p for p in temp.iterdir() if p.name.startswith("pytest-reward-")]
        assert (extracted / built_bundle.name / BUNDLE_NAME / "manifest.json").is_file()
        answer = httpx.post(
            server.url + "/reward", json={"messages": msgs("2+2?", "4"), "ground_truth": "4"}, timeout=30
        )
        assert answer.json()["score"] == pytest.approx(0.55)
        server.proc.send_signal(sig)
        assert server.proc.wait(60) == 0, server.log()
    finally:
        server.stop()
    assert not [p.name for p in temp.iterdir() if p.name.startswith("pytest-reward-")], server.log()


def copy_bundle(built_bundle: Path, tmp_path: Path) -> Path:
    copy = tmp_path / built_bundle.name
    shutil.copytree(built_bundle, copy)
    return copy


def refused(bundle: Path, tmp_path: Path) -> str:
    result = run_cli("serve", str(bundle), "--port", "0", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


def test_tampered_frozen_source_is_refused(built_bundle, tmp_path):
    copy = copy_bundle(built_bundle, tmp_path)
    source = copy / BUNDLE_NAME / "src" / "rewards.py"
    source.write_text(source.read_text().replace("1.0 if ok", "1.0 if True"))
    assert "src/rewards.py does not match its sha256 in manifest.json" in refused(copy, tmp_path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["files"].update({"../../etc/passwd": "0" * 64}), "'../../etc/passwd' leaves the bundle"),
        (lambda m: m.update(sys_path=["../../../.."]), "leaves the bundle"),
        (lambda m: m["functions"][0].update(source="../../../etc/passwd"), "leaves the bundle"),
        (lambda m: m.update(name="../../evil"), "invalid bundle name"),
    ],
)
def test_manifest_pointing_outside_the_bundle_is_refused(built_bundle, tmp_path, edit, message):
    copy = copy_bundle(built_bundle, tmp_path)
    path = copy / BUNDLE_NAME / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    assert message in refused(copy, tmp_path)
