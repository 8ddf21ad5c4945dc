"""Every command-line option and ini value of the plugin, declared once: as the ``Settings`` field it fills.

Each field of :class:`Settings` is declared with :func:`option` (one flag and/or ini key), or with :func:`parts`
(several options that make one value: the default gates, the rollout settings). ``OPTIONS``, the flat list of
those declarations in field order, is what ``register`` adds to pytest's parser, what ``resolve`` reads (command
line over ini over the declared default, checked, errors naming their source) and what the options table
of docs/reference/options.md is generated from (a test keeps them in sync).
"""

from __future__ import annotations

import glob
import math
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple, dataclass_transform

import pytest

from ..data.formats import DatasetError, directory_files, is_samples_file
from ..data.samples import not_a_regular_file
from ..data.sources import check_dataset, parse_fields
from ..judge.gates import GateError, Gates, Marker, parse_quantile_text, validate_marker

__all__ = ["OPTIONS", "Option", "Settings", "register", "resolve"]


class Given(NamedTuple):
    """One option's value for a session and where it came from: its flag (``--reward-threshold``), ``ini KEY``, or
    ``default``."""

    value: Any
    source: str
    option: Option


@dataclass(frozen=True)
class Resolving:
    """What a check may look at besides its own value: the config and every option's value as read (by ``dest``)."""

    config: pytest.Config
    given: Mapping[str, Given]


Check = Callable[[Given, Resolving], Any]


@dataclass(frozen=True)
class Option:
    """One setting: a command-line flag, an ini key, or both, and the ``Settings`` field it fills."""

    flag: str | None
    ini: str | None
    kind: str  # "float", "int", "str", "path", "paths", "args", "lines" (ini: one per line), "choice", "bool"
    default: Any
    """As pytest and the option reference show it; the ``Settings`` field's default is this, in the field's type."""
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    append: bool = False
    const: Any = None
    """With ``const``, the flag's value is optional (``--reward-preview`` or ``--reward-preview=10``). Given as a
    separate argument, such a value must not look like a path to test (see ``_check_swallowed``)."""
    value_may_be_a_file: bool = False
    """With ``const``: the value may name an existing file (``--reward-compare .reward/0003_x.json``)."""
    relative_to: str = "invocation"
    """A ``path``'s base: ``invocation`` (the directory pytest was started in), ``rootdir``, or ``origin`` (the
    rootdir when the value comes from ini, else the invocation directory)."""
    check: Check | None = None
    """Validates the value read (converted to ``kind``) and returns the field's value; errors name ``source``."""
    dest: str = ""
    """The ``Settings`` field it fills (``field.key`` for one of a field's ``parts``); set from the declaration."""

    @property
    def name(self) -> str:
        """How errors name the option: its flag, else its ini key."""
        return self.flag or self.ini or self.dest

    @property
    def argname(self) -> str:
        """The attribute pytest stores the flag's value under (``config.getoption``)."""
        name = self.flag or f"--{self.ini}"
        return name.lstrip("-").replace("-", "_")

    def settled(self, value: Any) -> Any:
        """``value`` (a default as declared) in the type of the field."""
        if isinstance(value, (list, tuple)):
            return tuple(value)
        if self.kind == "path":
            return Path(value) if value else None
        return value


@dataclass(frozen=True)
class Parts:
    """A field made of several options; ``build`` makes its value from theirs (checked, by key)."""

    build: Callable[[dict[str, Given]], Any]
    options: tuple[tuple[str, Option], ...]

    def default(self) -> Any:
        return self.build({key: Given(opt.settled(opt.default), "default", opt) for key, opt in self.options})


_DECLARATION = "pytest_reward.option"


def option(
    flag: str | None, ini: str | None, kind: str, default: Any, help: str, **more: Any
) -> Any:  # a dataclass field
    """A ``Settings`` field filled by one option (see :class:`Option` for ``more``)."""
    opt = Option(flag, ini, kind, default, help, **more)
    return field(default=opt.settled(default), metadata={_DECLARATION: opt})


def parts(build: Callable[[dict[str, Given]], Any], **options: Option) -> Any:  # a dataclass field
    """A ``Settings`` field filled by several options, each named by its key."""
    decl = Parts(build, tuple(options.items()))
    return field(default=decl.default(), metadata={_DECLARATION: decl})


# -- checks: each gets an option's value as read and returns the field's value --------------------------------------


def at_least(minimum: float) -> Check:
    """A number of at least ``minimum`` (or unset, where the default is None)."""

    def check(given: Given, _: Resolving) -> Any:
        value = given.value
        if value is not None and value < minimum:
            raise pytest.UsageError(
                f"{given.source}: {given.option.name} must be ≥ {_number(minimum)}, got {_number(value)}"
            )
        return value

    return check


def _number(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _timeout(given: Given, _: Resolving) -> float | None:
    value = given.value
    if value is not None and not value > 0:
        raise pytest.UsageError(f"{given.source}: a reward timeout must be > 0 seconds, got {value:g}")
    return value


def _top_p(given: Given, _: Resolving) -> float:
    if not 0.0 < given.value <= 1.0:
        raise pytest.UsageError(f"{given.source}: top_p must be in (0, 1], got {given.value:g}")
    return given.value


def _confidence(given: Given, _: Resolving) -> float:
    if not 0.0 < given.value < 1.0:
        raise pytest.UsageError(f"{given.source}: a confidence level must be in (0, 1), got {given.value:g}")
    return given.value


def _storage(given: Given, ctx: Resolving) -> Path:
    """Stored runs always have a directory: an empty ini value means the default."""
    return given.value or ctx.config.rootpath / given.option.default


def _or_default(given: Given, _: Resolving) -> Any:
    """An empty ini value means the default."""
    return given.value or given.option.default


def _granularity(given: Given, ctx: Resolving) -> str:
    """``auto`` means ``file`` with a process or Ray executor (they score whole files); ``sample`` items are scored
    in the pytest process, so asking for both is a usage error."""
    kind, kind_source, _ = ctx.given["executor"]
    if kind == "thread":
        return given.value
    if given.value == "sample":
        raise pytest.UsageError(
            f"{given.source}: sample items are scored in the pytest process, but {kind_source} asks for "
            f"--reward-executor {kind}, which scores file items: use --reward-granularity file (or auto), or -n N "
            "(pytest-xdist) to spread sample items over processes"
        )
    return "file"


def _ray_address(given: Given, ctx: Resolving) -> str | None:
    """The Ray cluster to join; Ray itself must be installed when it is chosen (checked without importing it)."""
    value, source = given.value, given.source
    kind, kind_source, _ = ctx.given["executor"]
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


def _deploy_target(given: Given, ctx: Resolving) -> str | None:
    """None unless ``--reward-deploy`` was given; its value, else ini ``reward_deploy_target``, else ``""`` (the
    built-in target). The ini key alone deploys nothing."""
    opt = given.option
    if given.source != opt.flag:
        return None
    return given.value or ctx.config.getini(opt.ini) or ""


def _sample_fields(given: Given, _: Resolving) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(parse_fields(given.value, given.source).items())
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _samples(given: Given, ctx: Resolving) -> tuple[Path, ...]:
    return _expand_samples(given.value, ctx.config.invocation_params.dir)


def _expand_samples(values: tuple[str, ...], base: Path) -> tuple[Path, ...]:
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
            try:
                saved = directory_files(path) if path.is_dir() else None
            except DatasetError as exc:  # a save_to_disk directory missing a split or a shard it lists
                raise pytest.UsageError(f"--reward-samples {value}: {exc}") from None
            if saved is not None:
                for f in saved:
                    out.setdefault(f.resolve(), None)
                continue
            if path.is_dir():
                raise pytest.UsageError(
                    f"--reward-samples {value}: is a directory; pass JSONL files or a glob such as "
                    f"{value.rstrip('/')}/*{_samples_suffix(path)} (or a datasets save_to_disk directory)"
                )
            if not path.exists():
                raise pytest.UsageError(f"--reward-samples {value}: file not found")
            _refuse_special(f"--reward-samples {value}", path)
            files = [path]
        for f in files:
            out.setdefault(f.resolve(), None)
    return tuple(out)


def _samples_suffix(directory: Path) -> str:
    """The suffix of the first samples file in ``directory`` (``.jsonl`` when there is none)."""
    try:
        names = sorted(p.name for p in directory.iterdir() if is_samples_file(p.name))
    except OSError:
        names = []
    return Path(names[0]).suffix if names else ".jsonl"


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


# -- fields made of several options -----------------------------------------------------------------------------


def _default_gates(given: dict[str, Given]) -> Gates:
    """The gates every function starts from, each key remembering its source."""
    gates = Gates()
    try:
        for key, (value, source, _) in given.items():
            if value is None:
                continue
            if key == "quantile":
                value = parse_quantile_text(value, source)
            gates = gates.merged(validate_marker((), {key: value}, source), source)
    except GateError as exc:
        raise pytest.UsageError(str(exc)) from None
    return gates


def _pairs(given: dict[str, Given]) -> tuple[tuple[str, Any], ...]:
    return tuple((key, g.value) for key, g in given.items())


# -- the settings, each field with its option(s) ----------------------------------------------------------------


@dataclass_transform(frozen_default=True, field_specifiers=(option, parts))
def _declared_by_options(cls: type) -> type:
    """A frozen dataclass whose fields are declared with :func:`option` and :func:`parts`."""
    return dataclass(frozen=True)(cls)


@_declared_by_options
class Settings:
    """The plugin's settings for one session, resolved once. Every field is declared by its option(s); the order
    of the fields is the order of the option reference's table."""

    samples: tuple[Path, ...] = option(
        "--reward-samples",
        None,
        "paths",
        (),
        "Samples file: JSONL, Parquet or Arrow (repeatable, globs allowed); meets every reward function found.",
        metavar="PATH",
        append=True,
        check=_samples,
    )
    fn_specs: tuple[str, ...] = option(
        "--reward-fn",
        "reward_functions",
        "lines",
        (),
        "Use only this reward function: path.py::name or package.module:name; a trainer's function with its "
        "style first, STYLE:path.py::name (STYLE: trl, trl-standard, verl, openrlhf, slime, slime-group). "
        "Repeatable; in ini one per line (paths relative to the rootdir), replaced by the flag.",
        metavar="SPEC",
        append=True,
    )
    reward_modules: tuple[str, ...] = option(
        None,
        "reward_modules",
        "args",
        ("main.py", "reward_*.py", "*_reward.py", "rewards.py"),
        "File patterns of modules searched for @reward_function definitions (test modules are searched too).",
    )
    evaluations: tuple[str, ...] = option(
        None,
        "reward_evaluations",
        "args",
        (),
        "Evaluation classes to run besides those defined in test modules: package.module:Class or "
        "path/to/file.py::Class (one per entry).",
    )
    samples_glob: tuple[str, ...] = option(
        None,
        "reward_samples_glob",
        "args",
        (),
        "File patterns of samples files (JSONL, Parquet, Arrow) collected like test files; "
        "they meet the reward functions of their directory tree.",
    )
    sample_fields: tuple[tuple[str, str], ...] = option(
        None,
        "reward_sample_fields",
        "args",
        (),
        "Which column of a samples file (Parquet / Arrow, slime pack, JSONL line) is what: TARGET=column or "
        "TARGET=column.field (targets: "
        "messages, prompt, response, ground_truth, id, or a keyword argument); without it, verl's and TRL's "
        "schemas are recognised. A function's marker sample_fields={...} replaces it for that function.",
        check=_sample_fields,
    )
    """(target, dotted column path) for the rows of samples files (JSONL lines included)."""
    defaults: Gates = parts(
        _default_gates,
        threshold=Option(
            "--reward-threshold",
            "reward_threshold",
            "float",
            None,
            "Default per-sample pass score.",
            metavar="SCORE",
        ),
        mean=Option(
            "--reward-mean",
            "reward_mean",
            "float",
            None,
            "Default gate on the mean score per function x file.",
            metavar="SCORE",
        ),
        pass_rate=Option(
            "--reward-pass-rate",
            "reward_pass_rate",
            "float",
            None,
            "Default gate on the fraction of passing samples.",
            metavar="RATE",
        ),
        quantile=Option(
            "--reward-quantile",
            "reward_quantile",
            "str",
            None,
            "Default quantile gates, Q:BOUND pairs (e.g. 0.1:0.3).",
            metavar="Q:BOUND",
        ),
        confidence=Option(
            "--reward-confidence",
            "reward_confidence",
            "float",
            None,
            "Gate mean and pass rate on the lower bound of this two-sided interval (bootstrap / Wilson).",
            metavar="LEVEL",
        ),
    )
    """The gates every function starts from (its marker overrides them key by key)."""
    granularity: str = option(
        "--reward-granularity",
        "reward_granularity",
        "choice",
        "auto",
        "One item per sample ('sample'), one "
        "per function x file ('file'), or 'auto' (sample up to reward_max_items_per_file lines).",
        choices=("auto", "sample", "file"),
        check=_granularity,
    )
    max_items_per_file: int = option(
        None,
        "reward_max_items_per_file",
        "int",
        10000,
        "In auto granularity, files with more lines than this become one item per function.",
        check=at_least(0),
    )
    max_line_bytes: int = option(
        None,
        "reward_max_line_bytes",
        "int",
        8 * 1024 * 1024,
        "Longest accepted JSONL line in bytes, and largest slime pack sample as JSON; larger ones are errors.",
        check=at_least(1024),
    )
    executor: str = option(
        "--reward-executor",
        "reward_executor",
        "choice",
        "thread",
        "Where file items score their samples: 'thread' (in the pytest process), 'process' (worker processes on "
        "this machine, for CPU-bound rewards) or 'ray' (a local Ray, or the cluster at --reward-ray-address). "
        "With process or ray, auto granularity means file items.",
        choices=("thread", "process", "ray"),
    )
    """Where file items score their samples (:mod:`pytest_reward.scoring.executors`)."""
    workers: int | None = option(
        "--reward-workers",
        "reward_workers",
        "int",
        None,
        "Scoring workers of file items: threads or concurrent coroutines for I/O-bound rewards (thread; "
        "default 1), processes (process; default: the CPUs this process may use, shared out under -n), chunks "
        "running at once (ray; default: the cluster's CPUs).",
        metavar="N",
        check=at_least(1),
    )
    """Scoring workers (None: the executor's default)."""
    ray_address: str | None = option(
        "--reward-ray-address",
        "reward_ray_address",
        "str",
        None,
        "With --reward-executor ray: the cluster to score on (host:port of its GCS, or ray://host:10001); the "
        "project is shipped as the tasks' working_dir. Default: a local Ray on 127.0.0.1 for the run.",
        metavar="ADDR",
        check=_ray_address,
    )
    timeout: float | None = option(
        "--reward-timeout",
        "reward_timeout",
        "float",
        None,
        "Seconds one reward call may take; a call that takes longer fails its sample ('timed out after Ns') "
        "and the run goes on (marker key timeout= overrides it per function).",
        metavar="SECONDS",
        check=_timeout,
    )
    """Seconds one reward call may take (None: no limit)."""
    batch_size: int = option(
        "--reward-batch-size",
        "reward_batch_size",
        "int",
        32,
        "Chunk size for @reward_function(mode='batch').",
        metavar="N",
        check=at_least(1),
    )
    seed: int = option(
        "--reward-seed",
        "reward_seed",
        "int",
        0,
        "Seed of bootstrap intervals and sampled previews.",
        metavar="N",
    )
    n_resamples: int = option(
        None,
        "reward_bootstrap_resamples",
        "int",
        2000,
        "Bootstrap resamples for confidence intervals.",
        check=at_least(100),
    )
    replay_tolerance: float | None = option(
        "--reward-replay-tolerance",
        "reward_replay_tolerance",
        "float",
        None,
        "Rollout dumps (verl's rollout/validation JSONL, slime packs): fail a sample whose recomputed reward "
        "differs from the score the trainer recorded by more than T; a samples file with no recorded score fails "
        "the run (nothing was compared).",
        metavar="T",
        check=at_least(0.0),
    )
    """How far a recomputed reward may be from a dump's recorded one (None: unchecked)."""
    runs: int = option(
        "--reward-runs",
        "reward_runs",
        "int",
        1,
        "Score each sample K times (stochastic rewards such as LLM "
        "judges); a sample's score is the mean of its runs.",
        metavar="K",
        check=at_least(1),
    )
    flaky_spread: float = option(
        "--reward-flaky-spread",
        "reward_flaky_spread",
        "float",
        0.1,
        "With --reward-runs, list samples whose per-run standard deviation exceeds this as flaky.",
        metavar="SD",
    )
    preview: int = option(
        "--reward-preview",
        None,
        "int",
        0,
        "After the run, show N samples per function (worst first, then "
        "random with --reward-seed): conversation, score, metrics, reason, verdict. N defaults to 5.",
        metavar="N",
        const=5,
        check=at_least(0),
    )
    report_dir: Path | None = option(
        "--reward-report",
        "reward_report_dir",
        "path",
        None,
        "Write results.jsonl, summary.json and a self-contained report.html into this directory.",
        metavar="DIR",
        relative_to="origin",
    )
    storage: Path = option(
        None,
        "reward_storage",
        "path",
        ".reward",
        "Directory of stored runs (baselines), relative to the rootdir.",
        relative_to="rootdir",
        check=_storage,
    )
    save: str | None = option(
        "--reward-save",
        None,
        "str",
        None,
        "Store this run's per-sample scores as a baseline, optionally named (default: the git commit).",
        metavar="NAME",
        const="",
    )
    autosave: bool = option(
        "--reward-autosave", "reward_autosave", "bool", False, "Store every run, named <commit>_<time>."
    )
    compare: str | None = option(
        "--reward-compare",
        None,
        "str",
        None,
        "Compare with a stored run: its name, its number, 'latest' (default) or a path.",
        metavar="RUN",
        const="latest",
        value_may_be_a_file=True,
    )
    compare_fail: tuple[str, ...] = option(
        "--reward-compare-fail",
        "reward_compare_fail",
        "args",
        (),
        "Fail when a drop vs the compared run "
        "exceeds a tolerance: mean:0.02,pass_rate:0.05,sample:0.3; accuracy:0.05 for preference files "
        "(repeatable).",
        metavar="RULES",
        append=True,
    )
    compare_strict: bool = option(
        "--reward-compare-strict",
        "reward_compare_strict",
        "bool",
        False,
        "Fail mean and pass_rate rules only "
        "when the paired bootstrap interval of the drop also excludes zero.",
    )
    compare_confidence: float = option(
        "--reward-compare-confidence",
        "reward_compare_confidence",
        "float",
        0.99,
        "Confidence of the paired interval that --reward-compare-strict requires to exclude zero.",
        metavar="LEVEL",
        check=_confidence,
    )
    model: str | None = option(
        "--reward-model",
        "reward_model",
        "str",
        None,
        "Model for prompt-only samples and Evaluation items: a "
        "Hugging Face directory (config.json + safetensors) or a shipped example model by name (tiny-adder).",
        metavar="PATH_OR_NAME",
    )
    tokenizer: Path | None = option(
        "--reward-tokenizer",
        "reward_tokenizer",
        "path",
        None,
        "Tokenizer directory (tokenizer.json) when it is not the model's own.",
        metavar="PATH",
    )
    max_batch: int = option(
        "--reward-max-batch",
        "reward_max_batch",
        "int",
        32,
        "Rows per device per batch of the inference job; "
        "also how many prompt-only samples are rolled out per call.",
        metavar="N",
        check=at_least(1),
    )
    rollout: tuple[tuple[str, Any], ...] = parts(
        _pairs,
        n=Option(
            "--reward-rollout-n",
            "reward_rollout_n",
            "int",
            1,
            "Responses generated per prompt-only sample.",
            metavar="N",
            check=at_least(1),
        ),
        temperature=Option(
            "--reward-rollout-temperature",
            "reward_rollout_temperature",
            "float",
            0.0,
            "Sampling temperature of rollouts (0: greedy).",
            metavar="T",
            check=at_least(0.0),
        ),
        top_p=Option(
            "--reward-rollout-top-p",
            "reward_rollout_top_p",
            "float",
            1.0,
            "Nucleus sampling threshold of rollouts.",
            metavar="P",
            check=_top_p,
        ),
        max_new_tokens=Option(
            "--reward-rollout-max-new-tokens",
            "reward_rollout_max_new_tokens",
            "int",
            None,
            "Longest rollout, in new tokens (default: 64, or half the model's context when that is shorter).",
            metavar="N",
            check=at_least(1),
        ),
        seed=Option(
            "--reward-rollout-seed", "reward_rollout_seed", "int", 0, "Seed of sampled rollouts.", metavar="N"
        ),
    )
    """``RolloutSettings`` fields as (name, value) pairs; a marker's ``rollout=`` overrides them. Plain pairs, so
    that start-up does not import the rollouts module."""
    jax_cache_dir: Path | None = option(
        None,
        "reward_jax_cache_dir",
        "path",
        ".reward/jax-cache",
        "Persistent XLA compilation cache of the engine's programs (the --reward-model job's and reward_model(...)'s), "
        "relative to the rootdir (empty: off).",
        relative_to="rootdir",
    )
    coordinator: str | None = option(
        "--reward-coordinator",
        None,
        "str",
        None,
        "Multi-host run: the jax.distributed coordinator (process 0's host:port; default: "
        "JAX_COORDINATOR_ADDRESS). Every process runs the same pytest command.",
        metavar="HOST:PORT",
    )
    num_processes: int | None = option(
        "--reward-num-processes",
        None,
        "int",
        None,
        "Multi-host run: the number of processes (default: JAX_NUM_PROCESSES, else SLURM_NTASKS).",
        metavar="N",
        check=at_least(1),
    )
    process_id: int | None = option(
        "--reward-process-id",
        None,
        "int",
        None,
        "Multi-host run: this process's id, 0 to N-1 (default: JAX_PROCESS_ID, else SLURM_PROCID).",
        metavar="I",
        check=at_least(0),
    )
    collective_timeout: float = option(
        "--reward-collective-timeout",
        "reward_collective_timeout",
        "float",
        300.0,
        "Multi-host run: seconds a process waits for the others at a collective before it fails naming them.",
        metavar="SECONDS",
        check=at_least(0.001),
    )
    deploy_target: str | None = option(
        "--reward-deploy",
        "reward_deploy_target",
        "str",
        None,
        "After a fully green run, ship the reward "
        "functions that passed as a bundle to TARGET: dir:PATH (default dir:.reward/deploy), http(s)://URL, "
        "fireworks[:ID], or a scheme a plugin registers.",
        metavar="TARGET",
        const="",
        check=_deploy_target,
    )
    """Where to deploy (``""``: the built-in target); None unless ``--reward-deploy`` was given."""
    deploy_dry_run: bool = option(
        "--reward-deploy-dry-run",
        None,
        "bool",
        False,
        "Build the bundle and show what would be shipped; ship nothing.",
    )
    deploy_partial: bool = option(
        "--reward-deploy-partial",
        None,
        "bool",
        False,
        "Deploy even after a partial run (-k, -m, --lf, -x ...).",
    )
    bundle_name: str | None = option(
        None, "reward_bundle_name", "str", None, "Package name of deploy bundles (default rewards_<project>)."
    )
    bundle_include: tuple[str, ...] = option(
        None,
        "reward_bundle_include",
        "args",
        (),
        "Extra project files (globs) copied into deploy bundles, e.g. data files reward functions read.",
    )
    deploy_token_env: str = option(
        None,
        "reward_deploy_token_env",
        "str",
        "REWARD_DEPLOY_TOKEN",
        "Environment variable holding the bearer token of http(s) deploy targets.",
        check=_or_default,
    )

    def fields_for(self, marker: Marker) -> dict[str, str]:
        """The field mapping a function reads dataset files with: its marker's ``sample_fields`` when it has one
        (the marker wins for that function), else ini ``reward_sample_fields``."""
        return dict(self.sample_fields if marker.sample_fields is None else marker.sample_fields)

    @property
    def deploy(self) -> bool:
        """Whether ``--reward-deploy`` was given."""
        return self.deploy_target is not None

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


def _declared() -> tuple[Option, ...]:
    """Every option, in field order, its ``dest`` set (``field`` or ``field.key``)."""
    out: list[Option] = []
    for f in fields(Settings):
        decl = f.metadata[_DECLARATION]  # every field is declared by its option(s)
        if isinstance(decl, Parts):
            out.extend(replace(opt, dest=f"{f.name}.{key}") for key, opt in decl.options)
        else:
            out.append(replace(decl, dest=f.name))
    return tuple(out)


OPTIONS: tuple[Option, ...] = _declared()


# -- pytest's side: registering the options, reading them back -----------------------------------------------------


def register(parser: pytest.Parser) -> None:
    group = parser.getgroup("reward", "reward functions as tests (pytest-reward)")
    for opt in OPTIONS:
        if opt.flag:
            kwargs: dict[str, Any] = {"dest": opt.argname, "help": opt.help}
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
            ini_type = {"args": "args", "lines": "linelist", "bool": "bool"}.get(opt.kind, "string")
            if opt.kind in ("args", "lines"):
                default: Any = list(opt.default)
            elif opt.kind == "bool":
                default = opt.default
            else:
                default = None if opt.default is None else str(opt.default)
            parser.addini(opt.ini, opt.help, type=ini_type, default=default)


def _raw(config: pytest.Config, opt: Option) -> tuple[Any, str]:
    """The value of ``opt`` and where it came from: command line over ini over default."""
    if opt.flag:
        value = config.getoption(opt.argname, default=None)
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


def _convert(config: pytest.Config, opt: Option, value: Any, source: str) -> Any:
    """``value`` as read (a string, a list of strings, a bool) in the option's ``kind``."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return tuple(value)
    if opt.kind == "bool":
        return bool(value)
    if opt.kind == "path":
        from_ini = opt.relative_to == "rootdir" or (opt.relative_to == "origin" and source.startswith("ini"))
        return _path(value, config.rootpath if from_ini else config.invocation_params.dir)
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


def _path(value: str, base: Path) -> Path | None:
    if not value:
        return None
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base / path


def resolve(config: pytest.Config) -> Settings:
    """Resolve and validate all settings. Raises ``pytest.UsageError`` naming the bad value's source."""
    _check_swallowed(config)
    _check_positional_samples(list(config.args), config.invocation_params.dir)
    given: dict[str, Given] = {}
    for opt in OPTIONS:
        raw, source = _raw(config, opt)
        given[opt.dest] = Given(_convert(config, opt, raw, source), source, opt)
    ctx = Resolving(config, given)
    checked = {
        dest: g._replace(value=g.option.check(g, ctx)) if g.option.check else g for dest, g in given.items()
    }
    values: dict[str, Any] = {}
    for f in fields(Settings):
        decl = f.metadata[_DECLARATION]
        if isinstance(decl, Parts):
            values[f.name] = decl.build({key: checked[f"{f.name}.{key}"] for key, _ in decl.options})
        else:
            values[f.name] = checked[f.name].value
    return Settings(**values)


# -- paths that options with an optional value must not take -------------------------------------------------------


def _check_positional_samples(args: list[str], base: Path) -> None:
    """A samples-file path argument that is a FIFO, socket or device is a usage error naming it (pytest would
    report it as "not found", or collect nothing)."""
    for arg in args:
        head = arg.split("::", 1)[0]
        if is_samples_file(head):
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
    an existing file or directory, a samples file's name (``.jsonl``, ``.parquet``, any registered format's) or a
    ``.py`` file's; a value given as ``--opt=VALUE`` is always taken as it is."""
    given = _given_args(config)
    args = [a for a, _ in given]
    base = config.invocation_params.dir
    for opt in OPTIONS:
        if opt.const is None or opt.flag not in args:
            continue
        value = config.getoption(opt.argname, default=None)
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
    if is_samples_file(head):
        return "a samples file to test"
    if head.endswith(".py"):
        return "a Python file to test"
    path = Path(os.path.expanduser(head))
    path = path if path.is_absolute() else base / path
    if path.is_dir():
        return "a directory"
    if os.path.lexists(path) and not files_ok:
        return "an existing file"
    return None


# -- the option reference's table (docs/reference/options.md) ------------------------------------------------


def markdown_table() -> str:
    """The option reference of ``docs/reference/options.md``, generated from ``OPTIONS``."""
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
        elif opt.default in (None, (), ""):
            default = ""
        elif isinstance(opt.default, tuple):
            default = "`" + " ".join(opt.default) + "`"
        else:
            default = f"`{opt.default}`"
        rows.append(f"| {flag} | {ini} | {default} | {opt.help} |")
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    print(markdown_table())
