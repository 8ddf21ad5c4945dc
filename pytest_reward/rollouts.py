"""Prompt-only samples: roll them out with the session's ``InferenceJob``, once, batched, shared by every function.

A sample whose ``messages`` end with a user turn (or that has ``prompt`` instead of ``messages``) has no response to
score. Before the first of its items runs, the pool generates responses for a whole *chunk* of the prompt-only
samples of its file — the chunk that contains it, up to ``--reward-max-batch`` prompts, always cut the same way
from the start of the file — in one ``InferenceJob.rollout`` call, and keeps them for every reward function that
scores those samples. Because chunks are fixed by file position and each chunk's seed derives from the base seed
and the chunk's place, the responses do not depend on which items ran first or on which xdist worker ran them.

Rollout settings (``n``, ``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``, ``seed``, ``stop``) come from
``@pytest.mark.reward(rollout={...})`` over the ``--reward-rollout-*`` options; functions that share settings share
rollouts.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .samples import Sample

__all__ = ["RolloutPool", "RolloutSettings", "pass_at_k"]


@dataclass(frozen=True)
class RolloutSettings:
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int | None = None
    """None: 64, or half the model's context when that is shorter."""
    seed: int = 0
    stop: tuple[str, ...] = ()

    def merged(self, overrides: dict[str, Any]) -> RolloutSettings:
        return RolloutSettings(**{**self.__dict__, **overrides})

    def describe(self) -> str:
        mode = (
            "greedy" if self.temperature == 0 else f"temperature {self.temperature:g}, top_p {self.top_p:g}"
        )
        tokens = "default" if self.max_new_tokens is None else self.max_new_tokens
        return f"n={self.n}, {mode}, max {tokens} new tokens, seed {self.seed}"


@dataclass
class _Chunk:
    samples: list[Sample]
    responses: dict[int, list[str]] | None = None
    finish: dict[int, list[str]] = field(default_factory=dict)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` passed (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def prompt_of(sample: Sample) -> str | list[dict[str, Any]]:
    """What to feed the model: the ``prompt`` string, or the conversation (a chat) ending with the user turn."""
    if sample.prompt is not None:
        return sample.prompt
    return [{"role": m["role"], "content": m.get("content") or ""} for m in sample.messages or []]


def _chunk_seed(base: int, file: str, index: int) -> int:
    digest = hashlib.sha256(f"{base}:{file}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


class RolloutPool:
    """Responses of prompt-only samples, generated in fixed chunks and cached (one pool per process)."""

    def __init__(self, chunk_size: int, progress: Callable[[str, int], Any] | None = None) -> None:
        self.chunk_size = chunk_size
        self.progress = progress
        self._files: dict[str, list[Sample]] = {}
        self._chunks: dict[tuple[str, int, RolloutSettings], _Chunk] = {}
        self.calls = 0
        self.seconds = 0.0

    def register(self, file: str, samples: Sequence[Sample]) -> None:
        """The prompt-only samples of a file, in file order (called at collection)."""
        self._files[file] = list(samples)

    def responses(self, job: Any, file: str, sample: Sample, settings: RolloutSettings) -> list[str]:
        """The ``settings.n`` responses of ``sample`` (generating its chunk on first use)."""
        samples = self._files.get(file, [])
        try:
            position = next(i for i, s in enumerate(samples) if s is sample)
        except StopIteration:
            samples = self._files.setdefault(file, [])
            samples.append(sample)
            position = len(samples) - 1
        index = position // self.chunk_size
        key = (file, index, settings)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self._chunks[key] = _Chunk(
                samples[index * self.chunk_size : (index + 1) * self.chunk_size]
            )
        if chunk.responses is None:
            self._generate(job, file, index, chunk, settings)
        assert chunk.responses is not None
        return chunk.responses[id(sample)]

    def _generate(self, job: Any, file: str, index: int, chunk: _Chunk, settings: RolloutSettings) -> None:
        prompts = [prompt_of(s) for s in chunk.samples]
        start = time.perf_counter()
        label = f"rolling out {len(prompts)} prompts x {settings.n} from {file} ({settings.describe()})"
        context = self.progress(label, len(prompts)) if self.progress else None
        try:
            if context is not None:
                context.__enter__()
            max_new = settings.max_new_tokens
            if max_new is None:
                max_new = min(64, max(1, int(getattr(job, "block_size", 128)) // 2))
            rollouts = job.rollout(
                prompts,
                max_new,
                temperature=settings.temperature,
                top_k=settings.top_k,
                top_p=settings.top_p,
                stop=settings.stop,
                seed=_chunk_seed(settings.seed, file, index),
                n=settings.n,
            )
        finally:
            if context is not None:
                context.__exit__(None, None, None)
        self.calls += 1
        self.seconds += time.perf_counter() - start
        responses: dict[int, list[str]] = {}
        finish: dict[int, list[str]] = {}
        for sample_pos, sample in enumerate(chunk.samples):
            rows = rollouts[sample_pos * settings.n : (sample_pos + 1) * settings.n]
            responses[id(sample)] = [r.text for r in rows]
            finish[id(sample)] = [r.finish_reason for r in rows]
        chunk.responses = responses
        chunk.finish = finish
