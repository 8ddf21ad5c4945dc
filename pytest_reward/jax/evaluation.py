"""Alias of :mod:`pytest_reward.evaluation`, kept for code that imports the Evaluation API from here.

The evaluations are not part of the engine: they live in ``pytest_reward.evaluation`` (which imports no jax) and
talk to an ``InferenceJob`` through a small protocol. Every name below is the same object as there
(``pytest_reward.jax.evaluation.RolloutEvaluation is pytest_reward.evaluation.RolloutEvaluation``).

This is the one module of ``pytest_reward.jax`` that imports from outside it (the documented exception of the
"the engine imports nothing from the plugin" contract); nothing in the engine imports this module.
"""

from __future__ import annotations

from ..evaluation import *  # noqa: F403 - every public name, the very same objects
from ..evaluation import __all__  # noqa: F401
