"""What a reward function is, without importing anything heavy: the ``RewardSpec`` the decorator attaches and the
check that finds decorated functions (discovery runs it on every module attribute, in runs that may never score
anything, so this module imports neither pydantic nor the models)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RewardSpec", "is_reward_function"]


@dataclass
class RewardSpec:
    """What the decorator learned about a reward function, once."""

    name: str
    mode: str
    is_async: bool
    parameters: tuple[str, ...]
    accepts_var_kwargs: bool
    messages_index: int | None
    coerce_messages: bool
    coerce_ground_truth: bool
    coerce_rollouts: bool
    id: str | None = None
    requirements: tuple[str, ...] = ()
    resources: dict[str, Any] | None = None
    foreign: bool = False
    """True for functions decorated by an installed ``reward_kit`` (collected, never re-wrapped)."""
    module: str | None = None
    code: tuple[str, int] | None = None
    """(file, first line) of the function, where its warnings point."""
    batch_size: int | None = None
    """The samples a batch-mode function is called with at once (a reward model's chunk; None: the session's
    ``--reward-batch-size``)."""
    legacy_warned: bool = field(default=False, compare=False)

    def accepts(self, name: str) -> bool:
        return self.accepts_var_kwargs or name in self.parameters


def is_reward_function(obj: Any) -> bool:
    """True for functions decorated by this package's or an installed reward-kit's ``@reward_function``.

    (An attribute check: discovery calls it on every module attribute, before anything is analysed.)
    """
    if not callable(obj) or isinstance(obj, type):
        return False
    try:
        return hasattr(obj, "__reward_spec__") or hasattr(obj, "_reward_function_mode")
    except Exception:  # objects with exotic __getattr__
        return False
