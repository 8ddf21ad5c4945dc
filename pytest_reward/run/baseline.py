"""Stored runs (baselines) and paired comparisons against them.

A stored run is one plain JSON file under the storage directory (ini ``reward_storage``, default ``.reward``):
``NNNN_<name>.json`` with the commit, time and versions of the run, and per function × samples file the
aggregates and every sample's score, verdict and response hash, keyed by the sample's stable key
(:attr:`pytest_reward.data.samples.Sample.key`: its ``id``, else a hash of what was asked: the conversation without its
final assistant turn, the ground truth and the other input fields, with ``#2``, ``#3`` … on exact duplicates). A
changed answer is therefore the same sample with a new score. Files are written atomically and laid out one sample
per line, so they diff well in review. Version 1 keyed samples without ``id`` by their whole content: such a file is
migrated on read when none of its keys is a content hash, and refused, naming the file, otherwise.

A comparison pairs samples by key. Errored samples count as the lowest of 0 and the lowest score seen in either
run (as in the aggregates). Reported per group: paired count, the new and removed samples, how many paired samples
have a different response, the mean and pass rate of the paired samples and of the whole group before/after, the
mean of the per-sample deltas with a seeded paired-bootstrap interval, the whole group's change with a seeded
bootstrap that keeps the pairing (``stats.group_bootstrap_delta``), and the most regressed and most improved
samples. When fewer than half of the current samples pair, the comparison says so (a warning; an error under
``--reward-compare-strict``).

Rules (``--reward-compare-fail=mean:0.02,pass_rate:0.05,sample:0.3``) fail the session when a drop exceeds its
tolerance: ``mean`` and ``pass_rate`` on the paired mean of deltas and on the whole group's change (all samples,
before vs after), ``sample`` on every paired sample that dropped more (all of them named, the first ten in full).
A drop equal to the tolerance passes (compared with a relative epsilon, so ``1.0 → 0.7`` passes ``sample:0.3``).
With ``--reward-compare-strict`` the ``mean`` and ``pass_rate`` rules fail only when the interval of the delta at
``--reward-compare-confidence`` (default 99 %, so identical reruns fail at most about 0.5 % of the time whatever
the tolerance) also lies below zero.

Stored runs also keep each reward-hacking probe's verdict and counts (function × samples file × probe). A
comparison lists every probe with its verdict before and after (:func:`compare_probes`); a probe that passed in the
stored run and fails now (``FAIL`` or ``ERROR``) is a **regression**, which fails the comparison with no rule
needed (a probe's verdict is already pass or fail: :func:`probe_regressions`); one that failed and passes now is an
improvement; a probe on one side only (a stored run without probes, a probe added, removed or deselected) is shown,
never a failure.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import atomic_write_text
from ..errors import BaselineError
from ..judge.results import float_json

if TYPE_CHECKING:
    from .result import GroupResult

__all__ = [
    "FORMAT",
    "VERSION",
    "BaselineError",
    "CompareRule",
    "Comparison",
    "ProbeChange",
    "SampleDelta",
    "SampleRef",
    "Storage",
    "compare_probes",
    "compare_runs",
    "evaluate_rules",
    "exceeds",
    "migrate",
    "parse_rules",
    "probe_regressions",
    "run_pairing",
    "run_record",
]

FORMAT = "pytest-reward-run"
VERSION = 2
"""2: samples without ``id`` keyed by what was asked (``q:…``), a response hash per sample. 1: keyed by their
whole content (``sha1:…``), no response hashes."""
RULE_NAMES = ("mean", "pass_rate", "sample", "accuracy")
#: Samples named in full by a failed ``sample`` rule, and new / removed samples listed per comparison.
NAMED = 10
LISTED = 20
#: Relative and absolute epsilon of "a drop exceeds its tolerance": a drop equal to it, up to float rounding, passes.
REL_EPS, ABS_EPS = 1e-9, 1e-12
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
        """Store ``record`` as the next run number. Runs saving at once (parallel CI jobs on one checkout) take
        turns under a lock on the directory, so each gets a number of its own and a complete file."""
        if not _NAME_RE.match(name):
            raise BaselineError(f"--reward-save {name!r}: use letters, digits, '.', '_', '+' and '-' only")
        import fcntl

        self.directory.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.directory, os.O_RDONLY | os.O_CLOEXEC)  # the directory itself: no lock file
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            numbers = [int(_FILE_RE.match(p.name).group(1)) for p in self.runs()]  # type: ignore[union-attr]
            path = self.directory / f"{max(numbers, default=0) + 1:04d}_{name}.json"
            atomic_write_text(path, dumps_run(dict(record, name=path.stem)))
        finally:
            os.close(lock)  # releases the lock
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
        version = data.get("version")
        if version not in (1, VERSION):
            raise BaselineError(
                f"baseline {path}: format version {version!r} is not supported (this is version {VERSION})"
            )
        groups = data.get("groups")
        if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("samples"), dict) and "function" in g and "file" in g
            for g in groups
        ):
            raise BaselineError(f'baseline {path}: malformed "groups"')
        _check_groups(groups, path)
        return migrate(data, path) if version == 1 else data


_ENTRY_TYPES = {"id": str, "line": int, "response": str, "verdict": str}


def _check_groups(groups: list[dict[str, Any]], path: Path) -> None:
    """Every group and sample entry of a stored run, as this version writes them: a hand-edited or tampered file
    (a NaN or infinite score, a string score, an entry that is not an object) is refused naming the entry, never
    compared (a NaN drop would pass every rule)."""
    for group in groups:
        function, file = group["function"], group["file"]
        if not isinstance(function, str) or not isinstance(file, str):
            raise BaselineError(f"baseline {path}: a group's function and file must be strings, got {function!r}, "
                                f"{file!r}")  # fmt: skip
        for key, entry in group["samples"].items():
            if not isinstance(entry, dict):
                raise BaselineError(f"baseline {path}: {function} on {file}, sample {key!r}: not an object "
                                    f"({type(entry).__name__})")  # fmt: skip
            score = entry.get("score")
            if score is not None and (
                type(score) not in (int, float) or not math.isfinite(score)  # bool is not a score either
            ):
                raise BaselineError(
                    f"baseline {path}: {function} on {file}, sample {key!r}: score {score!r} is not a finite number"
                )
            for name, kind in _ENTRY_TYPES.items():
                value = entry.get(name)
                if value is not None and (type(value) is not kind):
                    raise BaselineError(f"baseline {path}: {function} on {file}, sample {key!r}: {name} "
                                        f"{value!r} is not a {kind.__name__}")  # fmt: skip


def migrate(data: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """A version-1 stored run as version 2, when its keys still mean the same: ``id:``, ``line:`` and ``eval:``
    keys are unchanged; a ``sha1:`` key (a sample without ``id``, hashed with its answer) cannot be paired with
    what this version computes, so such a run is refused, naming the file and what to do."""
    content_keyed = sum(1 for g in data["groups"] for key in g["samples"] if str(key).startswith("sha1:"))
    if content_keyed:
        raise BaselineError(
            f"baseline {path}: stored by an earlier pytest-reward (stored-run format 1), which keyed "
            f"{content_keyed} sample(s) without an id by their whole content, answer included; this version "
            "pairs samples by what was asked and cannot pair those. Store the baseline again with this version "
            "(run the baseline's code with --reward-save=NAME), or give the samples an id."
        )
    return dict(data, version=VERSION, migrated_from=1)


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
    """``json.dumps(entry, sort_keys=True)`` for the usual {id, line, response, score, verdict} entry, without the
    generic encoder's per-call cost (a stored run has one per sample)."""
    if len(entry) == 5:
        try:
            ident, line, response = entry["id"], entry["line"], entry["response"]
            score, verdict = entry["score"], entry["verdict"]
        except KeyError:
            return _dump(entry)
        if type(ident) is str and type(verdict) is str and type(line) is int:
            if score is None:
                score_j = "null"
            elif type(score) is float and -math.inf < score < math.inf:
                score_j = float_json(score)
            else:
                return _dump(entry)
            if response is None:
                response_j = "null"
            elif type(response) is str:
                response_j = _string(response)
            else:
                return _dump(entry)
            return (
                f'{{"id": {_string(ident)}, "line": {line}, "response": {response_j}, "score": {score_j}, '
                f'"verdict": {_string(verdict)}}}'
            )
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
    """One paired sample's change."""

    key: str
    id: str | None
    line: int | None
    before: float
    after: float
    delta: float
    response_changed: bool | None = None
    """Whether its response differs from the baseline's (None: not known, e.g. a prompt-only sample)."""


@dataclass
class SampleRef:
    """A sample on one side only: new in this run, or removed since the baseline."""

    key: str
    id: str | None
    line: int | None


class _Paired:
    """The paired samples of one comparison, most dropped first (what the ``sample`` rule reads)."""

    __slots__ = ("after", "before", "changed", "entries", "keys")

    def __init__(
        self, keys: list[str], entries: list[dict[str, Any]], before: Any, after: Any, changed: list
    ) -> None:
        self.keys, self.entries, self.before, self.after, self.changed = keys, entries, before, after, changed

    def delta(self, i: int) -> SampleDelta:
        entry, before, after = self.entries[i], float(self.before[i]), float(self.after[i])
        return SampleDelta(
            self.keys[i], entry.get("id"), entry.get("line"), before, after, after - before, self.changed[i]
        )


def exceeds(drop: Any, tolerance: float) -> Any:
    """Whether ``drop`` is more than ``tolerance`` beyond float rounding (a relative epsilon): ``1.0 → 0.7`` is a
    drop of 0.30000000000000004, which does not exceed 0.3. Works on floats and numpy arrays."""
    import numpy as np

    if isinstance(drop, np.ndarray):
        return (drop > tolerance) & (drop - tolerance > np.maximum(REL_EPS * np.abs(drop), ABS_EPS))
    return drop > tolerance and drop - tolerance > max(REL_EPS * abs(drop), ABS_EPS)


@dataclass
class Comparison:
    """Current run vs baseline for one function × samples file."""

    function: str
    file: str
    baseline: str
    n_paired: int = 0
    n_new: int = 0
    n_removed: int = 0
    n_current: int = 0
    """Samples of this run in the group (paired + new)."""
    n_baseline: int = 0
    """Samples of the baseline in the group (paired + removed)."""
    n_response_changed: int | None = None
    """Paired samples whose response differs from the baseline's; None when no pair has both response hashes (a
    baseline stored before format 2, prompt-only samples)."""
    mean_before: float | None = None
    """Mean of the paired samples in the baseline (``mean_after``: in this run)."""
    mean_after: float | None = None
    mean_delta: dict[str, Any] | None = None
    """Interval (95 %) of the paired mean of deltas."""
    pass_rate_before: float | None = None
    pass_rate_after: float | None = None
    pass_rate_delta: float | None = None
    pass_rate_delta_ci: dict[str, Any] | None = None
    """Interval of the paired pass-rate change at the strict confidence."""
    mean_delta_strict: dict[str, Any] | None = None
    """Interval of the paired mean change at the strict confidence (``--reward-compare-strict`` reads this one)."""
    group_mean_before: float | None = None
    """Mean of every sample of the group in the baseline (``group_mean_after``: in this run), paired or not."""
    group_mean_after: float | None = None
    group_mean_delta: dict[str, Any] | None = None
    """Interval (95 %) of the whole group's mean change (``stats.group_bootstrap_delta``)."""
    group_mean_delta_strict: dict[str, Any] | None = None
    group_pass_rate_before: float | None = None
    group_pass_rate_after: float | None = None
    group_pass_rate_delta: float | None = None
    group_pass_rate_delta_ci: dict[str, Any] | None = None
    """Interval of the whole group's pass-rate change at the strict confidence."""
    regressed: list[SampleDelta] = field(default_factory=list)
    improved: list[SampleDelta] = field(default_factory=list)
    worst_delta: float | None = None
    new_samples: list[SampleRef] = field(default_factory=list)
    """The first :data:`LISTED` new samples, in file order (``n_new`` counts them all)."""
    removed_samples: list[SampleRef] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    status: str = "compared"
    """``compared``, ``new`` (no such group in the baseline) or ``removed`` (gone from this run)."""
    preference: dict[str, Any] | None = None
    """A preference file's (:func:`_compare_pairs`): accuracy before/after, per subset, and the pairs that flipped
    (right → wrong) or were fixed (wrong → right). Its pass rate figures are accuracies (mean credit)."""
    _paired: _Paired | None = field(default=None, repr=False, compare=False)

    @property
    def poorly_paired(self) -> bool:
        """Fewer than half of this run's samples pair with the baseline's."""
        return self.status == "compared" and 2 * self.n_paired < self.n_current

    def drops_over(self, tolerance: float, limit: int = NAMED) -> tuple[int, list[SampleDelta]]:
        """How many paired samples dropped more than ``tolerance``, and the ``limit`` that dropped most."""
        paired = self._paired
        if paired is None:
            return 0, []
        count = int(exceeds(paired.before - paired.after, tolerance).sum())
        return count, [paired.delta(i) for i in range(min(count, limit))]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name.startswith("_"):
                continue
            value = getattr(self, f.name)
            out[f.name] = (
                [asdict(v) for v in value] if isinstance(value, list) and f.name != "warnings" else value
            )
        return out


def _fill(*groups: dict[str, Any]) -> float:
    scores = [s["score"] for g in groups for s in g["samples"].values() if s.get("score") is not None]
    return min(0.0, min(scores)) if scores else 0.0


def _refs(entries: dict[str, Any], keys: list[str]) -> list[SampleRef]:
    def line(k: str) -> tuple[int, str]:
        n = entries[k].get("line")
        return (n if isinstance(n, int) else 0, k)

    return [
        SampleRef(k, entries[k].get("id"), entries[k].get("line")) for k in sorted(keys, key=line)[:LISTED]
    ]


def _pairing_warning(comp: Comparison) -> str:
    return (
        f"only {comp.n_paired} of {comp.n_current} samples pair with a sample of {comp.baseline} "
        f"({comp.n_new} new, {comp.n_removed} removed): fewer than half, so the paired figures describe few "
        "samples. Samples without an id pair by what they ask (the conversation without its final answer, the "
        "ground truth, the other fields): did the questions change?"
    )


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

    from ..judge.stats import group_bootstrap_delta, paired_bootstrap_delta

    cur, old = current["samples"], base["samples"]
    keys = sorted(cur.keys() & old.keys())
    new_keys = [k for k in cur if k not in old]
    removed_keys = [k for k in old if k not in cur]
    comp = Comparison(
        current["function"],
        current["file"],
        name,
        n_paired=len(keys),
        n_new=len(new_keys),
        n_removed=len(removed_keys),
        n_current=len(cur),
        n_baseline=len(old),
        new_samples=_refs(cur, new_keys),
        removed_samples=_refs(old, removed_keys),
    )
    fill = _fill(current, base)

    def scores(entries: dict[str, Any], ks: list[str]) -> Any:
        return np.array(
            [entries[k]["score"] if entries[k].get("score") is not None else fill for k in ks], dtype=float
        )

    def passes(entries: dict[str, Any], ks: list[str]) -> Any:
        # a pair's pass is its credit (the pass rate of a preference file is its accuracy)
        return np.array([_credit(entries[k]) for k in ks], dtype=float)

    after, before = scores(cur, keys), scores(old, keys)
    pass_after, pass_before = passes(cur, keys), passes(old, keys)
    boot = {"seed": seed, "n_resamples": n_resamples}
    if keys:
        comp.mean_before, comp.mean_after = float(before.mean()), float(after.mean())
        comp.mean_delta = paired_bootstrap_delta(after, before, **boot).to_dict()
        comp.mean_delta_strict = paired_bootstrap_delta(after, before, strict_confidence, **boot).to_dict()
        comp.pass_rate_before, comp.pass_rate_after = float(pass_before.mean()), float(pass_after.mean())
        comp.pass_rate_delta = comp.pass_rate_after - comp.pass_rate_before
        comp.pass_rate_delta_ci = paired_bootstrap_delta(
            pass_after, pass_before, strict_confidence, **boot
        ).to_dict()
        changed: list[bool | None] = []
        for k in keys:
            r_cur, r_old = cur[k].get("response"), old[k].get("response")
            changed.append(None if r_cur is None or r_old is None else r_cur != r_old)
        known = [c for c in changed if c is not None]
        comp.n_response_changed = sum(known) if known else None
        deltas = after - before
        comp.worst_delta = float(deltas.min())
        order = np.argsort(deltas, kind="stable")
        comp._paired = _Paired(
            [keys[i] for i in order],
            [cur[keys[i]] for i in order],
            before[order],
            after[order],
            [changed[i] for i in order],
        )
        n = len(keys)
        comp.regressed = [comp._paired.delta(i) for i in range(min(top, n)) if deltas[order[i]] < 0]
        comp.improved = [
            comp._paired.delta(i) for i in range(n - 1, max(n - 1 - top, -1), -1) if deltas[order[i]] > 0
        ]
    if cur and old:
        new, removed = scores(cur, new_keys), scores(old, removed_keys)
        pass_new, pass_removed = passes(cur, new_keys), passes(old, removed_keys)
        comp.group_mean_after = float(np.concatenate([after, new]).mean())
        comp.group_mean_before = float(np.concatenate([before, removed]).mean())
        comp.group_pass_rate_after = float(np.concatenate([pass_after, pass_new]).mean())
        comp.group_pass_rate_before = float(np.concatenate([pass_before, pass_removed]).mean())
        comp.group_pass_rate_delta = comp.group_pass_rate_after - comp.group_pass_rate_before
        if new_keys or removed_keys:
            g, g_strict = group_bootstrap_delta(
                after, before, new, removed, (0.95, strict_confidence), **boot
            )
            comp.group_mean_delta, comp.group_mean_delta_strict = g.to_dict(), g_strict.to_dict()
            (p_strict,) = group_bootstrap_delta(
                pass_after, pass_before, pass_new, pass_removed, (strict_confidence,), **boot
            )
            comp.group_pass_rate_delta_ci = p_strict.to_dict()
        else:  # the same samples on both sides: the whole group's change is the paired one
            comp.group_mean_delta, comp.group_mean_delta_strict = comp.mean_delta, comp.mean_delta_strict
            comp.group_pass_rate_delta_ci = comp.pass_rate_delta_ci
    if any("credit" in e for e in cur.values()) or any("credit" in e for e in old.values()):
        comp.preference = _compare_pairs(cur, old, keys)
    if comp.poorly_paired:
        comp.warnings.append(_pairing_warning(comp))
    return comp


def _credit(entry: Mapping[str, Any]) -> float:
    credit = entry.get("credit")
    if credit is not None:
        return float(credit)
    return 1.0 if entry.get("verdict") == "pass" else 0.0


def _flip_ref(key: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "key": key,
        "id": after.get("id"),
        "line": after.get("line"),
        "subset": after.get("subset"),
        "credit_before": _credit(before),
        "credit_after": _credit(after),
        "margin_before": before.get("score"),
        "margin_after": after.get("score"),
    }


def _accuracy(entries: Mapping[str, Any], keys: Iterable[str]) -> tuple[int, float | None]:
    credits = [_credit(entries[k]) for k in keys]
    return len(credits), (sum(credits) / len(credits) if credits else None)


def _compare_pairs(cur: Mapping[str, Any], old: Mapping[str, Any], keys: list[str]) -> dict[str, Any]:
    """A preference file compared pair by pair: accuracy of the paired pairs and of every pair of each run, per
    subset too, and the pairs that flipped from right (credit 1) to wrong, or were fixed, by line."""
    flipped, fixed = [], []
    for k in keys:
        before, after = _credit(old[k]), _credit(cur[k])
        if before == 1.0 and after < 1.0:
            flipped.append(_flip_ref(k, old[k], cur[k]))
        elif before < 1.0 and after == 1.0:
            fixed.append(_flip_ref(k, old[k], cur[k]))
    flipped.sort(key=lambda f: (f["line"] if isinstance(f["line"], int) else 0, f["key"]))
    fixed.sort(key=lambda f: (f["line"] if isinstance(f["line"], int) else 0, f["key"]))
    subsets: dict[str, Any] = {}
    names = sorted({e["subset"] for e in (*cur.values(), *old.values()) if e.get("subset") is not None})
    for name in names:
        now = [k for k, e in cur.items() if e.get("subset") == name]
        then = [k for k, e in old.items() if e.get("subset") == name]
        paired = [k for k in keys if cur[k].get("subset") == name]
        n_after, after = _accuracy(cur, now)
        n_before, before = _accuracy(old, then)
        subsets[name] = {
            "n_before": n_before,
            "n_after": n_after,
            "before": before,
            "after": after,
            "delta": None if before is None or after is None else after - before,
            "n_paired": len(paired),
            "paired_before": _accuracy(old, paired)[1],
            "paired_after": _accuracy(cur, paired)[1],
            "n_flipped": sum(1 for f in flipped if f["subset"] == name),
            "n_fixed": sum(1 for f in fixed if f["subset"] == name),
        }
    return {
        "before": _accuracy(old, old)[1],
        "after": _accuracy(cur, cur)[1],
        "paired_before": _accuracy(old, keys)[1],
        "paired_after": _accuracy(cur, keys)[1],
        "n_flipped": len(flipped),
        "flipped": flipped[:LISTED],
        "n_fixed": len(fixed),
        "fixed": fixed[:LISTED],
        "subsets": subsets,
    }


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
            samples = group["samples"]
            out.append(
                Comparison(
                    group["function"],
                    group["file"],
                    name,
                    n_new=len(samples),
                    n_current=len(samples),
                    new_samples=_refs(samples, list(samples)),
                    status="new",
                )
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
            samples = group["samples"]
            out.append(
                Comparison(
                    key[0],
                    key[1],
                    name,
                    n_removed=len(samples),
                    n_baseline=len(samples),
                    removed_samples=_refs(samples, list(samples)),
                    status="removed",
                )
            )
    _note_one_sided(out, name)
    out.sort(key=lambda c: (c.function, c.file))
    return out


def _note_one_sided(comparisons: list[Comparison], baseline: str) -> None:
    """A group on one side only (a function renamed, added or removed, a samples file moved) pairs nothing: each
    says so, naming the functions found on one side only, so a rename is not mistaken for a new function."""
    only_here = sorted({c.function for c in comparisons if c.status == "new"})
    only_there = sorted({c.function for c in comparisons if c.status == "removed"})
    both = {c.function for c in comparisons if c.status == "compared"}
    only_here, only_there = [f for f in only_here if f not in both], [f for f in only_there if f not in both]
    sides = []
    if only_here:
        sides.append(f"functions only in this run: {', '.join(only_here)}")
    if only_there:
        sides.append(f"functions only in {baseline}: {', '.join(only_there)}")
    tail = f" ({'; '.join(sides)}; renamed?)" if only_here and only_there else f" ({sides[0]})" if sides else ""
    for comp in comparisons:
        if comp.status == "new":
            comp.warnings.append(f"no group of {baseline} pairs with it: its {comp.n_current} sample(s) are "
                                 f"unpaired{tail}")  # fmt: skip
        elif comp.status == "removed":
            comp.warnings.append(f"not in this run: its {comp.n_baseline} sample(s) in {baseline} are "
                                 f"unpaired{tail}")  # fmt: skip


def run_pairing(comparisons: Iterable[Comparison]) -> tuple[int, int]:
    """(paired, current): how many of this run's samples, over every group (groups on one side only included),
    pair with a sample of the baseline."""
    comparisons = list(comparisons)
    return sum(c.n_paired for c in comparisons), sum(c.n_current for c in comparisons)


# --- probes ---------------------------------------------------------------------------------------------

#: Verdicts of a probe that fail it (``ERROR``: its item ended without a verdict).
_PROBE_FAILS = ("FAIL", "ERROR")


@dataclass
class ProbeChange:
    """One reward-hacking probe (function × samples file × probe), this run vs a stored run."""

    function: str
    file: str
    probe: str
    baseline: str
    before: str | None = None
    """The probe's verdict in the stored run (None: not there)."""
    after: str | None = None
    """Its verdict now (None: not in this run)."""
    rule_before: str | None = None
    rule_after: str | None = None
    broken_before: int | None = None
    checked_before: int | None = None
    broken_after: int | None = None
    checked_after: int | None = None

    @property
    def status(self) -> str:
        """``regressed`` (passed, fails now), ``improved`` (failed, passes now), ``new`` (not in the stored run),
        ``absent`` (not in this run), ``changed`` (another change of verdict: a probe that applied to no sample,
        an ``info`` probe) or ``unchanged``."""
        if self.before is None:
            return "new"
        if self.after is None:
            return "absent"
        if self.before == "PASS" and self.after in _PROBE_FAILS:
            return "regressed"
        if self.before in _PROBE_FAILS and self.after == "PASS":
            return "improved"
        return "unchanged" if self.before == self.after else "changed"

    def counts(self, side: str) -> str:
        """``3 of 5 broke`` (``side``: ``before`` or ``after``), or the verdict alone when it has no counts."""
        verdict, broken, checked = (
            (self.before, self.broken_before, self.checked_before)
            if side == "before"
            else (self.after, self.broken_after, self.checked_after)
        )
        if verdict is None:
            return "–"
        if verdict in ("PASS", "FAIL") and broken is not None and checked is not None:
            return f"{verdict} ({broken} of {checked} broke)"
        return verdict

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["status"] = self.status
        return out


def _probe_entries(record: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    entries = record.get("probes")
    if not isinstance(entries, list):
        return {}
    return {
        (str(e["function"]), str(e["file"]), str(e["probe"])): e
        for e in entries
        if isinstance(e, dict) and {"function", "file", "probe"} <= e.keys()
    }


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def compare_probes(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[ProbeChange]:
    """Every probe of either run record, by function, file and probe: its verdict and counts on both sides."""
    name = str(baseline.get("name", "baseline"))
    now, then = _probe_entries(current), _probe_entries(baseline)
    out = []
    for key in sorted(now.keys() | then.keys()):
        a, b = now.get(key), then.get(key)
        out.append(
            ProbeChange(
                *key,
                name,
                before=b.get("verdict") if b else None,
                after=a.get("verdict") if a else None,
                rule_before=b.get("rule") if b else None,
                rule_after=a.get("rule") if a else None,
                broken_before=_count(b.get("broken")) if b else None,
                checked_before=_count(b.get("checked")) if b else None,
                broken_after=_count(a.get("broken")) if a else None,
                checked_after=_count(a.get("checked")) if a else None,
            )
        )
    return out


def probe_regressions(changes: Iterable[ProbeChange]) -> list[str]:
    """One failure line per probe that passed in the stored run and fails now (worded as the compare rules' are:
    ``function on file: ...``)."""
    out = []
    for c in changes:
        if c.status != "regressed":
            continue
        rule = f' (rule "{c.rule_after}")'
        if c.rule_before and c.rule_before != c.rule_after:
            rule = f' (rule "{c.rule_before}" then, "{c.rule_after}" now)'
        out.append(
            f"{c.function} on {c.file}: probe {c.probe} regressed vs {c.baseline}: {c.counts('before')} → "
            f"{c.counts('after')}{rule}"
        )
    return out


# --- rules ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompareRule:
    """A ``--reward-compare-fail`` rule: a drop of ``name`` (mean, pass_rate, sample) beyond ``tolerance`` fails."""

    name: str
    tolerance: float

    def __str__(self) -> str:
        return f"{self.name}:{self.tolerance:g}"


def parse_rules(texts: Iterable[str], source: str = "--reward-compare-fail") -> list[CompareRule]:
    """Parse ``mean:0.02,pass_rate:0.05,sample:0.3`` (comma or space separated, repeatable)."""
    rules: list[CompareRule] = []
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
            rules.append(CompareRule(name, tol))
    return rules


def _ci(d: dict[str, Any]) -> str:
    return f"{d['confidence']:.0%} CI of Δ [{d['low']:.4g}, {d['high']:.4g}]"


def _fails(drop: float, ci: dict[str, Any] | None, tolerance: float, strict: bool) -> bool:
    """A drop beyond the tolerance (and, strict, an interval wholly below zero)."""
    return exceeds(drop, tolerance) and (not strict or (ci is not None and ci["high"] < 0))


def _mean_rule(comp: Comparison, tol: float, strict: bool) -> str | None:
    drops, parts = [], []
    if comp.mean_delta is not None:
        d = comp.mean_delta_strict if strict and comp.mean_delta_strict else comp.mean_delta
        parts.append(f"paired, {comp.n_paired}: {comp.mean_before:.4g} → {comp.mean_after:.4g}, {_ci(d)}")
        if _fails(-d["estimate"], d, tol, strict):
            drops.append(-d["estimate"])
    if comp.group_mean_before is not None and comp.group_mean_after is not None:
        g = comp.group_mean_delta_strict if strict else comp.group_mean_delta
        drop = comp.group_mean_before - comp.group_mean_after
        parts.append(
            f"all samples, {comp.n_baseline} → {comp.n_current}: {comp.group_mean_before:.4g} → "
            f"{comp.group_mean_after:.4g}" + (f", {_ci(g)}" if g else "")
        )
        if _fails(drop, g, tol, strict):
            drops.append(drop)
    if not drops:
        return None
    return f"mean dropped {max(drops):.4g} ({'; '.join(parts)}) > tolerance {tol:g} vs {comp.baseline}"


def _pass_rate_rule(comp: Comparison, tol: float, strict: bool) -> str | None:
    drops, parts = [], []
    if comp.pass_rate_delta is not None:
        parts.append(f"paired, {comp.n_paired}: {comp.pass_rate_before:.1%} → {comp.pass_rate_after:.1%}")
        if _fails(-comp.pass_rate_delta, comp.pass_rate_delta_ci, tol, strict):
            drops.append(-comp.pass_rate_delta)
    if comp.group_pass_rate_delta is not None:
        parts.append(
            f"all samples, {comp.n_baseline} → {comp.n_current}: {comp.group_pass_rate_before:.1%} → "
            f"{comp.group_pass_rate_after:.1%}"
        )
        if _fails(-comp.group_pass_rate_delta, comp.group_pass_rate_delta_ci, tol, strict):
            drops.append(-comp.group_pass_rate_delta)
    if not drops:
        return None
    return f"pass rate dropped {max(drops):.4g} ({'; '.join(parts)}) > tolerance {tol:g} vs {comp.baseline}"


def _sample_rule(comp: Comparison, tol: float, strict: bool) -> str | None:
    count, worst = comp.drops_over(tol, NAMED)
    if not count:
        return None
    if count == 1:
        (e,) = worst
        return (
            f"sample {e.id or e.key} dropped {-e.delta:.4g} ({e.before:.4g} → {e.after:.4g}) > tolerance "
            f"{tol:g} vs {comp.baseline}"
        )
    named = ", ".join(f"{e.id or e.key} {-e.delta:.4g} ({e.before:.4g} → {e.after:.4g})" for e in worst)
    more = f", and {count - len(worst)} more" if count > len(worst) else ""
    return f"{count} samples dropped more than tolerance {tol:g} vs {comp.baseline}: {named}{more}"


def _accuracy_rule(comp: Comparison, tol: float, strict: bool) -> str | None:
    """A preference file's accuracy (its pass rate: the ``pass_rate`` rule, strict interval included) or any of
    its subsets' accuracy (every pair of each run) dropped more than ``tol``; the flipped pairs named."""
    p = comp.preference
    if p is None:
        return None
    drops = []
    overall = _pass_rate_rule(comp, tol, strict)
    if overall is not None:
        drops.append(overall.replace("pass rate dropped", "accuracy dropped", 1))
    for name, s in p["subsets"].items():
        if s["delta"] is not None and exceeds(-s["delta"], tol):
            drops.append(
                f"subset {name!r} accuracy dropped {-s['delta']:.4g} ({s['before']:.1%} of {s['n_before']} → "
                f"{s['after']:.1%} of {s['n_after']} pairs) > tolerance {tol:g} vs {comp.baseline}"
            )
    if not drops:
        return None
    flips = ""
    if p["n_flipped"]:
        named = ", ".join(str(f["id"] or f["key"]) for f in p["flipped"][:NAMED])
        more = f", and {p['n_flipped'] - NAMED} more" if p["n_flipped"] > NAMED else ""
        flips = f"; {p['n_flipped']} pair(s) flipped right → wrong: {named}{more}"
    return "; ".join(drops) + flips


_RULES = {"mean": _mean_rule, "pass_rate": _pass_rate_rule, "sample": _sample_rule, "accuracy": _accuracy_rule}


def evaluate_rules(comparisons: list[Comparison], rules: list[CompareRule], *, strict: bool) -> list[str]:
    """One message per violated rule and group; under ``strict``, one more per group where fewer than half of
    the current samples pair with the baseline's."""
    failures: list[str] = []
    paired, current = run_pairing(comparisons)
    one_sided = sorted({f"{c.function} ({c.status})" for c in comparisons if c.status != "compared"})
    if strict and one_sided and 2 * paired < current:  # (poorly paired groups on both sides: their own lines)
        baseline = comparisons[0].baseline
        failures.append(
            f"only {paired} of this run's {current} samples pair with a sample of {baseline}, fewer than half"
            + f"; on one side only: {', '.join(one_sided)}"
            + " (an error under --reward-compare-strict)"
        )
    for comp in comparisons:
        if comp.status != "compared":
            continue
        where = f"{comp.function} on {comp.file}"
        if strict and comp.poorly_paired:
            failures.append(
                f"{where}: only {comp.n_paired} of {comp.n_current} samples pair with a sample of "
                f"{comp.baseline}, fewer than half (an error under --reward-compare-strict)"
            )
        for rule in rules:
            message = _RULES[rule.name](comp, rule.tolerance, strict)
            if message is not None:
                failures.append(f"{where}: {message}")
    return failures
