"""OpenRLHF, both directions.

* In (its style): ``reward_func(queries=[prompt + response], prompts=[prompt], labels=[ground_truth])`` →
  ``{"rewards": ..., "scores": ..., "extra_logs": {...}}`` or the rewards alone (lists or tensors) tested as ours;
  ``prompt`` is the conversation rendered with ChatML.
* Out (its adapter): ``reward_func(queries, prompts, labels) -> {"rewards", "scores", "extra_logs"}``. OpenRLHF
  passes the templated prompt and the full decoded query (prompt + response, special tokens kept); the response is
  the query after the prompt, with trailing special tokens removed; ``labels`` are the ground truth. A failed call
  scores 0 with a ``<name>_valid`` flag of 0.
* Its serve route: ``POST /openrlhf/get_reward`` and ``/get_reward`` (its remote reward model's protocol,
  ``{query, prompts, labels}``): :func:`request_samples` and :func:`openrlhf_answer`.
* Its bundle file: ``openrlhf_reward.py`` (``reward_func``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidResult
from ..reward.chat import conversation, render_chatml, response_from_query
from ..reward.models import EvaluateResult
from .adapter import BUNDLE_SOURCE_LINE, Source, WeightedAdapter
from .results import Style, as_list, awaited, split, trainer_result

__all__ = [
    "BUNDLE_FILE",
    "NAME",
    "ROUTES",
    "STYLES",
    "OpenRLHFRewardFunc",
    "bundle_file",
    "entry_point",
    "make_openrlhf_reward_func",
    "openrlhf_answer",
    "request_samples",
    "style",
]

NAME = "openrlhf"

#: Why a bool is not a reward here: OpenRLHF makes ``torch.tensor([reward])`` of each, a bool tensor for a bool.
_BOOL = "OpenRLHF makes a tensor of each reward as it is, and torch.tensor([True]) is a bool tensor: return 1.0 or 0.0"


# --- in: an OpenRLHF reward_func as ours --------------------------------------------------------------------------


def style(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The pointwise call of our convention that calls ``fn`` as OpenRLHF does (a batch of one query)."""

    def call(messages: list[dict[str, Any]], ground_truth: Any = None, **fields: Any) -> EvaluateResult:
        prompt, response = split(messages)
        text = render_chatml(prompt, add_generation_prompt=True)
        value = awaited(fn(queries=[text + response], prompts=[text], labels=[ground_truth]))
        extras: dict[str, Any] = {}
        if isinstance(value, Mapping):
            if "rewards" not in value:
                raise InvalidResult(f"{name} returned a dict without 'rewards': {sorted(value)!r:.200}")
            for key, logs in (value.get("extra_logs") or {}).items():
                what = f"{name}'s extra_logs[{key!r}]"
                values = as_list(logs, what, "a list (or a tensor) of one value per query")
                if len(values) != 1:
                    raise InvalidResult(
                        f"{what} has {len(values)} values for 1 query: expected one per query"
                    )
                extras[key] = values[0]
            value = value["rewards"]
        rewards = as_list(value, f"{name}'s rewards", "a list (or a tensor) of one reward per query")
        if len(rewards) != 1:
            raise InvalidResult(f"{name} returned {len(rewards)} rewards for 1 query: expected one per query")
        return trainer_result(rewards[0], extras, name, "", bools=_BOOL)

    return call


def _problem(name: str, params: list[str], var_kw: bool) -> str | None:
    missing = [p for p in ("queries", "prompts", "labels") if p not in params and not var_kw]
    if missing:
        return (
            f"{name}({', '.join(params)}) does not take {', '.join(missing)}: not a openrlhf reward function"
        )
    return None


#: ``openrlhf``: recognised by ``queries``, ``prompts`` and ``labels`` parameters.
STYLES = (
    Style("openrlhf", False, lambda params: {"queries", "prompts", "labels"} <= set(params), _problem, style),
)


# --- out: our reward functions as OpenRLHF's reward_func -------------------------------------------------------


class OpenRLHFRewardFunc(WeightedAdapter):
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
    source: Source | None = None,
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


# --- its serve route ------------------------------------------------------------------------------------------------

#: The server's paths for OpenRLHF's remote reward model (``--reward.remote_url http://host:port/get_reward``).
ROUTES = ("/openrlhf/get_reward", "/get_reward")


def request_samples(
    query: Sequence[str], prompts: Sequence[str] | None, labels: Sequence[Any] | None
) -> tuple[list[tuple[list[dict[str, Any]], Any]], list[tuple[str, str]]]:
    """A request's ``(messages, label)`` per query, and what is wrong with it: ``(field, problem)`` for ``prompts``
    or ``labels`` of another length than ``query`` (then there are no samples). Absent prompts are empty, absent
    labels None."""
    n = len(query)
    problems = [
        (key, f"has {len(value)} items, query has {n}")
        for key, value in (("prompts", prompts), ("labels", labels))
        if value is not None and len(value) != n
    ]
    if problems:
        return [], problems
    prompts = prompts if prompts is not None else [""] * n
    labels = labels if labels is not None else [None] * n
    samples = [
        (conversation(prompt, response_from_query(q, prompt)), label)
        for q, prompt, label in zip(query, prompts, labels, strict=True)
    ]
    return samples, []


# --- its bundle file ----------------------------------------------------------------------------------------------

BUNDLE_FILE = "openrlhf_reward.py"


def entry_point(bundle: str) -> str:
    """How the manifest names this trainer's entry point."""
    return f"{bundle}/openrlhf_reward.py:reward_func"


def bundle_file(bundle: str, functions: Sequence[str], metric_keys: str, locate: str) -> str:
    """The source of the bundle's ``openrlhf_reward.py``: ``locate`` imports the bundle as ``_bundle``."""
    return "\n".join(
        [
            '"""OpenRLHF: ``--reward.remote_url <this file>`` (file mode): ``reward_func(queries, prompts, labels)``."""',
            "",
            locate,
            "from pytest_reward.deploy.adapters import BundleSource, make_openrlhf_reward_func",
            "",
            BUNDLE_SOURCE_LINE,
            f"reward_func = make_openrlhf_reward_func(_bundle.FUNCTIONS, _bundle.WEIGHTS, {metric_keys}, source=_SOURCE)",
            "",
        ]
    )
