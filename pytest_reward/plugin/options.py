"""Every command-line option and ini value of the plugin, declared once.

``register`` adds them to pytest's parser; ``resolve`` turns a ``pytest.Config`` into an immutable ``Settings``
(command line over ini, validated, errors naming their source). The README's option table is checked against
``OPTIONS`` by a test.
"""

from __future__ import annotations

import glob
import math
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..data.samples import not_a_regular_file
from ..data.sources import SUFFIXES, check_dataset, parse_fields, saved_dataset_files
from ..judge.gates import GateError, Gates, Marker, parse_quantile_text, validate_marker

__all__ = ["OPTIONS", "Option", "Settings", "register", "resolve"]


@dataclass(frozen=True)
class Option:
    """One setting: a command-line flag, an ini key, or both."""

    flag: str | None
    ini: str | None
    kind: str  # "float", "int", "str", "paths", "args", "choice", "bool"
    default: Any
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    append: bool = False
    const: Any = None
    """With ``const``, the flag's value is optional (``--reward-preview`` or ``--reward-preview=10``). Given as a
    separate argument, such a value must not look like a path to test (see ``_check_swallowed``)."""
    value_may_be_a_file: bool = False
    """With ``const``: the value may name an existing file (``--reward-compare .reward/0003_x.json``)."""

    @property
    def dest(self) -> str:
        name = self.flag or f"--{self.ini}"
        return name.lstrip("-").replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "--reward-samples",
        None,
        "paths",
        [],
        "Samples file: JSONL, Parquet or Arrow (repeatable, globs allowed); meets every reward function found.",
        metavar="PATH",
        append=True,
    ),
    Option(
        "--reward-fn",
        None,
        "str",
        [],
        "Use only this reward function: path.py::name or package.module:name (repeatable).",
        metavar="SPEC",
        append=True,
    ),
    Option(
        None,
        "reward_modules",
        "args",
        ["main.py", "reward_*.py", "*_reward.py", "rewards.py"],
        "File patterns of modules searched for @reward_function definitions (test modules are searched too).",
    ),
    Option(
        None,
        "reward_evaluations",
        "args",
        [],
        "Evaluation classes to run besides those defined in test modules: package.module:Class or "
        "path/to/file.py::Class (one per entry).",
    ),
    Option(
        None,
        "reward_samples_glob",
        "args",
        [],
        "File patterns of samples files (JSONL, Parquet, Arrow) collected like test files; "
        "they meet the reward functions of their directory tree.",
    ),
    Option(
        None,
        "reward_sample_fields",
        "args",
        [],
        "Which column of a Parquet / Arrow samples file is what: TARGET=column or TARGET=column.field (targets: "
        "messages, prompt, response, ground_truth, id, or a keyword argument); without it, verl's and TRL's "
        "schemas are recognised. A function's marker sample_fields={...} replaces it for that function.",
    ),
    Option(
        "--reward-threshold",
        "reward_threshold",
        "float",
        None,
        "Default per-sample pass score.",
        metavar="SCORE",
    ),
    Option(
        "--reward-mean",
        "reward_mean",
        "float",
        None,
        "Default gate on the mean score per function x file.",
        metavar="SCORE",
    ),
    Option(
        "--reward-pass-rate",
        "reward_pass_rate",
        "float",
        None,
        "Default gate on the fraction of passing samples.",
        metavar="RATE",
    ),
    Option(
        "--reward-quantile",
        "reward_quantile",
        "str",
        None,
        "Default quantile gates, Q:BOUND pairs (e.g. 0.1:0.3).",
        metavar="Q:BOUND",
    ),
    Option(
        "--reward-confidence",
        "reward_confidence",
        "float",
        None,
        "Gate mean and pass rate on the lower bound of this two-sided interval (bootstrap / Wilson).",
        metavar="LEVEL",
    ),
    Option(
        "--reward-granularity",
        "reward_granularity",
        "choice",
        "auto",
        "One item per sample ('sample'), one "
        "per function x file ('file'), or 'auto' (sample up to reward_max_items_per_file lines).",
        choices=("auto", "sample", "file"),
    ),
    Option(
        None,
        "reward_max_items_per_file",
        "int",
        10000,
        "In auto granularity, files with more lines than this become one item per function.",
    ),
    Option(
        None,
        "reward_max_line_bytes",
        "int",
        8 * 1024 * 1024,
        "Longest accepted JSONL line in bytes; longer lines are reported as errors.",
    ),
    Option(
        "--reward-executor",
        "reward_executor",
        "choice",
        "thread",
        "Where file items score their samples: 'thread' (in the pytest process), 'process' (worker processes on "
        "this machine, for CPU-bound rewards) or 'ray' (a local Ray, or the cluster at --reward-ray-address). "
        "With process or ray, auto granularity means file items.",
        choices=("thread", "process", "ray"),
    ),
    Option(
        "--reward-workers",
        "reward_workers",
        "int",
        None,
        "Scoring workers of file items: threads or concurrent coroutines for I/O-bound rewards (thread; "
        "default 1), processes (process; default: the CPUs this process may use, shared out under -n), chunks "
        "running at once (ray; default: the cluster's CPUs).",
        metavar="N",
    ),
    Option(
        "--reward-ray-address",
        "reward_ray_address",
        "str",
        None,
        "With --reward-executor ray: the cluster to score on (host:port of its GCS, or ray://host:10001); the "
        "project is shipped as the tasks' working_dir. Default: a local Ray on 127.0.0.1 for the run.",
        metavar="ADDR",
    ),
    Option(
        "--reward-timeout",
        "reward_timeout",
        "float",
        None,
        "Seconds one reward call may take; a call that takes longer fails its sample ('timed out after Ns') "
        "and the run goes on (marker key timeout= overrides it per function).",
        metavar="SECONDS",
    ),
    Option(
        "--reward-batch-size",
        "reward_batch_size",
        "int",
        32,
        "Chunk size for @reward_function(mode='batch').",
        metavar="N",
    ),
    Option(
        "--reward-seed",
        "reward_seed",
        "int",
        0,
        "Seed of bootstrap intervals and sampled previews.",
        metavar="N",
    ),
    Option(None, "reward_bootstrap_resamples", "int", 2000, "Bootstrap resamples for confidence intervals."),
    Option(
        "--reward-replay-tolerance",
        "reward_replay_tolerance",
        "float",
        None,
        "Rollout dumps (verl's rollout/validation JSONL): fail a sample whose recomputed reward differs from the "
        "score the trainer recorded by more than T.",
        metavar="T",
    ),
    Option(
        "--reward-runs",
        "reward_runs",
        "int",
        1,
        "Score each sample K times (stochastic rewards such as LLM "
        "judges); a sample's score is the mean of its runs.",
        metavar="K",
    ),
    Option(
        "--reward-flaky-spread",
        "reward_flaky_spread",
        "float",
        0.1,
        "With --reward-runs, list samples whose per-run standard deviation exceeds this as flaky.",
        metavar="SD",
    ),
    Option(
        "--reward-preview",
        None,
        "int",
        0,
        "After the run, show N samples per function (worst first, then "
        "random with --reward-seed): conversation, score, metrics, reason, verdict. N defaults to 5.",
        metavar="N",
        const=5,
    ),
    Option(
        "--reward-report",
        "reward_report_dir",
        "str",
        None,
        "Write results.jsonl, summary.json and a self-contained report.html into this directory.",
        metavar="DIR",
    ),
    Option(
        None,
        "reward_storage",
        "str",
        ".reward",
        "Directory of stored runs (baselines), relative to the rootdir.",
    ),
    Option(
        "--reward-save",
        None,
        "str",
        None,
        "Store this run's per-sample scores as a baseline, optionally named (default: the git commit).",
        metavar="NAME",
        const="",
    ),
    Option("--reward-autosave", "reward_autosave", "bool", False, "Store every run, named <commit>_<time>."),
    Option(
        "--reward-compare",
        None,
        "str",
        None,
        "Compare with a stored run: its name, its number, 'latest' (default) or a path.",
        metavar="RUN",
        const="latest",
        value_may_be_a_file=True,
    ),
    Option(
        "--reward-compare-fail",
        "reward_compare_fail",
        "args",
        [],
        "Fail when a drop vs the compared run "
        "exceeds a tolerance: mean:0.02,pass_rate:0.05,sample:0.3 (repeatable).",
        metavar="RULES",
        append=True,
    ),
    Option(
        "--reward-compare-strict",
        "reward_compare_strict",
        "bool",
        False,
        "Fail mean and pass_rate rules only "
        "when the paired bootstrap interval of the drop also excludes zero.",
    ),
    Option(
        "--reward-compare-confidence",
        "reward_compare_confidence",
        "float",
        0.99,
        "Confidence of the paired interval that --reward-compare-strict requires to exclude zero.",
        metavar="LEVEL",
    ),
    Option(
        "--reward-model",
        "reward_model",
        "str",
        None,
        "Model for prompt-only samples and Evaluation items: a "
        "Hugging Face directory (config.json + safetensors) or a shipped example model by name (tiny-adder).",
        metavar="PATH_OR_NAME",
    ),
    Option(
        "--reward-tokenizer",
        "reward_tokenizer",
        "str",
        None,
        "Tokenizer directory (tokenizer.json) when it is not the model's own.",
        metavar="PATH",
    ),
    Option(
        "--reward-max-batch",
        "reward_max_batch",
        "int",
        32,
        "Rows per device per batch of the inference job; "
        "also how many prompt-only samples are rolled out per call.",
        metavar="N",
    ),
    Option(
        "--reward-rollout-n",
        "reward_rollout_n",
        "int",
        1,
        "Responses generated per prompt-only sample.",
        metavar="N",
    ),
    Option(
        "--reward-rollout-temperature",
        "reward_rollout_temperature",
        "float",
        0.0,
        "Sampling temperature of rollouts (0: greedy).",
        metavar="T",
    ),
    Option(
        "--reward-rollout-top-p",
        "reward_rollout_top_p",
        "float",
        1.0,
        "Nucleus sampling threshold of rollouts.",
        metavar="P",
    ),
    Option(
        "--reward-rollout-max-new-tokens",
        "reward_rollout_max_new_tokens",
        "int",
        None,
        "Longest rollout, in new tokens (default: 64, or half the model's context when that is shorter).",
        metavar="N",
    ),
    Option(
        "--reward-rollout-seed", "reward_rollout_seed", "int", 0, "Seed of sampled rollouts.", metavar="N"
    ),
    Option(
        None,
        "reward_jax_cache_dir",
        "str",
        ".reward/jax-cache",
        "Persistent XLA compilation cache, relative to the rootdir (empty: off).",
    ),
    Option(
        "--reward-deploy",
        "reward_deploy_target",
        "str",
        None,
        "After a fully green run, ship the reward "
        "functions that passed as a bundle to TARGET: dir:PATH (default dir:.reward/deploy), http(s)://URL, "
        "fireworks[:ID], or a scheme a plugin registers.",
        metavar="TARGET",
        const="",
    ),
    Option(
        "--reward-deploy-dry-run",
        None,
        "bool",
        False,
        "Build the bundle and show what would be shipped; ship nothing.",
    ),
    Option(
        "--reward-deploy-partial",
        None,
        "bool",
        False,
        "Deploy even after a partial run (-k, -m, --lf, -x ...).",
    ),
    Option(
        None, "reward_bundle_name", "str", None, "Package name of deploy bundles (default rewards_<project>)."
    ),
    Option(
        None,
        "reward_bundle_include",
        "args",
        [],
        "Extra project files (globs) copied into deploy bundles, e.g. data files reward functions read.",
    ),
    Option(
        None,
        "reward_deploy_token_env",
        "str",
        "REWARD_DEPLOY_TOKEN",
        "Environment variable holding the bearer token of http(s) deploy targets.",
    ),
)


@dataclass(frozen=True)
class Settings:
    """The plugin's settings for one session, resolved once."""

    samples: tuple[Path, ...] = ()
    fn_specs: tuple[str, ...] = ()
    reward_modules: tuple[str, ...] = ()
    evaluations: tuple[str, ...] = ()
    samples_glob: tuple[str, ...] = ()
    sample_fields: tuple[tuple[str, str], ...] = ()
    """ini ``reward_sample_fields``: (target, dotted column path) for Parquet / Arrow samples files."""
    defaults: Gates = field(default_factory=Gates)
    granularity: str = "auto"
    max_items_per_file: int = 10000
    max_line_bytes: int = 8 * 1024 * 1024
    executor: str = "thread"
    """Where file items score their samples: ``thread``, ``process`` or ``ray`` (:mod:`pytest_reward.scoring.executors`)."""
    workers: int | None = None
    """Scoring workers (None: the executor's default)."""
    ray_address: str | None = None
    timeout: float | None = None
    """Seconds one reward call may take (None: no limit)."""
    batch_size: int = 32
    seed: int = 0
    n_resamples: int = 2000
    runs: int = 1
    replay_tolerance: float | None = None
    """``--reward-replay-tolerance``: how far a recomputed reward may be from a dump's recorded one (None: unchecked)."""
    flaky_spread: float = 0.1
    preview: int = 0
    report_dir: Path | None = None
    storage: Path = Path(".reward")
    save: str | None = None
    autosave: bool = False
    compare: str | None = None
    compare_fail: tuple[str, ...] = ()
    compare_strict: bool = False
    compare_confidence: float = 0.99
    model: str | None = None
    tokenizer: Path | None = None
    max_batch: int = 32
    rollout: dict[str, Any] = field(default_factory=dict)
    """``RolloutSettings`` fields from the command line and ini (a marker's ``rollout=`` overrides them); a dict,
    so that start-up does not import the rollouts module."""
    jax_cache_dir: Path | None = None
    deploy: bool = False
    deploy_target: str | None = None
    deploy_dry_run: bool = False
    deploy_partial: bool = False
    bundle_name: str | None = None
    bundle_include: tuple[str, ...] = ()

    def fields_for(self, marker: Marker) -> dict[str, str]:
        """The field mapping a function reads dataset files with: its marker's ``sample_fields`` when it has one
        (the marker wins for that function), else ini ``reward_sample_fields``."""
        return dict(self.sample_fields if marker.sample_fields is None else marker.sample_fields)

    @property
    def needs_record(self) -> bool:
        """Whether every sample's score must reach the controller (stored runs, comparisons)."""
        return bool(self.save is not None or self.autosave or self.compare)

    @property
    def needs_rows(self) -> bool:
        """Whether every sample's full row must reach the controller (``--reward-report``)."""
        return bool(self.report_dir)

    @property
    def active(self) -> bool:
        """Whether the user asked for reward testing on the command line or in ini."""
        return bool(self.samples or self.fn_specs or self.samples_glob)


def register(parser: pytest.Parser) -> None:
    group = parser.getgroup("reward", "reward functions as tests (pytest-reward)")
    for opt in OPTIONS:
        if opt.flag:
            kwargs: dict[str, Any] = {"dest": opt.dest, "help": opt.help}
            if opt.append:
                kwargs.update(action="append", default=[])
            elif opt.kind == "bool":
                kwargs.update(action="store_true", default=None)
            elif opt.const is not None:
                # No argparse type: a swallowed path must reach _check_swallowed, not "invalid int value".
                kwargs.update(nargs="?", const=opt.const, default=None)
            else:
                kwargs.update(default=None)
                if opt.choices:
                    kwargs["choices"] = opt.choices
            if opt.metavar:
                kwargs["metavar"] = opt.metavar
            group.addoption(opt.flag, **kwargs)
        if opt.ini:
            ini_type = {"args": "args", "bool": "bool"}.get(opt.kind, "string")
            default = (
                opt.default
                if opt.kind in ("args", "bool")
                else (None if opt.default is None else str(opt.default))
            )
            parser.addini(opt.ini, opt.help, type=ini_type, default=default)


def _raw(config: pytest.Config, opt: Option) -> tuple[Any, str]:
    """The value of ``opt`` and where it came from: command line over ini over default."""
    if opt.flag:
        value = config.getoption(opt.dest, default=None)
        if value not in (None, []):
            return value, opt.flag
    if opt.ini:
        value = config.getini(opt.ini)
        if value not in (None, "", []):
            return value, f"ini {opt.ini}"
        if value == "" and isinstance(opt.default, str) and opt.default:
            # Set to empty on purpose (unset reads back the non-empty default): "off", e.g. the jax cache.
            return "", f"ini {opt.ini}"
    return opt.default, "default"


def _convert(opt: Option, value: Any, source: str) -> Any:
    if value is None or opt.kind in ("args", "paths", "bool") or isinstance(value, list):
        return value
    try:
        if opt.kind == "float":
            out = float(value)
            if not math.isfinite(out):
                raise ValueError
            return out
        if opt.kind == "int":
            return int(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"{source}: expected {'a number' if opt.kind == 'float' else 'an integer'}, got {value!r}"
        ) from None
    if opt.choices and value not in opt.choices:
        raise pytest.UsageError(f"{source}: expected one of {', '.join(opt.choices)}, got {value!r}")
    return value


def _expand_samples(values: list[str], base: Path) -> tuple[Path, ...]:
    out: dict[Path, None] = {}
    for value in values:
        pattern = os.path.expanduser(value)
        if not os.path.isabs(pattern):
            pattern = str(base / pattern)
        if any(c in value for c in "*?["):
            matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
            for m in matches:
                _refuse_special(f"--reward-samples {value}: {m}", m)
            files = [m for m in matches if m.is_file()]
            if not files:
                raise pytest.UsageError(f"--reward-samples {value}: no file matches this pattern")
        else:
            path = Path(pattern)
            saved = saved_dataset_files(path) if path.is_dir() else None
            if saved is not None:
                for f in saved:
                    out.setdefault(f.resolve(), None)
                continue
            if path.is_dir():
                raise pytest.UsageError(
                    f"--reward-samples {value}: is a directory; pass JSONL files or a glob such as "
                    f"{value.rstrip('/')}/*.jsonl (or a datasets save_to_disk directory)"
                )
            if not path.exists():
                raise pytest.UsageError(f"--reward-samples {value}: file not found")
            _refuse_special(f"--reward-samples {value}", path)
            files = [path]
        for f in files:
            out.setdefault(f.resolve(), None)
    return tuple(out)


def _sample_fields(value: tuple[Any, str]) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(parse_fields(value[0], value[1]).items())
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _refuse_special(source: str, path: Path) -> None:
    """Usage error when ``path`` is a FIFO, socket or device: read, it would block or never end (a ``stat``, never
    an ``open``)."""
    kind = not_a_regular_file(path)
    if kind is not None:
        raise pytest.UsageError(
            f"{source}: is {kind}, not a regular file; samples files must be JSONL files on disk"
        )
    problem = check_dataset(path) if path.is_file() else None
    if problem is not None:
        raise pytest.UsageError(f"{source}: {problem}")


def _check_positional_samples(args: list[str], base: Path) -> None:
    """A ``.jsonl`` path argument that is a FIFO, socket or device is a usage error naming it (pytest would report
    it as "not found", or collect nothing)."""
    for arg in args:
        head = arg.split("::", 1)[0]
        if head.endswith(SUFFIXES):
            path = Path(os.path.expanduser(head))
            _refuse_special(head, path if path.is_absolute() else base / path)


def _given_args(config: pytest.Config) -> list[tuple[str, str]]:
    """The arguments pytest parsed, in its order (ini ``addopts``, then ``PYTEST_ADDOPTS``, then the command line),
    each with where it came from."""
    env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    return [
        *((a, "ini addopts") for a in config.getini("addopts")),
        *((a, "PYTEST_ADDOPTS") for a in env),
        *((a, "") for a in config.invocation_params.args),
    ]


def _check_swallowed(config: pytest.Config) -> None:
    """Usage error when an option with an optional value took, as a separate argument, what looks like a path to
    test: ``pytest --reward-save samples.jsonl`` names the run "samples.jsonl" and tests nothing. Such a value is
    an existing file or directory, or ends in ``.jsonl`` or ``.py``; a value given as ``--opt=VALUE`` is always
    taken as it is."""
    given = _given_args(config)
    args = [a for a, _ in given]
    base = config.invocation_params.dir
    for opt in OPTIONS:
        if opt.const is None or opt.flag not in args:
            continue
        value = config.getoption(opt.dest, default=None)
        i = len(args) - 1 - args[::-1].index(opt.flag)  # the last one wins
        if value is None or i + 1 >= len(args) or args[i + 1] != str(value):
            continue
        what = _path_like(str(value), base, files_ok=opt.value_may_be_a_file)
        if what is None:
            continue
        flag, metavar, source = opt.flag, opt.metavar or "VALUE", given[i][1]
        if source:  # the flag came from addopts, its "value" from what follows it
            fix = f"Write {flag}={opt.const} in {source} for the default, or {flag}={metavar}."
        else:
            fix = (
                f"Write {flag}={metavar} to give the option a value, or put {flag} after the paths "
                f"(pytest {value} {flag})."
            )
        where = f" (in {source})" if source else ""
        raise pytest.UsageError(
            f"{flag}{where} {value}: {flag} took {str(value)!r} as its {metavar}, but that is {what}. {fix}"
        )


def _path_like(value: str, base: Path, *, files_ok: bool) -> str | None:
    """What makes ``value`` look like a path to test (None: it does not)."""
    head = value.split("::", 1)[0]
    if head.endswith((".jsonl", ".py")):
        return f"a {'samples' if head.endswith('.jsonl') else 'Python'} file to test"
    path = Path(os.path.expanduser(head))
    path = path if path.is_absolute() else base / path
    if path.is_dir():
        return "a directory"
    if os.path.lexists(path) and not files_ok:
        return "an existing file"
    return None


def _positive(name: str, value: int, source: str, minimum: int = 1) -> int:
    if value < minimum:
        raise pytest.UsageError(f"{source}: {name} must be ≥ {minimum}, got {value}")
    return value


def resolve(config: pytest.Config) -> Settings:
    """Resolve and validate all settings. Raises ``pytest.UsageError`` naming the bad value's source."""
    _check_swallowed(config)
    _check_positional_samples(list(config.args), config.invocation_params.dir)
    values: dict[str, tuple[Any, str]] = {}
    for opt in OPTIONS:
        raw, source = _raw(config, opt)
        values[opt.dest] = (_convert(opt, raw, source), source)

    defaults = Gates()
    try:
        for key in ("threshold", "mean", "pass_rate", "confidence", "quantile"):
            value, source = values[f"reward_{key}"]
            if value is None:
                continue
            if key == "quantile":
                value = parse_quantile_text(value, source)
            defaults = defaults.merged(validate_marker((), {key: value}, source), source)
    except GateError as exc:
        raise pytest.UsageError(str(exc)) from None

    samples = _expand_samples(values["reward_samples"][0], config.invocation_params.dir)
    return Settings(
        samples=samples,
        fn_specs=tuple(values["reward_fn"][0]),
        reward_modules=tuple(values["reward_modules"][0]),
        evaluations=tuple(values["reward_evaluations"][0]),
        samples_glob=tuple(values["reward_samples_glob"][0]),
        sample_fields=_sample_fields(values["reward_sample_fields"]),
        defaults=defaults,
        granularity=_granularity(values["reward_granularity"], values["reward_executor"]),
        executor=values["reward_executor"][0],
        ray_address=_ray_address(values["reward_ray_address"], values["reward_executor"]),
        max_items_per_file=_positive(
            "reward_max_items_per_file", *values["reward_max_items_per_file"], minimum=0
        ),
        max_line_bytes=_positive("reward_max_line_bytes", *values["reward_max_line_bytes"], minimum=1024),
        workers=None
        if values["reward_workers"][0] is None
        else _positive("--reward-workers", *values["reward_workers"]),
        timeout=_timeout(*values["reward_timeout"]),
        batch_size=_positive("--reward-batch-size", *values["reward_batch_size"]),
        seed=values["reward_seed"][0],
        n_resamples=_positive(
            "reward_bootstrap_resamples", *values["reward_bootstrap_resamples"], minimum=100
        ),
        runs=_positive("--reward-runs", *values["reward_runs"]),
        replay_tolerance=None
        if values["reward_replay_tolerance"][0] is None
        else _at_least("--reward-replay-tolerance", *values["reward_replay_tolerance"]),
        flaky_spread=values["reward_flaky_spread"][0],
        preview=_positive("--reward-preview", *values["reward_preview"], minimum=0),
        report_dir=_path(
            values["reward_report"][0],
            config.rootpath if values["reward_report"][1].startswith("ini") else config.invocation_params.dir,
        ),
        storage=_path(values["reward_storage"][0], config.rootpath) or config.rootpath / ".reward",
        save=values["reward_save"][0],
        autosave=bool(values["reward_autosave"][0]),
        compare=values["reward_compare"][0],
        compare_fail=tuple(values["reward_compare_fail"][0]),
        compare_strict=bool(values["reward_compare_strict"][0]),
        compare_confidence=_confidence(*values["reward_compare_confidence"]),
        model=values["reward_model"][0],
        tokenizer=_path(values["reward_tokenizer"][0], config.invocation_params.dir),
        max_batch=_positive("--reward-max-batch", *values["reward_max_batch"]),
        rollout=dict(
            n=_positive("--reward-rollout-n", *values["reward_rollout_n"]),
            temperature=_at_least("--reward-rollout-temperature", *values["reward_rollout_temperature"]),
            top_p=_top_p(*values["reward_rollout_top_p"]),
            max_new_tokens=(
                None
                if values["reward_rollout_max_new_tokens"][0] is None
                else _positive("--reward-rollout-max-new-tokens", *values["reward_rollout_max_new_tokens"])
            ),
            seed=values["reward_rollout_seed"][0],
        ),
        jax_cache_dir=_path(values["reward_jax_cache_dir"][0], config.rootpath),
        deploy=config.getoption("reward_deploy", None) is not None,
        deploy_target=config.getoption("reward_deploy", None)
        or config.getini("reward_deploy_target")
        or None,
        deploy_dry_run=bool(values["reward_deploy_dry_run"][0]),
        deploy_partial=bool(values["reward_deploy_partial"][0]),
        bundle_name=values["reward_bundle_name"][0],
        bundle_include=tuple(values["reward_bundle_include"][0]),
    )


def _granularity(granularity: tuple[str, str], executor: tuple[str, str]) -> str:
    """``auto`` means ``file`` with a process or Ray executor (they score whole files); ``sample`` items are scored
    in the pytest process, so asking for both is a usage error."""
    (value, source), (kind, kind_source) = granularity, executor
    if kind == "thread":
        return value
    if value == "sample":
        raise pytest.UsageError(
            f"{source}: sample items are scored in the pytest process, but {kind_source} asks for "
            f"--reward-executor {kind}, which scores file items: use --reward-granularity file (or auto), or -n N "
            "(pytest-xdist) to spread sample items over processes"
        )
    return "file"


def _ray_address(address: tuple[str | None, str], executor: tuple[str, str]) -> str | None:
    """The Ray cluster to join; Ray itself must be installed when it is chosen (checked without importing it)."""
    value, source = address
    kind, kind_source = executor
    if kind != "ray":
        if value:
            raise pytest.UsageError(
                f"{source}: a Ray address needs --reward-executor ray (got {kind!r} from {kind_source})"
            )
        return None
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise pytest.UsageError(
            f"{kind_source}: --reward-executor ray needs Ray, which is not installed: "
            "pip install 'pytest-reward[ray]'"
        )
    return value or None


def _timeout(value: float | None, source: str) -> float | None:
    if value is not None and not value > 0:
        raise pytest.UsageError(f"{source}: a reward timeout must be > 0 seconds, got {value:g}")
    return value


def _at_least(name: str, value: float, source: str, minimum: float = 0.0) -> float:
    if value < minimum:
        raise pytest.UsageError(f"{source}: {name} must be ≥ {minimum:g}, got {value:g}")
    return value


def _top_p(value: float, source: str) -> float:
    if not 0.0 < value <= 1.0:
        raise pytest.UsageError(f"{source}: top_p must be in (0, 1], got {value:g}")
    return value


def _confidence(value: float, source: str) -> float:
    if not 0.0 < value < 1.0:
        raise pytest.UsageError(f"{source}: a confidence level must be in (0, 1), got {value:g}")
    return value


def _path(value: str | None, base: Path) -> Path | None:
    if not value:
        return None
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base / path


def markdown_table() -> str:
    """The README's option reference, generated from ``OPTIONS``."""
    rows = ["| option | ini key | default | what it does |", "| --- | --- | --- | --- |"]
    for opt in OPTIONS:
        flag = (
            f"`{opt.flag} {opt.metavar}`"
            if opt.flag and opt.metavar
            else (f"`{opt.flag}`" if opt.flag else "")
        )
        if opt.flag and opt.const is not None:  # the value is optional, and only ``=`` gives one for sure
            flag = f"`{opt.flag}[={opt.metavar}]`"
        if opt.flag and opt.choices:
            flag = f"`{opt.flag} {{{','.join(opt.choices)}}}`"
        ini = f"`{opt.ini}`" if opt.ini else ""
        if opt.append:
            default = "(repeatable)"
        elif opt.default in (None, [], ""):
            default = ""
        elif isinstance(opt.default, list):
            default = "`" + " ".join(opt.default) + "`"
        else:
            default = f"`{opt.default}`"
        rows.append(f"| {flag} | {ini} | {default} | {opt.help} |")
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    print(markdown_table())
