"""The ``reward`` marker: parsing, validation, defaults, and the verdicts it implies.

``@pytest.mark.reward(threshold=0.5, mean=0.7, pass_rate=0.9, quantile={0.1: 0.3}, confidence=0.95,
metrics={"relevance": {"mean": 0.6}}, samples="data/x.jsonl", rollout={...})``

* ``threshold``: per-sample pass score. A sample below it fails, unless a ``pass_rate`` gate is declared: then
  the miss is tolerated per sample ("below") and the aggregate gate decides.
* ``mean``, ``pass_rate``, ``quantile``: aggregate gates per function × samples file, evaluated once per session
  (on the xdist controller); ``max_mean``: an upper bound on the mean, for lower-is-better scores (perplexity).
* ``confidence``: the mean and pass-rate gates must hold for the *lower bound* of the two-sided ``confidence``
  interval (seeded percentile bootstrap for the mean, Wilson score for the rate), not the point estimate.
* ``metrics``: the same keys (``threshold``, ``mean``, ``pass_rate``, ``quantile``) per named metric.
* ``sample_fields``: which column of a dataset samples file (Parquet, Arrow) is what for this function,
  ``{target: "column.field"}`` as ini ``reward_sample_fields`` writes ``target=column.field``; it replaces the ini
  mapping for this function (both lie over the preset the file's columns select).
* ``probes``: reward-hacking probes (:mod:`pytest_reward.probes`): ``"default"``, a list of probe names (``"default"``
  among them adds the default set), or a dict ``{probe: rule}`` (``None``: the probe's own rule). The rules are
  checked here; the names when the function's items are built (custom probes may come from a hook).

Settings resolve key by key: marker > command line > ini. Validation errors name where the bad value came from.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..data.sources import parse_fields
from ..errors import GateError
from ..probes import DEFAULT_PROBES, parse_rule

__all__ = [
    "GATE_KEYS",
    "MARKER_KEYS",
    "GateError",
    "Gates",
    "MetricGates",
    "parse_quantile_text",
    "validate_marker",
]

GATE_KEYS = ("threshold", "mean", "max_mean", "pass_rate", "quantile", "confidence")
MARKER_KEYS = (*GATE_KEYS, "metrics", "samples", "rollout", "timeout", "probes", "sample_fields")
METRIC_KEYS = ("threshold", "mean", "pass_rate", "quantile")
ROLLOUT_KEYS = ("n", "temperature", "top_p", "top_k", "max_new_tokens", "seed", "stop")


@dataclass(frozen=True)
class MetricGates:
    threshold: float | None = None
    mean: float | None = None
    pass_rate: float | None = None
    quantile: tuple[tuple[float, float], ...] = ()

    @property
    def has_aggregate(self) -> bool:
        return self.mean is not None or self.pass_rate is not None or bool(self.quantile)


@dataclass(frozen=True)
class Gates:
    """Resolved settings of one reward function (marker over CLI over ini)."""

    threshold: float | None = None
    mean: float | None = None
    max_mean: float | None = None
    """Upper bound on the mean, for lower-is-better scores (perplexity)."""
    pass_rate: float | None = None
    quantile: tuple[tuple[float, float], ...] = ()
    confidence: float | None = None
    metrics: tuple[tuple[str, MetricGates], ...] = ()
    samples: tuple[str, ...] = ()
    rollout: tuple[tuple[str, Any], ...] = ()
    timeout: float | None = None
    """Seconds one call of the function may take (marker ``timeout=``; else ``--reward-timeout``)."""
    probes: tuple[tuple[str, str | None], ...] = ()
    """Reward-hacking probes to run: (name, rule text or None for the probe's own rule), in declared order."""
    sample_fields: tuple[tuple[str, str], ...] | None = None
    """The marker's field mapping for dataset samples files, (target, dotted column path); None: the ini's."""
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def metric_map(self) -> dict[str, MetricGates]:
        return dict(self.metrics)

    @property
    def rollout_map(self) -> dict[str, Any]:
        return dict(self.rollout)

    def source(self, key: str) -> str:
        return dict(self.sources).get(key, "default")

    @property
    def has_aggregate(self) -> bool:
        return (
            self.mean is not None
            or self.max_mean is not None
            or self.pass_rate is not None
            or bool(self.quantile)
            or any(m.has_aggregate for _, m in self.metrics)
        )

    def merged(self, values: Mapping[str, Any], source: str) -> Gates:
        """These gates with ``values`` (already validated) laid over them, key by key."""
        if not values:
            return self
        sources = dict(self.sources)
        sources.update({k: source for k in values})
        return replace(self, **dict(values), sources=tuple(sources.items()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("threshold", "mean", "max_mean", "pass_rate", "confidence"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.quantile:
            out["quantile"] = {str(q): b for q, b in self.quantile}
        if self.metrics:
            out["metrics"] = {
                name: {
                    k: (dict((str(q), b) for q, b in v) if k == "quantile" else v)
                    for k in METRIC_KEYS
                    if (v := getattr(m, k)) not in (None, ())
                }
                for name, m in self.metrics
            }
        if self.samples:
            out["samples"] = list(self.samples)
        if self.rollout:
            out["rollout"] = dict(self.rollout)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if self.probes:
            out["probes"] = dict(self.probes)
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
    _check_keys(spec, METRIC_KEYS, mwhere, "key")
    gates = MetricGates(
        threshold=_number(spec["threshold"], "threshold", mwhere) if "threshold" in spec else None,
        mean=_number(spec["mean"], "mean", mwhere) if "mean" in spec else None,
        pass_rate=_unit(spec["pass_rate"], "pass_rate", mwhere) if "pass_rate" in spec else None,
        quantile=_quantiles(spec["quantile"], "quantile", mwhere) if "quantile" in spec else (),
    )
    if gates.pass_rate is not None and gates.threshold is None:
        raise _fail(mwhere, "pass_rate needs a threshold for this metric (what counts as a pass)")
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
        if name == "default":
            if rule is not None:
                raise _fail(
                    where, f'"default" takes no rule (the default probes keep their own), got {rule!r}'
                )
            for default in DEFAULT_PROBES:
                out.setdefault(default, None)
            continue
        if rule is not None:
            try:
                rule = parse_rule(rule).text
            except GateError as exc:
                raise _fail(where, f"probes[{name!r}]: {exc}") from None
        out[name] = rule
    return tuple(out.items())


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
    """Validate the arguments of one ``reward`` marker (or a defaults mapping); returns ``Gates`` field values."""
    if args:
        raise _fail(where, f"takes keyword arguments only, got positional {args!r}")
    _check_keys(kwargs, MARKER_KEYS, where, "key")
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in ("threshold", "mean", "max_mean"):
            out[key] = _number(value, key, where)
        elif key == "pass_rate":
            out[key] = _unit(value, key, where)
        elif key == "confidence":
            out[key] = _unit(value, key, where, open_interval=True)
        elif key == "quantile":
            out[key] = _quantiles(value, key, where)
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
