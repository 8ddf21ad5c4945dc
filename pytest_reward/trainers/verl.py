"""verl, both directions.

* In (its style): ``compute_score(data_source=..., solution_str=<response text>, ground_truth=...,
  extra_info={...})`` → ``float | dict`` tested as ours, called as verl's ``NaiveRewardManager`` calls it:
  ``extra_info`` is the sample's ``extra_info`` plus ``num_turns`` and ``rollout_reward_scores``; the prompt is not
  passed.
* Out (its adapter): ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict``
  with the same keys for every sample (:func:`~pytest_reward.trainers.adapter.flat_scores`; a failed call scores 0
  with a ``<name>_valid`` flag of 0). verl passes the response only; the conversation is taken from
  ``extra_info["messages"]``, else ``extra_info["prompt"]`` / ``extra_info["question"]``. verl passes
  ``custom_reward_function.reward_kwargs`` (and, with a reward model router, ``reward_router_address``) as keyword
  arguments of ``compute_score``: they reach every reward function as keyword arguments, over the ``extra_info``
  field of the same name (verl's own precedence); ``reward_model_tokenizer`` is a tokenizer object, not data, and is
  not forwarded.
* Its data: its RL datasets (:data:`PRESET`: ``prompt`` messages, ``reward_model.ground_truth``; the other columns,
  ``data_source``, ``extra_info``, ``ability``, are keyword arguments), and the rows of its rollout / validation
  dumps (``trainer.rollout_data_dir``, JSONL lines with ``input`` and ``output`` and neither ``messages`` nor
  ``prompt``: :func:`dump_record`).
* Its bundle file: ``verl.py`` (``compute_score``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SampleFormatError
from ..reward.chat import conversation
from ..reward.models import EvaluateResult
from .adapter import BUNDLE_SOURCE_LINE, Source, WeightedAdapter
from .results import IMMUTABLE, SHARED, ScalarStep, Style, awaited, scalar_or_dict, solution_text

__all__ = [
    "BUNDLE_FILE",
    "DUMP_COLUMNS",
    "NAME",
    "PRESET",
    "STYLES",
    "VERL_INJECTED",
    "VerlComputeScore",
    "bundle_file",
    "dump_record",
    "entry_point",
    "make_verl_compute_score",
    "style",
]

NAME = "verl"

#: Its RL datasets' columns: (preset name, the columns that select it, the mapping).
PRESET: tuple[str, tuple[str, ...], dict[str, str]] = (
    "verl",
    ("prompt", "reward_model"),
    {"prompt": "prompt", "ground_truth": "reward_model.ground_truth"},
)

VERL_INJECTED = frozenset({"reward_model_tokenizer"})

#: The columns of a rollout / validation dump row (``RayPPOTrainer._write_generations``); the rest are the reward
#: manager's ``reward_extra_info`` (what the trainer's scoring returned: kept in the record, never passed).
DUMP_COLUMNS = ("input", "output", "gts", "score", "step")


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def dump_record(row: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """A dump row as our record, and the score verl recorded (as the row holds it; None when absent): ``input``
    (the prompt, chat template applied) and ``output`` (the response) become ``messages``, ``gts`` the ground truth
    (when not null), ``step`` a keyword argument. ``SampleFormatError`` when ``input`` or ``output`` is not text."""
    inp, out = row["input"], row["output"]
    if not isinstance(inp, str) or not isinstance(out, str):
        raise SampleFormatError(
            f"verl dump row: 'input' and 'output' must be strings, got {_describe(inp)} and {_describe(out)}"
        )
    record: dict[str, Any] = {"messages": conversation(inp, out)}
    if row.get("gts") is not None:
        record["ground_truth"] = row["gts"]
    if "step" in row:
        record["step"] = row["step"]
    return record, row.get("score")


# --- in: a verl compute_score as ours -----------------------------------------------------------------------------


def style(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The pointwise call of our convention that calls ``fn`` as verl does; its ``__reward_scalar__`` is the
    :class:`~pytest_reward.trainers.results.ScalarStep` of the same call."""

    def step(messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any]) -> Any:
        """What ``compute_score`` returns for one sample (awaited): :func:`scalar_or_dict` makes the result. It
        is handed the response's text (read from ``messages``), ``fields``' ``data_source``, ``ground_truth`` and
        a new ``extra_info`` dict (``fields``' own, shallow-copied, plus ``num_turns`` and
        ``rollout_reward_scores``)."""
        response = solution_text(messages)
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
            value = awaited(value)
        return value

    def direct(messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any]) -> Any:
        """:func:`step` on a sample's own objects when it hands ``compute_score`` none that could change (the
        ground truth, ``data_source``, ``num_turns``, ``reward_scores`` and ``extra_info``'s values all strings,
        numbers, bools or None; ``extra_info`` a dict or None): then nothing of the caller's can change, whatever
        the function does. Else :data:`SHARED`, without calling."""
        get, immutable = fields.get, IMMUTABLE
        source, extra, turns, scores = (
            get("data_source"),
            get("extra_info"),
            get("num_turns"),
            get("reward_scores"),
        )
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
        if (
            last.__class__ is dict
            and last.get("role") == "assistant"
            and last.get("content").__class__ is str
        ):
            response = last["content"]  # solution_text's text of the usual last turn
        else:
            response = solution_text(messages)
        value = fn(
            data_source=source, solution_str=response, ground_truth=ground_truth, extra_info=extra_info
        )
        if value.__class__ is not float and value.__class__ is not int:  # a number is no coroutine
            value = awaited(value)
        return value

    def score(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> Any:
        return step(messages, ground_truth, fields)

    def call(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> EvaluateResult:
        return scalar_or_dict(step(messages, ground_truth, fields), name)

    def to_result(value: Any) -> EvaluateResult:
        return scalar_or_dict(value, name)

    call.__reward_scalar__ = ScalarStep(score, to_result, direct, SHARED)  # type: ignore[attr-defined]
    return call


def _problem(name: str, params: list[str], var_kw: bool) -> str | None:
    missing = [p for p in ("data_source", "solution_str", "ground_truth") if p not in params and not var_kw]
    if missing:
        return f"{name}({', '.join(params)}) does not take {', '.join(missing)}: not a verl reward function"
    return None


#: ``verl``: recognised by a ``solution_str`` parameter.
STYLES = (Style("verl", False, lambda params: "solution_str" in params, _problem, style),)


# --- out: our reward functions as verl's compute_score --------------------------------------------------------


class VerlComputeScore(WeightedAdapter):
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict``."""

    __name__ = "compute_score"

    def __call__(
        self,
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
        fields.update((k, v) for k, v in kwargs.items() if k not in VERL_INJECTED)
        return self._weighted.row(conversation(prompt, solution_str), ground_truth, fields)


def make_verl_compute_score(
    functions: Mapping[str, Callable[..., Any]],
    weights: Mapping[str, float] | None = None,
    metric_keys: Mapping[str, Sequence[str]] | None = None,
    *,
    source: Source | None = None,
) -> VerlComputeScore:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict``."""
    return VerlComputeScore(functions, weights, metric_keys, source=source)


# --- its bundle file ----------------------------------------------------------------------------------------------

BUNDLE_FILE = "verl.py"


def entry_point(bundle: str) -> str:
    """How the manifest names this trainer's entry point."""
    return f"{bundle}/verl.py:compute_score"


def bundle_file(bundle: str, functions: Sequence[str], metric_keys: str, locate: str) -> str:
    """The source of the bundle's ``verl.py``: ``locate`` imports the bundle as ``_bundle``."""
    return "\n".join(
        [
            '"""verl: ``reward.custom_reward_function.path=<this file>`` and ``.name=compute_score``.',
            "Returns a dict with the same keys for every sample: score (weighted), <function>, <function>_valid,",
            '<function>/<metric>. The conversation is read from ``extra_info["messages"]`` when present;',
            '``custom_reward_function.reward_kwargs`` reach the reward functions as keyword arguments."""',
            "",
            locate,
            "from pytest_reward.deploy.adapters import BundleSource, make_verl_compute_score",
            "",
            BUNDLE_SOURCE_LINE,
            f"compute_score = make_verl_compute_score(_bundle.FUNCTIONS, _bundle.WEIGHTS, {metric_keys}, source=_SOURCE)",
            "",
        ]
    )
