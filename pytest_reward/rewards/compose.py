"""Composition: run several reward functions as components of one reward, each reported as a metric.

``combine(weights={format_reward: 0.2, math_reward: 0.8})`` returns a ``@reward_function`` named
``combined_reward`` (or ``name=``) whose score is the weighted mean of the components' scores and whose
metrics hold one entry per component, named after the component (its ``__name__``, or the key given in
``components=``), so a plugin marker can gate each one: ``@pytest.mark.reward(metrics={"math_reward":
{"mean": 0.6}})``. With ``include_submetrics=True`` each component's own metrics are added as
``"<component>.<metric>"``.

Failure handling: a component that raises becomes an invalid metric whose reason names the exception; a
component that returns ``is_score_valid=False`` stays invalid. Either way the combined result is
``is_score_valid=False`` and its ``error`` lists the components concerned; the failing component contributes
0 to the weighted score, so the score is still defined.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message, MetricResult
from ._common import metric

__all__ = ["combine", "composite_reward"]

RewardCallable = Callable[..., Any]


def _component_name(fn: RewardCallable) -> str:
    name = getattr(fn, "__name__", None)
    if not name or name == "<lambda>":
        raise ValueError(f"Component {fn!r} has no usable name: pass it through components={{'name': fn}}.")
    return name


def _resolve(
    weights: Mapping[Any, float] | None, components: Mapping[str, RewardCallable] | None
) -> list[tuple[str, RewardCallable, float]]:
    """``[(metric name, function, weight)]`` from either form, with every mistake reported by name."""
    resolved: list[tuple[str, RewardCallable, float]] = []
    named = dict(components or {})
    for name, fn in named.items():
        if not callable(fn):
            raise TypeError(f"Component {name!r} is not callable: {fn!r}")
    if weights is None:
        if not named:
            raise ValueError("combine() needs weights={fn: weight, ...} or components={'name': fn, ...}.")
        return [(name, fn, 1.0) for name, fn in named.items()]
    for key, weight in weights.items():
        if isinstance(key, str):
            if key not in named:
                raise ValueError(f"Weight given for {key!r}, which is not in components={sorted(named)}.")
            name, fn = key, named[key]
        elif callable(key):
            name, fn = _component_name(key), key
        else:
            raise TypeError(f"Weight keys must be reward functions or component names, got {key!r}.")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0 or weight != weight:
            raise ValueError(f"Weight of component {name!r} must be a non-negative number, got {weight!r}.")
        if any(existing == name for existing, _, _ in resolved):
            raise ValueError(f"Two components are named {name!r}: pass components={{'a': fn1, 'b': fn2}}.")
        resolved.append((name, fn, float(weight)))
    for name, fn in named.items():  # components without an explicit weight
        if name not in weights:
            resolved.append((name, fn, 1.0))
    if not resolved:
        raise ValueError("combine() got no components.")
    if sum(w for _, _, w in resolved) <= 0:
        raise ValueError("The component weights add up to 0.")
    return resolved


def _call(fn: RewardCallable, messages: Any, ground_truth: Any, kwargs: dict[str, Any]) -> EvaluateResult:
    result = fn(messages=messages, ground_truth=ground_truth, **kwargs)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()
        raise TypeError("async reward functions cannot be combined synchronously")
    if isinstance(result, EvaluateResult):
        return result
    if isinstance(result, Mapping):
        return EvaluateResult.model_validate(dict(result))
    if hasattr(result, "to_evaluate_result"):
        return result.to_evaluate_result()
    raise TypeError(f"returned {type(result).__name__}, not EvaluateResult")


def _run(
    parts: list[tuple[str, RewardCallable, float]],
    messages: Any,
    ground_truth: Any,
    kwargs: dict[str, Any],
    per_component: Mapping[str, Mapping[str, Any]],
    include_submetrics: bool,
    normalize: bool,
) -> EvaluateResult:
    metrics: dict[str, MetricResult] = {}
    failures: list[str] = []
    total = 0.0
    reasons: list[str] = []
    for name, fn, weight in parts:
        try:
            result = _call(fn, messages, ground_truth, {**kwargs, **per_component.get(name, {})})
        except Exception as exc:  # a component's failure is reported, never swallowed
            why = f"{name} raised {type(exc).__name__}: {exc}"
            metrics[name] = MetricResult(score=0.0, reason=why, is_score_valid=False)
            failures.append(why)
            reasons.append(f"{name}=error")
            continue
        score = float(result.score)
        if score != score:  # NaN
            why = f"{name} returned a NaN score"
            metrics[name] = MetricResult(score=0.0, reason=why, is_score_valid=False)
            failures.append(why)
            reasons.append(f"{name}=nan")
            continue
        note = "" if 0.0 <= score <= 1.0 else f" (score {score:g} clipped to [0, 1] for this metric)"
        metrics[name] = metric(
            score, f"{result.reason or ''}{note}".strip() or f"{name} score", result.is_score_valid
        )
        if not result.is_score_valid:
            failures.append(f"{name} is not valid: {result.reason or result.error or 'no reason given'}")
        total += weight * score
        reasons.append(f"{name}={score:.2f}×{weight:g}")
        if include_submetrics:
            for sub, value in result.metrics.items():
                metrics[f"{name}.{sub}"] = value
    weight_sum = sum(w for _, _, w in parts)
    score = total / weight_sum if normalize else total
    reason = ("weighted mean: " if normalize else "weighted sum: ") + ", ".join(reasons)
    if failures:
        return EvaluateResult(
            score=score, reason=reason, metrics=metrics, is_score_valid=False, error="; ".join(failures)
        )
    return EvaluateResult(score=score, reason=reason, metrics=metrics)


def combine(
    weights: Mapping[Any, float] | None = None,
    *,
    components: Mapping[str, RewardCallable] | None = None,
    name: str = "combined_reward",
    component_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    include_submetrics: bool = False,
    normalize: bool = True,
) -> RewardCallable:
    """A reward function that runs each component and reports it as a metric; score = weighted mean.

    ``weights``: ``{reward_fn: weight}`` (metric name = the function's ``__name__``) and/or
    ``{"name": weight}`` for functions given as ``components={"name": fn}``; components without a weight get
    1. ``component_kwargs``: extra keyword arguments per component name (e.g. ``{"tag_count_reward":
    {"required_tags": ["think"]}}``). ``normalize=False``: weighted sum instead of mean. Configuration
    mistakes raise ``ValueError``/``TypeError`` here, at definition time.
    """
    parts = _resolve(weights, components)
    per_component = {k: dict(v) for k, v in (component_kwargs or {}).items()}
    unknown = sorted(set(per_component) - {n for n, _, _ in parts})
    if unknown:
        raise ValueError(
            f"component_kwargs names unknown components {unknown}; known: {[n for n, _, _ in parts]}"
        )

    def combined(
        messages: list[Message] | list[dict[str, Any]], ground_truth: Any = None, **kwargs: Any
    ) -> EvaluateResult:
        return _run(parts, messages, ground_truth, kwargs, per_component, include_submetrics, normalize)

    combined.__name__ = combined.__qualname__ = name
    combined.__doc__ = f"Weighted combination of {', '.join(f'{n} ({w:g})' for n, _, w in parts)}."
    return reward_function(combined)


@reward_function
def composite_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: Any = None,
    *,
    components: Mapping[str, RewardCallable] | None = None,
    weights: Mapping[Any, float] | None = None,
    component_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    include_submetrics: bool = False,
    **kwargs: Any,
) -> EvaluateResult:
    """One-off form of ``combine``: ``composite_reward(messages=..., components={"fmt": format_reward,
    "math": math_reward}, weights={"fmt": 0.2, "math": 0.8}, ground_truth="42")``. Other keyword arguments go
    to every component."""
    parts = _resolve(weights, components)
    return _run(parts, messages, ground_truth, kwargs, component_kwargs or {}, include_submetrics, True)
