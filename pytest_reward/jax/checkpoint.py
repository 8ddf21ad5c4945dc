"""Hugging Face model directories <-> our parameter tree. Boring on purpose: every tensor is named and checked.

A model directory holds ``config.json`` and either ``model.safetensors`` or a sharded
``model.safetensors.index.json`` plus its shards. :func:`load_checkpoint` maps each checkpoint tensor onto the
tree of :func:`pytest_reward.jax.model.init_params`, checking its shape against the one the config implies;
:func:`save_checkpoint` writes the same layout back so ``transformers`` can load it.

Name mapping (``{i}`` = layer), weights stored by transformers as ``(out, in)`` are transposed to ``(in, out)``:

=========================================  =============================  ==========================================
GPT-2 (``transformer.`` prefix optional)   Llama / Qwen2 / Mistral        ours
=========================================  =============================  ==========================================
``wte.weight`` (V, D)                      ``model.embed_tokens.weight``  ``embed`` (V, D)
``wpe.weight`` (T, D)                      -                              ``pos_embed`` (T, D)
``h.{i}.ln_1.weight/bias``                 ``…input_layernorm.weight``    ``layers[i].attn_norm.scale/bias``
``h.{i}.attn.c_attn.weight`` (D, 3D)       ``…self_attn.{q,k,v}_proj``    ``layers[i].qkv.w`` (D, (H+2KV) Dh)
``h.{i}.attn.c_proj.weight`` (D, D)        ``…self_attn.o_proj``          ``layers[i].out.w`` (H Dh, D)
``h.{i}.ln_2.weight/bias``                 ``…post_attention_layernorm``  ``layers[i].mlp_norm``
``h.{i}.mlp.c_fc.weight`` (D, F)           ``…mlp.{gate,up}_proj``        ``layers[i].up.w`` (D, F) / (D, 2F)
``h.{i}.mlp.c_proj.weight`` (F, D)         ``…mlp.down_proj``             ``layers[i].down.w`` (F, D)
``ln_f.weight/bias``                       ``model.norm.weight``          ``final_norm``
``lm_head.weight`` (V, D), untied only     ``lm_head.weight``             ``lm_head.w`` (D, V)
``score.weight`` (N, D), ``head="score"``  ``score.weight`` (N, D)        ``score.w`` (D, N)
``score.bias`` (N,) when present           ``score.bias`` (N,)            ``score.b`` (N,)
=========================================  =============================  ==========================================

Heads. ``head="lm"`` (default) reads a causal language model: the unembedding is ``lm_head.weight`` unless the config
ties it to the embedding. ``head="score"`` reads a reward model instead, the scalar head transformers puts on the same
trunk: ``GPT2ForSequenceClassification`` and the ``GenericForSequenceClassification`` of Llama and Qwen2
(``modeling_layers.py``: ``nn.Linear(hidden_size, num_labels, bias=False)``), or ``GenericForTokenClassification``
(the same ``score`` with a bias, as verl trains its reward models); an ``lm_head.weight`` beside it is not read.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .config import ConfigError, ModelConfig

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# Buffers some checkpoints carry that are not parameters (causal-mask constants, RoPE tables).
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")


Head = Literal["lm", "score"]

# A layer's tensor (GPT-2 ``h.{i}.``, Llama ``layers.{i}.``): not listed when an error names the other tensors.
_LAYER_KEY = re.compile(r"(^|\.)(h|layers)\.\d+\.")


class CheckpointError(ValueError):
    """A model directory we cannot load; the message names the file, the tensor and the expected shape."""


class RewardHeadError(CheckpointError):
    """A reward model directory without a usable scalar head (``score.weight``): the message names the tensors the
    checkpoint has outside its layers, and what to pass when the head has several labels."""


@dataclass(frozen=True)
class _Entry:
    """One checkpoint tensor: where it lands in our tree and how it is transformed.

    ``parts`` lists (hf_key, expected_hf_shape) pieces concatenated along the last axis after ``to_ours``.
    """

    path: tuple[Any, ...]
    parts: tuple[tuple[str, tuple[int, ...]], ...]
    transpose: bool


def _entries(cfg: ModelConfig, prefix: str, head: Head = "lm") -> list[_Entry]:
    """Every tensor the config requires, with its checkpoint name(s) and shape(s); the ``score`` head's are
    checked by :func:`_score_head`, its number of labels coming from the checkpoint."""
    D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    Hd, KVd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out: list[_Entry] = []

    def add(path: tuple[Any, ...], key: str | list[tuple[str, tuple[int, ...]]], shape=(), transpose=False):
        parts = tuple(key) if isinstance(key, list) else ((key, tuple(shape)),)
        out.append(_Entry(path, parts, transpose))

    if cfg.family == "gpt2":
        p = prefix
        add(("embed",), f"{p}wte.weight", (V, D))
        add(("pos_embed",), f"{p}wpe.weight", (cfg.max_positions, D))
        for i in range(cfg.n_layers):
            h, L = f"{p}h.{i}.", ("layers", i)
            for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
                add((*L, ours, "scale"), f"{h}{theirs}.weight", (D,))
                add((*L, ours, "bias"), f"{h}{theirs}.bias", (D,))
            add((*L, "qkv", "w"), f"{h}attn.c_attn.weight", (D, 3 * D))
            add((*L, "qkv", "b"), f"{h}attn.c_attn.bias", (3 * D,))
            add((*L, "out", "w"), f"{h}attn.c_proj.weight", (D, D))
            add((*L, "out", "b"), f"{h}attn.c_proj.bias", (D,))
            add((*L, "up", "w"), f"{h}mlp.c_fc.weight", (D, F))
            add((*L, "up", "b"), f"{h}mlp.c_fc.bias", (F,))
            add((*L, "down", "w"), f"{h}mlp.c_proj.weight", (F, D))
            add((*L, "down", "b"), f"{h}mlp.c_proj.bias", (D,))
        add(("final_norm", "scale"), f"{p}ln_f.weight", (D,))
        add(("final_norm", "bias"), f"{p}ln_f.bias", (D,))
    else:
        add(("embed",), "model.embed_tokens.weight", (V, D))
        for i in range(cfg.n_layers):
            h, L = f"model.layers.{i}.", ("layers", i)
            a, m = f"{h}self_attn.", f"{h}mlp."
            add((*L, "attn_norm", "scale"), f"{h}input_layernorm.weight", (D,))
            add((*L, "mlp_norm", "scale"), f"{h}post_attention_layernorm.weight", (D,))
            qkv = [
                (f"{a}q_proj.weight", (Hd, D)),
                (f"{a}k_proj.weight", (KVd, D)),
                (f"{a}v_proj.weight", (KVd, D)),
            ]
            add((*L, "qkv", "w"), qkv, transpose=True)
            if cfg.qkv_bias:
                add(
                    (*L, "qkv", "b"),
                    [(f"{a}q_proj.bias", (Hd,)), (f"{a}k_proj.bias", (KVd,)), (f"{a}v_proj.bias", (KVd,))],
                )
            add((*L, "out", "w"), f"{a}o_proj.weight", (D, Hd), transpose=True)
            if cfg.out_bias:
                add((*L, "out", "b"), f"{a}o_proj.bias", (D,))
            add(
                (*L, "up", "w"),
                [(f"{m}gate_proj.weight", (F, D)), (f"{m}up_proj.weight", (F, D))],
                transpose=True,
            )
            add((*L, "down", "w"), f"{m}down_proj.weight", (D, F), transpose=True)
            if cfg.mlp_bias:
                add((*L, "up", "b"), [(f"{m}gate_proj.bias", (F,)), (f"{m}up_proj.bias", (F,))])
                add((*L, "down", "b"), f"{m}down_proj.bias", (D,))
        add(("final_norm", "scale"), "model.norm.weight", (D,))
    if head == "lm" and not cfg.tie_embeddings:
        add(("lm_head", "w"), "lm_head.weight", (V, D), transpose=True)
    return out


# ---------------------------------------------------------------------------------------------- reading
def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


class _Shards:
    """Lazy tensor access over one or several safetensors files."""

    def __init__(self, directory: Path):
        index = directory / INDEX_FILE
        single = directory / WEIGHTS_FILE
        if index.exists():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise CheckpointError(f"{index}: not a valid safetensors index ({exc!r})") from None
            self.location = {k: directory / v for k, v in weight_map.items()}
        elif single.exists():
            self.location = dict.fromkeys(self._keys(single), single)
        else:
            hint = " (only safetensors is supported: re-save with save_pretrained(safe_serialization=True))"
            if not any(directory.glob("*.bin")):
                hint = ""
            raise CheckpointError(f"{directory}: no {WEIGHTS_FILE} or {INDEX_FILE}{hint}")
        self._handles: dict[Path, Any] = {}

    @staticmethod
    def _keys(path: Path) -> list[str]:
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="np") as f:
                return list(f.keys())
        except Exception as exc:
            raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None

    def file_of(self, key: str) -> Path | None:
        return self.location.get(key)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._handle(self.location[key]).get_slice(key).get_shape())

    def get(self, key: str) -> np.ndarray:
        path = self.location[key]
        handle = self._handle(path)
        if handle.get_slice(key).get_dtype() == "BF16":  # numpy has no bfloat16: read the raw bytes
            import ml_dtypes

            header, start = _read_header(path)
            lo, hi = header[key]["data_offsets"]
            raw = np.fromfile(path, dtype=np.uint16, count=(hi - lo) // 2, offset=start + lo)
            return raw.view(ml_dtypes.bfloat16).reshape(header[key]["shape"])
        return handle.get_tensor(key)

    def _handle(self, path: Path) -> Any:
        if path not in self._handles:
            from safetensors import safe_open

            if not path.exists():
                raise CheckpointError(f"{path}: shard listed in {INDEX_FILE} does not exist")
            try:
                self._handles[path] = safe_open(str(path), framework="np")
            except Exception as exc:
                raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
        return self._handles[path]


def load_checkpoint(
    path: str | Path, dtype: Any = np.float32, *, head: Head = "lm"
) -> tuple[ModelConfig, dict[str, Any]]:
    """Load ``config.json`` and the safetensors weights of a Hugging Face model directory.

    Returns ``(config, params)`` where params is a tree of numpy arrays (``dtype``, default float32) laid out as
    :func:`pytest_reward.jax.model.init_params`. Raises :class:`CheckpointError` (or :class:`ConfigError`) naming
    the file, the tensor key and the expected shape when something does not fit.

    ``head="score"`` reads a reward model (see the module docstring): the tree has ``score`` ``{w (D, N), b (N,)
    when the checkpoint has a bias}`` and no ``lm_head``; a checkpoint without ``score.weight`` raises
    :class:`RewardHeadError`.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a model directory (expected config.json + {WEIGHTS_FILE})")
    cfg = ModelConfig.from_json_file(directory / CONFIG_FILE)
    shards = _Shards(directory)
    prefix = ""
    if cfg.family == "gpt2" and "transformer.wte.weight" in shards.location:
        prefix = "transformer."

    params: dict[str, Any] = {"layers": [{} for _ in range(cfg.n_layers)]}
    used: set[str] = set()
    for entry in _entries(cfg, prefix, head):
        pieces = []
        for key, expected in entry.parts:
            file = shards.file_of(key)
            if file is None:
                where = ", ".join(sorted({p.name for p in shards.location.values()})) or "the checkpoint"
                raise CheckpointError(
                    f"{directory}: tensor {key!r} with expected shape {expected} is missing from {where} "
                    f"(config.json says model_type={cfg.model_type!r}, {cfg.n_layers} layers){_reward_hint(shards)}"
                )
            actual = shards.shape(key)
            if actual != expected:
                raise CheckpointError(
                    f"{file}: tensor {key!r} has shape {actual}, expected {expected} from {CONFIG_FILE}"
                )
            array = shards.get(key).astype(dtype)
            pieces.append(array.T if entry.transpose else array)
            used.add(key)
        value = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=-1)
        node: Any = params
        for step in entry.path[:-1]:  # strings are dict keys (created on the way), ints index the layer list
            node = node.setdefault(step, {}) if isinstance(step, str) else node[step]
        node[entry.path[-1]] = np.ascontiguousarray(value)

    if head == "score":
        params["score"] = _score_head(directory, cfg, shards, dtype)
        used.update(k for k in ("score.weight", "score.bias", "lm_head.weight") if k in shards.location)

    leftovers = sorted(
        k
        for k in shards.location
        if k not in used
        and not k.endswith(_IGNORED_SUFFIXES)
        and not (k == "lm_head.weight" and cfg.tie_embeddings)
    )
    if leftovers:
        raise CheckpointError(
            f"{directory}: {len(leftovers)} tensor(s) not used by a {cfg.model_type} model with {cfg.n_layers} "
            f"layers: {leftovers[:5]}{' ...' if len(leftovers) > 5 else ''} (does config.json match the weights?)"
            f"{_reward_hint(shards) if head == 'lm' else ''}"
        )
    return cfg, params


def _reward_hint(shards: _Shards) -> str:
    """A pointer to the reward model API when a checkpoint read as a language model has a reward head."""
    if "score.weight" not in shards.location:
        return ""
    return (
        ". It has a reward head ('score.weight', a *ForSequenceClassification checkpoint): load it with "
        "pytest_reward.jax.RewardModel.from_checkpoint"
    )


def _score_head(directory: Path, cfg: ModelConfig, shards: _Shards, dtype: Any) -> dict[str, np.ndarray]:
    """The reward head ``{w (D, N), b (N,) if present}`` from ``score.weight`` (N, D) and ``score.bias`` (N,)."""
    D = cfg.d_model
    if shards.file_of("score.weight") is None:
        others = sorted(k for k in shards.location if not _LAYER_KEY.search(k))
        hint = ""
        if "lm_head.weight" in shards.location or cfg.tie_embeddings:
            hint = (
                " This looks like a causal language model: a reward model is saved by "
                "AutoModelForSequenceClassification (or AutoModelForTokenClassification) with its trained head."
            )
        raise RewardHeadError(
            f"{directory}: no reward head: expected tensor 'score.weight' of shape (num_labels, {D}), found only "
            f"{others} outside the {cfg.n_layers} layers.{hint}"
        )
    w_shape = shards.shape("score.weight")
    if len(w_shape) != 2 or w_shape[1] != D or w_shape[0] < 1:
        raise RewardHeadError(
            f"{shards.file_of('score.weight')}: tensor 'score.weight' has shape {w_shape}, expected (num_labels, {D})"
        )
    head = {"w": np.ascontiguousarray(shards.get("score.weight").astype(dtype).T)}  # (D, N)
    if shards.file_of("score.bias") is not None:
        b_shape = shards.shape("score.bias")
        if b_shape != w_shape[:1]:
            raise RewardHeadError(
                f"{shards.file_of('score.bias')}: tensor 'score.bias' has shape {b_shape}, expected {w_shape[:1]} "
                "(one per row of 'score.weight')"
            )
        head["b"] = shards.get("score.bias").astype(dtype)
    return head


# ---------------------------------------------------------------------------------------------- writing
def _hf_tensors(cfg: ModelConfig, params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Our tree -> {hf_key: array}, splitting fused matrices and transposing back to (out, in)."""
    tensors: dict[str, np.ndarray] = {}
    prefix = "transformer." if cfg.family == "gpt2" else ""
    for entry in _entries(cfg, prefix):
        node: Any = params
        for step in entry.path:
            node = node[step]
        array = (
            np.asarray(node, dtype=np.float32) if np.asarray(node).dtype != np.float32 else np.asarray(node)
        )
        widths = [shape[0] if entry.transpose else shape[-1] for _, shape in entry.parts]
        pieces = np.split(array, np.cumsum(widths)[:-1], axis=-1) if len(widths) > 1 else [array]
        for (key, shape), piece in zip(entry.parts, pieces, strict=True):
            piece = piece.T if entry.transpose else piece
            if piece.shape != shape:
                raise CheckpointError(
                    f"params at {entry.path}: shape {piece.shape} does not give {key!r} {shape}"
                )
            tensors[key] = np.ascontiguousarray(piece)
    return tensors


def save_checkpoint(
    path: str | Path,
    cfg: ModelConfig,
    params: dict[str, Any],
    *,
    max_shard_bytes: int | None = None,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """Write ``config.json`` and float32 safetensors weights that ``transformers`` can load.

    With ``max_shard_bytes`` the weights are split into ``model-0000i-of-0000n.safetensors`` files plus
    ``model.safetensors.index.json``. Returns the directory.
    """
    from safetensors.numpy import save_file

    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = _hf_tensors(cfg, params)
    hf = cfg.to_hf_dict() | (extra_config or {})
    (directory / CONFIG_FILE).write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for stale in [
        directory / WEIGHTS_FILE,
        directory / INDEX_FILE,
        *directory.glob("model-*-of-*.safetensors"),
    ]:
        stale.unlink(missing_ok=True)
    metadata = {"format": "pt"}
    total = sum(t.nbytes for t in tensors.values())
    if max_shard_bytes is None or total <= max_shard_bytes:
        save_file(tensors, str(directory / WEIGHTS_FILE), metadata=metadata)
        return directory
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for key, t in tensors.items():
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = t
        size += t.nbytes
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / name), metadata=metadata)
        weight_map.update(dict.fromkeys(shard, name))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return directory


__all__ = ["CheckpointError", "ConfigError", "RewardHeadError", "load_checkpoint", "save_checkpoint"]
