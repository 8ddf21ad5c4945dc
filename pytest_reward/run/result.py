"""The frozen result of one reward run: built once, on the controller, after every item ran and the gates and the
comparison were judged; read (never changed) by the terminal summary, the result files, the stored run, the GitHub
step summary and deploy — and by any plugin, through the ``pytest_reward_run_finished(result, session)`` hook.

Data flows one way: ``SampleOutcome`` → ``GroupAccumulator`` → ``Summary`` + gate verdicts → :class:`GroupResult` →
:class:`RunResult`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..judge.results import SampleOutcome, Summary, row_json

if TYPE_CHECKING:
    from ..judge.results import GateResult
    from ..plugin.options import Settings
    from ..project.functions import RewardFn
    from .baseline import Comparison, ProbeChange

__all__ = ["NO_GATE", "GroupResult", "ProbeExample", "ProbeResult", "RunResult"]

#: The verdict of a group whose function declares no threshold and no gate.
NO_GATE = "NO GATE"

#: The summary fields a stored run keeps of each group.
_RECORD_SUMMARY = (
    "n",
    "n_errors",
    "n_pass",
    "n_below",
    "n_fail",
    "mean",
    "min",
    "max",
    "p10",
    "pass_rate",
    "mean_ci",
)


@dataclass(frozen=True)
class GroupResult:
    """Everything known about one reward function × samples file at the end of a run."""

    function: str
    file: str
    summary: Summary
    gates: tuple[GateResult, ...] = ()
    outcomes: tuple[SampleOutcome, ...] = ()
    """Every sample's outcome (sample granularity), or the failing and lowest-scoring ones (file granularity)."""
    complete_outcomes: bool = True
    preview_pool: tuple[SampleOutcome, ...] = ()
    """A seeded random sample of outcomes (file granularity) to draw previews from."""
    flaky: tuple[SampleOutcome, ...] = ()
    rows_file: Path | None = None
    record: Mapping[str, list[Any]] | None = None
    """Per-sample key/score/verdict/id/line columns shipped by file-granularity items (for stored runs)."""
    comparison: Comparison | None = None
    errors: tuple[str, ...] = ()
    """Why items of this group ended without a verdict of their own (a fixture error, a timeout, a crash)."""
    row_refs: tuple[Any, ...] = ()
    """Aligned with ``outcomes`` (sample items, with a report): where each outcome's full results.jsonl row was
    written (``[path, offset, length]``, or None); the outcomes themselves keep bounded texts."""
    gated: bool = True
    """Whether the function declares a threshold or a gate (:func:`~pytest_reward.judge.results.declares_gates`);
    without one the group has no pass rate and its verdict is ``NO GATE``."""

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if g.evaluated and not g.passed]

    @property
    def verdict(self) -> str:
        """``ERROR`` (an item ended without a verdict), ``FAIL``, ``partial`` (not every sample ran), ``NO GATE``
        (nothing was asked of the scores: no threshold, no gate; it fails nothing) or ``PASS``."""
        if self.errors:
            return "ERROR"
        if self.summary.n_fail or self.failed_gates:
            return "FAIL"
        if not self.summary.complete:
            return "partial"
        if not self.gated:
            return NO_GATE
        return "PASS"

    def samples_record(self) -> dict[str, dict[str, Any]]:
        """``{key: {score, verdict, id, line, response}}`` of every sample, for stored runs and comparisons
        (``response``: the hash of the sample's answer, or None)."""
        if not self.complete_outcomes and self.record is not None:
            c = self.record
            out = {
                k: {"score": s, "verdict": v, "id": i, "line": n, "response": r}
                for k, s, v, i, n, r in zip(
                    c["key"], c["score"], c["verdict"], c["id"], c["line"], c["response"], strict=True
                )
            }
            if "credit" in c:  # a preference file: each pair's credit and subset (what a comparison flips)
                for k, credit, subset in zip(c["key"], c["credit"], c["subset"], strict=True):
                    _pair_entry(out[k], credit, subset)
            return out
        if self.complete_outcomes:
            out = {}
            for o in sorted(self.outcomes, key=lambda o: o.line):
                entry = out[o.key] = {
                    "score": o.score,
                    "verdict": o.verdict,
                    "id": o.sample_id,
                    "line": o.line,
                    "response": o.response_hash,
                }
                pair = o.extra.get("pair") if o.extra else None
                if pair is not None:
                    _pair_entry(entry, pair["credit"], pair["subset"])
            return out
        out = {}
        for row in self.rows():
            entry = out[row["key"]] = {
                "score": row["score"],
                "verdict": row["verdict"],
                "id": row["id"],
                "line": row["line"],
                "response": None,
            }
            if row.get("pair") is not None:
                _pair_entry(entry, row["pair"]["credit"], row["pair"]["subset"])
        return out

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every sample's ``results.jsonl`` row, in file order."""
        if self.complete_outcomes:
            for outcome in sorted(self.outcomes, key=lambda o: o.line):
                yield outcome.row(text=False)
        elif self.rows_file is not None:
            with open(self.rows_file, encoding="utf-8") as fh:
                for line in fh:
                    yield json.loads(line)

    def write_rows(self, fh: IO[str]) -> None:
        """Write every row as JSON lines; file-granularity rows are copied as they were streamed (no re-encoding)."""
        if self.complete_outcomes and self.row_refs:
            self._copy_rows(fh)
        elif self.complete_outcomes:
            for outcome in sorted(self.outcomes, key=lambda o: o.line):
                fh.write(row_json(outcome) + "\n")
        elif self.rows_file is not None:
            import shutil

            with open(self.rows_file, encoding="utf-8") as src:
                shutil.copyfileobj(src, fh, 1 << 20)

    def _copy_rows(self, fh: IO[str]) -> None:
        """The rows the items wrote whole, in file order (read one at a time: memory stays flat)."""
        order = sorted(range(len(self.outcomes)), key=lambda i: self.outcomes[i].line)
        handles: dict[str, IO[bytes]] = {}
        try:
            for i in order:
                ref = self.row_refs[i]
                if ref is None:
                    fh.write(row_json(self.outcomes[i]) + "\n")
                    continue
                path, offset, length = ref
                src = handles.get(path)
                if src is None:
                    src = handles[path] = open(path, "rb")  # noqa: SIM115 (closed below)
                src.seek(offset)
                fh.write(src.read(length).decode("utf-8"))
        finally:
            for src in handles.values():
                src.close()

    def failing(self, limit: int = 20) -> list[SampleOutcome]:
        return sorted((o for o in self.outcomes if o.verdict == "fail"), key=lambda o: o.line)[:limit]

    def worst(self, limit: int = 20) -> list[SampleOutcome]:
        """Lowest scores first; errored samples count as lowest."""
        return sorted(self.outcomes, key=_worst_key)[:limit]

    def preview(self, n: int, seed: int) -> list[SampleOutcome]:
        """``n`` samples to show: the worst half first, then a seeded random pick of the rest."""
        if n <= 0:
            return []
        worst = self.worst((n + 1) // 2)
        chosen = {(o.line, o.key) for o in worst}
        pool = self.outcomes if self.complete_outcomes else self.preview_pool
        rest = sorted((o for o in pool if (o.line, o.key) not in chosen), key=lambda o: o.line)
        rng = random.Random(repr((seed, self.function, self.file)))
        pick = rng.sample(rest, min(len(rest), n - len(worst)))
        return worst + sorted(pick, key=lambda o: o.line)

    def record_entry(self) -> dict[str, Any]:
        """This group in a stored run: verdict, the aggregates, every sample's score by key."""
        summary = self.summary.to_dict()
        return {
            "function": self.function,
            "file": self.file,
            "verdict": self.verdict,
            "summary": {k: v for k, v in summary.items() if k in _RECORD_SUMMARY},
            "samples": self.samples_record(),
        }


def _pair_entry(entry: dict[str, Any], credit: float | None, subset: str | None) -> None:
    """A pair's stored entry: its credit (1 right, 0 wrong, 1/k a best-of-n tie) and its subset, when it has one."""
    if credit is not None:
        entry["credit"] = credit
        if subset is not None:
            entry["subset"] = subset


def _worst_key(outcome: SampleOutcome) -> tuple[int, float, int]:
    if outcome.score is None:
        return (0, 0.0, outcome.line)
    return (1, outcome.score, outcome.line)


@dataclass(frozen=True)
class ProbeExample:
    """A counter-example of a probe: a sample's own response and the mutated one, both scores, what broke."""

    line: int
    sample_id: str
    original: str | None
    """The sample's own response (cut to 500 characters)."""
    mutated: str
    """The mutated response (cut to 500 characters)."""
    original_score: float | None
    score: float | None
    """The mutated response's score (None: no valid score, or the reward raised)."""
    problem: str
    """What broke the rule (``it passes (1)``, ``score 0.5 > floor 0``, ``raised on the mutated response: ...``);
    for an ``info`` probe, what was seen."""
    reason: str | None = None
    """The reward's reason (or its error) for the mutated response."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "id": self.sample_id,
            "original": self.original,
            "mutated": self.mutated,
            "original_score": self.original_score,
            "score": self.score,
            "problem": self.problem,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ProbeResult:
    """One reward function × one probe × one samples file: how many responses the probe mutated, how many of the
    mutated responses broke its rule, and the first counter-examples. Probes count in no sample group."""

    function: str
    file: str
    probe: str
    rule: str
    doc: str = ""
    verdict: str = "PASS"
    """``PASS``, ``FAIL`` (a response broke the rule), ``INFO`` (an ``info`` rule: reported only), ``SKIP`` (the
    probe applied to no sample) or ``ERROR`` (the item ended without a verdict: a crash, a setup error)."""
    checked: int = 0
    """Samples whose response the probe mutated and scored."""
    broken: int = 0
    """Of those, how many broke the rule."""
    not_applicable: int = 0
    """Samples with a response that the probe left alone (nothing to mutate)."""
    errors: int = 0
    """Mutated responses the reward raised on (or timed out on)."""
    passing: int = 0
    """Mutated responses that pass (what an ``info`` probe reports)."""
    floor: float | None = None
    ceiling: float | None = None
    threshold: float | None = None
    mean_original: float | None = None
    """Mean score of the probed samples' own responses (no valid score counts as the floor)."""
    mean_mutated: float | None = None
    """Mean score of their mutated responses (likewise)."""
    note: str = ""
    """Why the probe was skipped, or what an ``info`` probe found, in words."""
    examples: tuple[ProbeExample, ...] = ()
    crashes: tuple[str, ...] = ()
    """Why the item ended without a verdict of its own."""
    order: int = 0
    """The probe's place in the marker (results are listed by function, file, then this)."""

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ProbeResult:
        examples = tuple(
            ProbeExample(
                line=e["line"],
                sample_id=e["id"],
                original=e.get("original"),
                mutated=e["mutated"],
                original_score=e.get("original_score"),
                score=e.get("score"),
                problem=e["problem"],
                reason=e.get("reason"),
            )
            for e in data.get("examples") or ()
        )
        crash = data.get("crash")
        known = {f for f in cls.__dataclass_fields__ if f not in ("examples", "crashes")}
        fields = {k: v for k, v in data.items() if k in known}
        return cls(**fields, examples=examples, crashes=(crash,) if crash else ())

    def to_dict(self) -> dict[str, Any]:
        """This result in summary.json (and what report.html renders)."""
        return {
            "function": self.function,
            "file": self.file,
            "probe": self.probe,
            "rule": self.rule,
            "doc": self.doc,
            "verdict": self.verdict,
            "checked": self.checked,
            "broken": self.broken,
            "not_applicable": self.not_applicable,
            "errors": self.errors,
            "passing": self.passing,
            "floor": self.floor,
            "ceiling": self.ceiling,
            "threshold": self.threshold,
            "mean_original": self.mean_original,
            "mean_mutated": self.mean_mutated,
            "note": self.note,
            "crashes": list(self.crashes),
            "examples": [e.to_dict() for e in self.examples],
        }

    def record_entry(self) -> dict[str, Any]:
        """This result in a stored run: the verdict and its counts (no texts)."""
        return {
            "function": self.function,
            "file": self.file,
            "probe": self.probe,
            "rule": self.rule,
            "verdict": self.verdict,
            "checked": self.checked,
            "broken": self.broken,
        }


@dataclass(frozen=True)
class RunResult:
    """What one reward run found. Built once on the controller; every field is final."""

    settings: Settings
    groups: tuple[GroupResult, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Versions, platform, time, git commit and arguments of the run (``pytest_reward.plugin.meta.run_meta``)."""
    functions: tuple[RewardFn, ...] = ()
    """The usable reward functions of the session (what a deploy may ship)."""
    comparisons: tuple[Comparison, ...] = ()
    compare_failures: tuple[str, ...] = ()
    """One line per failed ``--reward-compare-fail`` rule, and one per probe that passed in the stored run and
    fails now."""
    baseline: Path | None = None
    """The stored run compared against (``--reward-compare``)."""
    baseline_meta: Mapping[str, Any] = field(default_factory=dict)
    """Name, time and commit of that stored run."""
    rollout_calls: int = 0
    """Model calls made for prompt-only samples, summed over every process."""
    rollout_seconds: float = 0.0
    record: Mapping[str, Any] = field(default_factory=dict)
    """The stored run (:func:`pytest_reward.run.baseline.run_record`): built only when the run is stored or compared."""
    probes: tuple[ProbeResult, ...] = ()
    """The reward-hacking probes that ran (``@pytest.mark.reward(probes=...)``), by function, file and probe."""
    probe_changes: tuple[ProbeChange, ...] = ()
    """Every probe of this run or of the stored run compared against, with its verdict on both sides (a probe
    that passed there and fails now is one of :attr:`compare_failures`)."""
    replay_failures: tuple[str, ...] = ()
    """One line per group that ``--reward-replay-tolerance`` asked to replay but could not: none of its samples
    carries a recorded score, so nothing was compared."""

    @property
    def failed_gates(self) -> list[tuple[GroupResult, GateResult]]:
        return [(g, gate) for g in self.groups for gate in g.failed_gates]

    @property
    def verdict(self) -> str:
        """``FAIL`` when a sample, a gate, a comparison rule or a probe failed or an item errored; else ``PASS``."""
        if self.compare_failures or self.replay_failures:
            return "FAIL"
        if any(g.verdict in ("FAIL", "ERROR") for g in self.groups):
            return "FAIL"
        if any(p.verdict in ("FAIL", "ERROR") for p in self.probes):
            return "FAIL"
        return "PASS"
