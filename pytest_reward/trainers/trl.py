"""TRL (``GRPOTrainer`` and friends), both directions.

* In (its style): a TRL reward function ``f(prompts=[[messages]], completions=[[{"role": "assistant", ...}]],
  completion_ids=[None], trainer_state=None, log_extra=..., log_metric=..., **columns)`` → ``list[float | None]``
  tested as ours: conversational format (``trl``) or standard (``trl-standard``: ``prompts: list[str]``,
  ``completions: list[str]``, the prompt being its user turn's text, or ChatML when it has several turns); batch
  mode, one call per batch of samples, every other field of the samples as an aligned column, ``ground_truth``
  included.
* Out (its adapter): ``reward_funcs`` entries, ``(prompts, completions, **columns) -> list[float | None]``. TRL
  passes ``prompts`` (strings or message lists) and ``completions`` (strings or message lists); every other dataset
  column arrives as a list aligned with them and is forwarded per row; ``trainer_state``, ``log_extra``,
  ``log_metric`` and ``environments`` are trainer objects and are never forwarded. The ground truth is the first of
  the columns ``ground_truth``, ``solution``, ``answer``, ``label`` present. A failed call is ``None`` (TRL's "not
  applicable": the function is skipped for that sample).
* Its data: TRL datasets (``prompt``, optional ``completion``), standard or conversational (:data:`PRESETS`).
* Its bundle file: ``trl.py`` (``REWARD_FUNCS``, ``REWARD_WEIGHTS``, one function per reward, ``*_async``
  variants).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidResult
from ..reward.call import MISSING, Reward
from ..reward.chat import conversation
from ..reward.models import EvaluateResult
from .adapter import BUNDLE_SOURCE_LINE, Adapter, CoroutineFunctionLike, Source, is_valid
from .results import Style, as_list, awaited, never, prompt_text, split, trainer_result

__all__ = [
    "BUNDLE_FILE",
    "GROUND_TRUTH_KEYS",
    "NAME",
    "PRESETS",
    "STYLES",
    "TRL_INJECTED",
    "TrlReward",
    "TrlRewardAsync",
    "bundle_file",
    "entry_point",
    "make_trl_reward",
    "style",
]

NAME = "trl"

#: Its datasets' columns: (preset name, the columns that select it, the mapping), tried in order.
PRESETS: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    ("trl", ("prompt", "completion"), {"prompt": "prompt", "response": "completion"}),
    ("trl", ("prompt",), {"prompt": "prompt"}),
)

TRL_INJECTED = frozenset({"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"})
GROUND_TRUTH_KEYS = ("ground_truth", "solution", "answer", "label")


# --- in: a TRL reward function as ours ---------------------------------------------------------------------------

_TRL_CONVENTION = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


def style(fn: Callable[..., Any], name: str, standard: bool) -> Callable[..., Any]:
    """The batch call of our convention that calls ``fn`` as TRL does (``standard``: TRL's standard format)."""

    def call(rollouts_messages: list[list[dict[str, Any]]], **columns: Any) -> list[EvaluateResult]:
        n = len(rollouts_messages)
        prompts: list[Any] = []
        completions: list[Any] = []
        for messages in rollouts_messages:
            prompt, response = split(messages)
            if standard:
                prompts.append(prompt_text(prompt))
                completions.append(response)
            else:
                prompts.append(prompt)
                completions.append([{"role": "assistant", "content": response}])
        logged: dict[str, list[Any]] = {}
        kwargs = {k: v for k, v in columns.items() if k not in _TRL_CONVENTION}
        kwargs.setdefault("completion_ids", columns.get("completion_ids") or [None] * n)
        value = awaited(
            fn(
                prompts=prompts,
                completions=completions,
                trainer_state=None,
                log_extra=lambda column, values: logged.__setitem__(str(column), list(values)),
                log_metric=lambda metric, v: logged.__setitem__(str(metric), [v] * n),
                **kwargs,
            )
        )
        scores = as_list(value, f"{name}'s return", "a list of floats or None, one per completion")
        if len(scores) != n:
            raise InvalidResult(
                f"{name} returned {len(scores)} rewards for {n} completions: expected one per completion"
            )
        return [
            trainer_result(
                s, {k: v[i] for k, v in logged.items() if i < len(v)}, name, "TRL leaves it out of the reward"
            )
            for i, s in enumerate(scores)
        ]

    return call


def _problem(name: str, params: list[str], var_kw: bool) -> str | None:
    # TRL passes prompts and completions by keyword, and every column: **kwargs is part of the contract.
    if "completions" not in params or not var_kw:
        return (
            f"{name}({', '.join(params)}) is not a TRL reward function: TRL calls "
            f"f(prompts=..., completions=..., completion_ids=..., **columns), so it needs a 'completions' "
            f"parameter and **kwargs"
        )
    return None


#: ``trl`` (conversational, recognised by a ``completions`` parameter) and ``trl-standard`` (named only).
STYLES = (
    Style(
        "trl", True, lambda params: "completions" in params, _problem, lambda fn, name: style(fn, name, False)
    ),
    Style("trl-standard", True, never, _problem, lambda fn, name: style(fn, name, True)),
)


# --- out: our reward functions as TRL's ----------------------------------------------------------------------


def _ground_truth(columns: dict[str, Any]) -> Any:
    """The first ground-truth column present (removed from ``columns``, with every other ground-truth column)."""
    found = next((columns[key] for key in GROUND_TRUTH_KEYS if key in columns), MISSING)
    for key in GROUND_TRUTH_KEYS:
        columns.pop(key, None)
    return found


class TrlReward(Adapter):
    """A TRL ``reward_funcs`` entry: ``(prompts, completions, **columns) -> list[float | None]``, named ``name``
    (TRL logs ``rewards/<name>/mean``)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        *,
        source: Source | None = None,
        function: str | None = None,
    ) -> None:
        self._fn = fn
        self._reward = Reward(fn)
        self._source = source
        self._function = function if function is not None else name
        self.__name__ = self.__qualname__ = name

    @classmethod
    def from_bundle(cls, bundle: Any, source: Source, *args: Any) -> TrlReward:
        function, name = args
        return cls(bundle.functions[function], name, source=source, function=function)

    def _bundle_args(self) -> tuple[Any, ...]:
        return (self._function, self.__name__)

    def _plain_args(self) -> tuple[Any, ...]:
        return (self._fn, self.__name__)

    def _calls(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        columns = {k: v for k, v in kwargs.items() if k not in TRL_INJECTED and isinstance(v, (list, tuple))}
        out = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            row = {k: v[i] for k, v in columns.items() if i < len(v)}
            ground_truth = _ground_truth(row)
            out.append(self._reward.kwargs(conversation(prompt, completion), ground_truth, row))
        return out

    def _scores(self, kwargs: Mapping[str, Any], results: Sequence[Any]) -> list[float | None]:
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for metric in sorted({m for r in results for m in r.metrics}):
                values = [r.metrics[metric].score for r in results if metric in r.metrics]
                log_metric(f"{self.__name__}/{metric}", sum(values) / len(values))
        return [float(r.score) if is_valid(r) else None for r in results]

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        reward = self._reward
        return self._scores(kwargs, [reward.safe(kw) for kw in self._calls(prompts, completions, kwargs)])


async def _trl_signature(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> Any:
    """The signature ``inspect`` reads for :class:`TrlRewardAsync`."""


class TrlRewardAsync(CoroutineFunctionLike, TrlReward):
    """:class:`TrlReward` as a coroutine function: TRL (≥ 0.27) awaits the calls of all async reward functions
    together, and the samples of one call are scored concurrently."""

    __code__ = _trl_signature.__code__

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        reward = self._reward
        calls = self._calls(prompts, completions, kwargs)
        return self._scores(kwargs, await asyncio.gather(*(reward.asafe(kw) for kw in calls)))


def make_trl_reward(
    fn: Callable[..., Any],
    name: str,
    *,
    asynchronous: bool = False,
    source: Source | None = None,
    function: str | None = None,
) -> TrlReward:
    """A TRL ``reward_funcs`` entry for ``fn`` (``function``: its name in the bundle ``source``)."""
    cls = TrlRewardAsync if asynchronous else TrlReward
    return cls(fn, name, source=source, function=function)


# --- its bundle file ----------------------------------------------------------------------------------------------

BUNDLE_FILE = "trl.py"


def entry_point(bundle: str) -> str:
    """How the manifest names this trainer's entry point."""
    return f"{bundle}.trl:REWARD_FUNCS"


def bundle_file(bundle: str, functions: Sequence[str], metric_keys: str, locate: str) -> str:
    """The source of the bundle's ``trl.py``: ``locate`` imports the bundle as ``_bundle``."""
    lines = [
        '"""TRL ``reward_funcs``: ``GRPOTrainer(reward_funcs=REWARD_FUNCS, args=GRPOConfig(reward_weights=REWARD_WEIGHTS))``',
        f'or ``trl grpo --reward_funcs {bundle}.trl.<name>``. ``*_async`` variants score a batch concurrently."""',
        "",
        locate,
        "from pytest_reward.deploy.adapters import BundleSource, make_trl_reward",
        "",
        BUNDLE_SOURCE_LINE,
    ]
    for fn in functions:
        ident = re.sub(r"\W", "_", fn)
        found = f"_bundle.FUNCTIONS[{fn!r}]"
        lines += [
            f"{ident} = make_trl_reward({found}, {ident!r}, source=_SOURCE, function={fn!r})",
            f"{ident}_async = make_trl_reward(",
            f"    {found}, {ident + '_async'!r}, asynchronous=True, source=_SOURCE, function={fn!r}",
            ")",
        ]
    idents = [re.sub(r"\W", "_", fn) for fn in functions]
    lines += [
        "",
        f"REWARD_FUNCS = [{', '.join(idents)}]",
        f"REWARD_FUNCS_ASYNC = [{', '.join(i + '_async' for i in idents)}]",
        f"REWARD_WEIGHTS = [_bundle.WEIGHTS[n] for n in {list(functions)!r}]",
        "",
    ]
    return "\n".join(lines)
