"""What every trainer's style shares (trainer -> us): the conversation as a trainer sees it (prompt messages, the
response's text, a prompt string) and a trainer's return made an ``EvaluateResult``.

Results: a number is the score; a dict's ``score`` (verl, slime) or ``rewards`` entry (OpenRLHF) is the score and
its other entries are metrics when they are numbers in [0, 1], named in the reason otherwise; ``None`` (TRL's
"cannot score this one") is an invalid result whose reason says so. A bool is 1.0 or 0.0 where the trainer stores
rewards in a float tensor (TRL, verl, slime's group normalisation); a return that is not what the trainer expects
is an ``InvalidResult`` that says what it is and what was expected.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from ..errors import InvalidResult
from ..reward.call import run_coroutine
from ..reward.chat import render_chatml
from ..reward.models import EvaluateResult, MetricResult

__all__ = [
    "IMMUTABLE",
    "SHARED",
    "ScalarStep",
    "Style",
    "as_list",
    "awaited",
    "never",
    "prompt_text",
    "scalar_or_dict",
    "solution_text",
    "split",
    "trainer_result",
    "turn_text",
]


@dataclass(frozen=True)
class Style:
    """One calling style of a trainer (``--reward-fn NAME:...``), declared in the trainer's module."""

    name: str
    batch: bool
    """Its functions score a batch of samples per call."""
    recognised: Callable[[list[str]], bool]
    """Whether a function with these parameter names (in order) is written in this style (detection)."""
    problem: Callable[[str, list[str], bool], str | None]
    """``problem(function name, parameter names, takes **kwargs)``: why the function cannot be called in this
    style, or None."""
    wrap: Callable[[Callable[..., Any], str], Callable[..., Any]]
    """``wrap(fn, name)``: the call of our convention that calls ``fn`` as its trainer does."""


def never(params: list[str]) -> bool:
    """For a style that is only ever named, never detected."""
    return False


def turn_text(message: Mapping[str, Any] | None) -> str:
    """A message's text: its content, or the text parts of a list content joined; empty for none."""
    content = (message or {}).get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def solution_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The response's text (the final assistant turn's; empty when there is none), as :func:`split` gives it,
    without copying the prompt."""
    if messages and messages[-1].get("role") == "assistant":
        return turn_text(messages[-1])
    return ""


def split(messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """(the prompt's messages, the response's text): the response is the final assistant turn."""
    if messages and messages[-1].get("role") == "assistant":
        return [dict(m) for m in messages[:-1]], turn_text(messages[-1])
    return [dict(m) for m in messages], ""


def prompt_text(prompt: Sequence[Mapping[str, Any]]) -> str:
    """A prompt as a trainer's string: the user turn's text alone, or ChatML (with the generation prompt) when the
    conversation has several turns."""
    if len(prompt) == 1 and prompt[0].get("role") == "user":
        return turn_text(prompt[0])
    return render_chatml(prompt, add_generation_prompt=True)


def _shape(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f" of shape {tuple(shape)}" if shape is not None else ""


def _scalar(value: Any) -> Any:
    """A one-element tensor or numpy value as its Python scalar; ``value`` itself when it is none (several
    elements, or no ``item`` method)."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (ValueError, RuntimeError):  # numpy's and torch's answer for several elements
            return value
    return value


def _number(value: Any, what: str, bools: str | None) -> float:
    """``value`` as the float a trainer would store. ``bools``: None when the trainer takes a bool as 1.0 or 0.0,
    else why it does not (said in the error)."""
    if value.__class__ is float or value.__class__ is int:  # the usual score (a bool's class is bool)
        return float(value)
    value = _scalar(value)  # a 0-d tensor or numpy scalar
    if isinstance(value, bool) and bools is None:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        why = f" ({bools})" if isinstance(value, bool) else ""
        raise InvalidResult(
            f"{what} is {type(value).__name__}{_shape(value)} {value!r:.80}: expected a number{why}"
        )
    return float(value)


def trainer_result(
    score: Any, extras: Mapping[str, Any], fn_name: str, what: str, *, bools: str | None = None
) -> EvaluateResult:
    """An ``EvaluateResult`` from a trainer's score and extras (numbers in [0, 1] → metrics; others → reason).
    ``bools``: see :func:`_number`."""
    if score is None:
        return EvaluateResult(
            score=0.0, is_score_valid=False, reason=f"{fn_name} returned None for this sample ({what})"
        )
    value = _number(score, f"{fn_name}'s score", bools)
    metrics: dict[str, MetricResult] = {}
    other: list[str] = []
    for key, extra in extras.items():
        extra = _scalar(extra)
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


def scalar_or_dict(value: Any, fn_name: str, *, bools: str | None = None) -> EvaluateResult:
    """verl's and slime's return: a number, or a dict with ``score`` and extras. ``bools``: see :func:`_number`."""
    if value.__class__ is float or value.__class__ is int:  # trainer_result's for a number without extras
        score = float(value)
        if math.isfinite(score):
            return EvaluateResult(score=score, is_score_valid=True, reason=None, metrics={}, error=None)
        return trainer_result(score, _NO_EXTRAS, fn_name, "")
    if isinstance(value, Mapping):
        if "score" not in value:
            raise InvalidResult(f"{fn_name} returned a dict without 'score': {sorted(value)!r:.200}")
        extras = {k: v for k, v in value.items() if k != "score"}
        return trainer_result(value["score"], extras, fn_name, "", bools=bools)
    return trainer_result(value, {}, fn_name, "", bools=bools)


def as_list(value: Any, what: str, expected: str = "a list (or a tensor)") -> list[Any]:
    """A trainer's list (or tensor, or array) as a list; ``InvalidResult`` naming ``what`` and what it is for
    anything else."""
    if hasattr(value, "tolist") and callable(value.tolist):  # torch tensors, numpy arrays
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        if inspect.isgenerator(value) or inspect.isasyncgen(value):
            raise InvalidResult(f"{what} is a {type(value).__name__}: expected {expected} (return a list)")
        raise InvalidResult(f"{what} is {type(value).__name__} {value!r:.80}: expected {expected}")
    return list(value)


def awaited(value: Any) -> Any:
    """``value``, or what it returns when it is a coroutine (run to the end here). A generator is no coroutine
    (``asyncio.iscoroutine`` says it is one, on Python 3.11)."""
    return run_coroutine(value) if isinstance(value, Coroutine) else value


#: Classes of values a call can share with a sample without a copy: nothing can change them in place.
IMMUTABLE = frozenset((str, int, float, bool, type(None)))


class _Shared:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SHARED"


#: What :attr:`ScalarStep.direct` returns instead of calling: the call would share an object that could change.
SHARED: Any = _Shared()
