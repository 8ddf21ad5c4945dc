""":class:`EncodingEvaluation`: next-token prediction. The model reads each text (teacher forcing); its argmax
prediction at every position is decoded, cleaned and checked against the text."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from ..errors import EvaluationError
from .base import Evaluation, EvaluationSample, Intermediates

__all__ = ["EncodingEvaluation"]


class EncodingEvaluation(Evaluation):
    """Evaluation by next-token prediction: ``get(i) -> text``; the model reads the text (teacher forcing) and
    its argmax prediction at every position is decoded, cleaned and checked against the text.

    The text is read after the job's start token (``job.start_token``), as rollouts read prompts. ``y_hat``
    decodes the model's guess of every token of the text that has something before it, each from the true tokens
    before it: with a start token that is every token (a perfect model reproduces the text), without one every
    token but the first (nothing precedes it; theseus's ``argmax(logits[:, :-1])``). Either way the end of
    ``y_hat`` lines up with the end of the text, so a check of the text's last tokens (an answer) is the same
    under both conventions. Subclasses implement ``name``, ``__len__``, ``get`` and ``check(x, y_hat)`` (or
    ``score(xs, y_hats)``); ``clean`` defaults to strip. Metrics: ``correct`` (with ``check``) and
    ``token_accuracy`` (fraction of the predicted tokens that are exactly right). A text longer than
    ``block_size`` tokens (the start token counted) raises :class:`EvaluationError`, and so does a text with no
    token to predict.
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
        chunk_size: int | None = 200,
        intermediates: Intermediates = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        run = self._prepare(inference, encoding, self._text)
        texts = run.rows
        seqs = []
        for i, ids in zip(run.indices, run.encode(texts), strict=True):
            seq = run.read(ids)
            if len(seq) < 2:
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: the text has no token to predict (it encodes to "
                    f"{len(ids)} token(s) and the job's start token is {run.job.start_token})"
                )
            if len(seq) > run.job.block_size:
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: the text has {len(seq)} tokens as read, more than "
                    f"block_size={run.job.block_size}"
                )
            seqs.append(seq)
        # argmax in vocabulary chunks: the (T, V) logits are never held
        preds = [p.tolist() for p in run.job.predictions([s[:-1] for s in seqs], chunk_size=chunk_size)]
        outputs = [self.clean(d) for d in run.encoding.decode_batch(preds)]
        scores = run.scores(self.score(texts, outputs), len(texts))
        by_check = type(self).score is EncodingEvaluation.score
        if intermediates is not None:
            intermediates.extend(run.intermediates([(s, 1) for s in seqs]))
        samples = []
        for i, x, seq, pred, out, s in zip(run.indices, texts, seqs, preds, outputs, scores, strict=True):
            metrics = {"correct": s} if by_check else {}
            metrics["token_accuracy"] = float(np.mean(np.asarray(pred) == np.asarray(seq[1:])))
            samples.append(EvaluationSample(index=i, input=x, output=out, score=s, metrics=metrics))
        return samples
