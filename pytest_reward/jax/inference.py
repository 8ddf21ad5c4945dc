"""``InferenceJob``: a model, its tokenizer and compiled programs, with a small Pythonic API.

Strings in, dataclasses out::

    job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"))
    [r] = job.rollout(["12+345="], max_new_tokens=8)            # r.text == "357"
    [ll] = job.loglikelihood([("12+345=", "357")])              # ll.logprob, ll.num_tokens, ll.is_greedy
    nll = job.token_nll(["12+345=357"])[0]                      # per-token negative log-likelihoods

Start token. ``job.start_token`` is the one token put in front of every text the job reads: scored texts
(``token_nll``, ``perplexity``), the contexts of ``loglikelihood`` and every prompt it generates from, so scoring
and generation condition on the same thing, the thing the model was trained on. It is the tokenizer's declared
start token by default (``Tokenizer.start_token``: Hugging Face's ``add_bos_token``, else the ``tokenizer.json``
post-processor, see :mod:`.tokenizer`); ``None`` means texts are read bare, and then a text's first token is not
scored (nothing precedes it) and an empty prompt or context starts from the end-of-text token. A sequence that
already begins with the start token (a chat template that writes it) does not get a second one.
:meth:`InferenceJob.with_start_token` is that rule; the token-level ``logits`` / ``predictions`` read their
sequences as given.

Shape buckets. A rollout call pads every prompt (left) to one length bucket ``P`` (a power of two >= 16, capped at
``block_size - max_new_tokens``), rounds ``max_new_tokens`` up to a bucket ``N`` for the cache, and decodes its
rows (prompts x samples) ``B = per_device_batch_size * devices`` at a time (fewer rows: the next power of two). One
executable per ``(B, P, N, sampling mode)`` is compiled ahead of time and kept in ``self._executables``, so 8, 64
or 256 prompts of the same length range compile once. Scoring works the same way with ``(B, T)`` buckets.

Slot refill (continuous batching, the default). The ``B`` rows in flight are slots: when a row stops (end-of-text,
a single-token stop, or ``max_new_tokens``), its slot takes the next prompt of the call at the next step (prompts
are prefilled ``B`` at a time, as a static batch is, and a free slot copies the next one's keys and values into its
cache), while the other slots go on decoding; the compiled step keeps one shape (every slot has ``P + N`` cache
columns and its own step counter). One compiled call decodes up to ``64 B`` rows (a window; more rows: several
calls) and returns when all of them stopped, so a batch never waits for its longest row. A row's tokens depend on
its prompt and its PRNG key only (see :mod:`.generate`): greedy rows are the tokens of static batching
(``batching="static"``: batches of ``B`` rows, each decoded until its longest row stopped), sampled rows do not
depend on the rows around them, on ``B`` or on the device count, and results come back in input order.

Batches in flight. A compiled call runs one batch (a window, with refill); the host dispatches the calls
asynchronously (the devices queue them) and then collects the results. ``chunk_size`` (every batched method takes
it) bounds how many calls are dispatched before the host waits for their results, i.e. how many calls' inputs and
outputs can be held in device memory at once; ``None`` (default) dispatches all of them. theseus's ``chunk_size``
bounded the batches one compiled call scanned over, for the same reason. The results do not depend on it.

Devices. The batch axis is sharded over every device of the mesh (``jax.devices()``; ``XLA_FLAGS=
--xla_force_host_platform_device_count=2`` makes two CPU devices), parameters are replicated.

Several processes (``jax.distributed``, started with :func:`.hosts.initialize`). The mesh spans every device of
every process; every process builds the job and makes the same calls in the same order. Each batched call first
exchanges its inputs and settings (:class:`.hosts.Hosts`, arrival-checked with a timeout): when every process
passed the same inputs (the usual case: the same evaluation everywhere) they are the global batch; when the inputs
differ (each host holds its own shard of the data, of any size) the global batch is their concatenation in process
order. Either way each process feeds its shards of the global batch (``jax.make_array_from_callback``), the results
are gathered back (:meth:`.hosts.Hosts.fetch`: shapes agreed before the gather) and **each process gets the results
of the inputs it passed**. Settings that must agree (``max_new_tokens``, sampling, seeds) raise
:class:`.hosts.HostsError` on every process when they do not; a process that does not arrive within the timeout is
named in one. Greedy results equal a one-process run; sampled rows of concatenated inputs are drawn at their
global row index, so they differ from a one-process run of one shard.

theseus duck type. The evaluation classes written for theseus's ``InferenceJob`` read ``block_size``,
``per_device_batch_size``, ``replicas``, ``local_replicas``, ``mesh`` (axes ``("batch", "shard")``), ``state``
(with ``.params``), ``state_sharding``, ``key``, ``length``, ``random``, ``log``, ``pad`` and call
``forward(state, params, (x, None, mask), key=None, deterministic=True)`` inside their own jit. Those members are
here, thin, below the primary API.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as PS

from . import generate, model
from .checkpoint import load_checkpoint, save_checkpoint
from .compilation import enable_compilation_cache, install_compile_counter
from .config import ModelConfig
from .hosts import Hosts, HostsError
from .hosts import current as current_hosts
from .tokenizer import ByteTokenizer, Tokenizer, load_tokenizer, resolve_start_token

FinishReason = Literal["eot", "stop", "length"]
Batching = Literal["refill", "static"]


@dataclass(frozen=True)
class Rollout:
    """One generated continuation.

    Attributes:
        prompt: the prompt text (rendered, if the prompt was a chat).
        text: the generated text, cut before the end-of-text token or the first stop string.
        tokens: generated ids; the end-of-text token is excluded, the tokens that spelled a stop string are kept.
        finish_reason: ``"eot"`` (end-of-text / eos token), ``"stop"`` (a stop string) or ``"length"``.
        prompt_index, sample_index: which prompt and which of its ``n`` samples this is.
        prompt_tokens: the prompt ids fed to the model (after truncation, if any).
    """

    prompt: str
    text: str
    tokens: tuple[int, ...]
    finish_reason: FinishReason
    prompt_index: int
    sample_index: int
    prompt_tokens: tuple[int, ...]


@dataclass(frozen=True)
class Loglikelihood:
    """Score of a continuation given a context, as lm-eval's ``loglikelihood`` reports it.

    Attributes:
        logprob: sum of the continuation tokens' log-probabilities (natural log).
        num_tokens: number of continuation tokens.
        is_greedy: every continuation token is the argmax at its position.
        token_logprobs: the per-token log-probabilities.
    """

    logprob: float
    num_tokens: int
    is_greedy: bool
    token_logprobs: tuple[float, ...] = ()


@dataclass
class InferenceStats:
    """Counters a test or a benchmark can read (and reset with :meth:`InferenceJob.reset_stats`)."""

    compiles: int = 0  # executables built by this job (one per shape bucket and mode)
    compile_seconds: float = 0.0  # lowering + XLA compile time of those
    rollout_calls: int = 0
    rollout_rows: int = 0  # prompts x samples
    tokens_generated: int = 0  # new tokens returned (up to and including a stop token)
    decode_steps: int = 0  # tokens produced per row before each batch's loop ended, summed over batches
    score_calls: int = 0
    tokens_scored: int = 0
    max_batches_in_flight: int = (
        0  # most batches dispatched and not yet collected at once (see ``chunk_size``)
    )
    compile_keys: list[tuple[Any, ...]] = field(default_factory=list)


class InferenceState(NamedTuple):
    """The theseus-style ``state``: anything with ``.params``."""

    params: model.Params


#: A refill rollout call takes at most this many batches of rows (more rows: several calls).
REFILL_WINDOW = 64


class _RolloutPlan(NamedTuple):
    """One :meth:`InferenceJob.generate_tokens` call as its batching strategies take it."""

    fed: list[list[int]]  # the prompts as fed (start token added, fitted)
    rows: list[tuple[int, int]]  # (prompt index, sample index) of each row to generate
    P: int  # prompt columns (bucketed)
    B: int  # rows decoded together (all devices)
    scalars: tuple[jax.Array, ...]  # seed, max_new_tokens, temperature, top_k, top_p on the devices
    static: dict[str, Any]  # the compiled program's static arguments
    chunk_size: int | None  # batches in flight at once (None: all)


def _dealt(n: int, Q: int, devices: int) -> np.ndarray:
    """Queue positions of rows 0..n-1 dealt in turn to ``devices`` equal shares of a queue of ``Q`` rows."""
    i = np.arange(n)
    return (i % devices) * (Q // devices) + i // devices


def _bucket(n: int, minimum: int, cap: int) -> int:
    """Smallest power of two >= max(n, minimum), but at most ``cap`` (and at least ``n``)."""
    b = max(minimum, 1 << max(0, math.ceil(math.log2(max(n, 1)))))
    return max(n, min(b, cap))


class InferenceJob:
    """A model ready for rollouts and scoring. Build it with :meth:`from_checkpoint` or :meth:`from_params`.

    Args:
        config: the model's :class:`ModelConfig`.
        params: parameter tree (numpy or jax arrays) as :func:`pytest_reward.jax.model.init_params` lays out.
        tokenizer: a :class:`~pytest_reward.jax.tokenizer.Tokenizer` (``None``: a :class:`ByteTokenizer`).
        block_size: context length used for checks (default: the model's ``max_positions``).
        per_device_batch_size: rows per device per batch.
        devices: devices to shard the batch over (default: all of ``jax.devices()``).
        dtype: ``"float32"`` (default, exact) or ``"bfloat16"`` (weights and activations; logits stay float32).
        seed: seeds ``key`` and the default rollout seeds.
        start_token: the token put in front of every text the job reads (see the module docstring): ``"auto"``
            (default) takes the tokenizer's declared ``start_token``; an id or a special token's text sets it;
            ``None`` reads texts bare.
        compilation_cache_dir: enable jax's persistent compilation cache there (process-wide).
        score_tokens_per_batch: bounds B x T of a scoring batch (the (B, T, V) logits live in memory).
    """

    def __init__(
        self,
        config: ModelConfig,
        params: model.Params,
        tokenizer: Tokenizer | None = None,
        *,
        block_size: int | None = None,
        per_device_batch_size: int = 32,
        devices: Sequence[Any] | None = None,
        dtype: str = "float32",
        seed: int = 0,
        start_token: int | str | None = "auto",
        compilation_cache_dir: str | Path | None = None,
        score_tokens_per_batch: int = 8192,
    ):
        install_compile_counter()
        if compilation_cache_dir is not None:
            enable_compilation_cache(compilation_cache_dir)
        self.config = config
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else ByteTokenizer()
        self.block_size = int(block_size or config.max_positions)
        if config.family == "gpt2" and self.block_size > config.max_positions:
            raise ValueError(
                f"block_size={self.block_size} exceeds the {config.max_positions} learned positions"
            )
        self.per_device_batch_size = int(per_device_batch_size)
        self.score_tokens_per_batch = int(score_tokens_per_batch)
        self.devices = list(devices) if devices is not None else jax.devices()
        self.mesh = Mesh(np.array(self.devices).reshape(-1, 1), ("batch", "shard"))
        self.replicas = len(self.devices)
        self.local_replicas = sum(d.process_index == jax.process_index() for d in self.devices)
        self._replicated = NamedSharding(self.mesh, PS())
        self._batch_sharded = NamedSharding(self.mesh, PS("batch"))
        self.dtype = jnp.dtype(dtype)
        cast = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype=self.dtype), params)
        self.state = InferenceState(jax.device_put(cast, self._replicated))
        self.state_sharding = InferenceState(jax.tree_util.tree_map(lambda _: self._replicated, cast))
        self.seed = int(seed)
        self.key = jax.random.PRNGKey(self.seed)
        self.length = -1
        self.random = random.Random(0xC0FFEE)
        self.stats = InferenceStats()
        self._executables: dict[tuple[Any, ...], Any] = {}
        self._dparams: model.Params = {}
        self._dparams_of: InferenceState | None = None
        self._rollout_counter = 0
        eos = [self.tokenizer.eot_token, *config.eos_token_ids]
        self.stop_token_ids: tuple[int, ...] = tuple(
            sorted({int(t) for t in eos if 0 <= int(t) < config.vocab_size})
        )
        self.start_token: int | None = resolve_start_token(self.tokenizer, self.config.vocab_size, start_token)
        #: the processes of a ``jax.distributed`` run sharing this job's calls (``None``: this process alone)
        self.hosts: Hosts | None = current_hosts()

    def with_start_token(self, ids: Sequence[int]) -> list[int]:
        """``ids`` as the job reads them: the start token in front, unless the job has none or ``ids`` already
        begin with it. Empty ``ids`` are read as the start token alone, else as the end-of-text token (a
        generation or a continuation needs something to condition on)."""
        out = [int(t) for t in ids]
        if self.start_token is None:
            return out or [int(self.tokenizer.eot_token)]
        return out if out[:1] == [self.start_token] else [self.start_token, *out]

    def _fit(self, ids: list[int], limit: int) -> list[int]:
        """The last ``limit`` tokens of ``ids``; a leading start token stays in front."""
        if len(ids) <= limit:
            return ids
        keep = 1 if self.start_token is not None and ids[:1] == [self.start_token] else 0
        return ids[:keep] + ids[len(ids) - (limit - keep) :]

    def _in_chunks(self, batches: Iterable[Any], chunk_size: int | None) -> list[Any]:
        """Iterating ``batches`` dispatches one compiled batch per item and yields its device outputs; at most
        ``chunk_size`` are dispatched before the host collects them. Returns every batch's outputs on the host,
        in order."""
        if chunk_size is not None and (isinstance(chunk_size, bool) or int(chunk_size) < 1):
            raise ValueError(f"chunk_size must be a positive number of batches or None, got {chunk_size!r}")
        done: list[Any] = []
        pending: list[Any] = []
        for outputs in batches:
            pending.append(outputs)
            self.stats.max_batches_in_flight = max(self.stats.max_batches_in_flight, len(pending))
            if chunk_size is not None and len(pending) >= int(chunk_size):
                done.extend(jax.tree_util.tree_map(self._fetch, p) for p in pending)
                pending = []
        done.extend(jax.tree_util.tree_map(self._fetch, p) for p in pending)
        return done

    # ------------------------------------------------------------------------------------------ construction
    @classmethod
    def from_checkpoint(
        cls, path: str | Path, *, tokenizer: Tokenizer | Literal["auto"] | None = "auto", **kwargs: Any
    ) -> InferenceJob:
        """Load a Hugging Face model directory (``config.json`` + safetensors) and its tokenizer.

        ``tokenizer="auto"`` loads the directory's tokenizer (:func:`load_tokenizer`); pass one to override it.
        Other keyword arguments go to :class:`InferenceJob`.
        """
        cfg, params = load_checkpoint(path)
        if tokenizer == "auto":
            tokenizer = load_tokenizer(path)
        return cls(cfg, params, tokenizer, **kwargs)

    @classmethod
    def from_params(cls, config: ModelConfig, params: model.Params, **kwargs: Any) -> InferenceJob:
        """Wrap an in-memory parameter tree (e.g. fresh from training)."""
        return cls(config, params, **kwargs)

    @property
    def params(self) -> model.Params:
        return self.state.params

    def _decode_params(self) -> model.Params:
        """:func:`~.model.decode_weights` of the current parameters, the layout the decode step reads: built on the
        host once per parameter set (a new ``state``, as ``Evaluator.update_params`` sets, builds it again) and kept
        on the devices beside the parameters (a second copy of the weight matrices)."""
        if self._dparams_of is not self.state:
            host = jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_data(0)), self.state.params)
            cpu = all(d.platform == "cpu" for d in self.mesh.devices.flat)
            packed = cpu and model.decode_packed(host["embed"].dtype)  # the CPU kernel's layout
            self._dparams = jax.device_put(model.decode_weights(host, self.config, packed), self._replicated)
            self._dparams_of = self.state
        return self._dparams

    def save(self, path: str | Path, **kwargs: Any) -> Path:
        """Write the model as a Hugging Face directory (weights in float32) and, when possible, the tokenizer."""
        host = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), self.params)
        out = save_checkpoint(path, self.config, host, **kwargs)
        if isinstance(self.tokenizer, ByteTokenizer):
            self.tokenizer.save(out, model_max_length=self.block_size)
        return out

    def reset_stats(self) -> None:
        """Zero the counters (compiled executables stay cached)."""
        self.stats = InferenceStats()

    # ------------------------------------------------------------------------------------------ compiled programs
    def _executable(self, name: str, fn: Any, args: tuple[Any, ...], static: Mapping[str, Any]) -> Any:
        shape_key = tuple((tuple(a.shape), str(a.dtype)) for a in args[1:] if hasattr(a, "shape"))
        # the structure of every tree argument too: the decode weights packed or not have the same leaf shapes
        trees = tuple(jax.tree_util.tree_structure(a) for a in args if not hasattr(a, "shape"))
        key = (name, shape_key, tuple(sorted((k, v) for k, v in static.items() if k != "cfg")), trees)
        exe = self._executables.get(key)
        if exe is None:
            t0 = time.perf_counter()
            exe = fn.lower(*args, **static).compile()
            self.stats.compile_seconds += time.perf_counter() - t0
            self.stats.compiles += 1
            self.stats.compile_keys.append(key)
            self._executables[key] = exe
        return exe

    def _put_batch(self, array: np.ndarray) -> jax.Array:
        """Host array with the global batch on axis 0 -> array sharded over the mesh's "batch" axis."""
        return jax.make_array_from_callback(array.shape, self._batch_sharded, lambda idx: array[idx])

    def _put_scalar(self, value: Any, dtype: Any) -> jax.Array:
        arr = np.asarray(value, dtype=dtype)
        return jax.make_array_from_callback(arr.shape, self._replicated, lambda idx: arr[idx])

    def _fetch(self, array: jax.Array) -> np.ndarray:
        if self.hosts is not None:
            return self.hosts.fetch("the results of a batch", array)
        return np.asarray(array)

    def _share(self, what: str, items: list[Any], settings: tuple[Any, ...]) -> tuple[list[Any], slice]:
        """Several processes: the global inputs of a batched call and this process's slice of them (see the module
        docstring). ``settings`` must be equal on every process. One process: ``items`` and all of them."""
        if self.hosts is None:
            return items, slice(0, len(items))
        shared = self.hosts.exchange(what, (settings, items))
        if any(s != settings for s, _ in shared):
            shown = "; ".join(f"process {p}: {s!r:.200}" for p, (s, _) in enumerate(shared))
            raise HostsError(
                f"{what}: the processes called with different settings ({shown}); every process must make the "
                "same calls with the same settings",
                fatal=False,
            )
        if all(x == items for _, x in shared):
            return items, slice(0, len(items))
        start = sum(len(x) for _, x in shared[: self.hosts.index])
        return [x for _, part in shared for x in part], slice(start, start + len(items))

    def _batch_rows(self, n_rows: int, tokens_per_row: int | None = None) -> int:
        """Rows per batch: a multiple of the device count, a power of two below the full batch."""
        full = self.per_device_batch_size * self.replicas
        if tokens_per_row:
            full = min(full, max(self.replicas, self.score_tokens_per_batch // tokens_per_row))
        rows = min(full, _bucket(n_rows, 1, full))
        return max(self.replicas, -(-rows // self.replicas) * self.replicas)

    # ------------------------------------------------------------------------------------------ padding
    @staticmethod
    def pad(
        seqs: Sequence[Sequence[int]], pad_token: int = 0, pad_to: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Left-pad token lists: -> tokens int32 (N, T) and mask bool (N, T) (True = real token).

        ``T`` is ``pad_to`` or the longest sequence; a longer sequence raises ``ValueError``.
        """
        T = max((len(s) for s in seqs), default=0) if pad_to is None else int(pad_to)
        tokens = np.full((len(seqs), T), pad_token, np.int32)
        mask = np.zeros((len(seqs), T), bool)
        for i, s in enumerate(seqs):
            if len(s) > T:
                raise ValueError(f"sequence {i} has {len(s)} tokens, more than pad_to={T}")
            if len(s):
                tokens[i, T - len(s) :] = s
                mask[i, T - len(s) :] = True
        return tokens, mask

    # ------------------------------------------------------------------------------------------ rollout
    def rollout(
        self,
        prompts: Sequence[str | Sequence[Any]],
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        stop: str | Sequence[str] = (),
        seed: int | None = None,
        n: int = 1,
        truncate: Literal["error", "left"] = "error",
        ignore_eos: bool = False,
        chunk_size: int | None = None,
        batching: Batching = "refill",
    ) -> list[Rollout]:
        """Generate continuations of text prompts (or chats: lists of ``{"role", "content"}`` messages).

        Returns ``len(prompts) * n`` :class:`Rollout`\\ s, the ``n`` samples of a prompt consecutive. Greedy when
        ``temperature == 0``; otherwise samples with ``top_k`` (0 = off) and nucleus ``top_p``, reproducibly from
        ``seed`` (``None``: a fresh seed from the job's ``seed`` and a call counter). A row stops at the
        end-of-text/eos token (unless ``ignore_eos``, for fixed-length benchmarks) or after ``max_new_tokens``;
        ``stop`` strings cut the text afterwards, and one the tokenizer spells with a single token also ends the
        row's decoding when emitted (:meth:`single_token_stops`: less work, the same text).

        Every prompt is read after the job's :attr:`start_token` (when it has one). A prompt needs
        ``len(prompt_tokens) + max_new_tokens <= block_size`` (the start token counted); a longer one raises
        ``ValueError`` unless ``truncate="left"``, which keeps the start token and the prompt's last tokens. An empty
        prompt is the start token alone, else the end-of-text token. ``chunk_size`` and ``batching`` (``"refill"``,
        the default, or ``"static"``; the same tokens either way): see the module docstring.
        """
        texts = [p if isinstance(p, str) else self.tokenizer.apply_chat_template(p) for p in prompts]
        encoded = self.tokenizer.encode_batch(texts, allowed_special="all")
        stops = [stop] if isinstance(stop, str) else [s for s in stop if s]
        gens, prompt_ids = self.generate_tokens(
            encoded,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            n=n,
            truncate=truncate,
            ignore_eos=ignore_eos,
            stop_token_ids=self.single_token_stops(stops),
            chunk_size=chunk_size,
            batching=batching,
        )
        results = []
        for row, gen in enumerate(gens):
            i, j = divmod(row, n)
            results.append(self._finish(texts[i], prompt_ids[i], gen, stops, i, j, ignore_eos))
        self.stats.tokens_generated += sum(len(g) for g in gens)
        return results

    def single_token_stops(self, stops: Sequence[str]) -> tuple[int, ...]:
        """The ids of the stop strings the tokenizer spells with one token (``<|im_end|>`` in a chat model's
        vocabulary, a newline...): a row that emits one has produced its stop string, so decoding ends for it
        there instead of running to ``max_new_tokens`` and being cut afterwards. Same text either way."""
        out = set()
        for text in stops:
            try:
                ids = self.tokenizer.encode(text, allowed_special="all")
            except Exception:  # a tokenizer that cannot encode it: the string is still cut afterwards
                continue
            if (
                len(ids) == 1
                and 0 <= int(ids[0]) < self.config.vocab_size
                and self.tokenizer.decode(ids) == text
            ):
                out.add(int(ids[0]))
        return tuple(sorted(out))

    def _finish(
        self,
        prompt: str,
        prompt_ids: list[int],
        gen: list[int],
        stops: list[str],
        i: int,
        j: int,
        ignore_eos: bool,
    ) -> Rollout:
        reason: FinishReason = "length"
        if gen and not ignore_eos and gen[-1] in self.stop_token_ids:
            gen, reason = gen[:-1], "eot"
        text = self.tokenizer.decode(gen)
        cut = min((k for k in (text.find(s) for s in stops) if k >= 0), default=-1)
        if cut >= 0:
            text, reason = text[:cut], "stop"
            for m in range(1, len(gen) + 1):  # keep the shortest token prefix that spells a stop string
                if any(s in self.tokenizer.decode(gen[:m]) for s in stops):
                    gen = gen[:m]
                    break
        return Rollout(prompt, text, tuple(gen), reason, i, j, tuple(prompt_ids))

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
        ignore_eos: bool = False,
        stop_token_ids: Sequence[int] = (),
        chunk_size: int | None = None,
        batching: Batching = "refill",
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Token-level rollout: prompt id lists -> (``len(prompts) * n`` generated id lists, prompts as fed).

        The prompts are ids as the tokenizer encodes text; each is fed after the start token (:meth:`with_start_token`),
        and the prompts as fed are returned. A generated list ends with the stop token that ended it, if any (see
        :meth:`rollout` for the rest). ``stop_token_ids`` end rows too, besides the end-of-text/eos tokens (not
        with ``ignore_eos``). ``batching``: ``"refill"`` (default) or ``"static"``, see the module docstring; the
        tokens are the same.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
            raise ValueError(f"invalid sampling: temperature={temperature}, top_k={top_k}, top_p={top_p}")
        if batching not in ("refill", "static"):
            raise ValueError(f"batching must be 'refill' or 'static', got {batching!r}")
        limit = self.block_size - max_new_tokens
        if limit < 1:
            raise ValueError(
                f"max_new_tokens={max_new_tokens} leaves no room for a prompt in block_size={self.block_size}"
            )
        fed: list[list[int]] = []
        for i, ids in enumerate(prompts):
            ids = self.with_start_token(ids)
            if len(ids) > limit and truncate != "left":
                start = " (the start token included)" if self.start_token is not None else ""
                raise ValueError(
                    f"prompt {i} has {len(ids)} tokens{start}; with max_new_tokens={max_new_tokens} it needs "
                    f"{len(ids) + max_new_tokens} positions but block_size is {self.block_size}. Shorten it, "
                    f"lower max_new_tokens, or pass truncate='left' to keep its last tokens."
                )
            fed.append(self._fit(ids, limit))
        self.stats.rollout_calls += 1
        if not fed and self.hosts is None:
            return [], []
        if seed is None:
            seed = (self.seed * 1_000_003 + self._rollout_counter) % (2**32)
        self._rollout_counter += 1
        settings = (
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            seed,
            n,
            ignore_eos,
            tuple(stop_token_ids),
            batching,
        )
        fed, mine = self._share("a rollout call's prompts", fed, settings)
        if not fed:
            return [], []

        mode = generate.sampling_mode(temperature, top_k, top_p)
        samples = 1 if mode == "greedy" else n  # greedy samples are identical: compute once, copy
        rows = [(i, j) for i in range(len(fed)) for j in range(samples)]
        P = _bucket(max(len(f) for f in fed), 16, limit)
        new_slots = _bucket(max_new_tokens, 16, 1 << 30)
        B = self._batch_rows(len(rows))
        scalars = (
            self._put_scalar(seed, np.uint32),
            self._put_scalar(max_new_tokens, np.int32),
            self._put_scalar(max(temperature, 1e-6), np.float32),
            self._put_scalar(top_k, np.int32),
            self._put_scalar(top_p, np.float32),
        )
        stop_ids = () if ignore_eos else tuple(sorted({*self.stop_token_ids, *map(int, stop_token_ids)}))
        static = {"cfg": self.config, "new_slots": new_slots, "mode": mode, "stop_ids": stop_ids}
        plan = _RolloutPlan(fed, rows, P, B, scalars, static, chunk_size)
        out = self._refill(plan) if batching == "refill" else self._static(plan)
        stop_set = set(stop_ids)
        gens = []
        for r in out:
            gen = r[:max_new_tokens].tolist()
            for k, t in enumerate(gen):
                if t in stop_set:
                    gen = gen[: k + 1]
                    break
            gens.append(gen)
        if samples != n:
            gens = [g for g in gens for _ in range(n)]
        self.stats.rollout_rows += len(gens)
        return gens[mine.start * n : mine.stop * n], fed[mine]

    def _static(self, plan: _RolloutPlan) -> np.ndarray:
        """Static batching: rows ``(prompt index, sample index)`` in batches of ``B``, each decoded until its longest
        row stopped. Returns the new tokens (len(rows), N) int32."""
        fed, rows, P, B, scalars, static, chunk_size = plan
        params, dparams = self.state.params, self._decode_params()

        def batches() -> Iterator[Any]:
            for start in range(0, len(rows), B):
                chunk = rows[start : start + B]
                chunk = chunk + [chunk[-1]] * (
                    B - len(chunk)
                )  # pad the last batch with copies (dropped below)
                tokens, mask = self.pad([fed[i] for i, _ in chunk], self.tokenizer.pad_token, P)
                args = (
                    params,
                    dparams,
                    self._put_batch(tokens),
                    self._put_batch(mask),
                    self._put_batch(np.asarray(chunk, np.int32)),
                )
                exe = self._executable("rollout", generate.rollout_jit, (*args, *scalars), static)
                yield exe(*args, *scalars)  # async dispatch: the batch queues up on the devices

        outs = []
        for out, steps in self._in_chunks(batches(), chunk_size):
            outs.append(out)
            self.stats.decode_steps += int(steps)
        return np.concatenate(outs)[: len(rows)]

    def _refill(self, plan: _RolloutPlan) -> np.ndarray:
        """Continuous batching (:func:`~.generate.rollout_refill`): rows go through ``B`` slots, in windows of at most
        ``B * REFILL_WINDOW`` queue rows per compiled call (near-equal windows; a call drains its slots before it
        returns; at most ``B`` rows: a program of one prefill and its decode loop). On several devices the window's
        rows are dealt to them in turn and each runs ``B / devices`` slots.
        Returns the new tokens (len(rows), N) int32 in row order."""
        fed, rows, P, B, scalars, static, chunk_size = plan
        r = self.replicas
        Q = B if len(rows) <= B else B * REFILL_WINDOW  # a queue that fits the slots: a program of one chunk
        windows = -(-len(rows) // Q)
        size = -(-len(rows) // windows)
        local = B // r
        static = {**static, "batch": local}
        fn = generate.refill_program(self.mesh)
        params, dparams = self.state.params, self._decode_params()

        def calls() -> Iterator[Any]:
            for start in range(0, len(rows), size):
                chunk = rows[start : start + size]
                at = _dealt(len(chunk), Q, r)  # queue position of each row
                tokens = np.full((Q, P), self.tokenizer.pad_token, np.int32)
                mask = np.zeros((Q, P), bool)
                ids = np.zeros((Q, 2), np.int32)
                tokens[at], mask[at] = self.pad([fed[i] for i, _ in chunk], self.tokenizer.pad_token, P)
                ids[at] = chunk
                n_rows = np.bincount(np.arange(len(chunk)) % r, minlength=r).astype(np.int32)
                args = tuple(self._put_batch(a) for a in (tokens, mask, ids, n_rows))
                exe = self._executable("rollout_refill", fn, (params, dparams, *args, *scalars), static)
                yield exe(params, dparams, *args, *scalars)

        outs = []
        for (out, steps), start in zip(
            self._in_chunks(calls(), chunk_size), range(0, len(rows), size), strict=True
        ):
            outs.append(out[_dealt(min(size, len(rows) - start), Q, r)])
            self.stats.decode_steps += int(steps.max())
        return np.concatenate(outs)

    def rollout_raw(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        max_prompt_length: int | None = None,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        chunk_size: int | None = None,
        batching: Batching = "refill",
    ) -> np.ndarray:
        """theseus's ``return_type="raw_indices"`` layout, for RL consumers: int32 (N, P + max_new_tokens).

        ``P = max_prompt_length`` (default ``block_size - max_new_tokens``). Row i holds prompt i as fed (after the
        start token) left-padded with the pad token in ``[0, P)`` (prompts longer than P keep the start token and
        their last tokens) and its generation in ``[P, P + max_new_tokens)``; slots after an end-of-text token
        repeat it.
        """
        P = self.block_size - max_new_tokens if max_prompt_length is None else int(max_prompt_length)
        if P < 1 or P + max_new_tokens > self.block_size:
            raise ValueError(
                f"max_prompt_length={P} + max_new_tokens={max_new_tokens} must fit block_size={self.block_size}"
            )
        clipped = [self._fit(self.with_start_token(p), P) for p in prompts]
        gens, fed = self.generate_tokens(
            clipped,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            chunk_size=chunk_size,
            batching=batching,
        )
        tokens, _ = self.pad(fed, self.tokenizer.pad_token, P)
        out = np.empty((len(gens), P + max_new_tokens), np.int32)
        out[:, :P] = tokens
        for i, g in enumerate(gens):
            out[i, P : P + len(g)] = g
            out[i, P + len(g) :] = g[-1] if len(g) < max_new_tokens else 0
        return out

    # ------------------------------------------------------------------------------------------ scoring
    def _score_rows(
        self, inputs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], chunk_size: int | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Teacher-forced scoring of rows (inputs[i], targets[i]) of equal lengths <= block_size.

        ``targets[i][t]`` is the token expected after ``inputs[i][:t+1]`` (negative = not scored). Returns per row
        (logp (n_i,) float32, greedy (n_i,) bool).
        """
        mine = slice(0, len(inputs))
        if self.hosts is not None:  # the rows as plain lists, exchanged (one process: read as they are)
            rows, mine = self._share(
                "a scoring call's rows", [(list(x), list(y)) for x, y in zip(inputs, targets, strict=True)], ()
            )
            inputs, targets = [x for x, _ in rows], [y for _, y in rows]
        if not inputs:
            return []
        T = _bucket(max(len(x) for x in inputs), 16, self.block_size)
        B = self._batch_rows(len(inputs), T)

        def batches() -> Iterator[Any]:
            for start in range(0, len(inputs), B):
                idx = list(range(start, min(start + B, len(inputs))))
                idx += [idx[-1]] * (B - len(idx))
                tokens, mask = self.pad([inputs[i] for i in idx], self.tokenizer.pad_token, T)
                tgt, _ = self.pad([targets[i] for i in idx], -1, T)
                args = (
                    self.state.params,
                    self._put_batch(tokens),
                    self._put_batch(mask),
                    self._put_batch(tgt),
                )
                exe = self._executable("score", generate.score_jit, args, {"cfg": self.config})
                yield exe(*args)

        done = self._in_chunks(batches(), chunk_size)
        logp = np.concatenate([a for a, _ in done])
        greedy = np.concatenate([g for _, g in done])
        self.stats.score_calls += 1
        self.stats.tokens_scored += sum(len(x) for x in inputs)
        return [(logp[i, T - len(x) :], greedy[i, T - len(x) :]) for i, x in enumerate(inputs)][mine]

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's split: trailing context whitespace moves to the continuation; tokens are split from the
        encoding of the whole string so merges across the boundary are respected. The context is read after the
        start token (:meth:`with_start_token`)."""
        n_space = len(context) - len(context.rstrip())
        if n_space:
            continuation, context = context[-n_space:] + continuation, context[:-n_space]
        if not context:
            return self.with_start_token([]), self.tokenizer.encode(continuation)
        whole = self.tokenizer.encode(context + continuation)
        ctx = self.tokenizer.encode(context)
        return self.with_start_token(whole[: len(ctx)]), whole[len(ctx) :]

    def loglikelihood(
        self, requests: Sequence[tuple[str, str]], *, chunk_size: int | None = None
    ) -> list[Loglikelihood]:
        """Score ``(context, continuation)`` pairs like lm-eval: sum of continuation log-probs, count, greedy flag.

        The context is read after the start token; an empty context is the start token alone, else the
        end-of-text token. Pairs longer than ``block_size + 1`` tokens keep their last tokens (the continuation
        must fit in ``block_size``).
        """
        inputs, targets, counts = [], [], []
        for ctx_str, cont_str in requests:
            ctx, cont = self._encode_pair(ctx_str, cont_str)
            if len(cont) > self.block_size:
                raise ValueError(
                    f"continuation of {len(cont)} tokens does not fit block_size={self.block_size}"
                )
            whole = (ctx + cont)[-(self.block_size + 1) :]
            inputs.append(whole[:-1])
            targets.append([-1] * (len(whole) - 1 - len(cont)) + cont)
            counts.append(len(cont))
        scored = self._score_rows(inputs, targets, chunk_size)
        out = []
        for (logp, greedy), k in zip(scored, counts, strict=True):
            lp = logp[len(logp) - k :] if k else logp[:0]
            out.append(
                Loglikelihood(
                    float(lp.sum(dtype=np.float64)),
                    k,
                    bool(greedy[len(greedy) - k :].all()),
                    tuple(lp.tolist()),
                )
            )
        return out

    def token_nll(self, texts: Sequence[str], *, chunk_size: int | None = None) -> list[np.ndarray]:
        """Per-token negative log-likelihood (nats) of each text, float32 (n_scored,).

        The text is read after the job's :attr:`start_token`: with one, every token of the text is scored
        (``n_scored`` = its token count); without, every token but the first, which nothing precedes (``n_scored``
        = count - 1, as transformers' ``model(ids, labels=ids)`` scores it). Texts longer than ``block_size`` are
        cut into consecutive windows of ``block_size`` predictions (no overlap), each scored from the start of its
        window.
        """
        W = self.block_size
        inputs, targets, owner = [], [], []
        for i, text in enumerate(texts):
            seq = self.with_start_token(self.tokenizer.encode(text))
            for s in range(0, len(seq) - 1, W):
                inputs.append(seq[s : s + W][: len(seq) - 1 - s])
                targets.append(seq[s + 1 : s + 1 + W])
                owner.append(i)
        scored = self._score_rows(inputs, targets, chunk_size)
        parts: list[list[np.ndarray]] = [[] for _ in texts]
        for (logp, _), i in zip(scored, owner, strict=True):
            parts[i].append(-logp)
        return [np.concatenate(p).astype(np.float32) if p else np.zeros(0, np.float32) for p in parts]

    def perplexity(self, texts: Sequence[str], *, chunk_size: int | None = None) -> float:
        """Token-weighted corpus perplexity ``exp(sum nll / sum scored tokens)`` (lower is better), over the
        tokens :meth:`token_nll` scores."""
        nll = self.token_nll(texts, chunk_size=chunk_size)
        n = sum(len(x) for x in nll)
        return float(math.exp(sum(float(x.sum(dtype=np.float64)) for x in nll) / max(n, 1)))

    def logits(
        self, sequences: Sequence[Sequence[int]], *, chunk_size: int | None = None
    ) -> list[np.ndarray]:
        """Logits of token sequences, read as given (no start token added): one float32 array (len_i, V) per
        sequence (row t predicts token t + 1)."""
        return self._per_position("logits", generate.logits_jit, sequences, chunk_size)

    def predictions(
        self, sequences: Sequence[Sequence[int]], *, chunk_size: int | None = None
    ) -> list[np.ndarray]:
        """The argmax next token after every prefix of each sequence, read as given: one int32 array (len_i,) per
        sequence, equal to ``logits(sequences)[i].argmax(-1)`` without ever holding the (len_i, V) logits."""
        return self._per_position("predict", generate.predict_jit, sequences, chunk_size)

    def _per_position(
        self, name: str, fn: Any, sequences: Sequence[Sequence[int]], chunk_size: int | None
    ) -> list[np.ndarray]:
        if max((len(s) for s in sequences), default=0) > self.block_size:
            raise ValueError(f"a sequence is longer than block_size={self.block_size}")
        shared, mine = self._share(f"a {name} call's sequences", [list(x) for x in sequences], (name,))
        if not shared:
            return []
        sequences = shared
        T = _bucket(max(len(s) for s in sequences), 16, self.block_size)
        B = self._batch_rows(len(sequences), T)
        starts = range(0, len(sequences), B)

        def batches() -> Iterator[Any]:
            for start in starts:
                idx = list(range(start, min(start + B, len(sequences))))
                chunk = [sequences[i] for i in idx] + [sequences[idx[-1]]] * (B - len(idx))
                tokens, mask = self.pad(chunk, self.tokenizer.pad_token, T)
                args = (self.state.params, self._put_batch(tokens), self._put_batch(mask))
                exe = self._executable(name, fn, args, {"cfg": self.config})
                yield exe(*args)

        out = []
        for start, values in zip(starts, self._in_chunks(batches(), chunk_size), strict=True):
            stop = min(start + B, len(sequences))
            out.extend(values[k, T - len(sequences[i]) :] for k, i in enumerate(range(start, stop)))
        return out[mine]

    # ------------------------------------------------------------------------------------------ theseus duck type
    def forward(
        self,
        state: Any,
        params: model.Params,
        batch: tuple[Any, Any, Any],
        key: Any = None,
        deterministic: bool = True,
        **kwargs: Any,
    ) -> tuple[jax.Array, jax.Array | None, dict[str, Any]]:
        """theseus's forward: ``(x (B, T) int32, y (B, T) int32 | None, mask (B, T) bool | None)`` ->
        ``(logits (B, T, V) float32, loss, {})``. Pure and traceable; ``loss`` is the mean next-token NLL over
        ``y >= 0`` when ``y`` is given, else ``None``."""
        x, y, mask = batch
        logits = model.forward(
            params, self.config, jnp.asarray(x), None if mask is None else jnp.asarray(mask)
        )
        if y is None:
            return logits, None, {}
        y = jnp.asarray(y)
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), jnp.maximum(y, 0)[..., None], -1)[..., 0]
        valid = y >= 0
        return logits, -jnp.sum(jnp.where(valid, lp, 0.0)) / jnp.maximum(valid.sum(), 1), {}

    def log(self, values: Mapping[str, Any]) -> None:
        """theseus's metric hook: a no-op here."""

    def __repr__(self) -> str:
        c = self.config
        return (
            f"InferenceJob({c.model_type}, L={c.n_layers}, D={c.d_model}, V={c.vocab_size}, "
            f"block_size={self.block_size}, devices={self.replicas}, batch={self.per_device_batch_size}/device, "
            f"start_token={self.start_token})"
        )
