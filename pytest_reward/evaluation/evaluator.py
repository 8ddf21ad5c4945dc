""":class:`Evaluator`: a model job, a list of evaluations and an encoding; runs them and saves the results. With it,
the seed's two small objects: :class:`ExecutionSpec` (the job's name and topology) and :class:`EvaluatorConfig`
(what it evaluates and where the results go).

The seed's call forms, as written::

    spec = ExecutionSpec(name="tiny-eval", per_device_batch_size=64)
    evaluator, config = Evaluator.from_checkpoint("tiny-adder", spec, EvaluatorConfig(evaluations=[Sums()]))
    evaluator()                                     # runs unless done; writes results.json
    evaluator = Evaluator.from_trainer(trainer, config)
    evaluator = Evaluator(spec)                     # a model comes with restore_from_path(...)

and the keyword forms for a job at hand: ``Evaluator(job, [Sums()], results_dir="out")``,
``Evaluator.from_trainer(trainer, evaluations=[...])``, ``Evaluator.from_checkpoint("tiny-adder",
evaluations=[...], per_device_batch_size=64)``.

The only module of the package that reaches the JAX engine, and only inside the functions that build or update an
``InferenceJob`` (:meth:`Evaluator.restore_from_path`, :meth:`Evaluator.from_trainer`,
:meth:`Evaluator.update_params`): importing it imports no jax.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_write_text
from ..errors import EvaluationError
from .base import Evaluation, Intermediate, check_reduce
from .job import ModelJob, as_job

__all__ = ["Evaluator", "EvaluatorConfig", "ExecutionSpec"]


@dataclass(frozen=True)
class ExecutionSpec:
    """Who the evaluation job is and what it runs on (theseus's ``ExecutionSpec``, reduced to what a single
    process needs).

    Attributes:
        name, project, group: the job's name; its results go to ``{results_dir}/{project}/{group}/{name}/``.
        devices: the devices the batch is sharded over (``jax.Device`` objects); ``None``: every device
            ``jax.devices()`` lists.
        replicas: data-parallel replicas, one per device (the model is replicated on each, never split):
            the first ``replicas`` of ``devices``; ``None``: all of them.
        per_device_batch_size: rows per device in one batch; a batch is ``per_device_batch_size * replicas`` rows.
    """

    name: str = "evaluation"
    project: str = "general"
    group: str = "default"
    devices: tuple[Any, ...] | None = None
    replicas: int | None = None
    per_device_batch_size: int = 32

    def __post_init__(self) -> None:
        if self.devices is not None:
            object.__setattr__(self, "devices", tuple(self.devices))
            if not self.devices:
                raise ValueError("ExecutionSpec.devices is empty: name at least one device, or None for all")
        for label, value in (
            ("replicas", self.replicas),
            ("per_device_batch_size", self.per_device_batch_size),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"ExecutionSpec.{label} must be a positive integer, got {value!r}")
        if self.devices is not None and self.replicas is not None and self.replicas > len(self.devices):
            raise ValueError(
                f"ExecutionSpec.replicas={self.replicas} but only {len(self.devices)} devices are named"
            )
        if not self.name:
            raise ValueError("ExecutionSpec.name must not be empty (it names the results directory)")

    def job_kwargs(self) -> dict[str, Any]:
        """The ``InferenceJob`` keyword arguments of this topology (``devices``, ``per_device_batch_size``)."""
        kwargs: dict[str, Any] = {"per_device_batch_size": self.per_device_batch_size}
        if self.devices is None and self.replicas is None:
            return kwargs  # the job's default: every device
        if self.devices is not None:
            devices = list(self.devices)
        else:
            import jax

            devices = jax.devices()
        if self.replicas is not None:
            if self.replicas > len(devices):
                raise ValueError(
                    f"ExecutionSpec.replicas={self.replicas} but there are {len(devices)} devices"
                )
            devices = devices[: self.replicas]
        kwargs["devices"] = devices
        return kwargs


@dataclass(frozen=True)
class EvaluatorConfig:
    """What an evaluator runs and where its results go (the seed's ``config``).

    Attributes:
        evaluations: :class:`Evaluation` instances, with distinct names.
        results_dir: the results root (``results.json`` goes under ``{project}/{group}/{name}/``).
        checkpoint: the model directory it was loaded from (set by :meth:`Evaluator.from_checkpoint`).
        model: the model's ``ModelConfig`` (set when the evaluator builds or loads its job).
    """

    evaluations: tuple[Evaluation, ...] = ()
    results_dir: Path = Path("results")
    checkpoint: Path | None = None
    model: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "evaluations", tuple(self.evaluations))
        object.__setattr__(self, "results_dir", Path(self.results_dir))
        bad = [e for e in self.evaluations if not isinstance(e, Evaluation)]
        if bad:
            raise TypeError(f"EvaluatorConfig.evaluations must be Evaluation instances, got {bad[0]!r}")
        names = [e.name for e in self.evaluations]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"evaluation names must be distinct; repeated: {', '.join(duplicates)}")


#: Keys a config mapping or object may give, besides the :class:`EvaluatorConfig` fields: they name the job.
_SPEC_KEYS = ("project", "group", "name")


def _read_config(config: Any) -> tuple[EvaluatorConfig, dict[str, Any]]:
    """``config`` as an :class:`EvaluatorConfig` and the spec fields it names. Accepted: ``None``, an
    :class:`EvaluatorConfig`, a mapping or any object with some of ``evaluations``, ``results_dir``, ``project``,
    ``group``, ``name``, or a list of evaluations (shorthand for ``EvaluatorConfig(evaluations=...)``)."""
    if config is None:
        return EvaluatorConfig(), {}
    if isinstance(config, EvaluatorConfig):
        return config, {}
    if isinstance(config, Sequence) and not isinstance(config, str):
        return EvaluatorConfig(evaluations=tuple(config)), {}

    def field(key: str) -> Any:
        return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)

    values = {k: field(k) for k in ("evaluations", "results_dir", "checkpoint", "model")}
    read = EvaluatorConfig(**{k: v for k, v in values.items() if v is not None})
    return read, {k: field(k) for k in _SPEC_KEYS if field(k) is not None}


class Evaluator:
    """A model job, a list of evaluations and an encoding; runs them and saves the results.

    Two ways to build one:

    * ``Evaluator(spec)`` - the seed's: an :class:`ExecutionSpec`; the model comes with :meth:`restore_from_path`
      (which :meth:`from_checkpoint` calls), the evaluations with ``config=`` or by setting ``.evaluations``;
    * ``Evaluator(inference, evaluations, encoding, results_dir=..., project=..., group=..., name=...)`` - a job at
      hand (an ``InferenceJob``, or an object holding one as ``.inference``).

    ``run()`` writes ``{results_dir}/{project}/{group}/{name}/results.json`` (atomically; directories are
    created)::

        {"job": name, "project": project, "group": group, "results": {evaluation name: float, ...}}

    and ``done`` tells whether that file exists. Calling the evaluator runs it, unless it is done and ``resume``
    is true: then it returns the saved results without running the model (theseus's idempotent jobs).

    Args:
        spec: an :class:`ExecutionSpec`, or the inference job (the keyword form).
        inference: the inference job, when ``spec`` is an :class:`ExecutionSpec`.
        evaluations: :class:`Evaluation` instances with distinct names (or give them in ``config``).
        encoding: passed to every evaluation (default: the job's tokenizer).
        config: an :class:`EvaluatorConfig` (or a mapping / object with its fields, ``project``, ``group``,
            ``name``).
        results_dir, project, group, name: where ``run`` writes; they win over ``config`` and ``spec``.
        resume: reuse results already saved at this location (see above); ``False`` evaluates again and replaces
            them.
    """

    def __init__(
        self,
        spec: ExecutionSpec | Any = None,
        evaluations: Sequence[Evaluation] = (),
        encoding: Any = None,
        *,
        inference: Any = None,
        config: EvaluatorConfig | Mapping[str, Any] | Any = None,
        results_dir: str | Path | None = None,
        project: str | None = None,
        group: str | None = None,
        name: str | None = None,
        resume: bool = True,
    ):
        if spec is not None and not isinstance(spec, ExecutionSpec):
            if inference is not None:
                raise TypeError(
                    "Evaluator(spec, ...): spec must be an ExecutionSpec when inference= is given"
                )
            spec, inference = None, spec  # the keyword form: Evaluator(job, evaluations, encoding, ...)
        cfg, named = _read_config(config)
        if evaluations:
            cfg = dataclasses.replace(cfg, evaluations=tuple(evaluations))
        if results_dir is not None:
            cfg = dataclasses.replace(cfg, results_dir=Path(results_dir))
        job = None if inference is None else as_job(inference)
        if spec is not None:
            base = spec
        elif job is not None:
            base = ExecutionSpec(per_device_batch_size=int(getattr(job, "per_device_batch_size", 32)))
        else:
            base = ExecutionSpec()
        given = {"project": project, "group": group, "name": name}
        overrides = {**named, **{k: v for k, v in given.items() if v is not None}}
        self.spec: ExecutionSpec = dataclasses.replace(
            base, **{k: v or ExecutionSpec.__dataclass_fields__[k].default for k, v in overrides.items()}
        )
        self.config: EvaluatorConfig = cfg
        self.evaluations: list[Evaluation] = list(cfg.evaluations)
        self.resume = bool(resume)
        self._encoding = encoding
        self.inference: ModelJob | None = None
        self.encoding: Any = encoding
        if job is not None:
            self._attach(job)
        self._params_source: Any = None
        self._params_seen: Any = None
        self._completed = False

    def _attach(self, job: ModelJob) -> None:
        self.inference = job
        self.encoding = self._encoding if self._encoding is not None else job.tokenizer
        model = getattr(job, "config", None)
        if model is not None:
            self.config = dataclasses.replace(self.config, model=model)

    # -- where results go
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def project(self) -> str:
        return self.spec.project

    @property
    def group(self) -> str:
        return self.spec.group

    @property
    def results_dir(self) -> Path:
        return self.config.results_dir

    # -- construction
    def restore_from_path(self, path: str | Path, **job_kwargs: Any) -> None:
        """Load the model at ``path`` (a Hugging Face model directory or a shipped model's name, e.g.
        ``"tiny-adder"``) as this evaluator's job, on the spec's devices and batch size. ``job_kwargs`` go to
        ``InferenceJob.from_checkpoint`` (``tokenizer=``, ``start_token=``, ``dtype=``...) and win over the spec."""
        from ..jax import InferenceJob, resolve_model

        directory = resolve_model(path)
        self._attach(InferenceJob.from_checkpoint(directory, **{**self.spec.job_kwargs(), **job_kwargs}))
        self.config = dataclasses.replace(self.config, checkpoint=directory)

    @classmethod
    def from_checkpoint(
        cls,
        suffix: str | Path,
        spec: ExecutionSpec | None = None,
        runtime_cfg: EvaluatorConfig | Mapping[str, Any] | Any = None,
        resume: bool = False,
        *,
        evaluations: Sequence[Evaluation] | None = None,
        encoding: Any = None,
        results_dir: str | Path | None = None,
        project: str | None = None,
        group: str | None = None,
        name: str | None = None,
        **job_kwargs: Any,
    ) -> tuple[Evaluator, EvaluatorConfig]:
        """An evaluator for a Hugging Face model directory or a shipped model's name: ``(evaluator, config)``.

        Args:
            suffix: the model directory (``config.json`` + safetensors + tokenizer) or a shipped model's name.
            spec: the :class:`ExecutionSpec` (default: all devices, 32 rows per device, named after the
                directory).
            runtime_cfg: an :class:`EvaluatorConfig` (or mapping / object with its fields): the evaluations and
                the results location.
            resume: reuse results a previous run saved at this location (calling the evaluator returns them);
                ``False`` (default) starts a fresh evaluation that replaces them.
            evaluations, encoding, results_dir, project, group, name: the keyword forms; they win over
                ``runtime_cfg`` and ``spec``.
            job_kwargs: go to ``InferenceJob.from_checkpoint`` (``per_device_batch_size=``, ``tokenizer=``...).

        Returns the evaluator and its :class:`EvaluatorConfig`, with ``checkpoint`` (the resolved directory) and
        ``model`` (the model's ``ModelConfig``) filled in.
        """
        if spec is not None and not isinstance(spec, ExecutionSpec):
            raise TypeError(
                f"from_checkpoint(suffix, spec, runtime_cfg=None, resume=False): spec must be an ExecutionSpec, "
                f"got {type(spec).__name__}; pass the evaluations in runtime_cfg or as evaluations=[...]"
            )
        if spec is None and name is None:
            from ..jax import resolve_model

            name = resolve_model(suffix).name
        evaluator = cls(
            spec,
            evaluations or (),
            encoding,
            config=runtime_cfg,
            results_dir=results_dir,
            project=project,
            group=group,
            name=name,
            resume=resume,
        )
        evaluator.restore_from_path(suffix, **job_kwargs)
        return evaluator, evaluator.config

    @classmethod
    def from_trainer(
        cls,
        trainer: Any,
        config: EvaluatorConfig | Mapping[str, Any] | Sequence[Evaluation] | Any = None,
        *,
        evaluations: Sequence[Evaluation] | None = None,
        encoding: Any = None,
        spec: ExecutionSpec | None = None,
        **kwargs: Any,
    ) -> Evaluator:
        """An evaluator for a model being trained. ``trainer`` may be:

        * an ``InferenceJob``, used as is;
        * an :class:`Evaluator` or any object with an ``inference`` attribute holding a job (shared);
        * an object with the model's ``config`` (a ``pytest_reward.jax.ModelConfig``, also read as
          ``model_config``) and its parameters as ``params`` or ``state.params`` (a theseus/flax ``TrainState``
          shape), plus optionally ``tokenizer``, ``block_size`` and ``per_device_batch_size``. A job is built
          from them (on ``spec``'s topology when given); at every :meth:`evaluate` the trainer's parameters are
          read again, so a trainer that replaces its params (``trainer.params = new``) is evaluated on the new
          ones.

        ``config`` (the seed's second argument): an :class:`EvaluatorConfig`, a mapping or object with
        ``evaluations``, ``results_dir``, ``project``, ``group``, ``name``, or a list of evaluations. Explicit
        ``evaluations=`` and the other keyword arguments (``results_dir``, ``project``, ``group``, ``name``,
        ``resume``) win.
        """
        if hasattr(trainer, "generate_tokens") or hasattr(trainer, "inference"):
            return cls(spec, evaluations or (), encoding, inference=as_job(trainer), config=config, **kwargs)
        model_config = getattr(trainer, "config", None)
        if model_config is None or not hasattr(model_config, "vocab_size"):
            model_config = getattr(trainer, "model_config", None)
        if model_config is None or _trainer_params(trainer) is None:
            raise TypeError(
                "from_trainer needs an InferenceJob, an object with an .inference job, or an object with the "
                f"model's .config (ModelConfig) and .params (or .state.params); got {type(trainer).__name__}"
            )
        from ..jax import InferenceJob

        job_kwargs = {
            k: getattr(trainer, k) for k in ("block_size", "per_device_batch_size") if hasattr(trainer, k)
        }
        if spec is not None:
            job_kwargs.update(spec.job_kwargs())
        job = InferenceJob.from_params(
            model_config,
            _trainer_params(trainer),
            tokenizer=getattr(trainer, "tokenizer", None),
            **job_kwargs,
        )
        evaluator = cls(spec, evaluations or (), encoding, inference=job, config=config, **kwargs)
        evaluator._params_source = trainer
        evaluator._params_seen = _trainer_params(trainer)
        return evaluator

    def update_params(self, params: Any) -> None:
        """Evaluate new parameters (same tree and shapes) from now on; compiled programs are kept."""
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as PS

        from ..jax import InferenceState

        job: Any = self._job()
        old = jax.tree_util.tree_map(lambda a: tuple(a.shape), job.state.params)
        new = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)), params)
        if jax.tree_util.tree_structure(old) != jax.tree_util.tree_structure(new) or old != new:
            raise ValueError("update_params: the new parameters do not have the model's tree and shapes")
        cast = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype=job.dtype), params)
        job.state = InferenceState(jax.device_put(cast, NamedSharding(job.mesh, PS())))

    # -- running
    @property
    def results_path(self) -> Path:
        return self.results_dir / self.project / self.group / self.name / "results.json"

    @property
    def done(self) -> bool:
        """Whether ``results.json`` exists; on a process other than 0 of a multi-process run (which writes no
        files, and may not see process 0's disk), whether a :meth:`run` of this evaluator completed."""
        return self._completed or self.results_path.exists()

    def evaluate(self, reduce: str = "mean", return_intermediates: bool = False, **kwargs: Any) -> Any:
        """Run every evaluation: ``{name: value}`` in evaluation order (a float for ``"mean"``/``"sum"``, the
        per-sample array for ``"none"``), plus, with ``return_intermediates``, one list per evaluation of its
        ``(x, padding_mask)`` pairs (:class:`~.base.Intermediate`). Keyword arguments (``temperature``, ``top_p``,
        ``samples_per_prompt``, ``seed``, ``chunk_size``...) go to every evaluation."""
        check_reduce(reduce)
        job = self._job()
        if not self.evaluations:
            raise EvaluationError("the evaluator has no evaluations to run")
        names = [e.name for e in self.evaluations]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"evaluation names must be distinct; repeated: {', '.join(duplicates)}")
        self._refresh_params()
        results: dict[str, Any] = {}
        inters: list[list[Intermediate]] = []
        for evaluation in self.evaluations:
            out = evaluation(
                job,
                self.encoding,
                reduce=reduce,
                return_intermediates=return_intermediates,
                **kwargs,
            )
            if return_intermediates:
                out, inter = out
                inters.append(inter)
            results[evaluation.name] = out
        return (results, inters) if return_intermediates else results

    def run(self) -> dict[str, float]:
        """Evaluate (``reduce="mean"``) and write ``results.json`` atomically; returns the results.

        Several processes: every process evaluates (the same results everywhere), process 0 alone writes the file,
        and every process returns once it is written (or raises the same ``OSError`` if it could not be)."""
        results = {k: float(v) for k, v in self.evaluate().items()}
        payload = {"job": self.name, "project": self.project, "group": self.group, "results": results}
        path = self.results_path
        hosts = self._hosts()
        failure = None
        if hosts is None or hosts.index == 0:
            try:
                atomic_write_text(path, json.dumps(payload, indent=2) + "\n")
            except OSError as exc:
                failure = f"cannot write evaluation results to {path}: {exc}. Pass results_dir= a writable directory."
        if hosts is not None:
            failure = hosts.broadcast(f"evaluator {self.name!r}: results.json written", failure)
        if failure is not None:
            raise OSError(failure)
        self._completed = True
        return results

    def __call__(self) -> dict[str, float]:
        """Run, unless done and ``resume``: then the saved results, without running the model (several
        processes: process 0 reads them and every process returns them)."""
        hosts = self._hosts()
        saved = None
        if self.resume and (hosts is None or hosts.index == 0) and self.results_path.exists():
            saved = dict(json.loads(self.results_path.read_text(encoding="utf-8"))["results"])
        if hosts is not None and self.resume:
            saved = hosts.broadcast(f"evaluator {self.name!r}: saved results", saved)
        if saved is not None:
            self._completed = True
            return saved
        return self.run()

    def _hosts(self) -> Any:
        """The processes of a multi-process run sharing this evaluator's job (``None``: one process)."""
        return getattr(self.inference, "hosts", None)

    def _job(self) -> ModelJob:
        if self.inference is None:
            raise EvaluationError(
                f"evaluator {self.name!r} has no model: load one with restore_from_path(directory), or build the "
                "evaluator with Evaluator.from_checkpoint(...) / Evaluator.from_trainer(...)"
            )
        return self.inference

    def _refresh_params(self) -> None:
        if self._params_source is None:
            return
        params = _trainer_params(self._params_source)
        if params is not self._params_seen:
            self.update_params(params)
            self._params_seen = params

    def __repr__(self) -> str:
        names = ", ".join(e.name for e in self.evaluations)
        return f"Evaluator({self.name!r}, [{names}], {self.inference!r})"


def _trainer_params(trainer: Any) -> Any:
    params = getattr(trainer, "params", None)
    if params is None:
        params = getattr(getattr(trainer, "state", None), "params", None)
    return params
