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
(``jax.devices()[0]`` unless ``device`` is given).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from . import model
from .checkpoint import CONFIG_FILE, RewardHeadError, load_checkpoint
from .compilation import install_compile_counter
from .config import ModelConfig
from .tokenizer import ByteTokenizer, Tokenizer, load_tokenizer

Pooling = Literal["hf", "last_attended"]
Truncation = Literal["left", "error"]
POOLING_RULES: tuple[str, ...] = ("hf", "last_attended")


def reward_scores(
    params: model.Params, head: model.Params, tokens: jax.Array, mask: jax.Array, *, cfg: ModelConfig
) -> jax.Array:
    """The reward of each row's last token: tokens/mask (B, T) left-padded, head ``{w (D,), b ()}`` -> (B,) float32.

    The final norm and the head run for the last position only; the head in float32, whatever the trunk's dtype."""
    x, _ = model.hidden_states(params, cfg, tokens, mask, last_only=True)  # (B, 1, D)
    h = model.final_norm(params, cfg, x[:, 0]).astype(jnp.float32)  # (B, D)
    return h @ head["w"].astype(jnp.float32) + head["b"].astype(jnp.float32)  # (B,)


reward_scores_jit = jax.jit(reward_scores, static_argnames=("cfg",))


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

    compiles: int = 0  # executables built (one per (B, T) bucket)
    compile_seconds: float = 0.0
    calls: int = 0  # score_* calls
    rows: int = 0  # texts scored
    batches: int = 0  # compiled calls run
    tokens: int = 0  # tokens read (after the pooling cut and truncation)
    padded_tokens: int = 0  # B x T summed over batches: tokens + padding
    truncated: int = 0  # rows longer than max_length that kept their last tokens
    compile_keys: list[tuple[int, int]] = field(default_factory=list)  # (B, T) of each executable built


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
        start_token: ``"auto"`` (the tokenizer's declared start token), an id, or ``None`` (texts read bare).
        device: the jax device to run on (default ``jax.devices()[0]``).
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
        n_labels = int(np.shape(params["score"]["w"])[1])
        self.labels: tuple[str, ...] = (
            tuple(labels) if labels else tuple(f"LABEL_{i}" for i in range(n_labels))
        )
        self.label = _choose_label(label, self.labels, n_labels, np.shape(params["score"]["w"]), source)
        self.dtype = jnp.dtype(dtype)
        self.device = device if device is not None else jax.devices()[0]
        trunk = {k: v for k, v in params.items() if k not in ("score", "lm_head")}
        score = params["score"]
        head = {
            "w": np.asarray(score["w"], np.float32)[:, self.label],
            "b": np.asarray(score["b"], np.float32)[self.label] if "b" in score else np.float32(0.0),
        }
        cast = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype=self.dtype), trunk)
        self.params: model.Params = jax.device_put(cast, self.device)
        self.head: model.Params = jax.device_put(head, self.device)
        self.start_token: int | None = self._start_token(start_token)
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

    def _start_token(self, value: int | str | None) -> int | None:
        if value == "auto":
            value = getattr(self.tokenizer, "start_token", None)
        elif isinstance(value, str):
            ids = self.tokenizer.encode(value, allowed_special="all")
            if len(ids) != 1:
                raise ValueError(
                    f"start_token={value!r} is not one token of the tokenizer (it encodes to {ids})"
                )
            value = ids[0]
        if value is None:
            return None
        if isinstance(value, bool) or not 0 <= int(value) < self.config.vocab_size:
            raise ValueError(f"start_token={value!r} is not an id of the model's vocabulary")
        return int(value)

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
        pending = []
        for B, T, idx in self._plan([len(r) for r in rows], batch_size):
            chunk = [rows[i] for i in idx] + [rows[idx[-1]]] * (
                B - len(idx)
            )  # copies fill the batch (dropped)
            tokens, mask = _left_pad(chunk, self.tokenizer.pad_token, T)
            args = (jax.device_put(tokens, self.device), jax.device_put(mask, self.device))
            pending.append((idx, self._executable(B, T)(self.params, self.head, *args)))  # async dispatch
            self.stats.batches += 1
            self.stats.padded_tokens += B * T
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

    def _plan(self, lengths: Sequence[int], batch_size: int | None) -> list[tuple[int, int, list[int]]]:
        """Batches as ``(B, T, row indices)``: rows sorted by length, grouped by length bucket, ``B`` at a time."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        groups: dict[int, list[int]] = {}
        for i in order:
            groups.setdefault(length_bucket(lengths[i], self.max_length), []).append(i)
        plan = []
        for T, idx in groups.items():
            full = int(batch_size) if batch_size is not None else self._auto_rows(T)
            for start in range(0, len(idx), full):
                part = idx[start : start + full]
                plan.append((full if len(part) == full else min(full, _pow2_ceil(len(part))), T, part))
        return plan

    def _auto_rows(self, T: int) -> int:
        return _pow2_floor(max(1, min(self.max_batch_size, self.tokens_per_batch // T)))

    def _executable(self, B: int, T: int) -> Any:
        exe = self._executables.get((B, T))
        if exe is None:
            t0 = time.perf_counter()
            shape = jax.ShapeDtypeStruct((B, T), jnp.int32)
            flags = jax.ShapeDtypeStruct((B, T), jnp.bool_)
            exe = reward_scores_jit.lower(self.params, self.head, shape, flags, cfg=self.config).compile()
            self.stats.compile_seconds += time.perf_counter() - t0
            self.stats.compiles += 1
            self.stats.compile_keys.append((B, T))
            self._executables[(B, T)] = exe
        return exe

    def __repr__(self) -> str:
        c = self.config
        return (
            f"RewardModel({c.model_type}, L={c.n_layers}, D={c.d_model}, label={self.labels[self.label]!r}, "
            f"pooling={self.pooling!r}, max_length={self.max_length}, dtype={self.dtype.name}, "
            f"start_token={self.start_token})"
        )


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
    label: int | str | None, names: tuple[str, ...], n: int, shape: tuple[int, ...], source: str
) -> int:
    """The row of ``score.weight`` that is the reward."""
    head = f"tensor 'score.weight' of shape {tuple(shape)}"
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
