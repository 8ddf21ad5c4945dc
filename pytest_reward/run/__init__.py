"""The run as data: the frozen ``RunResult`` every output reads (:mod:`.result`), the controller's folding of
outcomes into it (:mod:`.fold`), and stored runs with their comparison rules (:mod:`.baseline`). No pytest.

``from pytest_reward.run import RunResult`` (this package was the module :mod:`.result` before the layered layout)
keeps working.
"""

from .result import GroupResult, ProbeExample, ProbeResult, RunResult

__all__ = ["GroupResult", "ProbeExample", "ProbeResult", "RunResult"]
