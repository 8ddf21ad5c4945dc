"""A learned reward model as a reward function: ``rm = reward_model("tiny-sum-rm")``.

A reward model is a ``*ForSequenceClassification`` checkpoint (GPT-2, Llama, Qwen2) whose scalar head scores a
conversation; the JAX engine runs it (:class:`pytest_reward.jax.RewardModel`). :func:`reward_model` wraps one as a
batch-mode ``@reward_function``, so the plugin collects, scores, gates, compares, probes and reports it like any other
reward function, and scores it in chunks (one forward per chunk, not per sample): file items stream a file through
it chunk by chunk, sample items are scored ahead in chunks (``BatchScheduler``). A chunk holds the function's
``batch_size`` samples (default ``--reward-batch-size``); the engine pads each chunk to a length bucket so its
compiled programs are reused.

The calling convention is the plugin's (:mod:`pytest_reward.reward.call`): the function gets each sample's
conversation, its final assistant turn the response to score, and returns one ``EvaluateResult`` per sample whose
score is the model's raw scalar (an unbounded logit: gate it with ``mean=``/``threshold=`` on the model's own scale,
or compare responses with ``pair_accuracy=``); a non-finite score is an invalid result naming the sample's index in
its chunk.

This module imports nothing heavy (the plugin finds shipped models with :func:`locate_model` when pytest starts).
Loading is lazy and shared: defining the function checks only that the model directory exists (no jax import, so
discovery in the pytest-xdist controller stays light); the first call loads the checkpoint through the engine, once
per process for each (path, dtype, pooling, label, max_length), whichever functions ask for it.

A reward model is not deployable (:attr:`ModelReward.deploy_refusal`): a deploy bundle ships a reward function's
code, never model weights.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..reward.models import EvaluateResult

__all__ = [
    "ModelReward",
    "configure_engine",
    "engine_settings",
    "locate_model",
    "model_of",
    "reward_model",
    "shipped_models",
    "use_compilation_cache",
]

SHIPPED_MODELS = Path(__file__).resolve().parents[1] / "jax" / "models"
"""The example models shipped inside the package (``tiny-adder``, ``tiny-sum-rm``)."""

POOLINGS = ("hf", "last_attended")
DTYPES = ("float32", "bfloat16", "float16")


#: The Hugging Face architectures whose checkpoints score (a head of labels) rather than generate.
_SCORING_HEADS = ("ForSequenceClassification", "ForTokenClassification")


def shipped_models(kind: Literal["lm", "reward"] | None = None) -> list[str]:
    """Names of the shipped example models; ``kind`` keeps the language models (``--reward-model``) or the reward
    models (``reward_model(...)``), by the ``architectures`` their ``config.json`` declares."""
    if not SHIPPED_MODELS.is_dir():
        return []
    names = []
    for p in sorted(SHIPPED_MODELS.iterdir()):
        config = p / "config.json"
        if not config.is_file():
            continue
        if kind is not None:
            try:
                architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
            except (OSError, ValueError):
                continue
            scores = any(str(a).endswith(_SCORING_HEADS) for a in architectures)
            if scores != (kind == "reward"):
                continue
        names.append(p.name)
    return names


def locate_model(name: str | Path) -> Path | None:
    """A model directory by path or shipped name, found without importing jax (None: neither)."""
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    candidate = SHIPPED_MODELS / str(name)
    return candidate if (candidate / "config.json").is_file() else None


@dataclass(frozen=True)
class ModelReward:
    """What a :func:`reward_model` function scores with: the checkpoint and how the engine loads it."""

    model: str
    """The model as given (a path or a shipped name)."""
    path: Path
    dtype: str
    pooling: str
    label: int | None
    max_length: int | None
    batch_size: int | None

    @property
    def key(self) -> tuple[str, str, str, int | None, int | None]:
        """What the loaded model is shared by, per process."""
        return str(self.path), self.dtype, self.pooling, self.label, self.max_length

    @property
    def deploy_refusal(self) -> str:
        """Why a deploy of this function is refused: a bundle ships code, not weights."""
        return (
            f"it scores with the learned reward model {self.model}, and a deploy bundle ships reward functions' "
            "code, not model weights: serve the model with your trainer's own reward-model support"
        )

    def load(self) -> Any:
        """The engine's ``RewardModel`` for this checkpoint, loaded once per process (:data:`_LOADED`), its programs
        compiled through the session's persistent compilation cache when it has one (:func:`configure_engine`)."""
        with _LOCK:
            loaded = _LOADED.get(self.key)
            if loaded is None:
                try:
                    import jax.numpy as jnp

                    from ..jax import RewardModel
                except ImportError as exc:
                    raise ImportError(
                        f"reward_model({self.model!r}) needs the jax extra: pip install 'pytest-reward[jax]' ({exc})"
                    ) from exc
                use_compilation_cache(_ENGINE["compilation_cache_dir"])
                loaded = RewardModel.from_checkpoint(
                    self.path,
                    dtype=jnp.dtype(self.dtype),
                    pooling=self.pooling,
                    label=self.label,
                    max_length=self.max_length,
                )
                _LOADED[self.key] = loaded
            return loaded


_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str, int | None, int | None], Any] = {}
"""The reward models this process has loaded, by :attr:`ModelReward.key`."""

#: The session's engine settings for the reward models this process loads, as for its ``InferenceJob``: the
#: persistent XLA compilation cache (ini ``reward_jax_cache_dir``), so a reward model's programs compiled in one run
#: are loaded in the next. Set by the plugin at configure time (no jax import), handed to scoring workers with each
#: function (:class:`pytest_reward.scoring.executors.worker.FunctionRef`).
_ENGINE: dict[str, str | None] = {"compilation_cache_dir": None}


def configure_engine(*, compilation_cache_dir: str | os.PathLike[str] | None) -> None:
    """Set this process's engine settings for reward models (see :data:`_ENGINE`); ``None``: no cache."""
    _ENGINE["compilation_cache_dir"] = None if compilation_cache_dir is None else os.fspath(compilation_cache_dir)


def use_compilation_cache(directory: str | os.PathLike[str] | None) -> None:
    """Turn on jax's persistent compilation cache in ``directory`` (the ini ``reward_jax_cache_dir``; None: leave it
    as it is). A directory that cannot be made is an ``OSError`` naming the option and how to change it."""
    if directory is None:
        return
    from ..jax import enable_compilation_cache

    try:
        enable_compilation_cache(directory)
    except OSError as exc:
        raise OSError(
            f"reward_jax_cache_dir: cannot use {os.fspath(directory)} as XLA's compilation cache "
            f"({exc.strerror or exc}); set the ini option to a directory that can be written, or leave it empty "
            "to compile without a cache"
        ) from None


def engine_settings() -> dict[str, str | None]:
    """This process's engine settings for reward models (a copy)."""
    return dict(_ENGINE)


def _name_of(model: str | Path) -> str:
    stem = Path(str(model).rstrip("/\\")).name or "reward_model"
    name = re.sub(r"\W", "_", stem)
    return name if name.isidentifier() else f"rm_{name}"


def _turn(message: Any) -> dict[str, Any]:
    """A turn as the chat template reads it: a dict (a ``Message`` as its fields)."""
    if isinstance(message, dict):
        return message
    return {"role": message.role, "content": message.content or ""}


def _result(value: float, index: int, source: ModelReward) -> EvaluateResult:
    from ..reward.models import EvaluateResult

    score = float(value)
    if not math.isfinite(score):
        return EvaluateResult(
            score=0.0,
            reason=f"reward model {source.model}",
            is_score_valid=False,
            error=f"the reward model {source.model} scored sample {index} of its chunk {score!r}",
        )
    return EvaluateResult(score=score, reason=f"reward model {source.model}: {score:.4f}")


def reward_model(
    model: str | Path,
    *,
    name: str | None = None,
    dtype: str = "float32",
    pooling: str = "hf",
    label: int | None = None,
    max_length: int | None = None,
    batch_size: int | None = None,
) -> Any:
    """A reward function that scores each conversation with a learned reward model.

    ``model``: a Hugging Face ``*ForSequenceClassification`` directory (GPT-2, Llama, Qwen2; ``config.json`` and
    safetensors weights, its tokenizer beside them), or the name of a shipped example model (``"tiny-sum-rm"``).
    ``name``: the function's name in reports and baselines (default: the model directory's name as an identifier,
    ``tiny_sum_rm``). ``dtype``: ``"float32"``, ``"bfloat16"`` or ``"float16"``. ``pooling``: which token's state the
    head reads, ``"hf"`` (Hugging Face's rule: the rightmost token that is not the pad token) or ``"last_attended"``
    (OpenRLHF's and verl's: the last attended token). ``label``: the head's row when it has several labels.
    ``max_length``: the longest text in tokens (the engine's rule for longer ones applies). ``batch_size``: the
    samples per call (and forward), default ``--reward-batch-size``.

    Mistakes raise ``ValueError`` here, at definition time (a reward module that defines a broken one is a
    collection error naming it); the model itself loads on the first call.
    """
    located = locate_model(model)
    if located is None:
        raise ValueError(
            f"reward_model({str(model)!r}): not a model directory (no config.json) and not a shipped example model "
            f"(available: {', '.join(shipped_models('reward')) or 'none'})"
        )
    if pooling not in POOLINGS:
        raise ValueError(f"reward_model({str(model)!r}): pooling must be one of {POOLINGS}, got {pooling!r}")
    if dtype not in DTYPES:
        raise ValueError(f"reward_model({str(model)!r}): dtype must be one of {DTYPES}, got {dtype!r}")
    for key, value, least in (
        ("label", label, 0),
        ("max_length", max_length, 1),
        ("batch_size", batch_size, 1),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(
                f"reward_model({str(model)!r}): {key} must be an integer >= {least}, got {value!r}"
            )
    if name is not None and not (isinstance(name, str) and name.strip()):
        raise ValueError(f"reward_model({str(model)!r}): name must be a non-empty string, got {name!r}")
    from ..reward.decorator import reward_function

    source = ModelReward(str(model), located, dtype, pooling, label, max_length, batch_size)

    def scored(rollouts_messages: Sequence[Sequence[Any]], **kwargs: Any) -> list[EvaluateResult]:
        conversations = [[_turn(m) for m in messages] for messages in rollouts_messages]
        values = source.load().score_conversations(conversations, batch_size=batch_size)
        return [_result(v, i, source) for i, v in enumerate(values)]

    scored.__name__ = scored.__qualname__ = name or _name_of(model)
    scored.__doc__ = f"The score of the learned reward model {source.model} ({located})."
    fn = reward_function(scored, mode="batch")
    fn.__reward_model__ = source  # type: ignore[attr-defined]
    fn.__reward_spec__.batch_size = batch_size  # type: ignore[attr-defined]
    return fn


def model_of(fn: Any) -> ModelReward | None:
    """The reward model a :func:`reward_model` function scores with (None: ``fn`` is no such function)."""
    source = getattr(fn, "__reward_model__", None)
    return source if isinstance(source, ModelReward) else None
