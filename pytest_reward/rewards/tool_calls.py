"""``exact_tool_match_reward``: the response's tool calls (OpenAI ``tool_calls`` or ``<tool_call>`` JSON in the
text) equal the expected ones exactly, in order."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..decorator import reward_function
from ..models import EvaluateResult, Message
from ._common import field_of, invalid, metric

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> list[Any]:
    """The JSON objects inside ``<tool_call>…</tool_call>`` tags (unparseable ones skipped)."""
    calls = []
    for raw in _TOOL_CALL.findall(text):
        try:
            calls.append(json.loads(raw.strip()))
        except json.JSONDecodeError:
            continue
    return calls


def _as_dict(call: Any) -> Any:
    return call.model_dump() if hasattr(call, "model_dump") else call


def _simple(call: Any) -> dict[str, Any] | None:
    """``{"name", "arguments"}`` (arguments decoded from JSON) of an OpenAI tool call or a bare
    ``{"name", "arguments"}`` object; ``None`` for anything else."""
    call = _as_dict(call)
    if not isinstance(call, Mapping):
        return None
    function = call.get("function", call) if "function" in call else call
    function = _as_dict(function)
    if not isinstance(function, Mapping) or "name" not in function:
        return None
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    return {"name": function["name"], "arguments": arguments}


def _generated_calls(message: Any) -> list[dict[str, Any] | None]:
    tool_calls = field_of(message, "tool_calls")
    if tool_calls:
        return [_simple(c) for c in tool_calls]
    content = field_of(message, "content")
    if isinstance(content, str) and "<tool_call>" in content:
        return [_simple(c) for c in parse_tool_calls(content)]
    return []


def _canonical(calls: list[dict[str, Any] | None]) -> list[str]:
    return [json.dumps(c, sort_keys=True, default=str) for c in calls]


@reward_function
def exact_tool_match_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: dict[str, Any] | str | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """1.0 when the last message's tool calls equal ``ground_truth["tool_calls"]`` (names and decoded
    arguments, same order), else 0.0. Without a ground truth: 1.0 when the message makes no tool call.
    ``ground_truth`` may be a JSON string. Metric: ``exact_tool_match``.

    Differences from reward-kit (deliberate): a message with ``content: None`` and no ``tool_calls`` no longer
    raises ``TypeError`` (reward-kit evaluated ``"<tool_call>" in None``); tool calls given as bare
    ``{"name", "arguments"}`` objects in ``ground_truth`` are compared like OpenAI-format ones (reward-kit
    silently dropped them, so an expected call without the ``function`` wrapper always mismatched); a result
    always carries the ``exact_tool_match`` metric (reward-kit returned none); an unparseable ground truth is
    an invalid result.
    """
    if not messages:
        return invalid("No messages provided for evaluation.", "exact_tool_match")
    last = messages[-1]
    if not isinstance(last, (Mapping, Message)):
        return invalid(f"Unexpected type for generation message: {type(last).__name__}", "exact_tool_match")
    generated = _generated_calls(last)
    if ground_truth is None:
        score = 0.0 if generated else 1.0
        reason = "Ground truth not provided: 1.0 for no tool call, 0.0 for any tool call."
        return EvaluateResult(score=score, reason=reason, metrics={"exact_tool_match": metric(score, reason)})
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError:
            return invalid(
                f"Ground truth is a string but not JSON: {ground_truth[:100]!r}", "exact_tool_match"
            )
    if not isinstance(ground_truth, Mapping):
        return invalid(f"Ground truth is not a dictionary: {type(ground_truth).__name__}", "exact_tool_match")
    expected = [_simple(c) for c in ground_truth.get("tool_calls") or []]
    score = float(_canonical(generated) == _canonical(expected))
    reason = f"Exact tool match: {len(generated)} generated vs {len(expected)} expected call(s); " + (
        "identical" if score else "different"
    )
    return EvaluateResult(score=score, reason=reason, metrics={"exact_tool_match": metric(score, reason)})
