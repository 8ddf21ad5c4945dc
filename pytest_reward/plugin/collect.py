"""Collectors: a samples file (one item per function × sample, or per function × file), and the module of
``Evaluation`` classes listed in ini ``reward_evaluations``."""

from __future__ import annotations

import fnmatch
import importlib
import inspect
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from ..data.samples import Sample, SampleError
from ..data.sources import DatasetError, check_dataset, count_samples, fields_key, read_samples, uses_fields
from ..judge.gates import GateError, Marker, validate_marker
from ..probes.ledger import FileScores, SampleScores
from ..project.functions import marks_of
from ..project.loading import import_reward_module
from ..scoring.invoker import Invoker
from .discovery import DiscoveryError
from .fixtures import overrides_inference_job
from .items import (
    BatchScheduler,
    EvaluationItem,
    FileItem,
    LineErrorItem,
    ModelFileItem,
    PairItem,
    RolloutSampleItem,
    SampleItem,
    may_use_model,
    uses_model,
    warn_truth_lookalike,
)
from .probe_items import ProbeItem, ProbeTarget, session_probes
from .pytest_private import fixture_info
from .session import RewardSession, session_key

if TYPE_CHECKING:
    from ..project.functions import RewardFn

__all__ = [
    "EvaluationsModule",
    "SamplesFile",
    "abstract_methods",
    "evaluation_item",
    "listed_evaluations",
    "module_evaluation",
]


class SamplesFile(pytest.File):
    """A samples file of any registered format (``data/formats``): items for every reward function that meets it."""

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
        problem = check_dataset(self.path)  # a file met by a glob (named ones are checked at configure)
        if problem is not None:
            raise self.CollectError(problem)
        settings = rs.settings
        label = rs.rel(self.path)
        granularity = settings.granularity
        if granularity == "auto":
            lines = count_samples(self.path, limit=settings.max_items_per_file)
            granularity = "sample" if lines <= settings.max_items_per_file else "file"
        probed = self._probed(rs, functions)
        if granularity == "file":
            # the file items leave their samples' own scores for the probes in a ledger: not scored twice
            own = {fn.name: FileScores() for fn, _ in probed}
            targets = [(self._probe_target(rs, fn, label, own[fn.name]), probes) for fn, probes in probed]
            yield from self._file_items(rs, functions, label, own)
            for target, probes in targets:
                yield from self._probe_items(target, probes)
            return
        samples_of: dict[str, list[Sample]] = {}
        ledgers = {fn.name: SampleScores() for fn, _ in probed}
        for fields, group in self._by_fields(rs, functions):
            samples: list[Sample] = []
            yield from self._sample_items(
                rs, group, label, fields, samples, shared=len(functions) == len(group), ledgers=ledgers
            )
            samples_of.update((fn.name, samples) for fn in group)
        for fn, probes in probed:
            # the sample items leave their samples' own scores in the ledger: not scored again
            target = self._probe_target(rs, fn, label, ledgers[fn.name], samples_of[fn.name])
            yield from self._probe_items(target, probes)

    def _by_fields(
        self, rs: RewardSession, functions: list[RewardFn]
    ) -> list[tuple[dict[str, str], list[RewardFn]]]:
        """The functions grouped by the field mapping they read this file with (one group for a JSONL file, or
        when no marker maps fields): the file is parsed once per distinct mapping."""
        if not uses_fields(self.path):
            return [({}, functions)]
        groups: dict[str, tuple[dict[str, str], list[RewardFn]]] = {}
        for fn in functions:
            fields = rs.settings.fields_for(fn.marker)
            groups.setdefault(fields_key(fields), (fields, []))[1].append(fn)
        return list(groups.values())

    def _probe_target(
        self,
        rs: RewardSession,
        fn: RewardFn,
        label: str,
        ledger: FileScores | SampleScores,
        samples: list[Sample] | None = None,
    ) -> ProbeTarget:
        target = ProbeTarget(fn, label, self.path, rs, samples, ledger=ledger)
        if samples is None and fn.marker.sample_fields is not None:
            # file granularity: the probe target streams the file with the settings' mapping; this function's is
            # its marker's
            target.settings = replace(rs.settings, sample_fields=fn.marker.sample_fields)
        return target

    def _probed(self, rs: RewardSession, functions: list[RewardFn]) -> list[tuple[RewardFn, list[Any]]]:
        """The functions whose marker declares probes, and their probes (an unknown name is a collection error
        naming the function)."""
        declared = [fn for fn in functions if fn.marker.all_probes]
        if not declared:
            return []
        registry = session_probes(self.config)
        out = []
        for fn in declared:
            where = f"@pytest.mark.reward on {rs.rel(fn.path)}::{fn.qualname}"
            try:
                out.append((fn, registry.resolve(fn.marker.all_probes, where)))
            except GateError as exc:
                raise self.CollectError(str(exc)) from None
        return out

    def _probe_items(self, target: ProbeTarget, probes: list[Any]) -> Iterator[pytest.Item]:
        for order, (probe, rule) in enumerate(probes):
            yield ProbeItem.from_parent(
                self,
                name=f"{target.fn.name}[probe:{probe.name}]",
                target=target,
                probe=probe,
                rule=rule,
                order=order,
            )

    def _file_items(
        self, rs: RewardSession, functions: list[RewardFn], label: str, own: dict[str, FileScores]
    ) -> Iterator[pytest.Item]:
        settings = rs.settings
        default = fields_key(dict(settings.sample_fields))
        pool_keys = {
            fn.name: _pool_key(label, fields_key(settings.fields_for(fn.marker)), default)
            if uses_fields(self.path)
            else label
            for fn in functions
        }
        if not (settings.model or overrides_inference_job(self.config)):
            for fn in functions:
                yield FileItem.from_parent(
                    self,
                    name=fn.name,
                    fn=fn,
                    invoker=Invoker.of(fn, label, settings, light=True),
                    rs=rs,
                    pool_key=pool_keys[fn.name],
                    ledger=own.get(fn.name),
                )
            return
        # A model is at hand: items that can roll out the file's prompt-only samples, if it has any (the file is
        # not read at collection; the model is loaded only when a prompt-only sample is met).
        fixtureinfo = fixture_info(self, may_use_model)
        for fn in functions:
            item = ModelFileItem.from_parent(
                self,
                name=fn.name,
                callobj=may_use_model,
                fixtureinfo=fixtureinfo,
                fn=fn,
                invoker=Invoker.of(fn, label, settings, light=True),
                rs=rs,
                pool_key=pool_keys[fn.name],
                ledger=own.get(fn.name),
            )
            rs.rollouts.expect_reader(pool_keys[fn.name], item.rollout_settings())
            yield item

    def _sample_items(
        self,
        rs: RewardSession,
        functions: list[RewardFn],
        label: str,
        fields: dict[str, str],
        samples: list[Sample],
        *,
        shared: bool,
        ledgers: dict[str, SampleScores],
    ) -> Iterator[pytest.Item]:
        """Items per function × sample, the file read with ``fields``; ``samples`` is filled with the file's
        samples (probe items share them). A probed function's items leave their samples' scores in its ledger
        (``ledgers``). ``shared``: every function of the file reads it this way, so a row that cannot be read is
        one item for all of them (else one per function, ``fn[row-N]``)."""
        settings = rs.settings
        errors: list[SampleError] = []
        seen: dict[str, int] = {}
        records = read_samples(self.path, max_line_bytes=settings.max_line_bytes, fields=fields)
        for record in _guarded(records, self):
            if isinstance(record, SampleError):
                errors.append(record)
            elif record.id is not None and record.id in seen:
                errors.append(
                    SampleError(
                        record.path,
                        record.line,
                        f"duplicate id {record.id!r} (first at {record.unit} {seen[record.id]})",
                        record.unit,
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
            for owners in [functions] if shared else [[fn] for fn in functions]:
                yield LineErrorItem.from_parent(
                    self,
                    name=err.label if shared else f"{owners[0].name}[{err.label}]",
                    error=err,
                    functions=owners,
                    file_label=label,
                    groups=[groups[fn.name] for fn in owners],
                )
        pool_key = (
            _pool_key(label, fields_key(fields), fields_key(dict(settings.sample_fields)))
            if uses_fields(self.path)
            else label
        )
        fixtureinfo = None
        for fn in functions:
            warn_truth_lookalike(samples[0] if samples else None, fn, self.path)
            invoker = Invoker.of(fn, label, settings)
            ledger = ledgers.get(fn.name)
            batch = (
                BatchScheduler(
                    invoker,
                    [s for s in samples if s.pair is None and not s.prompt_only],
                    invoker.chunk(settings.batch_size),
                )
                if invoker.batch
                else None
            )
            for sample in samples:
                name = f"{fn.name}[{sample.label}]"
                if sample.pair is not None:
                    yield PairItem.from_parent(
                        self, name=name, fn=fn, invoker=invoker, sample=sample, group=groups[fn.name], ledger=ledger
                    )
                    continue
                if sample.prompt_only:
                    if fixtureinfo is None:
                        # The same for every rollout item of this file: resolved once, not per item.
                        fixtureinfo = fixture_info(self, uses_model)
                    yield RolloutSampleItem.from_parent(
                        self,
                        name=name,
                        callobj=uses_model,
                        fixtureinfo=fixtureinfo,
                        fn=fn,
                        invoker=invoker,
                        sample=sample,
                        group=groups[fn.name],
                        pool_key=pool_key,
                    )
                    continue
                yield SampleItem.from_parent(
                    self,
                    name=name,
                    fn=fn,
                    invoker=invoker,
                    sample=sample,
                    group=groups[fn.name],
                    batch=batch,
                    ledger=ledger,
                )
        prompt_only = [s for s in samples if s.pair is None and s.prompt_only]
        if prompt_only:
            rs.rollouts.register(pool_key, prompt_only)


def _pool_key(label: str, fields: str, default: str | None) -> str:
    """Where the rollout pool keeps a file's generated responses for functions reading it with ``fields``: the
    file's label for the usual mapping, a key of its own for another (other prompts, other responses)."""
    return label if fields == default else f"{label}#fields:{fields}"


def _guarded(records: Iterator[Sample | SampleError], collector: pytest.Collector) -> Iterator[Any]:
    """A dataset that turns out corrupt past its footer is a collection error naming it."""
    try:
        yield from records
    except DatasetError as exc:
        raise collector.CollectError(str(exc)) from None


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


def module_evaluation(collector: pytest.Collector, name: str, cls: type) -> list[pytest.Item] | None:
    """The item of an ``Evaluation`` subclass defined in a collected test module.

    An abstract one (a method such as ``get`` not implemented) cannot run. It is a collection error naming what
    it lacks when it was meant to run: it carries a ``reward`` mark of its own, or is named like a test class
    (ini ``python_classes``), and no class subclasses it. Otherwise it is a helper base class, left to pytest as
    before (None).
    """
    missing = abstract_methods(cls)
    if not missing:
        return [evaluation_item(collector, name, cls)]
    own_marks = marks_of(cls) if "pytestmark" in vars(cls) else []
    marked = any(mark.name == "reward" for mark in own_marks)
    if cls.__subclasses__() or not (marked or _test_class_name(collector.config, name)):
        return None
    rs = collector.config.stash[session_key]
    raise collector.CollectError(
        f"{rs.rel(collector.path)}::{name}: the Evaluation class is abstract (it does not implement {missing}): "
        "implement it, or name the class with a leading _ if it is a base class for others"
    )


def abstract_methods(cls: type) -> str:
    """The abstract methods ``cls`` leaves unimplemented, comma-separated ("" for a class that can be built)."""
    return ", ".join(sorted(getattr(cls, "__abstractmethods__", ()))) if inspect.isabstract(cls) else ""


def _test_class_name(config: pytest.Config, name: str) -> bool:
    """Whether pytest collects a class of this name (ini ``python_classes``: prefixes or globs)."""
    return any(
        name.startswith(option) or (any(c in option for c in "*?[") and fnmatch.fnmatch(name, option))
        for option in config.getini("python_classes")
    )


def evaluation_item(collector: pytest.Collector, name: str, cls: type) -> EvaluationItem:
    """The item of an ``Evaluation`` subclass found in a test module; its ``reward`` marks are its gates."""
    rs = collector.config.stash[session_key]
    marker = Marker(gates=rs.settings.defaults)
    where = f"@pytest.mark.reward on {rs.rel(collector.path)}::{name}"
    for mark in marks_of(getattr(collector, "obj", None)) + marks_of(cls):
        if mark.name == "reward":
            try:
                marker = marker.merged(validate_marker(tuple(mark.args), dict(mark.kwargs), where), "marker")
            except GateError as exc:
                raise collector.CollectError(str(exc)) from None
    return EvaluationItem.from_parent(
        collector,
        name=name,
        callobj=uses_model,
        evaluation=cls,
        file_label=rs.rel(collector.path),
        gates=marker.gates,
    )


def listed_evaluations(rs: RewardSession, session: pytest.Session, known: set[str]) -> list[pytest.Item]:
    """Items of the ``Evaluation`` classes listed in ini ``reward_evaluations`` (those not already collected
    from a test module), collected through pytest's own reporting so that they count and show as usual."""
    if not rs.settings.evaluations:
        return []

    config = rs.config
    by_module: dict[str, tuple[Any, list[tuple[str, type]]]] = {}
    for spec in rs.settings.evaluations:
        try:
            module, cls = load_evaluation_spec(
                spec, config.rootpath, config.invocation_params.dir, config.getoption("importmode")
            )
        except DiscoveryError as exc:
            raise pytest.UsageError(str(exc)) from None
        entry = by_module.setdefault(module.__name__, (module, []))
        if (cls.__name__, cls) not in entry[1]:
            entry[1].append((cls.__name__, cls))
    items: list[pytest.Item] = []
    for module, classes in by_module.values():
        path = Path(module.__file__ or config.rootpath / module.__name__)
        collector = EvaluationsModule.from_parent(session, path=path, module=module, classes=classes)
        items.extend(i for i in session.genitems(collector) if i.nodeid not in known)
    return items


def load_evaluation_spec(
    spec: str, rootdir: Path, invocation_dir: Path, importmode: str
) -> tuple[ModuleType, type]:
    """Import the ``Evaluation`` subclass named by an ini ``reward_evaluations`` entry.

    ``package.module:Class`` is imported by name; ``path/to/file.py::Class`` (relative to the rootdir, else to the
    invocation directory) like a reward module. Every problem is a ``DiscoveryError`` naming the entry.
    """
    from ..evaluation.base import Evaluation

    where = f"ini reward_evaluations entry {spec!r}"
    try:
        if "::" in spec:
            file_part, _, attr = spec.partition("::")
            path = Path(file_part)
            if not path.is_absolute():
                path = next(
                    (base / path for base in (rootdir, invocation_dir) if (base / path).is_file()),
                    rootdir / path,
                )
            if not path.is_file():
                raise DiscoveryError(f"{where}: file {file_part} not found")
            module = import_reward_module(path, rootdir, importmode)
        elif ":" in spec:
            mod_name, _, attr = spec.partition(":")
            module = importlib.import_module(mod_name)
        else:
            raise DiscoveryError(f"{where}: expected package.module:Class or path/to/file.py::Class")
    except DiscoveryError:
        raise
    except Exception as exc:
        raise DiscoveryError(f"{where}: import failed: {type(exc).__name__}: {exc}") from exc
    obj: Any = getattr(module, attr, None)
    if obj is None:
        raise DiscoveryError(f"{where}: {module.__name__} has no attribute {attr!r}")
    if not (isinstance(obj, type) and issubclass(obj, Evaluation)):
        raise DiscoveryError(f"{where}: {attr!r} is not a subclass of pytest_reward.evaluation.Evaluation")
    missing = abstract_methods(obj)
    if missing:
        raise DiscoveryError(f"{where}: {attr!r} is abstract (it does not implement {missing})")
    return module, obj

