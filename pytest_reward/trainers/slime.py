"""slime, both directions.

* In (its style): ``await custom_rm(args, sample)`` → ``float | dict`` (``slime``) and ``await custom_rm(args,
  samples)`` → ``list`` (``slime-group``, its ``--group-rm``) tested as ours; ``sample`` has ``prompt``
  (messages), ``response``, ``label``, ``metadata``, ``index``, ``reward`` (:class:`SlimeSample`).
* Out (its adapter): ``--custom-rm-path``'s ``async custom_rm(args, sample_or_samples, **kwargs)``. slime passes
  ``sample.prompt`` (a string or messages), ``sample.response`` and ``sample.label``; in group mode (``--group-rm``,
  or a rollout that returns several samples) ``custom_rm`` gets a list of samples and returns a list of rewards in
  the same order and shape. Extra keyword arguments reach the reward functions. A failed call scores 0.0.
* Its data: the samples of its debug rollout packs (``--save-debug-rollout-data``, read by
  :mod:`pytest_reward.data.formats.slime`), mapped with :data:`PRESET`.
* Its serve route: ``POST /slime`` (``{prompt, response, label}`` -> a number, or a dict with ``?format=dict``):
  :func:`request_sample` and :func:`slime_answer`.
* Its bundle file: ``slime.py`` (``custom_rm``).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidResult
from ..reward.call import MISSING
from ..reward.chat import conversation
from ..reward.models import EvaluateResult
from .adapter import BUNDLE_SOURCE_LINE, CoroutineFunctionLike, Source, WeightedAdapter, is_valid
from .results import Style, as_list, awaited, scalar_or_dict, split

__all__ = [
    "BUNDLE_FILE",
    "FORWARDED",
    "NAME",
    "PRESET",
    "ROUTE",
    "SHAPES",
    "STYLES",
    "SlimeCustomRM",
    "SlimeSample",
    "bundle_file",
    "entry_point",
    "group_style",
    "make_slime_custom_rm",
    "request_sample",
    "slime_answer",
    "style",
]

NAME = "slime"

#: ``Sample.to_dict()`` (``slime/utils/types.py``) as our sample: the response is scored against the ``label``; of its
#: other fields only :data:`FORWARDED` are passed to the reward function (the rest are tokens, log-probs, routing:
#: training data).
PRESET = {"prompt": "prompt", "response": "response", "ground_truth": "label"}
FORWARDED = ("index", "group_index", "status", "metadata")


# --- in: a slime custom_rm as ours --------------------------------------------------------------------------------


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


def _slime_sample(
    messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any]
) -> SlimeSample:
    prompt, response = split(messages)
    metadata = fields.get("metadata")
    return SlimeSample(
        prompt=prompt,
        response=response,
        label=ground_truth,
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
        index=fields.get("index") if isinstance(fields.get("index"), int) else None,
    )


def style(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The pointwise call of our convention that calls ``fn`` as slime does, one sample at a time."""

    def call(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> EvaluateResult:
        value = awaited(fn(argparse.Namespace(), _slime_sample(messages, ground_truth, fields)))
        return scalar_or_dict(value, name)

    return call


def group_style(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The batch call of our convention that calls ``fn`` as slime's ``--group-rm`` does."""

    def call(rollouts_messages: list[list[dict[str, Any]]], **columns: Any) -> list[EvaluateResult]:
        n = len(rollouts_messages)
        truths = columns.get("ground_truth") or [None] * n
        samples = [
            _slime_sample(m, truths[i], {k: v[i] for k, v in columns.items() if k != "ground_truth"})
            for i, m in enumerate(rollouts_messages)
        ]
        values = as_list(
            awaited(fn(argparse.Namespace(), samples)), f"{name}'s return", "a list, one reward per sample"
        )
        if len(values) != n:
            raise InvalidResult(
                f"{name} returned {len(values)} rewards for {n} samples: expected one per sample"
            )
        return [scalar_or_dict(v, name) for v in values]

    return call


def _problem(name: str, params: list[str], var_kw: bool) -> str | None:
    if len(params) < 2:
        return f"{name}({', '.join(params)}) is not a slime custom_rm: slime calls custom_rm(args, sample)"
    return None


#: ``slime`` (recognised by ``(args, sample, ...)``) and ``slime-group`` (``(args, samples, ...)``).
STYLES = (
    Style("slime", False, lambda params: params[:2] == ["args", "sample"], _problem, style),
    Style("slime-group", True, lambda params: params[:2] == ["args", "samples"], _problem, group_style),
)


# --- out: our reward functions as slime's custom_rm ------------------------------------------------------------


async def _slime_signature(args: Any, sample: Any, **kwargs: Any) -> Any:
    """The signature ``inspect`` reads for :class:`SlimeCustomRM`."""


class SlimeCustomRM(CoroutineFunctionLike, WeightedAdapter):
    """slime's ``--custom-rm-path``: ``async custom_rm(args, sample, **kwargs) -> float`` for one sample, and
    ``async custom_rm(args, samples, **kwargs) -> list[float]`` in group mode (``--group-rm``, or a rollout that
    returns several samples: slime's ``batched_async_rm`` passes the list; a list of lists, from a rollout that fans
    out, gets a list of lists). The samples of a group are scored concurrently."""

    __name__ = "custom_rm"
    __code__ = _slime_signature.__code__

    async def __call__(self, args: Any, sample: Any, **kwargs: Any) -> Any:
        if isinstance(sample, (list, tuple)):
            return list(await asyncio.gather(*(self(args, item, **kwargs) for item in sample)))
        messages = conversation(getattr(sample, "prompt", None), getattr(sample, "response", ""))
        row = await self._weighted.arow(messages, getattr(sample, "label", MISSING), kwargs)
        return row["score"]


def make_slime_custom_rm(
    functions: Mapping[str, Callable[..., Any]],
    weights: Mapping[str, float] | None = None,
    *,
    source: Source | None = None,
) -> SlimeCustomRM:
    """slime's ``async custom_rm(args, sample_or_samples, **kwargs)`` (``--custom-rm-path``)."""
    return SlimeCustomRM(functions, weights, None, source=source)


# --- its serve route ------------------------------------------------------------------------------------------------

ROUTE = "/slime"
#: The answer's shapes (``?format=``): the weighted score alone, or the whole row with validity and reasons.
SHAPES = ("number", "dict")


def request_sample(prompt: Any, response: str, label: Any) -> tuple[list[dict[str, Any]], Any]:
    """A request's ``(messages, label)``: the prompt (text or messages) and the response as a conversation."""
    return conversation(prompt, response), label


def slime_answer(row: Mapping[str, float], shape: str, combined: Any) -> Any:
    """The answer in ``shape``: ``row``'s weighted ``score``, or ``row`` with the ``combined`` result's validity,
    reason and error."""
    if shape == "number":
        return row["score"]
    return {**row, "is_score_valid": is_valid(combined), "reason": combined.reason, "error": combined.error}


# --- its bundle file ----------------------------------------------------------------------------------------------

BUNDLE_FILE = "slime.py"


def entry_point(bundle: str) -> str:
    """How the manifest names this trainer's entry point."""
    return f"{bundle}.slime.custom_rm"


def bundle_file(bundle: str, functions: Sequence[str], metric_keys: str, locate: str) -> str:
    """The source of the bundle's ``slime.py``: ``locate`` imports the bundle as ``_bundle``."""
    return "\n".join(
        [
            f'"""slime: ``--custom-rm-path {bundle}.slime.custom_rm``: ``async custom_rm(args, sample) -> float``, and',
            '``async custom_rm(args, samples) -> list[float]`` in group mode (``--group-rm``)."""',
            "",
            locate,
            "from pytest_reward.deploy.adapters import BundleSource, make_slime_custom_rm",
            "",
            BUNDLE_SOURCE_LINE,
            "custom_rm = make_slime_custom_rm(_bundle.FUNCTIONS, _bundle.WEIGHTS, source=_SOURCE)",
            "",
        ]
    )
