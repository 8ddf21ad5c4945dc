"""Every error pytest-reward raises on purpose, in one tree (the lowest module of the package: it imports nothing,
not even pytest, so that deployed bundles and the reward server can use it too)::

    RewardError                      base class: catch this to catch anything the plugin raises on purpose
    ├── UsageError                   the run cannot start: a bad option, ini value, marker, baseline or target
    │   ├── GateError                a bad ``@pytest.mark.reward(...)`` marker or threshold (also a ValueError)
    │   ├── BaselineError            a stored run that cannot be read, or a bad --reward-compare-fail rule
    │   └── DiscoveryError           a reward module or --reward-fn target that cannot be loaded
    ├── SampleFormatError            a malformed sample (also a ValueError); the line becomes a file:line error
    ├── RewardCallError              a reward function could not be called, or returned something unusable
    │   ├── RewardInputError         an input the decorator could not coerce (also a ValueError, as in reward-kit)
    │   ├── RewardReturnError        a return value that is not a result (also a ValueError, as in reward-kit)
    │   ├── InvalidResult            what the plugin reports for an unusable return value
    │   └── RewardTimeout            a call that took longer than its timeout (--reward-timeout, marker timeout=)
    ├── EvaluationError              an ``Evaluation`` that cannot run on the model it was given (also a ValueError)
    └── DeployError                  a deploy that must not happen, or failed
        ├── BundleError              a bundle that cannot be built, read or loaded
        ├── RewardDeployError        ``fn.deploy(...)`` refused (the run was not green) (also a RuntimeError)
        └── ServeError               ``pytest-reward serve`` cannot serve what it was given

The pytest plugin turns a ``UsageError`` into ``pytest.UsageError`` at its boundary (``plugin.py``), so the user sees
pytest's usual "ERROR: ..." line and exit status 4. The JAX engine (``pytest_reward.jax``) stands alone and keeps its
own ``ValueError`` subclasses (``ConfigError``, ``CheckpointError``, ``TokenizerError``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BaselineError",
    "BundleError",
    "DeployError",
    "DiscoveryError",
    "EvaluationError",
    "GateError",
    "InvalidResult",
    "RewardAborted",
    "RewardCallError",
    "RewardDeployError",
    "RewardError",
    "RewardInputError",
    "RewardReturnError",
    "RewardTimeout",
    "SampleFormatError",
    "ServeError",
    "UsageError",
]


class RewardError(Exception):
    """Base class of every error pytest-reward raises on purpose."""


class UsageError(RewardError):
    """The run cannot start as asked: the message says what to change."""


class GateError(UsageError, ValueError):
    """A bad ``@pytest.mark.reward(...)`` marker, threshold option or ini value."""


class BaselineError(UsageError):
    """A stored run that cannot be read, a name that cannot be stored, or a bad comparison rule."""


class DiscoveryError(UsageError):
    """A reward module or ``--reward-fn`` target that could not be loaded."""


class SampleFormatError(RewardError, ValueError):
    """A sample (a JSONL line, a dataset row) that is not valid: it becomes a ``file:line`` error item."""


class RewardCallError(RewardError):
    """A reward function could not be called as the sample asks, or returned something unusable."""


class RewardInputError(RewardCallError, ValueError):
    """An input the decorator could not coerce (reward-kit raises a plain ``ValueError`` with this text)."""


class RewardReturnError(RewardCallError, ValueError):
    """A return value that is not a valid result (reward-kit raises a plain ``ValueError`` with this text)."""

    def __init__(self, message: str, value: Any = None) -> None:
        super().__init__(message)
        self.value = value


class InvalidResult(RewardCallError):
    """The reward function returned something that is not a usable result; the first line names what came back."""


class RewardAborted(RewardCallError):
    """A reward call that raised a ``BaseException`` that is not an ``Exception`` (Math-Verify's
    ``TimeoutException``, a ``SystemExit``): the sample's error, as any exception of the call is, instead of an
    exception that ``except Exception`` lets through to end the item, the file or a worker. ``original`` is what
    was raised; the message names it."""

    def __init__(self, original: BaseException) -> None:
        self.original = original
        name = type(original).__name__
        super().__init__(
            f"{name}: {original} ({name} is a BaseException, not an Exception: code that catches Exception, as "
            "trainers do, lets it through and the training step dies)"
        )


class RewardTimeout(RewardCallError):
    """A reward call that took longer than its timeout. The call goes on in a daemon thread that cannot be killed:
    its result is dropped, and it ends with the process."""


class EvaluationError(RewardError, ValueError):
    """An evaluation that cannot run on the model it was given (e.g. its tokenizer does not match the model)."""


class DeployError(RewardError):
    """A deploy that must not happen (the run was not green) or that failed."""


class BundleError(DeployError):
    """A bundle that cannot be built, read or loaded."""


class RewardDeployError(DeployError, RuntimeError):
    """``fn.deploy(...)`` refused: the function's samples did not pass, or the target failed."""


class ServeError(DeployError):
    """``pytest-reward serve`` cannot serve what it was given."""
