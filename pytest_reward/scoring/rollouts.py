"""Prompt-only samples: roll them out with the session's ``InferenceJob``, once, batched, shared by every function.

A sample whose ``messages`` end with a user turn (or that has ``prompt`` instead of ``messages``) has no response to
score. Before the first of its items runs, the pool generates responses for a whole *chunk* of the prompt-only
samples of its file — the chunk that contains it, up to ``--reward-max-batch`` prompts, always cut the same way
from the start of the file — in one ``InferenceJob.rollout`` call, and keeps them for every reward function that
scores those samples. Because chunks are fixed by file position and each chunk's seed derives from the base seed
and the chunk's place, the responses do not depend on which items ran first or on which xdist worker ran them,
nor on the granularity: file items (``--reward-granularity file``) stream the file, roll out each chunk as they
reach it, score it with their function and hand it on to the next function; the same chunks, the same responses.

Rollout settings (``n``, ``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``, ``seed``, ``stop``) come from
``@pytest.mark.reward(rollout={...})`` over the ``--reward-rollout-*`` options; functions that share settings share
rollouts.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..reward.chat import END_MARKERS, prompt_of

if TYPE_CHECKING:
    from ..data.samples import Sample
    from ..judge.results import SampleOutcome
    from .invoker import Invoker

__all__ = ["RolloutFailed", "RolloutPool", "RolloutSettings", "pass_at_k", "score_responses"]


class RolloutFailed(ValueError):
    """Why one sample of a chunk got no responses (its prompt does not fit the model): it stands in that sample's
    place in the chunk, and the chunk's other samples are rolled out as usual."""

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

    def describe(self) -> str:
        mode = (
            "greedy" if self.temperature == 0 else f"temperature {self.temperature:g}, top_p {self.top_p:g}"
        )
        tokens = "default" if self.max_new_tokens is None else self.max_new_tokens
        return f"n={self.n}, {mode}, max {tokens} new tokens, seed {self.seed}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` passed (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _chunk_seed(base: int, file: str, index: int) -> int:
    digest = hashlib.sha256(f"{base}:{file}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


class RolloutPool:
    """Responses of prompt-only samples, generated in fixed chunks and cached (one pool per process).

    Chunk ``i`` of a file is its prompt-only samples ``i * chunk_size`` to ``(i + 1) * chunk_size - 1`` in file
    order, whatever the granularity: sample items (which find their chunk through :meth:`register`) and
    file items (which stream the file and hand over each chunk) get the same responses."""

    def __init__(self, chunk_size: int, progress: Callable[[str, int], Any] | None = None) -> None:
        self.chunk_size = chunk_size
        self.progress = progress
        self._files: dict[str, list[Sample]] = {}
        self._positions: dict[str, dict[int, int]] = {}
        self._chunks: dict[tuple[str, int, RolloutSettings], list[list[str] | RolloutFailed]] = {}
        self._readers: dict[tuple[str, RolloutSettings], int] = {}
        self._served: dict[tuple[str, int, RolloutSettings], int] = {}
        self.calls = 0
        self.seconds = 0.0

    def register(self, file: str, samples: Sequence[Sample]) -> None:
        """The prompt-only samples of a file, in file order (called at collection of sample items)."""
        self._files[file] = list(samples)
        self._positions[file] = {id(s): i for i, s in enumerate(samples)}

    def responses(
        self, job: Any, file: str, sample: Sample, settings: RolloutSettings
    ) -> list[str] | RolloutFailed:
        """The ``settings.n`` responses of a registered ``sample`` (generating its chunk on first use), or why it
        has none."""
        position = self._positions.get(file, {}).get(id(sample))
        if position is None:  # not registered (an item built by hand): a chunk of its own, after the others
            samples = self._files.setdefault(file, [])
            samples.append(sample)
            position = len(samples) - 1
            self._positions.setdefault(file, {})[id(sample)] = position
        index = position // self.chunk_size
        members = self._files[file][index * self.chunk_size : (index + 1) * self.chunk_size]
        return self.chunk(job, file, index, members, settings)[position - index * self.chunk_size]

    def chunk(
        self, job: Any, file: str, index: int, samples: Sequence[Sample], settings: RolloutSettings
    ) -> list[list[str] | RolloutFailed]:
        """The responses of chunk ``index`` of ``file`` (its ``samples``, in order): ``settings.n`` per sample,
        generated by one ``job.rollout`` call the first time and shared afterwards; a sample whose prompt does not
        fit the model has a :class:`RolloutFailed` in its place."""
        key = (file, index, settings)
        cached = self._chunks.get(key)
        if cached is None or len(cached) != len(samples):
            cached = self._chunks[key] = self._generate(job, file, index, samples, settings)
        return cached

    def expect_reader(self, file: str, settings: RolloutSettings) -> None:
        """One more file item will stream ``file`` with these settings (called at collection): a chunk is
        dropped once every reader has had it, so memory does not grow with the file."""
        key = (file, settings)
        self._readers[key] = self._readers.get(key, 0) + 1

    def consumed(self, file: str, index: int, settings: RolloutSettings) -> None:
        """A file item is done with chunk ``index``."""
        readers = self._readers.get((file, settings))
        if not readers:
            return
        key = (file, index, settings)
        served = self._served.get(key, 0) + 1
        if served >= readers:
            self._chunks.pop(key, None)
            self._served.pop(key, None)
        else:
            self._served[key] = served

    def _generate(
        self, job: Any, file: str, index: int, samples: Sequence[Sample], settings: RolloutSettings
    ) -> list[list[str] | RolloutFailed]:
        prompts = [prompt_of(s.messages, s.prompt) for s in samples]
        max_new = settings.max_new_tokens
        if max_new is None:
            max_new = min(64, max(1, int(getattr(job, "block_size", 128)) // 2))
        failed = _too_long(job, samples, prompts, max_new)
        if failed:  # those samples fail with the reason; the chunk's others are rolled out without them
            kept = [i for i in range(len(samples)) if i not in failed]
            done = iter(self._generate(job, file, index, [samples[i] for i in kept], settings) if kept else ())
            return [failed[i] if i in failed else next(done) for i in range(len(samples))]
        stop = settings.stop
        if any(not isinstance(p, str) for p in prompts):  # chats: the assistant's turn ends at its end marker
            stop = (*stop, *(m for m in END_MARKERS if m not in stop))
        label = f"rolling out {len(prompts)} prompts x {settings.n} from {file} ({settings.describe()})"
        start = time.perf_counter()
        with self.progress(label, len(prompts)) if self.progress else nullcontext():
            rollouts = job.rollout(
                prompts,
                max_new,
                temperature=settings.temperature,
                top_k=settings.top_k,
                top_p=settings.top_p,
                stop=stop,
                seed=_chunk_seed(settings.seed, file, index),
                n=settings.n,
            )
        self.calls += 1
        self.seconds += time.perf_counter() - start
        n = settings.n
        return [[r.text for r in rollouts[i * n : (i + 1) * n]] for i in range(len(samples))]


def _too_long(job: Any, samples: Sequence[Sample], prompts: list[Any], max_new: int) -> dict[int, RolloutFailed]:
    """The samples of a chunk whose prompt, as the job feeds it (its start token included), leaves no room for
    ``max_new`` tokens in the model's context; nothing for a job that does not say how it encodes."""
    tokenizer = getattr(job, "tokenizer", None)
    block = getattr(job, "block_size", None)
    with_start = getattr(job, "with_start_token", None)
    if tokenizer is None or not isinstance(block, int) or with_start is None:
        return {}
    texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(p) for p in prompts]
    failed = {}
    for i, ids in enumerate(tokenizer.encode_batch(texts, allowed_special="all")):
        n = len(with_start(ids))
        if n + max_new > block:
            sample = samples[i]
            failed[i] = RolloutFailed(
                f"{sample.path.name}:{sample.line}: the prompt has {n} tokens; with max_new_tokens={max_new} it "
                f"needs {n + max_new} positions but the model's block_size is {block}. Shorten the prompt, or "
                "lower max_new_tokens (@pytest.mark.reward(rollout={'max_new_tokens': N}) or "
                "--reward-rollout-max-new-tokens N)"
            )
    return failed


def score_responses(
    invoker: Invoker,
    sample: Sample,
    responses: Sequence[str],
    *,
    catch: bool = True,
    start: float | None = None,
) -> SampleOutcome:
    """One outcome for a prompt-only sample from the scores of its generated ``responses``: the mean over
    responses (``merge_runs``), with every response, its score, pass@1, pass@n and best-of-n kept in ``extra``.

    A bad return value makes an error outcome; an exception raised by the reward function does too when
    ``catch``, and propagates otherwise (sample items show the user's traceback)."""
    from ..errors import InvalidResult
    from ..judge.results import PASS
    from ..reward.call import describe_exception
    from .invoker import merge_runs

    start = time.perf_counter() if start is None else start
    conversation = list(sample.messages or [{"role": "user", "content": sample.prompt or ""}])
    scored = [
        replace(sample, messages=[*conversation, {"role": "assistant", "content": text}], prompt=None)
        for text in responses
    ]
    error = None
    try:
        if invoker.batch:
            results = [result for result, _ in invoker.call_batch(scored)]
        else:
            results = [invoker.call(s)[0] for s in scored]
    except InvalidResult as exc:
        error = str(exc).splitlines()[0]
    except Exception as exc:
        if not catch:
            raise
        error = describe_exception(exc)
    if error is not None:
        outcome = invoker.outcome(scored[0], None, error=error, duration=time.perf_counter() - start)
        outcome.extra["responses"] = list(responses)
        return outcome
    # Scores differ across sampled responses by design: kept per response, never reported as flaky runs.
    merged = merge_runs(results, what="responses") if len(results) > 1 else results[0]
    outcome = invoker.outcome(scored[0], merged, duration=time.perf_counter() - start)
    verdict = invoker.verdict
    passes = sum(1 for r in results if verdict(r)[0] == PASS)
    n = len(results)
    outcome.extra.update(
        {
            "responses": list(responses),
            "response_scores": [float(r.score) for r in results],
            "pass@1": pass_at_k(n, passes, 1),
            f"pass@{n}": pass_at_k(n, passes, n),
            "best_of_n": max(float(r.score) for r in results),
            "n": n,
        }
    )
    return outcome
