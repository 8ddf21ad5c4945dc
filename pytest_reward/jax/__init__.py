"""JAX inference engine: HF checkpoints (GPT-2, Llama, Qwen2), tokenizers, fast KV-cache rollouts and scoring.

Importing this subpackage imports jax; ``import pytest_reward`` and the pytest plugin never do.

    >>> from pytest_reward.jax import InferenceJob, resolve_model
    >>> job = InferenceJob.from_checkpoint(resolve_model("tiny-adder"))
    >>> job.rollout(["12+345="], max_new_tokens=8)[0].text
    '357'

Modules, one concept each:

* :mod:`.config` - :class:`ModelConfig` and ``config.json`` translation;
* :mod:`.model` - the transformer as pure functions over a parameter pytree;
* :mod:`.checkpoint` - Hugging Face safetensors directories in and out, every tensor checked;
* :mod:`.tokenizer` - :class:`ByteTokenizer` (no dependency) and :class:`HFTokenizer` (``tokenizers``);
* :mod:`.generate` - the jitted programs (rollout, scoring, logits, the naive no-cache reference);
* :mod:`.inference` - :class:`InferenceJob`, the API, shape buckets, devices and the theseus duck type;
* :mod:`.reward_model` - :class:`RewardModel`, learned reward models (a scalar head on the trunk) scoring texts;
* :mod:`.compilation` - compile counter and persistent compilation cache;
* :mod:`.zoo` - :func:`resolve_model` for the shipped example models.

``pytest_reward.jax.evaluation`` is not part of the engine: it is an alias of :mod:`pytest_reward.evaluation` (the
Evaluation API, which talks to an :class:`InferenceJob` through a protocol), kept for existing code, and the only
module here that imports from the rest of ``pytest_reward``.

The shipped ``tiny-adder`` lives inside the package (``pytest_reward/jax/models/tiny-adder``) so that an installed
wheel can find it; ``examples/models/tiny-adder`` in the repository is a symlink to it.
"""

from __future__ import annotations

from .checkpoint import CheckpointError, RewardHeadError, load_checkpoint, save_checkpoint
from .compilation import (
    backend_compile_count,
    enable_compilation_cache,
    install_compile_counter,
    persistent_cache_hits,
)
from .config import ConfigError, ModelConfig
from .inference import InferenceJob, InferenceState, InferenceStats, Loglikelihood, Rollout
from .model import forward, init_params
from .reward_model import RewardModel
from .tokenizer import ByteTokenizer, HFTokenizer, Tokenizer, TokenizerError, load_tokenizer, render_chatml
from .zoo import available_models, resolve_model

__all__ = [
    "ByteTokenizer",
    "CheckpointError",
    "ConfigError",
    "HFTokenizer",
    "InferenceJob",
    "InferenceState",
    "InferenceStats",
    "Loglikelihood",
    "ModelConfig",
    "RewardHeadError",
    "RewardModel",
    "Rollout",
    "Tokenizer",
    "TokenizerError",
    "available_models",
    "backend_compile_count",
    "enable_compilation_cache",
    "forward",
    "init_params",
    "install_compile_counter",
    "load_checkpoint",
    "load_tokenizer",
    "persistent_cache_hits",
    "render_chatml",
    "resolve_model",
    "save_checkpoint",
]
