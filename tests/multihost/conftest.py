"""Multi-host tests start real ``jax.distributed`` processes (marker ``multihost``, ``make test-multihost``)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
