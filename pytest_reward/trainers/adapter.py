"""What every trainer's adapter shares (us -> trainer): reward functions called as the test run calls them, several
scored into one weighted row, and how the adapter callables pickle. Pure Python: no trainer is imported.

Every adapter calls reward functions through :class:`pytest_reward.reward.call.Reward` (the calling convention of
the test run: ``original_messages``, a missing ground truth not passed, async functions on one event loop per
thread, batch-mode functions on a batch of one) with :meth:`~pytest_reward.reward.call.Reward.safe`, which never
raises for an error inside the reward function: it returns ``EvaluateResult(score=0, is_score_valid=False,
error=...)`` (reward-kit's convention), so a broken sample cannot stall a training step. Each trainer's module says
how its trainer sees such a result.

Processes. The adapter callables are objects of :class:`Adapter` subclasses; verl's ``remote`` reward manager, Ray,
TRL's AsyncGRPO and multiprocessing send them to other processes by pickling (pickle, cloudpickle). An adapter of a
bundle (built with ``source=``, a ``pytest_reward.deploy.adapters.BundleSource``) pickles as "load the bundle at
this absolute path and build this adapter again": the receiving interpreter needs pytest-reward and the bundle's
requirements installed and the bundle directory at the same path (on another machine: a shared filesystem), not the
project on its ``sys.path``. The bundle's content hash travels with it: a different bundle at that path is refused.
Adapters built from plain functions pickle their functions as themselves (by reference to their modules).

The async adapters (TRL's ``*_async``, slime's ``custom_rm``) are coroutine functions to ``inspect`` and ``asyncio``
(``inspect.iscoroutinefunction`` is how TRL and verl tell them from sync ones), through the function-like protocol
``inspect`` reads: a ``__code__`` of an ``async def`` with the call's signature, ``__name__``, ``__defaults__``,
``__kwdefaults__``, ``__annotations__``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..reward.call import MISSING, Reward, describe_exception, failed_result

__all__ = [
    "BUNDLE_SOURCE_LINE",
    "Adapter",
    "CoroutineFunctionLike",
    "Source",
    "Weighted",
    "WeightedAdapter",
    "call_reward",
    "flat_scores",
    "is_valid",
    "rebuild",
    "result_json",
]


#: A generated bundle file's line that makes its adapters pickle as the bundle's path (they then work in a fresh
#: interpreter, e.g. a Ray worker); the file has imported ``BundleSource`` and the bundle as ``_bundle``.
BUNDLE_SOURCE_LINE = "_SOURCE = BundleSource.of(_bundle)"


class Source(Protocol):
    """Where a bundle's adapters come from (``deploy.adapters.BundleSource``): it loads the bundle, whose
    ``functions``, ``weights`` and ``metric_keys()`` the adapters are built from."""

    def load(self) -> Any: ...


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


class Weighted:
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


def rebuild(cls: type[Adapter], source: Source, args: tuple[Any, ...]) -> Adapter:
    """Unpickling an adapter of a bundle: load the bundle from its path, build the adapter again."""
    return cls.from_bundle(source.load(), source, *args)


class Adapter:
    """Base of the adapter callables: how they pickle (see "Processes" above)."""

    _source: Source | None

    @classmethod
    def from_bundle(cls, bundle: Any, source: Source, *args: Any) -> Adapter:
        raise NotImplementedError

    def _bundle_args(self) -> tuple[Any, ...]:
        return ()

    def _plain_args(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        if self._source is not None:
            return (rebuild, (type(self), self._source, self._bundle_args()))
        return (type(self), self._plain_args())

    def __repr__(self) -> str:
        where = f" from {self._source.package_dir}" if self._source is not None else ""
        return f"<{type(self).__name__} {getattr(self, '__name__', '')}{where}>"


class CoroutineFunctionLike:
    """Makes an async adapter a coroutine function to ``inspect.iscoroutinefunction`` (and ``asyncio``'s): the
    function-like protocol of ``inspect`` (``__code__`` of an ``async def`` with the call's signature, ``__name__``,
    ``__defaults__``, ``__kwdefaults__``, ``__annotations__``)."""

    __defaults__ = None
    __kwdefaults__ = None
    __annotations__ = {}  # read by inspect, never changed


class WeightedAdapter(Adapter):
    """An adapter over all of a bundle's functions, scored into one weighted row (verl, OpenRLHF, slime)."""

    def __init__(
        self,
        functions: Mapping[str, Callable[..., Any]],
        weights: Mapping[str, float] | None = None,
        metric_keys: Mapping[str, Sequence[str]] | None = None,
        *,
        source: Source | None = None,
    ) -> None:
        self._args = (dict(functions), dict(weights) if weights else None, dict(metric_keys or {}))
        self._weighted = Weighted(functions, weights, metric_keys)
        self._source = source

    @classmethod
    def from_bundle(cls, bundle: Any, source: Source, *args: Any) -> WeightedAdapter:
        return cls(bundle.functions, bundle.weights, bundle.metric_keys(), source=source)

    def _plain_args(self) -> tuple[Any, ...]:
        return self._args
