"""Hooks pytest-reward adds to pytest (registered with ``pytest_addhooks``). Implement them in a ``conftest.py``
or a plugin.

Deploy targets (``pytest --reward-deploy=TARGET``) are resolved by scheme: ``dir:PATH``, ``http(s)://URL``,
``fireworks[:EVALUATOR_ID]`` are built in; a plugin adds its own scheme in ``pytest_reward_register_targets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .deploy.bundle import BuiltBundle
    from .deploy.targets import Receipt, TargetRegistry


@pytest.hookspec(historic=True)
def pytest_reward_register_targets(targets: TargetRegistry) -> None:
    """Register deploy targets: ``targets.register("s3", factory, "upload to S3")``.

    ``factory(spec: str, config: pytest.Config) -> Target`` receives the text after ``scheme:``; a ``Target`` has
    ``deploy(bundle: BuiltBundle) -> Receipt``. Historic: implementations in conftest files loaded after
    configuration are still called.
    """


def pytest_reward_bundle_manifest(manifest: dict[str, Any], config: pytest.Config) -> None:
    """Add to or change a bundle's ``manifest.json`` before it is written (e.g. a team or ticket id)."""


@pytest.hookspec(firstresult=True)
def pytest_reward_deploy(bundle: BuiltBundle, target: str, config: pytest.Config) -> Receipt | None:
    """Ship ``bundle`` to ``target``; return a ``Receipt``. First result wins; the built-in implementation
    (``trylast``) resolves ``target`` through the registered targets. Raise to fail the deploy (and the session)."""


def pytest_reward_deployed(receipt: Receipt, bundle: BuiltBundle, config: pytest.Config) -> None:
    """Called after a successful deploy (notify a channel, record the id...)."""
