"""Every route of ``pytest-reward serve`` and its request/response shapes, against a real server on loopback."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from .conftest import ODD, REWARDS, module_server, msgs

CHATML_PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """A module with two functions: ``exact`` and ``length`` (weights 1 and 1)."""
    with (
        module_server(tmp_path_factory, REWARDS) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        client.server = server
        yield client


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """Functions that raise, return NaN/inf or a wrong type, an echo, a batch-mode and an async function."""
    with (
        module_server(tmp_path_factory, ODD) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        client.server = server
        yield client


def is_finite_json(text: str) -> bool:
    def reject(name):
        raise ValueError(name)

    json.loads(text, parse_constant=reject)
    return True


# --- health, manifest, discovery ----------------------------------------------------------------------------------


def test_health_lists_functions_and_the_content_hash(two):
    body = two.get("/health").json()
    assert body["status"] == "ok"
    assert body["kind"] == "module"
    assert [f["name"] for f in body["functions"]] == ["exact", "length"]
    assert body["combined"] is True
    assert len(body["content_hash"]) == 64
    assert body["threads"]["size"] == 8


def test_manifest_is_generated_for_a_module(two):
    manifest = two.get("/manifest").json()
    assert manifest["generated"] is True
    assert [f["name"] for f in manifest["functions"]] == ["exact", "length"]
    assert manifest["content_hash"] == two.get("/health").json()["content_hash"]


def test_root_lists_the_endpoints(two):
    endpoints = two.get("/").json()["endpoints"]
    assert "/reward" in endpoints and "/openrlhf/get_reward" in endpoints and "/slime" in endpoints


def test_unknown_route_and_wrong_method_answer_json(two):
    missing = two.post("/nope", json={})
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    wrong = two.get("/reward")
    assert wrong.status_code == 405 and "POST" in wrong.headers["allow"]


def test_unknown_function_is_404_naming_the_served_ones(two):
    response = two.post("/functions/nope/reward", json={"messages": msgs("q", "a")})
    assert response.status_code == 404
    assert "exact" in response.json()["detail"] and "length" in response.json()["detail"]


# --- reward-kit: /reward ----------------------------------------------------------------------------------------------


def test_reward_single_function_has_reward_kits_shape(two):
    response = two.post("/functions/exact/reward", json={"messages": msgs("2+2?", "4"), "ground_truth": "4"})
    assert response.status_code == 200
    assert response.json() == {
        "score": 1.0,
        "is_score_valid": True,
        "reason": "match",
        "metrics": {"exact": {"is_score_valid": True, "score": 1.0, "reason": "exact match"}},
        "step_outputs": None,
        "error": None,
    }


def test_reward_with_several_functions_is_their_weighted_mean(two):
    body = two.post("/reward", json={"messages": msgs("2+2?", "4"), "ground_truth": "4"}).json()
    # exact: 1.0, length: len("4") / 10 = 0.1; equal weights
    assert body["score"] == pytest.approx(0.55)
    assert body["is_score_valid"] is True
    assert body["metrics"]["exact"]["score"] == 1.0
    assert body["metrics"]["length"]["score"] == pytest.approx(0.1)
    assert body["metrics"]["exact/exact"]["reason"] == "exact match"
    assert body["reason"] == "weighted mean of exact (weight 1), length (weight 1)"


def test_reward_passes_extra_fields_as_kwargs(odd):
    body = odd.post(
        "/functions/echo/reward", json={"messages": msgs("q", "a"), "ground_truth": "g", "tools": [], "n": 3}
    ).json()
    seen = json.loads(body["reason"])
    assert seen["kwargs"] == {"tools": [], "n": 3}
    assert seen["ground_truth"] == "g"
    assert seen["messages"] == msgs("q", "a")


def test_request_content_is_data_only(odd):
    """Field names that look like code or collide with the server's own call parameters are plain kwargs."""
    extra = {"fn": "os.system", "__import__": "os", "__class__": {"x": 1}, "self": "rm -rf /"}
    payload = {"messages": [{"role": "user", "content": "__import__('os').system('false')"}], **extra}
    response = odd.post("/functions/echo/reward", json=payload)
    assert response.status_code == 200
    seen = json.loads(response.json()["reason"])
    assert seen["kwargs"] == extra and seen["messages"] == payload["messages"]


def test_missing_or_null_ground_truth_is_not_passed(odd):
    for payload in ({"messages": msgs("q", "a")}, {"messages": msgs("q", "a"), "ground_truth": None}):
        seen = json.loads(odd.post("/functions/echo/reward", json=payload).json()["reason"])
        assert seen["ground_truth"] == "<absent>"  # the function's own default, not messages[:-1]


def test_original_messages_default_to_the_conversation_before_the_reply(odd):
    seen = json.loads(odd.post("/functions/echo/reward", json={"messages": msgs("q", "a")}).json()["reason"])
    assert seen["original_messages"] == [{"role": "user", "content": "q"}]


def test_messages_keep_extra_fields_and_allow_tool_calls(odd):
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function"}]},
    ]
    seen = json.loads(odd.post("/functions/echo/reward", json={"messages": messages}).json()["reason"])
    assert seen["messages"] == messages


def test_ground_truth_may_be_any_json(odd):
    for gt in ([{"role": "user", "content": "q"}], {"answer": 4}, 4, ["a", "b"]):
        seen = json.loads(
            odd.post("/functions/echo/reward", json={"messages": msgs("q", "a"), "ground_truth": gt}).json()[
                "reason"
            ]
        )
        assert seen["ground_truth"] == gt


# --- reward-kit: /evaluate ---------------------------------------------------------------------------------------------


def test_evaluate_takes_the_fireworks_shim_body(odd):
    body = {"messages": msgs("q", "a"), "ground_truth": "g", "tools": None, "kwargs": {"foo": 1}}
    response = odd.post("/functions/echo/evaluate", json=body)
    assert response.status_code == 200
    seen = json.loads(response.json()["reason"])
    assert seen["kwargs"] == {"foo": 1}  # tools=None is not passed
    assert seen["ground_truth"] == "g"


def test_evaluate_passes_tools_and_ignores_unknown_top_level_fields(odd):
    body = {"messages": msgs("q", "a"), "tools": [{"type": "function"}], "kwargs": {}, "unknown": 1}
    seen = json.loads(odd.post("/functions/echo/evaluate", json=body).json()["reason"])
    assert seen["kwargs"] == {"tools": [{"type": "function"}]}


def test_evaluate_kwargs_cannot_shadow_top_level_fields(odd):
    response = odd.post(
        "/functions/echo/evaluate", json={"messages": msgs("q", "a"), "kwargs": {"messages": []}}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "kwargs", "messages"]


def test_evaluate_combined(two):
    body = two.post("/evaluate", json={"messages": msgs("2+2?", "4"), "ground_truth": "4"}).json()
    assert body["score"] == pytest.approx(0.55)


# --- OpenRLHF --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/openrlhf/get_reward", "/get_reward"])
def test_openrlhf_shape_with_fixed_extra_log_keys(two, path):
    payload = {
        "query": [CHATML_PROMPT + "4<|im_end|>", CHATML_PROMPT + "five<|endoftext|>"],
        "prompts": [CHATML_PROMPT, CHATML_PROMPT],
        "labels": ["4", "4"],
    }
    body = two.post(path, json=payload).json()
    assert body["rewards"] == pytest.approx([0.55, 0.2])  # exact 1 | 0; length 0.1 | 0.4; mean
    assert body["scores"] == pytest.approx([0.55, 0.2])
    assert set(body["extra_logs"]) == {"exact", "exact_valid", "length", "length_valid"}
    assert all(len(v) == 2 for v in body["extra_logs"].values())
    assert body["extra_logs"]["exact"] == [1.0, 0.0]


def test_openrlhf_per_function(two):
    payload = {"query": [CHATML_PROMPT + "4<|im_end|>"], "prompts": [CHATML_PROMPT], "labels": ["4"]}
    body = two.post("/functions/exact/openrlhf/get_reward", json=payload).json()
    assert body == {"rewards": [1.0], "scores": [1.0], "extra_logs": {"exact": [1.0], "exact_valid": [1.0]}}


def test_openrlhf_query_only_like_its_first_remote_rm(two):
    body = two.post("/functions/length/get_reward", json={"query": ["abcde"]}).json()
    assert body["rewards"] == pytest.approx([0.5])


def test_openrlhf_lists_must_align(two):
    response = two.post(
        "/get_reward", json={"query": ["a", "b"], "prompts": ["a"], "labels": ["x", "y", "z"]}
    )
    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "prompts"], ["body", "labels"]]


def test_openrlhf_scores_are_clamped_to_the_unit_interval(odd):
    body = odd.post(
        "/functions/boom/get_reward", json={"query": ["x"], "prompts": [""], "labels": [""]}
    ).json()
    assert body == {"rewards": [0.0], "scores": [0.0], "extra_logs": {"boom": [0.0], "boom_valid": [0.0]}}


# --- slime ------------------------------------------------------------------------------------------------------------


def test_slime_answers_a_bare_number(two):
    response = two.post(
        "/functions/exact/slime", json={"prompt": CHATML_PROMPT, "response": "4", "label": "4"}
    )
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert response.json() == 1.0


def test_slime_combined_and_dict_format(two):
    payload = {"prompt": [{"role": "user", "content": "2+2?"}], "response": "4", "label": "4"}
    assert two.post("/slime", json=payload).json() == pytest.approx(0.55)
    body = two.post("/slime?format=dict", json=payload).json()
    assert body["score"] == pytest.approx(0.55)
    assert body["exact"] == 1.0 and body["exact_valid"] == 1.0 and body["is_score_valid"] is True


def test_slime_bad_format_parameter(two):
    response = two.post("/slime?format=xml", json={"response": "4"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "format"]


def test_slime_label_of_any_type_and_no_prompt(odd):
    body = odd.post(
        "/functions/echo/slime?format=dict", json={"response": "r", "label": {"k": [1, 2]}}
    ).json()
    assert body["score"] == 0.5 and body["is_score_valid"] is True


# --- reward errors: HTTP 200, score 0, is_score_valid false --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("boom", "RuntimeError: kaboom"),
        ("nan_score", "score is nan"),
        ("inf_score", "score is inf"),
        # the test run's message: it names the function and what came back
        ("wrong_type", "InvalidResult: wrong_type returned str 'not a result': expected EvaluateResult"),
    ],
)
@pytest.mark.parametrize("route", ["reward", "evaluate"])
def test_a_failing_reward_is_200_invalid_with_the_error(odd, name, error, route):
    response = odd.post(f"/functions/{name}/{route}", json={"messages": msgs("q", "a")})
    assert response.status_code == 200
    assert is_finite_json(response.text)
    body = response.json()
    assert body["score"] == 0.0 and body["is_score_valid"] is False
    assert error in body["error"]


@pytest.mark.parametrize("name", ["boom", "nan_score", "inf_score", "wrong_type"])
def test_a_failing_reward_is_a_zero_number_for_slime_and_openrlhf(odd, name):
    slime = odd.post(f"/functions/{name}/slime", json={"prompt": "q", "response": "a"})
    assert slime.status_code == 200 and slime.json() == 0.0
    orl = odd.post(f"/functions/{name}/get_reward", json={"query": ["qa"], "prompts": ["q"], "labels": [""]})
    assert orl.status_code == 200 and is_finite_json(orl.text)
    assert orl.json()["extra_logs"][f"{name}_valid"] == [0.0]


def test_combined_result_is_invalid_when_one_function_fails(odd):
    body = odd.post("/reward", json={"messages": msgs("q", "a")}).json()
    assert body["is_score_valid"] is False
    assert "boom: RuntimeError: kaboom" in body["error"]
    assert is_finite_json(json.dumps(body))
    assert all(math.isfinite(m["score"]) for m in body["metrics"].values())


def test_non_finite_numbers_elsewhere_in_a_result_become_null(odd):
    response = odd.post("/functions/nan_steps/reward", json={"messages": msgs("q", "a")})
    assert response.status_code == 200 and is_finite_json(response.text)
    body = response.json()
    assert body["score"] == 1.0 and body["step_outputs"][0]["base_reward"] is None


def test_functions_of_one_request_cannot_see_each_others_changes(odd):
    body = odd.post("/reward", json={"messages": msgs("q", "a"), "ground_truth": ["x"]}).json()
    seen = json.loads(body["metrics"]["echo"]["reason"].split(": ", 1)[1])
    assert seen["messages"] == msgs("q", "a") and seen["ground_truth"] == ["x"]
    assert body["metrics"]["mutate"]["score"] == 1.0


def test_batch_mode_and_async_functions_are_served_pointwise(odd):
    assert odd.post("/functions/batch_len/slime", json={"response": "abcde"}).json() == pytest.approx(0.5)
    body = odd.post(
        "/functions/async_exact/reward", json={"messages": msgs("q", "4"), "ground_truth": "4"}
    ).json()
    assert body["score"] == 1.0 and body["reason"] == "async"


def test_failures_are_logged_by_the_server(odd):
    odd.post("/functions/boom/reward", json={"messages": msgs("q", "a")})
    assert "reward function boom failed: RuntimeError: kaboom" in odd.server.log()


# --- malformed requests: 422 naming the field ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "payload", "loc"),
    [
        ("/reward", {}, ["body", "messages"]),
        ("/reward", {"messages": "hi"}, ["body", "messages"]),
        ("/reward", {"messages": [{"content": "x"}]}, ["body", "messages", 0, "role"]),
        ("/reward", {"messages": [{"role": 1, "content": "x"}]}, ["body", "messages", 0, "role"]),
        (
            "/reward",
            {"messages": [{"role": "user", "content": 5}]},
            ["body", "messages", 0, "content", "str"],
        ),
        ("/evaluate", {"messages": [], "kwargs": [1]}, ["body", "kwargs"]),
        ("/evaluate", {"messages": [], "tools": "x"}, ["body", "tools"]),
        ("/openrlhf/get_reward", {"prompts": ["p"]}, ["body", "query"]),
        ("/openrlhf/get_reward", {"query": "q"}, ["body", "query"]),
        ("/openrlhf/get_reward", {"query": [1]}, ["body", "query", 0]),
        ("/slime", {"prompt": "p"}, ["body", "response"]),
        ("/slime", {"prompt": "p", "response": 3}, ["body", "response"]),
    ],
)
def test_malformed_request_is_422_with_the_field(two, route, payload, loc):
    response = two.post(route, json=payload)
    assert response.status_code == 422, response.text
    body = response.json()
    assert loc in [e["loc"] for e in body["detail"]]
    assert "/".join(str(p) for p in loc[:2]) in body["error"]


@pytest.mark.parametrize(
    ("content", "msg"),
    [
        (b"{not json", "invalid JSON"),
        (b'{"messages": [], "ground_truth": NaN}', "NaN is not valid JSON"),
        (b'{"messages": [], "x": Infinity}', "Infinity is not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b"", "invalid JSON"),
        (b"\xff\xfe", "invalid JSON"),
    ],
)
def test_bad_json_is_422_on_the_body(two, content, msg):
    response = two.post("/reward", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body"]
    assert msg in response.json()["detail"][0]["msg"]


def test_access_log_has_one_line_per_request_without_the_query_string(two):
    marker = "/functions/exact/slime"
    two.post(f"{marker}?token=secret-in-query", json={"response": "4", "label": "4"})
    lines = [ln for ln in two.server.log().splitlines() if f'"POST {marker}"' in ln]
    assert lines and lines[-1].split('"')[2].split()[0] == "200"
    assert lines[-1].endswith("ms")
    assert "secret-in-query" not in two.server.log()
