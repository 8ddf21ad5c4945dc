"""The model job as the evaluations see it: the :class:`ModelJob` protocol (exactly the members they use), and
the view of a job that runs with another encoding.

An evaluation never imports the engine: it is handed a job (``pytest_reward.jax.InferenceJob`` satisfies
:class:`ModelJob`; a test may hand it anything that does) and calls only what is named here. Every model call is
one batched call per evaluation (``generate_tokens``, ``token_nll``, ``loglikelihood``, ``predictions``), so the
job's compiled programs are shared by every evaluation.

The start token is the job's (``job.start_token``, from the model's tokenizer): every evaluation reads texts,
prompts and contexts through it (``job.with_start_token``), so scoring and generation condition on the same thing.
A view of the job with another encoding keeps it: it belongs to the model, whatever encodes the text.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from ..errors import EvaluationError
from ..reward.chat import render_chatml

__all__ = ["Encoding", "ForeignEncoding", "JobConfig", "ModelJob", "ScoredContinuation", "as_job", "bind"]


@runtime_checkable
class Encoding(Protocol):
    """A tokenizer as the evaluations use it. ``vocab_size`` is read when present."""

    @property
    def eot_token(self) -> int: ...
    @property
    def pad_token(self) -> int: ...
    def encode(self, text: str, allowed_special: Any = "all") -> list[int]: ...
    def encode_batch(self, texts: Sequence[str], allowed_special: Any = "all") -> list[list[int]]: ...
    def decode(self, tokens: Iterable[int]) -> str: ...
    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]: ...
    def apply_chat_template(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str: ...


class JobConfig(Protocol):
    """The two model facts an evaluation reads: the vocabulary size and the end-of-sequence ids."""

    vocab_size: int
    eos_token_ids: Sequence[int]


class ScoredContinuation(Protocol):
    """One result of :meth:`ModelJob.loglikelihood`."""

    logprob: float  # sum of the continuation tokens' log-probabilities
    num_tokens: int


@runtime_checkable
class ModelJob(Protocol):
    """What an evaluation uses of the model job (``pytest_reward.jax.InferenceJob`` is one)."""

    tokenizer: Encoding
    config: JobConfig
    block_size: int  # context length: prompt + generation, or a scored text, must fit
    stop_token_ids: tuple[int, ...]  # generation ends at these (end-of-text / eos ids)
    start_token: int | None  # put in front of every text, prompt and context the job reads; None: read bare
    length: int  # > 0: evaluate a random subset of this many samples (theseus's ``eval/length``)
    random: random.Random  # draws that subset

    def generate_tokens(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        n: int = 1,
        truncate: Literal["error", "left"] = "error",
        chunk_size: int | None = None,
    ) -> tuple[list[list[int]], list[list[int]]]:
        """(``len(prompts) * n`` generated id lists, each ending with its stop token if any; prompts as fed, i.e.
        after the start token)."""
        ...

    def with_start_token(self, ids: Sequence[int]) -> list[int]:
        """``ids`` as the job reads them: the start token in front, unless there is none or it is already there;
        empty ids are the start token alone, else the end-of-text token."""
        ...

    def token_nll(self, texts: Sequence[str], *, chunk_size: int | None = None) -> list[np.ndarray]:
        """Per-token negative log-likelihood of each text read after the start token: every token scored with
        one, every token but the first without."""
        ...

    def loglikelihood(
        self, requests: Sequence[tuple[str, str]], *, chunk_size: int | None = None
    ) -> Sequence[ScoredContinuation]:
        """Log-probability of exactly each continuation's tokens given its context (read after the start
        token)."""
        ...

    def predictions(
        self, sequences: Sequence[Sequence[int]], *, chunk_size: int | None = None
    ) -> list[np.ndarray]:
        """The argmax next token after every prefix of each sequence (read as given)."""
        ...


def as_job(inference: Any) -> ModelJob:
    """The job itself; an ``Evaluator`` (or anything holding a job as ``.inference``) is unwrapped."""
    if not hasattr(inference, "generate_tokens") and hasattr(inference, "inference"):
        return inference.inference
    return inference


class ForeignEncoding:
    """Gives another encoding (theseus-style: ``encode``, ``decode``, ``eot_token``) every member of
    :class:`Encoding`; a chat is rendered as ChatML when it has no template of its own."""

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
        return render_chatml(messages, add_generation_prompt)



def bind(name: str, inference: Any, encoding: Any) -> tuple[ModelJob, Any]:
    """(job, encoding) for evaluation ``name`` to run with: the job itself for its own tokenizer (``encoding``
    None or the job's), else a view of the job (sharing its parameters, compiled programs and counters) whose
    tokenizer is ``encoding``. An encoding that cannot be this model's raises :class:`EvaluationError`."""
    job = as_job(inference)
    if encoding is None or encoding is job.tokenizer:
        return job, job.tokenizer
    V = int(job.config.vocab_size)
    enc = ForeignEncoding(encoding)
    size = enc.vocab_size
    if size is not None and size > V:
        raise EvaluationError(
            f"evaluation {name!r}: the encoding has {size} tokens but the model only {V}: it is not "
            "this model's tokenizer. Pass the model's tokenizer (the default, inference.tokenizer)."
        )
    for what, token in (("end-of-text", enc.eot_token), ("padding", enc.pad_token)):
        if not 0 <= token < V:
            raise EvaluationError(
                f"evaluation {name!r}: the encoding's {what} token {token} is outside the model's "
                f"vocabulary (0..{V - 1}): it is not this model's tokenizer"
            )
    view = copy.copy(job)
    view.tokenizer = enc
    view.stop_token_ids = tuple(sorted({t for t in (enc.eot_token, *job.config.eos_token_ids) if 0 <= t < V}))
    return view, enc
