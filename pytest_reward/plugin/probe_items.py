"""Probe items: one reward function × one reward-hacking probe × one samples file (:mod:`pytest_reward.probes`).

For each sample with a response the item builds the mutated response, scores it through the function's
:class:`~pytest_reward.scoring.invoker.Invoker` and the session's executor (``--reward-executor``) — the path the samples
take: ``--reward-runs``, timeouts, private copies of the inputs, batch mode, ``--reward-workers``, worker processes or
Ray, and the verdict logic are the same — and checks the probe's rule.
The rule needs what the function gives the samples' *own* responses (the floor, the original score of each sample):
a :class:`ProbeTarget` that the function's probe items share takes them from the ledger collection handed to it and
to the items that score the samples (:mod:`pytest_reward.probes.ledger`: each sample item's score; in ``file``
granularity, what the file item kept as it streamed the file, one float and two bytes per sample) and scores only
the samples no such item scored in this process. A probe never changes a
real sample's score and never counts in its group. In ``file`` granularity the target streams the file for the
mutations (and, for the samples it must score itself, once before), so memory stays flat.

A failing item lists the counter-examples: the original response and the mutated one, both scores, the rule.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import sys
import warnings
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..data.samples import Sample
from ..data.sources import read_samples
from ..judge.gates import reference_name
from ..judge.results import PASS
from ..judge.stats import wilson_interval
from ..judge.wire import probe_data
from ..probes import (
    Probe,
    ProbeRegistry,
    ProbeSample,
    RewardAbstainWarning,
    Rule,
    floor_of,
    passes,
    with_response_text,
)
from ..probes.ledger import FileScores, SampleScores, text_of
from ..project.functions import RewardFn
from ..reward.call import MISSING, describe_exception, owned_messages, private_copy
from ..reward.decorator import get_spec
from ..scoring.executors import InProcess, RewardExecutorWarning, ShipError
from ..scoring.invoker import Checked, Invoker
from .failure import RewardFailure, RewardRepr, user_frames
from .items import apply_marks
from .pytest_private import TerminalRepr, skip_at_item
from .session import REWARD_DATA, RewardSession

__all__ = ["PROBES_KEY", "ProbeItem", "ProbeRun", "ProbeTarget", "run_probe", "session_probes"]

PROBES_KEY = pytest.StashKey[ProbeRegistry]()
#: Counter-examples an item keeps (and its report carries); the failure shows the first few.
EXAMPLES_KEPT = 20
EXAMPLES_SHOWN = 5
#: Characters of a response a counter-example keeps.
EXCERPT = 500


def session_probes(config: pytest.Config) -> ProbeRegistry:
    """The probes this process knows: built-ins, ``@pytest_reward.probe`` ones, and the ``pytest_reward_probes``
    hook's (called once, on first use)."""
    registry = config.stash.get(PROBES_KEY, None)
    if registry is None:
        registry = ProbeRegistry()
        config.hook.pytest_reward_probes(probes=registry, config=config)
        config.stash[PROBES_KEY] = registry
    return registry


# --- the samples a probe sees, and what their own responses score -----------------------------------------------


@dataclass
class Originals:
    """What the function gives the samples' own responses, aligned with :meth:`ProbeTarget.answered`."""

    scores: array = field(default_factory=lambda: array("d"))
    """One per sample; NaN: no valid score (an error, an invalid result)."""
    verdict_pass: bytearray = field(default_factory=bytearray)
    floor: float = 0.0
    ceiling: float | None = None
    passed: bytearray = field(default_factory=bytearray)
    """Whether each sample's own response passes (see :func:`pytest_reward.probes.passes`)."""
    all_pass: bool = False
    """Every sample's own response passes (so the floor is a passing score)."""

    def score(self, index: int) -> float | None:
        value = self.scores[index]
        return None if math.isnan(value) else value


class ProbeTarget:
    """One reward function on one samples file, as its probes see it: the samples whose conversation ends with an
    assistant turn of text, and what the function scores their own responses (scored once per process, on first
    use, shared by the function's probe items of this file)."""

    SEGMENT = 4096
    """Samples scored per round in ``file`` granularity (memory stays flat)."""

    def __init__(
        self,
        fn: RewardFn,
        label: str,
        path: Path,
        rs: RewardSession,
        samples: list[Sample] | None = None,
        *,
        ledger: FileScores | SampleScores | None = None,
    ) -> None:
        self.fn = fn
        self.label = label
        self.path = path
        self.rs = rs
        self.settings = rs.settings
        self.samples = samples
        """The file's samples (``sample`` granularity: read at collection); None: stream the file."""
        self.invoker = Invoker.of(fn, label, self.settings, light=True)  # a probe keeps its own texts
        self.ledger = ledger
        """What the items that score the samples leave of their own scores (:mod:`pytest_reward.probes.ledger`):
        :meth:`originals` takes it and scores only the samples it lacks (None: it scores them all)."""
        self.notes: list[str] = []
        """What the executor had to say (a worker died, a chunk was retried): the next item warns."""
        self._originals: Originals | None = None
        self.reused = 0
        """Samples whose own score :meth:`originals` took from their items (:attr:`ledger`)."""
        self._answered: list[tuple[Sample, str]] | None = None
        self._prepared: list[list[Prepared]] | None = None

    def answered(self) -> Iterator[tuple[Sample, str]]:
        """Every sample with a response, and the response's text, in file order (``sample`` granularity: found
        once and kept with the samples; ``file``: streamed from the file each time)."""
        if self._answered is not None:
            return iter(self._answered)
        if self.samples is not None:
            self._answered = list(self._read(self.samples))
            return iter(self._answered)
        return self._read(
            read_samples(
                self.path,
                max_line_bytes=self.settings.max_line_bytes,
                keys=False,
                fields=dict(self.settings.sample_fields),
            )
        )

    @staticmethod
    def _read(records: Any) -> Iterator[tuple[Sample, str]]:
        # the samples whose scores the items keep in the ledger for the probes: the same
        for record in records:
            text = text_of(record)
            if text is not None:
                yield record, text

    def segments(self) -> Iterator[list[tuple[int, Sample, str]]]:
        """:meth:`answered` numbered, in lists of at most :attr:`SEGMENT`."""
        block: list[tuple[int, Sample, str]] = []
        for index, (sample, text) in enumerate(self.answered()):
            block.append((index, sample, text))
            if len(block) >= self.SEGMENT:
                yield block
                block = []
        if block:
            yield block

    def prepared(self) -> Iterator[list[Prepared]]:
        """:meth:`segments` with what every probe reads of each sample worked out once (its view's fields, its
        original score, the call's ground truth): kept with the samples in ``sample`` granularity (the function's
        probes share it), made block by block in ``file``."""
        if self._prepared is not None:
            return iter(self._prepared)
        blocks = (self._prepare(block) for block in self.segments())
        if self.samples is None:
            return blocks
        self._prepared = list(blocks)
        return iter(self._prepared)

    def _prepare(self, block: list[tuple[int, Sample, str]]) -> list[Prepared]:
        orig = self.originals()
        scores, passed = orig.scores, orig.passed
        out: list[Prepared] = []
        floor = orig.floor
        for index, sample, text in block:
            original: float | None = scores[index]
            if original != original:  # NaN: no valid score
                original = None
            messages = sample.messages or []
            private = private_copy(messages)
            shared, shared_original = _shared(private, messages)
            has_truth = sample.has_ground_truth
            truth = sample.ground_truth if has_truth else None
            fields = sample.kwargs
            view = (
                text,
                messages,
                truth,
                has_truth,
                fields,
                sample.id,
                sample.line,
                original,
                bool(passed[index]),
            )
            call_truth = truth if has_truth else MISSING
            ref = floor if original is None else original
            out.append(
                (
                    index,
                    sample,
                    text,
                    view,
                    messages,
                    private,
                    call_truth,
                    fields,
                    shared,
                    shared_original,
                    ref,
                )
            )
        return out

    def score(self, samples: list[Sample]) -> Iterator[Any]:
        """Outcomes of ``samples``, in order, scored as the function's items score theirs (the session's executor;
        ``ShipError`` when its workers cannot load the function)."""
        batch = self.invoker.chunk(self.settings.batch_size) if self.invoker.batch else None
        return self.rs.executor.stream(
            self.invoker,
            samples,
            segment=self.SEGMENT,
            batch=batch,
            rootdir=self.rs.config.rootpath,
            notes=self.notes,
        )

    def scores_here(self) -> bool:
        """Whether probes score in this thread, each mutation as soon as it is made (:func:`_run_here`): the
        default executor with one worker, no timeout, a pointwise function."""
        executor, invoker = self.rs.executor, self.invoker
        return (
            executor.__class__ is InProcess
            and executor.workers <= 1  # type: ignore[attr-defined]
            and invoker.timeout is None
            and not invoker.batch
        )

    def scored(self, probe: Probe, block: list[Prepared]) -> Iterator[Scored]:
        """``probe``'s mutations of one block, scored together, in order (where :meth:`scores_here` does not hold).
        In this process with one worker and a timeout, as inputs built for one call each (:meth:`Invoker.score_fresh`:
        one watchdog for the block, each call owning a private copy of its conversation); with worker threads,
        processes, Ray or a batch-mode function, as samples through the session's executor. Both are what a
        sample's call gets (the call, ``--reward-runs``, the timeout, private copies, the verdict)."""
        executor, invoker = self.rs.executor, self.invoker
        mutations = _mutations(self, probe, block)
        if probe.batching:
            yield from self._rebatched(probe, mutations)
            return
        if executor.__class__ is InProcess and executor.workers <= 1 and not invoker.batch:  # type: ignore[attr-defined]
            results: Iterable[Checked] = invoker.score_fresh(
                (owned_messages(messages, new), truth, fields)
                for _, _, _, new, messages, truth, fields in mutations
            )
        else:
            variants = [
                _variant(sample, with_response_text(messages, new))
                for _, sample, _, new, messages, _, _ in mutations
            ]
            results = (
                (outcome.score, outcome.verdict == PASS, outcome.reason, outcome.error)
                for outcome in self.score(variants)
            )
        for (index, sample, text, new, *_), checked in zip(mutations, results, strict=True):
            yield (index, sample, text, new, *checked)

    def _rebatched(self, probe: Probe, mutations: list[tuple[Any, ...]]) -> Iterator[Scored]:
        """The samples' own responses (``probe``'s mutations are the identity) scored again, batched another way
        (:attr:`Probe.batching`): in the reverse order, or each in a batch of its own; in the samples' order."""
        variants = [_variant(sample, messages) for _, sample, _, _, messages, _, _ in mutations]
        if probe.batching == "reversed":
            outcomes = list(self.score(variants[::-1]))[::-1]
            how = "the same response, scored with the file in the reverse order"
        else:
            outcomes = list(
                self.rs.executor.stream(
                    self.invoker, variants, segment=self.SEGMENT, batch=1, rootdir=self.rs.config.rootpath,
                    notes=self.notes,
                )
            )
            how = "the same response, scored in a batch of its own"
        for (index, sample, text, *_), outcome in zip(mutations, outcomes, strict=True):
            yield (index, sample, text, f"({how})", outcome.score, outcome.verdict == PASS, outcome.reason,
                   outcome.error)  # fmt: skip

    def originals(self) -> Originals:
        if self._originals is None:
            ledger, taken, seen = self.ledger, None, None
            if isinstance(ledger, FileScores):
                taken = ledger.take()
            elif ledger is not None:
                seen = ledger.take()
            if taken is not None and all(taken[2]):  # every sample's score is the file item's
                orig = Originals(scores=taken[0], verdict_pass=taken[1])
                self.reused += len(orig.scores)
            else:
                orig = self._score_originals(taken, seen)
            valid = [s for s in orig.scores if not math.isnan(s)]
            orig.floor = floor_of(valid)
            orig.ceiling = max(valid) if valid else None
            self._originals = orig
            orig.passed = bytearray(
                self.passes(orig.score(i), bool(orig.verdict_pass[i])) for i in range(len(orig.scores))
            )
            orig.all_pass = bool(orig.passed) and all(orig.passed)
        return self._originals

    def _score_originals(
        self, taken: tuple[array, bytearray, bytearray] | None, seen: dict[int, tuple[float, bool]] | None
    ) -> Originals:
        """The samples' own scores, each taken from the item that scored it in this process (a sample item's,
        ``seen``, by the sample's identity; the file item's, ``taken``, by the sample's number) or scored here."""
        orig = Originals()
        for block in self.segments():
            if seen:
                known = [seen.get(id(sample)) for _, sample, _ in block]
            elif taken is not None:
                scores, verdicts, scored = taken
                known = [
                    (scores[i], bool(verdicts[i])) if i < len(scored) and scored[i] else None
                    for i, _, _ in block
                ]
            else:
                known = [None] * len(block)
            missing = [sample for (_, sample, _), k in zip(block, known, strict=True) if k is None]
            fresh = iter(self.score(missing)) if missing else iter(())
            for k in known:
                if k is None:
                    outcome = next(fresh)
                    k = (math.nan if outcome.score is None else outcome.score, outcome.verdict == PASS)
                else:
                    self.reused += 1
                orig.scores.append(k[0])
                orig.verdict_pass.append(k[1])
        return orig

    def passes(self, score: float | None, verdict_pass: bool) -> bool:
        orig = self.originals()
        return passes(
            score,
            verdict_pass=verdict_pass,
            threshold=self.fn.gates.threshold,
            floor=orig.floor,
            ceiling=orig.ceiling,
        )


# --- one probe on one target ------------------------------------------------------------------------------------


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= EXCERPT:
        return text
    return text[:EXCERPT] + f"… ({len(text)} characters)"


@dataclass
class ProbeRun:
    """What one probe found on one target (the item's report data, :func:`pytest_reward.judge.wire.probe_data`)."""

    probe: Probe
    rule: Rule
    answered: int = 0
    checked: int = 0
    broken: int = 0
    errors: int = 0
    passing: int = 0
    sum_original: float = 0.0
    sum_mutated: float = 0.0
    examples: list[dict[str, Any]] = field(default_factory=list)
    gate: tuple[float, float, float, float | None] | None = None
    """The ``reference`` probe's agreement gate: (bound, agreement, the edge judged, confidence or None)."""

    @property
    def not_applicable(self) -> int:
        return self.answered - self.checked

    def verdict(self) -> str:
        if self.checked == 0:
            return "SKIP"
        if self.gate is not None:
            return "PASS" if self.gate[2] >= self.gate[0] else "FAIL"
        if self.rule.kind == "info":
            return "INFO"
        return "FAIL" if self.broken else "PASS"

    def note(self, target: ProbeTarget) -> str:
        if self.answered == 0:
            return f"no sample of {target.label} has a response to mutate"
        if self.probe.batching == "reference":
            if target.fn.marker.reference is None:
                return f"{target.fn.name} declares no reference= in its marker"
            agreement = f"the two agree on {self.passing} of {self.checked} samples ({self.passing / self.checked:.1%})"
            if self.gate is None:
                return agreement
            bound, _, edge, confidence = self.gate
            judged = "" if confidence is None else f"; the lower edge of its {confidence:g} Wilson score interval is {edge:.1%}"
            return f"{agreement}{judged}; agreement= needs {bound:.1%}"
        if self.probe.batching == "groups":
            if self.checked == 0:
                return f"no prompt of {target.label} has two responses or more"
            return f"{self.broken} of {self.checked} groups of responses to one prompt have no valid score at all"
        if self.checked == 0:
            needs = self.probe.needs or "something to mutate"
            return f"the probe applies to none of the {self.answered} responses (it needs {needs})"
        if self.rule.kind == "info":
            what = "failing responses" if self.probe.name == "ground_truth_leak" else "mutated responses"
            return f"{self.passing} of {self.checked} {what} pass after the mutation"
        orig = target.originals()
        if self.rule.ref == "floor" and orig.all_pass:
            return (
                f"every sample passes, so the floor ({orig.floor:.4g}) is a passing score: add wrong answers to the "
                "samples to give this rule teeth"
            )
        return ""


def run_probe(target: ProbeTarget, probe: Probe, rule: Rule) -> ProbeRun:
    """Mutate every response of ``target`` with ``probe``, score the mutations, check ``rule``. A mutation that
    raises (a custom probe's bug) propagates; a reward that raises on a mutated response breaks the rule."""
    orig = target.originals()
    run = ProbeRun(probe, rule)
    if probe.batching == "groups":
        _abstaining_groups(run, target, orig)
        return run
    if probe.batching == "reference":
        _against_reference(run, target, orig)
        return run
    if probe.batching and not target.invoker.batch:  # a check of batch-mode functions: none to check here
        run.answered = len(orig.scores)
        return run
    here = target.scores_here() and not probe.batching
    for block in target.prepared():
        run.answered += len(block)
        if here:
            _run_here(run, target, block, orig)
        else:
            for scored in target.scored(probe, block):
                _settle(run, orig, target.fn.gates.threshold, *scored)
    return run


def reference_fn(fn: RewardFn, rootdir: Path) -> RewardFn:
    """The marker's ``reference=`` function as a test subject of its own (no gates: only its scores are read),
    importable by workers as the function is: by its module's file when that is a project file (under
    ``rootdir``), by its module's name otherwise (a built-in, an installed package)."""
    ref = fn.marker.reference
    name = getattr(ref, "__module__", "") or ""
    module = sys.modules.get(name, None)
    file = Path(module.__file__).resolve() if getattr(module, "__file__", None) else None
    if file is not None and (name.startswith("pytest_reward.") or not file.is_relative_to(rootdir.resolve())):
        file = None
    source = inspect.getsourcefile(inspect.unwrap(ref)) or str(fn.path)
    try:
        lineno = inspect.getsourcelines(inspect.unwrap(ref))[1]
    except (OSError, TypeError):
        lineno = 0
    spec = get_spec(ref)
    return RewardFn(
        obj=ref,
        spec=spec,
        name=f"{fn.name}.reference",
        qualname=getattr(ref, "__qualname__", spec.name),
        module=getattr(ref, "__module__", "?"),
        path=Path(source),
        lineno=lineno,
        attr=getattr(ref, "__name__", ""),
        module_file=file,
    )


def _against_reference(run: ProbeRun, target: ProbeTarget, orig: Originals) -> None:
    """Every sample scored by the marker's reference function too; ``checked``: the samples, ``broken``: those
    the two score more than ``reference_tolerance`` apart (or only one of them validly), an example each with both
    scores and both reasons (the function's own reason from a call made again for the examples kept)."""
    fn = target.fn
    marker = fn.marker
    if marker.reference is None:
        run.answered = len(orig.scores)
        return
    ref = reference_fn(fn, target.rs.config.rootpath)
    invoker = Invoker.of(ref, target.label, target.settings, light=True)
    batch = max(1, target.settings.batch_size) if invoker.batch else None
    tol = marker.reference_tolerance
    kept: list[tuple[Sample, str, float | None, float | None, str | None]] = []
    for block in target.segments():
        samples = [sample for _, sample, _ in block]
        outcomes = target.rs.executor.stream(
            invoker, samples, segment=target.SEGMENT, batch=batch, rootdir=target.rs.config.rootpath,
            notes=target.notes,
        )  # fmt: skip
        for (index, sample, text), outcome in zip(block, outcomes, strict=True):
            run.answered += 1
            run.checked += 1
            own, other = orig.score(index), outcome.score
            if own is None or other is None:
                agree = own is None and other is None
            else:
                agree = abs(own - other) <= tol + 1e-9 * max(1.0, abs(own), abs(other))
            run.sum_original += own if own is not None else orig.floor
            run.sum_mutated += other if other is not None else orig.floor
            if agree:
                run.passing += 1
                continue
            run.broken += 1
            if len(kept) < EXAMPLES_KEPT:
                kept.append((sample, text, own, other, outcome.error or outcome.reason))
    if kept:  # the function's own reasons (the ledger keeps scores only): its examples scored again
        again = target.score([sample for sample, *_ in kept])
        for (sample, text, own, other, why), outcome in zip(kept, again, strict=True):
            mine = outcome.error or outcome.reason
            apart = "only one has a valid score" if own is None or other is None else f"{abs(own - other):.4g} apart"
            _example(
                run, sample, text, f"(the same response, scored by {reference_name(marker.reference)})", own,
                other, f"{fn.name} {_g(own)}, reference {_g(other)}: {apart}",
                f"{fn.name}: {mine or '-'} | reference: {why or '-'}",
            )  # fmt: skip
    if marker.agreement is not None and run.checked:
        confidence = fn.gates.confidence
        rate = run.passing / run.checked
        edge = wilson_interval(run.passing, run.checked, confidence).low if confidence else rate
        run.gate = (marker.agreement, rate, edge, confidence)


def _g(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def _abstaining_groups(run: ProbeRun, target: ProbeTarget, orig: Originals) -> None:
    """The samples' own responses grouped by prompt (the conversation before the response); a group of two or more
    responses none of which has a valid score is one a trainer cannot normalise (TRL: every reward None, a NaN
    advantage or a silent 0). ``checked``: the groups; ``broken``: those; an example each (the first
    :data:`EXAMPLES_KEPT`). Per prompt, a 16-byte digest and three numbers are kept, not the samples."""
    groups: dict[bytes, list[int]] = {}  # digest -> [responses, responses with a valid score, first index]
    for index, (sample, _) in enumerate(target.answered()):
        prompt = json.dumps(sample.messages[:-1], sort_keys=True, default=str)  # type: ignore[index]
        key = hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        group = groups.get(key)
        if group is None:
            group = groups[key] = [0, 0, index]
        group[0] += 1
        group[1] += orig.score(index) is not None
    run.answered = len(orig.scores)
    abstaining: dict[int, int] = {}  # first index -> responses
    for count, valid, index in groups.values():
        if count >= 2:
            run.checked += 1
            if not valid:
                run.broken += 1
                if len(abstaining) < EXAMPLES_KEPT:
                    abstaining[index] = count
    if not abstaining:
        return
    for index, (sample, text) in enumerate(target.answered()):
        count = abstaining.get(index)
        if count is not None:
            prompt = ProbeSample(text, sample.messages or []).user
            _example(
                run, sample, text, f"({count} responses to this prompt)", None, None,
                f"none of the {count} responses to this prompt has a valid score: the group abstains",
                f"prompt: {prompt}",
            )  # fmt: skip
            if len(run.examples) >= len(abstaining):
                break


#: One sample as every probe of a target reads it (:meth:`ProbeTarget.prepared`): its index among the answered
#: samples, the sample, its response, the fields of its :class:`ProbeSample` (but the seed), its conversation and a
#: private copy of it (what the calls on its mutations share: :func:`_run_here`), the ground truth to call with
#: (``MISSING``: none), the other fields; then what of the private copy a call can reach and change and what it must
#: still equal (:func:`_shared`), and the sample's own score the rules compare with (the floor when it has no valid
#: score).
Prepared = tuple[
    int,
    Sample,
    str,
    tuple[Any, ...],
    "list[dict[str, Any]]",
    "list[dict[str, Any]]",
    Any,
    "dict[str, Any]",
    "list[Any]",
    "list[Any]",
    float,
]

#: Mutations :func:`_run_here` makes before it scores them (a probe's mutation and a reward call, interleaved one
#: by one, push each other's code and data out of the CPU's caches; a chunk keeps few texts alive).
CHUNK = 64


def _shared(private: list[Any], messages: list[Any]) -> tuple[list[Any], list[Any]]:
    """What a call on one of the sample's mutations can reach of ``private`` (the sample's private copy of its
    ``messages``), and what that must equal after the call: the call gets a list of its own, and a last turn of its
    own that shares the private last turn's values but its content; so the turns before the last, and the last one
    too when it holds a list or a dict besides its content (tool calls, multimodal parts), as the same objects."""
    last = private[-1]
    if any(v.__class__ is list or v.__class__ is dict for k, v in last.items() if k != "content"):
        return private, messages
    return private[:-1], messages[:-1]


#: A scored mutation: the sample's index among the answered ones, the sample, its own response, the mutated one,
#: and what its call gave (:data:`pytest_reward.scoring.invoker.Checked`: score, verdict is a pass, reason, error).
Scored = tuple[int, Sample, str, str, "float | None", bool, "str | None", "str | None"]


def _not_a_string(probe: Probe, new: Any) -> TypeError:
    return TypeError(
        f"probe {probe.name!r} ({probe.where}) returned {type(new).__name__}; "
        "a probe returns the mutated response (a str) or None"
    )


def _run_here(run: ProbeRun, target: ProbeTarget, block: list[Prepared], orig: Originals) -> None:
    """``run``'s probe on ``block`` in this thread, without a timeout: the mutations of :data:`CHUNK` samples are
    made, then scored and checked, so that what a chunk allocates is freed before the next one is made.

    Each mutation is scored by the function's one scorer (:meth:`Invoker.fresh_scorer`: the call and the verdict a
    sample gets). A call gets a list and a last turn of its own, the mutated response in it; the turns before, and
    what the last turn holds besides its content, are the sample's private copy, shared by the calls on that
    sample's mutations and compared with the sample's own conversation after each call (what of it a call can reach:
    :func:`_shared`): a call that changed them fails (its input changed in place, as a sample's would) and the copy
    is made again. Nothing a call does reaches the sample, its other probes or the counter-examples. The samples the
    probe leaves alone are skipped.

    The lines here settle a mutation whose score keeps the rule without the rounding margin (and, for an ``info``
    probe, does not pass), as :func:`_settle` would; :func:`_settle` checks the rest."""
    probe, rule, invoker = run.probe, run.rule, target.invoker
    prefix = f"{target.settings.seed}:{probe.name}:"
    mutate, view = probe.mutate, ProbeSample._of
    one = invoker.fresh_scorer()
    threshold = target.fn.gates.threshold
    floor, ceiling, scores = orig.floor, orig.ceiling, orig.scores
    kind, tol, by_floor = rule.kind, rule.tol, rule.ref == "floor"
    is_le, is_eq, is_ge = kind == "<=", kind == "==", kind == ">="
    limit = floor + tol  # "<= floor"; "<= original" adds tol to each original
    copy_turn = dict.copy
    passing_scores: dict[float, bool] = {}
    settled = passing = 0
    sum_original = sum_mutated = 0.0
    for start in range(0, len(block), CHUNK):
        # the chunk's mutations first, then their calls: each loop keeps its own code and data warm
        chunk = block[start : start + CHUNK]
        made = [mutate(entry[2], view(*entry[3], prefix)) for entry in chunk]
        for entry, new in zip(chunk, made, strict=True):
            if new is None:
                continue
            if type(new) is not str and not isinstance(new, str):
                raise _not_a_string(probe, new)
            index, sample, text, _, messages, private, truth, fields, shared, shared_original, ref = entry
            given = private.copy()
            turn = copy_turn(given[-1])
            turn["content"] = new
            given[-1] = turn
            score, verdict_pass, reason, error = one(given, truth, fields)
            if shared != shared_original:  # the call changed what the calls on this sample share
                private[:] = private_copy(messages)
                if shared is not private:
                    shared[:] = private[:-1]
                score, verdict_pass, error = None, False, invoker.changed_error(["messages"])
            if error is None:
                if score is None:  # no valid score: it earns nothing and does not pass
                    if not (is_eq or is_ge) or (not by_floor and scores[index] != scores[index]):
                        settled += 1
                        sum_original += ref
                        sum_mutated += floor
                        continue
                else:
                    if threshold is not None:
                        passed = verdict_pass
                    elif score <= floor:
                        passed = False
                    else:  # without a threshold, whether a score passes depends on the score alone
                        passed = passing_scores.get(score)
                        if passed is None:
                            passed = passing_scores[score] = passes(
                                score, verdict_pass=verdict_pass, threshold=None, floor=floor, ceiling=ceiling
                            )
                    if is_le:
                        kept = score <= (limit if by_floor else ref + tol)
                    elif is_eq:
                        kept = score == (
                            floor if by_floor else scores[index]
                        )  # NaN (no original): never equal
                    elif is_ge:
                        kept = score >= (floor if by_floor else ref) - tol
                    else:  # "not pass"; "info" keeps every rule, but a response that passes is what it reports
                        kept = not passed
                    if kept:
                        settled += 1
                        passing += passed
                        sum_original += ref
                        sum_mutated += score
                        continue
            _settle(run, orig, threshold, index, sample, text, new, score, verdict_pass, reason, error)
    run.checked += settled
    run.passing += passing
    run.sum_original += sum_original
    run.sum_mutated += sum_mutated


def _mutations(target: ProbeTarget, probe: Probe, block: list[Prepared]) -> list[tuple[Any, ...]]:
    """Every mutation of ``block``, to be scored together: ``(index, sample, text, new, messages, truth, fields)``
    with ``messages`` the sample's conversation (not yet ending with the mutation)."""
    prefix = f"{target.settings.seed}:{probe.name}:"
    mutate, view = probe.mutate, ProbeSample._of
    out = []
    for index, sample, text, fields_of_view, messages, _, truth, fields, *_ in block:
        new = mutate(text, view(*fields_of_view, prefix))
        if new is None:
            continue
        if new.__class__ is not str and not isinstance(new, str):
            raise _not_a_string(probe, new)
        out.append((index, sample, text, new, messages, truth, fields))
    return out


def _variant(sample: Sample, messages: list[dict[str, Any]]) -> Sample:
    """The sample with ``messages`` (its mutated conversation) and no golden expectation (that was about the real
    answer): what an executor scores (it copies the inputs of each call as it does a sample's)."""
    if sample.has_ground_truth:
        return Sample(
            sample.path, sample.line, sample.id, messages, None, sample.ground_truth, None, sample.kwargs
        )
    return Sample(sample.path, sample.line, sample.id, messages, None, kwargs=sample.kwargs)


def _settle(
    run: ProbeRun,
    orig: Originals,
    threshold: float | None,
    index: int,
    sample: Sample,
    text: str,
    new: str,
    score: float | None,
    verdict_pass: bool,
    reason: str | None,
    error: str | None,
) -> None:
    """Check ``run.rule`` on one scored mutation (:data:`Scored`): count it, and keep it when it is a
    counter-example (or, for an ``info`` probe, a mutated response that passes). Once the run keeps
    :data:`EXAMPLES_KEPT` examples, the words of the next ones are not made (they would not be kept)."""
    rule = run.rule
    floor = orig.floor
    run.checked += 1
    original = orig.score(index)
    run.sum_original += floor if original is None else original
    keep = len(run.examples) < EXAMPLES_KEPT
    if error is not None:  # the reward raised (or timed out) on a response a policy can produce
        run.errors += 1
        run.sum_mutated += floor
        if rule.kind != "info":
            run.broken += 1
        if keep:
            problem = "raised on the mutated response: " + error.splitlines()[0]
            _example(run, sample, text, new, original, score if rule.kind != "info" else None, problem, error)
        return
    run.sum_mutated += floor if score is None else score
    passed = score is not None and passes(
        score, verdict_pass=verdict_pass, threshold=threshold, floor=floor, ceiling=orig.ceiling
    )
    run.passing += passed
    if not keep:
        run.broken += not rule.holds(score, original, floor, passed)
        return
    if rule.kind == "info" and passed:
        _example(run, sample, text, new, original, score, f"passes ({score:.4g})", reason)
    problem = rule.check(score, original, floor, passed)
    if problem is not None:
        run.broken += 1
        _example(run, sample, text, new, original, score, problem, reason)


def _example(
    run: ProbeRun,
    sample: Sample,
    text: str,
    new: str,
    original: float | None,
    score: float | None,
    problem: str,
    reason: str | None,
) -> None:
    if len(run.examples) < EXAMPLES_KEPT:
        run.examples.append(
            {
                "line": sample.line,
                "id": sample.label,
                "original": _cut(text),
                "mutated": _cut(new),
                "original_score": original,
                "score": score,
                "problem": problem,
                "reason": _cut(reason),
            }
        )


# --- the item --------------------------------------------------------------------------------------------------


def _shown(text: str | None, width: int) -> str:
    if text is None:
        return "∅"
    if not text.strip():
        return repr(text)
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _score(value: float | None) -> str:
    return "invalid" if value is None else f"{value:.4g}"


class ProbeItem(pytest.Item):
    """One reward function × one probe × one samples file."""

    @classmethod
    def from_parent(cls, parent: pytest.Collector, **kw: Any) -> Any:  # type: ignore[override]
        # As the sample items: the string node id, so that pytest >= 9.2's structured id matches --lf / --deselect.
        kw.setdefault("nodeid", f"{parent.nodeid}::{kw['name']}")
        return super().from_parent(parent, **kw)

    def __init__(
        self, *, target: ProbeTarget, probe: Probe, rule: Rule, order: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.probe = probe
        self.rule = rule
        self.order = order
        apply_marks(self, target.fn)

    def reportinfo(self) -> tuple[Path, int, str]:
        fn = self.target.fn
        return fn.path, max(0, fn.lineno - 1), f"{self.name} ({fn.path.name}:{fn.lineno})"

    def _data(self, verdict: str, run: ProbeRun | None = None, *, crash: str | None = None) -> dict[str, Any]:
        target = self.target
        orig = target._originals
        data: dict[str, Any] = {
            "function": target.fn.name,
            "file": target.label,
            "probe": self.probe.name,
            "rule": self.rule.text,
            "doc": self.probe.doc,
            "threshold": target.fn.gates.threshold,
            "floor": orig.floor if orig is not None else None,
            "ceiling": orig.ceiling if orig is not None else None,
            "crash": crash,
            "order": self.order,
        }
        if run is not None and run.gate is not None:  # the reference probe's agreement gate is its rule
            data["rule"] = f"agreement >= {run.gate[0]:g}"
        if run is not None:
            data.update(
                checked=run.checked,
                broken=run.broken,
                not_applicable=run.not_applicable,
                errors=run.errors,
                passing=run.passing,
                mean_original=run.sum_original / run.checked if run.checked else None,
                mean_mutated=run.sum_mutated / run.checked if run.checked else None,
                note=run.note(target),
                examples=run.examples,
            )
        return probe_data(verdict, **data)

    def crash_data(self, reason: str) -> dict[str, Any]:
        """The report data of this item when it ended without a verdict of its own (a crash, a setup error)."""
        return self._data("ERROR", crash=reason)

    def runtest(self) -> None:
        __tracebackhide__ = True
        try:
            run = run_probe(self.target, self.probe, self.rule)
        except ShipError as exc:
            pytest.fail(str(exc), pytrace=False)
        finally:
            notes, self.target.notes[:] = list(self.target.notes), []
            for (
                note
            ) in notes:  # workers that died and the chunks retried: the run survived, the user should know
                warnings.warn(RewardExecutorWarning(note), stacklevel=1)
        verdict = run.verdict()
        if self.probe.batching == "groups" and verdict == "INFO" and run.broken:
            lines = ", ".join(f"{self.target.label}:{ex['line']}" for ex in run.examples)
            warnings.warn(
                RewardAbstainWarning(
                    f"{self.target.fn.name} on {self.target.label}: {run.note(self.target)} (the groups of the "
                    f"prompts at {lines}); a trainer normalising per group gets NaN or 0 for them; "
                    'probes={"abstaining_groups": "not pass"} fails the run on it'
                ),
                stacklevel=1,
            )
        self.stash[REWARD_DATA] = self._data(verdict, run)
        self.user_properties.extend(
            [
                ("reward.probe.checked", run.checked),
                ("reward.probe.broken", run.broken),
                ("reward.verdict", verdict),
            ]
        )
        if verdict == "SKIP":
            raise skip_at_item(f"probe {self.probe.name}: {run.note(self.target)}")
        if verdict == "FAIL":
            raise RewardFailure(self._headline(run), self._details(run))

    def _headline(self, run: ProbeRun) -> str:
        target = self.target
        if self.probe.batching == "reference":
            return f"probe reference: {run.note(target)} ({target.fn.name} on {target.label})"
        if self.probe.batching == "groups":
            return (
                f"probe {self.probe.name}: {run.broken} of {run.checked} groups of responses to one prompt have "
                f"no valid score at all ({target.fn.name} on {target.label})"
            )
        return (
            f"probe {self.probe.name}: {run.broken} of {run.checked} mutated responses break "
            f'"{self.rule.text}" ({target.fn.name} on {target.label})'
        )

    def _rule_line(self) -> str:
        target, rule = self.target, self.rule
        orig = target.originals()
        if self.probe.batching == "reference":
            marker = target.fn.marker
            return (
                f"the share of samples {target.fn.name} and {reference_name(marker.reference)} score within "
                f"{marker.reference_tolerance:g} of each other must be at least {marker.agreement:g}"
            )
        if self.probe.batching == "groups":
            return f"{rule.text}: every prompt with two responses or more must have one with a valid score"
        if self.probe.batching:
            return f"{rule.text}: each response must score what it scored in the samples' own batches"
        if rule.kind == "not pass":
            threshold = target.fn.gates.threshold
            if threshold is not None:
                return f"not pass: the mutated response must score below the threshold {threshold:g}"
            best = "" if orig.ceiling is None else f" and as high as the best sample's ({orig.ceiling:.4g})"
            return f"not pass: no threshold, so a pass is a score above the floor{best}"
        if rule.ref == "floor":
            return f"{rule.text}: the mutated response must score at most the floor"
        if rule.kind == "<=":
            return f"{rule.text}: the mutated response must not score above the sample's own response"
        if rule.kind == ">=":
            return f"{rule.text}: the mutated response must not score below the sample's own response"
        return f"{rule.text}: the mutated response must score what the sample's own response scores"

    def _details(self, run: ProbeRun) -> list[str]:
        target = self.target
        orig = target.originals()
        width = 400 if self.config.get_verbosity() > 0 else 120
        lines = [
            f"  probe      {self.probe.name}: {self.probe.doc}",
            f"  rule       {self._rule_line()}",
            f"  floor      {orig.floor:.4g} (the lowest score of the samples' own responses)",
            (
                f"  checked    {run.checked} groups of two responses or more to one prompt ({run.answered} responses)"
                if self.probe.batching == "groups"
                else f"  checked    {run.checked} of {run.answered} responses"
                + (f" ({run.not_applicable} left alone: nothing to mutate)" if run.not_applicable else "")
            )
            + (f"; the reward raised on {run.errors}" if run.errors else ""),
        ]
        for ex in run.examples[:EXAMPLES_SHOWN]:
            lines.append(f"  {target.label}:{ex['line']} [{ex['id']}]  {ex['problem']}")
            lines.append(f"    original  {_score(ex['original_score']):<7}  {_shown(ex['original'], width)}")
            lines.append(f"    mutated   {_score(ex['score']):<7}  {_shown(ex['mutated'], width)}")
            if ex["reason"]:
                lines.append(f"    reason    {_shown(ex['reason'], width)}")
        if run.broken > EXAMPLES_SHOWN:
            lines.append(
                f"  … and {run.broken - EXAMPLES_SHOWN} more (report.html and summary.json list {EXAMPLES_KEPT})"
            )
        return lines

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        fn = self.target.fn
        location = (str(fn.path), max(0, fn.lineno - 1))
        if isinstance(excinfo.value, RewardFailure):
            return RewardRepr(excinfo.value.headline, excinfo.value.details, None, location)
        headline = f"probe {self.probe.name} on {fn.name}: {describe_exception(excinfo.value)}".splitlines()[
            0
        ]
        inner = None
        if len(user_frames(excinfo)):
            inner = excinfo.getrepr(style="long", tbfilter=user_frames, truncate_locals=True)  # type: ignore[arg-type]
        return RewardRepr(headline, [], inner, location)
