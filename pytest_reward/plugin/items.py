"""Test items: a reward function on one sample, on one preference pair, on a whole samples file, a malformed line,
an ``Evaluation``.

Each item's ``runtest`` scores, records the outcome as report data (:mod:`pytest_reward.judge.wire`) and raises
:class:`~pytest_reward.plugin.failure.RewardFailure` for a failing verdict; the collectors that build them are in
:mod:`pytest_reward.plugin.collect`."""

from __future__ import annotations

import itertools
import json
import math
import random
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..data.samples import RewardSampleWarning, Sample, SampleError, truth_lookalike
from ..data.sources import read_samples
from ..errors import EvaluationError, InvalidResult, RewardTimeout
from ..judge.results import FAIL, PASS, TEXT_KEPT, GroupAccumulator, SampleOutcome, bound_texts, row_json
from ..judge.wire import crash_data, file_data, outcomes_data
from ..probes.ledger import FileScores, SampleScores
from ..reward.call import describe_exception
from ..scoring.executors import RewardExecutorWarning, ShipError
from ..scoring.invoker import Invoker, Passed, error_outcome
from ..scoring.pairs import (
    PairFolder,
    PairScored,
    pair_outcome,
    response_names,
    response_samples,
    right_margin,
)
from .failure import RewardFailure, RewardRepr, describe_outcome, user_frames
from .pytest_private import TerminalRepr, structured_node_id
from .session import REWARD_DATA, RewardSession, session_key

if TYPE_CHECKING:
    from ..project.functions import RewardFn

__all__ = [
    "BatchScheduler",
    "EvaluationItem",
    "FileItem",
    "LineErrorItem",
    "ModelFileItem",
    "PairItem",
    "RolloutSampleItem",
    "SampleItem",
    "apply_marks",
    "may_use_model",
    "uses_model",
]


def apply_marks(item: pytest.Item, fn: RewardFn) -> None:
    """The reward function's own marks (skip, xfail, custom) apply to its items."""
    for mark in fn.marks:
        item.add_marker(getattr(pytest.mark, mark.name)(*mark.args, **mark.kwargs))


class _Located:
    """Behaviour shared by all our items (plain or fixture-using): location at the JSONL line, crash reports
    with the user's frames only, reward data for the reports."""

    lineno: int = 0
    path: Path
    name: str
    config: pytest.Config
    stash: Any

    def reportinfo(self) -> tuple[Path, int, str]:
        # Not a suffix of the node id: pytest would otherwise show "relevance.evaluate" as "relevance::evaluate".
        return self.path, self.lineno, f"{self.name} ({self.path.name}:{self.lineno + 1})"

    def _style(self) -> str:
        style = self.config.getoption("tbstyle", "auto")
        return "long" if style == "auto" else style

    def _crash_repr(
        self, excinfo: pytest.ExceptionInfo[BaseException], headline: str, lines: list[str]
    ) -> RewardRepr:
        inner = None
        if self._style() not in ("no", "line") and len(user_frames(excinfo)):
            inner = excinfo.getrepr(style=self._style(), tbfilter=user_frames, truncate_locals=True)  # type: ignore[arg-type]
        elif self._style() != "no":
            lines = [*lines, f"  error      {describe_exception(excinfo.value)}"]
        return RewardRepr(headline, lines, inner, (str(self.path), self.lineno))

    def set_reward_data(self, data: dict[str, Any]) -> None:
        self.stash[REWARD_DATA] = data

    def crash_data(self, reason: str) -> dict[str, Any]:
        """The report data of this item when it ended without a verdict of its own (a fixture error, a timeout,
        a crash): its group(s) become errored groups with the reason, so no artifact can call them passed."""
        raise NotImplementedError


class _RewardItem(_Located, pytest.Item):
    """A plain item (no fixtures): cheap to build by the thousand."""

    @classmethod
    def from_parent(cls, parent: pytest.Collector, **kw: Any) -> Any:  # type: ignore[override]
        # pytest >= 9.2 parses "name[params]" out of string node ids; give it the string form so that the
        # structured id of the item equals the one parsed back from --lf caches, --deselect, etc.
        kw.setdefault("nodeid", f"{parent.nodeid}::{kw['name']}")
        return super().from_parent(parent, **kw)


class _OneSample(_Located):
    """What sample items and rollout items share: one function, one sample, one outcome."""

    fn: RewardFn
    invoker: Invoker
    sample: Sample
    group: dict[str, Any]
    user_properties: list[tuple[str, object]]
    ledger: SampleScores | None = None
    """Where the item leaves its sample's score for the function's probes (None: the function has none)."""

    def _setup(self, fn: RewardFn, invoker: Invoker, sample: Sample, group: dict[str, Any]) -> None:
        self.fn = fn
        self.invoker = invoker
        self.sample = sample
        self.group = group
        self.lineno = sample.line - 1
        self.outcome: SampleOutcome | None = None
        apply_marks(self, fn)  # type: ignore[arg-type]

    def _record(
        self,
        outcome: SampleOutcome,
        rollouts: list[float] | None = None,
        probed: tuple[float | None, bool] | None = None,
    ) -> None:
        # The full row goes to results.jsonl now; the item, its report and the controller keep bounded texts
        # (memory stays flat when a reward returns megabytes of reason on thousands of samples).
        # ``probed``: the score and verdict the probes compare with, when not the outcome's (a pair's chosen one).
        row = self.config.stash[session_key].write_row(row_json(outcome))
        if self.ledger is not None:
            self.ledger.record(self.sample, *(probed or (outcome.score, outcome.verdict == PASS)))
        self.outcome = bound_texts(outcome)
        if outcome.score is not None:
            self.user_properties.append(("reward.score", outcome.score))
        for name, m in outcome.metrics.items():
            self.user_properties.append((f"reward.metric.{name}", m["score"]))
        self.user_properties.append(("reward.verdict", outcome.verdict))
        self.set_reward_data(
            outcomes_data(
                [self.group], [outcome], outcome.verdict, rollouts=rollouts, rows=[row] if row else None
            )
        )

    def _fail(self, outcome: SampleOutcome, headline: str | None = None, detail: Sequence[str] = ()) -> None:
        __tracebackhide__ = True
        lines = describe_outcome(outcome, self.fn, self.config.get_verbosity())
        raise RewardFailure(headline or outcome.failures[0], lines + [f"  {d}" for d in detail if d.strip()])

    def crash_data(self, reason: str) -> dict[str, Any]:
        outcome = error_outcome(self.fn.name, self.invoker.file_label, self.sample, reason)
        return crash_data([self.group], reason, [outcome])

    def _verdict_repr(self, excinfo: pytest.ExceptionInfo[BaseException]) -> RewardRepr | None:
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(
                excinfo.value.headline, excinfo.value.details, None, (str(self.path), self.lineno)
            )
        return None


class SampleItem(_OneSample, _RewardItem):
    """One reward function on one sample."""

    def __init__(
        self,
        *,
        fn: RewardFn,
        invoker: Invoker,
        sample: Sample,
        group: dict[str, Any],
        batch: BatchScheduler | None = None,
        ledger: SampleScores | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._setup(fn, invoker, sample, group)
        self.batch = batch
        self.ledger = ledger

    def runtest(self) -> None:
        __tracebackhide__ = True
        sample = self.sample
        if sample.prompt_only:
            outcome = self.invoker.outcome(
                sample,
                None,
                error="prompt-only sample: it has no response to score "
                "(its messages end with a user turn); give the assistant turn, or pass "
                "--reward-model to roll it out",
            )
            self._record(outcome)
            self._fail(outcome)
        start = time.perf_counter()
        if self.batch is not None:
            outcome = self.batch.outcome_for(sample)
            self._record(outcome)
        else:
            try:
                result, runs = self.invoker.call(sample)
            except (InvalidResult, RewardTimeout) as exc:
                outcome = self.invoker.outcome(
                    sample, None, error=str(exc), duration=time.perf_counter() - start
                )
                self._record(outcome)
                headline, *detail = str(exc).splitlines()
                self._fail(outcome, headline, detail)
            except (Exception, pytest.fail.Exception) as exc:
                self._record(
                    self.invoker.outcome(
                        sample, None, error=describe_exception(exc), duration=time.perf_counter() - start
                    )
                )
                raise
            outcome = self.invoker.outcome(sample, result, runs=runs, duration=time.perf_counter() - start)
            self._record(outcome)
        if outcome.verdict == FAIL:
            self._fail(outcome)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        verdict = self._verdict_repr(excinfo)
        if verdict is not None:
            return verdict
        outcome = self.outcome
        context = describe_outcome(outcome, self.fn, self.config.get_verbosity()) if outcome else []
        headline = f"{self.fn.name} raised {describe_exception(excinfo.value)}"
        return self._crash_repr(excinfo, headline.splitlines()[0], context)


class PairItem(_OneSample, _RewardItem):
    """One reward function on one preference pair (:mod:`pytest_reward.scoring.pairs`): every response scored, the
    pair right when the chosen one scores above every rejected one."""

    def __init__(
        self,
        *,
        fn: RewardFn,
        invoker: Invoker,
        sample: Sample,
        group: dict[str, Any],
        ledger: SampleScores | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._setup(fn, invoker, sample, group)
        self.ledger = ledger

    def runtest(self) -> None:
        __tracebackhide__ = True
        sample, invoker = self.sample, self.invoker
        responses = response_samples(sample)
        start = time.perf_counter()
        if invoker.batch:
            scored = invoker.score_chunk(responses)
        else:
            scored = [invoker.score_one(response) for response in responses]
        outcome = pair_outcome(
            invoker,
            sample,
            [
                (o.score, o.verdict == PASS, o.reason, o.error or (o.failures[0] if o.failures else None))
                for o in scored
            ],
            time.perf_counter() - start,
        )
        self._record(outcome, probed=(scored[0].score, scored[0].verdict == PASS))
        if outcome.verdict == FAIL:
            __tracebackhide__ = True
            width = 400 if self.config.get_verbosity() > 0 else 120
            raise RewardFailure(outcome.failures[0], pair_panel(outcome, sample, self.fn, width))

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        verdict = self._verdict_repr(excinfo)
        if verdict is not None:
            return verdict
        headline = f"{self.fn.name} raised {describe_exception(excinfo.value)}"
        return self._crash_repr(excinfo, headline.splitlines()[0], [])


def _shown(text: Any, width: int) -> str:
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _turns(messages: Sequence[dict[str, Any]], width: int) -> str:
    if len(messages) == 1:
        return _shown(messages[0].get("content"), width)
    return _shown(" | ".join(f"{m.get('role')}: {_shown(m.get('content'), width)}" for m in messages), width)


def pair_panel(outcome: SampleOutcome, sample: Sample, fn: RewardFn, width: int) -> list[str]:
    """The failure panel of a pair: where it is, the context, each response with its score (and reason), why."""
    pair = sample.pair
    assert pair is not None
    info = outcome.extra["pair"]
    lines = [
        f"  pair       {outcome.file}:{outcome.line}  [{outcome.sample_id}]"
        + (f"  subset {pair.subset}" if pair.subset else ""),
        f"  function   {fn.name}  ({fn.path.name}:{fn.lineno})",
    ]
    for message in pair.context:
        lines.append(f"  {message.get('role')!s:<10} {_shown(message.get('content'), width)}")
    if not pair.context:
        lines.append("  context    ∅ (the pair has no prompt)")
    names = response_names(sample)
    name_w = max(10, *(len(n) for n in names))
    for name, response, score, reason in zip(
        names, pair.responses, info["scores"], info["reasons"], strict=True
    ):
        shown = "error" if score is None else f"{score:.4g}"
        lines.append(f"  {name:<{name_w}} score {shown:<8} {_turns(response, width)}")
        if reason:
            lines.append(f"  {'':<{name_w}} reason {_shown(reason, width)}")
    if outcome.ground_truth is not None:
        lines.append(f"  truth      {_shown(outcome.ground_truth, width)}")
    if outcome.score is not None:
        lines.append(f"  margin     {outcome.score:.4g} (chosen minus the best rejected score)")
    lines.append(f"  why        {outcome.failures[0]}")
    return lines


class LineErrorItem(_RewardItem):
    """A malformed line: fails with ``file:line`` and what is wrong; counts as an error for every function."""

    def __init__(
        self,
        *,
        error: SampleError,
        functions: Sequence[RewardFn],
        file_label: str,
        groups: list[dict[str, Any]],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.error = error
        self.functions = functions
        self.file_label = file_label
        self.groups = groups
        self.lineno = error.line - 1

    def _outcomes(self, message: str) -> list[SampleOutcome]:
        return [error_outcome(fn.name, self.file_label, self.error, message) for fn in self.functions]

    def crash_data(self, reason: str) -> dict[str, Any]:
        return crash_data(self.groups, reason, self._outcomes(self.error.message))

    def runtest(self) -> None:
        self.set_reward_data(outcomes_data(self.groups, self._outcomes(self.error.message), FAIL))
        where = self.error.line if self.error.unit == "line" else f"row {self.error.line}"
        raise RewardFailure(f"{self.file_label}:{where}: {self.error.message}", [])

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(excinfo.value.headline, [], None, (str(self.path), self.lineno))
        return super().repr_failure(excinfo)


_NO_MODEL = (
    "no model to roll it out: pass --reward-model PATH_OR_NAME, set ini reward_model, or define an "
    "inference_job fixture in conftest.py"
)


class _FileRun:
    """One reward function on a whole samples file, streamed; fails listing the failing samples.

    Prompt-only samples are rolled out in the pool's chunks as the stream reaches them (when the item has a
    model: :class:`ModelFileItem`), scored, and the chunk handed on to the other functions of the file."""

    WORST = 20
    SEGMENT = 4096
    """Samples with responses are scored in segments of about this many (memory stays flat)."""

    fn: RewardFn
    invoker: Invoker
    rs: RewardSession
    path: Path

    def __init__(
        self,
        *,
        fn: RewardFn,
        invoker: Invoker,
        rs: RewardSession,
        pool_key: str | None = None,
        ledger: FileScores | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fn = fn
        self.invoker = invoker
        """A light one (:attr:`Invoker.light`): keys and excerpts only for the outcomes kept."""
        self.rs = rs
        self.ledger = ledger
        """Where this item leaves the scores of the samples with a response for the function's probes (None: the
        function has none)."""
        self._recording: FileScores | None = None
        self.pool_key = pool_key or invoker.file_label
        """Where the rollout pool shares this file's responses (functions reading it with another field mapping
        read other prompts: a key of their own)."""
        apply_marks(self, fn)  # type: ignore[arg-type]

    def crash_data(self, reason: str) -> dict[str, Any]:
        return crash_data([{"function": self.fn.name, "file": self.invoker.file_label, "total": 0}], reason)

    def _job(self) -> Any:
        """The model that rolls out prompt-only samples (only called when ``rollout_settings`` is not None)."""
        raise NotImplementedError

    def rollout_settings(self) -> Any:
        """How this item's function has prompt-only samples rolled out; None: it has no model to do it."""
        return None

    def _outcomes(
        self, notes: list[str], passes: bool = False
    ) -> Iterator[SampleOutcome | Passed | PairScored]:
        """The file's outcomes in file order, scored by the session's executor (``--reward-executor``); with
        ``passes``, a sample that passed without metrics may come as a :data:`~pytest_reward.scoring.invoker.Passed`
        tuple instead; a preference pair as the outcomes of its responses or as one
        :data:`~pytest_reward.scoring.pairs.PairScored` tuple (``Executor.stream``)."""
        settings = self.rs.settings
        segment = self.SEGMENT
        batch = None
        if self.invoker.batch:  # whole batches of a batch-mode function
            batch = self.invoker.chunk(settings.batch_size)
            segment = batch * max(1, segment // batch)
        return self.rs.executor.stream(
            self.invoker,
            self._entries(),
            segment=segment,
            batch=batch,
            rootdir=self.config.rootpath,
            notes=notes,
            passes=passes,
        )

    def _entries(self) -> Iterator[Sample | SampleOutcome]:
        """The file as the executor sees it: samples to score, and outcomes made here (malformed lines, duplicate
        ids, prompt-only samples without a model, rolled-out prompts: rollouts stay on this process's model)."""
        settings = self.rs.settings
        fn_name, label = self.fn.name, self.invoker.file_label
        seen_ids: dict[str, int] = {}
        rolling = self.rollout_settings()
        chunk_size = self.rs.rollouts.chunk_size if rolling is not None else 0
        prompts: list[Sample] = []
        chunk_index = 0
        own = self._recording
        # Keys (numbered duplicates, response hashes) only when the run stores per-sample data: they cost a hash.
        keys = settings.needs_record or settings.needs_rows
        records = iter(
            read_samples(
                self.path,
                max_line_bytes=settings.max_line_bytes,
                keys=keys,
                fields=settings.fields_for(self.fn.marker),
            )
        )
        first = next(records, None)
        if first is not None:
            warn_truth_lookalike(first, self.fn, self.path)
            records = itertools.chain((first,), records)
        for record in records:
            if record.__class__ is Sample and record.id is None:
                messages = record.messages
                # the usual sample (answered, no id to check), or a pair without an id (its chosen response answers)
                if record.pair is not None or (messages and messages[-1].get("role") != "user"):
                    if own is not None:
                        own.note(record, scored=True)
                    yield record
                    continue
            problem = None
            if isinstance(record, SampleError):
                problem = record.message
            else:
                if record.id is not None:
                    first = seen_ids.setdefault(record.id, record.line)
                    if first != record.line:
                        problem = f"duplicate id {record.id!r} (first at line {first})"
                if problem is None and record.prompt_only:
                    if rolling is None:
                        problem = f"prompt-only sample: {_NO_MODEL}"
                    else:
                        prompts.append(record)
                        if len(prompts) == chunk_size:
                            yield from self._roll(prompts, chunk_index, rolling)
                            prompts = []
                            chunk_index += 1
                        continue
            if own is not None and not isinstance(record, SampleError):
                own.note(record, scored=problem is None)
            if problem is not None:
                yield error_outcome(fn_name, label, record, problem)
                continue
            yield record
        if prompts:
            yield from self._roll(prompts, chunk_index, rolling)

    def _roll(self, samples: list[Sample], index: int, rolling: Any) -> Iterator[SampleOutcome]:
        from ..scoring.rollouts import RolloutFailed, score_responses

        label, pool = self.pool_key, self.rs.rollouts
        try:
            responses = pool.chunk(self._job(), label, index, samples, rolling)
        except (ValueError, RuntimeError, pytest.fail.Exception) as exc:
            # a prompt longer than the model's context, or no model at all (the fixture failed): these samples
            # fail with the reason, the file's other samples are still scored
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            for sample in samples:
                yield self.invoker.outcome(sample, None, error=f"rollout failed: {reason}")
            return
        finally:
            pool.consumed(label, index, rolling)
        for sample, texts in zip(samples, responses, strict=True):
            if isinstance(texts, RolloutFailed):
                yield self.invoker.outcome(sample, None, error=f"rollout failed: {texts}")
                continue
            yield score_responses(self.invoker, sample, texts)

    def runtest(self) -> None:
        __tracebackhide__ = True
        label = self.invoker.file_label
        settings = self.rs.settings
        acc = GroupAccumulator(self.fn.name, label, self.fn.gates, flaky_spread=settings.flaky_spread)
        failing: list[SampleOutcome] = []
        n_failing = 0
        lowest: list[SampleOutcome] = []
        reservoir = Reservoir(settings.preview, seed=(settings.seed, self.fn.name, label))
        rows = self.rs.open_rows_part(self.fn.name, label)
        record = RecordColumns() if settings.needs_record else None
        invoker = self.invoker
        pool = self.rs.rollouts if self.rollout_settings() is not None else None
        before = (pool.calls, pool.seconds) if pool is not None else (0, 0.0)
        pending: list[str] = []  # rows written in blocks (≤ 4096 rows, ~1 MB), not one write call per sample
        pending_chars = 0
        notes: list[str] = []
        worst = self.WORST
        # Once ``lowest`` has been cut to the WORST lowest scores, its highest: a later score as high never makes
        # them (ties go to the earlier sample), so a passing sample above it needs no outcome to be kept.
        bar = math.inf
        # Without rows to write or a record to keep, passing samples come as Passed tuples: folded by their score,
        # their outcome made only for those kept below (the preview's reservoir, the lowest scores).
        passes = rows is None and record is None
        add_pass, passed_outcome, previews = acc.add_pass, invoker.passed_outcome, reservoir.size > 0
        own = self.ledger if self.ledger is not None and self.ledger.start() else None
        self._recording = own
        # A preference pair comes scored whole (a PairScored tuple: a right pair is folded as a passing sample is,
        # its outcome made only if kept), or its responses one by one, folded into the pair's outcome. The probes'
        # ledger keeps the chosen response's score, the one they mutate.
        folder = PairFolder(invoker, (lambda s, score, ok: own.record(s.line, score, ok)) if own else None)
        fold, add_pair = folder.add, acc.add_right_pair
        try:
            for outcome in self._outcomes(notes, passes):
                if outcome.__class__ is tuple:
                    first = outcome[0]
                    if first.pair is None:  # a Passed sample
                        score = outcome[1]
                        if own is not None:
                            own.record(first.line, score, True)
                        add_pass(score)
                        make, args = passed_outcome, outcome
                    else:  # a PairScored pair
                        scored = outcome[1]
                        if own is not None:
                            own.record(first.line, scored[0][0], scored[0][1])
                        score = right_margin(scored) if passes else None
                        if score is None:
                            outcome = pair_outcome(invoker, first, scored, outcome[2])
                        else:
                            add_pair(score, first.pair.subset, len(scored))
                            make, args = pair_outcome, (invoker, *outcome)
                else:
                    held = outcome.sample
                    if held is not None and held.pair is not None:
                        outcome = fold(outcome)
                        if outcome is None:
                            continue
                if outcome.__class__ is tuple:
                    kept = None
                    if previews:
                        at = reservoir.place()
                        if at is not None:
                            kept = _kept(make(*args))
                            reservoir.put(at, kept)
                    if score < bar:
                        lowest.append(kept if kept is not None else _kept(make(*args)))
                        if len(lowest) > 4 * worst:
                            lowest.sort(key=_by_score)
                            del lowest[worst:]
                            bar = _by_score(lowest[-1])
                    continue
                if own is not None:
                    own.record(outcome.line, outcome.score, outcome.verdict == PASS)
                acc.add(outcome)
                reservoir.offer(outcome)
                if rows is not None or record is not None:
                    invoker.fill_key(outcome)
                if rows is not None:
                    row = row_json(outcome)
                    pending.append(row)
                    pending_chars += len(row)
                    if len(pending) >= 4096 or pending_chars >= 1 << 20:
                        rows.write("\n".join(pending) + "\n")
                        pending.clear()
                        pending_chars = 0
                if (
                    outcome.failures
                    or outcome.metrics
                    or (outcome.reason and len(outcome.reason) > TEXT_KEPT)
                ):
                    bound_texts(outcome)  # what is kept below (and the flaky list) holds bounded texts
                if record is not None:
                    record.add(outcome)
                if outcome.verdict == FAIL:
                    n_failing += 1
                    if len(failing) < self.WORST:
                        failing.append(outcome)
                elif outcome.score is not None and outcome.score < bar:
                    lowest.append(outcome)
                    if len(lowest) > 4 * worst:
                        lowest.sort(key=_by_score)
                        del lowest[worst:]
                        bar = _by_score(lowest[-1])
            if own is not None:
                own.finish()
        except ShipError as exc:
            pytest.fail(str(exc), pytrace=False)
        finally:
            self._recording = None
            if rows is not None:
                if pending:
                    rows.write("\n".join(pending) + "\n")
                rows.close()
            # workers that died and the chunks retried: the run survived, but the user should know (the warning is
            # attributed to the samples file, line 0: no source line is shown)
            for note in notes:
                warnings.warn_explicit(RewardExecutorWarning(note), RewardExecutorWarning, str(self.path), 0)
        lowest.sort(key=_by_score)
        summary = acc.summary(seed=settings.seed, n_resamples=settings.n_resamples)
        worst = failing + lowest[: max(0, self.WORST - len(failing))]
        for outcome in (*worst, *reservoir.items, *acc.flaky):
            invoker.complete(outcome)
        self.user_properties.extend([("reward.n", summary.n), ("reward.failed", n_failing)])
        if summary.mean is not None:
            self.user_properties.append(("reward.mean", summary.mean))
        self.set_reward_data(
            file_data(
                verdict=FAIL if n_failing else "pass",
                summary=summary.to_dict(),
                worst=worst,
                preview=reservoir.items,
                flaky=acc.flaky,
                rows_file=rows.name if rows is not None else None,
                record=record.columns if record is not None else None,
                rollouts=rollout_delta(pool, before) if pool is not None else None,
            )
        )
        if summary.n == 0:
            raise RewardFailure(f"{label}: no samples", [])
        if n_failing:
            lines = []
            for o in failing:
                lines.append(
                    f"  {o.file}:{o.line} [{o.sample_id}]  {o.failures[0] if o.failures else o.error}"
                )
            if n_failing > len(failing):
                lines.append(f"  … and {n_failing - len(failing)} more")
            what = "samples" if summary.preference is None else "pairs"
            raise RewardFailure(
                f"{n_failing} of {summary.n} {what} failed ({self.fn.name} on {label})", lines
            )

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(excinfo.value.headline, excinfo.value.details, None, (str(self.path), 0))
        if isinstance(excinfo.value, pytest.fail.Exception) and not excinfo.value.pytrace:
            return str(excinfo.value)  # e.g. the inference_job fixture could not load the model
        return self._crash_repr(  # type: ignore[attr-defined]
            excinfo, f"{self.fn.name} on {self.invoker.file_label}: {describe_exception(excinfo.value)}", []
        )


class RecordColumns:
    """What a stored run keeps of each sample (key, score, verdict, id, line, response hash), as plain columns:
    cheap to build while streaming and to ship to the controller, so the controller need not re-read the rows."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {
            "key": [],
            "score": [],
            "verdict": [],
            "id": [],
            "line": [],
            "response": [],
        }

    def add(self, outcome: SampleOutcome) -> None:
        c = self.columns
        c["key"].append(outcome.key)
        c["score"].append(outcome.score)
        c["verdict"].append(outcome.verdict)
        c["id"].append(outcome.sample_id)
        c["line"].append(outcome.line)
        c["response"].append(outcome.response_hash)
        pair = outcome.extra.get("pair") if outcome.extra else None
        if (
            pair is not None or "credit" in c
        ):  # a preference file: each pair's credit and subset (compare flips)
            if "credit" not in c:
                c["credit"], c["subset"] = [None] * (len(c["key"]) - 1), [None] * (len(c["key"]) - 1)
            c["credit"].append(pair["credit"] if pair is not None else None)
            c["subset"].append(pair["subset"] if pair is not None else None)


def _kept(outcome: SampleOutcome) -> SampleOutcome:
    """An outcome a file item keeps, with bounded texts (as its fold bounds every kept outcome's)."""
    if outcome.reason and len(outcome.reason) > TEXT_KEPT:
        bound_texts(outcome)
    return outcome


def _by_score(outcome: SampleOutcome) -> float:
    return outcome.score if outcome.score is not None else float("-inf")


class Reservoir:
    """A seeded uniform sample of ``size`` outcomes from a stream (Algorithm R), for previews of big files."""

    def __init__(self, size: int, *, seed: Any) -> None:
        self.size = size
        self.items: list[SampleOutcome] = []
        self.seen = 0
        self._rng = random.Random(repr(seed))

    def offer(self, outcome: SampleOutcome) -> None:
        at = self.place()
        if at is not None:
            self.put(at, outcome)

    def place(self) -> int | None:
        """Where the stream's next outcome goes (:meth:`put` it there), or None: it is not kept. Draws what
        :meth:`offer` draws: a caller may make the outcome only when it is kept."""
        if self.size <= 0:
            return None
        self.seen += 1
        if len(self.items) < self.size:
            return len(self.items)
        j = self._rng.randrange(self.seen)
        return j if j < self.size else None

    def put(self, at: int, outcome: SampleOutcome) -> None:
        if at == len(self.items):
            self.items.append(outcome)
        else:
            self.items[at] = outcome


class BatchScheduler:
    """Scores a batch-mode function's samples in chunks, ahead of the items that ask for them."""

    def __init__(self, invoker: Invoker, samples: Sequence[Sample], chunk: int) -> None:
        self.invoker = invoker
        self.samples = list(samples)
        self.index = {id(s): i for i, s in enumerate(self.samples)}
        self.chunk = chunk
        self.cache: dict[int, SampleOutcome] = {}

    def outcome_for(self, sample: Sample) -> SampleOutcome:
        key = id(sample)
        if key not in self.cache:
            start = self.index[key]
            block = [s for s in self.samples[start : start + self.chunk] if id(s) not in self.cache]
            for s, outcome in zip(block, self.invoker.score_chunk(block), strict=True):
                self.cache[id(s)] = outcome
        return self.cache.pop(key)


# --- items that need the session's model ------------------------------------------------------------------


def uses_model(inference_job: Any) -> None:
    """Stand-in test function of model-backed items: it makes pytest resolve the ``inference_job`` fixture."""


class _ModelItem(_Located, pytest.Function):
    """A ``pytest.Function`` (so that it can use fixtures) reporting like our other items."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # pytest >= 9.2: the id pytest parses back from --lf caches and --deselect (see pytest_private)
        node_id = structured_node_id(f"{self.parent.nodeid}::{self.name}")  # type: ignore[union-attr]
        if node_id is not None:
            self._id = node_id

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:  # type: ignore[override]
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(
                excinfo.value.headline, excinfo.value.details, None, (str(self.path), self.lineno)
            )
        if isinstance(excinfo.value, pytest.fail.Exception) and not excinfo.value.pytrace:
            return str(excinfo.value)
        inner = excinfo.getrepr(style="long", tbfilter=user_frames, truncate_locals=True)  # type: ignore[arg-type]
        return RewardRepr(
            f"{self.name}: {describe_exception(excinfo.value)}".splitlines()[0],
            [],
            inner,
            (str(self.path), self.lineno),
        )


class FileItem(_FileRun, _RewardItem):
    """A reward function on a whole samples file, without a model (prompt-only samples are line errors)."""


def may_use_model(request: Any) -> None:
    """Stand-in test function of file items that may need the model: the ``inference_job`` fixture is asked
    for only when the stream meets a prompt-only sample (a file without any never loads the model)."""


class ModelFileItem(_FileRun, _ModelItem):
    """A reward function on a whole samples file, rolling out its prompt-only samples with ``inference_job``."""

    def _job(self) -> Any:
        return self._request.getfixturevalue("inference_job")

    def rollout_settings(self) -> Any:
        return self.rs.rollout_settings(self.fn.marker.rollout_map)


class RolloutSampleItem(_OneSample, _ModelItem):
    """A prompt-only sample: rolled out by the session's model (``n`` responses), each response scored."""

    def __init__(
        self,
        *,
        fn: RewardFn,
        invoker: Invoker,
        sample: Sample,
        group: dict[str, Any],
        pool_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._setup(fn, invoker, sample, group)
        self.pool_key = pool_key or invoker.file_label

    def runtest(self) -> None:
        __tracebackhide__ = True
        from ..scoring.rollouts import RolloutFailed, score_responses

        rs = self.config.stash[session_key]
        job = self.funcargs["inference_job"]
        settings = rs.rollout_settings(self.fn.marker.rollout_map)
        sample = self.sample
        start = time.perf_counter()
        pool = rs.rollouts
        before = (pool.calls, pool.seconds)
        try:
            responses = pool.responses(job, self.pool_key, sample, settings)
            if isinstance(responses, RolloutFailed):  # this sample's prompt does not fit the model
                raise responses
        except (ValueError, RuntimeError) as exc:  # e.g. no model, or the engine refused the chunk
            outcome = self.invoker.outcome(sample, None, error=f"rollout failed: {exc}")
            self._record(outcome, rollout_delta(pool, before))
            self._fail(outcome)
        rolled = rollout_delta(pool, before)
        outcome = score_responses(self.invoker, sample, responses, catch=False, start=start)
        self._record(outcome, rolled)
        if outcome.verdict == FAIL:
            self._fail(outcome)


def rollout_delta(pool: Any, before: tuple[int, float]) -> list[float] | None:
    """The model calls (and seconds) an item caused, for the session's count (summed over xdist workers)."""
    calls = pool.calls - before[0]
    return [calls, pool.seconds - before[1]] if calls else None


class EvaluationItem(_ModelItem):
    """An ``Evaluation`` subclass (``pytest_reward.evaluation``) run on the session's model: one outcome per
    evaluation sample, gated by the class's ``@pytest.mark.reward(...)`` like a reward function."""

    def __init__(self, *, evaluation: type, file_label: str, gates: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.evaluation = evaluation
        self.file_label = file_label
        self.gates = gates
        try:
            import inspect as _inspect

            self.lineno = _inspect.getsourcelines(evaluation)[1] - 1
        except (OSError, TypeError):
            self.lineno = 0

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.lineno, self.name

    def crash_data(self, reason: str) -> dict[str, Any]:
        group = {"function": self.evaluation.__name__, "file": self.file_label, "total": 0}
        return crash_data([group], reason, gates=self.gates.to_dict())

    def runtest(self) -> None:
        __tracebackhide__ = True
        from ..judge.results import judge
        from ..reward.models import EvaluateResult, MetricResult

        rs = self.config.stash[session_key]
        job = self.funcargs["inference_job"]
        cls_name = self.evaluation.__name__
        try:
            instance = self.evaluation()
        except TypeError as exc:
            raise RewardFailure(
                f"{cls_name}: cannot construct the evaluation without arguments ({exc})",
                ["an Evaluation collected as a test is built as Class(); give its parameters defaults"],
            ) from None
        name = getattr(instance, "name", None) or cls_name
        try:
            size = len(instance)
        except Exception as exc:
            raise RewardFailure(f"{name}: len() failed: {describe_exception(exc)}", []) from None
        if size == 0:
            raise RewardFailure(f"{name}: the evaluation has no samples (len() is 0)", [])
        try:
            with rs.progress(f"evaluating {name} ({size} samples)", size):
                samples = instance.shared_samples(job)  # the same on every process of a multi-host run
        except EvaluationError as exc:
            raise RewardFailure(f"{name}: {exc}", []) from None
        if not samples:
            raise RewardFailure(f"{name}: the evaluation produced no samples", [])
        outcomes = []
        seen: dict[int, int] = {}
        for s in samples:
            # ``samples_per_prompt = n``: n consecutive samples share an index; each keeps its own key.
            k = seen[s.index] = seen.get(s.index, -1) + 1
            ident = f"{s.index}" if k == 0 else f"{s.index}#{k}"
            result = None
            if s.error is None:
                # Evaluation metrics are measurements (nll, token counts, perplexity), not [0, 1] reward
                # components: kept as they are, without the reward-metric range check.
                metrics = {
                    k: MetricResult.model_construct(score=float(v), reason=None, is_score_valid=True)
                    for k, v in (s.metrics or {}).items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                }
                result = EvaluateResult(score=float(s.score), reason=s.reason, metrics=metrics)
            verdict, score, metric_scores, failures, below = judge(result, self.gates, None, error=s.error)
            outcomes.append(
                SampleOutcome(
                    function=name,
                    file=self.file_label,
                    line=self.lineno + 1,
                    sample_id=f"{name}[{ident}]",
                    key=f"eval:{ident}",
                    verdict=verdict,
                    score=score,
                    reason=s.reason,
                    metrics=metric_scores,
                    error=s.error,
                    failures=failures,
                    below=below,
                    user=_excerpt(s.input),
                    response=_excerpt(s.output),
                    extra={"target": _excerpt(s.target)} if s.target is not None else {},
                )
            )
        group = {"function": name, "file": self.file_label, "total": len(outcomes)}
        verdict = FAIL if any(o.verdict == FAIL for o in outcomes) else "pass"
        self.set_reward_data(outcomes_data([group], outcomes, verdict, gates=self.gates.to_dict()))
        failing = [o for o in outcomes if o.verdict == FAIL]
        if failing:
            lines = [f"  {o.sample_id}: {o.failures[0] if o.failures else o.error}" for o in failing[:20]]
            if len(failing) > 20:
                lines.append(f"  … and {len(failing) - 20} more")
            raise RewardFailure(f"{len(failing)} of {len(outcomes)} samples failed ({name})", lines)


def _excerpt(value: Any, limit: int = 500) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            value = repr(value)
    return value if len(value) <= limit else value[:limit] + "…"


def warn_truth_lookalike(sample: Any, fn: RewardFn, path: Path) -> None:
    """One warning per file and function when the samples carry a misspelt ``ground_truth`` (seen on the file's
    first sample) and the function takes ``ground_truth``: it would score every sample against None."""
    if not isinstance(sample, Sample):
        return
    message = truth_lookalike(sample, fn.name, fn.spec.parameters)
    if message is not None:
        warnings.warn_explicit(RewardSampleWarning(message), RewardSampleWarning, str(path), sample.line)
