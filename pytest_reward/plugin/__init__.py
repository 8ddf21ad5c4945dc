"""The pytest layer, and the pytest11 entry point (``pytest_reward.plugin``): the only package of pytest-reward that
imports pytest, ``_pytest`` or pluggy.

The hooks live in :mod:`.hooks`; they are re-exported here because pytest registers this module as the plugin.
Everything below this package (scoring, verdicts, the run result, reports, deploys) runs without pytest.
"""

from .hooks import (
    inference_job,
    pytest_addhooks,
    pytest_addoption,
    pytest_collect_file,
    pytest_collection,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_ignore_collect,
    pytest_pycollect_makeitem,
    pytest_report_header,
    pytest_report_teststatus,
    pytest_reward_deploy,
    pytest_runtest_makereport,
    pytest_terminal_summary,
    pytest_unconfigure,
)

__all__ = [
    "inference_job",
    "pytest_addhooks",
    "pytest_addoption",
    "pytest_collect_file",
    "pytest_collection",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_ignore_collect",
    "pytest_pycollect_makeitem",
    "pytest_report_header",
    "pytest_report_teststatus",
    "pytest_reward_deploy",
    "pytest_runtest_makereport",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]
