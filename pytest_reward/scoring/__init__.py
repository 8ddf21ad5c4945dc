"""Calling reward functions on samples: the invoker (:mod:`.invoker`), rollouts from a model
(:mod:`.rollouts`) and the executors that score elsewhere (:mod:`.executors`). No pytest.

``from pytest_reward.scoring import Invoker`` (this package was the module :mod:`.invoker` before the layered
layout) keeps working.
"""

from .invoker import Checked, DaemonPool, FreshInput, Invoker, Passed, error_outcome, merge_runs, spread

__all__ = ["Checked", "DaemonPool", "FreshInput", "Invoker", "Passed", "error_outcome", "merge_runs", "spread"]
