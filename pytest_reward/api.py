"""The decorator as users import it (``from pytest_reward import reward_function``): the one of
:mod:`pytest_reward.reward.decorator`
plus reward-kit's ``fn.deploy(...)`` method.

``fn.deploy`` runs a whole pytest session (test the function on its samples, deploy only a green result), so it
belongs at the top of the package; the decorator module below knows nothing of deploys. Functions decorated through
``pytest_reward.reward.decorator`` directly (the built-in rewards) are the same reward functions without the method.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .reward.decorator import EvaluationMode
from .reward.decorator import reward_function as decorate_reward_function

__all__ = ["reward_function"]

F = TypeVar("F", bound=Callable[..., Any])


def _deploy(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """``fn.deploy(name=..., target=..., samples=...)``: see :func:`pytest_reward.plugin.deploy_function.deploy_function`."""
    from .plugin.deploy_function import deploy_function

    return deploy_function(fn, *args, **kwargs)


def reward_function(
    _func: F | None = None,
    *,
    mode: EvaluationMode = "pointwise",
    id: str | None = None,
    requirements: Sequence[str] | str | None = None,
    resources: dict[str, Any] | None = None,
) -> F | Callable[[F], F]:
    """Make ``func`` a reward function (see :func:`pytest_reward.reward.decorator.reward_function`), with a
    ``.deploy(name=..., target=..., samples=...)`` method that tests it with pytest and deploys it if green."""

    def decorate(func: F) -> F:
        wrapper = decorate_reward_function(
            func, mode=mode, id=id, requirements=requirements, resources=resources
        )
        wrapper.deploy = functools.partial(_deploy, wrapper)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    if _func is not None:
        return decorate(_func)
    return decorate
