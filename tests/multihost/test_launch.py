"""Where a process sits in a multi-host run (``Launch.resolve``: arguments, the JAX variables, SLURM's) and the
usage errors of the pytest form that need no second process. Fast: no process is started."""

from __future__ import annotations

import pytest

from pytest_reward.jax.hosts import Launch


def test_no_coordinator_is_a_single_process_run():
    assert Launch.resolve(environ={}) is None
    assert Launch.resolve(environ={"SLURM_NTASKS": "4", "SLURM_PROCID": "1"}) is None


def test_the_jax_variables_name_the_run():
    env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
    launch = Launch.resolve(environ=env)
    assert launch == Launch(
        "10.0.0.1:1234", 4, 3, "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID"
    )


def test_slurm_gives_the_count_and_id_and_arguments_win():
    env = {"JAX_COORDINATOR_ADDRESS": "node1:7777", "SLURM_NTASKS": "8", "SLURM_PROCID": "5"}
    slurm = Launch.resolve(environ=env)
    assert (slurm.num_processes, slurm.process_id, slurm.source) == (
        8,
        5,
        "JAX_COORDINATOR_ADDRESS, SLURM_NTASKS, SLURM_PROCID",
    )
    given = Launch.resolve("other:1", 2, 0, environ=env)
    assert (given.coordinator, given.num_processes, given.process_id) == ("other:1", 2, 0)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2"},
            "but not the process id (JAX_PROCESS_ID)",
        ),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_PROCESS_ID": "0"},
            "not the process count (JAX_NUM_PROCESSES)",
        ),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"}, "0..count-1"),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"},
            "JAX_NUM_PROCESSES",
        ),
        (
            {"JAX_COORDINATOR_ADDRESS": "h", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"},
            "must be host:port",
        ),
    ],
)
def test_an_incomplete_launch_names_what_is_missing(env, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        Launch.resolve(environ=env)


def test_xdist_with_a_multi_host_run_is_a_usage_error(project, monkeypatch):
    pytest.importorskip("xdist")
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "0")
    project.file("test_x.py", "def test_x():\n    pass\n")
    result = project.run_subprocess("-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*a multi-host run (--reward-coordinator or JAX_COORDINATOR_ADDRESS) cannot use*"]
    )


def test_a_half_named_run_is_a_usage_error(project, monkeypatch):
    monkeypatch.delenv("JAX_COORDINATOR_ADDRESS", raising=False)
    monkeypatch.delenv("JAX_PROCESS_ID", raising=False)
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    project.file("test_x.py", "def test_x():\n    pass\n")
    result = project.run_subprocess("--reward-coordinator", "127.0.0.1:1", "--reward-num-processes", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*multi-host run: coordinator 127.0.0.1:1 is named (arguments) but not the process id*"]
    )


def test_a_run_of_one_process_has_trivial_collectives():
    """A launch of one process (``srun`` with one task): every collective answers at once, without a store."""
    import numpy as np

    from pytest_reward.jax.hosts import Hosts

    one = Hosts(None, 0, 1, 1.0)
    assert one.exchange("x", {"a": 1}) == [{"a": 1}]
    assert one.broadcast("x", 3) == 3
    assert [r.tolist() for r in one.gather_rows("rows", np.arange(3))] == [[0, 1, 2]]
    assert one.agree("x", "same") == ["same"]
    one.barrier("b")
    one.step()
