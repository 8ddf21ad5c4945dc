"""``RewardModel``: a learned reward model (a ``*ForSequenceClassification`` checkpoint) scoring texts on the engine.

A reward model is the engine's trunk (:func:`~.model.hidden_states`, :func:`~.model.final_norm`) with a scalar head
in place of the unembedding: ``score.weight`` (num_labels, D), and a bias when the checkpoint has one (verl trains
``AutoModelForTokenClassification``, whose ``score`` has a bias). The reward of a text is the head applied to the
final-normed hidden state of one token, the *pooled* token::

    rm = RewardModel.from_checkpoint("path/to/rm")
    rm.score_conversations([[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]])
    # array([1.37], dtype=float32)

Pooling. Which token is pooled is a named setting, because the stacks that train and serve reward models disagree:

* ``"hf"`` (default): transformers' rule, the rightmost token that is not the pad token
  (``GenericForSequenceClassification.forward`` in ``transformers/modeling_layers.py`` and
  ``GPT2ForSequenceClassification.forward`` in ``models/gpt2/modeling_gpt2.py``: ``last_non_pad_token =
  (token_indices * (input_ids != pad_token_id)).argmax(-1)``). When the pad token is the end-of-sequence token (GPT-2,
  and RewardBench's fallback for tokenizers without a pad token) and a text ends with it, the token *before* it is
  pooled. A text with no token but pad tokens pools its first token (the argmax of zeros, as transformers does for
  an unpadded or right-padded row). A config without ``pad_token_id`` pools the last token (what transformers does
  for a single row; it refuses batches then).
* ``"last_attended"``: the last token the attention mask covers, i.e. the text's last token whatever it is. OpenRLHF
  (``openrlhf/models/model.py``: ``eos_indices = L - 1 - attention_mask.fliplr().argmax(dim=1)``) and verl
  (``verl/workers/fsdp_workers.py``, ``RewardModelWorker``: ``argmax(position_ids * attention_mask)``) score so.

The two agree unless the text ends with the pad token. Either rule names a position ``p`` in the text; attention
is causal, so the state there depends on tokens ``0..p`` only, and the engine feeds the prefix ``ids[:p + 1]`` and
pools its last token: one program serves both rules, and the last layer's attention and MLP run for that one
position (:func:`~.model.hidden_states` with ``last_only``).

Texts. :meth:`RewardModel.render` is the checkpoint tokenizer's chat template with the generation prompt off, the
text the model was trained to score (no template: ChatML, :func:`~.tokenizer.render_chatml`). :meth:`~RewardModel.
encode` reads special-token text as the special token and puts the tokenizer's start token in front
(:attr:`~.tokenizer.Tokenizer.start_token`, as :class:`~.inference.InferenceJob` reads texts) unless the text already
begins with it: a chat template that writes ``<|begin_of_text|>`` gets no second one. Nothing else is added; in
particular no end-of-sequence token is appended. :meth:`~RewardModel.score_ids` reads ids exactly as given.

Length. A text is read in ``max_length`` tokens at most (default: the model's ``max_positions``). After the pooling
cut, a longer one keeps the start token and its *last* tokens (``truncation="left"``, the default: the pooled token
and the response before it are the end of the text), counted in ``rm.stats.truncated``; ``truncation="error"``
raises ``ValueError`` instead.

Batches. Rows are sorted by length and padded (on the left, positions counted from each row's first token, so a
row's score does not depend on its neighbours) to a length bucket ``T`` (16, 24, 32, 48, 64, 96, ...: powers of two
and the midpoints between them, capped at ``max_length``). A bucket's rows run ``B`` at a time: ``batch_size``, or by
default the power of two nearest below ``tokens_per_batch / T`` (at most ``max_batch_size``); a last, partial batch
is padded to the next power of two. One executable per ``(B, T)`` is compiled ahead of time and kept, so repeated
calls compile nothing (``rm.stats.compiles``). Batches are dispatched asynchronously, then collected. One device
(``jax.local_devices()[0]``, a device of this process, unless ``device`` is given: under ``jax.distributed``
``jax.devices()[0]`` belongs to process 0).

Shared prompts. The responses to one prompt (a chosen/rejected pair, a GRPO group) begin with the same tokens, and
under causal attention those tokens' keys and values do not depend on what follows. Rows that share at least
``min_shared_prefix`` leading tokens (default 32; ``None``: off) therefore run them once: a group's prefix runs
through :func:`~.model.hidden_states` (its keys and values), and each row's own tokens through
:func:`~.model.extend_hidden_states` on top of them, one ``(G, P, B, T)`` program per shape (``G`` prefixes of
bucket ``P``, ``B`` rows of bucket ``T``). The scores are those of the whole rows to float rounding (tested to 1e-5;
the attention sums in another order). ``rm.stats.shared_tokens`` counts the prefix tokens not run again.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from . import model
from .checkpoint import CONFIG_FILE, RewardHeadError, load_checkpoint
from .compilation import install_compile_counter
from .config import ModelConfig
from .tokenizer import ByteTokenizer, Tokenizer, load_tokenizer, resolve_start_token

Pooling = Literal["hf", "last_attended"]
Truncation = Literal["left", "error"]
POOLING_RULES: tuple[str, ...] = ("hf", "last_attended")


def reward_scores(
    params: model.Params, head: model.Params, tokens: jax.Array, mask: jax.Array, *, cfg: ModelConfig
) -> jax.Array:
    """The reward of each row's last token: tokens/mask (B, T) left-padded, head ``{w (D,), b ()}`` -> (B,) float32.

    The final norm and the head run for the last position only; the head in float32, whatever the trunk's dtype."""
    x, _ = model.hidden_states(params, cfg, tokens, mask, last_only=True)  # (B, 1, D)
    return _score(params, head, x[:, 0], cfg)


reward_scores_jit = jax.jit(reward_scores, static_argnames=("cfg",))


def shared_prefix_scores(
    params: model.Params,
    head: model.Params,
    prefix_tokens: jax.Array,
    prefix_mask: jax.Array,
    group: jax.Array,
    tokens: jax.Array,
    mask: jax.Array,
    *,
    cfg: ModelConfig,
) -> jax.Array:
    """Rows that continue shared prefixes: prefix_tokens/prefix_mask (G, P) left-padded, each run once; group (B,)
    int32 the prefix each row continues; tokens/mask (B, T) the rows' own tokens, left-padded -> (B,) float32, the
    reward of each row's last token (:func:`reward_scores` of the prefix and the row together)."""
    # the prefixes' keys and values, (G, KV, P, Dh) per layer
    _, kvs = model.hidden_states(params, cfg, prefix_tokens, prefix_mask, last_only=True)
    prefix = [(k[group], v[group]) for k, v in kvs]  # (B, KV, P, Dh) per layer
    start = prefix_mask.sum(axis=-1, dtype=jnp.int32)[group]  # (B,) each row's first own position
    x = model.extend_hidden_states(
        params, cfg, tokens, mask, start, prefix, prefix_mask[group], last_only=True
    )
    return _score(params, head, x[:, 0], cfg)


def _score(params: model.Params, head: model.Params, x: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The head on the final-normed state: x (B, D) -> (B,) float32."""
    h = model.final_norm(params, cfg, x).astype(jnp.float32)
    return h @ head["w"].astype(jnp.float32) + head["b"].astype(jnp.float32)


shared_prefix_scores_jit = jax.jit(shared_prefix_scores, static_argnames=("cfg",))


#: On the CPU, a program that runs at least this many token positions (rows times tokens, a shared prefix's
#: included) is compiled with XLA's YNNPACK fusions off (``xla_cpu_experimental_ynn_fusion_type=""``): its matmuls
#: then run as XLA's own dots, its elementwise work in XLA's fused loops. Measured on the 2-core AMD EPYC this
#: project is built on, in alternation, each program both ways (bench/RESULTS.md, "Learned reward models on the
#: engine"): GPT-2-small (d768) at 4,096 positions 1.16-1.22x faster, d256-d512 models at 8,192 1.10-1.26x and at
#: 4,096 within ±5 %; below 4,096 the fusions win (up to 1.5x at one row of 32 tokens), so smaller programs keep
#: them. Same function: the scores agree to float rounding (tested).
YNN_OFF_POSITIONS = 4096
_YNN_OFF = {"xla_cpu_experimental_ynn_fusion_type": ""}


def program_positions(key: tuple[int, ...]) -> int:
    """Token positions a program runs: ``(B, T)`` -> B T; ``(G, P, B, T)`` -> G P + B T."""
    if len(key) == 2:
        return key[0] * key[1]
    G, P, B, T = key
    return G * P + B * T


def compiler_options(platform: str, key: tuple[int, ...]) -> dict[str, str]:
    """The XLA options a reward program of batch shape ``key`` is compiled with on ``platform``
    (:data:`YNN_OFF_POSITIONS`)."""
    if platform == "cpu" and program_positions(key) >= YNN_OFF_POSITIONS:
        return dict(_YNN_OFF)
    return {}


def _compile(lowered: Any, platform: str, key: tuple[int, ...]) -> Any:
    options = compiler_options(platform, key)
    if options:
        try:
            return lowered.compile(compiler_options=options)
        except Exception:  # an XLA without this (experimental) option: its default program
            pass
    return lowered.compile()


def pooled_length(ids: Sequence[int], pooling: Pooling, pad_token_id: int | None) -> int:
    """How many tokens of ``ids`` a rule reads: the pooled token is the last of them (see the module docstring).

    ``"hf"``: up to the rightmost token that is not ``pad_token_id`` (1 when every token is the pad token, all of
    them when there is no pad token); ``"last_attended"``: all of them."""
    if pooling == "last_attended" or pad_token_id is None:
        return len(ids)
    for k in range(len(ids) - 1, -1, -1):
        if ids[k] != pad_token_id:
            return k + 1
    return min(1, len(ids))


def length_bucket(n: int, cap: int) -> int:
    """The padded length of a row of ``n`` tokens: the smallest of 16, 24, 32, 48, 64, 96, ... (powers of two and
    their midpoints) that holds it, but at most ``cap`` (and at least ``n``)."""
    b = 16
    while b < n:
        b = b * 3 // 2 if b & (b - 1) == 0 else b // 3 * 4  # 2^k -> 1.5 * 2^k -> 2^(k+1)
    return max(n, min(b, cap))


def _pow2_floor(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


@dataclass
class RewardStats:
    """Counters a test or a benchmark can read (and reset with :meth:`RewardModel.reset_stats`)."""

    compiles: int = 0  # executables built (one per batch shape)
    compile_seconds: float = 0.0
    calls: int = 0  # score_* calls
    rows: int = 0  # texts scored
    batches: int = 0  # compiled calls run
    tokens: int = 0  # tokens read (after the pooling cut and truncation)
    padded_tokens: int = 0  # the batches' B x T (and G x P of shared prefixes): tokens + padding
    truncated: int = 0  # rows longer than max_length that kept their last tokens
    shared_tokens: int = 0  # shared prefix tokens run once for their group, not per row (not in ``tokens``)
    # (B, T) of each plain executable built, (G, P, B, T) of each shared-prefix one
    compile_keys: list[tuple[int, ...]] = field(default_factory=list)


class RewardModel:
    """A reward model ready to score. Build it with :meth:`from_checkpoint`.

    Args:
        config: the trunk's :class:`ModelConfig`.
        params: parameter tree as :func:`~.checkpoint.load_checkpoint` with ``head="score"`` gives it: the trunk and
            ``score`` ``{w (D, N), b (N,) optional}``.
        tokenizer: the checkpoint's tokenizer (``None``: a :class:`ByteTokenizer`).
        labels: the head's label names, one per row of ``score.weight`` (``config.json`` ``id2label``).
        label: which row is the reward, an index or a name; required when the head has several rows.
        pooling: ``"hf"`` (default) or ``"last_attended"`` (module docstring).
        max_length: the most tokens a text is read in (default: ``config.max_positions``).
        truncation: ``"left"`` (default: keep the start token and the last tokens) or ``"error"``.
        dtype: the trunk's dtype (``np.float32``, or ``jnp.bfloat16``); the head runs in float32.
        tokens_per_batch, max_batch_size: the default rows per batch, ``tokens_per_batch / T`` at most
            ``max_batch_size`` (a power of two).
        min_shared_prefix: rows sharing at least this many leading tokens run them once (module docstring);
            ``None`` runs every row whole.
        start_token: ``"auto"`` (the tokenizer's declared start token), an id, or ``None`` (texts read bare).
        device: the jax device to run on (default ``jax.local_devices()[0]``: a device of this process).
        source: where the model came from, for error messages.
    """

    def __init__(
        self,
        config: ModelConfig,
        params: model.Params,
        tokenizer: Tokenizer | None = None,
        *,
        labels: Sequence[str] | None = None,
        label: int | str | None = None,
        pooling: Pooling = "hf",
        max_length: int | None = None,
        truncation: Truncation = "left",
        dtype: Any = np.float32,
        tokens_per_batch: int = 16384,
        max_batch_size: int = 256,
        min_shared_prefix: int | None = 32,
        start_token: int | str | None = "auto",
        device: Any = None,
        source: str = "the reward model",
    ):
        install_compile_counter()
        if pooling not in POOLING_RULES:
            raise ValueError(f"pooling must be one of {list(POOLING_RULES)}, got {pooling!r}")
        if truncation not in ("left", "error"):
            raise ValueError(f"truncation must be 'left' or 'error', got {truncation!r}")
        if "score" not in params:
            raise RewardHeadError(f"{source}: the parameters have no 'score' head (load with head='score')")
        self.config = config
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else ByteTokenizer()
        self.pooling: Pooling = pooling
        self.truncation: Truncation = truncation
        self.pad_token_id: int | None = config.pad_token_id
        self.max_length = int(max_length or config.max_positions)
        if not 1 <= self.max_length <= config.max_positions:
            raise ValueError(
                f"max_length={max_length} must be between 1 and the model's {config.max_positions} positions"
            )
        self.tokens_per_batch = int(tokens_per_batch)
        self.max_batch_size = int(max_batch_size)
        if min_shared_prefix is not None and (
            isinstance(min_shared_prefix, bool) or int(min_shared_prefix) < 1
        ):
            raise ValueError(
                f"min_shared_prefix must be a positive number of tokens or None, got {min_shared_prefix!r}"
            )
        self.min_shared_prefix = None if min_shared_prefix is None else int(min_shared_prefix)
        D, n_labels = (int(n) for n in np.shape(params["score"]["w"]))
        self.labels: tuple[str, ...] = (
            tuple(labels) if labels else tuple(f"LABEL_{i}" for i in range(n_labels))
        )
        if len(self.labels) != n_labels:
            raise RewardHeadError(f"{source}: {len(self.labels)} labels given for a head of {n_labels} rows")
        self.label = _choose_label(label, self.labels, (n_labels, D), "b" in params["score"], source)
        self.dtype = jnp.dtype(dtype)
        self.device = device if device is not None else jax.local_devices()[0]
        trunk = {k: v for k, v in params.items() if k not in ("score", "lm_head")}
        score = params["score"]
        head = {
            "w": np.asarray(score["w"], np.float32)[:, self.label],
            "b": np.asarray(score["b"], np.float32)[self.label] if "b" in score else np.float32(0.0),
        }
        cast = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype=self.dtype), trunk)
        self.params: model.Params = jax.device_put(cast, self.device)
        self.head: model.Params = jax.device_put(head, self.device)
        self.start_token: int | None = resolve_start_token(self.tokenizer, self.config.vocab_size, start_token)
        self.stats = RewardStats()
        self._executables: dict[tuple[int, int], Any] = {}

    # ------------------------------------------------------------------------------------------ construction
    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        dtype: Any = np.float32,
        pooling: Pooling = "hf",
        label: int | str | None = None,
        max_length: int | None = None,
        tokenizer: Tokenizer | Literal["auto"] | None = "auto",
        **kwargs: Any,
    ) -> RewardModel:
        """Load a Hugging Face reward model directory (``config.json``, safetensors with ``score.weight``) and its
        tokenizer (``tokenizer="auto"``; pass one to override it). Other keyword arguments go to
        :class:`RewardModel`. Raises :class:`~.checkpoint.RewardHeadError` naming the tensors found when the head
        is missing, or has several labels and ``label`` is not given."""
        cfg, params = load_checkpoint(path, dtype, head="score")
        labels = _label_names(Path(path) / CONFIG_FILE, int(params["score"]["w"].shape[1]))
        if tokenizer == "auto":
            tokenizer = load_tokenizer(path)
        return cls(
            cfg,
            params,
            tokenizer,
            labels=labels,
            label=label,
            pooling=pooling,
            max_length=max_length,
            dtype=dtype,
            source=str(path),
            **kwargs,
        )

    def reset_stats(self) -> None:
        """Zero the counters (compiled executables stay cached)."""
        self.stats = RewardStats()

    # ------------------------------------------------------------------------------------------ texts
    def render(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The conversation as the model was trained to read it: the tokenizer's chat template, generation prompt
        off (no chat template: ChatML)."""
        return self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=False)

    def encode(self, text: str) -> list[int]:
        """The ids :meth:`score_texts` reads for ``text``: special-token text as the special token, the start token
        in front unless the text begins with it."""
        ids = [int(t) for t in self.tokenizer.encode(text, allowed_special="all")]
        if self.start_token is None or ids[:1] == [self.start_token]:
            return ids
        return [self.start_token, *ids]

    # ------------------------------------------------------------------------------------------ scoring
    def score_texts(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """The reward of each text, float32 (n,). Texts are read as :meth:`encode` reads them."""
        if isinstance(texts, str):
            raise TypeError("score_texts takes a sequence of texts; wrap a single text in a list")
        return self.score_ids([self.encode(t) for t in texts], batch_size=batch_size)

    def score_conversations(
        self, conversations: Sequence[Sequence[Mapping[str, Any]]], *, batch_size: int | None = None
    ) -> np.ndarray:
        """The reward of each conversation (a list of ``{"role", "content"}`` messages), float32 (n,): each is
        :meth:`render`-ed and scored as a text."""
        return self.score_texts([self.render(c) for c in conversations], batch_size=batch_size)

    def score_ids(self, ids: Sequence[Sequence[int]], *, batch_size: int | None = None) -> np.ndarray:
        """The reward of each id sequence, read exactly as given (no start token added), float32 (n,)."""
        if batch_size is not None and (isinstance(batch_size, bool) or int(batch_size) < 1):
            raise ValueError(f"batch_size must be a positive number of rows or None, got {batch_size!r}")
        rows = [self._fed(i, seq) for i, seq in enumerate(ids)]
        out = np.zeros(len(rows), np.float32)
        self.stats.calls += 1
        self.stats.rows += len(rows)
        groups, alone = _shared_prefixes(rows, self.min_shared_prefix)
        pad, put = self.tokenizer.pad_token, partial(jax.device_put, device=self.device)
        pending = []  # (row indices, scores on the device): every batch is dispatched before any is collected
        for B, T, idx in self._plan(rows, alone, batch_size):
            chunk = [rows[i] for i in idx]
            chunk += [chunk[-1]] * (B - len(idx))  # copies fill the batch (their scores are dropped)
            tokens, mask = _left_pad(chunk, pad, T)
            pending.append((idx, self._executable((B, T))(self.params, self.head, put(tokens), put(mask))))
            self.stats.batches += 1
            self.stats.padded_tokens += B * T
        for G, P, B, T, members in self._plan_shared(rows, groups, batch_size):
            # members: (prefix length, row indices) of each group; rows are fed without their prefix
            prefixes = [rows[m[0]][:n] for n, m in members]
            prefixes += [prefixes[-1]] * (G - len(prefixes))
            idx = [i for _, m in members for i in m]
            group = [g for g, (_, m) in enumerate(members) for _ in m]
            own = [rows[i][n:] for n, m in members for i in m]
            own += [own[-1]] * (B - len(idx))
            group += [group[-1]] * (B - len(idx))
            ptok, pmask = _left_pad(prefixes, pad, P)
            tokens, mask = _left_pad(own, pad, T)
            args = (put(ptok), put(pmask), put(np.asarray(group, np.int32)), put(tokens), put(mask))
            pending.append((idx, self._executable((G, P, B, T))(self.params, self.head, *args)))
            self.stats.batches += 1
            self.stats.padded_tokens += G * P + B * T
            saved = sum(n * (len(m) - 1) for n, m in members)
            self.stats.shared_tokens += saved
            self.stats.tokens -= saved
        for idx, scores in pending:
            out[idx] = np.asarray(scores)[: len(idx)]
        return out

    def _fed(self, i: int, seq: Sequence[int]) -> list[int]:
        """Row ``i`` as the program reads it: checked, cut after the pooled token, fitted to ``max_length``."""
        row = [int(t) for t in seq]
        if not row:
            raise ValueError(f"sequence {i} is empty: a reward model needs at least one token to pool")
        low, high = min(row), max(row)
        if low < 0 or high >= self.config.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"sequence {i} has token id {bad}, outside the model's vocabulary 0..{self.config.vocab_size - 1}"
            )
        row = row[: pooled_length(row, self.pooling, self.pad_token_id)]
        if len(row) > self.max_length:
            if self.truncation == "error":
                raise ValueError(
                    f"sequence {i} has {len(row)} tokens up to its pooled token, more than max_length="
                    f"{self.max_length}; shorten it, raise max_length, or pass truncation='left' to keep its last "
                    "tokens"
                )
            keep = 1 if self.start_token is not None and row[:1] == [self.start_token] else 0
            row = row[:keep] + row[len(row) - (self.max_length - keep) :]
            self.stats.truncated += 1
        self.stats.tokens += len(row)
        return row

    def _plan(
        self, rows: Sequence[Sequence[int]], indices: Sequence[int], batch_size: int | None
    ) -> list[tuple[int, int, list[int]]]:
        """Batches of the rows at ``indices`` as ``(B, T, row indices)``: sorted by length, grouped by length
        bucket, ``B`` at a time (a last, partial batch: the next power of two)."""
        buckets: dict[int, list[int]] = {}
        for i in sorted(indices, key=lambda i: len(rows[i])):
            buckets.setdefault(length_bucket(len(rows[i]), self.max_length), []).append(i)
        plan = []
        for T, idx in buckets.items():
            full = int(batch_size) if batch_size is not None else self._auto_rows(T)
            for start in range(0, len(idx), full):
                part = idx[start : start + full]
                plan.append((_rows_bucket(len(part), full), T, part))
        return plan

    def _plan_shared(
        self, rows: Sequence[Sequence[int]], groups: Sequence[tuple[int, list[int]]], batch_size: int | None
    ) -> list[tuple[int, int, int, int, list[tuple[int, list[int]]]]]:
        """Batches of groups of rows that share a prefix, as ``(G, P, B, T, [(prefix length, row indices)])``:
        groups keyed by the length buckets of their prefix (``P``) and of their longest own part (``T``), packed
        ``B`` rows at a time (a group larger than a batch is split); ``G`` prefixes and ``B`` rows each padded to
        a power of two."""
        keyed: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}
        for n, members in groups:
            longest = max(len(rows[i]) for i in members) - n
            key = (length_bucket(n, self.max_length), length_bucket(longest, self.max_length))
            keyed.setdefault(key, []).append((n, members))
        plan = []
        for (P, T), found in sorted(keyed.items()):
            full = int(batch_size) if batch_size is not None else self._auto_rows(P + T)
            batch: list[tuple[int, list[int]]] = []
            size = 0
            for n, members in found:
                for start in range(0, len(members), full):
                    part = members[start : start + full]
                    if size + len(part) > full:
                        plan.append((_pow2_ceil(len(batch)), P, _rows_bucket(size, full), T, batch))
                        batch, size = [], 0
                    batch.append((n, part))
                    size += len(part)
            if batch:
                plan.append((_pow2_ceil(len(batch)), P, _rows_bucket(size, full), T, batch))
        return plan

    def _auto_rows(self, T: int) -> int:
        return _pow2_floor(max(1, min(self.max_batch_size, self.tokens_per_batch // T)))

    def _executable(self, key: tuple[int, ...]) -> Any:
        """The compiled program of a batch shape: ``(B, T)`` plain, ``(G, P, B, T)`` shared prefixes."""
        exe = self._executables.get(key)
        if exe is None:
            t0 = time.perf_counter()
            ids = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)  # noqa: E731
            flags = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.bool_)  # noqa: E731
            if len(key) == 2:
                B, T = key
                lowered = reward_scores_jit.lower(
                    self.params, self.head, ids(B, T), flags(B, T), cfg=self.config
                )
            else:
                G, P, B, T = key
                lowered = shared_prefix_scores_jit.lower(
                    self.params,
                    self.head,
                    ids(G, P),
                    flags(G, P),
                    ids(B),
                    ids(B, T),
                    flags(B, T),
                    cfg=self.config,
                )
            exe = _compile(lowered, self.device.platform, key)
            self.stats.compile_seconds += time.perf_counter() - t0
            self.stats.compiles += 1
            self.stats.compile_keys.append(key)
            self._executables[key] = exe
        return exe

    def __repr__(self) -> str:
        c = self.config
        return (
            f"RewardModel({c.model_type}, L={c.n_layers}, D={c.d_model}, label={self.labels[self.label]!r}, "
            f"pooling={self.pooling!r}, max_length={self.max_length}, dtype={self.dtype.name}, "
            f"start_token={self.start_token})"
        )


def _rows_bucket(n: int, full: int) -> int:
    """Rows of a batch holding ``n``: ``full`` when full, else the next power of two (at most ``full``)."""
    return full if n == full else min(full, _pow2_ceil(n))


def _shared_prefixes(
    rows: Sequence[Sequence[int]], minimum: int | None
) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """Rows that begin with the same ``minimum`` tokens or more, as ``(shared length, row indices)`` groups of two
    rows or more (each row keeps at least one token of its own), and the indices of the other rows.

    Rows are sorted (lexicographically), so rows with a common beginning are neighbours; a group grows while its
    first row and the next share ``minimum`` tokens, its shared length the least such overlap."""
    if minimum is None:
        return [], list(range(len(rows)))
    order = sorted(range(len(rows)), key=lambda i: rows[i])
    groups, alone = [], []
    k = 0
    while k < len(order):
        first = rows[order[k]]
        members, shared = [order[k]], len(first) - 1
        while k + len(members) < len(order):
            other = rows[order[k + len(members)]]
            overlap = min(shared, _common_length(first, other), len(other) - 1)
            if overlap < minimum:
                break
            members.append(order[k + len(members)])
            shared = overlap
        if len(members) > 1:
            groups.append((shared, members))
        else:
            alone.append(members[0])
        k += len(members)
    return groups, alone


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):  # noqa: B905 - rows of different lengths
        if x != y:
            break
        n += 1
    return n


def _left_pad(rows: Sequence[Sequence[int]], pad: int, T: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows -> tokens int32 (B, T), mask bool (B, T), each row at the right end (the engine pads on the left)."""
    tokens = np.full((len(rows), T), pad, np.int32)
    mask = np.zeros((len(rows), T), bool)
    for k, r in enumerate(rows):
        tokens[k, T - len(r) :] = r
        mask[k, T - len(r) :] = True
    return tokens, mask


def _label_names(config_file: Path, n: int) -> tuple[str, ...]:
    """``id2label`` of ``config.json`` in id order, checked against the ``n`` rows of ``score.weight``."""
    try:
        id2label = json.loads(config_file.read_text(encoding="utf-8")).get("id2label") or {}
    except (OSError, ValueError, AttributeError):
        id2label = {}
    if not isinstance(id2label, dict) or not id2label:
        return tuple(f"LABEL_{i}" for i in range(n))
    if len(id2label) != n:
        raise RewardHeadError(
            f"{config_file}: id2label has {len(id2label)} labels but tensor 'score.weight' has {n} rows"
        )
    try:
        return tuple(str(id2label.get(str(i), id2label.get(i))) for i in range(n))  # type: ignore[call-overload]
    except TypeError:
        return tuple(f"LABEL_{i}" for i in range(n))


def _choose_label(
    label: int | str | None, names: tuple[str, ...], shape: tuple[int, int], bias: bool, source: str
) -> int:
    """The row of ``score.weight`` (shape (N, D) as the checkpoint stores it) that is the reward."""
    n = shape[0]
    head = f"tensor 'score.weight' of shape {tuple(shape)}" + (" (and 'score.bias')" if bias else "")
    if label is None:
        if n == 1:
            return 0
        raise RewardHeadError(
            f"{source}: {head} has {n} labels {list(names)}; a reward is one of them: pass label=<index 0..{n - 1} "
            f"or name>, e.g. label={n - 1} or label={names[-1]!r}"
        )
    if isinstance(label, str):
        if label not in names:
            raise RewardHeadError(
                f"{source}: label={label!r} is not one of the head's labels {list(names)} ({head})"
            )
        return names.index(label)
    if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or not 0 <= int(label) < n:
        raise RewardHeadError(
            f"{source}: label={label!r} is not an index 0..{n - 1} or a name of {list(names)} ({head})"
        )
    return int(label)


__all__ = ["POOLING_RULES", "RewardModel", "RewardStats", "length_bucket", "pooled_length", "reward_scores"]
