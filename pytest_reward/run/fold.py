"""The controller's fold: the reward data of every test report (:mod:`pytest_reward.judge.wire`) into one
``GroupResult`` per reward function × samples file, with its summary and gate verdicts.

Reports arrive in any order (xdist workers interleave); each group's aggregates are streamed (compact arrays), and
verdicts are judged once, in :meth:`Aggregator.groups`, after the run loop. Probe items report their own kind
(:mod:`pytest_reward.plugin.probe_items`): one ``ProbeResult`` each (:meth:`Aggregator.probes`), counted in no group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..judge.gates import Gates
from ..judge.results import GroupAccumulator, SampleOutcome, Summary, declares_gates, evaluate_gates
from ..judge.wire import outcome_from_wire
from .result import GroupResult, ProbeResult

__all__ = ["Aggregator"]


class Aggregator:
    """Folds item reports into groups. ``gates_of(name)`` gives a reward function's gates (None: not a reward
    function of this session, e.g. an ``Evaluation``, whose report carries its own)."""

    def __init__(
        self,
        gates_of: Callable[[str], Gates | None],
        *,
        seed: int = 0,
        n_resamples: int = 2000,
        flaky_spread: float | None = None,
    ) -> None:
        self._gates_of = gates_of
        self.seed = seed
        self.n_resamples = n_resamples
        self.flaky_spread = flaky_spread
        self._accumulators: dict[tuple[str, str], GroupAccumulator] = {}
        self._outcomes: dict[tuple[str, str], list[SampleOutcome]] = {}
        self._rows: dict[tuple[str, str], list[Any]] = {}
        self._file_groups: dict[tuple[str, str], tuple[Summary, Mapping[str, Any]]] = {}
        self._expected: dict[tuple[str, str], int] = {}
        self._reported_gates: dict[str, Gates] = {}
        self._crashes: dict[tuple[str, str], list[str]] = {}
        self.rollout_calls = 0
        self.rollout_seconds = 0.0
        self._probes: dict[tuple[str, str, str], ProbeResult] = {}

    @property
    def has_results(self) -> bool:
        """Whether any reward item reported (unrelated runs skip all the end-of-run work)."""
        return bool(self._accumulators or self._file_groups or self._crashes or self._probes)

    def gates(self, name: str) -> Gates:
        gates = self._gates_of(name)
        if gates is not None:
            return gates
        return self._reported_gates.get(name, Gates())

    def add(self, data: Mapping[str, Any]) -> None:
        """Fold the reward data of one test report."""
        if "probe" in data:
            self._add_probe(data["probe"])
            return
        groups = data.get("groups") or []
        for group in groups:
            key = (group["function"], group["file"])
            self._expected[key] = max(self._expected.get(key, 0), int(group.get("total", 0)))
        if data.get("gates") is not None and groups:
            name = groups[0]["function"]
            if name not in self._reported_gates:
                self._reported_gates[name] = Gates.from_dict(data["gates"], f"the gates {name} reported")
        crash = data.get("crash")
        if crash:
            for group in groups:
                self._crashes.setdefault((group["function"], group["file"]), []).append(crash)
        rollouts = data.get("rollouts")
        if rollouts:
            self.rollout_calls += int(rollouts[0])
            self.rollout_seconds += float(rollouts[1])
        refs = data.get("rows") or ()
        for i, values in enumerate(data.get("outcomes", ())):
            outcome = outcome_from_wire(values)
            key = (outcome.function, outcome.file)
            acc = self._accumulators.get(key)
            if acc is None:
                acc = self._accumulators[key] = GroupAccumulator(
                    outcome.function,
                    outcome.file,
                    self.gates(outcome.function),
                    flaky_spread=self.flaky_spread,
                )
            acc.add(outcome)
            self._outcomes.setdefault(key, []).append(outcome)
            self._rows.setdefault(key, []).append(refs[i] if i < len(refs) else None)
        if "summary" in data:
            summary = Summary.from_dict(data["summary"])
            self._file_groups[(summary.function, summary.file)] = (summary, data)

    def _add_probe(self, data: Mapping[str, Any]) -> None:
        """A probe item's result: its own kind, counted in no sample group. A later report of the same item (a
        teardown that failed after the call reported) adds its crash to the result already known."""
        result = ProbeResult.from_wire(data)
        key = (result.function, result.file, result.probe)
        known = self._probes.get(key)
        if known is not None and result.crashes:
            result = replace(known, verdict="ERROR", crashes=known.crashes + result.crashes)
        self._probes[key] = result

    def probes(self) -> tuple[ProbeResult, ...]:
        """Every probe's result, by function, file and the probe's place in the marker."""
        return tuple(sorted(self._probes.values(), key=lambda p: (p.function, p.file, p.order, p.probe)))

    def _summary(self, key: tuple[str, str], acc: GroupAccumulator) -> Summary:
        return acc.summary(seed=self.seed, n_resamples=self.n_resamples, expected=self._expected.get(key))

    def groups(self) -> tuple[GroupResult, ...]:
        """Every group's summary and gate verdicts, sorted by function and file."""
        crashes = self._crashes

        def group(key: tuple[str, str], summary: Summary, **fields: Any) -> GroupResult:
            declared = self.gates(key[0])
            gated = declares_gates(declared, pairs=summary.preference is not None)
            if not gated:  # no threshold: every scored sample "passes", which is no pass rate to show
                summary = replace(summary, pass_rate=None, gate_pass_ci=None)
            gates = tuple(evaluate_gates(summary, declared))
            return GroupResult(
                key[0], key[1], summary, gates, errors=tuple(crashes.get(key, ())), gated=gated, **fields
            )

        out: list[GroupResult] = []
        for key in crashes.keys() - self._accumulators.keys() - self._file_groups.keys():
            # A group whose only item ended without a verdict: nothing was scored, and it says why.
            acc = GroupAccumulator(key[0], key[1], self.gates(key[0]))
            out.append(group(key, self._summary(key, acc)))
        for key, acc in self._accumulators.items():
            rows = self._rows[key]
            out.append(
                group(
                    key,
                    self._summary(key, acc),
                    outcomes=tuple(self._outcomes[key]),
                    flaky=tuple(acc.flaky),
                    row_refs=tuple(rows) if any(rows) else (),
                )
            )
        for key, (summary, data) in self._file_groups.items():
            rows_file = data.get("rows_file")
            out.append(
                group(
                    key,
                    summary,
                    outcomes=_outcomes(data, "worst"),
                    complete_outcomes=False,
                    preview_pool=_outcomes(data, "preview"),
                    flaky=_outcomes(data, "flaky"),
                    rows_file=Path(rows_file) if rows_file else None,
                    record=data.get("record"),
                )
            )
        out.sort(key=lambda r: (r.function, r.file))
        return tuple(out)


def _outcomes(data: Mapping[str, Any], name: str) -> tuple[SampleOutcome, ...]:
    return tuple(outcome_from_wire(o) for o in data.get(name, ()))
