"""The settings of one ``pytest-reward serve`` process, checked once (stdlib only: the command line imports it to
build its parser)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import ServeError

__all__ = ["DEFAULT_MAX_BATCH", "DEFAULT_MAX_BODY", "ENV_CONFIG", "ENV_TOKEN", "ServeOptions"]

ENV_TOKEN = "PYTEST_REWARD_TOKEN"
"""The environment variable holding the token when ``--token`` is not given."""
ENV_CONFIG = "PYTEST_REWARD_SERVE_CONFIG"
"""How the parent passes its settings to worker processes (``--workers`` > 1)."""
DEFAULT_MAX_BODY = 8 << 20
DEFAULT_MAX_BATCH = 1024
"""OpenRLHF sends one sample a request (several hundred at most before v0.9.1): a bound far above both."""


@dataclass(frozen=True)
class ServeOptions:
    """What the server enforces per request; each error names the option to change."""

    token: str | None = None
    timeout: float = 20.0
    """Seconds a request's reward calls may take; later ones become invalid results with a TimeoutError."""
    read_timeout: float = 10.0
    """Seconds within which a request's headers, and then its body, must arrive."""
    max_body: int = DEFAULT_MAX_BODY
    max_batch: int = DEFAULT_MAX_BATCH
    """Most samples one request may carry (OpenRLHF's ``query`` list); more get 413."""
    threads: int = 8
    access_log: bool = True

    def __post_init__(self) -> None:
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ServeError(f"--timeout must be a positive number of seconds, not {self.timeout}")
        if not (self.read_timeout > 0 and math.isfinite(self.read_timeout)):
            raise ServeError(f"--read-timeout must be a positive number of seconds, not {self.read_timeout}")
        if self.max_body < 1:
            raise ServeError(f"--max-body must be at least 1 byte, not {self.max_body}")
        if self.max_batch < 1:
            raise ServeError(f"--max-batch must be at least 1 sample, not {self.max_batch}")
        if self.threads < 1:
            raise ServeError(f"--threads must be at least 1, not {self.threads}")
