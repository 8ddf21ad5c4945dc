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

from .results import SampleOutcome, Summary, row_json

if TYPE_CHECKING:
    from .baseline import Comparison
    from .discovery import RewardFn
    from .options import Settings
    from .results import GateResult

__all__ = ["GroupResult", "RunResult"]

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

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if g.evaluated and not g.passed]

    @property
    def verdict(self) -> str:
        """``ERROR`` (an item ended without a verdict), ``FAIL``, ``partial`` (not every sample ran) or ``PASS``."""
        if self.errors:
            return "ERROR"
        if self.summary.n_fail or self.failed_gates:
            return "FAIL"
        if not self.summary.complete:
            return "partial"
        return "PASS"

    def samples_record(self) -> dict[str, dict[str, Any]]:
        """``{key: {score, verdict, id, line, response}}`` of every sample, for stored runs and comparisons
        (``response``: the hash of the sample's answer, or None)."""
        if not self.complete_outcomes and self.record is not None:
            c = self.record
            return {
                k: {"score": s, "verdict": v, "id": i, "line": n, "response": r}
                for k, s, v, i, n, r in zip(
                    c["key"], c["score"], c["verdict"], c["id"], c["line"], c["response"], strict=True
                )
            }
        if self.complete_outcomes:
            return {
                o.key: {
                    "score": o.score,
                    "verdict": o.verdict,
                    "id": o.sample_id,
                    "line": o.line,
                    "response": o.response_hash,
                }
                for o in sorted(self.outcomes, key=lambda o: o.line)
            }
        return {
            row["key"]: {
                "score": row["score"],
                "verdict": row["verdict"],
                "id": row["id"],
                "line": row["line"],
                "response": None,
            }
            for row in self.rows()
        }

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


def _worst_key(outcome: SampleOutcome) -> tuple[int, float, int]:
    if outcome.score is None:
        return (0, 0.0, outcome.line)
    return (1, outcome.score, outcome.line)


@dataclass(frozen=True)
class RunResult:
    """What one reward run found. Built once on the controller; every field is final."""

    settings: Settings
    groups: tuple[GroupResult, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Versions, platform, time, git commit and arguments of the run (``pytest_reward.meta.run_meta``)."""
    functions: tuple[RewardFn, ...] = ()
    """The usable reward functions of the session (what a deploy may ship)."""
    comparisons: tuple[Comparison, ...] = ()
    compare_failures: tuple[str, ...] = ()
    """One line per failed ``--reward-compare-fail`` rule."""
    baseline: Path | None = None
    """The stored run compared against (``--reward-compare``)."""
    baseline_meta: Mapping[str, Any] = field(default_factory=dict)
    """Name, time and commit of that stored run."""
    rollout_calls: int = 0
    """Model calls made for prompt-only samples, summed over every process."""
    rollout_seconds: float = 0.0
    record: Mapping[str, Any] = field(default_factory=dict)
    """The stored run (:func:`pytest_reward.baseline.run_record`): built only when the run is stored or compared."""

    @property
    def failed_gates(self) -> list[tuple[GroupResult, GateResult]]:
        return [(g, gate) for g in self.groups for gate in g.failed_gates]

    @property
    def verdict(self) -> str:
        """``FAIL`` when a sample, a gate or a comparison rule failed or an item errored; else ``PASS``."""
        if self.compare_failures or any(g.verdict in ("FAIL", "ERROR") for g in self.groups):
            return "FAIL"
        return "PASS"
