"""The :class:`Evaluation` base class, the per-sample result :class:`EvaluationSample`, :func:`reduce_scores`, and
:class:`Prepared`: the start every built-in ``evaluate_samples`` shares (bind the job to the encoding, pick the
indices, read and check the rows).
"""

from __future__ import annotations

import hashlib
import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EvaluationError
from .job import ModelJob, as_job, bind

__all__ = [
    "REDUCTIONS",
    "Evaluation",
    "EvaluationSample",
    "Intermediate",
    "Intermediates",
    "Prepared",
    "check_reduce",
    "reduce_scores",
]

#: Valid ``reduce`` arguments.
REDUCTIONS = ("mean", "sum", "none")


class Intermediate(tuple[np.ndarray, np.ndarray]):
    """One row of ``return_intermediates``: the pair ``(x, padding_mask)`` the seed documents, so ``x, m = row``
    works, and the row's action mask as an attribute.

    Attributes (numpy, shape (T,)):
        x: token ids, int32, left-padded with the pad token (``row[0]``).
        padding_mask: bool, True on real tokens (``row[1]``).
        action_mask: bool, True on the tokens the model produced or was scored on: a rollout's generated slots,
            the scored tokens of a text (not its start token), the chosen continuation of a comparison. An RL
            trainer's policy-gradient mask.
    """

    action_mask: np.ndarray

    def __new__(cls, x: np.ndarray, padding_mask: np.ndarray, action_mask: np.ndarray) -> Intermediate:
        row = super().__new__(cls, (x, padding_mask))
        row.action_mask = action_mask
        return row

    @property
    def x(self) -> np.ndarray:
        return self[0]

    @property
    def padding_mask(self) -> np.ndarray:
        return self[1]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Intermediate, (self[0], self[1], self.action_mask))

    def __repr__(self) -> str:
        return f"Intermediate(x={self[0]!r}, padding_mask={self[1]!r}, action_mask={self.action_mask!r})"


#: ``evaluate_samples``' ``intermediates`` argument: a list to append one :class:`Intermediate` per sample to, when
#: the caller asked for them (``return_intermediates=True``); else ``None``.
Intermediates = list[Intermediate] | None


@dataclass(frozen=True, kw_only=True)
class EvaluationSample:
    """One scored row of an evaluation.

    Attributes:
        index: the dataset index (``get(index)``). With ``samples_per_prompt = n`` the ``n`` samples of a prompt
            are consecutive and share the index.
        input: the prompt (a string, or the list of chat messages ``get`` returned) or the scored text.
        target: the expected output (rollouts), the correct continuation (comparison), else ``None``.
        output: what the model produced: the cleaned generation (rollouts), the cleaned argmax prediction
            (encoding), the chosen continuation (comparison), ``None`` for perplexity.
        score: the per-sample score the evaluation reduces.
        metrics: named per-sample numbers (``{"correct": 1.0}``, ``{"nll": ..., "tokens": ...}``, a reward
            function's metric scores).
        reason: a short explanation, when there is one (a reward function's ``reason``, the comparison's choice).
        error: why the sample could not be scored (its score is then 0), e.g. a reward function that raised.
    """

    index: int
    input: Any
    score: float
    target: Any = None
    output: Any = None
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    error: str | None = None


def check_reduce(reduce: str) -> None:
    """``ValueError`` unless ``reduce`` is one of :data:`REDUCTIONS`."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(map(repr, REDUCTIONS))}; got {reduce!r}")


def reduce_scores(scores: Iterable[float], reduce: str = "mean") -> float | np.ndarray:
    """``"mean"`` -> float mean, ``"sum"`` -> float sum, ``"none"`` -> float64 array; else ``ValueError``."""
    check_reduce(reduce)
    arr = np.asarray(list(scores), np.float64)
    if reduce == "none":
        return arr
    if reduce == "sum":
        return float(arr.sum())
    if arr.size == 0:
        raise ValueError("reduce='mean' of no scores is undefined")
    return float(arr.mean())


@dataclass(frozen=True)
class Prepared:
    """Where a built-in ``evaluate_samples`` starts: the job bound to the encoding, the dataset indices to score
    (all, or the job's random subset) and the rows ``get`` returned for them, read and checked."""

    name: str
    job: ModelJob
    encoding: Any
    indices: list[int]
    rows: list[Any]

    @property
    def check_ids(self) -> bool:
        """Whether the encoding could produce ids the model does not have (then every encoding is checked)."""
        size = getattr(self.encoding, "vocab_size", None)
        return size is None or int(size) > int(self.job.config.vocab_size)

    def check_tokens(self, index: int, ids: Sequence[int]) -> None:
        """:class:`EvaluationError` naming sample ``index`` if an id is outside the model's vocabulary."""
        V = int(self.job.config.vocab_size)
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise EvaluationError(
                f"evaluation {self.name!r}, sample {index}: token id {bad[0]} is outside the model's "
                f"vocabulary (0..{V - 1}): the encoding does not match the model"
            )

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode one text per index (special tokens allowed), every id checked when :attr:`check_ids`."""
        encoded = [list(ids) for ids in self.encoding.encode_batch(list(texts), allowed_special="all")]
        if self.check_ids:
            for i, ids in zip(self.indices, encoded, strict=True):
                self.check_tokens(i, ids)
        return encoded

    def read(self, ids: Sequence[int]) -> list[int]:
        """A text's ids as the job reads them (after its start token, if it has one)."""
        return self.job.with_start_token(ids)

    def scores(self, values: Iterable[float], n: int) -> list[float]:
        """``score()``'s values as floats; :class:`EvaluationError` unless there are exactly ``n``."""
        out = [float(v) for v in values]
        if len(out) != n:
            raise EvaluationError(
                f"evaluation {self.name!r}: score() returned {len(out)} values for {n} samples"
            )
        return out

    def intermediates(self, rows: Sequence[tuple[Sequence[int], int]]) -> list[Intermediate]:
        """``(tokens, action_from)`` rows left-padded to the longest: the action mask covers
        ``tokens[action_from:]``."""
        T = max(len(tokens) for tokens, _ in rows)
        return [intermediate(tokens, start, T, int(self.encoding.pad_token)) for tokens, start in rows]


def _dataset_key(samples: Sequence[EvaluationSample]) -> str:
    """A digest of what was evaluated (indices, inputs, targets; not the results): equal on processes that
    evaluated the same dataset."""
    rows = [(s.index, s.input, s.target) for s in samples]
    return hashlib.sha256(pickle.dumps(rows, protocol=4)).hexdigest()


def intermediate(tokens: Sequence[int], action_from: int, length: int, pad: int) -> Intermediate:
    """Left-pad ``tokens`` to ``length``; the action mask covers ``tokens[action_from:]``."""
    n = len(tokens)
    x = np.full(length, pad, np.int32)
    x[length - n :] = tokens
    padding = np.zeros(length, bool)
    padding[length - n :] = True
    action = np.zeros(length, bool)
    action[length - n + action_from :] = True
    return Intermediate(x, padding, action)


class Evaluation(ABC):
    """A dataset adapter: ``len`` samples, scored through a model job, one float per sample.

    The built-in classes implement :meth:`evaluate_samples`; a direct subclass implements it too (append one
    :class:`Intermediate` per sample to ``intermediates`` when that list is given).
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """Name of this evaluation (the key in results)."""

    def prefix(self) -> str:
        """Prefix for metrics from this evaluation: ``name + "_"``."""
        return f"{self.name}_"

    @abstractmethod
    def __len__(self) -> int:
        """Number of samples in this evaluation."""

    @abstractmethod
    def evaluate_samples(self, inference: Any, encoding: Any = None, **kwargs: Any) -> list[EvaluationSample]:
        """Run the evaluation: one :class:`EvaluationSample` per scored row, in dataset order."""

    def __call__(
        self,
        inference: Any,
        encoding: Any = None,
        reduce: str = "mean",
        return_intermediates: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run the evaluation and reduce the per-sample scores (see :func:`reduce_scores`).

        Returns the score, or ``(score, intermediates)`` with ``return_intermediates``: a list of ``(x,
        padding_mask)`` numpy pairs, one per sample (:class:`Intermediate`; ``row.action_mask`` is the action
        mask). Other keyword arguments go to :meth:`evaluate_samples` (classes ignore the ones they do not use,
        e.g. ``temperature`` for perplexity; ``chunk_size`` bounds the batches in flight, see
        ``pytest_reward.jax.inference``).
        """
        check_reduce(reduce)
        intermediates: Intermediates = [] if return_intermediates else None
        if intermediates is not None:
            kwargs["intermediates"] = intermediates
        samples = self.shared_samples(inference, encoding, **kwargs)
        value = reduce_scores([s.score for s in samples], reduce)
        return (value, intermediates) if return_intermediates else value

    def shared_samples(self, inference: Any, encoding: Any = None, **kwargs: Any) -> list[EvaluationSample]:
        """:meth:`evaluate_samples` (keyword arguments as there, ``intermediates`` included), the same on every
        process of a multi-process run (a job whose ``hosts`` is set, see ``pytest_reward.jax.hosts``).

        Every process runs ``evaluate_samples`` (the job shares the model calls). When every process evaluated the
        same dataset (the same indices, inputs and targets: the usual case), every process returns process 0's
        samples and intermediates, so scores, verdicts and RL batches cannot drift apart. When the datasets differ
        (each host holds its own shard, of any size), every process returns the union: process 0's samples, then
        process 1's, and so on. Single process: ``evaluate_samples`` as it is."""
        samples = self.evaluate_samples(inference, encoding, **kwargs)
        hosts = getattr(as_job(inference), "hosts", None)
        if hosts is None:
            return samples
        intermediates = kwargs.get("intermediates")
        mine = (samples, intermediates)
        keys = hosts.exchange(f"evaluation {self.name!r}: its samples' dataset", _dataset_key(samples))
        if all(k == keys[0] for k in keys):
            parts = [hosts.broadcast(f"evaluation {self.name!r}: process 0's samples", mine)]
        else:
            parts = hosts.exchange(f"evaluation {self.name!r}: every process's samples", mine)
        if intermediates is not None:
            intermediates[:] = [row for _, rows in parts for row in rows or ()]
        return [s for part, _ in parts for s in part]

    def score(self, *args: Any) -> list[float]:
        """Return one float per evaluation sample. Subclasses override."""
        raise NotImplementedError(f"{type(self).__name__} must override score()")

    @staticmethod
    def find_accumulation_steps(
        dataset_size: int, max_batch_size: int, dp_replicate: int
    ) -> tuple[int, int] | tuple[None, None]:
        """Find a per-device batch size and accumulation steps that split the dataset evenly.

        ``max_batch_size`` is the largest **per-device** batch size. Returns ``(batch_size, steps)`` for the
        largest ``batch_size <= max_batch_size`` such that ``batch_size * dp_replicate`` (one step's global
        batch) divides ``dataset_size``, with ``steps = dataset_size // (batch_size * dp_replicate)``; so
        ``batch_size * dp_replicate * steps == dataset_size``. ``(None, None)`` when no per-device size divides
        evenly (only when ``dp_replicate`` does not divide ``dataset_size``). ``(1000, 32, 2)`` -> ``(25, 20)``,
        ``(96, 32, 4)`` -> ``(24, 1)``. The evaluations here do not need it (the job buckets and pads batches
        itself); it is kept for code written against theseus.
        """
        for label, value in (
            ("dataset_size", dataset_size),
            ("max_batch_size", max_batch_size),
            ("dp_replicate", dp_replicate),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        for batch_size in range(int(max_batch_size), 0, -1):
            if dataset_size % (batch_size * dp_replicate) == 0:
                return batch_size, int(dataset_size // (batch_size * dp_replicate))
        return None, None

    # -- the shared start of evaluate_samples
    def _prepare(
        self, inference: Any, encoding: Any, read: Callable[[int, Any], Any] | None = None
    ) -> Prepared:
        """Bind the job to the encoding, pick the indices, and read each row (``read(index, get(index))``
        checks and converts it; default: as ``get`` returned it)."""
        job, enc = bind(self.name, inference, encoding)
        indices = self._indices(job)
        rows = [self._get(i) if read is None else read(i, self._get(i)) for i in indices]
        return Prepared(self.name, job, enc, indices, rows)

    def _indices(self, job: ModelJob) -> list[int]:
        """All indices, or a seeded random subset of ``job.length`` of them (theseus's ``eval/length``)."""
        n = len(self)
        if n == 0:
            raise EvaluationError(
                f"evaluation {self.name!r} has no samples (len() == 0): there is nothing to evaluate"
            )
        length = int(job.length or -1)
        if 0 < length < n:
            return list(job.random.sample(range(n), length))
        return list(range(n))

    def _get(self, index: int) -> Any:
        try:
            return self.get(index)  # type: ignore[attr-defined]
        except Exception as exc:
            raise EvaluationError(
                f"evaluation {self.name!r}: get({index}) raised {type(exc).__name__}: {exc}"
            ) from exc

    def _text(self, index: int, value: Any) -> str:
        """A row that must be a non-empty string (encoding and perplexity evaluations)."""
        if not isinstance(value, str):
            raise EvaluationError(
                f"evaluation {self.name!r}: get({index}) must return a string, got {type(value).__name__}"
            )
        if not value:
            raise EvaluationError(f"evaluation {self.name!r}, sample {index}: the text is empty")
        return value

    def __repr__(self) -> str:
        try:
            return f"<{type(self).__name__} {self.name!r}>"
        except Exception:
            return f"<{type(self).__name__}>"
