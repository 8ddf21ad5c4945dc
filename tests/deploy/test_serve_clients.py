"""Real trainer clients against ``pytest-reward serve`` and the bundle's adapters, as a new user would run them.

Opt-in (marker ``clients``): these tests install the clients from the package registry, so they are deselected
unless ``PYTEST_REWARD_CLIENTS=1`` is set (``make test-clients``); then a failed install fails the test, it is
never skipped. Installed once into a cache outside the repository (see conftest): OpenRLHF 0.11.2 and verl 0.9.1
with ``pip install --no-deps --target``, reward-kit 0.4.1 in its own venv (its pins conflict with ours). Their code
is never modified: the only help is a ``sys.modules`` entry for a package ``__init__`` that would import torch.
TRL and slime cannot run here; their documented calls are checked in
``test_trainer_contracts.py``. Each test starts its own server; every network call has a timeout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .conftest import (
    BUNDLE_NAME,
    ODD,
    PROC_BUNDLE_NAME,
    REPO,
    REWARDS,
    installed_target,
    reward_kit_python,
    reward_kit_with_pytest,
    run_client,
    server_env,
    write_module,
)

pytestmark = pytest.mark.clients

TOKEN = "client-test-token"

# --- OpenRLHF 0.11.2 -----------------------------------------------------------------------------------------------

OPENRLHF_CLIENT = """
import asyncio, json, os, sys, types
from types import SimpleNamespace

target, endpoint = sys.argv[1], sys.argv[2]
sys.path.insert(0, target)
# openrlhf/utils/__init__.py imports torch, transformers and sympy; agent.py itself needs only aiohttp.
utils = types.ModuleType("openrlhf.utils")
utils.__path__ = [os.path.join(target, "openrlhf", "utils")]
sys.modules["openrlhf.utils"] = utils
from openrlhf.utils import agent
assert agent.__file__.startswith(target), agent.__file__
import numpy as np


class CharTokenizer:
    # one token per character, special tokens included
    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        return {"input_ids": np.array([[ord(c) for c in text]])}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


class Engine:
    # stands in for vLLM: always answers `reply`
    def __init__(self, reply):
        self.reply = reply

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = SimpleNamespace(token_ids=[ord(c) for c in self.reply], finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


PROMPT = "<|im_start|>user\\nWhat is 2+2?<|im_end|>\\n<|im_start|>assistant\\n"
executor = agent.SingleTurnAgentExecutor(endpoint)
result = {}
if not endpoint.endswith(".py"):
    try:
        result["fetch"] = asyncio.run(executor._fetch_rewards_via_http([PROMPT + "4<|im_end|>"], [PROMPT], ["4"]))
    except Exception as exc:
        result["fetch_error"] = f"{type(exc).__name__}: {exc}"
params = SimpleNamespace(max_tokens=32, logprobs=None)
result["execute"] = {}
replies = sys.argv[3].split(",") if len(sys.argv) > 3 else ["4<|im_end|>", "five<|im_end|>"]
for reply in replies:
    out = asyncio.run(executor.execute(PROMPT, "4", params, 256, CharTokenizer(), Engine(reply)))
    result["execute"][reply] = {k: out[k] for k in ("reward", "scores", "extra_logs")}
print("RESULT " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def openrlhf() -> Path:
    return installed_target("openrlhf", "0.11.2")


def test_openrlhf_remote_reward_path_against_serve(openrlhf, start_server, built_bundle):
    """``SingleTurnAgentExecutor`` with ``--reward.remote_url`` pointing at us (token in the URL: it sends no
    headers): both its sender ``_fetch_rewards_via_http`` and the whole ``execute()`` of a rollout."""
    server = start_server(built_bundle, "--token", TOKEN, token=TOKEN)
    url = f"{server.url}/openrlhf/get_reward?token={TOKEN}"
    result = run_client(sys.executable, OPENRLHF_CLIENT, str(openrlhf), url)
    assert result["fetch"] == [
        {
            "rewards": [0.55],
            "scores": [0.55],
            "extra_logs": {
                "exact": [1.0],
                "exact_valid": [1.0],
                "exact/exact": [1.0],
                "length": [0.1],
                "length_valid": [1.0],
            },
        }
    ]
    right, wrong = result["execute"]["4<|im_end|>"], result["execute"]["five<|im_end|>"]
    assert right["reward"] == [0.55] and right["scores"] == [0.55]
    assert wrong["reward"] == pytest.approx([0.2]) and wrong["extra_logs"]["exact"] == [0.0]
    assert set(right["extra_logs"]) == set(wrong["extra_logs"])  # the same keys for every sample
    assert server.log().count('"POST /openrlhf/get_reward" 200') == 3


def test_openrlhf_sees_a_failing_reward_as_zero_not_as_a_retried_error(openrlhf, start_server, tmp_path):
    server = start_server(write_module(tmp_path, "odd_rewards", ODD))
    result = run_client(
        sys.executable, OPENRLHF_CLIENT, str(openrlhf), f"{server.url}/functions/boom/get_reward"
    )
    assert result["fetch"][0] == {
        "rewards": [0.0],
        "scores": [0.0],
        "extra_logs": {"boom": [0.0], "boom_valid": [0.0]},
    }
    assert result["execute"]["4<|im_end|>"]["reward"] == [0.0]  # not None: OpenRLHF did not give up
    assert server.log().count('"POST /functions/boom/get_reward" 200') == 3  # one request each, no retries


def test_openrlhf_with_a_wrong_token_fails_loudly(openrlhf, start_server, tmp_path):
    server = start_server(write_module(tmp_path, "auth_rewards", REWARDS), "--token", TOKEN, token=TOKEN)
    url = f"{server.url}/get_reward?token=wrong"
    result = run_client(sys.executable, OPENRLHF_CLIENT, str(openrlhf), url, "4<|im_end|>")
    assert "Request error for 5 times" in result["fetch_error"]  # its 5 attempts, then an exception
    assert result["execute"]["4<|im_end|>"]["reward"] is None  # what a trainer would silently get
    assert server.log().count('"POST /get_reward" 401') == 10


def test_openrlhf_reward_func_file_mode_matches_http(openrlhf, start_server, built_bundle):
    """``--reward.remote_url <bundle>/openrlhf_reward.py``: OpenRLHF loads the file with
    ``spec_from_file_location("reward_func", path)`` and calls ``reward_func``; same numbers as over HTTP."""
    path = built_bundle / BUNDLE_NAME / "openrlhf_reward.py"
    env = server_env()
    env.pop("PYTHONPATH", None)
    from_file = run_client(sys.executable, OPENRLHF_CLIENT, str(openrlhf), str(path), env=env)
    server = start_server(built_bundle)
    over_http = run_client(sys.executable, OPENRLHF_CLIENT, str(openrlhf), f"{server.url}/get_reward")
    assert from_file["execute"] == over_http["execute"]
    assert from_file["execute"]["4<|im_end|>"]["reward"] == [0.55]


# --- verl 0.9.1 ------------------------------------------------------------------------------------------------------

VERL_CLIENT = """
import json, os, sys, types

target, path = sys.argv[1], sys.argv[2]
sys.path.insert(0, target)
# verl/__init__.py and verl/utils/__init__.py import torch and ray; import_utils.py is stdlib-only.
for name, sub in (("verl", "verl"), ("verl.utils", os.path.join("verl", "utils"))):
    module = types.ModuleType(name)
    module.__path__ = [os.path.join(target, sub)]
    sys.modules[name] = module
from verl.utils.import_utils import load_extern_object
import verl.utils.import_utils as iu
assert iu.__file__.startswith(target), iu.__file__

compute_score = load_extern_object(module_path=path, object_name="compute_score")
question = [{"role": "user", "content": "What is 2+2?"}]
out = []
for solution in ("4", "five", ""):
    # verl's naive reward manager: keyword arguments; verl adds num_turns / rollout_reward_scores to extra_info
    out.append(compute_score(
        data_source="openai/gsm8k",
        solution_str=solution,
        ground_truth="4",
        extra_info={"messages": question, "index": 0, "num_turns": 1, "rollout_reward_scores": {}},
    ))
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("prefix", ["", "file://"])
def test_verl_load_extern_object_loads_the_bundles_compute_score(built_bundle, prefix):
    verl = installed_target("verl", "0.9.1")
    path = prefix + str(built_bundle / BUNDLE_NAME / "verl.py")
    results = run_client(sys.executable, VERL_CLIENT, str(verl), path)
    keys = {"score", "exact", "exact_valid", "exact/exact", "length", "length_valid"}
    assert all(set(r) == keys for r in results)  # verl indexes every sample with the first one's keys
    assert results[0]["score"] == pytest.approx(0.55)
    assert results[1]["score"] == pytest.approx(0.2) and results[1]["exact"] == 0.0
    assert results[2]["score"] == 0.0
    assert all(isinstance(v, float) for r in results for v in r.values())


VERL_REWARD_KWARGS = """
import json, os, sys, types

target, path = sys.argv[1], sys.argv[2]
sys.path.insert(0, target)
# verl/__init__.py, verl/utils/__init__.py and verl/utils/reward_score/__init__.py import torch, ray and math parsers;
# verl/trainer/ppo/reward.py needs only their names DataProto and get_default_compute_score at import.
for name, sub in (("verl", "verl"), ("verl.utils", os.path.join("verl", "utils"))):
    module = types.ModuleType(name)
    module.__path__ = [os.path.join(target, sub)]
    sys.modules[name] = module
sys.modules["verl"].DataProto = object
scores = types.ModuleType("verl.utils.reward_score")
scores.get_default_compute_score = lambda *args, **kwargs: None
sys.modules["verl.utils.reward_score"] = scores
import verl.trainer.ppo.reward as reward
assert reward.__file__.startswith(target), reward.__file__

config = types.SimpleNamespace(
    reward={"custom_reward_function": {"path": path, "name": "compute_score", "reward_kwargs": {"bonus": 0.75}}}
)
compute_score = reward.get_custom_reward_fn(config)
question = [{"role": "user", "content": "What is 2+2?"}]
print("RESULT " + json.dumps([
    compute_score(data_source="gsm8k", solution_str=s, ground_truth="4", extra_info={"messages": question})
    for s in ("4", "5")
]))
"""


def test_verl_get_custom_reward_fn_passes_reward_kwargs_to_the_reward_functions(proc_bundle):
    """verl 0.9.1's own loader (``get_custom_reward_fn``: ``load_extern_object`` and the ``reward_kwargs`` partial)."""
    verl = installed_target("verl", "0.9.1")
    path = str(proc_bundle / PROC_BUNDLE_NAME / "verl.py")
    right, wrong = run_client(sys.executable, VERL_REWARD_KWARGS, str(verl), path)
    assert right["bonus"] == wrong["bonus"] == 0.75
    assert right["score"] == pytest.approx((1.0 + 0.75) / 2) and wrong["score"] == pytest.approx(0.75 / 2)


# --- reward-kit 0.4.1 ---------------------------------------------------------------------------------------------------

REWARD_KIT_CLIENT = """
import json, sys
from reward_kit import RewardFunction

url = sys.argv[1]
remote = RewardFunction(mode="remote", endpoint=url)
out = {}
for key, answer, kwargs in (("match", "4", {"ground_truth": "4"}), ("miss", "five", {"ground_truth": "4"}), ("no_gt", "4", {})):
    try:
        r = remote(messages=[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": answer}], **kwargs)
        out[key] = {"type": type(r).__name__, "score": r.score, "reason": r.reason,
                    "metrics": {k: [v.score, v.reason] for k, v in r.metrics.items()}}
    except Exception as exc:
        out[key] = {"error": f"{type(exc).__name__}: {exc}"}
print("RESULT " + json.dumps(out))
"""

SHIM_CLIENT = """
import json, sys
from typing import Any, Dict, List, Optional, Union
from reward_kit.evaluation import Evaluator

# The evaluator reward-kit registers with Fireworks for `reward-kit deploy --remote-url URL`.
criteria = Evaluator(remote_url=sys.argv[1])._construct_criteria({})
main_py = criteria[0]["codeSnippets"]["fileContents"]["main.py"]
# The shim's annotations use typing names it does not import (a bug in the client's code, kept as it ships).
namespace = {"Optional": Optional, "Union": Union, "List": List, "Dict": Dict, "Any": Any}
exec(compile(main_py, "main.py", "exec"), namespace)
messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
print("RESULT " + json.dumps(namespace["evaluate"](messages=messages, ground_truth="4", tools=None, foo=1)))
"""


@pytest.fixture(scope="module")
def reward_kit() -> str:
    return reward_kit_python()


RK_PROJECT_REWARDS = """
from reward_kit import EvaluateResult, MetricResult, reward_function


@reward_function
def rk_exact(messages, ground_truth=None, **kwargs):
    ok = messages[-1]["content"] == ground_truth
    return EvaluateResult(
        score=float(ok), reason="exact match", metrics={"exact": MetricResult(score=float(ok), reason="x", success=ok)}
    )
"""


def test_functions_decorated_by_the_real_reward_kit_are_collected(tmp_path):
    """A project written for reward-kit 0.4.1 (its own decorator and models), tested by the plugin unchanged."""
    import subprocess

    python = reward_kit_with_pytest()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "rewards.py").write_text(RK_PROJECT_REWARDS)
    rows = [("4", "4"), ("5", "4"), ("4", "4")]
    (tmp_path / "samples.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": a}],
                    "ground_truth": g,
                }
            )
            + "\n"
            for a, g in rows
        )
    )
    env = {**server_env(), "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [python, "-m", "pytest", "-p", "pytest_reward.plugin", "-p", "no:cacheprovider", "--reward-samples",
         "samples.jsonl", "--reward-threshold", "0.5", "--reward-report", "out", "-rA"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the second sample misses the threshold
    assert "samples.jsonl::rk_exact[line-2]" in proc.stdout and "score 0 < threshold 0.5" in proc.stdout
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [(r["line"], r["score"], r["metrics"], r["reason"]) for r in results] == [
        (1, 1.0, {"exact": 1.0}, "exact match"),
        (2, 0.0, {"exact": 0.0}, "exact match"),
        (3, 1.0, {"exact": 1.0}, "exact match"),
    ]


def test_reward_kit_remote_reward_function_against_serve(reward_kit, start_server, built_bundle):
    server = start_server(built_bundle, "--token", TOKEN, token=TOKEN)
    env = server_env(FIREWORKS_API_KEY=TOKEN)  # RewardFunction sends it as "Authorization: Bearer ..."
    result = run_client(reward_kit, REWARD_KIT_CLIENT, f"{server.url}/functions/exact/reward", env=env)
    assert result["match"] == {
        "type": "EvaluateResult",
        "score": 1.0,
        "reason": "match",
        "metrics": {"exact": [1.0, "exact match"]},
    }
    assert result["miss"]["score"] == 0.0 and result["miss"]["reason"] == "no match"
    # reward-kit's client sends messages[:-1] as the ground truth when none is given
    assert result["no_gt"]["score"] == 0.0
    combined = run_client(reward_kit, REWARD_KIT_CLIENT, f"{server.url}/reward", env=env)
    assert combined["match"]["score"] == pytest.approx(0.55)
    assert set(combined["match"]["metrics"]) == {"exact", "exact/exact", "length"}
    wrong = run_client(
        reward_kit, REWARD_KIT_CLIENT, f"{server.url}/reward", env=server_env(FIREWORKS_API_KEY="x")
    )
    assert "401" in wrong["match"]["error"]


def test_reward_kit_client_reads_a_failing_reward_as_score_zero(reward_kit, start_server, tmp_path):
    server = start_server(write_module(tmp_path, "odd_rewards", ODD))
    result = run_client(reward_kit, REWARD_KIT_CLIENT, f"{server.url}/functions/boom/reward")
    assert (
        result["match"]["score"] == 0.0
    )  # a 200, so the client does not raise; is_score_valid is not read by it


def test_fireworks_remote_shim_posts_to_evaluate(reward_kit, start_server, built_bundle, tmp_path):
    server = start_server(built_bundle, "--token", TOKEN, token=TOKEN)
    result = run_client(reward_kit, SHIM_CLIENT, f"{server.url}/evaluate?token={TOKEN}")
    assert result["score"] == pytest.approx(0.55) and result["is_score_valid"] is True
    odd = start_server(write_module(tmp_path, "odd_rewards", ODD))
    echoed = run_client(reward_kit, SHIM_CLIENT, f"{odd.url}/functions/echo/evaluate")
    seen = json.loads(echoed["reason"])
    assert seen["kwargs"] == {"foo": 1} and seen["ground_truth"] == "4"


def test_our_result_json_is_a_reward_kit_evaluate_result(reward_kit):
    """The /reward answer round-trips through reward-kit's own EvaluateResult model unchanged."""
    code = """
import json, sys
from reward_kit.models import EvaluateResult
print("RESULT " + json.dumps(EvaluateResult(**json.loads(sys.argv[1])).model_dump()))
"""
    ours = {
        "score": 1.0,
        "is_score_valid": True,
        "reason": "match",
        "metrics": {"exact": {"is_score_valid": True, "score": 1.0, "reason": "exact match"}},
        "step_outputs": None,
        "error": None,
    }
    assert run_client(reward_kit, code, json.dumps(ours)) == ours
