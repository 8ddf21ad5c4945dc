"""Trainer-native reward functions as test subjects: each trainer's calling convention, once, turned into ours.

A reward function written *for* a trainer is tested unchanged. :func:`native_reward` wraps it in an ordinary
``@reward_function`` (so thresholds, gates, reports, baselines and the calling convention of :mod:`.call` apply as
they are) that calls it the way its trainer does and maps what comes back to an ``EvaluateResult``:

========================  ==================================================================================
style                     the trainer's call (what our sample becomes)
========================  ==================================================================================
``trl``                   ``f(prompts=[[messages]], completions=[[{"role": "assistant", ...}]],
                          completion_ids=[None], trainer_state=None, log_extra=..., log_metric=...,
                          **columns)`` → ``list[float | None]`` (TRL's conversational format; batch: one call
                          per batch of samples, every other field of the samples as an aligned column,
                          ``ground_truth`` included)
``trl-standard``          the same with ``prompts: list[str]`` and ``completions: list[str]`` (TRL's standard
                          format: the prompt is its user turn's text, or ChatML when it has several turns)
``verl``                  ``compute_score(data_source=..., solution_str=<response text>, ground_truth=...,
                          extra_info={...})`` → ``float | dict`` (as verl's ``NaiveRewardManager`` calls it:
                          ``extra_info`` is the sample's ``extra_info`` plus ``num_turns`` and
                          ``rollout_reward_scores``; the prompt is not passed)
``openrlhf``              ``reward_func(queries=[prompt + response], prompts=[prompt], labels=[ground_truth])``
                          → ``{"rewards": ..., "scores": ..., "extra_logs": {...}}`` or the rewards alone
                          (lists or tensors; ``prompt`` is the conversation rendered with ChatML)
``slime``                 ``await custom_rm(args, sample)`` → ``float | dict`` (``sample`` has ``prompt``
                          (messages), ``response``, ``label``, ``metadata``, ``index``, ``reward``)
``slime-group``           ``await custom_rm(args, samples)`` → ``list`` (slime's ``--group-rm``)
========================  ==================================================================================

Results: a number is the score; a dict's ``score`` (verl) or ``rewards`` entry (OpenRLHF) is the score and its other
entries are metrics when they are numbers in [0, 1], named in the reason otherwise; ``None`` (TRL's "cannot score
this one") is an invalid result whose reason says so.

Naming a style: ``--reward-fn verl:path.py::compute_score`` (or ``verl:package.module:name``). The prefix cannot
clash with the ``package.module:name`` form: what follows it is itself a full ``--reward-fn`` value. Without a
prefix, a function that is not a ``@reward_function`` is recognised by its parameters (:func:`detect_style`) when
exactly one style fits; otherwise the error names the candidates and the prefix to write.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from ..errors import InvalidResult
from ..reward.call import run_coroutine
from ..reward.chat import render_chatml
from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, MetricResult

__all__ = ["STYLES", "SlimeSample", "StyleError", "detect_style", "native_reward", "split_style"]

#: Every style name, as ``--reward-fn STYLE:...`` spells it.
STYLES: tuple[str, ...] = ("trl", "trl-standard", "verl", "openrlhf", "slime", "slime-group")


class StyleError(ValueError):
    """A trainer-native function whose style is unknown, ambiguous or does not fit its signature."""


def split_style(spec: str) -> tuple[str | None, str]:
    """``("verl", "path.py::f")`` for ``verl:path.py::f``; ``(None, spec)`` when ``spec`` names no style (the prefix
    counts only when the rest is itself a ``path.py::name`` or ``package.module:name``)."""
    head, sep, rest = spec.partition(":")
    if sep and head in STYLES and rest and ":" in rest and not rest.startswith(":"):
        return head, rest
    return None, spec


# --- detection -----------------------------------------------------------------------------------------------


def _parameters(fn: Callable[..., Any]) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise StyleError(f"cannot read the signature of {fn!r}: {exc}") from None
    return [p.name for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def detect_style(fn: Callable[..., Any]) -> str:
    """The style of a trainer-native function, from its parameter names; :class:`StyleError` when none or several
    fit (the message names them and the prefix that settles it)."""
    params = _parameters(fn)
    names = set(params)
    fits = []
    if "completions" in names:
        fits.append("trl")
    if "solution_str" in names:
        fits.append("verl")
    if {"queries", "prompts", "labels"} <= names:
        fits.append("openrlhf")
    if params[:2] == ["args", "sample"]:
        fits.append("slime")
    if params[:2] == ["args", "samples"]:
        fits.append("slime-group")
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    shown = "(" + ", ".join(params) + ")"
    if len(fits) == 1:
        return fits[0]
    if not fits:
        raise StyleError(
            f"{name!r} is not decorated with @reward_function and its parameters {shown} fit no trainer's "
            f"calling style; "
            f"decorate it with @reward_function, or name its style: --reward-fn STYLE:..., STYLE one of "
            f"{', '.join(STYLES)}"
        )
    raise StyleError(
        f"{name}{shown} fits several trainers' calling styles ({', '.join(fits)}); name the one it is written "
        f"for: --reward-fn {fits[0]}:..."
    )


def _check_fits(fn: Callable[..., Any], style: str) -> None:
    params = _parameters(fn)
    try:
        sig = inspect.signature(fn)
        var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    except (TypeError, ValueError):
        var_kw = False
    required = {
        "trl": ("prompts", "completions"),
        "trl-standard": ("prompts", "completions"),
        "verl": ("data_source", "solution_str", "ground_truth"),
        "openrlhf": ("queries", "prompts", "labels"),
        "slime": (),
        "slime-group": (),
    }[style]
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if style.startswith("trl"):
        # TRL passes prompts and completions by keyword, and every column: **kwargs is part of the contract.
        missing = [p for p in ("completions",) if p not in params]
        if missing or not var_kw:
            raise StyleError(
                f"{name}({', '.join(params)}) is not a TRL reward function: TRL calls "
                f"f(prompts=..., completions=..., completion_ids=..., **columns), so it needs a 'completions' "
                f"parameter and **kwargs"
            )
        return
    if style.startswith("slime"):
        if len(params) < 2:
            raise StyleError(
                f"{name}({', '.join(params)}) is not a slime custom_rm: slime calls custom_rm(args, sample)"
            )
        return
    missing = [p for p in required if p not in params and not var_kw]
    if missing:
        raise StyleError(
            f"{name}({', '.join(params)}) does not take {', '.join(missing)}: not a {style} reward function"
        )


# --- conversions -----------------------------------------------------------------------------------------------


def _text(message: Mapping[str, Any] | None) -> str:
    content = (message or {}).get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _response(messages: Sequence[Mapping[str, Any]]) -> str:
    """The response's text (the final assistant turn's; empty when there is none), as :func:`_split` gives it,
    without copying the prompt."""
    if messages and messages[-1].get("role") == "assistant":
        return _text(messages[-1])
    return ""


def _split(messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """(the prompt's messages, the response's text): the response is the final assistant turn."""
    if messages and messages[-1].get("role") == "assistant":
        return [dict(m) for m in messages[:-1]], _text(messages[-1])
    return [dict(m) for m in messages], ""


def _prompt_text(prompt: Sequence[Mapping[str, Any]]) -> str:
    """A prompt as a trainer's string: the user turn's text alone, or ChatML (with the generation prompt) when the
    conversation has several turns."""
    if len(prompt) == 1 and prompt[0].get("role") == "user":
        return _text(prompt[0])
    return render_chatml(prompt, add_generation_prompt=True)


def _number(value: Any, what: str) -> float:
    if value.__class__ is float or value.__class__ is int:  # the usual score (a bool's class is bool)
        return float(value)
    if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidResult(f"{what} is {type(value).__name__} {value!r:.80}: expected a number")
    return float(value)


def _result(score: Any, extras: Mapping[str, Any], fn_name: str, what: str) -> EvaluateResult:
    """An ``EvaluateResult`` from a trainer's score and extras (numbers in [0, 1] → metrics; others → reason)."""
    if score is None:
        return EvaluateResult(
            score=0.0, is_score_valid=False, reason=f"{fn_name} returned None for this sample ({what})"
        )
    value = _number(score, f"{fn_name}'s score")
    metrics: dict[str, MetricResult] = {}
    other: list[str] = []
    for key, extra in extras.items():
        if hasattr(extra, "item") and callable(extra.item):
            extra = extra.item()
        if isinstance(extra, (bool, int, float)) and 0.0 <= float(extra) <= 1.0:
            metrics[str(key)] = MetricResult(score=float(extra), reason=f"{key}={extra!r}")
        else:
            other.append(f"{key}={extra!r:.80}")
    valid = math.isfinite(value)
    return EvaluateResult(
        score=value if valid else 0.0,
        is_score_valid=valid,
        reason="; ".join(other) or None,
        metrics=metrics,
        error=None if valid else f"score is {value}",
    )


_NO_EXTRAS: Mapping[str, Any] = MappingProxyType({})


class ScalarStep(NamedTuple):
    """A pointwise adapter's own step, for a caller scoring many samples that needs only the number
    (``Invoker.sample_scorer``): ``native_reward`` exposes it as the wrapper's ``__reward_scalar__``."""

    call: Callable[..., Any]
    """``call(messages, ground_truth=None, **fields)``: the trainer function's own return for one call's keyword
    arguments (the wrapper's, whose inputs are private copies)."""
    to_result: Callable[[Any], EvaluateResult]
    """What the adapter makes of that return."""
    direct: Callable[[Any, Any, Mapping[str, Any]], Any]
    """``direct(messages, ground_truth, fields)``: ``call`` on a sample's own objects (``fields`` as one mapping,
    read, never handed on) when it would hand the function none of them that could be changed in place (lists,
    dicts, anything but strings, numbers, bools and None); else ``shared``, without calling."""
    shared: Any
    """What ``direct`` returns when it does not call."""


def _scalar_or_dict(value: Any, fn_name: str) -> EvaluateResult:
    """verl's and slime's return: a number, or a dict with ``score`` and extras."""
    if value.__class__ is float or value.__class__ is int:  # _result's for a number without extras
        score = float(value)
        if math.isfinite(score):
            return EvaluateResult(score=score, is_score_valid=True, reason=None, metrics={}, error=None)
        return _result(score, _NO_EXTRAS, fn_name, "")
    if isinstance(value, Mapping):
        if "score" not in value:
            raise InvalidResult(f"{fn_name} returned a dict without 'score': {sorted(value)!r:.200}")
        extras = {k: v for k, v in value.items() if k != "score"}
        return _result(value["score"], extras, fn_name, "")
    return _result(value, {}, fn_name, "")


def _as_list(value: Any, what: str) -> list[Any]:
    if hasattr(value, "tolist") and callable(value.tolist):  # torch tensors, numpy arrays
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise InvalidResult(f"{what} is {type(value).__name__}: expected a list (or a tensor)")
    return list(value)


def _await(value: Any) -> Any:
    return run_coroutine(value) if asyncio.iscoroutine(value) else value


@dataclass
class SlimeSample:
    """The fields of slime's ``Sample`` (``slime/utils/types.py``) a ``custom_rm`` reads."""

    prompt: Any
    response: str
    label: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    index: int | None = None
    reward: Any = None
    status: str = "completed"


# --- the adapters ----------------------------------------------------------------------------------------------

_TRL_CONVENTION = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


def _trl(fn: Callable[..., Any], name: str, standard: bool) -> Callable[..., Any]:
    def call(rollouts_messages: list[list[dict[str, Any]]], **columns: Any) -> list[EvaluateResult]:
        n = len(rollouts_messages)
        prompts: list[Any] = []
        completions: list[Any] = []
        for messages in rollouts_messages:
            prompt, response = _split(messages)
            if standard:
                prompts.append(_prompt_text(prompt))
                completions.append(response)
            else:
                prompts.append(prompt)
                completions.append([{"role": "assistant", "content": response}])
        logged: dict[str, list[Any]] = {}
        kwargs = {k: v for k, v in columns.items() if k not in _TRL_CONVENTION}
        kwargs.setdefault("completion_ids", columns.get("completion_ids") or [None] * n)
        value = _await(
            fn(
                prompts=prompts,
                completions=completions,
                trainer_state=None,
                log_extra=lambda column, values: logged.__setitem__(str(column), list(values)),
                log_metric=lambda metric, v: logged.__setitem__(str(metric), [v] * n),
                **kwargs,
            )
        )
        scores = _as_list(value, f"{name}'s return")
        if len(scores) != n:
            raise InvalidResult(f"{name} returned {len(scores)} rewards for {n} completions")
        return [
            _result(
                s, {k: v[i] for k, v in logged.items() if i < len(v)}, name, "TRL leaves it out of the reward"
            )
            for i, s in enumerate(scores)
        ]

    return call


#: Classes of values a call can share with a sample without a copy: nothing can change them in place.
_IMMUTABLE = frozenset((str, int, float, bool, type(None)))


class _Shared:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SHARED"


#: What :attr:`ScalarStep.direct` returns instead of calling: the call would share an object that could change.
SHARED: Any = _Shared()


def _verl(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def step(messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any]) -> Any:
        """What ``compute_score`` returns for one sample (awaited): :func:`_scalar_or_dict` makes the result. It
        is handed the response's text (read from ``messages``), ``fields``' ``data_source``, ``ground_truth`` and
        a new ``extra_info`` dict (``fields``' own, shallow-copied, plus ``num_turns`` and
        ``rollout_reward_scores``)."""
        response = _response(messages)
        extra_info = dict(fields.get("extra_info") or {})
        extra_info["num_turns"] = fields.get("num_turns")
        extra_info["rollout_reward_scores"] = fields.get("reward_scores") or {}
        value = fn(
            data_source=fields.get("data_source"),
            solution_str=response,
            ground_truth=ground_truth,
            extra_info=extra_info,
        )
        if value.__class__ is not float and value.__class__ is not int:  # a number is no coroutine
            value = _await(value)
        return value

    def direct(messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any]) -> Any:
        """:func:`step` on a sample's own objects when it hands ``compute_score`` none that could change (the
        ground truth, ``data_source``, ``num_turns``, ``reward_scores`` and ``extra_info``'s values all strings,
        numbers, bools or None; ``extra_info`` a dict or None): then nothing of the caller's can change, whatever
        the function does. Else :data:`SHARED`, without calling."""
        get, immutable = fields.get, _IMMUTABLE
        source, extra, turns, scores = get("data_source"), get("extra_info"), get("num_turns"), get("reward_scores")
        if (
            ground_truth.__class__ not in immutable
            or source.__class__ not in immutable
            or turns.__class__ not in immutable
            or scores.__class__ not in immutable
        ):
            return SHARED
        if extra.__class__ is dict:
            for value in extra.values():
                if value.__class__ not in immutable:
                    return SHARED
            extra_info = extra.copy()
        elif extra is None:
            extra_info = {}
        else:
            return SHARED
        extra_info["num_turns"] = turns
        extra_info["rollout_reward_scores"] = scores or {}
        last = messages[-1] if messages else None
        if last.__class__ is dict and last.get("role") == "assistant" and last.get("content").__class__ is str:
            response = last["content"]  # _response's text of the usual last turn
        else:
            response = _response(messages)
        value = fn(data_source=source, solution_str=response, ground_truth=ground_truth, extra_info=extra_info)
        if value.__class__ is not float and value.__class__ is not int:  # a number is no coroutine
            value = _await(value)
        return value

    def score(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> Any:
        return step(messages, ground_truth, fields)

    def call(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> EvaluateResult:
        return _scalar_or_dict(step(messages, ground_truth, fields), name)

    def to_result(value: Any) -> EvaluateResult:
        return _scalar_or_dict(value, name)

    call.__reward_scalar__ = ScalarStep(score, to_result, direct, SHARED)  # type: ignore[attr-defined]
    return call


def _openrlhf(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def call(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> EvaluateResult:
        prompt, response = _split(messages)
        text = render_chatml(prompt, add_generation_prompt=True)
        value = _await(fn(queries=[text + response], prompts=[text], labels=[ground_truth]))
        extras: dict[str, Any] = {}
        if isinstance(value, Mapping):
            if "rewards" not in value:
                raise InvalidResult(f"{name} returned a dict without 'rewards': {sorted(value)!r:.200}")
            for key, logs in (value.get("extra_logs") or {}).items():
                extras[key] = _as_list(logs, f"{name}'s extra_logs[{key!r}]")[0]
            value = value["rewards"]
        rewards = _as_list(value, f"{name}'s rewards")
        if len(rewards) != 1:
            raise InvalidResult(f"{name} returned {len(rewards)} rewards for 1 query")
        return _result(rewards[0], extras, name, "")

    return call


def _slime_sample(
    messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any]
) -> SlimeSample:
    prompt, response = _split(messages)
    metadata = fields.get("metadata")
    return SlimeSample(
        prompt=prompt,
        response=response,
        label=ground_truth,
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
        index=fields.get("index") if isinstance(fields.get("index"), int) else None,
    )


def _slime(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def call(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> EvaluateResult:
        value = _await(fn(argparse.Namespace(), _slime_sample(messages, ground_truth, fields)))
        return _scalar_or_dict(value, name)

    return call


def _slime_group(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def call(rollouts_messages: list[list[dict[str, Any]]], **columns: Any) -> list[EvaluateResult]:
        n = len(rollouts_messages)
        truths = columns.get("ground_truth") or [None] * n
        samples = [
            _slime_sample(m, truths[i], {k: v[i] for k, v in columns.items() if k != "ground_truth"})
            for i, m in enumerate(rollouts_messages)
        ]
        values = _as_list(_await(fn(argparse.Namespace(), samples)), f"{name}'s return")
        if len(values) != n:
            raise InvalidResult(f"{name} returned {len(values)} rewards for {n} samples")
        return [_scalar_or_dict(v, name) for v in values]

    return call


def native_reward(
    fn: Callable[..., Any], style: str | None = None, name: str | None = None
) -> Callable[..., Any]:
    """``fn``, written for a trainer, as a ``@reward_function`` (batch mode for ``trl*`` and ``slime-group``).
    ``style`` None: detected from the parameters (:func:`detect_style`). :class:`StyleError` when it does not fit.
    The result keeps ``fn`` as ``__trainer_native__`` and the style as ``__reward_style__``."""
    if style is None:
        style = detect_style(fn)
    elif style not in STYLES:
        raise StyleError(f"unknown style {style!r}: expected one of {', '.join(STYLES)}")
    _check_fits(fn, style)
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    batch = style.startswith("trl") or style == "slime-group"
    if style.startswith("trl"):
        inner = _trl(fn, name, standard=style == "trl-standard")
    elif style == "verl":
        inner = _verl(fn, name)
    elif style == "openrlhf":
        inner = _openrlhf(fn, name)
    elif style == "slime":
        inner = _slime(fn, name)
    else:
        inner = _slime_group(fn, name)
    inner.__name__ = name
    inner.__qualname__ = getattr(fn, "__qualname__", name)
    inner.__module__ = getattr(fn, "__module__", None) or __name__
    inner.__doc__ = getattr(fn, "__doc__", None)
    wrapped = reward_function(inner, mode="batch" if batch else "pointwise")
    wrapped.__trainer_native__ = fn  # type: ignore[attr-defined]
    scalar = getattr(inner, "__reward_scalar__", None)
    spec = getattr(wrapped, "__reward_spec__", None)
    if scalar is not None and spec is not None and not (spec.coerce_messages or spec.coerce_ground_truth):
        # (the function's own return for one call's keyword arguments, what the adapter makes a result of): for a
        # caller scoring many samples that needs only the number (Invoker.sample_scorer); the wrapper adds nothing
        # here (its inputs are not coerced and the adapter always returns an EvaluateResult)
        wrapped.__reward_scalar__ = scalar  # type: ignore[attr-defined]
    wrapped.__reward_style__ = style  # type: ignore[attr-defined]
    if hasattr(
        fn, "pytestmark"
    ):  # @pytest.mark.reward(...) on the native function applies to the test subject
        wrapped.pytestmark = fn.pytestmark  # type: ignore[attr-defined]
    return wrapped
