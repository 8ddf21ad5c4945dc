""":class:`RolloutEvaluation`: the model continues each prompt, and the cleaned generation is checked, scored, or
handed to a reward function (through :class:`pytest_reward.reward.call.Reward`, the one calling convention)."""

from __future__ import annotations

import inspect
import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ..errors import EvaluationError
from ..reward.call import Reward, describe_exception
from ..reward.chat import END_MARKERS, cut_at_markers, with_response
from ..reward.decorator import is_reward_function
from ..reward.models import EvaluateResult
from .base import Evaluation, EvaluationSample, Intermediate, Intermediates, Prepared, intermediate

__all__ = ["RolloutEvaluation"]

#: What a reward function made of one sample: score, metrics, reason, error.
Scored = tuple[float, dict[str, float], str | None, str | None]


class RolloutEvaluation(Evaluation):
    """Evaluation by generation: ``get(i) -> (prompt, expected)``, the model continues the prompt, and the
    cleaned generation is scored.

    The prompt is a string, or a list of chat messages (dicts or objects with ``role`` and ``content``), rendered
    with the encoding's chat template (ChatML by default) and an open assistant turn. Subclasses implement
    ``name``, ``__len__``, ``get``, ``max_new_tokens`` and one scorer:

    * ``check(y, y_hat) -> bool`` (score 1.0 / 0.0, also reported as the ``correct`` metric);
    * or ``score(ys, y_hats) -> list[float]`` (one float per generated sample);
    * or a reward function: ``reward=`` at construction or a ``reward`` class attribute, any
      ``@reward_function`` (ours or reward-kit's; pointwise, batch or async). It is called as a test run calls
      it (:mod:`pytest_reward.reward.call`): ``messages=[*prompt messages, {"role": "assistant", "content":
      generated}]``, ``ground_truth=expected`` unless that is ``None`` (then the function's default applies),
      ``original_messages`` (the prompt turns) when the function declares it; batch mode gets
      ``rollouts_messages`` and aligned lists. The sample's score is ``EvaluateResult.score``, its metrics the
      result's metric scores. A reward function that raises or returns something unusable scores that sample 0
      with the error recorded (a batch call that fails, every sample of it); the evaluation goes on. The reward
      function sees the generated text (end markers cut) before ``clean``.

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
        chunk_size: int | None = 200,
        intermediates: Intermediates = None,
        **kwargs: Any,
    ) -> list[EvaluationSample]:
        """Generate for every prompt in one batched job call, then score. Each prompt is read after the job's
        start token, as the scoring classes read texts. ``chunk_size`` bounds how many batches the job keeps in
        flight (``None``: all); it does not change the results."""
        run = self._prepare(inference, encoding, self._row)
        job, enc = run.job, run.encoding
        fn = self._reward_function()
        reward = Reward(_check_reward(fn)) if fn is not None else None
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
        encoded = self._encode_prompts(run, max_new)
        gens, fed = job.generate_tokens(
            encoded,
            max_new,
            temperature=float(self.temperature if temperature is None else temperature),
            top_k=int(self.top_k if top_k is None else top_k),
            top_p=float(self.top_p if top_p is None else top_p),
            seed=self.seed if seed is None else seed,
            n=n,
            truncate="left",
            chunk_size=chunk_size,
        )
        generated = self._generated_text(run, gens)
        outputs = [self.clean(g) for g in generated]
        rows = [(i, p, t) for i, (p, t) in zip(run.indices, run.rows, strict=True) for _ in range(n)]
        if reward is not None:
            scored = _score_with_reward(reward, rows, generated)
        else:
            scores = run.scores(self.score([t for _, _, t in rows], outputs), len(rows))
            by_check = type(self).score is RolloutEvaluation.score
            scored = [(s, {"correct": s} if by_check else {}, None, None) for s in scores]
        if intermediates is not None:
            pad = int(enc.pad_token)
            for k, gen in enumerate(
                gens
            ):  # theseus's layout: prompt as fed in [0, budget), generation after it
                row = intermediate([*fed[k // n], *gen], len(fed[k // n]), budget + len(gen), pad)
                intermediates.append(_right_pad(row, budget + max_new, pad))
        return [
            EvaluationSample(
                index=i, input=p, target=t, output=out, score=s, metrics=metrics, reason=reason, error=error
            )
            for (i, p, t), out, (s, metrics, reason, error) in zip(rows, outputs, scored, strict=True)
        ]

    def _row(self, index: int, item: Any) -> tuple[Any, Any]:
        """``(prompt, expected)`` from ``get(index)``, checked."""
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise EvaluationError(
                f"evaluation {self.name!r}: get({index}) must return (prompt, expected), got {item!r:.200}"
            )
        prompt, target = item
        if not isinstance(prompt, str | list | tuple):
            raise EvaluationError(
                f"evaluation {self.name!r}: sample {index}'s prompt must be a string or a list of chat "
                f"messages, got {type(prompt).__name__}"
            )
        return prompt, target

    def _encode_prompts(self, run: Prepared, max_new: int) -> list[list[int]]:
        """Render chats, encode, and check every prompt fits the budget and the model's vocabulary."""
        budget = int(run.job.block_size) - max_new
        texts = [p if isinstance(p, str) else run.encoding.apply_chat_template(list(p)) for p, _ in run.rows]
        encoded = run.encode(texts)
        for i, ids in zip(run.indices, encoded, strict=True):
            n = len(run.read(ids))  # as the job feeds it: after its start token
            if n > budget and self.truncate != "left":
                raise EvaluationError(
                    f"evaluation {self.name!r}, sample {i}: the prompt has {n} tokens as read; with "
                    f"max_new_tokens={max_new} it needs {n + max_new} positions but block_size is "
                    f"{run.job.block_size}. Shorten it, lower max_new_tokens(), or set truncate = 'left' to keep "
                    f"its last tokens."
                )
        return encoded

    def _generated_text(self, run: Prepared, gens: Sequence[Sequence[int]]) -> list[str]:
        """What ``clean`` receives: each generation decoded without its stop token, cut before the first end
        marker, end-of-text text or ``stop`` string."""
        enc = run.encoding
        stop_ids = set(run.job.stop_token_ids)
        markers = [m for m in (*self.end_markers, enc.decode([enc.eot_token]), *self.stop) if m]
        out = []
        for gen in gens:
            body = gen[:-1] if gen and gen[-1] in stop_ids else gen
            out.append(cut_at_markers(enc.decode(body), markers))
        return out


def _right_pad(row: Intermediate, length: int, pad: int) -> Intermediate:
    """The generation slots after a stop token: pad tokens, outside both masks."""
    extra = length - len(row.x)
    if extra <= 0:
        return row
    return Intermediate(
        np.concatenate([row.x, np.full(extra, pad, np.int32)]),
        np.concatenate([row.padding_mask, np.zeros(extra, bool)]),
        np.concatenate([row.action_mask, np.zeros(extra, bool)]),
    )


def _check_reward(fn: Any) -> Callable[..., Any]:
    if not is_reward_function(fn):
        raise TypeError(
            f"reward must be a @reward_function (pytest_reward's or reward-kit's), got {fn!r}; decorate it"
        )
    return fn


def _score_with_reward(
    reward: Reward, rows: Sequence[tuple[int, Any, Any]], generated: Sequence[str]
) -> list[Scored]:
    """Call the reward function on every ``(index, prompt, expected)`` row and its generation (a batch-mode
    function once, on all of them); a failed call scores 0 with the error kept."""
    calls = [reward.kwargs(with_response(p, g), t) for (_, p, t), g in zip(rows, generated, strict=True)]
    if reward.batch:
        try:
            results = reward.call_batch(calls)
        except Exception as exc:
            return [_failed(exc)] * len(calls)
        return [_scored(reward.name, r) for r in results]
    out = []
    for kwargs in calls:
        try:
            out.append(_scored(reward.name, reward.call(kwargs)))
        except Exception as exc:
            out.append(_failed(exc))
    return out


def _failed(exc: Exception) -> Scored:
    return 0.0, {}, None, describe_exception(exc)


def _scored(name: str, result: EvaluateResult) -> Scored:
    score = float(result.score)
    if not math.isfinite(score):
        return 0.0, {}, result.reason, f"{name} returned a non-finite score ({score})"
    metrics = {k: float(m.score) for k, m in result.metrics.items()}
    return score, metrics, result.reason, result.error
