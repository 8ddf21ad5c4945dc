"""The pytest form of a multi-host run: every host runs the same ``pytest --reward-model ...`` command with the
coordinator, the process count and the process id (options, or ``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES``
/ ``JAX_PROCESS_ID``, or SLURM's ``SLURM_NTASKS`` / ``SLURM_PROCID``), and :class:`MultihostHooks` makes the
processes one run:

* ``jax.distributed`` starts at configure time (:func:`pytest_reward.jax.hosts.initialize`, the collective timeout
  from ``--reward-collective-timeout``); pytest-xdist's ``-n`` is refused (each xdist worker would be a process of
  its own, outside the run).
* **Collection is checked to be identical**: the node ids every process runs together are compared across
  processes after collection (a usage error naming the first difference otherwise: a file missing on a host,
  ``pytest-randomly`` shuffling with another seed...).
* **Items that use the model** (``Evaluation`` items, prompt-only samples: everything asking for the
  ``inference_job`` fixture) **run on every process, together**, and so do plain tests. **Reward-function items
  without a model run on process 0 only** (deselected elsewhere): they would compute the same thing N times. Process
  0 runs them after the shared items, so the other processes never wait for them inside a collective.
* **Only process 0 writes** reports, stored runs (baselines) and deploys: the other processes run without the
  run's controller (as an xdist worker does), and print one line saying where process 0 wrote.
* **One exit status**: at the end every process takes process 0's exit status (or the first failing process's,
  when process 0 passed), so a launcher sees the same verdict everywhere. A process that waits there for process 0
  waits as long as process 0 keeps finishing items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .session import RewardSession

__all__ = ["MultihostHooks", "launch_of"]


def launch_of(rs: RewardSession) -> Any:
    """The run's ``Launch`` from the options and the environment, or ``None`` (one process). Imports jax only for
    a multi-host run."""
    import os

    s = rs.settings
    if s.coordinator is None and not os.environ.get("JAX_COORDINATOR_ADDRESS"):
        return None
    from ..jax.hosts import Launch

    try:
        return Launch.resolve(s.coordinator, s.num_processes, s.process_id)
    except ValueError as exc:
        raise pytest.UsageError(f"multi-host run: {exc}") from None


class MultihostHooks:
    """Registered on every process of a multi-host run (see the module docstring)."""

    NAME = "pytest-reward-multihost"

    def __init__(self, rs: RewardSession, launch: Any) -> None:
        config = rs.config
        if config.getoption("numprocesses", None) or config.getoption("dist", "no") != "no":
            raise pytest.UsageError(
                "a multi-host run (--reward-coordinator or JAX_COORDINATOR_ADDRESS) cannot use pytest-xdist: "
                "drop -n/--dist (each host is one process of the run; its devices already share the work)"
            )
        from ..jax.hosts import HostsError, initialize

        try:
            self.hosts = initialize(launch, timeout=rs.settings.collective_timeout)
        except (HostsError, ValueError, RuntimeError) as exc:
            raise pytest.UsageError(f"multi-host run ({launch.source}): {exc}") from None
        self.rs = rs
        self.launch = launch
        self.session: pytest.Session | None = None

    @property
    def writer(self) -> bool:
        return self.hosts.index == 0

    def pytest_report_header(self) -> str:
        role = "writes the reports" if self.writer else "process 0 writes the reports"
        return (
            f"reward: multi-host run, process {self.hosts.index} of {self.hosts.count} ({role}); coordinator "
            f"{self.launch.coordinator} ({self.launch.source}); collective timeout {self.hosts.timeout:g} s"
        )

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        shared = [item for item in items if _shared(item)]
        alone = [item for item in items if not _shared(item)]
        ids = [item.nodeid for item in shared]
        from ..jax.hosts import HostsError

        try:
            every = self.hosts.exchange("the collected items", ids)
        except HostsError as exc:
            raise pytest.UsageError(f"multi-host run: {exc}") from None
        for process, theirs in enumerate(every):
            if theirs != ids:
                first = next(
                    (f"{a!r} here, {b!r} there" for a, b in zip(ids, theirs, strict=False) if a != b),
                    f"{len(ids)} items here, {len(theirs)} there",
                )
                raise pytest.UsageError(
                    f"multi-host run: process {process} collected other items than process {self.hosts.index} "
                    f"({first}). Every process must collect the same items in the same order: the same files "
                    "on every host, and no random order (-p no:randomly, or the same -p randomly seed)."
                )
        if self.writer:
            items[:] = shared + alone  # the unshared items last: nobody waits for them in a collective
        else:
            if alone:
                config.hook.pytest_deselected(items=alone)
            items[:] = shared

    def pytest_runtest_logfinish(self) -> None:
        if self.writer:
            self.hosts.step()  # the others may be waiting for process 0 at the end of the run

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        result = yield
        from ..jax.hosts import HostsError

        status = int(session.exitstatus)
        written = _written(self.rs) if self.writer else []
        try:
            every = self.hosts.exchange(
                "the run's exit status", (status, written), patience=self.hosts.waiting_for(0)
            )
        except HostsError as exc:
            _line(session, f"pytest-reward: {exc}")
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR if status == 0 else status
            return result
        statuses = [s for s, _ in every]
        final = statuses[0] or next((s for s in statuses if s), 0)
        session.exitstatus = final
        if not self.writer:
            where = ", ".join(every[0][1]) or "no files"
            _line(
                session,
                f"pytest-reward: process {self.hosts.index} of {self.hosts.count}: process 0 wrote the run's "
                f"reports, baselines and deploys ({where}); exit status {final}, as process 0's",
            )
        return result


def _shared(item: pytest.Item) -> bool:
    """Whether every process runs ``item``: it uses the model, or it is not a reward-function item."""
    if "inference_job" in getattr(item, "fixturenames", ()):
        return True
    return not type(item).__module__.startswith("pytest_reward.plugin")


def _written(rs: RewardSession) -> list[str]:
    """What process 0 wrote (the report's files, the stored run), as paths relative to its rootdir."""
    plugin = rs.config.pluginmanager.get_plugin("pytest-reward-session")
    written = getattr(getattr(plugin, "controller", None), "written", None)
    if written is None:
        return []
    paths = [*written.report_paths, *([written.saved_path] if written.saved_path is not None else [])]
    return [rs.rel(p) for p in paths]


def _line(session: pytest.Session, text: str) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)
