"""Every option is declared once, as the ``Settings`` field it fills: each part of a declaration is used (its
flag and ini key are registered with pytest, its value reaches its field and no other, its default is the field's
default), and the special cases (paths, ``--reward-deploy``'s optional value, samples files) keep their rules."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_reward.plugin.options import OPTIONS, Option, Settings, resolve
from pytest_reward.scoring.rollouts import RolloutSettings

from .test_commands import GOOD, SCORER

FIELDS = [f.name for f in dataclasses.fields(Settings)]


def settings_of(pytester: pytest.Pytester, *args: str, ini: str = "") -> Settings:
    pytester.makeini("[pytest]\n" + ini)
    return resolve(pytester.parseconfig(*args))


def anchored(settings: Settings, root: Path) -> dict[str, Any]:
    """``settings`` as a dict, relative paths made absolute under ``root`` (as ``resolve`` makes them)."""
    out = {}
    for name in FIELDS:
        value = getattr(settings, name)
        out[name] = root / value if isinstance(value, Path) and not value.is_absolute() else value
    return out


def test_every_field_is_declared_by_options_and_every_option_fills_one_field():
    filled = [opt.dest.split(".")[0] for opt in OPTIONS]
    assert set(filled) == set(FIELDS)
    assert len({opt.dest for opt in OPTIONS}) == len(OPTIONS)
    for attr in ("flag", "ini", "argname"):
        names = [getattr(opt, attr) for opt in OPTIONS if getattr(opt, attr)]
        assert len(names) == len(set(names)), f"two options share a {attr}"
    assert all(opt.flag or opt.ini for opt in OPTIONS)
    assert all(opt.help.strip() for opt in OPTIONS)
    assert all(opt.kind != "choice" or opt.default in opt.choices for opt in OPTIONS)


def test_every_flag_and_ini_key_is_registered_with_pytest(pytester):
    config = pytester.parseconfig()
    for opt in OPTIONS:
        if opt.flag:
            config.getoption(opt.argname)  # ValueError when pytest does not know it
        if opt.ini:
            config.getini(opt.ini)  # ValueError when pytest does not know it


def test_an_untouched_session_resolves_to_the_declared_defaults(pytester):
    resolved = settings_of(pytester)
    assert anchored(resolved, pytester.path) == anchored(Settings(), pytester.path)


def _a_value(opt: Option) -> str:
    """A valid value for ``opt`` that is not its default, as it would be written."""
    special = {
        "sample_fields": "ground_truth=reward_model.ground_truth",
        "defaults.quantile": "0.1:0.3",
        "samples": "s.jsonl",
    }
    if opt.dest in special:
        return special[opt.dest]
    if opt.kind == "choice":
        return next(c for c in opt.choices if c != opt.default and c != "sample")
    if opt.kind == "int":
        return str((opt.default or 0) + 2000)
    if opt.kind == "float":
        return "0.5"
    if opt.kind == "bool":
        return "true"
    return "elsewhere"


def _cases() -> list[Any]:
    out = []
    for opt in OPTIONS:
        if opt.dest == "ray_address":  # needs the ray executor (test_a_ray_address_needs_the_ray_executor)
            continue
        if opt.flag:
            out.append(pytest.param(opt, "flag", id=f"{opt.flag}"))
        if opt.ini and opt.dest != "deploy_target":  # the ini key alone deploys nothing: see the deploy test
            out.append(pytest.param(opt, "ini", id=f"ini {opt.ini}"))
    return out


@pytest.mark.parametrize(("opt", "where"), _cases())
def test_each_option_fills_its_own_field_and_names_its_source(pytester, opt, where):
    (pytester.path / "s.jsonl").write_text("{}\n")
    value = _a_value(opt)
    if where == "flag":
        args = [opt.flag] if opt.kind == "bool" else [f"{opt.flag}={value}"]
        changed = settings_of(pytester, *args)
        source = opt.flag
    else:
        changed = settings_of(pytester, ini=f"{opt.ini} = {value}\n")
        source = f"ini {opt.ini}"
    base = anchored(settings_of(pytester), pytester.path)
    now = anchored(changed, pytester.path)
    field, _, key = opt.dest.partition(".")
    also = {"executor": ["granularity"]}.get(field, [])  # with process or ray, auto granularity means file
    assert [name for name in FIELDS if now[name] != base[name]] == sorted([field, *also], key=FIELDS.index)
    if field == "defaults":
        assert changed.defaults.source(key) == source
    if field == "rollout":
        assert dict(changed.rollout)[key] != dict(Settings().rollout)[key]


def test_the_command_line_wins_over_ini(pytester):
    settings = settings_of(
        pytester, "--reward-batch-size=7", "--reward-mean=0.2", ini="reward_batch_size = 9\n"
    )
    assert settings.batch_size == 7
    settings = settings_of(pytester, "--reward-mean=0.2", ini="reward_mean = 0.4\nreward_batch_size = 9\n")
    assert (settings.batch_size, settings.defaults.mean, settings.defaults.source("mean")) == (
        9,
        0.2,
        "--reward-mean",
    )


def test_paths_are_relative_to_where_their_value_was_given(pytester):
    sub = pytester.mkdir("sub")
    pytester.makeini("[pytest]\nreward_report_dir = from-ini\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        from_ini = resolve(pytester.parseconfig(str(pytester.path)))
        from_cli = resolve(pytester.parseconfig(str(pytester.path), "--reward-report=out"))
    assert from_ini.report_dir == pytester.path / "from-ini"
    assert from_cli.report_dir == sub / "out"
    assert from_ini.storage == pytester.path / ".reward"  # always under the rootdir


@pytest.mark.parametrize(
    ("ini", "expected"), [("", None), ("reward_storage =\n", None), ("reward_storage = runs\n", "runs")]
)
def test_an_empty_storage_in_ini_means_the_default(pytester, ini, expected):
    settings = settings_of(pytester, ini=ini)
    assert settings.storage == pytester.path / (expected or ".reward")


@pytest.mark.parametrize(
    ("args", "deploy", "target"),
    [
        ((), False, None),
        (("--reward-deploy",), True, "dir:from-ini"),
        (("--reward-deploy=dir:given",), True, "dir:given"),
    ],
)
def test_deploy_needs_the_flag_and_its_bare_form_takes_the_ini_target(pytester, args, deploy, target):
    settings = settings_of(pytester, *args, ini="reward_deploy_target = dir:from-ini\n")
    assert (settings.deploy, settings.deploy_target) == (deploy, target)
    bare = settings_of(pytester, "--reward-deploy")
    assert (bare.deploy, bare.deploy_target) == (True, "")  # "": the built-in target


def test_a_ray_address_needs_the_ray_executor(pytester):
    with pytest.raises(
        pytest.UsageError, match=r"^ini reward_ray_address: a Ray address needs --reward-executor"
    ):
        settings_of(pytester, ini="reward_ray_address = 127.0.0.1:6379\n")


def test_rollout_settings_are_frozen_pairs_of_rollout_settings_fields(pytester):
    settings = settings_of(pytester, "--reward-rollout-n=3", ini="reward_rollout_temperature = 0.7\n")
    assert isinstance(settings.rollout, tuple)
    hash(settings.rollout)
    assert RolloutSettings(**dict(settings.rollout)) == RolloutSettings(n=3, temperature=0.7)
    assert RolloutSettings(**dict(Settings().rollout)) == RolloutSettings()  # the same defaults


@pytest.mark.parametrize("flag", ["--reward-save", "--reward-compare"])
@pytest.mark.parametrize("name", ["data.parquet", "data.arrow"])
def test_an_optional_value_naming_any_samples_file_is_refused(project, flag, name):
    """Regression: only ``.jsonl`` counted as a samples file here, so ``--reward-save data.parquet`` named the run
    after the file and tested nothing."""
    project.file("rewards.py", SCORER)
    result = project.run(flag, name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{flag} took '{name}' as its *, but that is a samples file to test.*"])


def test_a_directory_of_samples_files_suggests_a_glob_of_their_kind(project):
    project.file("rewards.py", SCORER)
    project.jsonl("mixed/a.jsonl", [GOOD])
    (project.path / "tables").mkdir()
    (project.path / "tables" / "part-0.parquet").write_bytes(b"")
    result = project.run("--reward-samples", "tables")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--reward-samples tables: is a directory; *a glob such as tables/*.parquet*"]
    )
    result = project.run("--reward-samples", "mixed")
    result.stderr.fnmatch_lines(["*--reward-samples mixed: is a directory; *a glob such as mixed/*.jsonl*"])
