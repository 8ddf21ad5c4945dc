"""Trainers whose code cannot run here, held to their documented calls: TRL's ``reward_funcs`` (TRL needs CUDA
torch) through the bundle's adapters, and slime's ``remote_rm`` request (slime is not on PyPI) against
``pytest-reward serve``. Nothing is installed: these run in every ``make test``. The real clients that can be
installed (OpenRLHF, verl, reward-kit) are in ``test_serve_clients.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import types
from pathlib import Path

import pytest

from .conftest import ODD, REWARDS, write_module

TOKEN = "contract-test-token"
PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"

# --- TRL: the documented reward_funcs call (TRL itself needs CUDA torch) ----------------------------------------------


def load_module(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TrainerState:
    """Stands in for transformers.TrainerState (an object, not JSON)."""

    global_step = 3


def trl_call(reward_func, prompts, completions, columns, logged):
    """Exactly how GRPOTrainer._calculate_rewards calls a custom reward function (trl 1.16)."""
    reward_kwargs = dict(columns)
    reward_kwargs["trainer_state"] = TrainerState()
    reward_kwargs["log_extra"] = lambda column, values: logged.append(("extra", column, values))
    reward_kwargs["log_metric"] = lambda name, value: logged.append(("metric", name, value))
    completion_ids = [[ord(c) for c in str(c_)] for c_ in completions]
    return reward_func(
        prompts=prompts, completions=completions, completion_ids=completion_ids, **reward_kwargs
    )


@pytest.fixture
def trl_functions(tmp_path):
    return load_module(write_module(tmp_path, "trl_rewards", REWARDS)), load_module(
        write_module(tmp_path, "trl_odd", ODD)
    )


@pytest.mark.parametrize("asynchronous", [False, True])
def test_trl_standard_format(trl_functions, asynchronous):
    from pytest_reward.deploy.adapters import make_trl_reward

    rewards, _ = trl_functions
    reward_func = make_trl_reward(rewards.exact, "exact", asynchronous=asynchronous)
    assert reward_func.__name__ == "exact"  # TRL logs rewards/{__name__}/mean
    assert inspect.iscoroutinefunction(reward_func) is asynchronous  # TRL >= 0.27 awaits async ones together
    # 2 prompts x 2 generations: each dataset row repeated num_generations times
    prompts = ["2+2?", "2+2?", "3+3?", "3+3?"]
    completions = ["4", "five", "6", "6"]
    columns = {"ground_truth": ["4", "4", "6", "6"], "difficulty": ["easy"] * 4}
    logged = []
    out = trl_call(reward_func, prompts, completions, columns, logged)
    if asynchronous:
        out = asyncio.run(out)
    assert out == [1.0, 0.0, 1.0, 1.0]
    assert ("metric", "exact/exact", 0.75) in logged


@pytest.mark.parametrize("asynchronous", [False, True])
def test_trl_conversational_format_and_what_reaches_the_function(trl_functions, asynchronous):
    from pytest_reward.deploy.adapters import make_trl_reward

    _, odd = trl_functions
    prompts = [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]]
    completions = [[{"role": "assistant", "content": "4"}]]
    seen_calls = []
    original = odd.echo.__wrapped__

    def spy(messages, ground_truth="<absent>", **kwargs):
        seen_calls.append({"messages": messages, "ground_truth": ground_truth, "kwargs": kwargs})
        return original(messages, ground_truth=ground_truth, **kwargs)

    from pytest_reward import reward_function

    echo = make_trl_reward(reward_function(spy), "echo", asynchronous=asynchronous)
    out = trl_call(echo, prompts, completions, {"solution": ["4"], "level": [2]}, [])
    if asynchronous:
        out = asyncio.run(out)
    assert out == [0.5]
    (seen,) = seen_calls
    assert seen["messages"] == prompts[0] + completions[0]
    assert seen["ground_truth"] == "4"  # the `solution` column
    assert seen["kwargs"] == {"level": 2}  # other columns per row; trainer objects and completion_ids never


@pytest.mark.parametrize("asynchronous", [False, True])
def test_trl_failing_reward_is_none(trl_functions, asynchronous):
    from pytest_reward.deploy.adapters import make_trl_reward

    _, odd = trl_functions
    for name in ("boom", "nan_score", "wrong_type"):
        reward_func = make_trl_reward(getattr(odd, name), name, asynchronous=asynchronous)
        out = trl_call(reward_func, ["q", "q"], ["a", "b"], {}, [])
        if asynchronous:
            out = asyncio.run(out)
        assert out == [None, None]  # TRL: not applicable for this sample (NaN, excluded), not a zero


# --- slime: its remote_rm request against /slime (slime is not on PyPI) ---------------------------------------------


async def slime_remote_rm(session, url: str, sample: types.SimpleNamespace):
    """slime/rollout/rm_hub remote_rm: POST {prompt, response, label}; the JSON answer is the reward as is."""
    payload = {"prompt": sample.prompt, "response": sample.response, "label": sample.label}
    async with session.post(url, json=payload) as response:
        response.raise_for_status()
        return await response.json()


def run_slime(url: str, samples: list[types.SimpleNamespace]) -> list:
    import aiohttp

    async def main():
        # slime: one shared session, TCPConnector(limit=64), ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=120)
        ) as session:
            return await asyncio.gather(*(slime_remote_rm(session, url, s) for s in samples))

    return asyncio.run(main())


def test_slime_remote_rm_contract(start_server, built_bundle):
    server = start_server(built_bundle, "--token", TOKEN, token=TOKEN)
    templated = types.SimpleNamespace(prompt=PROMPT, response="4", label="4")  # --apply-chat-template
    raw = types.SimpleNamespace(
        prompt=[{"role": "user", "content": "What is 2+2?"}], response="five", label="4"
    )
    numeric_label = types.SimpleNamespace(prompt="What is 2+2?", response="4", label=4)
    samples = [templated, raw, numeric_label] * 22  # 66 in flight through a 64-connection pool
    rewards = run_slime(f"{server.url}/slime?token={TOKEN}", samples)
    assert all(isinstance(r, float) for r in rewards)
    assert rewards[:3] == pytest.approx([0.55, 0.2, 0.55])
    # --reward-key score with ?format=dict
    dicts = run_slime(f"{server.url}/slime?format=dict&token={TOKEN}", samples[:3])
    assert [d["score"] for d in dicts] == pytest.approx([0.55, 0.2, 0.55])
    assert dicts[1]["exact"] == 0.0 and dicts[1]["is_score_valid"] is True


def test_slime_sees_a_failing_reward_as_zero(start_server, tmp_path):
    server = start_server(write_module(tmp_path, "odd_rewards", ODD))
    sample = types.SimpleNamespace(prompt="q", response="a", label=None)
    assert run_slime(f"{server.url}/functions/boom/slime", [sample]) == [0.0]
