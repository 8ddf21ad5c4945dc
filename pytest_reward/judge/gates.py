"""The ``reward`` marker: its gates (one table of gate kinds), its own settings, and their validation.

``@pytest.mark.reward(threshold=0.5, mean=0.7, pass_rate=0.9, quantile={0.1: 0.3}, confidence=0.95,
metrics={"relevance": {"mean": 0.6}}, samples="data/x.jsonl", rollout={...})``

Every gate kind is one row of :data:`GATE_KINDS`: its marker key, the statistic it bounds, its direction, the
interval it is judged on when ``confidence=`` is set, whether it applies per metric, and its help text. Marker
validation, the verdicts (:func:`pytest_reward.judge.results.evaluate_gates`), the reports and the marker's help
line all read that table.

* ``threshold``: per-sample pass score. A sample below it fails, unless a ``pass_rate`` gate is declared: then
  the miss is tolerated per sample ("below") and the aggregate gate decides.
* ``mean``, ``max_mean``, ``pass_rate``, ``quantile``: aggregate gates per function × samples file, evaluated once
  per session (on the xdist controller).
* ``confidence``: each aggregate gate that has an interval method holds for the edge of the two-sided
  ``confidence`` interval on its side (seeded percentile bootstrap for the mean, Wilson score for the rate), not
  for the point estimate.
* ``metrics``: the per-metric gate kinds per named metric.
* ``pair_accuracy``, ``subset_accuracy``, ``mean_margin``: the gates of preference files (``chosen`` / ``rejected``
  lines, :mod:`pytest_reward.judge.preference`): the share of pairs the reward ranks right (Wilson score interval
  with ``confidence=``), the same per named subset (``{subset: rate}``), the mean margin (bootstrap). They are
  judged on preference files only, and the gates above on samples files only (:attr:`GateKind.pairs`); with one
  of them declared a wrong pair is left to the gates, as a threshold miss is to ``pass_rate``.

The marker's own settings (:class:`Marker`, apart from its gates):

* ``samples``, ``rollout``, ``timeout``: the function's samples files, generation settings, and call deadline.
* ``sample_fields``: which column of a dataset samples file (Parquet, Arrow) is what for this function,
  ``{target: "column.field"}`` as ini ``reward_sample_fields`` writes ``target=column.field``; it replaces the ini
  mapping for this function (both lie over the preset the file's columns select).
* ``probes``: reward-hacking probes (:mod:`pytest_reward.probes`): ``"default"``, a list of probe names (a group's
  name among them, ``"default"``, ``"neutral"``, ``"formats"``, ``"think"``, ``"tags"``, ``"code"`` or ``"batch"``, adds its probes), or a dict
  ``{probe: rule}`` (``None``: the probe's own rule). The rules are
  checked here; the names when the function's items are built (custom probes may come from a hook).

Settings resolve key by key: marker > command line > ini. Validation errors name where the bad value came from.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..data.sources import parse_fields
from ..errors import GateError
from ..probes import DIRECTION_FEATURES, PROBE_GROUPS, direction_probes, parse_rule

__all__ = [
    "AT_LEAST",
    "AT_MOST",
    "GATE_KINDS",
    "INTERVAL_METHODS",
    "SETTINGS_HELP",
    "GateError",
    "GateKind",
    "Gates",
    "Marker",
    "MetricGates",
    "gate_kind",
    "markdown_table",
    "marker_doc",
    "parse_quantile_text",
    "validate_marker",
]

AT_LEAST, AT_MOST = "at least", "at most"

INTERVAL_METHODS = {
    "bootstrap": (("mean",), "percentile bootstrap"),
    "wilson": (("pass_rate", "pair_accuracy", "subset_accuracy"), "Wilson score"),
}
"""The intervals a gate may be judged on when ``confidence=`` is set: method -> (the statistics it is an interval
of, its name in help texts). A seeded percentile bootstrap of the mean, a Wilson score interval of a rate: the
pass rate, or a preference file's accuracy (:mod:`pytest_reward.judge.stats`)."""


@dataclass(frozen=True)
class GateKind:
    """One kind of gate: a bound on one statistic of a reward function's scores."""

    key: str
    """The marker keyword (and the gate's name in reports; ``key(q)`` for a kind with levels)."""
    statistic: str
    """What it bounds: ``"score"`` (each sample's: judged per sample), or a statistic of the function × file group,
    read by this name from its summary: ``"mean"``, ``"pass_rate"``, ``"min"``, ``"max"``, ``"quantile"``."""
    direction: str
    """``AT_LEAST``: the statistic must be ≥ the bound; ``AT_MOST``: ≤."""
    value: str
    """What the marker's value is: ``"number"``, ``"rate"`` (in [0, 1]), or ``"levels"`` (``{q: bound}``, one bound
    per quantile level q in (0, 1))."""
    interval: str | None
    """With ``confidence=``: the method (a key of :data:`INTERVAL_METHODS`) whose interval edge is compared instead
    of the point estimate; None: the point estimate always."""
    per_metric: bool
    """Whether ``metrics={name: {...}}`` takes it too."""
    help: str
    """One line for the marker's help text."""
    pairs: bool = False
    """Judged on preference files (:mod:`pytest_reward.data.preference`: ``chosen`` / ``rejected`` lines) instead
    of samples files: the gates of one kind of file say nothing of the other (a function may meet both)."""

    def __post_init__(self) -> None:
        if self.direction not in (AT_LEAST, AT_MOST):
            raise ValueError(f"gate kind {self.key!r}: direction must be {AT_LEAST!r} or {AT_MOST!r}")
        if self.value not in ("number", "rate", "levels", "subsets"):
            raise ValueError(f"gate kind {self.key!r}: value must be 'number', 'rate', 'levels' or 'subsets'")
        if self.interval is not None and self.statistic not in INTERVAL_METHODS.get(self.interval, ((),))[0]:
            raise ValueError(f"gate kind {self.key!r}: no {self.interval!r} interval of the {self.statistic}")

    @property
    def aggregate(self) -> bool:
        """Judged once per function × file (all but the per-sample ``threshold``)."""
        return self.statistic != "score"

    @property
    def levels(self) -> bool:
        return self.value == "levels"

    @property
    def keyed(self) -> bool:
        """Its value is one bound per level or per subset (``{q: bound}``, ``{subset: rate}``)."""
        return self.value in ("levels", "subsets")

    @property
    def upper(self) -> bool:
        """An upper bound: the statistic must stay at or below it."""
        return self.direction == AT_MOST

    @property
    def on_passes(self) -> bool:
        """Judged on the samples that reach the threshold: needs one, and a threshold miss is left to it."""
        return self.statistic == "pass_rate"

    @property
    def empty(self) -> Any:
        """The value an undeclared gate of this kind reads as."""
        return () if self.keyed else None

    def parse(self, value: Any, where: str) -> Any:
        """The marker's value for this kind, checked; ``GateError`` naming ``where`` otherwise."""
        if self.value == "levels":
            return _quantiles(value, self.key, where)
        if self.value == "subsets":
            return _subsets(value, self.key, where)
        if self.value == "rate":
            return _unit(value, self.key, where)
        return _number(value, self.key, where)

    def gates(self, bound: Any) -> list[tuple[str, float | None, float]]:
        """``(gate name, level, bound)`` of each gate a declared ``bound`` sets (one per level for a kind with
        levels)."""
        if self.levels:
            return [(f"{self.key}({q:g})", q, b) for q, b in bound]
        if self.value == "subsets":
            return [(f"{self.key}({name})", name, b) for name, b in bound]
        return [(self.key, None, bound)]

    def label(self, level: float | str | None = None) -> str:
        """What a report calls the bounded statistic (``mean`` for ``max_mean``, ``quantile(0.1)``,
        ``subset_accuracy(safety)``)."""
        if level is None:
            return self.statistic
        return f"{self.statistic}({level})" if isinstance(level, str) else f"{self.statistic}({level:g})"

    def measured(self, stats: Any, level: float | str | None = None) -> float | None:
        """The statistic's value in a group's summary (or a metric's), None when it has none. The accuracies are
        in a preference file's summary (``Summary.preference``: ``accuracy``, ``subsets[name]["accuracy"]``)."""
        if self.levels:
            return stats.quantiles.get(f"{level:g}")
        if self.statistic in ("pair_accuracy", "subset_accuracy"):
            preference = getattr(stats, "preference", None)
            if not preference:
                return None
            if self.statistic == "pair_accuracy":
                return preference["accuracy"]  # type: ignore[no-any-return]
            return preference["subsets"].get(level, {}).get("accuracy")  # type: ignore[no-any-return]
        return getattr(stats, self.statistic, None)

    def usage(self) -> str:
        if self.value == "subsets":
            return f"{self.key}={{subset: rate}}"
        return f"{self.key}={{q: bound}}" if self.levels else self.key


GATE_KINDS: tuple[GateKind, ...] = (
    GateKind(
        key="threshold", statistic="score", direction=AT_LEAST, value="number", interval=None, per_metric=True,
        help="per-sample pass score: a sample below it fails (with a pass_rate gate, the rate decides)",
    ),
    GateKind(
        key="mean", statistic="mean", direction=AT_LEAST, value="number", interval="bootstrap", per_metric=True,
        help="the mean score per function x samples file must be at least this",
    ),
    GateKind(
        key="max_mean", statistic="mean", direction=AT_MOST, value="number", interval="bootstrap", per_metric=False,
        help="the mean score must be at most this (lower-is-better scores, e.g. perplexity)",
    ),
    GateKind(
        key="pass_rate", statistic="pass_rate", direction=AT_LEAST, value="rate", interval="wilson", per_metric=True,
        help="the share of samples at or above the threshold must be at least this",
    ),
    GateKind(
        key="quantile", statistic="quantile", direction=AT_LEAST, value="levels", interval=None, per_metric=True,
        help="the q-quantile of the scores must be at least its bound",
    ),
    GateKind(
        key="pair_accuracy", statistic="pair_accuracy", direction=AT_LEAST, value="rate", interval="wilson",
        per_metric=False, pairs=True,
        help="preference files: the share of pairs whose chosen response scores above every rejected one",
    ),
    GateKind(
        key="subset_accuracy", statistic="subset_accuracy", direction=AT_LEAST, value="subsets",
        interval="wilson", per_metric=False, pairs=True,
        help="preference files: the pair accuracy of each named subset (the pairs' 'subset' field)",
    ),
    GateKind(
        key="mean_margin", statistic="mean", direction=AT_LEAST, value="number", interval="bootstrap",
        per_metric=False, pairs=True,
        help="preference files: the mean margin (chosen minus the best rejected score) must be at least this",
    ),
)  # fmt: skip
"""Every gate kind, in the order the marker's help, validation errors and reports list them."""

SETTINGS_HELP: tuple[tuple[str, str], ...] = (
    ("samples", "samples file(s) for this function"),
    ("rollout", "generation settings for prompt-only samples ({'n': 4, 'temperature': 0.7, ...})"),
    ("timeout", "seconds one call may take"),
    (
        "probes",
        "reward-hacking probes ('default', a list of names and groups (default, neutral, formats, think, tags, "
        "code, batch), or {probe: rule})",
    ),
    (
        "reference",
        "a second reward function (a @reward_function, or a built-in's name such as 'math_reward') that scores "
        "every sample too: the samples they disagree on are listed (probe 'reference')",
    ),
    ("reference_tolerance", "scores further apart than this disagree (default 0: any difference)"),
    (
        "agreement",
        "with reference=: the share of samples both score alike must be at least this (with confidence=, the "
        "lower edge of its Wilson score interval)",
    ),
    (
        "direction",
        "{feature: '+' or '-'}: the way the score must move as the feature grows (length: probes "
        "length.longer and length.shorter check it)",
    ),
    (
        "sample_fields",
        "{target: 'column.field'}: which column of a Parquet / Arrow file is what for this function (instead of "
        "ini reward_sample_fields)",
    ),
)
"""The marker's own settings (the fields of :class:`Marker` apart from its gates), with their help text."""

ROLLOUT_KEYS = ("n", "temperature", "top_p", "top_k", "max_new_tokens", "seed", "stop")


def gate_kind(name: str) -> GateKind:
    """The kind of the gate ``name`` (a marker key, or a report's gate name such as ``quantile(0.1)``)."""
    key = name.partition("(")[0]
    for kind in GATE_KINDS:
        if kind.key == key:
            return kind
    raise KeyError(f"no gate kind {key!r}")


def _kinds(*, per_metric: bool = False) -> tuple[GateKind, ...]:
    return tuple(k for k in GATE_KINDS if k.per_metric or not per_metric)


def _gate_keys() -> tuple[str, ...]:
    return (*(k.key for k in GATE_KINDS), "confidence", "metrics")


def _marker_keys() -> tuple[str, ...]:
    return (*_gate_keys(), *(key for key, _ in SETTINGS_HELP))


def marker_doc() -> str:
    """The ``reward`` marker's help line (``pytest --markers``), written from the table of gate kinds."""
    keys = ", ".join(f"{key}=None" for key in _marker_keys())
    kinds = "; ".join(f"{kind.usage()}: {kind.help}" for kind in GATE_KINDS)
    methods: dict[str, list[str]] = {}
    for kind in GATE_KINDS:
        if kind.interval:
            methods.setdefault(INTERVAL_METHODS[kind.interval][1], []).append(kind.key)
    intervals = "; ".join(f"{', '.join(keys)}: {method}" for method, keys in methods.items())
    per_metric = " / ".join(kind.key for kind in _kinds(per_metric=True))
    settings = "; ".join(f"{key}: {text}" for key, text in SETTINGS_HELP)
    return (
        f"reward({keys}): gates and settings of a reward function. {kinds}; confidence: judge those gates on the "
        f"bound of a two-sided interval at this level, not on the estimate ({intervals}); metrics={{name: {{...}}}}: "
        f"{per_metric} per named metric; {settings}."
    )


def markdown_table() -> str:
    """The marker reference's table of keys (``docs/reference/marker.md``), generated from :data:`GATE_KINDS` and
    :data:`SETTINGS_HELP`; ``tests/test_docs.py`` keeps the page equal to it."""
    rows = [
        "| key | value | judged | per metric | with `confidence` | what it does |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    values = {
        "number": "a number",
        "rate": "a rate in [0, 1]",
        "levels": "`{q: bound}`, q in (0, 1)",
        "subsets": "`{subset: rate}`",
    }
    for kind in GATE_KINDS:
        judged = "per sample" if not kind.aggregate else f"per function × file ({kind.direction})"
        interval = INTERVAL_METHODS[kind.interval][1] if kind.interval else "the estimate"
        per_metric = "yes" if kind.per_metric else "no"
        rows.append(f"| `{kind.usage()}` | {values[kind.value]} | {judged} | {per_metric} | {interval} | {kind.help} |")
    rows.append(
        "| `confidence` | a level in (0, 1) | | | | judge the gates above on the bound of a two-sided interval at "
        "this level, not on the estimate |"
    )
    per_metric = ", ".join(f"`{kind.key}`" for kind in _kinds(per_metric=True))
    rows.append(f"| `metrics` | `{{name: {{...}}}}` | | | | the gates {per_metric} per named metric |")
    for key, text in SETTINGS_HELP:
        rows.append(f"| `{key}` | | | | | {text} |")
    return "\n".join(rows)


# --- gates ---------------------------------------------------------------------------------------------------


def _set_bounds(obj: Any, bounds: Mapping[str, Any], kinds: tuple[GateKind, ...], what: str) -> None:
    """Store the declared ``bounds`` in table order, each kind's bound as an attribute (None or () when not
    declared), and ``tolerates_misses``: attributes, since the verdict on every sample reads them."""
    known = {kind.key for kind in kinds}
    unknown = [key for key in bounds if key not in known]
    if unknown:
        raise TypeError(f"{what} has no gate kind {unknown[0]!r} (known: {', '.join(sorted(known))})")
    declared = []
    tolerates_misses = False
    for kind in kinds:
        value = bounds.get(kind.key, kind.empty)
        if value not in (None, ()):
            declared.append((kind.key, value))
            tolerates_misses = tolerates_misses or kind.on_passes
        object.__setattr__(obj, kind.key, value)
    object.__setattr__(obj, "bounds", tuple(declared))
    object.__setattr__(obj, "tolerates_misses", tolerates_misses)


class _Bounds:
    """A bound per declared gate kind, stored in table order and read as attributes (``gates.mean``)."""

    bounds: tuple[tuple[str, Any], ...]
    """(kind key, bound) of the declared gates, in table order."""
    tolerates_misses: bool
    """Whether a threshold miss is left to an aggregate gate (one judged on passes, ``pass_rate``, is declared)."""

    def __getattr__(self, name: str) -> Any:  # reached only for names that are no instance attribute
        raise AttributeError(f"{type(self).__name__} has no attribute or gate kind {name!r}")

    def declared(self) -> Iterator[tuple[GateKind, Any]]:
        """Each declared gate's kind and bound, in table order."""
        for key, bound in self.bounds:
            yield gate_kind(key), bound

    def levels(self) -> set[float]:
        """The quantile levels its gates bound."""
        return {q for kind, bound in self.declared() if kind.levels for q, _ in bound}

    def intervals(self, pairs: bool | None = None) -> set[str]:
        """The interval methods its gates are judged on when ``confidence=`` is set (``pairs``: of the gates of
        preference files only, True, or of samples files only, False)."""
        return {
            kind.interval
            for kind, _ in self.declared()
            if kind.interval and (pairs is None or kind.pairs == pairs)
        }

    @property
    def pair_gated(self) -> bool:
        """Whether a gate of preference files is declared: a wrong pair is then left to the gates (as a threshold
        miss is to ``pass_rate``), else it fails."""
        return any(kind.pairs for kind, _ in self.declared())

    @property
    def has_aggregate(self) -> bool:
        return any(kind.aggregate for kind, _ in self.declared())

    def to_dict(self) -> dict[str, Any]:
        return {
            kind.key: {str(q): b for q, b in bound} if kind.keyed else bound
            for kind, bound in self.declared()
        }


@dataclass(frozen=True, init=False)
class MetricGates(_Bounds):
    """The gates on one named metric (the per-metric kinds)."""

    bounds: tuple[tuple[str, Any], ...] = ()

    def __init__(self, **bounds: Any) -> None:
        _set_bounds(self, bounds, _kinds(per_metric=True), "metrics")


@dataclass(frozen=True, init=False)
class Gates(_Bounds):
    """The gates of one reward function (marker over command line over ini): a bound per declared gate kind
    (read as ``gates.threshold``, ``gates.mean``...), the confidence they are judged at, and per-metric gates."""

    bounds: tuple[tuple[str, Any], ...] = ()
    confidence: float | None = None
    metrics: tuple[tuple[str, MetricGates], ...] = ()
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """Where each key's value came from (``"marker"``, an option, an ini key)."""

    def __init__(
        self,
        *,
        confidence: float | None = None,
        metrics: tuple[tuple[str, MetricGates], ...] = (),
        sources: tuple[tuple[str, str], ...] = (),
        **bounds: Any,
    ) -> None:
        _set_bounds(self, bounds, GATE_KINDS, "Gates")
        object.__setattr__(self, "confidence", confidence)
        object.__setattr__(self, "metrics", tuple(metrics))
        object.__setattr__(self, "sources", tuple(sources))

    @property
    def metric_map(self) -> dict[str, MetricGates]:
        return dict(self.metrics)

    def source(self, key: str) -> str:
        return dict(self.sources).get(key, "default")

    @property
    def has_aggregate(self) -> bool:
        return super().has_aggregate or any(m.has_aggregate for _, m in self.metrics)

    def merged(self, values: Mapping[str, Any], source: str) -> Gates:
        """These gates with ``values`` (validated gate keys) laid over them, key by key."""
        if not values:
            return self
        sources = dict(self.sources)
        sources.update({k: source for k in values})
        settings = {"confidence": self.confidence, "metrics": self.metrics, **dict(self.bounds), **values}
        return Gates(**settings, sources=tuple(sources.items()))

    def to_dict(self) -> dict[str, Any]:
        """The gates as marker keywords (how they travel to xdist workers and the controller)."""
        out = super().to_dict()
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.metrics:
            out["metrics"] = {name: m.to_dict() for name, m in self.metrics}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Gates:
        """:meth:`to_dict`'s output, checked again as a marker's gates."""
        _check_keys(data, _gate_keys(), where, "gate key")
        return cls().merged(validate_marker((), data, where), where)


@dataclass(frozen=True)
class Marker:
    """A reward function's ``reward`` marker, resolved (marker over command line over ini): its gates and its own
    settings."""

    gates: Gates = field(default_factory=Gates)
    samples: tuple[str, ...] = ()
    rollout: tuple[tuple[str, Any], ...] = ()
    timeout: float | None = None
    """Seconds one call of the function may take (marker ``timeout=``; else ``--reward-timeout``)."""
    probes: tuple[tuple[str, str | None], ...] = ()
    """Reward-hacking probes to run: (name, rule text or None for the probe's own rule), in declared order."""
    direction: tuple[tuple[str, str], ...] = ()
    """(feature, ``+`` or ``-``): the way the score must move as the feature grows, checked by probes."""
    reference: Any = None
    """A second reward function that scores every sample too (``reference=``: the function, resolved from a
    built-in's name); its disagreements with this one are the ``reference`` probe's."""
    reference_tolerance: float = 0.0
    """Scores further apart than this disagree."""
    agreement: float | None = None
    """The least share of samples the two functions must score alike (judged on the Wilson score interval's lower
    edge when ``confidence=`` is set)."""

    @property
    def all_probes(self) -> tuple[tuple[str, str | None], ...]:
        """:attr:`probes` and the probes that check :attr:`direction` (those last, with their rules)."""
        out = dict(self.probes)
        for feature, sign in self.direction:
            out.update(direction_probes(feature, sign))
        if self.reference is not None:
            out.setdefault("reference", None)
        return tuple(out.items())
    sample_fields: tuple[tuple[str, str], ...] | None = None
    """The marker's field mapping for dataset samples files, (target, dotted column path); None: the ini's."""

    @property
    def rollout_map(self) -> dict[str, Any]:
        return dict(self.rollout)

    def merged(self, values: Mapping[str, Any], source: str) -> Marker:
        """This marker with ``values`` (from :func:`validate_marker`) laid over it, key by key."""
        own = {key: value for key, value in values.items() if key in dict(SETTINGS_HELP)}
        gates = {key: value for key, value in values.items() if key not in own}
        return replace(self, gates=self.gates.merged(gates, source), **own)

    def to_dict(self) -> dict[str, Any]:
        out = self.gates.to_dict()
        if self.samples:
            out["samples"] = list(self.samples)
        if self.rollout:
            out["rollout"] = dict(self.rollout)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if self.probes:
            out["probes"] = dict(self.probes)
        if self.direction:
            out["direction"] = dict(self.direction)
        if self.reference is not None:
            out["reference"] = reference_name(self.reference)
            out["reference_tolerance"] = self.reference_tolerance
            if self.agreement is not None:
                out["agreement"] = self.agreement
        return out


# --- validation --------------------------------------------------------------------------------------------


def _fail(where: str, message: str) -> GateError:
    return GateError(f"{where}: {message}")


def _number(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(where, f"{key} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise _fail(where, f"{key} must be finite, got {value!r}")
    return float(value)


def _unit(value: Any, key: str, where: str, *, open_interval: bool = False) -> float:
    x = _number(value, key, where)
    if open_interval and not 0.0 < x < 1.0:
        raise _fail(where, f"{key} must be in (0, 1), got {x:g}")
    if not 0.0 <= x <= 1.0:
        raise _fail(where, f"{key} must be in [0, 1], got {x:g}")
    return x


def _quantiles(value: Any, key: str, where: str) -> tuple[tuple[float, float], ...]:
    if not isinstance(value, Mapping) or not value:
        raise _fail(where, f"{key} must be a non-empty dict {{q: bound}}, e.g. {{0.1: 0.3}}, got {value!r}")
    out = []
    for q, bound in value.items():
        if isinstance(q, str):
            try:
                q = float(q)
            except ValueError:
                raise _fail(where, f"{key} key {q!r} is not a number") from None
        qf = _unit(q, f"{key} key", where, open_interval=True)
        out.append((qf, _number(bound, f"{key}[{qf:g}]", where)))
    return tuple(sorted(out))


def _subsets(value: Any, key: str, where: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(value, Mapping) or not value:
        raise _fail(
            where, f"{key} must be a non-empty dict {{subset: rate}}, e.g. {{'safety': 0.9}}, got {value!r}"
        )
    out = []
    for name, bound in value.items():
        if not isinstance(name, str) or not name.strip():
            raise _fail(where, f"{key} keys are subset names (non-empty strings), got {name!r}")
        out.append((name, _unit(bound, f"{key}[{name!r}]", where)))
    return tuple(sorted(out))


def _suggest(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_keys(keys: Any, allowed: tuple[str, ...], where: str, what: str) -> None:
    for key in keys:
        if key not in allowed:
            raise _fail(
                where, f"unknown {what} {key!r}{_suggest(str(key), allowed)}; allowed: {', '.join(allowed)}"
            )


def _metric_gates(name: str, spec: Any, where: str) -> MetricGates:
    mwhere = f"{where} metrics[{name!r}]"
    if not isinstance(spec, Mapping):
        raise _fail(mwhere, f"must be a dict of bounds like {{'mean': 0.6}}, got {spec!r}")
    kinds = _kinds(per_metric=True)
    _check_keys(spec, tuple(kind.key for kind in kinds), mwhere, "key")
    gates = MetricGates(
        **{kind.key: kind.parse(spec[kind.key], mwhere) for kind in kinds if kind.key in spec}
    )
    for kind, _ in gates.declared():
        if kind.on_passes and gates.threshold is None:
            raise _fail(mwhere, f"{kind.key} needs a threshold for this metric (what counts as a pass)")
    return gates


def _rollout(value: Any, where: str) -> tuple[tuple[str, Any], ...]:
    if not isinstance(value, Mapping):
        raise _fail(where, f"rollout must be a dict like {{'n': 4, 'temperature': 0.7}}, got {value!r}")
    _check_keys(value, ROLLOUT_KEYS, f"{where} rollout", "key")
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key in ("n", "max_new_tokens", "top_k", "seed"):
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if key == "seed" else 1):
                raise _fail(where, f"rollout {key} must be a positive integer, got {v!r}")
        elif key in ("temperature", "top_p"):
            v = _number(v, f"rollout {key}", where)
            if v < 0 or (key == "top_p" and not 0 < v <= 1):
                raise _fail(where, f"rollout {key} out of range: {v:g}")
        elif key == "stop":
            if isinstance(v, str):
                v = (v,)
            if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) and s for s in v):
                raise _fail(where, f"rollout stop must be a string or a list of strings, got {v!r}")
            v = tuple(v)
        out[key] = v
    return tuple(sorted(out.items()))


def _probes(value: Any, where: str) -> tuple[tuple[str, str | None], ...]:
    """``"default"``, a list of names, or a dict name -> rule (None: the probe's own), as (name, rule) pairs in
    declared order, ``"default"`` expanded; rules parsed (and written the one way)."""
    usage = (
        'probes must be "default", a list of probe names or a dict {probe: rule}, e.g. probes="default", '
        'probes=["default", "case"], probes={"stuffing": "not pass", "repeat": "<= original"}'
    )
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)):
        pairs = [(name, None) for name in value]
    else:
        raise _fail(where, f"{usage}; got {value!r}")
    if not pairs:
        raise _fail(where, f"{usage}; got an empty {type(value).__name__}")
    out: dict[str, str | None] = {}
    for name, rule in pairs:
        if not isinstance(name, str) or not name:
            raise _fail(where, f"probe names must be non-empty strings, got {name!r}")
        if name in PROBE_GROUPS:
            if rule is not None:
                raise _fail(
                    where, f'"{name}" takes no rule (a group of probes: they keep their own), got {rule!r}'
                )
            for member in PROBE_GROUPS[name]:
                out.setdefault(member, None)
            continue
        if rule is not None:
            try:
                rule = parse_rule(rule).text
            except GateError as exc:
                raise _fail(where, f"probes[{name!r}]: {exc}") from None
        out[name] = rule
    return tuple(out.items())


def _direction(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``{feature: "+" or "-"}`` as (feature, sign) pairs, the features those probes can vary."""
    usage = f'direction must be a dict {{feature: "+" or "-"}}, e.g. direction={{"length": "-"}}; got {value!r}'
    if not isinstance(value, Mapping) or not value:
        raise _fail(where, usage)
    out = []
    for feature, sign in value.items():
        if feature not in DIRECTION_FEATURES:
            raise _fail(
                where,
                f"direction: unknown feature {feature!r}{_suggest(str(feature), tuple(DIRECTION_FEATURES))}; "
                f"features: {', '.join(DIRECTION_FEATURES)}",
            )
        if sign not in ("+", "-"):
            raise _fail(where, f'direction[{feature!r}] must be "+" (the score grows with it) or "-", got {sign!r}')
        out.append((feature, sign))
    return tuple(out)


def reference_name(fn: Any) -> str:
    """How reports name a reference function: ``module.qualname``."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def _reference(value: Any, where: str) -> Any:
    """A reward function: the value itself when it is a ``@reward_function``, else the built-in it names."""
    if isinstance(value, str):
        from .. import rewards

        if value not in rewards.BUILTIN_REWARDS:
            raise _fail(
                where,
                f"reference: no built-in reward {value!r}{_suggest(value, rewards.BUILTIN_REWARDS)}; give a "
                "@reward_function (e.g. your previous version, imported) or one of: "
                + ", ".join(rewards.BUILTIN_REWARDS),
            )
        return getattr(rewards, value)
    if callable(value) and hasattr(value, "__reward_spec__"):
        return value
    raise _fail(
        where,
        f"reference must be a @reward_function or a built-in reward's name such as 'math_reward', got {value!r}",
    )


def _sample_fields(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``{target: "column.path"}`` (or the ini form, ``"target=column.path ..."``) as (target, path) pairs,
    checked as ini ``reward_sample_fields`` is."""
    usage = (
        'sample_fields must be a dict {target: "column" or "column.field"}, e.g. sample_fields={"messages": '
        '"prompt", "ground_truth": "reward_model.ground_truth"}'
    )
    if isinstance(value, str):
        entries = value.split()
    elif isinstance(value, Mapping):
        entries = []
        for target, path in value.items():
            if not isinstance(target, str) or not isinstance(path, str):
                raise _fail(where, f"{usage}; got {target!r}: {path!r}")
            if "=" in target or any(ch.isspace() for ch in target + path):
                raise _fail(where, f"sample_fields: {target!r}: {path!r} is not a target and a column path")
            entries.append(f"{target}={path}")
    else:
        raise _fail(where, f"{usage}; got {type(value).__name__} {value!r}")
    try:
        return tuple(parse_fields(entries, f"{where}: sample_fields").items())
    except ValueError as exc:
        raise GateError(str(exc)) from None


def validate_marker(args: tuple[Any, ...], kwargs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate the arguments of one ``reward`` marker (or a defaults mapping); returns the values by key, for
    :meth:`Marker.merged` (or, gate keys only, :meth:`Gates.merged`)."""
    if args:
        raise _fail(where, f"takes keyword arguments only, got positional {args!r}")
    _check_keys(kwargs, _marker_keys(), where, "key")
    if ("agreement" in kwargs or "reference_tolerance" in kwargs) and "reference" not in kwargs:
        raise _fail(where, "agreement= and reference_tolerance= need reference= (the function to agree with)")
    kinds = {kind.key: kind for kind in GATE_KINDS}
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in kinds:
            out[key] = kinds[key].parse(value, where)
        elif key == "confidence":
            out[key] = _unit(value, key, where, open_interval=True)
        elif key == "metrics":
            if not isinstance(value, Mapping):
                raise _fail(where, f"metrics must be a dict {{name: {{bounds}}}}, got {value!r}")
            out[key] = tuple(
                sorted((str(n), _metric_gates(str(n), spec, where)) for n, spec in value.items())
            )
        elif key == "samples":
            items = [value] if isinstance(value, str) or hasattr(value, "__fspath__") else value
            if not isinstance(items, (list, tuple)) or not items:
                raise _fail(where, f"samples must be a path or a list of paths, got {value!r}")
            paths = []
            for item in items:
                if not isinstance(item, str) and not hasattr(item, "__fspath__"):
                    raise _fail(where, f"samples entries must be paths, got {item!r}")
                paths.append(str(item))
            out[key] = tuple(paths)
        elif key == "rollout":
            out[key] = _rollout(value, where)
        elif key == "timeout":
            seconds = _number(value, key, where)
            if not seconds > 0:
                raise _fail(where, f"timeout must be > 0 seconds, got {seconds:g}")
            out[key] = seconds
        elif key == "probes":
            out[key] = _probes(value, where)
        elif key == "sample_fields":
            out[key] = _sample_fields(value, where)
        elif key == "direction":
            out[key] = _direction(value, where)
        elif key == "reference":
            out[key] = _reference(value, where)
        elif key == "reference_tolerance":
            tol = _number(value, key, where)
            if tol < 0:
                raise _fail(where, f"reference_tolerance must be >= 0, got {tol:g}")
            out[key] = tol
        elif key == "agreement":
            out[key] = _unit(value, key, where)
    return out


def parse_quantile_text(text: str, where: str) -> dict[float, float]:
    """Parse ``"0.1:0.3, 0.5:0.6"`` (command line / ini form of ``quantile``)."""
    out: dict[float, float] = {}
    for part in text.replace(",", " ").split():
        q, sep, bound = part.partition(":")
        if not sep:
            raise _fail(where, f"expected Q:BOUND pairs like 0.1:0.3, got {part!r}")
        try:
            out[float(q)] = float(bound)
        except ValueError:
            raise _fail(where, f"expected numbers in {part!r}") from None
    if not out:
        raise _fail(where, "expected at least one Q:BOUND pair")
    return out


if __name__ == "__main__":  # pragma: no cover
    print(markdown_table())
