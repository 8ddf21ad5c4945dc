"""Every hook pytest-reward adds to pytest (registered with ``pytest_addhooks``). Implement them in a
``conftest.py`` or a plugin.

A run ends with :func:`pytest_reward_run_finished`, which hands every implementation the frozen ``RunResult``:
read the run's verdicts, summaries and comparison there (deploy does), never the plugin's internal state.

Deploy targets (``pytest --reward-deploy=TARGET``) are resolved by scheme: ``dir:PATH``, ``http(s)://URL``,
``fireworks[:EVALUATOR_ID]`` are built in; a plugin adds its own scheme in ``pytest_reward_register_targets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..deploy.bundle import BuiltBundle
    from ..deploy.targets import Receipt, TargetRegistry
    from ..probes import ProbeRegistry
    from ..run.result import RunResult


def pytest_reward_run_finished(result: RunResult, session: pytest.Session) -> None:
    """Called once per run, on the controller (never on an xdist worker), at the end of the session — after every
    item ran and the gates and the comparison were judged, before the result files are put in place (they name
    the session's final exit status, which an implementation may still change) and before the terminal summary.
    Not called for ``--collect-only`` or for runs that did not ask for reward testing.

    :param result: the frozen result of the run: ``result.verdict``, ``result.groups`` (one per reward function ×
        samples file: summary, gate verdicts, the outcomes reports show), ``result.comparisons``,
        ``result.compare_failures``, ``result.meta``, ``result.functions`` (the reward functions that ran),
        ``result.probes`` (one ``ProbeResult`` per reward function × samples file × reward-hacking probe),
        ``result.probe_changes`` (compared with a stored run: each probe's verdict there and now).
    :param session: the pytest session; ``session.exitstatus`` is its status so far. An implementation may set it
        to fail the session (the deploy step does, when a deploy fails).
    """


def pytest_reward_probes(probes: ProbeRegistry, config: pytest.Config) -> None:
    """Register custom reward-hacking probes, which reward functions then list in their marker
    (``@pytest.mark.reward(probes=["default", "negate"])``). Called once per process (the controller and each
    xdist worker), when the first samples file is collected, before any probe name is looked up.

    :param probes: the session's probes: the built-ins, those registered with ``@pytest_reward.probe``, and what
        this hook adds: ``probes.register("negate", mutate, rule="not pass", doc="why the rule must hold")``, where
        ``mutate(response: str, sample: ProbeSample) -> str | None`` returns the mutated response (None: the probe
        does not apply to that sample) and ``rule`` is ``"<= floor"``, ``"<= original"``, ``"== original"``,
        ``">= original"``, ``"not pass"`` or ``"info"`` (see :mod:`pytest_reward.probes`).
    :param config: the pytest config.
    """


@pytest.hookspec(historic=True)
def pytest_reward_register_targets(targets: TargetRegistry) -> None:
    """Register deploy targets: ``targets.register("s3", factory, "upload to S3")``. Historic: implementations in
    conftest files loaded after configuration are still called.

    :param targets: the registry; ``factory(spec: str, config: pytest.Config) -> Target`` receives the text after
        ``scheme:``, and a ``Target`` has ``deploy(bundle: BuiltBundle) -> Receipt``.
    """


def pytest_reward_bundle_manifest(manifest: dict[str, Any], config: pytest.Config) -> None:
    """Add to or change a bundle's ``manifest.json`` before it is written (e.g. a team or ticket id).

    :param manifest: the manifest as it will be written (change it in place).
    :param config: the pytest config.
    """


@pytest.hookspec(firstresult=True)
def pytest_reward_deploy(bundle: BuiltBundle, target: str, config: pytest.Config) -> Receipt | None:
    """Ship ``bundle`` to ``target``; return a ``Receipt``. First result wins; the built-in implementation
    (``trylast``) resolves ``target`` through the registered targets. Raise to fail the deploy (and the session).

    :param bundle: the built bundle (a directory and its manifest).
    :param target: the ``--reward-deploy`` target, e.g. ``dir:deploy`` or ``https://...``.
    :param config: the pytest config.
    """


def pytest_reward_deployed(receipt: Receipt, bundle: BuiltBundle, config: pytest.Config) -> None:
    """Called after a successful deploy (notify a channel, record the id...).

    :param receipt: what the target returned (``receipt.id``, ``receipt.target``, ``receipt.unchanged``).
    :param bundle: the bundle that was deployed.
    :param config: the pytest config.
    """
