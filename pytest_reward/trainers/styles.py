"""Trainer-native reward functions as test subjects: each trainer's calling convention, once, turned into ours.

A reward function written *for* a trainer is tested unchanged. :func:`native_reward` wraps it in an ordinary
``@reward_function`` (so thresholds, gates, reports, baselines and the calling convention of :mod:`.call` apply as
they are) that calls it the way its trainer does and maps what comes back to an ``EvaluateResult``. Each style's
declaration (its name, how its functions are recognised, its wrapper) lives in its trainer's module (:mod:`.trl`,
:mod:`.verl`, :mod:`.openrlhf`, :mod:`.slime`); here are the prefix, detection and :func:`native_reward`:

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

Naming a style: ``--reward-fn verl:path.py::compute_score`` (or ``verl:package.module:name``; in ini, one such entry
per line of ``reward_functions``). The prefix cannot clash with the ``package.module:name`` form: what follows it is
itself a full ``--reward-fn`` value; a word in its place that is no style's is a typo (:func:`unknown_prefix`). Without a
prefix, a function that is not a ``@reward_function`` is recognised by its parameters (:func:`detect_style`) when
exactly one style fits; otherwise the error names the candidates and the prefix to write.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable
from typing import Any

from ..reward.decorator import reward_function
from . import TRAINERS
from .results import SHARED, ScalarStep, Style
from .slime import SlimeSample

__all__ = [
    "SHARED",
    "STYLES",
    "ScalarStep",
    "SlimeSample",
    "StyleError",
    "detect_style",
    "native_reward",
    "split_style",
    "unknown_prefix",
]

#: Every trainer's styles, in the order of :data:`TRAINERS` (each declared in its trainer's module).
_STYLES: dict[str, Style] = {style.name: style for trainer in TRAINERS for style in trainer.STYLES}
#: Every style name, as ``--reward-fn STYLE:...`` spells it.
STYLES: tuple[str, ...] = tuple(_STYLES)


class StyleError(ValueError):
    """A trainer-native function whose style is unknown, ambiguous or does not fit its signature."""


def split_style(spec: str) -> tuple[str | None, str]:
    """``("verl", "path.py::f")`` for ``verl:path.py::f``; ``(None, spec)`` when ``spec`` names no style (the prefix
    counts only when the rest is itself a ``path.py::name`` or ``package.module:name``)."""
    head, sep, rest = spec.partition(":")
    if sep and head in STYLES and rest and ":" in rest and not rest.startswith(":"):
        return head, rest
    return None, spec


_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def unknown_prefix(spec: str) -> str | None:
    """What is wrong with ``spec`` when it is written ``WORD:path.py::name`` (or ``WORD:package.module:name``) and
    ``WORD`` is no style: the prefixes there are, and the closest one's spelling of ``spec``. None when ``spec`` is
    not written so, or names a style."""
    head, sep, rest = spec.partition(":")
    if not sep or head in STYLES or not _PREFIX.fullmatch(head) or ":" not in rest or rest.startswith(":"):
        return None
    close = difflib.get_close_matches(head.lower(), STYLES, n=1)
    hint = f": did you mean {close[0]}:{rest}?" if close else ""
    return f"unknown style prefix {head!r}{hint} (the prefixes: {', '.join(STYLES)})"


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
    fits = [style.name for style in _STYLES.values() if style.recognised(params)]
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
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    problem = _STYLES[style].problem(name, params, var_kw)
    if problem is not None:
        raise StyleError(problem)


# --- wrapping -----------------------------------------------------------------------------------------------------


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
    batch = _STYLES[style].batch
    inner = _STYLES[style].wrap(fn, name)
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
