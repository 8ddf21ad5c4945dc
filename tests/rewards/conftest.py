from __future__ import annotations

from collections.abc import Iterator

import pytest

from .unprivileged import User, unprivileged_user


@pytest.fixture
def user() -> Iterator[User]:
    """``nobody`` when the runner is root (directories created for it), otherwise the runner itself."""
    with unprivileged_user() as made:
        yield made
