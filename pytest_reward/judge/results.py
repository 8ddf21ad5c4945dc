"""Per-sample outcomes and per-(function × file) aggregates.

Data flows one way: a reward function's ``EvaluateResult`` (or its exception) → ``judge`` → ``SampleOutcome``
(plain data, travels through xdist reports) → ``GroupAccumulator`` → ``Summary`` → ``evaluate_gates``.

Errors count as failures in every aggregate: an errored sample never passes, and in means and quantiles it counts
as the lowest of 0 and the lowest score observed in its group (so an error can never raise an aggregate).
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from .gates import GateKind, Gates, MetricGates, gate_kind
from .preference import PairStats

if TYPE_CHECKING:
    from ..data.samples import Expect
    from ..reward.models import EvaluateResult
    from .stats import Interval

__all__ = [
    "TEXT_KEPT",
    "GateResult",
    "GroupAccumulator",
    "SampleOutcome",
    "Summary",
    "bound_texts",
    "declares_gates",
    "evaluate_gates",
    "float_json",
    "judge",
    "outcome_fields",
    "row_json",
]

PASS, BELOW, FAIL = "pass", "below", "fail"


@dataclass(slots=True)
class SampleOutcome:
    """The verdict on one sample for one reward function. Only builtin types: it crosses process boundaries."""

    function: str
    file: str
    line: int
    sample_id: str
    key: str
    verdict: str
    score: float | None = None
    is_score_valid: bool = True
    reason: str | None = None
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    failures: list[str] = field(default_factory=list)
    below: list[str] = field(default_factory=list)
    duration: float = 0.0
    user: str | None = None
    response: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    response_hash: str | None = None
    """Short hash of the sample's answer (``Sample.response_hash``): stored runs count the changed responses."""
    ground_truth: str | None = None
    """The sample's ground truth as reports show it (``chat.truth_excerpt``), beside the response."""
    sample: Any = field(default=None, repr=False, compare=False)
    """The sample itself, only while a file-granularity item decides whether to keep this outcome."""

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def errored(self) -> bool:
        return self.score is None

    def row(self, *, text: bool = True) -> dict[str, Any]:
        """One line of ``results.jsonl`` (``text=False``: without the conversation excerpts, which the report
        pages show for the samples they list but results.jsonl, one line per sample, leaves to the samples file)."""
        row: dict[str, Any] = {
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "id": self.sample_id,
            "key": self.key,
            "score": self.score,
            "metrics": {name: m["score"] for name, m in self.metrics.items()},
            "reason": self.reason,
            "verdict": self.verdict,
            "error": self.error,
            "failures": self.failures,
            "duration": round(self.duration, 6),
        }
        if text:
            row["user"] = self.user
            row["response"] = self.response
            row["ground_truth"] = self.ground_truth
        if "runs" in self.extra:
            row["runs"] = self.extra["runs"]
            row["spread"] = self.extra.get("spread")
        for key in ("responses", "response_scores", "target", "pair"):
            if key in self.extra:
                row[key] = self.extra[key]
        for key, value in self.extra.items():
            if key.startswith("pass@") or key == "best_of_n":
                row[key] = value
        return row


#: Characters of a reason, error or failure line that an outcome keeps once its full row is written (results.jsonl
#: has the whole text): what reports show, and what stays in memory for each of thousands of items.
TEXT_KEPT = 2000


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters; the whole text is in results.jsonl)"


def bound_texts(outcome: SampleOutcome, limit: int = TEXT_KEPT) -> SampleOutcome:
    """Cut the outcome's free texts (reason, error, failures, metric reasons) to ``limit`` characters, in place."""
    outcome.reason = _cut(outcome.reason, limit)
    outcome.error = _cut(outcome.error, limit)
    if outcome.failures and any(len(f) > limit for f in outcome.failures):
        outcome.failures = [_cut(f, limit) or "" for f in outcome.failures]
    for metric in outcome.metrics.values():
        reason = metric.get("reason")
        if reason is not None and len(reason) > limit:
            metric["reason"] = _cut(reason, limit)
    return outcome


def outcome_fields() -> tuple[str, ...]:
    """The fields of a ``SampleOutcome`` that leave the process (all but the transient ``sample``)."""
    return tuple(f.name for f in fields(SampleOutcome) if f.name != "sample")


_ROW_GENERIC = json.JSONEncoder(ensure_ascii=False).encode
_json_str = json.encoder.encode_basestring  # type: ignore[attr-defined]


class _Unusual(Exception):
    """A value the fast row encoder leaves to the generic one."""


def _jnum(value: Any) -> str:
    kind = type(value)
    if kind is float and value == value and value not in (math.inf, -math.inf):
        return repr(value)  # what json writes for a finite float
    if kind is int:
        return repr(value)
    if value is None:
        return "null"
    raise _Unusual


def _jstr(value: Any) -> str:
    if type(value) is str:
        return _json_str(value)
    if value is None:
        return "null"
    raise _Unusual


_PREFIXES: dict[tuple[str, str], str] = {}
_NAMES: dict[str, str] = {}
_FLOATS: dict[float, str] = {}
"""JSON of finite floats seen before: scores and microsecond durations repeat, and ``repr`` of a float is the
dearest step of a row. Zero is never cached (0.0 and -0.0 are equal keys but different JSON)."""
_INF = math.inf


def float_json(value: float) -> str:
    """JSON of a finite float (the caller checked ``type(value) is float`` and finiteness)."""
    text = _FLOATS.get(value)
    if text is None:
        text = repr(value)
        if value and len(_FLOATS) < 65536:
            _FLOATS[value] = text
    return text


def _metric_json(metrics: dict[str, dict[str, Any]]) -> str:
    parts = []
    for name, value in metrics.items():
        head = _NAMES.get(name)
        if head is None:
            head = f"{_jstr(name)}: "
            if len(_NAMES) < 4096:
                _NAMES[name] = head
        score = value["score"]
        parts.append(
            head + (float_json(score) if type(score) is float and -_INF < score < _INF else _jnum(score))
        )
    return ", ".join(parts)


def row_json(outcome: SampleOutcome) -> str:
    """``json.dumps(outcome.row(text=False), ensure_ascii=False)``, without the dict and the generic encoder's
    per-call cost for the usual outcome (results.jsonl has one line per sample). Property-tested equal."""
    if outcome.extra:
        return _ROW_GENERIC(outcome.row(text=False))
    try:
        line, key, verdict = outcome.line, outcome.key, outcome.verdict
        prefix = _PREFIXES.get((outcome.function, outcome.file))
        if prefix is None:
            function, file = outcome.function, outcome.file
            prefix = f'{{"function": {_jstr(function)}, "file": {_jstr(file)}, "line": '
            if len(_PREFIXES) < 1024 and type(function) is str and type(file) is str:
                _PREFIXES[(function, file)] = prefix
        if type(line) is not int or type(key) is not str or type(verdict) is not str:
            raise _Unusual
        metrics = outcome.metrics
        m = _metric_json(metrics) if metrics else ""
        failures = outcome.failures
        f = ", ".join([_jstr(x) for x in failures]) if failures else ""
        sid, score, reason, error = outcome.sample_id, outcome.score, outcome.reason, outcome.error
        # The common types inline; anything else through the checked helpers (which may give up).
        sid_j = _json_str(sid) if type(sid) is str else _jstr(sid)
        score_j = float_json(score) if (type(score) is float and -_INF < score < _INF) else _jnum(score)
        reason_j = _json_str(reason) if type(reason) is str else _jstr(reason)
        error_j = "null" if error is None else _jstr(error)
        duration = outcome.duration
        if type(duration) is float and -_INF < duration < _INF:
            duration_j = float_json(round(duration, 6))
        else:
            duration_j = _jnum(duration)
        return (
            f'{prefix}{line}, "id": {sid_j}, "key": {_json_str(key)}, "score": {score_j}, "metrics": {{{m}}}, '
            f'"reason": {reason_j}, "verdict": {_json_str(verdict)}, "error": {error_j}, "failures": [{f}], '
            f'"duration": {duration_j}}}'
        )
    except _Unusual:
        return _ROW_GENERIC(outcome.row(text=False))


def _metric_scores(result: EvaluateResult) -> dict[str, dict[str, Any]]:
    return {
        name: {"score": float(m.score), "valid": bool(m.is_score_valid), "reason": m.reason}
        for name, m in result.metrics.items()
    }


def judge(
    result: EvaluateResult | None,
    gates: Gates,
    expect: Expect | None,
    *,
    error: str | None = None,
) -> tuple[str, float | None, dict[str, dict[str, Any]], list[str], list[str]]:
    """Per-sample verdict. Returns ``(verdict, score, metrics, failures, below)``.

    ``score`` is None when the sample errored (exception, invalid result, non-finite score, invalid flag).
    ``below`` lists threshold misses that an aggregate ``pass_rate`` gate tolerates.
    """
    if result is None:
        return FAIL, None, {}, [error or "no result"], []
    failures: list[str] = []
    below: list[str] = []
    metrics = _metric_scores(result) if result.metrics else {}
    score: float | None = float(result.score)
    if not math.isfinite(score):
        failures.append(f"score is {score!r}: a reward must be a finite number")
        score = None
    elif not result.is_score_valid:
        failures.append(
            "the result is marked is_score_valid=False" + (f": {result.reason}" if result.reason else "")
        )
        score = None
    if result.error:
        failures.append(f"the reward function reported an error: {result.error}")
        score = None
    if score is not None:
        if gates.threshold is not None and score < gates.threshold:
            msg = f"score {score:.4g} < threshold {gates.threshold:g}"
            (below if gates.tolerates_misses else failures).append(msg)
        if expect is not None and expect.score is not None:
            problem = expect.score.check(score)
            if problem:
                failures.append(f"{expect.score.label}: {problem}")
    for name, mg in gates.metrics:
        value = metrics.get(name)
        if value is None:
            if score is not None and (mg.threshold is not None or mg.has_aggregate):
                failures.append(f"metric {name!r} is missing from the result (it has gates)")
            continue
        if mg.threshold is not None and value["score"] < mg.threshold:
            msg = f"metric {name!r} {value['score']:.4g} < threshold {mg.threshold:g}"
            (below if mg.tolerates_misses else failures).append(msg)
    if expect is not None:
        for name, bound in expect.metrics:
            value = metrics.get(name)
            if value is None:
                failures.append(f"expect metric {name!r}: the result has no such metric")
            else:
                problem = bound.check(value["score"])
                if problem:
                    failures.append(f"expect metric {name!r}: {problem}")
    verdict = FAIL if failures else (BELOW if below else PASS)
    return verdict, score, metrics, failures, below


# --- aggregation -------------------------------------------------------------------------------------------


@dataclass
class GateResult:
    """One aggregate gate, evaluated (or not, with the reason in ``note``)."""

    target: str
    gate: str
    bound: float
    value: float | None = None
    compared: float | None = None
    interval: dict[str, Any] | None = None
    passed: bool = True
    evaluated: bool = True
    note: str = ""
    upper: bool = False
    """True for an upper bound (a kind ``AT_MOST``): the value must stay at or below ``bound``."""

    def describe(self) -> str:
        name = _label(self.gate)
        what = name if self.target == "score" else f"{self.target} {name}"
        want = "≤" if self.upper else "≥"
        if not self.evaluated:
            return f"{what} {want} {self.bound:g} not evaluated: {self.note}"
        if self.value is None:
            return f"{what} {want} {self.bound:g} failed: {self.note}"
        text = f"{what} {self.value:.4g}"
        if self.interval is not None:
            ci = self.interval
            side, edge = ("upper", ci["high"]) if self.upper else ("lower", ci["low"])
            text += f" (CI {side} bound {edge:.4g}, {ci['confidence']:.0%} {ci['method']})"
        if self.passed:
            return f"{text} {want} {self.bound:g}"
        return f"{text} {'>' if self.upper else '<'} {self.bound:g}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MetricSummary:
    n: int
    mean: float
    min: float
    pass_rate: float | None = None
    quantiles: dict[str, float] = field(default_factory=dict)
    mean_ci: dict[str, Any] | None = None
    pass_ci: dict[str, Any] | None = None


@dataclass
class Summary:
    """Aggregates of one function × samples file. Only builtin types (crosses xdist)."""

    function: str
    file: str
    n: int
    n_errors: int
    n_pass: int
    n_below: int
    n_fail: int
    mean: float | None
    min: float | None
    max: float | None
    p10: float | None
    pass_rate: float | None
    mean_ci: dict[str, Any] | None
    quantiles: dict[str, float] = field(default_factory=dict)
    gate_mean_ci: dict[str, Any] | None = None
    gate_pass_ci: dict[str, Any] | None = None
    metrics: dict[str, MetricSummary] = field(default_factory=dict)
    expected: int | None = None
    histogram: dict[str, Any] | None = None
    n_flaky: int = 0
    n_replayed: int = 0
    """Samples with a recorded score checked by ``--reward-replay-tolerance``."""
    n_replay_differ: int = 0
    """Of those, the samples whose reward differs from the recorded score by more than the tolerance."""
    rollout: dict[str, float] | None = None
    """Prompt-only samples: responses per prompt and the mean pass@1, pass@n and best-of-n over samples."""
    preference: dict[str, Any] | None = None
    """A preference file's (:mod:`pytest_reward.judge.preference`): pairs, accuracy with its Wilson intervals, and
    each subset's; None for a samples file. Its score statistics (mean, quantiles, histogram) are the margins."""

    @property
    def complete(self) -> bool:
        return self.expected is None or self.n >= self.expected

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        data = dict(data)
        data["metrics"] = {k: MetricSummary(**v) for k, v in data.get("metrics", {}).items()}
        return cls(**data)


class GroupAccumulator:
    """Streams outcomes of one function × file; keeps only compact arrays (8 bytes per sample and metric)."""

    FLAKY_KEEP = 100

    def __init__(self, function: str, file: str, gates: Gates, *, flaky_spread: float | None = None) -> None:
        self.function = function
        self.file = file
        self.gates = gates
        self.flaky_spread = flaky_spread
        self.n_flaky = 0
        self.n_replayed = 0
        self.n_replay_differ = 0
        self.rollout_sums: dict[str, float] = {}
        self.rollout_counts: dict[int, int] = {}
        self.flaky: list[SampleOutcome] = []
        """Samples whose per-run spread (``--reward-runs``) exceeds ``flaky_spread`` (the first 100)."""
        self.scores = array("d")
        self.n = 0
        self.n_errors = 0
        self.n_pass = 0
        self.n_below = 0
        self.n_fail = 0
        self._gated_metrics = {name for name, _ in gates.metrics}
        self._metric_gates = gates.metric_map
        self.metric_values: dict[str, array] = {}
        self.metric_errors: dict[str, int] = {}
        self.metric_pass: dict[str, int] = {}
        self.pairs: PairStats | None = None
        """A preference file's pairs (None until one is met)."""

    def add(self, outcome: SampleOutcome) -> None:
        self.n += 1
        extra = outcome.extra
        if extra:  # rollouts (pass@k), repeated runs (spread), preference pairs
            pair = extra.get("pair")
            if pair is not None:
                if self.pairs is None:
                    self.pairs = PairStats()
                self.pairs.add(pair)
            if "pass@1" in extra:
                n = extra["n"]
                for key in dict.fromkeys(("pass@1", f"pass@{n}", "best_of_n")):  # n = 1: pass@1 once
                    self.rollout_sums[key] = self.rollout_sums.get(key, 0.0) + float(extra[key])
                self.rollout_counts[n] = self.rollout_counts.get(n, 0) + 1
            if self.flaky_spread is not None and extra.get("spread", 0.0) > self.flaky_spread:
                self.n_flaky += 1
                if len(self.flaky) < self.FLAKY_KEEP:
                    self.flaky.append(outcome)
            if "replay_differs" in extra:
                self.n_replayed += 1
                self.n_replay_differ += bool(extra["replay_differs"])
        if outcome.verdict == PASS:
            self.n_pass += 1
        elif outcome.verdict == BELOW:
            self.n_below += 1
        else:
            self.n_fail += 1
        if outcome.score is None:
            self.n_errors += 1
            for name in self._gated_metrics:
                self.metric_errors[name] = self.metric_errors.get(name, 0) + 1
            return
        self.scores.append(outcome.score)
        gates = self._metric_gates
        for name, value in outcome.metrics.items():
            self.metric_values.setdefault(name, array("d")).append(value["score"])
            mg = gates.get(name)
            if mg is not None and mg.threshold is not None and value["score"] >= mg.threshold:
                self.metric_pass[name] = self.metric_pass.get(name, 0) + 1
        if self._gated_metrics:
            for name in self._gated_metrics - outcome.metrics.keys():
                self.metric_errors[name] = self.metric_errors.get(name, 0) + 1

    def add_pass(self, score: float) -> None:
        """:meth:`add` of an outcome that passed with ``score`` (not None), no metrics and no extras, without the
        outcome (a file item folds most of its samples this way)."""
        self.n += 1
        self.n_pass += 1
        self.scores.append(score)
        for name in self._gated_metrics:
            self.metric_errors[name] = self.metric_errors.get(name, 0) + 1

    def add_right_pair(self, margin: float, subset: str | None, responses: int) -> None:
        """:meth:`add` of a right preference pair's outcome (every response scored, the chosen one strictly above
        every rejected one: a pass whose score is the ``margin``), without the outcome: ``subset`` the pair's,
        ``responses`` how many were scored."""
        self.n += 1
        self.n_pass += 1
        self.scores.append(margin)
        for name in self._gated_metrics:
            self.metric_errors[name] = self.metric_errors.get(name, 0) + 1
        pairs = self.pairs
        if pairs is None:
            pairs = self.pairs = PairStats()
        pairs.add_right(subset, responses > 2)

    def extend(self, outcomes: Iterable[SampleOutcome]) -> None:
        for outcome in outcomes:
            self.add(outcome)

    def summary(self, *, seed: int = 0, n_resamples: int = 2000, expected: int | None = None) -> Summary:
        import numpy as np

        from .stats import bootstrap_mean_ci, bootstrap_mean_cis, wilson_interval

        gates = self.gates
        conf = gates.confidence
        base = dict(
            function=self.function,
            file=self.file,
            n=self.n,
            n_errors=self.n_errors,
            n_pass=self.n_pass,
            n_below=self.n_below,
            n_fail=self.n_fail,
            expected=expected,
            n_flaky=self.n_flaky,
            n_replayed=self.n_replayed,
            n_replay_differ=self.n_replay_differ,
        )
        if self.n == 0:
            return Summary(
                **base, mean=None, min=None, max=None, p10=None, pass_rate=None, mean_ci=None, histogram=None
            )
        valid = np.frombuffer(self.scores, dtype=np.float64) if len(self.scores) else np.empty(0)
        fill = min(0.0, float(valid.min())) if valid.size else 0.0
        values = np.concatenate([valid, np.full(self.n_errors, fill)]) if self.n_errors else valid
        # Sorted, so that seeded intervals do not depend on the order results arrived in (xdist).
        values = np.sort(values)
        qs = sorted({0.1, *gates.levels()})
        quantiles = {f"{q:g}": float(v) for q, v in zip(qs, np.quantile(values, qs), strict=True)}

        def ci(vals: Any, level: float) -> dict[str, Any]:
            return _interval_dict(bootstrap_mean_ci(vals, level, n_resamples=n_resamples, seed=seed))

        # The table's 95 % interval and the gates' interval come from the same resamples.
        intervals = gates.intervals() if conf else set()
        levels = (0.95, conf) if "bootstrap" in intervals else (0.95,)
        score_cis = [
            _interval_dict(i) for i in bootstrap_mean_cis(values, levels, n_resamples=n_resamples, seed=seed)
        ]

        metrics: dict[str, MetricSummary] = {}
        for name in sorted(set(self.metric_values) | self._gated_metrics):
            mv = np.frombuffer(self.metric_values.get(name, array("d")), dtype=np.float64)
            errors = self.metric_errors.get(name, 0)
            if errors:
                mv = np.concatenate([mv, np.zeros(errors)])
            mv = np.sort(mv)
            if mv.size == 0:
                continue
            mg = gates.metric_map.get(name, MetricGates())
            mqs = sorted(mg.levels())
            m_intervals = mg.intervals() if conf else set()
            n_ok = self.metric_pass.get(name, 0)
            metrics[name] = MetricSummary(
                n=int(mv.size),
                mean=float(mv.mean()),
                min=float(mv.min()),
                pass_rate=(n_ok / mv.size) if mg.threshold is not None else None,
                quantiles={f"{q:g}": float(v) for q, v in zip(mqs, np.quantile(mv, mqs), strict=True)}
                if mqs
                else {},
                mean_ci=ci(mv, conf) if "bootstrap" in m_intervals else None,
                pass_ci=_interval_dict(wilson_interval(n_ok, int(mv.size), conf))
                if "wilson" in m_intervals
                else None,
            )
        return Summary(
            **base,
            mean=float(values.mean()),
            min=float(values.min()),
            max=float(values.max()),
            p10=quantiles["0.1"],
            pass_rate=self.n_pass / self.n,
            mean_ci=score_cis[0],
            quantiles=quantiles,
            gate_mean_ci=score_cis[1] if len(score_cis) > 1 else None,
            gate_pass_ci=_interval_dict(wilson_interval(self.n_pass, self.n, conf))
            if "wilson" in intervals
            else None,
            metrics=metrics,
            histogram=histogram(valid, self.n_errors),
            rollout=self._rollout_summary(),
            preference=self._preference(valid),
        )

    def _preference(self, margins: Any) -> dict[str, Any] | None:
        """A preference file's accuracy (:class:`PairStats`) and its margins' distribution (the pairs' scores)."""
        if self.pairs is None:
            return None
        import numpy as np

        gates = self.gates
        conf = gates.confidence if "wilson" in gates.intervals(pairs=True) else None
        out = self.pairs.summary(conf)
        levels = (0.1, 0.25, 0.5, 0.75, 0.9)
        out["margin"] = (
            {
                "n": int(margins.size),
                "mean": float(margins.mean()),
                "min": float(margins.min()),
                "max": float(margins.max()),
                "quantiles": {
                    f"{q:g}": float(v) for q, v in zip(levels, np.quantile(margins, levels), strict=True)
                },
                "n_negative": int((margins < 0).sum()),
                "n_zero": int((margins == 0).sum()),
            }
            if margins.size
            else None
        )
        return out

    def _rollout_summary(self) -> dict[str, float] | None:
        if not self.rollout_counts:
            return None
        total = sum(self.rollout_counts.values())
        out: dict[str, float] = {"n": float(max(self.rollout_counts, key=self.rollout_counts.__getitem__))}
        out.update({key: value / total for key, value in sorted(self.rollout_sums.items())})
        return out


def histogram(valid: Any, errors: int = 0, bins: int = 10) -> dict[str, Any]:
    """Counts of ``valid`` scores in ``bins`` equal bins — over [0, 1] when every score lies there, else over
    [min, max] — plus the number of errored samples. The counts and ``errors`` sum to the number of samples."""
    import numpy as np

    arr = np.asarray(valid, dtype=np.float64)
    lo, hi = 0.0, 1.0
    if arr.size and (float(arr.min()) < 0.0 or float(arr.max()) > 1.0):
        lo, hi = float(arr.min()), float(arr.max())
        if hi == lo:
            hi = lo + 1.0
    counts, edges = np.histogram(arr, bins=bins, range=(lo, hi))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts], "errors": int(errors)}


def _interval_dict(interval: Interval) -> dict[str, Any]:
    return interval.to_dict()


_INTERVAL_FIELDS = {"bootstrap": ("gate_mean_ci", "mean_ci"), "wilson": ("gate_pass_ci", "pass_ci")}
"""Where a summary keeps each interval method's interval at the gates' confidence: (``Summary`` field,
``MetricSummary`` field)."""


def _label(gate: str) -> str:
    """What a report calls the statistic the gate ``gate`` bounds (``mean`` for ``max_mean``, ``mean margin`` for
    ``mean_margin``); the gate's own name when no kind of the table has it (a stored run's)."""
    try:
        kind = gate_kind(gate)
    except KeyError:
        return gate
    level = gate.partition("(")[2][:-1]
    if kind.levels:
        return kind.label(float(level))
    if kind.value == "subsets":
        return kind.label(level)
    return "mean margin" if kind.key == "mean_margin" else kind.label()


def _declared(
    gates: Gates, pairs: bool = False
) -> list[tuple[str | None, GateKind, str, float | str | None, float]]:
    """Every aggregate gate of ``gates`` for a samples file (``pairs``: for a preference file): (metric name or
    None for the score, kind, gate name, level, bound), the score's first, each in table order."""
    out = []
    for metric, bounds in ((None, gates), *gates.metrics):
        for kind, bound in bounds.declared():
            if kind.aggregate and kind.pairs == pairs:
                out.extend((metric, kind, name, level, b) for name, level, b in kind.gates(bound))
    return out


def _target(metric: str | None) -> str:
    return "score" if metric is None else f"metric {metric!r}"


def _judged(
    target: str, kind: GateKind, name: str, bound: float, value: float | None, interval: dict[str, Any] | None
) -> GateResult:
    """The gate ``name`` of ``kind`` judged on ``value`` (the edge of ``interval`` on the gate's side, when given)."""
    upper = kind.upper
    if value is None:
        return GateResult(target, name, bound, passed=False, note="no samples scored", upper=upper)
    if upper:
        compared = interval["high"] if interval is not None else value
        return GateResult(
            target, name, bound, value, compared, interval, passed=compared <= bound, upper=True
        )
    compared = interval["low"] if interval is not None else value
    return GateResult(target, name, bound, value, compared, interval, passed=compared >= bound)


def declares_gates(gates: Gates, pairs: bool = False) -> bool:
    """Whether ``gates`` ask anything of a group: a per-sample threshold or an aggregate gate, on the score or on a
    metric. A group with none has no verdict to give (its samples can still fail: an error, a missed ``expect``).
    A preference file's group (``pairs``) always has one: each pair is a test of its own (chosen > rejected)."""
    if pairs:
        return True
    return any(not kind.pairs for kind, _ in gates.declared()) or any(m.bounds for _, m in gates.metrics)


def _pair_interval(summary: Summary, kind: GateKind, level: float | str | None) -> dict[str, Any] | None:
    preference = summary.preference or {}
    if kind.statistic == "subset_accuracy":
        return preference.get("subsets", {}).get(level, {}).get("gate_ci")  # type: ignore[no-any-return]
    return preference.get("gate_ci")


def _missing_subset(summary: Summary, target: str, name: str, bound: float, subset: Any) -> GateResult:
    known = ", ".join(summary.preference["subsets"]) if summary.preference else ""
    note = f"no pairs of subset {subset!r} in this file" + (
        f" (its subsets: {known})" if known else " (no pair has a subset)"
    )
    return GateResult(target, name, bound, passed=False, note=note)


def evaluate_gates(summary: Summary, gates: Gates) -> list[GateResult]:
    """Evaluate every aggregate gate of ``gates`` on ``summary``: a samples file's gates, or a preference file's
    (``summary.preference``; :attr:`GateKind.pairs`)."""
    declared = _declared(gates, pairs=summary.preference is not None)
    if not summary.complete:
        note = f"partial run ({summary.n} of {summary.expected} samples ran)"
        return [
            GateResult(_target(m), name, b, passed=True, evaluated=False, note=note, upper=kind.upper)
            for m, kind, name, _, b in declared
        ]
    if summary.n == 0:
        return [
            GateResult(_target(m), name, b, passed=False, note="no samples", upper=kind.upper)
            for m, kind, name, _, b in declared
        ]
    results: list[GateResult] = []
    for metric, kind, name, level, bound in declared:
        stats: Summary | MetricSummary | None = summary if metric is None else summary.metrics.get(metric)
        value = kind.measured(stats, level) if stats is not None else None
        if value is None and kind.value == "subsets":
            results.append(_missing_subset(summary, _target(metric), name, bound, level))
            continue
        interval = None
        if kind.statistic in ("pair_accuracy", "subset_accuracy"):
            interval = _pair_interval(summary, kind, level) if gates.confidence is not None else None
        elif kind.interval is not None and stats is not None:
            interval = getattr(stats, _INTERVAL_FIELDS[kind.interval][metric is not None])
        results.append(_judged(_target(metric), kind, name, bound, value, interval))
    return results
