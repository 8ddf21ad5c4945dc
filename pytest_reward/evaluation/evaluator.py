""":class:`Evaluator`: a model job, a list of evaluations and an encoding; runs them and saves the results.

The only module of the package that reaches the JAX engine, and only inside the functions that build or update an
``InferenceJob`` (:meth:`Evaluator.from_trainer`, :meth:`Evaluator.from_checkpoint`, :meth:`Evaluator.update_params`):
importing it imports no jax.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_write_text
from ..errors import EvaluationError
from .base import Evaluation, Intermediate, check_reduce
from .job import ModelJob, as_job

__all__ = ["Evaluator"]


class Evaluator:
    """A model job, a list of evaluations and an encoding; runs them and saves the results.

    ``run()`` writes ``{results_dir}/{project}/{group}/{name}/results.json`` (atomically; directories are
    created)::

        {"job": name, "project": project, "group": group, "results": {evaluation name: float, ...}}

    and ``done`` tells whether that file exists; calling the evaluator runs it unless it is done.

    Args:
        inference: the ``InferenceJob`` (or an object holding one as ``.inference``).
        evaluations: :class:`Evaluation` instances with distinct names.
        encoding: passed to every evaluation (default: the job's tokenizer).
        results_dir, project, group, name: where ``run`` writes.
    """

    def __init__(
        self,
        inference: Any,
        evaluations: Sequence[Evaluation] = (),
        encoding: Any = None,
        *,
        results_dir: str | Path = "results",
        project: str = "general",
        group: str = "default",
        name: str = "evaluation",
    ):
        self.inference: ModelJob = as_job(inference)
        self.encoding = encoding if encoding is not None else self.inference.tokenizer
        self.evaluations = list(evaluations)
        names = [e.name for e in self.evaluations]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"evaluation names must be distinct; repeated: {', '.join(duplicates)}")
        self.results_dir = Path(results_dir)
        self.project = project or "general"
        self.group = group or "default"
        self.name = name
        self._params_source: Any = None
        self._params_seen: Any = None

    # -- construction
    @classmethod
    def from_trainer(
        cls,
        trainer: Any,
        evaluations: Sequence[Evaluation] | None = None,
        encoding: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> Evaluator:
        """An evaluator for a model being trained. ``trainer`` may be:

        * an ``InferenceJob``, used as is;
        * an :class:`Evaluator` or any object with an ``inference`` attribute holding a job (shared);
        * an object with the model's ``config`` (a ``pytest_reward.jax.ModelConfig``, also read as
          ``model_config``) and its parameters as ``params`` or ``state.params`` (a theseus/flax ``TrainState``
          shape), plus optionally ``tokenizer``, ``block_size`` and ``per_device_batch_size``. A job is built
          from them; at every :meth:`evaluate` the trainer's parameters are read again, so a trainer that
          replaces its params (``trainer.params = new``) is evaluated on the new ones.

        ``config`` (a mapping or an object) may give ``evaluations``, ``results_dir``, ``project``, ``group``
        and ``name``; explicit arguments win. Other keyword arguments go to :class:`Evaluator`.
        """
        for key in ("results_dir", "project", "group", "name"):
            value = _field(config, key)
            if value is not None:
                kwargs.setdefault(key, value)
        if evaluations is None:
            evaluations = list(_field(config, "evaluations") or [])
        if hasattr(trainer, "generate_tokens") or hasattr(trainer, "inference"):
            return cls(trainer, evaluations, encoding, **kwargs)
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
        job = InferenceJob.from_params(
            model_config,
            _trainer_params(trainer),
            tokenizer=getattr(trainer, "tokenizer", None),
            **job_kwargs,
        )
        evaluator = cls(job, evaluations, encoding, **kwargs)
        evaluator._params_source = trainer
        evaluator._params_seen = _trainer_params(trainer)
        return evaluator

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        evaluations: Sequence[Evaluation],
        encoding: Any = None,
        *,
        results_dir: str | Path = "results",
        project: str = "general",
        group: str = "default",
        name: str | None = None,
        **job_kwargs: Any,
    ) -> Evaluator:
        """An evaluator for a Hugging Face model directory or a shipped model name (``"tiny-adder"``).

        ``job_kwargs`` go to ``InferenceJob.from_checkpoint`` (``tokenizer=``, ``per_device_batch_size=``...);
        ``name`` defaults to the directory name. The model's config is ``evaluator.inference.config``.
        """
        from ..jax import InferenceJob, resolve_model

        directory = resolve_model(path)
        job = InferenceJob.from_checkpoint(directory, **job_kwargs)
        return cls(
            job,
            evaluations,
            encoding,
            results_dir=results_dir,
            project=project,
            group=group,
            name=name or directory.name,
        )

    def update_params(self, params: Any) -> None:
        """Evaluate new parameters (same tree and shapes) from now on; compiled programs are kept."""
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as PS

        from ..jax import InferenceState

        job: Any = self.inference
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
        """Whether ``results.json`` exists."""
        return self.results_path.exists()

    def evaluate(self, reduce: str = "mean", return_intermediates: bool = False, **kwargs: Any) -> Any:
        """Run every evaluation: ``{name: value}`` in evaluation order (a float for ``"mean"``/``"sum"``, the
        per-sample array for ``"none"``), plus the list of each evaluation's intermediates when asked. Keyword
        arguments (``temperature``, ``top_p``, ``samples_per_prompt``, ``seed``...) go to every evaluation."""
        check_reduce(reduce)
        if not self.evaluations:
            raise EvaluationError("the evaluator has no evaluations to run")
        self._refresh_params()
        results: dict[str, Any] = {}
        inters: list[list[Intermediate]] = []
        for evaluation in self.evaluations:
            out = evaluation(
                self.inference,
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
        """Evaluate (``reduce="mean"``) and write ``results.json`` atomically; returns the results."""
        results = {k: float(v) for k, v in self.evaluate().items()}
        payload = {"job": self.name, "project": self.project, "group": self.group, "results": results}
        path = self.results_path
        try:
            atomic_write_text(path, json.dumps(payload, indent=2) + "\n")
        except OSError as exc:
            raise OSError(
                f"cannot write evaluation results to {path}: {exc}. Pass results_dir= a writable directory."
            ) from exc
        return results

    def __call__(self) -> dict[str, float]:
        """Run unless done; returns the saved results either way."""
        if not self.done:
            return self.run()
        return dict(json.loads(self.results_path.read_text(encoding="utf-8"))["results"])

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


def _field(config: Any, key: str) -> Any:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def _trainer_params(trainer: Any) -> Any:
    params = getattr(trainer, "params", None)
    if params is None:
        params = getattr(getattr(trainer, "state", None), "params", None)
    return params
