"""Collectors and test items: a samples file, function × sample items, function × file items, error items."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _pytest._code.code import ExceptionInfo, TerminalRepr
from _pytest._io import TerminalWriter

from .results import BELOW, FAIL, GroupAccumulator, SampleOutcome, row_json
from .samples import Sample, SampleError, count_lines, iter_samples
from .scoring import InvalidResult, Invoker, describe_exception, error_outcome
from .session import REWARD_DATA, RewardSession, session_key

if TYPE_CHECKING:
    from .discovery import RewardFn

__all__ = ["FileItem", "LineErrorItem", "SampleItem", "SamplesFile"]

_PACKAGE_DIR = str(Path(__file__).resolve().parent)


class RewardFailure(Exception):
    """A verdict (not a crash): the message is the whole report."""

    def __init__(self, headline: str, details: list[str]) -> None:
        super().__init__(headline)
        self.headline = headline
        self.details = details


class _Crash:
    """The ``reprcrash`` of our reports: pytest uses ``message`` for the short summary line."""

    def __init__(self, path: str, lineno: int, message: str) -> None:
        self.path = path
        self.lineno = lineno
        self.message = message


class RewardRepr(TerminalRepr):
    """A failure report: verdict line, context lines, then (for crashes) the user's traceback."""

    def __init__(
        self, headline: str, lines: Sequence[str], inner: Any = None, location: tuple[str, int] = ("", 0)
    ) -> None:
        self.headline = headline
        self.lines = list(lines)
        self.inner = inner
        self.reprcrash = _Crash(location[0], location[1], headline)

    def toterminal(self, tw: TerminalWriter) -> None:
        tw.line(self.headline, red=True, bold=True)
        for line in self.lines:
            tw.line(line)
        if self.inner is not None:
            tw.line("")
            self.inner.toterminal(tw)


def _truncate(text: str | None, limit: int) -> str:
    if text is None:
        return "∅"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_outcome(outcome: SampleOutcome, fn: RewardFn, verbosity: int) -> list[str]:
    """Context lines of a failing sample: where it is, the conversation, scores, metrics."""
    width = 400 if verbosity > 0 else 120
    lines = [
        f"  sample     {outcome.file}:{outcome.line}  [{outcome.sample_id}]",
        f"  function   {fn.name}  ({fn.path.name}:{fn.lineno})",
        f"  user       {_truncate(outcome.user, width)}",
        f"  assistant  {_truncate(outcome.response, width)}",
    ]
    if outcome.score is not None:
        gate = f"  (threshold {fn.gates.threshold:g})" if fn.gates.threshold is not None else ""
        lines.append(f"  score      {outcome.score:.4g}{gate}")
    if outcome.reason:
        lines.append(f"  reason     {_truncate(outcome.reason, width)}")
    if outcome.metrics:
        lines.append("  metrics")
        name_w = max(len(n) for n in outcome.metrics)
        for name, m in outcome.metrics.items():
            flag = "" if m.get("valid", True) else "  (invalid)"
            lines.append(f"    {name:<{name_w}}  {m['score']:.4g}  {_truncate(m.get('reason'), width)}{flag}")
    for problem in outcome.failures[1:]:
        lines.append(f"  also       {problem}")
    return lines


def _user_frames(excinfo: ExceptionInfo[BaseException]) -> Any:
    """Traceback without pytest, pluggy or pytest-reward frames (and without __tracebackhide__ frames)."""
    tb = excinfo.traceback.filter(excinfo)
    return tb.filter(
        lambda entry: (
            not str(entry.path).startswith(_PACKAGE_DIR)
            and "/_pytest/" not in str(entry.path)
            and "/pluggy/" not in str(entry.path)
        )
    )


def _apply_marks(item: pytest.Item, fn: RewardFn) -> None:
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
        self, excinfo: ExceptionInfo[BaseException], headline: str, lines: list[str]
    ) -> RewardRepr:
        inner = None
        if self._style() not in ("no", "line") and len(_user_frames(excinfo)):
            inner = excinfo.getrepr(style=self._style(), tbfilter=_user_frames, truncate_locals=True)  # type: ignore[arg-type]
        elif self._style() != "no":
            lines = [*lines, f"  error      {describe_exception(excinfo.value)}"]
        return RewardRepr(headline, lines, inner, (str(self.path), self.lineno))

    def set_reward_data(self, data: dict[str, Any]) -> None:
        self.stash[REWARD_DATA] = data


class _RewardItem(_Located, pytest.Item):
    """A plain item (no fixtures): cheap to build by the thousand."""

    @classmethod
    def from_parent(cls, parent: pytest.Collector, **kw: Any) -> Any:  # type: ignore[override]
        # pytest >= 9.2 parses "name[params]" out of string node ids; give it the string form so that the
        # structured id of the item equals the one parsed back from --lf caches, --deselect, etc.
        kw.setdefault("nodeid", f"{parent.nodeid}::{kw['name']}")
        return super().from_parent(parent, **kw)


class SampleItem(_RewardItem):
    """One reward function on one sample."""

    def __init__(
        self,
        *,
        fn: RewardFn,
        invoker: Invoker,
        sample: Sample,
        group: dict[str, Any],
        batch: BatchScheduler | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fn = fn
        self.invoker = invoker
        self.sample = sample
        self.group = group
        self.batch = batch
        self.lineno = sample.line - 1
        self.outcome: SampleOutcome | None = None
        _apply_marks(self, fn)

    def _record(self, outcome: SampleOutcome) -> None:
        self.outcome = outcome
        if outcome.score is not None:
            self.user_properties.append(("reward.score", outcome.score))
        for name, m in outcome.metrics.items():
            self.user_properties.append((f"reward.metric.{name}", m["score"]))
        self.user_properties.append(("reward.verdict", outcome.verdict))
        self.set_reward_data(
            {"groups": [self.group], "outcomes": [outcome.to_dict()], "verdict": outcome.verdict}
        )

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
            raise RewardFailure(
                outcome.failures[0], describe_outcome(outcome, self.fn, self.config.get_verbosity())
            )
        start = time.perf_counter()
        if self.batch is not None:
            outcome = self.batch.outcome_for(sample)
            self._record(outcome)
        else:
            try:
                result, runs = self.invoker.call(sample)
            except InvalidResult as exc:
                outcome = self.invoker.outcome(
                    sample, None, error=str(exc), duration=time.perf_counter() - start
                )
                self._record(outcome)
                headline, *detail = str(exc).splitlines()
                lines = describe_outcome(outcome, self.fn, self.config.get_verbosity())
                raise RewardFailure(headline, lines + [f"  {d}" for d in detail if d.strip()]) from None
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
            raise RewardFailure(
                outcome.failures[0], describe_outcome(outcome, self.fn, self.config.get_verbosity())
            )

    def repr_failure(self, excinfo: ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(
                excinfo.value.headline, excinfo.value.details, None, (str(self.path), self.lineno)
            )
        outcome = self.outcome
        context = describe_outcome(outcome, self.fn, self.config.get_verbosity()) if outcome else []
        headline = f"{self.fn.name} raised {describe_exception(excinfo.value)}"
        return self._crash_repr(excinfo, headline.splitlines()[0], context)


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

    def runtest(self) -> None:
        outcomes = [
            error_outcome(fn.name, self.file_label, self.error, self.error.message) for fn in self.functions
        ]
        self.set_reward_data(
            {"groups": self.groups, "outcomes": [o.to_dict() for o in outcomes], "verdict": FAIL}
        )
        raise RewardFailure(f"{self.file_label}:{self.error.line}: {self.error.message}", [])

    def repr_failure(self, excinfo: ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
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

    def __init__(self, *, fn: RewardFn, invoker: Invoker, rs: RewardSession, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fn = fn
        self.invoker = invoker
        self.rs = rs
        _apply_marks(self, fn)  # type: ignore[arg-type]

    def _job(self) -> Any:
        """The model that rolls out prompt-only samples (only called when ``rollout_settings`` is not None)."""
        raise NotImplementedError

    def rollout_settings(self) -> Any:
        """How this item's function has prompt-only samples rolled out; None: it has no model to do it."""
        return None

    def _outcomes(self) -> Iterator[SampleOutcome]:
        settings = self.rs.settings
        fn_name, label = self.fn.name, self.invoker.file_label
        seen_ids: dict[str, int] = {}
        segment = self.SEGMENT
        if self.invoker.batch:  # whole batches of a batch-mode function
            batch = max(1, settings.batch_size)
            segment = batch * max(1, segment // batch)
        rolling = self.rollout_settings()
        chunk_size = self.rs.rollouts.chunk_size if rolling is not None else 0
        answered: list[Sample] = []
        prompts: list[Sample] = []
        chunk_index = 0

        def score(samples: list[Sample]) -> Iterator[SampleOutcome]:
            if samples:
                yield from self.invoker.score_stream(
                    samples, workers=settings.workers, chunk=settings.batch_size
                )

        for record in iter_samples(self.path, max_line_bytes=settings.max_line_bytes):
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
                            yield from score(answered)  # keep rows roughly in file order
                            answered = []
                            yield from self._roll(prompts, chunk_index, rolling)
                            prompts = []
                            chunk_index += 1
                        continue
            if problem is not None:
                yield from score(answered)  # rows stay in file order
                answered = []
                yield error_outcome(fn_name, label, record, problem)
                continue
            answered.append(record)  # type: ignore[arg-type]
            if len(answered) >= segment:
                yield from score(answered)
                answered = []
        yield from score(answered)
        if prompts:
            yield from self._roll(prompts, chunk_index, rolling)  # type: ignore[arg-type]

    def _roll(self, samples: list[Sample], index: int, rolling: Any) -> Iterator[SampleOutcome]:
        from .rollouts import score_responses

        label, pool = self.invoker.file_label, self.rs.rollouts
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
        invoker.light = True  # key and excerpt only for the outcomes kept below
        pool = self.rs.rollouts if self.rollout_settings() is not None else None
        before = (pool.calls, pool.seconds) if pool is not None else (0, 0.0)
        pending: list[str] = []  # rows written in blocks, not one write call per sample
        try:
            for outcome in self._outcomes():
                acc.add(outcome)
                reservoir.offer(outcome)
                if rows is not None or record is not None:
                    invoker.fill_key(outcome)
                if rows is not None:
                    pending.append(row_json(outcome))
                    if len(pending) >= 4096:
                        rows.write("\n".join(pending) + "\n")
                        pending.clear()
                if record is not None:
                    record.add(outcome)
                if outcome.verdict == FAIL:
                    n_failing += 1
                    if len(failing) < self.WORST:
                        failing.append(outcome)
                elif outcome.score is not None:
                    lowest.append(outcome)
                    if len(lowest) > 4 * self.WORST:
                        lowest.sort(key=_by_score)
                        del lowest[self.WORST :]
        finally:
            if rows is not None:
                if pending:
                    rows.write("\n".join(pending) + "\n")
                rows.close()
        lowest.sort(key=_by_score)
        summary = acc.summary(seed=settings.seed, n_resamples=settings.n_resamples)
        worst = failing + lowest[: max(0, self.WORST - len(failing))]
        for outcome in (*worst, *reservoir.items, *acc.flaky):
            invoker.complete(outcome)
        self.user_properties.extend([("reward.n", summary.n), ("reward.failed", n_failing)])
        if summary.mean is not None:
            self.user_properties.append(("reward.mean", summary.mean))
        self.set_reward_data(
            {
                "summary": summary.to_dict(),
                "worst": [o.to_dict() for o in worst],
                "preview": [o.to_dict() for o in reservoir.items],
                "flaky": [o.to_dict() for o in acc.flaky],
                "rows_file": rows.name if rows is not None else None,
                "record": record.columns if record is not None else None,
                "verdict": FAIL if n_failing else "pass",
                "rollouts": _rollout_delta(pool, before) if pool is not None else None,
            }
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
            raise RewardFailure(
                f"{n_failing} of {summary.n} samples failed ({self.fn.name} on {label})", lines
            )

    def repr_failure(self, excinfo: ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(excinfo.value.headline, excinfo.value.details, None, (str(self.path), 0))
        if isinstance(excinfo.value, pytest.fail.Exception) and not excinfo.value.pytrace:
            return str(excinfo.value)  # e.g. the inference_job fixture could not load the model
        return self._crash_repr(  # type: ignore[attr-defined]
            excinfo, f"{self.fn.name} on {self.invoker.file_label}: {describe_exception(excinfo.value)}", []
        )


class RecordColumns:
    """What a stored run keeps of each sample (key, score, verdict, id, line), as plain columns: cheap to build
    while streaming and to ship to the controller, so the controller need not re-read the rows."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {"key": [], "score": [], "verdict": [], "id": [], "line": []}

    def add(self, outcome: SampleOutcome) -> None:
        c = self.columns
        c["key"].append(outcome.key)
        c["score"].append(outcome.score)
        c["verdict"].append(outcome.verdict)
        c["id"].append(outcome.sample_id)
        c["line"].append(outcome.line)


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
        if self.size <= 0:
            return
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append(outcome)
            return
        j = self._rng.randrange(self.seen)
        if j < self.size:
            self.items[j] = outcome


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


class SamplesFile(pytest.File):
    """A JSONL samples file: items for every reward function that meets it."""

    def collect(self) -> Iterator[pytest.Item]:
        rs = self.config.stash[session_key]
        registry = rs.discover(self.session)
        errors = registry.pop_errors()
        if len(errors) == 1:
            raise self.CollectError(errors[0])
        if errors:
            raise self.CollectError("invalid reward functions:\n" + "\n".join(f"  {e}" for e in errors))
        _, explicit, globbed = rs.wants_file(self.path)
        functions = [
            fn for fn in rs.functions_for(self.path, explicit=explicit, globbed=globbed) if fn.error is None
        ]
        if not functions:
            return
        settings = rs.settings
        label = rs.rel(self.path)
        granularity = settings.granularity
        if granularity == "auto":
            lines = count_lines(self.path, limit=settings.max_items_per_file)
            granularity = "sample" if lines <= settings.max_items_per_file else "file"
        if granularity == "file":
            yield from self._file_items(rs, functions, label)
            return
        yield from self._sample_items(rs, functions, label)

    def _file_items(self, rs: RewardSession, functions: list[RewardFn], label: str) -> Iterator[pytest.Item]:
        from .fixtures import overrides_inference_job

        settings = rs.settings
        if not (settings.model or overrides_inference_job(self.config)):
            for fn in functions:
                yield FileItem.from_parent(
                    self, name=fn.name, fn=fn, invoker=Invoker(fn, label, runs=settings.runs), rs=rs
                )
            return
        # A model is at hand: items that can roll out the file's prompt-only samples, if it has any (the file is
        # not read at collection; the model is loaded only when a prompt-only sample is met).
        fixtureinfo = self.session._fixturemanager.getfixtureinfo(node=self, func=_lazy_model, cls=None)
        for fn in functions:
            item = ModelFileItem.from_parent(
                self,
                name=fn.name,
                callobj=_lazy_model,
                fixtureinfo=fixtureinfo,
                fn=fn,
                invoker=Invoker(fn, label, runs=settings.runs),
                rs=rs,
            )
            rs.rollouts.expect_reader(label, item.rollout_settings())
            yield item

    def _sample_items(
        self, rs: RewardSession, functions: list[RewardFn], label: str
    ) -> Iterator[pytest.Item]:
        settings = rs.settings
        samples: list[Sample] = []
        errors: list[SampleError] = []
        seen: dict[str, int] = {}
        for record in iter_samples(self.path, max_line_bytes=settings.max_line_bytes):
            if isinstance(record, SampleError):
                errors.append(record)
            elif record.id is not None and record.id in seen:
                errors.append(
                    SampleError(
                        record.path,
                        record.line,
                        f"duplicate id {record.id!r} (first at line {seen[record.id]})",
                    )
                )
            else:
                if record.id is not None:
                    seen[record.id] = record.line
                samples.append(record)
        if not samples and not errors:
            errors.append(SampleError(self.path, 1, "the file has no samples (it is empty)"))
        total = len(samples) + len(errors)
        groups = {fn.name: {"function": fn.name, "file": label, "total": total} for fn in functions}
        for err in errors:
            yield LineErrorItem.from_parent(
                self,
                name=err.label,
                error=err,
                functions=functions,
                file_label=label,
                groups=list(groups.values()),
            )
        fixtureinfo = None
        for fn in functions:
            invoker = Invoker(fn, label, runs=settings.runs)
            batch = (
                BatchScheduler(invoker, [s for s in samples if not s.prompt_only], settings.batch_size)
                if invoker.batch
                else None
            )
            for sample in samples:
                name = f"{fn.name}[{sample.label}]"
                if sample.prompt_only:
                    if fixtureinfo is None:
                        # The same for every rollout item of this file: resolved once, not per item.
                        fixtureinfo = self.session._fixturemanager.getfixtureinfo(
                            node=self, func=_needs_model, cls=None
                        )
                    yield RolloutSampleItem.from_parent(
                        self,
                        name=name,
                        callobj=_needs_model,
                        fixtureinfo=fixtureinfo,
                        fn=fn,
                        invoker=invoker,
                        sample=sample,
                        group=groups[fn.name],
                    )
                    continue
                yield SampleItem.from_parent(
                    self, name=name, fn=fn, invoker=invoker, sample=sample, group=groups[fn.name], batch=batch
                )
        prompt_only = [s for s in samples if s.prompt_only]
        if prompt_only:
            rs.rollouts.register(label, prompt_only)


# --- items that need the session's model ------------------------------------------------------------------


def _needs_model(inference_job: Any) -> None:
    """Stand-in test function of model-backed items: it makes pytest resolve the ``inference_job`` fixture."""


class _ModelItem(_Located, pytest.Function):
    """A ``pytest.Function`` (so that it can use fixtures) reporting like our other items."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # pytest >= 9.2 builds a Function's structured id from ``name`` without splitting off ``[...]``; give it
        # the id pytest parses back from --lf caches and --deselect (as _RewardItem.from_parent does).
        try:
            from _pytest.nodeid import coerce_node_id
        except ImportError:  # pytest < 9.2: node ids are plain strings
            return
        self._id = coerce_node_id(f"{self.parent.nodeid}::{self.name}")  # type: ignore[union-attr]

    def repr_failure(self, excinfo: ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:  # type: ignore[override]
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(
                excinfo.value.headline, excinfo.value.details, None, (str(self.path), self.lineno)
            )
        if isinstance(excinfo.value, pytest.fail.Exception) and not excinfo.value.pytrace:
            return str(excinfo.value)
        inner = excinfo.getrepr(style="long", tbfilter=_user_frames, truncate_locals=True)  # type: ignore[arg-type]
        return RewardRepr(
            f"{self.name}: {describe_exception(excinfo.value)}".splitlines()[0],
            [],
            inner,
            (str(self.path), self.lineno),
        )


class FileItem(_FileRun, _RewardItem):
    """A reward function on a whole samples file, without a model (prompt-only samples are line errors)."""


def _lazy_model(request: Any) -> None:
    """Stand-in test function of file items that may need the model: the ``inference_job`` fixture is asked
    for only when the stream meets a prompt-only sample (a file without any never loads the model)."""


class ModelFileItem(_FileRun, _ModelItem):
    """A reward function on a whole samples file, rolling out its prompt-only samples with ``inference_job``."""

    def _job(self) -> Any:
        return self._request.getfixturevalue("inference_job")

    def rollout_settings(self) -> Any:
        return self.rs.rollout_settings(self.fn.gates.rollout_map)


class RolloutSampleItem(_ModelItem):
    """A prompt-only sample: rolled out by the session's model (``n`` responses), each response scored."""

    def __init__(
        self, *, fn: RewardFn, invoker: Invoker, sample: Sample, group: dict[str, Any], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.fn = fn
        self.invoker = invoker
        self.sample = sample
        self.group = group
        self.lineno = sample.line - 1
        _apply_marks(self, fn)

    def runtest(self) -> None:
        __tracebackhide__ = True
        from .rollouts import score_responses

        rs = self.config.stash[session_key]
        job = self.funcargs["inference_job"]
        settings = rs.rollout_settings(self.fn.gates.rollout_map)
        sample = self.sample
        start = time.perf_counter()
        pool = rs.rollouts
        before = (pool.calls, pool.seconds)
        try:
            responses = pool.responses(job, self.invoker.file_label, sample, settings)
        except (ValueError, RuntimeError) as exc:  # e.g. a prompt longer than the model's context
            outcome = self.invoker.outcome(sample, None, error=f"rollout failed: {exc}")
            self._record(outcome, _rollout_delta(pool, before))
            raise RewardFailure(
                outcome.failures[0], describe_outcome(outcome, self.fn, self.config.get_verbosity())
            ) from None
        rolled = _rollout_delta(pool, before)
        outcome = score_responses(self.invoker, sample, responses, catch=False, start=start)
        self._record(outcome, rolled)
        if outcome.verdict == FAIL:
            raise RewardFailure(
                outcome.failures[0], describe_outcome(outcome, self.fn, self.config.get_verbosity())
            )

    def _record(self, outcome: SampleOutcome, rollouts: list[float] | None) -> None:
        if outcome.score is not None:
            self.user_properties.append(("reward.score", outcome.score))
        self.user_properties.append(("reward.verdict", outcome.verdict))
        data = {"groups": [self.group], "outcomes": [outcome.to_dict()], "verdict": outcome.verdict}
        if rollouts:
            data["rollouts"] = rollouts
        self.set_reward_data(data)


def _rollout_delta(pool: Any, before: tuple[int, float]) -> list[float] | None:
    """The model calls (and seconds) an item caused, for the session's count (summed over xdist workers)."""
    calls = pool.calls - before[0]
    return [calls, pool.seconds - before[1]] if calls else None


class EvaluationItem(_ModelItem):
    """An ``Evaluation`` subclass (``pytest_reward.jax.evaluation``) run on the session's model: one outcome per
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

    def runtest(self) -> None:
        __tracebackhide__ = True
        from .jax.evaluation import EvaluationError
        from .models import EvaluateResult, MetricResult
        from .results import judge

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
                samples = instance.evaluate_samples(job)
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
        self.set_reward_data(
            {
                "groups": [group],
                "outcomes": [o.to_dict() for o in outcomes],
                "gates": self.gates.to_dict(),
                "verdict": FAIL if any(o.verdict == FAIL for o in outcomes) else "pass",
            }
        )
        failing = [o for o in outcomes if o.verdict == FAIL]
        if failing:
            lines = [f"  {o.sample_id}: {o.failures[0] if o.failures else o.error}" for o in failing[:20]]
            if len(failing) > 20:
                lines.append(f"  … and {len(failing) - 20} more")
            raise RewardFailure(f"{len(failing)} of {len(outcomes)} samples failed ({name})", lines)


class EvaluationsModule(pytest.File):
    """The module of ``Evaluation`` classes listed in ini ``reward_evaluations`` (imported by name, not collected
    as a test module): it yields only the listed classes."""

    def __init__(self, *, module: Any, classes: list[tuple[str, type]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.obj = module
        self.classes = classes

    def collect(self) -> Iterator[pytest.Item]:
        for name, cls in self.classes:
            yield evaluation_item(self, name, cls)


def evaluation_item(collector: pytest.Collector, name: str, cls: type) -> EvaluationItem:
    """The item of an ``Evaluation`` subclass found in a test module; its ``reward`` marks are its gates."""
    from .discovery import _marks_of
    from .thresholds import GateError, validate_marker

    rs = collector.config.stash[session_key]
    gates = rs.settings.defaults
    where = f"@pytest.mark.reward on {rs.rel(collector.path)}::{name}"
    for mark in _marks_of(getattr(collector, "obj", None)) + _marks_of(cls):
        if mark.name == "reward":
            try:
                gates = gates.merged(validate_marker(tuple(mark.args), dict(mark.kwargs), where), "marker")
            except GateError as exc:
                raise collector.CollectError(str(exc)) from None
    return EvaluationItem.from_parent(
        collector,
        name=name,
        callobj=_needs_model,
        evaluation=cls,
        file_label=rs.rel(collector.path),
        gates=gates,
    )


def _excerpt(value: Any, limit: int = 500) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            value = repr(value)
    return value if len(value) <= limit else value[:limit] + "…"


def below_status(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """The terminal status of a sample that missed its threshold but is tolerated by a pass-rate gate."""
    data = getattr(report, "reward", None)
    if report.when == "call" and report.passed and data and data.get("verdict") == BELOW:
        return "below threshold", "b", "BELOW THRESHOLD"
    return None
