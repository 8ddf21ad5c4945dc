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
        self, inference: Any, encoding: Any = None, *, intermediates: Intermediates = None, **kwargs: Any
    ) -> list[EvaluationSample]:
        run = self._prepare(inference, encoding, self._text)
        texts = run.rows
        seqs = []
        for i, ids in zip(run.indices, run.encode(texts), strict=True):
            if not ids:
                raise EvaluationError(f"evaluation {self.name!r}, sample {i}: the text encodes to no tokens")
            if len(ids) > run.job.block_size:
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: the text has {len(ids)} tokens, more than "
                    f"block_size={run.job.block_size}"
                )
            seqs.append([run.prefix_token, *ids])
        # argmax in vocabulary chunks: the (T, V) logits are never held
        preds = [p.tolist() for p in run.job.predictions([s[:-1] for s in seqs])]
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
