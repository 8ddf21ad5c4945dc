"""What an item sends to the controller: the reward data of one test report (``report.reward``), written by the
items and read by :mod:`pytest_reward.run.fold`. Under pytest-xdist it crosses the worker → controller channel
(execnet), so it holds plain JSON-able values only: numbers, short strings, lists and dicts of them — never objects.

One format, defined here and nowhere else::

    {
      "verdict": "pass" | "below" | "fail",         # the item's own status (terminal letter, below-threshold)
      "groups": [{"function", "file", "total"}],    # the groups the item contributes to, and their size
      "outcomes": [[field, ...], ...],              # per-sample outcomes, positional (OUTCOME_FIELDS order)
      "gates": {...} | None,                        # an Evaluation item's own gates (the controller has no class)
      "rollouts": [calls, seconds] | None,          # model calls this item caused for prompt-only samples
      "rows": [[path, offset, length], ...] | None, # sample items, with --reward-report: where each outcome's
                                                    # full results.jsonl row is (the outcome keeps bounded texts)
      "crash": "reason" | None,                     # the item ended without a verdict of its own (its groups
                                                    # are errored groups: a fixture error, a timeout, a crash)
      # file-granularity items only (the samples themselves stay on the worker):
      "summary": {...}, "worst": [...], "preview": [...], "flaky": [...],   # outcomes positional as above
      "rows_file": "path" | None, "record": {"key": [...], "score": [...], ...} | None,
    }

A probe item (one reward function × one probe × one samples file, :mod:`pytest_reward.plugin.probe_items`) reports its
own kind, which no sample group counts::

    {
      "verdict": "pass" | "fail",
      "probe": {"function", "file", "probe", "rule", "doc", "verdict": "PASS" | "FAIL" | "INFO" | "SKIP" | "ERROR",
                "checked", "broken", "not_applicable", "errors", "passing", "floor", "ceiling", "threshold",
                "mean_original", "mean_mutated", "note", "order", "crash": "reason" | None,
                "examples": [{"line", "id", "original", "mutated", "original_score", "score", "problem",
                              "reason"}, ...]},   # the first counter-examples, texts cut to EXCERPT characters
    }

Per-sample outcomes travel positionally (a list of values in :data:`OUTCOME_FIELDS` order), not as dicts: one
sample item's report is a few hundred bytes, and the field names are not repeated for every sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .results import SampleOutcome, outcome_fields

__all__ = [
    "OUTCOME_FIELDS",
    "crash_data",
    "file_data",
    "outcome_from_wire",
    "outcome_to_wire",
    "outcomes_data",
    "probe_data",
]

OUTCOME_FIELDS: tuple[str, ...] = outcome_fields()


def outcome_to_wire(outcome: SampleOutcome) -> list[Any]:
    """The outcome's fields as a list, in :data:`OUTCOME_FIELDS` order."""
    return [getattr(outcome, name) for name in OUTCOME_FIELDS]


def outcome_from_wire(values: Iterable[Any]) -> SampleOutcome:
    return SampleOutcome(*values)


def outcomes_data(
    groups: list[dict[str, Any]],
    outcomes: Iterable[SampleOutcome],
    verdict: str,
    *,
    rollouts: list[float] | None = None,
    gates: Mapping[str, Any] | None = None,
    rows: list[Any] | None = None,
) -> dict[str, Any]:
    """The report data of an item that reports per-sample outcomes (sample items, line errors, evaluations)."""
    data: dict[str, Any] = {
        "verdict": verdict,
        "groups": groups,
        "outcomes": [outcome_to_wire(o) for o in outcomes],
    }
    if rollouts:
        data["rollouts"] = rollouts
    if gates is not None:
        data["gates"] = dict(gates)
    if rows:
        data["rows"] = rows
    return data


def file_data(
    *,
    verdict: str,
    summary: dict[str, Any],
    worst: Iterable[SampleOutcome],
    preview: Iterable[SampleOutcome],
    flaky: Iterable[SampleOutcome],
    rows_file: str | None,
    record: dict[str, list[Any]] | None,
    rollouts: list[float] | None,
) -> dict[str, Any]:
    """The report data of a file-granularity item: the group's summary and the few outcomes reports show."""
    return {
        "verdict": verdict,
        "summary": summary,
        "worst": [outcome_to_wire(o) for o in worst],
        "preview": [outcome_to_wire(o) for o in preview],
        "flaky": [outcome_to_wire(o) for o in flaky],
        "rows_file": rows_file,
        "record": record,
        "rollouts": rollouts,
    }


def crash_data(
    groups: list[dict[str, Any]],
    reason: str,
    outcomes: Iterable[SampleOutcome] = (),
    *,
    gates: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report data of an item that ended without a verdict of its own: its groups are errored, with
    ``reason``; a sample item also counts its sample as an errored sample (``outcomes``)."""
    data = outcomes_data(groups, outcomes, "fail", gates=gates)
    data["crash"] = reason
    return data


def probe_data(verdict: str, **probe: Any) -> dict[str, Any]:
    """The report data of a probe item: its result (plain values: numbers, short strings, lists and dicts of
    them) under ``"probe"``; ``verdict`` is the probe's (``PASS``, ``FAIL``, ``INFO``, ``SKIP``, ``ERROR``)."""
    probe["verdict"] = verdict
    return {"verdict": "fail" if verdict in ("FAIL", "ERROR") else "pass", "probe": probe}
