"""``reward_model(...)``: a learned reward model as a reward function: found, validated and refused for deploys.

These need no engine: defining the function loads nothing, ``--collect-only`` scores nothing. The runs that score
with the engine are in ``test_reward_model_runs.py``.
"""

from __future__ import annotations

import pytest

from pytest_reward import RewardDeployError, is_reward_function, reward_model
from pytest_reward.rewards.reward_model import locate_model, model_of, shipped_models

from .conftest import msgs

SHIPPED = "tiny-sum-rm"

RM_ONLY = """
    from pytest_reward import reward_model

    rm = reward_model("tiny-sum-rm")
"""


def test_the_shipped_reward_model_is_found_by_name_and_by_path(tmp_path):
    assert SHIPPED in shipped_models()
    path = locate_model(SHIPPED)
    assert path is not None and (path / "config.json").is_file()
    assert locate_model(str(path)) == path.resolve()
    assert locate_model(tmp_path) is None  # no config.json


def test_definition_builds_a_batch_reward_function_and_loads_nothing():
    rm = reward_model(SHIPPED, batch_size=8)
    assert is_reward_function(rm)
    assert rm.__name__ == "tiny_sum_rm"
    assert rm.__reward_spec__.mode == "batch" and rm.__reward_spec__.batch_size == 8
    source = model_of(rm)
    assert source is not None and source.path == locate_model(SHIPPED)
    assert model_of(lambda **kw: 0) is None
    assert reward_model(SHIPPED, name="sums").__name__ == "sums"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"model": "no-such-model"},
            "not a model directory (no config.json) and not a shipped example model",
        ),
        ({"pooling": "last"}, "pooling must be one of ('hf', 'last_attended'), got 'last'"),
        ({"dtype": "int8"}, "dtype must be one of ('float32', 'bfloat16', 'float16'), got 'int8'"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"label": -1}, "label must be an integer >= 0, got -1"),
        ({"max_length": True}, "max_length must be an integer >= 1, got True"),
        ({"name": " "}, "name must be a non-empty string"),
    ],
)
def test_definition_errors_name_the_mistake(kwargs, message):
    model = kwargs.pop("model", SHIPPED)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        reward_model(model, **kwargs)


def test_a_module_that_only_builds_a_reward_model_is_collected(project):
    """Regression: discovery imported only modules mentioning ``reward_function``, so this one was never found."""
    project.file("rewards.py", RM_ONLY)
    project.jsonl("s.jsonl", [{"messages": msgs("1+2=", "3")}, {"messages": msgs("1+2=", "4")}])
    result = project.run("--reward-samples", "s.jsonl", "--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["s.jsonl::tiny_sum_rm?line-1?", "s.jsonl::tiny_sum_rm?line-2?"])


def test_a_module_that_only_combines_builtins_is_collected(project):
    """The same regression for ``combine(...)``: a module using the package's API without the decorator's name."""
    project.file(
        "rewards.py",
        """
        from pytest_reward.rewards import combine, format_reward, length_reward

        mix = combine({format_reward: 0.5, length_reward: 0.5}, name="mix")
        """,
    )
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl", "--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["s.jsonl::mix?line-1?"])


def test_a_module_using_the_api_that_fails_to_import_is_a_collection_error(project):
    """Regression: such a module was skipped without a word (it was never imported)."""
    project.file("rewards.py", "from pytest_reward import reward_model\nimport does_not_exist\n")
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*Could not import *rewards.py: ModuleNotFoundError: No module named 'does_not_exist'*"]
    )


def test_a_reward_model_that_cannot_be_found_is_a_collection_error_naming_it(project):
    project.file("rewards.py", 'from pytest_reward import reward_model\n\nrm = reward_model("tiny-sum")\n')
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*Could not import *rewards.py: ValueError: reward_model('tiny-sum'): not a model directory (no "
            "config.json) and not a shipped example model (available: tiny-sum-rm)*"
        ]
    )


def test_a_module_that_does_not_use_the_api_is_never_executed(project):
    project.file("main.py", "raise SystemExit('executed')\n")
    project.file("rewards.py", RM_ONLY)
    project.jsonl("s.jsonl", [{"messages": msgs("q", "a")}])
    result = project.run("--reward-samples", "s.jsonl", "--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["s.jsonl::tiny_sum_rm?line-1?"])


def test_deploy_method_refuses_a_reward_model_before_running_anything():
    rm = reward_model(SHIPPED)
    with pytest.raises(RewardDeployError) as info:
        rm.deploy(name="sums", target="dir:/nonexistent")
    assert str(info.value).startswith(
        "tiny_sum_rm cannot be deployed: it scores with the learned reward model tiny-sum-rm, and a deploy bundle "
        "ships reward functions' code, not model weights"
    )
    assert str(info.value).endswith("serve the model with your trainer's own reward-model support")


def test_a_function_built_at_run_time_is_located_in_the_module_that_assigns_it(project):
    """Regression: such a function was located in the package's own file, so its marker's samples= paths were
    looked up there, and reports pointed into the package."""
    project.file(
        "metrics/sums/rewards.py",
        """
        import pytest
        from pytest_reward import reward_model

        # bound to the samples file beside this module
        rm = pytest.mark.reward(samples="data.jsonl")(reward_model("tiny-sum-rm"))
        """,
    )
    project.jsonl("metrics/sums/data.jsonl", [{"messages": msgs("1+2=", "3")}])
    result = project.run("--collect-only", "-q", "metrics")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["metrics/sums/data.jsonl::tiny_sum_rm?line-1?"])


def test_selected_by_ini_reward_functions(project):
    project.pytester.makeini("[pytest]\nreward_functions =\n    rewards.py::rm\n")
    project.file("rewards.py", RM_ONLY + "    other = reward_model('tiny-sum-rm', name='other')\n")
    project.jsonl("s.jsonl", [{"messages": msgs("1+2=", "3")}])
    result = project.run("--reward-samples", "s.jsonl", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["s.jsonl::tiny_sum_rm?line-1?"])
    assert "other" not in result.stdout.str()
