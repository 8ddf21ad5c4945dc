"""Adapters from reward functions to the call conventions of RL trainers. Pure Python: no trainer is imported.

Every adapter calls reward functions through :class:`pytest_reward.reward.call.Reward` (the calling convention of the
test run: ``original_messages``, a missing ground truth not passed, async functions on one event loop per
thread, batch-mode functions on a batch of one) with :meth:`~pytest_reward.reward.call.Reward.safe`, which never raises
for an error inside the reward function: it returns ``EvaluateResult(score=0, is_score_valid=False, error=...)``
(reward-kit's convention), so a broken sample cannot stall a training step. How each trainer sees such a result:

* TRL ``reward_funcs``: ``None`` (TRL's "not applicable"; the function is skipped for that sample);
* verl ``compute_score`` and OpenRLHF ``reward_func``: score 0 with the same keys as every other sample, and a
  ``<name>_valid`` flag of 0 (:func:`flat_scores`);
* slime ``custom_rm``: 0.0.

Conversions (the conversation helpers are :mod:`pytest_reward.reward.chat`'s):

* TRL passes ``prompts`` (strings or message lists) and ``completions`` (strings or message lists); every other
  dataset column arrives as a list aligned with them and is forwarded per row; ``trainer_state``, ``log_extra``,
  ``log_metric`` and ``environments`` are trainer objects and are never forwarded. The ground truth is the first
  of the columns ``ground_truth``, ``solution``, ``answer``, ``label`` present.
* verl passes the response only (``solution_str``); the conversation is taken from ``extra_info["messages"]``,
  else ``extra_info["prompt"]`` / ``extra_info["question"]``.
* OpenRLHF passes the templated prompt and the full decoded query (prompt + response, special tokens kept); the
  response is the query after the prompt, with trailing special tokens removed; ``labels`` are the ground truth.
* verl passes ``custom_reward_function.reward_kwargs`` (and, with a reward model router,
  ``reward_router_address``) as keyword arguments of ``compute_score``: they reach every reward function as keyword
  arguments, over the ``extra_info`` field of the same name (verl's own precedence); ``reward_model_tokenizer`` is a
  tokenizer object, not data, and is not forwarded.
* slime passes ``sample.prompt`` (a string or messages), ``sample.response`` and ``sample.label``; in group mode
  (``--group-rm``, or a rollout that returns several samples) ``custom_rm`` gets a list of samples and returns a list
  of rewards in the same order and shape. Extra keyword arguments reach the reward functions.

Processes. The adapter callables are objects of the classes below; verl's ``remote`` reward manager, Ray, TRL's
AsyncGRPO and multiprocessing send them to other processes by pickling (pickle, cloudpickle). An adapter of a bundle
(built with ``source=``) pickles as "load the bundle at this absolute path and build this adapter again": the
receiving interpreter needs pytest-reward and the bundle's requirements installed and the bundle directory at the
same path (on another machine: a shared filesystem), not the project on its ``sys.path``. The bundle's content hash
travels with it: a different bundle at that path is refused. Adapters built from plain functions pickle their
functions as themselves (by reference to their modules).

The async adapters (TRL's ``*_async``, slime's ``custom_rm``) are coroutine functions to ``inspect`` and ``asyncio``
(``inspect.iscoroutinefunction`` is how TRL and verl tell them from sync ones), through the function-like protocol
``inspect`` reads: a ``__code__`` of an ``async def`` with the call's signature, ``__name__``, ``__defaults__``,
``__kwdefaults__``, ``__annotations__``.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BundleError
from ..reward.call import MISSING, Reward, describe_exception, failed_result
from ..reward.chat import conversation, response_from_query

if TYPE_CHECKING:
    from .runtime import LoadedBundle

__all__ = [
    "GROUND_TRUTH_KEYS",
    "TRL_INJECTED",
    "VERL_INJECTED",
    "BundleSource",
    "OpenRLHFRewardFunc",
    "SlimeCustomRM",
    "TrlReward",
    "TrlRewardAsync",
    "VerlComputeScore",
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
VERL_INJECTED = frozenset({"reward_model_tokenizer"})
GROUND_TRUTH_KEYS = ("ground_truth", "solution", "answer", "label")


def call_reward(
    fn: Callable[..., Any], messages: list[dict[str, Any]], /, ground_truth: Any = MISSING, **fields: Any
) -> Any:
    """Call a reward function as every adapter does; never raises (an error is an invalid ``EvaluateResult``).

    Kept for the code a bundle ships (the Fireworks evaluator's ``main.py``); adapters build one
    :class:`~pytest_reward.reward.call.Reward` per function instead of one per call."""
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

    async def arow(
        self, messages: list[dict[str, Any]], ground_truth: Any, fields: Mapping[str, Any] | None = None
    ) -> dict[str, float]:
        results = {
            name: await reward.asafe(reward.kwargs(messages, ground_truth, fields))
            for name, reward in self.rewards.items()
        }
        return flat_scores(results, self.weights, self.metric_keys)


# --- pickling: an adapter of a bundle travels as the bundle's path ------------------------------------------


@dataclass(frozen=True)
class BundleSource:
    """Where a bundle's adapters come from: its package directory (absolute), name and content hash."""

    package_dir: str
    name: str
    content_hash: str

    @classmethod
    def of(cls, package: Any) -> BundleSource:
        """The source of an imported bundle package (its ``__file__`` and ``MANIFEST``)."""
        return cls(
            str(Path(package.__file__).resolve().parent),
            str(package.MANIFEST["name"]),
            str(package.MANIFEST["content_hash"]),
        )

    def load(self) -> LoadedBundle:
        """Import the bundle from its path (once per interpreter; ``runtime.load_bundle`` checks every file)."""
        from .runtime import load_bundle

        if not os.path.isdir(self.package_dir):
            raise BundleError(
                f"cannot load reward bundle {self.name}: {self.package_dir} does not exist here (a pickled adapter "
                "loads its bundle from the absolute path it was loaded from: put the bundle at the same path on "
                "every machine, e.g. on a shared filesystem)"
            )
        bundle = load_bundle(self.package_dir)
        if bundle.manifest.get("content_hash") != self.content_hash:
            raise BundleError(
                f"{self.package_dir}: holds reward bundle {bundle.name} with content hash "
                f"{str(bundle.manifest.get('content_hash'))[:16]}, not the {self.content_hash[:16]} this adapter "
                "was built from"
            )
        return bundle


def _rebuild(cls: type[_Adapter], source: BundleSource, args: tuple[Any, ...]) -> _Adapter:
    """Unpickling an adapter of a bundle: load the bundle from its path, build the adapter again."""
    return cls.from_bundle(source.load(), source, *args)


class _Adapter:
    """Base of the adapter callables: how they pickle (see the module docstring)."""

    _source: BundleSource | None

    @classmethod
    def from_bundle(cls, bundle: LoadedBundle, source: BundleSource, *args: Any) -> _Adapter:
        raise NotImplementedError

    def _bundle_args(self) -> tuple[Any, ...]:
        return ()

    def _plain_args(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        if self._source is not None:
            return (_rebuild, (type(self), self._source, self._bundle_args()))
        return (type(self), self._plain_args())

    def __repr__(self) -> str:
        where = f" from {self._source.package_dir}" if self._source is not None else ""
        return f"<{type(self).__name__} {getattr(self, '__name__', '')}{where}>"


class _CoroutineFunctionLike:
    """Makes an async adapter a coroutine function to ``inspect.iscoroutinefunction`` (and ``asyncio``'s): the
    function-like protocol of ``inspect`` (``__code__`` of an ``async def`` with the call's signature, ``__name__``,
    ``__defaults__``, ``__kwdefaults__``, ``__annotations__``)."""

    __defaults__ = None
    __kwdefaults__ = None
    __annotations__ = {}  # read by inspect, never changed


# --- TRL --------------------------------------------------------------------------------------------------


def _ground_truth(columns: dict[str, Any]) -> Any:
    """The first ground-truth column present (removed from ``columns``, with every other ground-truth column)."""
    found = next((columns[key] for key in GROUND_TRUTH_KEYS if key in columns), MISSING)
    for key in GROUND_TRUTH_KEYS:
        columns.pop(key, None)
    return found


class TrlReward(_Adapter):
    """A TRL ``reward_funcs`` entry: ``(prompts, completions, **columns) -> list[float | None]``, named ``name``
    (TRL logs ``rewards/<name>/mean``)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        *,
        source: BundleSource | None = None,
        function: str | None = None,
    ) -> None:
        self._fn = fn
        self._reward = Reward(fn)
        self._source = source
        self._function = function if function is not None else name
        self.__name__ = self.__qualname__ = name

    @classmethod
    def from_bundle(cls, bundle: LoadedBundle, source: BundleSource, *args: Any) -> TrlReward:
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


class TrlRewardAsync(_CoroutineFunctionLike, TrlReward):
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
    source: BundleSource | None = None,
    function: str | None = None,
) -> TrlReward:
    """A TRL ``reward_funcs`` entry for ``fn`` (``function``: its name in the bundle ``source``)."""
    cls = TrlRewardAsync if asynchronous else TrlReward
    return cls(fn, name, source=source, function=function)


# --- verl -------------------------------------------------------------------------------------------------


class _WeightedAdapter(_Adapter):
    """An adapter over all of a bundle's functions, scored into one weighted row (verl, OpenRLHF, slime)."""

    def __init__(
        self,
        functions: Mapping[str, Callable[..., Any]],
        weights: Mapping[str, float] | None = None,
        metric_keys: Mapping[str, Sequence[str]] | None = None,
        *,
        source: BundleSource | None = None,
    ) -> None:
        self._args = (dict(functions), dict(weights) if weights else None, dict(metric_keys or {}))
        self._weighted = _Weighted(functions, weights, metric_keys)
        self._source = source

    @classmethod
    def from_bundle(cls, bundle: LoadedBundle, source: BundleSource, *args: Any) -> _WeightedAdapter:
        return cls(bundle.functions, bundle.weights, bundle.metric_keys(), source=source)

    def _plain_args(self) -> tuple[Any, ...]:
        return self._args


class VerlComputeScore(_WeightedAdapter):
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
    source: BundleSource | None = None,
) -> VerlComputeScore:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict``."""
    return VerlComputeScore(functions, weights, metric_keys, source=source)


# --- OpenRLHF ---------------------------------------------------------------------------------------------


class OpenRLHFRewardFunc(_WeightedAdapter):
    """OpenRLHF's ``reward_func(queries, prompts, labels) -> {"rewards", "scores", "extra_logs"}``."""

    __name__ = "reward_func"

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
    ) -> dict[str, Any]:
        weighted = self._weighted
        rows = [
            weighted.row(conversation(prompt, response_from_query(query, prompt)), label)
            for query, prompt, label in zip(queries, prompts, labels, strict=True)
        ]
        return openrlhf_answer(rows)


def make_openrlhf_reward_func(
    functions: Mapping[str, Callable[..., Any]],
    weights: Mapping[str, float] | None = None,
    metric_keys: Mapping[str, Sequence[str]] | None = None,
    *,
    source: BundleSource | None = None,
) -> OpenRLHFRewardFunc:
    """OpenRLHF's ``reward_func(queries, prompts, labels) -> {"rewards", "scores", "extra_logs"}``."""
    return OpenRLHFRewardFunc(functions, weights, metric_keys, source=source)


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


async def _slime_signature(args: Any, sample: Any, **kwargs: Any) -> Any:
    """The signature ``inspect`` reads for :class:`SlimeCustomRM`."""


class SlimeCustomRM(_CoroutineFunctionLike, _WeightedAdapter):
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
    source: BundleSource | None = None,
) -> SlimeCustomRM:
    """slime's ``async custom_rm(args, sample_or_samples, **kwargs)`` (``--custom-rm-path``)."""
    return SlimeCustomRM(functions, weights, None, source=source)
