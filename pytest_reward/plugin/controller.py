"""What the controller does with a reward run (once, on the controller; xdist workers only report): fold the items'
reports, judge the gates and the comparison with the stored baseline after the run loop, freeze the
:class:`~pytest_reward.run.result.RunResult`, and write the result files in two steps around the end of the session (see
:mod:`pytest_reward.report.outputs`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..report.outputs import Staged, Written, commit_outputs, stage_outputs
from ..run.baseline import run_record
from ..run.fold import Aggregator
from ..run.result import RunResult

if TYPE_CHECKING:
    from ..judge.gates import Gates
    from ..project.functions import RewardFn
    from .options import Settings

__all__ = ["RunController"]


class RunController:
    """The end of a run: :meth:`add` every report, :meth:`conclude` once after the run loop, then :meth:`stage`
    and :meth:`commit` the files at the end of the session."""

    def __init__(self, settings: Settings, gates_of: Callable[[str], Gates | None]) -> None:
        self.settings = settings
        self.aggregator = Aggregator(
            gates_of, seed=settings.seed, n_resamples=settings.n_resamples, flaky_spread=settings.flaky_spread
        )
        self.baseline: tuple[Path, dict[str, Any]] | None = None
        self.result: RunResult | None = None
        self.staged: Staged | None = None
        self.written = Written()

    def load_baseline(self) -> None:
        """Resolve and read ``--reward-compare`` and check the rules (early: a bad one is a usage error)."""
        from ..run.baseline import Storage, parse_rules

        settings = self.settings
        parse_rules(settings.compare_fail)
        if settings.compare:
            storage = Storage(settings.storage)
            path = storage.resolve(settings.compare)
            self.baseline = (path, storage.load(path))

    def add(self, data: dict[str, Any]) -> None:
        self.aggregator.add(data)

    @property
    def has_results(self) -> bool:
        return self.aggregator.has_results

    def conclude(self, meta: dict[str, Any], functions: Sequence[RewardFn]) -> RunResult:
        """Judge every group and compare with the baseline; the result is final."""
        settings = self.settings
        groups = self.aggregator.groups()
        probes = self.aggregator.probes()
        record = run_record(groups, meta) if settings.needs_record else {}
        if record and probes:  # the probes' verdicts and counts (a comparison lists them: compare_probes)
            record["probes"] = [p.record_entry() for p in probes]
        result = RunResult(
            settings=settings,
            groups=groups,
            meta=meta,
            functions=tuple(functions),
            rollout_calls=self.aggregator.rollout_calls,
            rollout_seconds=self.aggregator.rollout_seconds,
            record=record,
            probes=probes,
            replay_failures=self._unreplayed(groups, functions),
        )
        if self.baseline is not None:
            result = self._compared(result)
        self.result = result
        return result

    def _unreplayed(self, groups: Sequence[Any], functions: Sequence[RewardFn]) -> tuple[str, ...]:
        """A replay was asked for (``--reward-replay-tolerance``): each reward function's group of which no sample
        carried a recorded score checked nothing, and says so."""
        tolerance = self.settings.replay_tolerance
        if tolerance is None:
            return ()
        names = {fn.name for fn in functions}
        return tuple(
            f"{g.function} on {g.file}: --reward-replay-tolerance {tolerance:g} asked for a replay, but none of "
            f"its {g.summary.n} samples carries a recorded score (a dump row's 'score', a slime pack's 'reward'): "
            "nothing was compared"
            for g in groups
            if g.function in names and g.summary.n and not g.summary.n_replayed
        )

    def _compared(self, result: RunResult) -> RunResult:
        from ..run.baseline import (
            compare_probes,
            compare_runs,
            evaluate_rules,
            parse_rules,
            probe_regressions,
        )

        assert self.baseline is not None
        path, base = self.baseline
        settings = self.settings
        comparisons = compare_runs(
            dict(result.record),
            base,
            seed=settings.seed,
            n_resamples=settings.n_resamples,
            strict_confidence=settings.compare_confidence,
        )
        by_key = {(c.function, c.file): c for c in comparisons}
        failures = evaluate_rules(
            comparisons, parse_rules(settings.compare_fail), strict=settings.compare_strict
        )
        probe_changes = compare_probes(result.record, base)
        failures += probe_regressions(probe_changes)  # a probe that passed there and fails now
        return replace(
            result,
            groups=tuple(replace(g, comparison=by_key.get((g.function, g.file))) for g in result.groups),
            comparisons=tuple(comparisons),
            compare_failures=tuple(failures),
            probe_changes=tuple(probe_changes),
            baseline=path,
            baseline_meta={k: base.get(k) for k in ("name", "generated_at", "commit") if k in base},
        )

    def stage(self) -> list[str]:
        """Prepare the result files (nothing visible yet); returns the error lines."""
        assert self.result is not None
        self.staged = stage_outputs(self.result)
        return list(self.staged.errors)

    def commit(self, exitstatus: int) -> Written:
        """Put the result files in place, naming the session's final exit status (errors are returned as lines)."""
        if self.result is None or self.staged is None:
            return self.written
        self.written = commit_outputs(self.result, self.staged, exitstatus)
        self.staged = None
        return self.written

    def discard(self) -> None:
        """Drop what was staged (an interrupted session writes nothing)."""
        if self.staged is not None:
            self.staged.discard()
            self.staged = None

    def empty_result(self, meta: dict[str, Any], functions: Sequence[RewardFn]) -> RunResult:
        """The result of a run whose items never reported (a collection error, no samples)."""
        return RunResult(settings=self.settings, meta=meta, functions=tuple(functions))
