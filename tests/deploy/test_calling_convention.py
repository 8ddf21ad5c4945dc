"""One calling convention for the reward server and every trainer adapter (``pytest_reward.reward.call.Reward``).

Until the re-layering, ``deploy/adapters.py`` and ``deploy/serve.py`` each had their own copy of how a reward
function is called, and they disagreed with each other and with the test run. Each test below pins one place where
they disagreed: it drives the server over HTTP on loopback and the adapter callables exactly as the trainers call
them, and expects one answer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import types

import httpx
import pytest

from .conftest import module_server, msgs, write_module

REWARDS = '''
"""Reward functions whose results show how they were called."""
import asyncio
import json

from pytest_reward import EvaluateResult, reward_function

_SESSION = {}


@reward_function
async def pooled(messages, **kwargs):
    # Stands for an HTTP client session made on the first call and reused: it belongs to the event loop it was
    # made on, and fails like aiohttp or httpx do once that loop is closed.
    loop = asyncio.get_running_loop()
    made_on = _SESSION.setdefault("loop", loop)
    if made_on.is_closed():
        raise RuntimeError("Event loop is closed")
    return EvaluateResult(score=1.0, reason="session reused")


@reward_function(mode="batch")
def batch_len(rollouts_messages, ground_truth=None, **kwargs):
    return [EvaluateResult(score=min(1.0, len(m[-1]["content"]) / 10), reason="batch") for m in rollouts_messages]


@reward_function
def wrong_type(messages, **kwargs):
    return "not a result"


@reward_function
def context(messages, original_messages="<absent>", **kwargs):
    return EvaluateResult(score=0.5, reason=json.dumps(original_messages))


@reward_function(mode="batch")
def batch_context(rollouts_messages, original_messages="<absent>", **kwargs):
    return [EvaluateResult(score=0.5, reason=json.dumps(original_messages[0]))]


@reward_function
async def async_context(messages, original_messages="<absent>", **kwargs):
    return EvaluateResult(score=0.5, reason=json.dumps(original_messages))
'''

QUESTION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with (
        module_server(tmp_path_factory, REWARDS) as served,
        httpx.Client(base_url=served.url, timeout=30) as client,
    ):
        yield client


@pytest.fixture
def rewards(tmp_path) -> types.ModuleType:
    """The same module, fresh in this process (its session cache empty)."""
    path = write_module(tmp_path, "convention_rewards", REWARDS)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trl(fn, name: str, completions: list[str], *, asynchronous: bool = False) -> list[float | None]:
    """A ``reward_funcs`` entry called as GRPOTrainer calls it (keywords, trainer objects among the columns)."""
    from pytest_reward.deploy.adapters import make_trl_reward

    reward_func = make_trl_reward(fn, name, asynchronous=asynchronous)
    out = reward_func(
        prompts=[QUESTION] * len(completions),
        completions=completions,
        completion_ids=[[1]] * len(completions),
        trainer_state=object(),
        log_metric=lambda *_: None,
    )
    return asyncio.run(out) if asynchronous else out


def verl(functions: dict, solution: str) -> dict[str, float]:
    from pytest_reward.deploy.adapters import make_verl_compute_score

    compute_score = make_verl_compute_score(functions)
    return compute_score(
        data_source="test", solution_str=solution, ground_truth="4", extra_info={"messages": QUESTION}
    )


def openrlhf(functions: dict, response: str) -> dict:
    from pytest_reward.deploy.adapters import make_openrlhf_reward_func

    prompt = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    return make_openrlhf_reward_func(functions)([prompt + response + "<|im_end|>"], [prompt], ["4"])


def slime(functions: dict, response: str) -> float:
    from pytest_reward.deploy.adapters import make_slime_custom_rm

    sample = types.SimpleNamespace(prompt=QUESTION, response=response, label="4")
    return asyncio.run(make_slime_custom_rm(functions)(None, sample))


# --- async rewards: one event loop per thread, not a new loop per call ---------------------------------------------


def test_an_async_reward_keeps_its_event_loop_between_calls_of_a_sync_trainer(rewards):
    """Before: the sync adapters ran each async call with ``asyncio.run`` (a new loop each time), so anything the
    reward made on its first call and reused (a client session) failed from the second call on."""
    from pytest_reward.deploy.adapters import call_reward

    assert trl(rewards.pooled, "pooled", ["4", "5"]) == [1.0, 1.0]
    assert trl(rewards.pooled, "pooled", ["6"]) == [1.0]
    assert [verl({"pooled": rewards.pooled}, s)["pooled_valid"] for s in ("4", "5")] == [1.0, 1.0]
    assert openrlhf({"pooled": rewards.pooled}, "4")["rewards"] == [1.0]
    result = call_reward(rewards.pooled, msgs("2+2?", "4"))  # the Fireworks evaluator's main.py
    assert (result.score, result.error) == (1.0, None)


def test_an_async_reward_keeps_its_event_loop_between_requests(server):
    for _ in range(3):
        body = server.post("/functions/pooled/reward", json={"messages": msgs("2+2?", "4")}).json()
        assert (body["score"], body["error"]) == (1.0, None)


# --- batch-mode rewards: a batch of one, everywhere --------------------------------------------------------------


def test_a_batch_mode_reward_is_scored_on_a_batch_of_one_by_every_adapter_and_the_server(server, rewards):
    """Before: the server called batch-mode functions on a batch of one, but every adapter called them with
    ``messages=`` and got a TypeError (TRL: None; verl, OpenRLHF, slime: 0)."""
    functions = {"batch_len": rewards.batch_len}
    over_http = server.post(
        "/functions/batch_len/slime", json={"prompt": QUESTION, "response": "abcde"}
    ).json()
    assert over_http == pytest.approx(0.5)
    assert trl(rewards.batch_len, "batch_len", ["abcde", "a"]) == pytest.approx([0.5, 0.1])
    assert trl(rewards.batch_len, "batch_len", ["abcde"], asynchronous=True) == pytest.approx([0.5])
    assert verl(functions, "abcde") == {"score": 0.5, "batch_len": 0.5, "batch_len_valid": 1.0}
    assert openrlhf(functions, "abcde")["rewards"] == pytest.approx([0.5])
    assert slime(functions, "abcde") == pytest.approx(0.5)


# --- unusable return values: the test run's message ----------------------------------------------------------------


def test_an_unusable_return_value_is_reported_as_in_the_test_run(server, rewards):
    """Before: the server and the adapters passed on the decorator's raw pydantic text ("RewardReturnError: Return
    value ... failed Pydantic validation"), or their own "reward function returned str"; the test run names the
    function and what it returned."""
    from pytest_reward.deploy.adapters import call_reward

    over_http = server.post("/functions/wrong_type/reward", json={"messages": msgs("q", "a")}).json()
    in_process = call_reward(rewards.wrong_type, msgs("q", "a"))
    expected = "InvalidResult: wrong_type returned str 'not a result': expected EvaluateResult (or a dict with 'score')"
    assert over_http["error"].splitlines()[0] == in_process.error.splitlines()[0] == expected
    assert (over_http["score"], over_http["is_score_valid"]) == (0.0, False)
    assert trl(rewards.wrong_type, "wrong_type", ["a"]) == [None]


# --- original_messages: one rule, in call.Reward ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["context", "batch_context", "async_context"])
def test_original_messages_are_the_conversation_before_the_reply_unless_given(server, rewards, name):
    """The server used to add ``original_messages`` itself and bind it with ``functools.partial`` so that the
    adapters' own copy of the rule would not add it again; one rule now, for pointwise, batch and async functions."""
    from pytest_reward.deploy.adapters import call_reward

    conversation = [*QUESTION, {"role": "assistant", "content": "4"}]
    body = server.post(f"/functions/{name}/reward", json={"messages": conversation}).json()
    assert json.loads(body["reason"]) == QUESTION
    given = server.post(
        f"/functions/{name}/reward", json={"messages": conversation, "original_messages": ["as sent"]}
    ).json()
    assert json.loads(given["reason"]) == ["as sent"]  # a field of the request is passed as it is
    fn = getattr(rewards, name)
    assert json.loads(call_reward(fn, conversation).reason) == QUESTION
    assert json.loads(call_reward(fn, conversation, original_messages=["as sent"]).reason) == ["as sent"]
