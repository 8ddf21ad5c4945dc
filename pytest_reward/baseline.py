"""Stored runs (baselines) and paired comparisons against them.

A stored run is one plain JSON file under the storage directory (ini ``reward_storage``, default ``.reward``):
``NNNN_<name>.json`` with the commit, time and versions of the run, and per function × samples file the
aggregates and every sample's score keyed by its stable id (the sample's ``id``, else a hash of its content). Files
are written atomically and laid out one sample per line, so they diff well in review.

A comparison pairs samples by key. Errored samples count as the lowest of 0 and the lowest score seen in either
run (as in the aggregates). Reported per group: paired count, new and removed samples, mean before/after, the mean
of the per-sample deltas with a seeded paired-bootstrap interval, the pass-rate delta (with its own paired
bootstrap interval), and the most regressed and most improved samples.

Rules (``--reward-compare-fail=mean:0.02,pass_rate:0.05,sample:0.3``) fail the session when a drop exceeds its
tolerance; with ``--reward-compare-strict`` the ``mean`` and ``pass_rate`` rules fail only when the interval of
the delta at ``--reward-compare-confidence`` (default 99 %, so identical reruns fail at most about 0.5 % of the
time whatever the tolerance) also lies below zero. The ``sample`` rule fails on any single paired sample dropping more than the
tolerance.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atomic import atomic_write_text
from .errors import BaselineError
from .results import float_json

if TYPE_CHECKING:
    from .run import GroupResult

__all__ = [
    "FORMAT",
    "BaselineError",
    "Comparison",
    "Rule",
    "Storage",
    "compare_runs",
    "evaluate_rules",
    "parse_rules",
    "run_record",
]

FORMAT = "pytest-reward-run"
VERSION = 1
RULE_NAMES = ("mean", "pass_rate", "sample")
_NAME_RE = re.compile(r"^[A-Za-z0-9._+-]+$")
_FILE_RE = re.compile(r"^(\d{4})_(.+)\.json$")


# --- storage ---------------------------------------------------------------------------------------------


class Storage:
    """The directory of stored runs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def runs(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if _FILE_RE.match(p.name))

    def save(self, record: dict[str, Any], name: str) -> Path:
        if not _NAME_RE.match(name):
            raise BaselineError(f"--reward-save {name!r}: use letters, digits, '.', '_', '+' and '-' only")
        existing = self.runs()
        number = int(_FILE_RE.match(existing[-1].name).group(1)) + 1 if existing else 1  # type: ignore[union-attr]
        path = self.directory / f"{number:04d}_{name}.json"
        record = dict(record, name=path.stem)
        atomic_write_text(path, dumps_run(record))
        return path

    def resolve(self, spec: str) -> Path:
        """``latest``, a run number (``3`` / ``0003``), a run name (``main``, latest of that name) or a path."""
        candidate = Path(spec)
        if candidate.suffix == ".json" or "/" in spec or candidate.is_file():
            if not candidate.is_file():
                raise BaselineError(f"--reward-compare {spec}: file not found")
            return candidate
        runs = self.runs()
        if not runs:
            raise BaselineError(
                f"--reward-compare {spec}: no stored runs in {self.directory} "
                "(save one first with --reward-save or --reward-autosave)"
            )
        if spec == "latest":
            return runs[-1]
        if spec.isdigit():
            matches = [p for p in runs if int(_FILE_RE.match(p.name).group(1)) == int(spec)]  # type: ignore[union-attr]
        else:
            matches = [p for p in runs if _FILE_RE.match(p.name).group(2) == spec]  # type: ignore[union-attr]
        if not matches:
            names = ", ".join(p.stem for p in runs[-5:])
            raise BaselineError(
                f"--reward-compare {spec}: no stored run matches in {self.directory} (latest: {names})"
            )
        return matches[-1]

    @staticmethod
    def load(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise BaselineError(f"baseline {path}: cannot be read ({exc})") from None
        except json.JSONDecodeError as exc:
            raise BaselineError(f"baseline {path}: corrupt JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BaselineError(f'baseline {path}: not a pytest-reward stored run (no "format": "{FORMAT}")')
        if data.get("version") != VERSION:
            raise BaselineError(
                f"baseline {path}: format version {data.get('version')!r} is not supported (this is version {VERSION})"
            )
        groups = data.get("groups")
        if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("samples"), dict) and "function" in g and "file" in g
            for g in groups
        ):
            raise BaselineError(f'baseline {path}: malformed "groups"')
        return data


def dumps_run(record: dict[str, Any]) -> str:
    """JSON with one sample per line: stable key order, small diffs between runs."""
    groups = record.get("groups", [])
    head = {k: v for k, v in record.items() if k != "groups"}
    out = ["{"]
    for key in sorted(head):
        out.append(f"  {json.dumps(key)}: {json.dumps(head[key], sort_keys=True, ensure_ascii=False)},")
    out.append('  "groups": [')
    for gi, group in enumerate(groups):
        out.append("    {")
        meta = {k: v for k, v in group.items() if k != "samples"}
        for key in sorted(meta):
            out.append(
                f"      {json.dumps(key)}: {json.dumps(meta[key], sort_keys=True, ensure_ascii=False)},"
            )
        out.append('      "samples": {')
        samples = group.get("samples", {})
        keys = sorted(samples)
        for si, key in enumerate(keys):
            comma = "," if si < len(keys) - 1 else ""
            out.append(f"        {_string(key)}: {_sample_json(samples[key])}{comma}")
        out.append("      }")
        out.append("    }" + ("," if gi < len(groups) - 1 else ""))
    out.append("  ]")
    out.append("}")
    return "\n".join(out) + "\n"


_dump = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode
_string = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _sample_json(entry: dict[str, Any]) -> str:
    """``json.dumps(entry, sort_keys=True)`` for the usual {id, line, score, verdict} entry, without the generic
    encoder's per-call cost (a stored run has one per sample)."""
    if len(entry) == 4:
        try:
            ident, line, score, verdict = entry["id"], entry["line"], entry["score"], entry["verdict"]
        except KeyError:
            return _dump(entry)
        if type(ident) is str and type(verdict) is str and type(line) is int:
            if score is None:
                score_j = "null"
            elif type(score) is float and -math.inf < score < math.inf:
                score_j = float_json(score)
            else:
                return _dump(entry)
            return f'{{"id": {_string(ident)}, "line": {line}, "score": {score_j}, "verdict": {_string(verdict)}}}'
    return _dump(entry)


# --- stored runs of a RunResult -------------------------------------------------------------------------


def run_record(groups: Iterable[GroupResult], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The stored run (``--reward-save``) and what comparisons read: aggregates and every sample by key."""
    record: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    record.update(meta)
    record["groups"] = [g.record_entry() for g in groups]
    return record


# --- comparison ------------------------------------------------------------------------------------------


@dataclass
class SampleDelta:
    key: str
    id: str | None
    line: int | None
    before: float
    after: float
    delta: float


@dataclass
class Comparison:
    """Current run vs baseline for one function × samples file."""

    function: str
    file: str
    baseline: str
    n_paired: int = 0
    n_new: int = 0
    n_removed: int = 0
    mean_before: float | None = None
    mean_after: float | None = None
    mean_delta: dict[str, Any] | None = None
    pass_rate_before: float | None = None
    pass_rate_after: float | None = None
    pass_rate_delta: float | None = None
    pass_rate_delta_ci: dict[str, Any] | None = None
    """Interval of the pass-rate change at the strict confidence."""
    mean_delta_strict: dict[str, Any] | None = None
    """Interval of the mean change at the strict confidence (``--reward-compare-strict`` reads this one)."""
    regressed: list[SampleDelta] = field(default_factory=list)
    improved: list[SampleDelta] = field(default_factory=list)
    worst_delta: float | None = None
    status: str = "compared"
    """``compared``, ``new`` (no such group in the baseline) or ``removed`` (gone from this run)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fill(*groups: dict[str, Any]) -> float:
    scores = [s["score"] for g in groups for s in g["samples"].values() if s.get("score") is not None]
    return min(0.0, min(scores)) if scores else 0.0


def _compare_group(
    current: dict[str, Any],
    base: dict[str, Any],
    name: str,
    *,
    seed: int,
    n_resamples: int,
    top: int,
    strict_confidence: float,
) -> Comparison:
    import numpy as np

    from .stats import paired_bootstrap_delta

    cur, old = current["samples"], base["samples"]
    keys = sorted(set(cur) & set(old))
    comp = Comparison(current["function"], current["file"], name)
    comp.n_paired = len(keys)
    comp.n_new = len(set(cur) - set(old))
    comp.n_removed = len(set(old) - set(cur))
    if not keys:
        return comp
    fill = _fill(current, base)
    after = np.array([cur[k]["score"] if cur[k].get("score") is not None else fill for k in keys])
    before = np.array([old[k]["score"] if old[k].get("score") is not None else fill for k in keys])
    comp.mean_before, comp.mean_after = float(before.mean()), float(after.mean())
    comp.mean_delta = paired_bootstrap_delta(after, before, seed=seed, n_resamples=n_resamples).to_dict()
    comp.mean_delta_strict = paired_bootstrap_delta(
        after, before, strict_confidence, seed=seed, n_resamples=n_resamples
    ).to_dict()
    pass_after = np.array([cur[k].get("verdict") == "pass" for k in keys], dtype=float)
    pass_before = np.array([old[k].get("verdict") == "pass" for k in keys], dtype=float)
    comp.pass_rate_before, comp.pass_rate_after = float(pass_before.mean()), float(pass_after.mean())
    comp.pass_rate_delta = comp.pass_rate_after - comp.pass_rate_before
    comp.pass_rate_delta_ci = paired_bootstrap_delta(
        pass_after, pass_before, strict_confidence, seed=seed, n_resamples=n_resamples
    ).to_dict()
    deltas = after - before
    comp.worst_delta = float(deltas.min())
    order = np.argsort(deltas, kind="stable")

    def entry(i: int) -> SampleDelta:
        k = keys[i]
        return SampleDelta(
            k, cur[k].get("id"), cur[k].get("line"), float(before[i]), float(after[i]), float(deltas[i])
        )

    comp.regressed = [entry(int(i)) for i in order[:top] if deltas[int(i)] < 0]
    comp.improved = [entry(int(i)) for i in order[::-1][:top] if deltas[int(i)] > 0]
    return comp


def compare_runs(
    current: dict[str, Any],
    baseline: dict[str, Any],
    *,
    seed: int = 0,
    n_resamples: int = 2000,
    top: int = 5,
    strict_confidence: float = 0.99,
) -> list[Comparison]:
    """Compare two run records (as written by ``Storage.save``) group by group."""
    name = baseline.get("name", "baseline")
    base_groups = {(g["function"], g["file"]): g for g in baseline.get("groups", [])}
    out: list[Comparison] = []
    seen = set()
    for group in current.get("groups", []):
        key = (group["function"], group["file"])
        seen.add(key)
        if key not in base_groups:
            out.append(
                Comparison(group["function"], group["file"], name, n_new=len(group["samples"]), status="new")
            )
            continue
        out.append(
            _compare_group(
                group,
                base_groups[key],
                name,
                seed=seed,
                n_resamples=n_resamples,
                top=top,
                strict_confidence=strict_confidence,
            )
        )
    for key, group in base_groups.items():
        if key not in seen:
            out.append(Comparison(key[0], key[1], name, n_removed=len(group["samples"]), status="removed"))
    out.sort(key=lambda c: (c.function, c.file))
    return out


# --- rules ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    name: str
    tolerance: float

    def __str__(self) -> str:
        return f"{self.name}:{self.tolerance:g}"


def parse_rules(texts: Iterable[str], source: str = "--reward-compare-fail") -> list[Rule]:
    """Parse ``mean:0.02,pass_rate:0.05,sample:0.3`` (comma or space separated, repeatable)."""
    rules: list[Rule] = []
    for text in texts:
        for part in text.replace(",", " ").split():
            name, sep, value = part.partition(":")
            if not sep or name not in RULE_NAMES:
                raise BaselineError(
                    f"{source}: expected RULE:TOLERANCE with RULE one of {', '.join(RULE_NAMES)}, got {part!r}"
                )
            try:
                tol = float(value)
            except ValueError:
                raise BaselineError(
                    f"{source}: tolerance of {name} must be a number, got {value!r}"
                ) from None
            if not tol >= 0:
                raise BaselineError(f"{source}: tolerance of {name} must be ≥ 0, got {value}")
            rules.append(Rule(name, tol))
    return rules


def evaluate_rules(comparisons: list[Comparison], rules: list[Rule], *, strict: bool) -> list[str]:
    """One message per violated rule and group."""
    failures: list[str] = []
    for comp in comparisons:
        if comp.status != "compared" or comp.n_paired == 0:
            continue
        where = f"{comp.function} on {comp.file}"
        for rule in rules:
            if rule.name == "mean" and comp.mean_delta is not None:
                d = comp.mean_delta_strict if strict and comp.mean_delta_strict else comp.mean_delta
                if d["estimate"] < -rule.tolerance and (not strict or d["high"] < 0):
                    failures.append(
                        f"{where}: mean dropped {-d['estimate']:.4g} ({comp.mean_before:.4g} → {comp.mean_after:.4g}, "
                        f"{d['confidence']:.0%} CI of Δ [{d['low']:.4g}, {d['high']:.4g}]) > tolerance "
                        f"{rule.tolerance:g} vs {comp.baseline}"
                    )
            elif rule.name == "pass_rate" and comp.pass_rate_delta is not None:
                ci = comp.pass_rate_delta_ci or {}
                if comp.pass_rate_delta < -rule.tolerance and (not strict or ci.get("high", 0.0) < 0):
                    failures.append(
                        f"{where}: pass rate dropped {-comp.pass_rate_delta:.4g} ({comp.pass_rate_before:.1%} → "
                        f"{comp.pass_rate_after:.1%}) > tolerance {rule.tolerance:g} vs {comp.baseline}"
                    )
            elif (
                rule.name == "sample" and comp.worst_delta is not None and comp.worst_delta < -rule.tolerance
            ):
                worst = comp.regressed[0]
                failures.append(
                    f"{where}: sample {worst.id or worst.key} dropped {-worst.delta:.4g} "
                    f"({worst.before:.4g} → {worst.after:.4g}) > tolerance {rule.tolerance:g} vs {comp.baseline}"
                )
    return failures
