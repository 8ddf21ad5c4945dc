"""Evaluations: small dataset adapters scored through an :class:`~.inference.InferenceJob`, and an
:class:`Evaluator` that runs a list of them and saves the results.

The API is theseus's (``Evaluation``, ``RolloutEvaluation``, ``EncodingEvaluation``, ``PerplexityEvaluation``,
``PerplexityComparisonEvaluation``, ``Evaluator``), with its known bugs fixed. An evaluation owns no model and no
compiled program: every model call goes through the job's batched, shape-bucketed API (``generate_tokens``,
``token_nll``, ``loglikelihood``, ``logits``), one call per evaluation, so the job's executables are shared by
every evaluation and every test.

A subclass is a few lines::

    class Sums(RolloutEvaluation):
        name = "sums"
        def __init__(self, rows): self.rows = rows
        def __len__(self): return len(self.rows)
        def get(self, i): return self.rows[i]["prompt"], self.rows[i]["answer"]
        def max_new_tokens(self, inference): return 6
        def check(self, y, y_hat): return y == y_hat

    accuracy = Sums(rows)(job)                       # float; reduce="sum" | "none" also
    samples = Sums(rows).evaluate_samples(job)       # list[EvaluationSample]

Decisions (each differs from, or pins down, what theseus does):

* **One float per sample, one reduction.** ``evaluate_samples`` returns one :class:`EvaluationSample` per scored
  row; ``__call__`` is exactly :func:`reduce_scores` of their ``score``\\ s: ``"mean"`` averages, ``"sum"`` sums,
  ``"none"`` returns the per-sample float64 array, anything else is a ``ValueError`` (raised before the model
  runs). The two views cannot disagree.
* **Perplexity is ppl, lower is better, everywhere.** A sample's score is its perplexity
  ``exp(nll / tokens)``, every token of the text scored after the BOS (else end-of-text) token. ``reduce="mean"``
  is therefore the *mean of per-sample perplexities* (each text weighs the same), not the corpus perplexity
  ``exp(sum nll / sum tokens)``; that one is :meth:`PerplexityEvaluation.corpus_perplexity` (and
  ``InferenceJob.perplexity``). Each sample's ``metrics`` carry ``nll`` (summed, nats) and ``tokens``.
* **Comparison scores exactly the continuation's tokens.** Each continuation is scored by the job's
  ``loglikelihood(prefix, continuation)``: the log-probability of its own tokens given the prefix (the
  prediction of its first token included, nothing after its last). The choice is the argmax of the *mean*
  log-probability per token (``selection = "mean"``, the default; robust to choices of different lengths) or of
  the *sum* (``selection = "sum"``, lm-eval's ``acc``). Ties go to the first choice.
* **``clean`` receives the generated text only**: not the prompt, and cut before the end-of-text token and
  before the first end marker (``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>``... see ``end_markers``) and any
  ``stop`` string. ``"B<|im_end|>\\n<|im_start|>user..."`` reaches ``clean`` as ``"B"``.
* **Prompts are never silently truncated**: a prompt that does not fit ``block_size - max_new_tokens`` raises
  :class:`EvaluationError` naming the sample, unless the evaluation sets ``truncate = "left"`` (keep the end of
  the prompt, where its cue is; theseus kept the head).
* **An empty evaluation is an error** (:class:`EvaluationError`), not a score of 0.
* **Intermediates** (``return_intermediates=True``, for RL consumers) are one ``(tokens int32 (T,), action_mask
  bool (T,), padding_mask bool (T,))`` triple per sample for every class: rollouts use theseus's layout (prompt
  left-padded to ``block_size - max_new_tokens``, generation after it, slots after the stop token masked out);
  the scoring classes mark the scored tokens as the action.

``encoding`` defaults to ``inference.tokenizer``. Another encoding (any object with ``encode``, ``decode`` and
``eot_token``; theseus's tokenizers qualify) is used through a view of the job that shares its compiled
programs; its vocabulary must fit the model's (``vocab_size`` larger than the model's raises
:class:`EvaluationError`), and any token id outside the model's vocabulary raises, naming the sample.

Several hosts: evaluations run the same Python on every process (the job shards and gathers), so every process
gets the same samples and scores.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..rollouts import END_MARKERS  # end-of-turn / end-of-text markers cut before ``clean`` sees the text

__all__ = [
    "END_MARKERS",
    "REDUCTIONS",
    "EncodingEvaluation",
    "Evaluation",
    "EvaluationError",
    "EvaluationSample",
    "Evaluator",
    "PerplexityComparisonEvaluation",
    "PerplexityEvaluation",
    "RolloutEvaluation",
    "reduce_scores",
]

#: Valid ``reduce`` arguments.
REDUCTIONS = ("mean", "sum", "none")


#: A row of ``return_intermediates``: tokens, action mask, padding mask.
Intermediate = tuple[np.ndarray, np.ndarray, np.ndarray]


class EvaluationError(ValueError):
    """An evaluation that cannot run on its data. The message names the evaluation and, when one is to blame,
    the sample index."""


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


def reduce_scores(scores: Iterable[float], reduce: str = "mean") -> float | np.ndarray:
    """``"mean"`` -> float mean, ``"sum"`` -> float sum, ``"none"`` -> float64 array; else ``ValueError``."""
    _check_reduce(reduce)
    arr = np.asarray(list(scores), np.float64)
    if reduce == "none":
        return arr
    if reduce == "sum":
        return float(arr.sum())
    if arr.size == 0:
        raise ValueError("reduce='mean' of no scores is undefined")
    return float(arr.mean())


def _check_reduce(reduce: str) -> None:
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(map(repr, REDUCTIONS))}; got {reduce!r}")


# ---------------------------------------------------------------------------------------------- the job side
def _as_job(inference: Any) -> Any:
    """An ``InferenceJob``; an :class:`Evaluator` (or anything holding one as ``.inference``) is unwrapped."""
    if not hasattr(inference, "generate_tokens") and hasattr(inference, "inference"):
        return inference.inference
    return inference


class _Encoding:
    """Gives a foreign encoding (theseus-style: ``encode``, ``decode``, ``eot_token``) the members the job uses."""

    def __init__(self, inner: Any):
        self.inner = inner

    @property
    def eot_token(self) -> int:
        return int(self.inner.eot_token)

    @property
    def pad_token(self) -> int:
        pad = getattr(self.inner, "pad_token", None)
        return self.eot_token if pad is None else int(pad)

    @property
    def bos_token(self) -> int | None:
        return getattr(self.inner, "bos_token", None)

    @property
    def vocab_size(self) -> int | None:
        size = getattr(self.inner, "vocab_size", None)
        return None if size is None else int(size)

    def encode(self, text: str, allowed_special: Any = "all") -> list[int]:
        return list(self.inner.encode(text, allowed_special=allowed_special))

    def encode_batch(self, texts: Sequence[str], allowed_special: Any = "all") -> list[list[int]]:
        if hasattr(self.inner, "encode_batch"):
            return [list(x) for x in self.inner.encode_batch(list(texts), allowed_special=allowed_special)]
        return [self.encode(t, allowed_special) for t in texts]

    def decode(self, tokens: Iterable[int]) -> str:
        return self.inner.decode([int(t) for t in tokens])

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(b) for b in batch]

    def apply_chat_template(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str:
        if hasattr(self.inner, "apply_chat_template"):
            return self.inner.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
        from .tokenizer import render_chatml

        return render_chatml(messages, add_generation_prompt)


def _bind(evaluation: Evaluation, inference: Any, encoding: Any) -> tuple[Any, Any]:
    """(job, encoding) to run with: the job itself for its own tokenizer, else a view of the job (sharing its
    parameters, compiled executables and counters) whose tokenizer is ``encoding``."""
    job = _as_job(inference)
    if encoding is None or encoding is job.tokenizer:
        return job, job.tokenizer
    V = int(job.config.vocab_size)
    enc = _Encoding(encoding)
    size = enc.vocab_size
    if size is not None and size > V:
        raise EvaluationError(
            f"evaluation {evaluation.name!r}: the encoding has {size} tokens but the model only {V}: it is not "
            "this model's tokenizer. Pass the model's tokenizer (the default, inference.tokenizer)."
        )
    for what, token in (("end-of-text", enc.eot_token), ("padding", enc.pad_token)):
        if not 0 <= token < V:
            raise EvaluationError(
                f"evaluation {evaluation.name!r}: the encoding's {what} token {token} is outside the model's "
                f"vocabulary (0..{V - 1}): it is not this model's tokenizer"
            )
    view = copy.copy(job)
    view.tokenizer = enc
    view.stop_token_ids = tuple(sorted({t for t in (enc.eot_token, *job.config.eos_token_ids) if 0 <= t < V}))
    return view, enc


def _needs_id_check(job: Any, encoding: Any) -> bool:
    size = getattr(encoding, "vocab_size", None)
    return size is None or int(size) > int(job.config.vocab_size)


def _check_ids(evaluation: Evaluation, job: Any, index: int, ids: Sequence[int]) -> None:
    V = int(job.config.vocab_size)
    bad = [t for t in ids if not 0 <= t < V]
    if bad:
        raise EvaluationError(
            f"evaluation {evaluation.name!r}, sample {index}: token id {bad[0]} is outside the model's "
            f"vocabulary (0..{V - 1}): the encoding does not match the model"
        )


def _prefix_token(encoding: Any) -> int:
    """What the job puts before a text to score its first token: BOS, else end-of-text."""
    bos = getattr(encoding, "bos_token", None)
    return int(encoding.eot_token) if bos is None else int(bos)


def _triple(tokens: Sequence[int], action_from: int, length: int, pad: int) -> Intermediate:
    """Left-pad ``tokens`` to ``length``; the action mask covers ``tokens[action_from:]``."""
    n = len(tokens)
    x = np.full(length, pad, np.int32)
    x[length - n :] = tokens
    padding = np.zeros(length, bool)
    padding[length - n :] = True
    action = np.zeros(length, bool)
    action[length - n + action_from :] = True
    return x, action, padding


# ---------------------------------------------------------------------------------------------- Evaluation
class Evaluation(ABC):
    """A dataset adapter: ``len`` samples, scored through an ``InferenceJob``, one float per sample.

    The four classes below implement :meth:`evaluate_samples`; a direct subclass implements it too (append
    one intermediate triple per sample to ``intermediates`` when that list is given).
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

        Returns the score, or ``(score, intermediates)`` with ``return_intermediates``: one ``(tokens,
        action_mask, padding_mask)`` triple of numpy arrays per sample. Other keyword arguments go to
        :meth:`evaluate_samples` (classes ignore the ones they do not use, e.g. ``temperature`` for perplexity).
        """
        _check_reduce(reduce)
        intermediates: list[Intermediate] | None = [] if return_intermediates else None
        if intermediates is not None:
            kwargs["intermediates"] = intermediates
        samples = self.evaluate_samples(inference, encoding, **kwargs)
        value = reduce_scores([s.score for s in samples], reduce)
        return (value, intermediates) if return_intermediates else value

    def score(self, *args: Any) -> list[float]:
        """Return one float per evaluation sample. Subclasses override."""
        raise NotImplementedError(f"{type(self).__name__} must override score()")

    @staticmethod
    def find_accumulation_steps(
        dataset_size: int, max_batch_size: int, dp_replicate: int
    ) -> tuple[int, int] | tuple[None, None]:
        """Find a batch size and accumulation steps that split the dataset evenly.

        Returns ``(batch_size, dataset_size // batch_size)`` for the largest ``batch_size <= max_batch_size``
        that divides ``dataset_size`` and is a multiple of ``dp_replicate`` (so each replica gets
        ``batch_size // dp_replicate`` rows), or ``(None, None)`` when there is none. The evaluations here do
        not need it (the job buckets and pads batches itself); it is kept for code written against theseus.
        """
        for label, value in (
            ("dataset_size", dataset_size),
            ("max_batch_size", max_batch_size),
            ("dp_replicate", dp_replicate),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        for batch_size in range(max_batch_size - max_batch_size % dp_replicate, 0, -dp_replicate):
            if dataset_size % batch_size == 0:
                return int(batch_size), int(dataset_size // batch_size)
        return None, None

    # -- shared helpers
    def _indices(self, job: Any) -> list[int]:
        """All indices, or a seeded random subset of ``job.length`` of them (theseus's ``eval/length``)."""
        n = len(self)
        if n == 0:
            raise EvaluationError(
                f"evaluation {self.name!r} has no samples (len() == 0): there is nothing to evaluate"
            )
        length = int(getattr(job, "length", -1) or -1)
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

    def __repr__(self) -> str:
        try:
            return f"<{type(self).__name__} {self.name!r}>"
        except Exception:
            return f"<{type(self).__name__}>"


# ---------------------------------------------------------------------------------------------- rollouts
class RolloutEvaluation(Evaluation):
    """Evaluation by generation: ``get(i) -> (prompt, expected)``, the model continues the prompt, and the
    cleaned generation is scored.

    The prompt is a string, or a list of chat messages (dicts or objects with ``role`` and ``content``), rendered
    with the encoding's chat template (ChatML by default) and an open assistant turn. Subclasses implement
    ``name``, ``__len__``, ``get``, ``max_new_tokens`` and one scorer:

    * ``check(y, y_hat) -> bool`` (score 1.0 / 0.0, also reported as the ``correct`` metric);
    * or ``score(ys, y_hats) -> list[float]`` (one float per generated sample);
    * or a reward function: ``reward=`` at construction or a ``reward`` class attribute, any
      ``@reward_function`` (ours or reward-kit's; pointwise, batch or async). It is called with
      ``messages=[*prompt messages, {"role": "assistant", "content": generated}]`` and
      ``ground_truth=expected`` (batch mode: ``rollouts_messages`` and a ``ground_truth`` list); the sample's
      score is ``EvaluateResult.score``, its metrics the result's metric scores. A reward function that raises
      or returns something unusable scores that sample 0 with the error recorded; the evaluation goes on.
      The reward function sees the generated text (end markers cut) before ``clean``.

    Class attributes give defaults that call keyword arguments override: ``temperature`` (0 = greedy),
    ``top_p``, ``top_k``, ``samples_per_prompt`` (n consecutive samples per prompt), ``seed`` (``None``: a fresh
    seed per call), ``stop`` (extra strings that end the generated text), ``end_markers``, ``truncate``.
    """

    reward: Callable[..., Any] | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    samples_per_prompt: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    end_markers: tuple[str, ...] = END_MARKERS
    truncate: Literal["error", "left"] = "error"

    def __init__(self, *, reward: Callable[..., Any] | None = None):
        if reward is not None:
            self.reward = _check_reward(reward)

    @abstractmethod
    def get(self, indx: int) -> tuple[Any, Any]:
        """Sample at index: ``(prompt, expected)``; the prompt is a string or a list of chat messages."""

    def max_new_tokens(self, inference: Any) -> int:
        """Maximum tokens to generate. Subclasses must override: it fixes the prompt budget
        ``block_size - max_new_tokens``."""
        raise NotImplementedError(
            f"{type(self).__name__} must override max_new_tokens(inference) (the generation budget; prompts get "
            "block_size - max_new_tokens positions)"
        )

    def clean(self, y_hat: str) -> str:
        """Normalise the generated text before scoring. ``y_hat`` is the generated text only (no prompt), cut
        before the end-of-text token, the first end marker and the first ``stop`` string. Default: strip."""
        return y_hat.strip()

    def check(self, y: Any, y_hat: str) -> bool:
        """Whether the cleaned generation ``y_hat`` matches the expected ``y``."""
        raise NotImplementedError(
            f"{type(self).__name__} must override check(y, y_hat) or score(ys, y_hats), or be given a reward "
            "function (reward=...)"
        )

    def score(self, ys: list[Any], y_hats: list[str]) -> list[float]:  # type: ignore[override]
        """Per-sample scores. Default: ``float(check(y, y_hat))``."""
        return [float(self.check(y, y_hat)) for y, y_hat in zip(ys, y_hats, strict=True)]

    def _reward_function(self) -> Callable[..., Any] | None:
        # A function stored as a class attribute would come back bound to the instance: read it unbound.
        fn = (
            vars(self)["reward"]
            if "reward" in vars(self)
            else inspect.getattr_static(type(self), "reward", None)
        )
        return fn.__func__ if isinstance(fn, staticmethod) else fn

    def evaluate_samples(
        self,
        inference: Any,
        encoding: Any = None,
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        samples_per_prompt: int | None = None,
        seed: int | None = None,
        chunk_size: int | None = None,
        intermediates: list[Intermediate] | None = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        """Generate for every prompt in one batched job call, then score. ``chunk_size`` is accepted for theseus
        compatibility and ignored (the job chooses its batches)."""
        job, enc = _bind(self, inference, encoding)
        indices = self._indices(job)
        reward = self._reward_function()
        if reward is not None:
            _check_reward(reward)
        n = int(self.samples_per_prompt if samples_per_prompt is None else samples_per_prompt)
        if n < 1:
            raise EvaluationError(f"evaluation {self.name!r}: samples_per_prompt must be >= 1, got {n}")
        max_new = int(self.max_new_tokens(job))
        budget = int(job.block_size) - max_new
        if max_new < 1 or budget < 1:
            raise EvaluationError(
                f"evaluation {self.name!r}: max_new_tokens()={max_new} must be >= 1 and leave room for a prompt "
                f"in block_size={job.block_size}"
            )
        prompts, targets = self._load(indices)
        encoded = self._encode_prompts(job, enc, indices, prompts, max_new)
        gens, fed = job.generate_tokens(
            encoded,
            max_new,
            temperature=float(self.temperature if temperature is None else temperature),
            top_k=int(self.top_k if top_k is None else top_k),
            top_p=float(self.top_p if top_p is None else top_p),
            seed=self.seed if seed is None else seed,
            n=n,
            truncate="left",
        )
        generated = self._generated_text(job, enc, gens)
        outputs = [self.clean(g) for g in generated]
        rows = [(i, p, t) for i, p, t in zip(indices, prompts, targets, strict=True) for _ in range(n)]
        ys = [t for _, _, t in rows]
        if reward is not None:
            scored = _score_with_reward(reward, [p for _, p, _ in rows], generated, ys)
        else:
            scores = list(self.score(ys, outputs))
            if len(scores) != len(rows):
                raise EvaluationError(
                    f"evaluation {self.name!r}: score() returned {len(scores)} values for {len(rows)} samples"
                )
            by_check = type(self).score is RolloutEvaluation.score
            scored = [(float(s), {"correct": float(s)} if by_check else {}, None, None) for s in scores]
        if intermediates is not None:
            pad = int(enc.pad_token)
            for k, gen in enumerate(gens):  # theseus's layout: prompt in [0, budget), generation after it
                row = _triple([*fed[k // n], *gen], len(fed[k // n]), budget + len(gen), pad)
                intermediates.append(_right_pad(row, budget + max_new, pad))
        return [
            EvaluationSample(
                index=i, input=p, target=t, output=out, score=s, metrics=metrics, reason=reason, error=error
            )
            for (i, p, t), out, (s, metrics, reason, error) in zip(rows, outputs, scored, strict=True)
        ]

    def _load(self, indices: Sequence[int]) -> tuple[list[Any], list[Any]]:
        """(prompts, expected) of the samples, checked."""
        prompts, targets = [], []
        for i in indices:
            item = self._get(i)
            if not isinstance(item, tuple | list) or len(item) != 2:
                raise EvaluationError(
                    f"evaluation {self.name!r}: get({i}) must return (prompt, expected), got {item!r:.200}"
                )
            prompt, target = item
            if not isinstance(prompt, str | list | tuple):
                raise EvaluationError(
                    f"evaluation {self.name!r}: sample {i}'s prompt must be a string or a list of chat "
                    f"messages, got {type(prompt).__name__}"
                )
            prompts.append(prompt)
            targets.append(target)
        return prompts, targets

    def _encode_prompts(
        self, job: Any, enc: Any, indices: Sequence[int], prompts: Sequence[Any], max_new: int
    ) -> list[list[int]]:
        """Render chats, encode, and check every prompt fits the budget and the model's vocabulary."""
        budget = int(job.block_size) - max_new
        texts = [p if isinstance(p, str) else enc.apply_chat_template(list(p)) for p in prompts]
        encoded = [list(ids) for ids in enc.encode_batch(texts, allowed_special="all")]
        check_ids = _needs_id_check(job, enc)
        for i, ids in zip(indices, encoded, strict=True):
            if len(ids) > budget and self.truncate != "left":
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: the prompt has {len(ids)} tokens; with "
                    f"max_new_tokens={max_new} it needs {len(ids) + max_new} positions but block_size is "
                    f"{job.block_size}. Shorten it, lower max_new_tokens(), or set truncate = 'left' to keep "
                    f"its last {budget} tokens."
                )
            if check_ids:
                _check_ids(self, job, i, ids)
        return encoded

    def _generated_text(self, job: Any, enc: Any, gens: Sequence[Sequence[int]]) -> list[str]:
        """What ``clean`` receives: each generation decoded without its stop token, cut before the first end
        marker, end-of-text text or ``stop`` string."""
        stop_ids = set(job.stop_token_ids)
        markers = [m for m in (*self.end_markers, enc.decode([enc.eot_token]), *self.stop) if m]
        out = []
        for gen in gens:
            body = gen[:-1] if gen and gen[-1] in stop_ids else gen
            out.append(_cut(enc.decode(body), markers))
        return out


def _cut(text: str, markers: Sequence[str]) -> str:
    """``text`` before the first occurrence of any marker."""
    cut = min((k for k in (text.find(m) for m in markers) if k >= 0), default=-1)
    return text if cut < 0 else text[:cut]


def _right_pad(row: Intermediate, length: int, pad: int) -> Intermediate:
    x, action, padding = row
    extra = length - len(x)
    if extra <= 0:
        return row
    return (
        np.concatenate([x, np.full(extra, pad, np.int32)]),
        np.concatenate([action, np.zeros(extra, bool)]),
        np.concatenate([padding, np.zeros(extra, bool)]),
    )


def _messages(prompt: Any, generated: str) -> list[Any]:
    history = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    return [*history, {"role": "assistant", "content": generated}]


Scored = tuple[float, dict[str, float], str | None, str | None]  # score, metrics, reason, error


def _check_reward(fn: Any) -> Callable[..., Any]:
    from ..decorator import is_reward_function

    if not is_reward_function(fn):
        raise TypeError(
            f"reward must be a @reward_function (pytest_reward's or reward-kit's), got {fn!r}; decorate it"
        )
    return fn


def _score_with_reward(
    fn: Callable[..., Any], prompts: Sequence[Any], generated: Sequence[str], targets: Sequence[Any]
) -> list[Scored]:
    """Call a reward function on every (prompt, generation) pair; failures score 0 with the error kept."""
    from ..call import describe_exception, run_coroutine, to_result
    from ..decorator import get_spec

    spec = get_spec(_check_reward(fn))
    name = spec.name

    def resolve(value: Any) -> Any:
        return run_coroutine(value) if inspect.isawaitable(value) else value

    def one(result: Any) -> Scored:
        try:
            res = to_result(result, name)
        except Exception as exc:
            return 0.0, {}, None, describe_exception(exc)
        score = float(res.score)
        if not math.isfinite(score):
            return 0.0, {}, res.reason, f"{name} returned a non-finite score ({score})"
        metrics = {k: float(m.score) for k, m in res.metrics.items()}
        return score, metrics, res.reason, res.error

    if spec.mode == "batch":
        try:
            results = resolve(
                fn(
                    rollouts_messages=[_messages(p, g) for p, g in zip(prompts, generated, strict=True)],
                    ground_truth=list(targets),
                )
            )
            if not isinstance(results, list) or len(results) != len(prompts):
                got = len(results) if isinstance(results, list) else type(results).__name__
                raise ValueError(f"{name} returned {got} results for {len(prompts)} rollouts")
        except Exception as exc:
            return [(0.0, {}, None, describe_exception(exc))] * len(prompts)
        return [one(r) for r in results]
    out = []
    for prompt, gen, target in zip(prompts, generated, targets, strict=True):
        try:
            result = resolve(fn(messages=_messages(prompt, gen), ground_truth=target))
        except Exception as exc:
            out.append((0.0, {}, None, describe_exception(exc)))
            continue
        out.append(one(result))
    return out


# ---------------------------------------------------------------------------------------------- encoding
class EncodingEvaluation(Evaluation):
    """Evaluation by next-token prediction: ``get(i) -> text``; the model reads the text (teacher forcing) and
    its argmax prediction at every position is decoded, cleaned and checked against the text.

    ``y_hat`` has one token per token of the text: token ``k`` is the model's guess of the text's token ``k``
    from the tokens before it (the first from the BOS, else end-of-text, token), so a perfect model
    reproduces the text. Subclasses implement ``name``, ``__len__``, ``get`` and ``check(x, y_hat)`` (or
    ``score(xs, y_hats)``); ``clean`` defaults to strip. Metrics: ``correct`` (with ``check``) and
    ``token_accuracy`` (fraction of the text's tokens predicted exactly). A text longer than ``block_size``
    tokens raises :class:`EvaluationError`.
    """

    @abstractmethod
    def get(self, indx: int) -> str:
        """Input string at index."""

    def clean(self, y_hat: str) -> str:
        """Normalise the decoded prediction. Default: strip."""
        return y_hat.strip()

    def check(self, x: str, y_hat: str) -> bool:
        """Whether the cleaned prediction ``y_hat`` is correct for input ``x``."""
        raise NotImplementedError(f"{type(self).__name__} must override check(x, y_hat) or score(xs, y_hats)")

    def score(self, xs: list[str], y_hats: list[str]) -> list[float]:  # type: ignore[override]
        """Per-sample scores. Default: ``float(check(x, y_hat))``."""
        return [float(self.check(x, y_hat)) for x, y_hat in zip(xs, y_hats, strict=True)]

    def evaluate_samples(
        self,
        inference: Any,
        encoding: Any = None,
        *,
        intermediates: list[Intermediate] | None = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        job, enc = _bind(self, inference, encoding)
        indices = self._indices(job)
        texts = [_text(self, i, self._get(i)) for i in indices]
        check_ids = _needs_id_check(job, enc)
        start = _prefix_token(enc)
        seqs = []
        for i, ids in zip(indices, enc.encode_batch(texts, allowed_special="all"), strict=True):
            ids = list(ids)
            if not ids:
                raise EvaluationError(f"evaluation {self.name!r}, sample {i}: the text is empty")
            if len(ids) > job.block_size:
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: the text has {len(ids)} tokens, more than "
                    f"block_size={job.block_size}"
                )
            if check_ids:
                _check_ids(self, job, i, ids)
            seqs.append([start, *ids])
        inputs = [s[:-1] for s in seqs]
        if hasattr(job, "predictions"):  # argmax in vocabulary chunks: no (T, V) logits held
            preds = [p.tolist() for p in job.predictions(inputs)]
        else:
            preds = [np.argmax(lg, axis=-1).tolist() for lg in job.logits(inputs)]
        outputs = [self.clean(d) for d in enc.decode_batch(preds)]
        scores = list(self.score(texts, outputs))
        if len(scores) != len(texts):
            raise EvaluationError(
                f"evaluation {self.name!r}: score() returned {len(scores)} values for {len(texts)} samples"
            )
        by_check = type(self).score is EncodingEvaluation.score
        if intermediates is not None:
            T = max(len(s) for s in seqs)
            intermediates.extend(_triple(s, 1, T, int(enc.pad_token)) for s in seqs)
        samples = []
        for i, x, seq, pred, out, s in zip(indices, texts, seqs, preds, outputs, scores, strict=True):
            metrics = {"correct": float(s)} if by_check else {}
            metrics["token_accuracy"] = float(np.mean(np.asarray(pred) == np.asarray(seq[1:])))
            samples.append(EvaluationSample(index=i, input=x, output=out, score=float(s), metrics=metrics))
        return samples


def _text(evaluation: Evaluation, index: int, value: Any) -> str:
    if not isinstance(value, str):
        raise EvaluationError(
            f"evaluation {evaluation.name!r}: get({index}) must return a string, got {type(value).__name__}"
        )
    return value


# ---------------------------------------------------------------------------------------------- perplexity
class PerplexityEvaluation(Evaluation):
    """Evaluation by perplexity (ppl, lower is better): ``get(i) -> text``.

    Every token of the text is scored, the first given the BOS (else end-of-text) token; texts longer than
    ``block_size`` are scored in consecutive windows (the job's ``token_nll``). A sample's score is its
    perplexity ``exp(nll / tokens)`` and its metrics are ``nll`` (summed, nats) and ``tokens``; ``reduce="mean"``
    is the mean of the per-sample perplexities. The corpus perplexity ``exp(sum nll / sum tokens)`` is
    :meth:`corpus_perplexity`. An empty text raises :class:`EvaluationError`.
    """

    @abstractmethod
    def get(self, indx: int) -> str:
        """Input string at index."""

    def score(self, per_sample_nll: np.ndarray, per_sample_count: np.ndarray) -> list[float]:  # type: ignore[override]
        """Per-sample perplexity ``exp(nll / count)``."""
        nll = np.asarray(per_sample_nll, np.float64)
        count = np.asarray(per_sample_count, np.float64)
        return np.exp(nll / np.maximum(count, 1)).tolist()

    @staticmethod
    def corpus_perplexity(samples: Sequence[EvaluationSample]) -> float:
        """Token-weighted perplexity of the samples as one corpus: ``exp(sum nll / sum tokens)``."""
        nll = sum(s.metrics["nll"] for s in samples)
        tokens = sum(s.metrics["tokens"] for s in samples)
        if tokens <= 0:
            raise ValueError("no tokens: corpus perplexity is undefined")
        return float(math.exp(nll / tokens))

    def evaluate_samples(
        self,
        inference: Any,
        encoding: Any = None,
        *,
        intermediates: list[Intermediate] | None = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        job, enc = _bind(self, inference, encoding)
        indices = self._indices(job)
        texts = [_text(self, i, self._get(i)) for i in indices]
        for i, text in zip(indices, texts, strict=True):
            if not text:
                raise EvaluationError(f"evaluation {self.name!r}, sample {i}: the text is empty")
        encoded: list[list[int]] = []
        if _needs_id_check(job, enc) or intermediates is not None:
            encoded = [list(ids) for ids in enc.encode_batch(texts, allowed_special="all")]
            if _needs_id_check(job, enc):
                for i, ids in zip(indices, encoded, strict=True):
                    _check_ids(self, job, i, ids)
        token_nll = job.token_nll(texts)
        counts = np.asarray([len(x) for x in token_nll], np.float64)
        nll = np.asarray([float(x.sum(dtype=np.float64)) for x in token_nll], np.float64)
        for i, c in zip(indices, counts, strict=True):
            if c == 0:
                raise EvaluationError(f"evaluation {self.name!r}, sample {i}: the text encodes to no tokens")
        scores = list(self.score(nll, counts))
        if len(scores) != len(texts):
            raise EvaluationError(
                f"evaluation {self.name!r}: score() returned {len(scores)} values for {len(texts)} samples"
            )
        if intermediates is not None:
            start = _prefix_token(enc)
            seqs = [[start, *ids] for ids in encoded]
            T = max(len(s) for s in seqs)
            intermediates.extend(_triple(s, 1, T, int(enc.pad_token)) for s in seqs)
        return [
            EvaluationSample(
                index=i, input=x, score=float(s), metrics={"nll": float(total), "tokens": float(c)}
            )
            for i, x, s, total, c in zip(indices, texts, scores, nll, counts, strict=True)
        ]


# ---------------------------------------------------------------------------------------------- comparison
class PerplexityComparisonEvaluation(Evaluation):
    """Multiple choice by likelihood: ``get(i) -> (prefix, continuations, correct_index)``.

    Each continuation is scored by the log-probability of exactly its own tokens given the prefix (the job's
    ``loglikelihood``: lm-eval's split, so tokens merging across the boundary are handled, and a long prefix
    keeps its end). The chosen continuation maximises the mean log-probability per token (``selection =
    "mean"``) or the sum (``selection = "sum"``); ties go to the first. The score is 1.0 when the choice is the
    correct one (metric ``correct``); ``output`` is the chosen continuation, ``target`` the correct one.
    """

    selection: Literal["mean", "sum"] = "mean"

    @abstractmethod
    def get(self, indx: int) -> tuple[str, list[str], int]:
        """Sample at index: ``(prefix, list_of_continuations, correct_index)``."""

    def score(self, correct_flags: list[float]) -> list[float]:  # type: ignore[override]
        """Per-sample correctness (1.0 / 0.0)."""
        return [float(f) for f in correct_flags]

    def evaluate_samples(
        self,
        inference: Any,
        encoding: Any = None,
        *,
        intermediates: list[Intermediate] | None = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        if self.selection not in ("mean", "sum"):
            raise EvaluationError(
                f"evaluation {self.name!r}: selection must be 'mean' or 'sum', got {self.selection!r}"
            )
        job, enc = _bind(self, inference, encoding)
        indices = self._indices(job)
        items = [self._choices(i) for i in indices]
        check_ids = _needs_id_check(job, enc)
        requests = []
        for i, (prefix, conts, _) in zip(indices, items, strict=True):
            prefix_len = len(enc.encode(prefix)) if prefix else 0
            for cont in conts:
                whole = enc.encode(prefix + cont)
                if len(whole) - prefix_len > job.block_size:
                    raise EvaluationError(
                        f"evaluation {self.name!r}, sample {i}: continuation {cont[:40]!r} has about "
                        f"{len(whole) - prefix_len} tokens, more than block_size={job.block_size}"
                    )
                if check_ids:
                    _check_ids(self, job, i, whole)
                requests.append((prefix, cont))
        lls = iter(job.loglikelihood(requests))
        flags, chosen, details = [], [], []
        for i, (_, conts, correct) in zip(indices, items, strict=True):
            results = [next(lls) for _ in conts]
            if any(r.num_tokens == 0 for r in results):
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: a continuation encodes to no tokens"
                )
            values = [r.logprob / r.num_tokens if self.selection == "mean" else r.logprob for r in results]
            k = int(np.argmax(values))
            flags.append(float(k == correct))
            chosen.append((k, results[k]))
            details.append(values)
        scores = list(self.score(flags))
        if len(scores) != len(items):
            raise EvaluationError(
                f"evaluation {self.name!r}: score() returned {len(scores)} values for {len(items)} samples"
            )
        if intermediates is not None:
            rows = []
            for (prefix, conts, _), (k, ll) in zip(items, chosen, strict=True):
                start = [] if prefix else [_prefix_token(enc)]
                whole = [*start, *enc.encode(prefix + conts[k])]
                rows.append((whole, len(whole) - ll.num_tokens))
            T = max(len(w) for w, _ in rows)
            intermediates.extend(_triple(w, a, T, int(enc.pad_token)) for w, a in rows)
        samples = []
        for i, (prefix, conts, correct), s, flag, (k, _), values in zip(
            indices, items, scores, flags, chosen, details, strict=True
        ):
            shown = ", ".join(f"{v:.3f}" for v in values)
            reason = f"chose {k} {conts[k]!r} of {len(conts)} ({self.selection} log-probs: {shown}); correct: {correct}"
            samples.append(
                EvaluationSample(
                    index=i,
                    input=prefix,
                    target=conts[correct],
                    output=conts[k],
                    score=float(s),
                    metrics={"correct": flag},
                    reason=reason,
                )
            )
        return samples

    def _choices(self, index: int) -> tuple[str, list[str], int]:
        item = self._get(index)
        try:
            prefix, conts, correct = item
            conts = list(conts)
            ok = (
                isinstance(prefix, str)
                and conts
                and all(isinstance(c, str) for c in conts)
                and isinstance(correct, int | np.integer)
                and 0 <= int(correct) < len(conts)
            )
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise EvaluationError(
                f"evaluation {self.name!r}: get({index}) must return (prefix, [continuations...], "
                f"correct_index) with a valid index, got {item!r:.200}"
            )
        return prefix, conts, int(correct)


# ---------------------------------------------------------------------------------------------- Evaluator
def _field(config: Any, key: str) -> Any:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


class Evaluator:
    """An ``InferenceJob``, a list of evaluations and an encoding; runs them and saves the results.

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
        self.inference = _as_job(inference)
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
        * an object with the model's ``config`` (a :class:`~.config.ModelConfig`, also read as
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
        from .inference import InferenceJob

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
        from .inference import InferenceJob
        from .zoo import resolve_model

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

        from .inference import InferenceState

        job = self.inference
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
        _check_reduce(reduce)
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
        from ..atomic import atomic_write_text

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


def _trainer_params(trainer: Any) -> Any:
    params = getattr(trainer, "params", None)
    if params is None:
        params = getattr(getattr(trainer, "state", None), "params", None)
    return params
