"""Likelihood evaluations: :class:`PerplexityEvaluation` (per-text perplexity, lower is better) and
:class:`PerplexityComparisonEvaluation` (multiple choice by the likelihood of each continuation)."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..errors import EvaluationError
from .base import Evaluation, EvaluationSample, Intermediates

__all__ = ["PerplexityComparisonEvaluation", "PerplexityEvaluation"]


class PerplexityEvaluation(Evaluation):
    """Evaluation by perplexity (ppl, lower is better): ``get(i) -> text``.

    The text is read after the job's start token (``job.start_token``) and every token that has something before
    it is scored (the job's ``token_nll``): with a start token every token of the text, without one every token
    but the first; this is the perplexity transformers computes as ``exp(model(ids, labels=ids).loss)`` for the
    ids its tokenizer gives. Texts longer than ``block_size`` are scored in consecutive windows. A sample's score
    is its per-token perplexity ``exp(nll / tokens)``, and its metrics are ``nll`` (summed, nats) and ``tokens``
    (how many were scored); ``reduce="mean"`` is the mean of the per-sample perplexities. The corpus perplexity
    ``exp(sum nll / sum tokens)`` is :meth:`corpus_perplexity`. A text with no token to score raises
    :class:`EvaluationError`.
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
        chunk_size: int | None = 200,
        intermediates: Intermediates = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        run = self._prepare(inference, encoding, self._text)
        texts = run.rows
        # the job encodes the texts itself: encode here only to check the ids or to lay out intermediates
        encoded = run.encode(texts) if run.check_ids or intermediates is not None else []
        token_nll = run.job.token_nll(texts, chunk_size=chunk_size)
        counts = np.asarray([len(x) for x in token_nll], np.float64)
        nll = np.asarray([float(x.sum(dtype=np.float64)) for x in token_nll], np.float64)
        for i, c in zip(run.indices, counts, strict=True):
            if c == 0:
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: the text has no token to score (the job's start "
                    f"token is {run.job.start_token}; without one a text's first token is not scored)"
                )
        scores = run.scores(self.score(nll, counts), len(texts))
        if (
            intermediates is not None
        ):  # the first token read is never scored: the start token, or the text's first
            intermediates.extend(run.intermediates([(run.read(ids), 1) for ids in encoded]))
        return [
            EvaluationSample(index=i, input=x, score=s, metrics={"nll": float(total), "tokens": float(c)})
            for i, x, s, total, c in zip(run.indices, texts, scores, nll, counts, strict=True)
        ]


class PerplexityComparisonEvaluation(Evaluation):
    """Multiple choice by likelihood: ``get(i) -> (prefix, continuations, correct_index)``.

    Each continuation is scored by the log-probability of exactly its own tokens given the prefix, read after the
    job's start token (the job's ``loglikelihood``: lm-eval's split, so tokens merging across the boundary are
    handled, and a long prefix keeps its end). The chosen continuation maximises the mean log-probability per
    token (``selection = "mean"``) or the sum (``selection = "sum"``); ties go to the first. The score is 1.0 when
    the choice is the correct one (metric ``correct``); ``output`` is the chosen continuation, ``target`` the
    correct one.
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
        chunk_size: int | None = 200,
        intermediates: Intermediates = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        if self.selection not in ("mean", "sum"):
            raise EvaluationError(
                f"evaluation {self.name!r}: selection must be 'mean' or 'sum', got {self.selection!r}"
            )
        run = self._prepare(inference, encoding, self._choices)
        job, enc, items = run.job, run.encoding, run.rows
        requests = []
        for i, (prefix, conts, _) in zip(run.indices, items, strict=True):
            prefix_len = len(enc.encode(prefix)) if prefix else 0
            for cont in conts:
                whole = enc.encode(prefix + cont)
                if len(whole) - prefix_len > job.block_size:
                    raise EvaluationError(
                        f"evaluation {self.name!r}, sample {i}: continuation {cont[:40]!r} has about "
                        f"{len(whole) - prefix_len} tokens, more than block_size={job.block_size}"
                    )
                if run.check_ids:
                    run.check_tokens(i, whole)
                requests.append((prefix, cont))
        lls = iter(job.loglikelihood(requests, chunk_size=chunk_size))
        flags, chosen, details = [], [], []
        for i, (_, conts, correct) in zip(run.indices, items, strict=True):
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
        scores = run.scores(self.score(flags), len(items))
        if intermediates is not None:
            rows = []
            for (prefix, conts, _), (k, ll) in zip(items, chosen, strict=True):
                whole = enc.encode(prefix + conts[k])
                context = run.read(whole[: len(whole) - ll.num_tokens])  # as the job read it
                rows.append(([*context, *whole[len(whole) - ll.num_tokens :]], len(context)))
            intermediates.extend(run.intermediates(rows))
        samples = []
        for i, (prefix, conts, correct), s, flag, (k, _), values in zip(
            run.indices, items, scores, flags, chosen, details, strict=True
        ):
            shown = ", ".join(f"{v:.3f}" for v in values)
            reason = f"chose {k} {conts[k]!r} of {len(conts)} ({self.selection} log-probs: {shown}); correct: {correct}"
            samples.append(
                EvaluationSample(
                    index=i,
                    input=prefix,
                    target=conts[correct],
                    output=conts[k],
                    score=s,
                    metrics={"correct": flag},
                    reason=reason,
                )
            )
        return samples

    def _choices(self, index: int, item: Any) -> tuple[str, list[str], int]:
        """``(prefix, continuations, correct_index)`` from ``get(index)``, checked."""
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
