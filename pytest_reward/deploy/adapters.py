"""Adapters from reward functions to the call conventions of RL trainers. Pure Python: no trainer is imported.

Every adapter calls reward functions through ``call_reward``, which never raises for an error inside the reward
function: it returns ``EvaluateResult(score=0, is_score_valid=False, error=...)`` (reward-kit's convention), so a
broken sample cannot stall a training step. How each trainer sees such a result:

* TRL ``reward_funcs``: ``None`` (TRL's "not applicable"; the function is skipped for that sample);
* verl ``compute_score`` and OpenRLHF ``reward_func``: score 0 with the same keys as every other sample, and a
  ``<name>_valid`` flag of 0;
* slime ``custom_rm``: 0.0.

Conversions:

* TRL passes ``prompts`` (strings or message lists) and ``completions`` (strings or message lists); every other
  dataset column arrives as a list aligned with them and is forwarded per row; ``trainer_state``, ``log_extra``,
  ``log_metric`` and ``environments`` are trainer objects and are never forwarded. The ground truth is the first
  of the columns ``ground_truth``, ``solution``, ``answer``, ``label`` present.
* verl passes the response only (``solution_str``); the conversation is taken from ``extra_info["messages"]``,
  else ``extra_info["prompt"]`` / ``extra_info["question"]``.
* OpenRLHF passes the templated prompt and the full decoded query (prompt + response, special tokens kept); the
  response is the query after the prompt, with trailing special tokens removed; ``labels`` are the ground truth.
* slime passes ``sample.prompt`` (a string or messages), ``sample.response`` and ``sample.label``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "TRL_INJECTED",
    "acall_reward",
    "call_reward",
    "conversation",
    "make_openrlhf_reward_func",
    "make_slime_custom_rm",
    "make_trl_reward",
    "make_verl_compute_score",
    "response_from_query",
    "result_json",
]

TRL_INJECTED = frozenset({"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"})
GROUND_TRUTH_KEYS = ("ground_truth", "solution", "answer", "label")
_MISSING: Any = object()
_SPECIAL_TAIL = re.compile(r"(?:\s*(?:<\|[^|<>]{1,40}\|>|</s>|<eos>|<end_of_turn>))+\s*$")


def _error_result(exc: BaseException) -> Any:
    from ..models import EvaluateResult

    return EvaluateResult(
        score=0.0, is_score_valid=False, reason="reward function failed", error=f"{type(exc).__name__}: {exc}"
    )


def _finish(value: Any) -> Any:
    from ..models import EvaluateResult

    if isinstance(value, EvaluateResult):
        result = value
    elif hasattr(value, "model_dump"):
        result = EvaluateResult.model_validate(value.model_dump())
    else:
        result = EvaluateResult.model_validate(value) if isinstance(value, dict) else None
        if result is None:
            raise TypeError(f"reward function returned {type(value).__name__}, expected EvaluateResult")
    if not math.isfinite(result.score):
        return result.model_copy(
            update={"score": 0.0, "is_score_valid": False, "error": f"score is {result.score}"}
        )
    return result


def _kwargs(
    fn: Callable[..., Any], messages: list[dict[str, Any]], ground_truth: Any, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's keyword arguments, as in a test run: ``original_messages`` defaults to ``messages[:-1]``."""
    kwargs = dict(extra)
    kwargs["messages"] = messages
    if ground_truth is not _MISSING and ground_truth is not None:
        kwargs["ground_truth"] = ground_truth
    if "original_messages" not in kwargs and _declares(fn, "original_messages"):
        kwargs["original_messages"] = messages[:-1]
    return kwargs


def _declares(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` (possibly a ``functools.partial`` of a reward function) has a parameter ``name``."""
    import functools

    from ..decorator import get_spec

    while isinstance(fn, functools.partial):
        if name in fn.keywords:
            return False
        fn = fn.func
    try:
        return name in get_spec(fn).parameters
    except Exception:  # not analysable: pass nothing extra
        return False


def call_reward(
    fn: Callable[..., Any], messages: list[dict[str, Any]], ground_truth: Any = _MISSING, **extra: Any
) -> Any:
    """Call a reward function; errors inside it become an invalid ``EvaluateResult`` (never raises)."""
    try:
        value = fn(**_kwargs(fn, messages, ground_truth, extra))
        if inspect.isawaitable(value):
            value = asyncio.run(_await(value))
        return _finish(value)
    except Exception as exc:
        return _error_result(exc)


async def _await(value: Any) -> Any:
    return await value


async def acall_reward(
    fn: Callable[..., Any], messages: list[dict[str, Any]], ground_truth: Any = _MISSING, **extra: Any
) -> Any:
    """``call_reward`` for async callers: async functions are awaited, sync ones run in a worker thread."""
    try:
        if inspect.iscoroutinefunction(fn):
            value = await fn(**_kwargs(fn, messages, ground_truth, extra))
        else:
            value = await asyncio.to_thread(fn, **_kwargs(fn, messages, ground_truth, extra))
            if inspect.isawaitable(value):
                value = await value
        return _finish(value)
    except Exception as exc:
        return _error_result(exc)


def result_json(result: Any) -> dict[str, Any]:
    """JSON-safe dict of an ``EvaluateResult`` (no NaN or infinity)."""
    data = result.model_dump(mode="json")
    if not math.isfinite(data.get("score", 0.0)):
        data["score"] = 0.0
    return data


# --- conversations -----------------------------------------------------------------------------------------


def _as_messages(value: Any) -> list[dict[str, Any]] | None:
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return [dict(m) for m in value]
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return _as_messages(parsed)
    return None


_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.S)
_LLAMA3 = re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|$)", re.S)


def parse_chat_template(text: str) -> list[dict[str, Any]] | None:
    """Messages from a prompt rendered with the ChatML or Llama-3 template (as OpenRLHF and slime send them);
    the trailing empty assistant header of a generation prompt is dropped. None for plain text."""
    for pattern in (_CHATML, _LLAMA3):
        found = pattern.findall(text)
        if found:
            messages = [{"role": role, "content": content.strip("\n")} for role, content in found]
            if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
                messages.pop()
            return messages
    return None


def conversation(prompt: Any, response: Any) -> list[dict[str, Any]]:
    """Messages from a prompt (messages, a chat-templated string, or plain text) and a response."""
    messages = _as_messages(prompt)
    if messages is None and isinstance(prompt, str):
        messages = parse_chat_template(prompt)
    if messages is None:
        messages = [] if prompt in (None, "") else [{"role": "user", "content": str(prompt)}]
    reply = _as_messages(response)
    if reply is None:
        reply = [{"role": "assistant", "content": "" if response is None else str(response)}]
    return messages + reply


def response_from_query(query: str, prompt: str) -> str:
    """OpenRLHF: the response is the decoded query after the prompt, without trailing special tokens."""
    text = query[len(prompt) :] if prompt and query.startswith(prompt) else query
    return _SPECIAL_TAIL.sub("", text)


def _ground_truth(columns: Mapping[str, Any]) -> Any:
    for key in GROUND_TRUTH_KEYS:
        if key in columns:
            return columns[key]
    return _MISSING


# --- TRL --------------------------------------------------------------------------------------------------


def make_trl_reward(fn: Callable[..., Any], name: str, *, asynchronous: bool = False) -> Callable[..., Any]:
    """A TRL ``reward_funcs`` entry: ``(prompts, completions, **columns) -> list[float | None]``."""

    def rows(
        prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[tuple[list[dict[str, Any]], Any, dict[str, Any]]]:
        columns = {k: v for k, v in kwargs.items() if k not in TRL_INJECTED and isinstance(v, (list, tuple))}
        out = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            row = {k: v[i] for k, v in columns.items() if i < len(v)}
            gt = _ground_truth(row)
            for key in GROUND_TRUTH_KEYS:
                row.pop(key, None)
            out.append((conversation(prompt, completion), gt, row))
        return out

    def score(result: Any) -> float | None:
        return float(result.score) if result.is_score_valid and result.error is None else None

    def log(kwargs: Mapping[str, Any], results: list[Any]) -> None:
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            names = sorted({m for r in results for m in r.metrics})
            for metric in names:
                values = [r.metrics[metric].score for r in results if metric in r.metrics]
                if values:
                    log_metric(f"{name}/{metric}", sum(values) / len(values))

    if asynchronous:

        async def trl_reward_async(
            prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
        ) -> list[float | None]:
            results = await asyncio.gather(
                *(acall_reward(fn, m, gt, **row) for m, gt, row in rows(prompts, completions, kwargs))
            )
            log(kwargs, list(results))
            return [score(r) for r in results]

        trl_reward_async.__name__ = trl_reward_async.__qualname__ = name
        return trl_reward_async

    def trl_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        results = [call_reward(fn, m, gt, **row) for m, gt, row in rows(prompts, completions, kwargs)]
        log(kwargs, results)
        return [score(r) for r in results]

    trl_reward.__name__ = trl_reward.__qualname__ = name
    return trl_reward


# --- verl -------------------------------------------------------------------------------------------------


def _flat_scores(
    results: Mapping[str, Any], weights: Mapping[str, float], metric_keys: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """Fixed keys for every sample: ``score``, ``<fn>``, ``<fn>_valid``, ``<fn>/<metric>``."""
    total = sum(weights.values()) or 1.0
    out: dict[str, float] = {"score": 0.0}
    for name, result in results.items():
        valid = bool(result.is_score_valid and result.error is None)
        value = float(result.score) if valid else 0.0
        out["score"] += weights.get(name, 1.0) * value / total
        out[name] = value
        out[f"{name}_valid"] = 1.0 if valid else 0.0
        for metric in metric_keys.get(name, ()):
            m = result.metrics.get(metric)
            out[f"{name}/{metric}"] = float(m.score) if (m is not None and valid) else 0.0
    return out


def make_verl_compute_score(
    functions: Mapping[str, Callable[..., Any]],
    weights: Mapping[str, float] | None = None,
    metric_keys: Mapping[str, Sequence[str]] | None = None,
) -> Callable[..., dict[str, float]]:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict``."""
    weights = dict(weights or dict.fromkeys(functions, 1.0))
    metric_keys = dict(metric_keys or {})

    def compute_score(
        data_source: Any,
        solution_str: str,
        ground_truth: Any,
        extra_info: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        info = dict(extra_info or {})
        prompt = info.pop("messages", None) or info.pop("prompt", None) or info.pop("question", None)
        messages = conversation(prompt, solution_str)
        extra = {k: v for k, v in info.items() if k not in ("num_turns", "rollout_reward_scores")}
        extra["data_source"] = data_source
        results = {name: call_reward(fn, messages, ground_truth, **extra) for name, fn in functions.items()}
        return _flat_scores(results, weights, metric_keys)

    return compute_score


# --- OpenRLHF ---------------------------------------------------------------------------------------------


def make_openrlhf_reward_func(
    functions: Mapping[str, Callable[..., Any]],
    weights: Mapping[str, float] | None = None,
    metric_keys: Mapping[str, Sequence[str]] | None = None,
) -> Callable[..., dict[str, Any]]:
    """OpenRLHF's ``reward_func(queries, prompts, labels) -> {"rewards", "scores", "extra_logs"}``."""
    weights = dict(weights or dict.fromkeys(functions, 1.0))
    metric_keys = dict(metric_keys or {})

    def reward_func(
        queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
    ) -> dict[str, Any]:
        rewards: list[float] = []
        extra_logs: dict[str, list[float]] = {}
        for query, prompt, label in zip(queries, prompts, labels, strict=True):
            messages = conversation(prompt, response_from_query(query, prompt))
            results = {name: call_reward(fn, messages, label) for name, fn in functions.items()}
            flat = _flat_scores(results, weights, metric_keys)
            rewards.append(flat.pop("score"))
            for key, value in flat.items():
                extra_logs.setdefault(key, []).append(value)
        return {
            "rewards": rewards,
            "scores": [min(1.0, max(0.0, r)) for r in rewards],
            "extra_logs": extra_logs,
        }

    return reward_func


# --- slime ------------------------------------------------------------------------------------------------


def make_slime_custom_rm(
    functions: Mapping[str, Callable[..., Any]], weights: Mapping[str, float] | None = None
) -> Callable[..., Any]:
    """slime's ``async custom_rm(args, sample) -> float`` (``--custom-rm-path``)."""
    weights = dict(weights or dict.fromkeys(functions, 1.0))

    async def custom_rm(args: Any, sample: Any) -> float:
        messages = conversation(getattr(sample, "prompt", None), getattr(sample, "response", ""))
        label = getattr(sample, "label", _MISSING)
        results = {name: await acall_reward(fn, messages, label) for name, fn in functions.items()}
        return _flat_scores(results, weights, {})["score"]

    return custom_rm
