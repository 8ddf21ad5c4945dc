"""``exact_tool_match_reward``: the response's tool calls (OpenAI ``tool_calls`` or ``<tool_call>`` JSON in the
text) equal the expected ones exactly, in order.

``schema_jaccard_reward``, ``llm_judge_reward`` and ``composite_function_call_reward`` are reward-kit's deprecated
names for the same check (reward-kit 0.4.1 forwards all three to ``exact_tool_match_reward``, ignoring their other
parameters, and so do we): each call warns with a ``DeprecationWarning`` pointing at the caller.
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message
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
    # "Exact tool match evaluation score: <score>" opens reward-kit's reason too: tools match on it.
    reason = (
        f"Exact tool match evaluation score: {score} ({len(generated)} generated vs {len(expected)} expected "
        f"call(s); {'identical' if score else 'different'})"
    )
    return EvaluateResult(score=score, reason=reason, metrics={"exact_tool_match": metric(score, reason)})


F = TypeVar("F", bound=Callable[..., Any])


def _deprecated(reward: F) -> F:
    """``reward`` (a ``@reward_function``) that warns on every call, blaming the caller's line.

    ``functools.wraps`` carries the reward function's attributes over, so the alias is still a reward function
    (``--reward-fn``, discovery) with the original signature.
    """
    message = (
        f"`{reward.__name__}` is deprecated (as in reward-kit) and only forwards to `exact_tool_match_reward`: "
        "call `exact_tool_match_reward` instead."
    )

    @functools.wraps(reward)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return reward(*args, **kwargs)

    return alias  # type: ignore[return-value]


@_deprecated
@reward_function
def schema_jaccard_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: dict[str, Any] | str | None = None,
    function_call: dict[str, Any] | None = None,
    expected_schema: dict[str, Any] | str | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """Deprecated: ``exact_tool_match_reward(messages=..., ground_truth=...)``. ``function_call`` and
    ``expected_schema`` are accepted for compatibility and ignored."""
    return exact_tool_match_reward(messages=messages, ground_truth=ground_truth, **kwargs)


@_deprecated
@reward_function
def llm_judge_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: dict[str, Any] | str | None = None,
    function_call: dict[str, Any] | None = None,
    expected_schema: dict[str, Any] | str | None = None,
    expected_behavior: str | None = None,
    openai_api_key: str | None = None,
    model: str = "gpt-4o-mini",
    temperature: float = 0.0,
    **kwargs: Any,
) -> EvaluateResult:
    """Deprecated: ``exact_tool_match_reward(messages=..., ground_truth=...)``. No model is called (nor was one in
    reward-kit 0.4.1); the judge parameters are accepted for compatibility and ignored."""
    return exact_tool_match_reward(messages=messages, ground_truth=ground_truth, **kwargs)


@_deprecated
@reward_function
def composite_function_call_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: dict[str, Any] | str | None = None,
    function_call: dict[str, Any] | None = None,
    expected_schema: dict[str, Any] | str | None = None,
    expected_behavior: str | None = None,
    openai_api_key: str | None = None,
    llm_model: str = "gpt-4o-mini",
    weights: dict[str, float] | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """Deprecated: ``exact_tool_match_reward(messages=..., ground_truth=...)``. The schema, judge and weight
    parameters are accepted for compatibility and ignored."""
    return exact_tool_match_reward(messages=messages, ground_truth=ground_truth, **kwargs)
