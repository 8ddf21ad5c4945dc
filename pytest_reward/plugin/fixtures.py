"""Fixtures the plugin provides. Importing this module does not import jax (the fixture body does)."""

from __future__ import annotations

from typing import Any

import pytest

from .session import session_key

__all__ = ["inference_job", "overrides_inference_job"]


@pytest.fixture(scope="session")
def inference_job(request: pytest.FixtureRequest) -> Any:
    """The session's ``pytest_reward.jax.InferenceJob`` (one per xdist worker), built from ``--reward-model``
    (ini ``reward_model``: a Hugging Face model directory or a shipped example model by name, e.g. ``tiny-adder``),
    ``--reward-tokenizer`` and ``--reward-max-batch``. Override it in a ``conftest.py`` to build your own; prompt-only
    samples and ``Evaluation`` items use whatever this fixture returns."""
    return request.config.stash[session_key].inference_job()


def overrides_inference_job(config: pytest.Config, module: Any = None) -> bool:
    """A conftest (or the test ``module``) defines its own ``inference_job`` fixture."""
    if module is not None and hasattr(module, "inference_job"):
        return True
    for plugin in config.pluginmanager.get_plugins():
        fixture = getattr(plugin, "inference_job", None)
        if fixture is not None and fixture is not inference_job:
            return True
    return False
