"""Adapters from reward functions to the call conventions of RL trainers. Pure Python: no trainer is imported.

Every adapter calls reward functions through :class:`pytest_reward.call.Reward` (the calling convention of the
test run: ``original_messages``, a missing ground truth not passed, async functions on one event loop per
thread, batch-mode functions on a batch of one) with :meth:`~pytest_reward.call.Reward.safe`, which never raises
for an error inside the reward function: it returns ``EvaluateResult(score=0, is_score_valid=False, error=...)``
(reward-kit's convention), so a broken sample cannot stall a training step. How each trainer sees such a result:

* TRL ``reward_funcs``: ``None`` (TRL's "not applicable"; the function is skipped for that sample);
* verl ``compute_score`` and OpenRLHF ``reward_func``: score 0 with the same keys as every other sample, and a
  ``<name>_valid`` flag of 0 (:func:`flat_scores`);
* slime ``custom_rm``: 0.0.

Conversions (the conversation helpers are :mod:`pytest_reward.chat`'s):

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
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..call import MISSING, Reward, describe_exception, failed_result
from ..chat import conversation, response_from_query

__all__ = [
    "GROUND_TRUTH_KEYS",
    "TRL_INJECTED",
    "call_reward",
    "conversation",
    "flat_scores",
    "is_valid",
    "make_openrlhf_reward_func",
    "make_slime_custom_rm",
    "make_trl_reward",
    "make_verl_compute_score",
    "openrlhf_answer",
    "response_from_query",
    "result_json",
]

TRL_INJECTED = frozenset({"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"})
GROUND_TRUTH_KEYS = ("ground_truth", "solution", "answer", "label")


def call_reward(
    fn: Callable[..., Any], messages: list[dict[str, Any]], /, ground_truth: Any = MISSING, **fields: Any
) -> Any:
    """Call a reward function as every adapter does; never raises (an error is an invalid ``EvaluateResult``).

    Kept for the code a bundle ships (the Fireworks evaluator's ``main.py``); adapters build one
    :class:`~pytest_reward.call.Reward` per function instead of one per call."""
    try:
        reward = Reward(fn)
    except Exception as exc:  # not a function whose signature can be read
        return failed_result(describe_exception(exc))
    return reward.safe(reward.kwargs(messages, ground_truth, fields))


def is_valid(result: Any) -> bool:
    """Whether a result counts: valid and without an error (an invalid one counts 0 in every weighted score)."""
    return bool(result.is_score_valid and result.error is None)


def result_json(result: Any) -> dict[str, Any]:
    """JSON-safe dict of an ``EvaluateResult`` (no NaN or infinity)."""
    data = result.model_dump(mode="json")
    if not math.isfinite(data.get("score", 0.0)):
        data["score"] = 0.0
    return data


def flat_scores(
    results: Mapping[str, Any], weights: Mapping[str, float], metric_keys: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """One row of plain floats with the same keys for every sample (verl and OpenRLHF index every sample with the
    first one's keys): ``score`` (the weighted mean; an invalid result counts 0), ``<fn>``, ``<fn>_valid`` (1 or
    0), and ``<fn>/<metric>`` for each metric in ``metric_keys``."""
    total = sum(weights.values()) or 1.0
    out: dict[str, float] = {"score": 0.0}
    for name, result in results.items():
        valid = is_valid(result)
        value = float(result.score) if valid else 0.0
        out["score"] += weights.get(name, 1.0) * value / total
        out[name] = value
        out[f"{name}_valid"] = 1.0 if valid else 0.0
        for metric in metric_keys.get(name, ()):
            m = result.metrics.get(metric)
            out[f"{name}/{metric}"] = float(m.score) if (m is not None and valid) else 0.0
    return out


class _Weighted:
    """Several reward functions scored together into :func:`flat_scores` rows (verl, OpenRLHF, slime)."""

    def __init__(
        self,
        functions: Mapping[str, Callable[..., Any]],
        weights: Mapping[str, float] | None,
        metric_keys: Mapping[str, Sequence[str]] | None,
    ) -> None:
        self.rewards = {name: Reward(fn) for name, fn in functions.items()}
        self.weights = dict(weights or dict.fromkeys(functions, 1.0))
        self.metric_keys = dict(metric_keys or {})

    def row(
        self, messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any] | None = None
    ) -> dict[str, float]:
        results = {
            name: reward.safe(reward.kwargs(messages, ground_truth, fields))
            for name, reward in self.rewards.items()
        }
        return flat_scores(results, self.weights, self.metric_keys)

    async def arow(self, messages: list[dict[str, Any]], ground_truth: Any) -> dict[str, float]:
        results = {
            name: await reward.asafe(reward.kwargs(messages, ground_truth))
            for name, reward in self.rewards.items()
        }
        return flat_scores(results, self.weights, self.metric_keys)


# --- TRL --------------------------------------------------------------------------------------------------


def _ground_truth(columns: dict[str, Any]) -> Any:
    """The first ground-truth column present (removed from ``columns``, with every other ground-truth column)."""
    found = next((columns[key] for key in GROUND_TRUTH_KEYS if key in columns), MISSING)
    for key in GROUND_TRUTH_KEYS:
        columns.pop(key, None)
    return found


def make_trl_reward(fn: Callable[..., Any], name: str, *, asynchronous: bool = False) -> Callable[..., Any]:
    """A TRL ``reward_funcs`` entry: ``(prompts, completions, **columns) -> list[float | None]``."""
    reward = Reward(fn)

    def calls(
        prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        columns = {k: v for k, v in kwargs.items() if k not in TRL_INJECTED and isinstance(v, (list, tuple))}
        out = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            row = {k: v[i] for k, v in columns.items() if i < len(v)}
            ground_truth = _ground_truth(row)
            out.append(reward.kwargs(conversation(prompt, completion), ground_truth, row))
        return out

    def scores(kwargs: Mapping[str, Any], results: Sequence[Any]) -> list[float | None]:
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for metric in sorted({m for r in results for m in r.metrics}):
                values = [r.metrics[metric].score for r in results if metric in r.metrics]
                log_metric(f"{name}/{metric}", sum(values) / len(values))
        return [float(r.score) if is_valid(r) else None for r in results]

    if asynchronous:

        async def trl_reward_async(
            prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
        ) -> list[float | None]:
            results = await asyncio.gather(*(reward.asafe(kw) for kw in calls(prompts, completions, kwargs)))
            return scores(kwargs, results)

        trl_reward_async.__name__ = trl_reward_async.__qualname__ = name
        return trl_reward_async

    def trl_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return scores(kwargs, [reward.safe(kw) for kw in calls(prompts, completions, kwargs)])

    trl_reward.__name__ = trl_reward.__qualname__ = name
    return trl_reward


# --- verl -------------------------------------------------------------------------------------------------


def make_verl_compute_score(
    functions: Mapping[str, Callable[..., Any]],
    weights: Mapping[str, float] | None = None,
    metric_keys: Mapping[str, Sequence[str]] | None = None,
) -> Callable[..., dict[str, float]]:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict``."""
    weighted = _Weighted(functions, weights, metric_keys)

    def compute_score(
        data_source: Any,
        solution_str: str,
        ground_truth: Any,
        extra_info: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        info = dict(extra_info or {})
        prompt = info.pop("messages", None) or info.pop("prompt", None) or info.pop("question", None)
        fields = {k: v for k, v in info.items() if k not in ("num_turns", "rollout_reward_scores")}
        fields["data_source"] = data_source
        return weighted.row(conversation(prompt, solution_str), ground_truth, fields)

    return compute_score


# --- OpenRLHF ---------------------------------------------------------------------------------------------


def make_openrlhf_reward_func(
    functions: Mapping[str, Callable[..., Any]],
    weights: Mapping[str, float] | None = None,
    metric_keys: Mapping[str, Sequence[str]] | None = None,
) -> Callable[..., dict[str, Any]]:
    """OpenRLHF's ``reward_func(queries, prompts, labels) -> {"rewards", "scores", "extra_logs"}``."""
    weighted = _Weighted(functions, weights, metric_keys)

    def reward_func(
        queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
    ) -> dict[str, Any]:
        rows = [
            weighted.row(conversation(prompt, response_from_query(query, prompt)), label)
            for query, prompt, label in zip(queries, prompts, labels, strict=True)
        ]
        return openrlhf_answer(rows)

    return reward_func


def openrlhf_answer(rows: Sequence[dict[str, float]]) -> dict[str, Any]:
    """OpenRLHF's answer from :func:`flat_scores` rows: ``rewards`` (the weighted scores), ``scores`` (the same,
    clamped to [0, 1] for its dynamic filtering) and ``extra_logs`` (one list per other key)."""
    rewards: list[float] = []
    extra_logs: dict[str, list[float]] = {}
    for row in rows:
        row = dict(row)
        rewards.append(row.pop("score"))
        for key, value in row.items():
            extra_logs.setdefault(key, []).append(value)
    return {"rewards": rewards, "scores": [min(1.0, max(0.0, r)) for r in rewards], "extra_logs": extra_logs}


# --- slime ------------------------------------------------------------------------------------------------


def make_slime_custom_rm(
    functions: Mapping[str, Callable[..., Any]], weights: Mapping[str, float] | None = None
) -> Callable[..., Any]:
    """slime's ``async custom_rm(args, sample) -> float`` (``--custom-rm-path``)."""
    weighted = _Weighted(functions, weights, None)

    async def custom_rm(args: Any, sample: Any) -> float:
        messages = conversation(getattr(sample, "prompt", None), getattr(sample, "response", ""))
        return (await weighted.arow(messages, getattr(sample, "label", MISSING)))["score"]

    return custom_rm
