"""What the plugin knows while it collects and runs items (one object on ``config.stash``, in every process): the
settings, the registry of reward functions and which samples files they meet, the model for prompt-only samples
and evaluations, and where file-granularity items stream their rows. The end of the run (aggregates, verdicts,
files) is :mod:`pytest_reward.plugin.controller`'s; its result is the frozen :class:`~pytest_reward.run.result.RunResult`."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from ..atomic import TEXT_ERRORS
from ..data.formats import DatasetError, directory_files, is_samples_file
from ..rewards.reward_model import locate_model, shipped_models, use_compilation_cache
from .options import Settings

if TYPE_CHECKING:
    from ..judge.gates import Gates
    from ..project.functions import Registry, RewardFn

__all__ = ["MODEL_MISSING", "REWARD_DATA", "RewardSession", "session_key"]


class RewardSession:
    """State shared by the plugin's hooks."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.registry: Registry | None = None
        self.explicit_files: set[Path] = set(settings.samples)
        self.is_worker = hasattr(config, "workerinput")
        #: Not asked for on the command line or in ini, but reward functions bind samples files in markers.
        self.bound_only = False
        self.parts_dir: Path | None = None
        self._row_sink: Any = None
        self._job: Any = None
        self._rollouts: Any = None
        self._executor: Any = None
        if settings.executor == "ray" and not self.is_worker and config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_RayXdistHooks(self), _RayXdistHooks.NAME)

    # -- discovery ---------------------------------------------------------------------------------------

    def note_explicit(self, args: list[str]) -> None:
        """Remember samples files (of any registered format) named as positional arguments, and the files of a
        directory that stands for samples files (they meet every unbound function)."""
        base = self.config.invocation_params.dir
        for arg in args:
            path = Path(arg.split("::", 1)[0])
            if not path.is_absolute():
                path = base / path
            if is_samples_file(path.name) and path.is_file():
                self.explicit_files.add(path.resolve())
            elif path.is_dir():  # e.g. a datasets save_to_disk directory: its Arrow files
                try:
                    files = directory_files(path) or ()
                except DatasetError as exc:  # a split or a shard it lists is missing
                    raise pytest.UsageError(f"{arg}: {exc}") from None
                self.explicit_files.update(f.resolve() for f in files)

    @property
    def owned_dirs(self) -> tuple[Path, ...]:
        """Directories the plugin owns (stored runs, the report): never collected (nor deploy bundles, wherever they
        are: ``discovery.written_by_plugin``)."""
        return tuple(p for p in (self.settings.storage, self.settings.report_dir) if p is not None)

    def wrote(self, path: Path) -> bool:
        """Whether ``path`` is a directory the plugin wrote (pytest must not collect it)."""
        from ..project.loading import written_by_plugin

        return path.is_dir() and written_by_plugin(path, self.owned_dirs, self.config.rootpath)

    @property
    def active(self) -> bool:
        """Reward testing was asked for (options, ini, or a ``.jsonl`` path argument)."""
        return self.settings.active or bool(self.explicit_files)

    @property
    def collecting(self) -> bool:
        return self.active or self.bound_only

    def discover(self, session: pytest.Session, *, light: bool = False) -> Registry:
        """Find the reward functions once (both on workers and on the controller).

        ``light``: for runs that did not ask for reward testing — only reward modules under pytest's own
        arguments, no test modules; used to find functions whose marker binds samples files.
        """
        if self.registry is not None:
            return self.registry
        from .discovery import DiscoveryOptions, discover

        config = self.config
        roots: list[Path] = []
        for arg in config.args:
            path = Path(arg.split("::", 1)[0])
            if not path.is_absolute():
                path = config.invocation_params.dir / path
            if path.is_dir() or (path.is_file() and path.suffix == ".py"):
                roots.append(path)
        if not light and (self.explicit_files or not roots):
            # Named samples files meet every reward function of the project.
            roots.append(config.rootpath)
        roots = list(dict.fromkeys(p.resolve() for p in roots))
        # the specs come from --reward-fn, else from ini reward_functions
        from_flag = bool(config.getoption("reward_fn", default=None))
        opts = DiscoveryOptions(
            roots=roots,
            rootdir=config.rootpath,
            importmode=config.getoption("importmode"),
            reward_modules=self.settings.reward_modules,
            python_files=tuple(config.getini("python_files")),
            norecursedirs=tuple(config.getini("norecursedirs")),
            fn_specs=self.settings.fn_specs,
            fn_source="--reward-fn" if from_flag else "ini reward_functions",
            fn_base=None if from_flag else config.rootpath,  # ini entries: relative to the rootdir
            defaults=self.settings.defaults,
            invocation_dir=config.invocation_params.dir,
            test_modules=not light,
            owned_dirs=self.owned_dirs,
        )
        warm = not light and self.settings.executor == "process" and self._runs_items()
        if warm:
            self.executor.start()  # the workers boot (import the plugin) while the reward modules are found
        self.registry = discover(opts, config)
        if warm:
            # and import the reward modules while pytest collects (a heavy import costs its seconds here)
            self.executor.preload(self.registry.usable(), config.rootpath)
        if light:
            self.registry.import_errors.clear()  # not asked for: never break an unrelated run
            self.bound_only = any(fn.is_bound for fn in self.registry.functions)
        return self.registry

    def check_found(self) -> None:
        """Usage error when reward testing was asked for but no reward function exists."""
        registry = self.registry
        if registry is None or not self.active or registry.functions:
            return
        if registry.selected and registry.import_errors:
            raise pytest.UsageError("\n".join(f"{where}: {msg}" for where, msg in registry.import_errors))
        lines = ["pytest-reward: no reward functions found."]
        if not registry.selected:
            lines.append("  Looked in: " + ", ".join(registry.looked_in))
            lines.append(
                "  for modules matching "
                + " ".join(registry.patterns)
                + " (ini reward_modules) and test modules "
                "mentioning @reward_function."
            )
            lines.append(
                "  Decorate a function with @reward_function, or name one with --reward-fn path.py::name."
            )
        for where, msg in registry.import_errors:
            lines.append(f"  Could not import {where}: {msg}")
        raise pytest.UsageError("\n".join(lines))

    def idle_note(self) -> list[str]:
        """For a run that found reward functions but gave them no samples (plain ``pytest`` in a reward project):
        which functions, and how to give them samples. Empty otherwise."""
        registry = self.registry
        if registry is None or self.collecting or not registry.functions:
            return []
        found = [f"{self.rel(fn.path)}::{fn.qualname}" for fn in registry.functions]
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        return [
            f"pytest-reward: found {len(found)} reward function{'s' if len(found) != 1 else ''} ({shown}) "
            "but no samples to score them on.",
            "  Give them samples: pytest --reward-samples FILE (or a .jsonl path argument), ini "
            "reward_samples_glob = *.jsonl, or @pytest.mark.reward(samples=FILE) on the function.",
        ]

    def check_reportable(self) -> None:
        """Invalid reward functions are reported by the first samples file collected: named or bound files are
        sure to be; with none (a ``reward_samples_glob`` may match no file), here, before collection."""
        registry = self.registry
        if registry is None or self.explicit_files or registry.bound_paths():
            return
        errors = registry.errors()
        if errors:
            raise pytest.UsageError(
                "pytest-reward: invalid reward functions:\n" + "\n".join(f"  {e}" for e in errors)
            )

    def wants_file(self, path: Path) -> tuple[bool, bool, bool]:
        """(collect?, explicit?, glob-matched?) for a samples file met during collection."""
        resolved = path.resolve()
        explicit = resolved in self.explicit_files
        globbed = any(fnmatch.fnmatch(path.name, pat) for pat in self.settings.samples_glob)
        bound = self.registry is not None and resolved in set(self.registry.bound_paths())
        return explicit or globbed or bound, explicit, globbed

    def functions_for(self, path: Path, *, explicit: bool, globbed: bool) -> list[RewardFn]:
        assert self.registry is not None
        return self.registry.for_file(path, explicit=explicit, globbed=globbed)

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.config.rootpath.resolve()).as_posix()
        except ValueError:
            return str(path)

    def gates_of(self, name: str) -> Gates | None:
        """The gates of the session's reward function ``name`` (None: not one of them)."""
        fn = next((f for f in self.registry.functions if f.name == name), None) if self.registry else None
        return fn.gates if fn is not None else None

    # -- models (prompt-only samples, Evaluation items) -----------------------------------------------------

    def inference_job(self) -> Any:
        """Build the session's InferenceJob from the settings, once (the ``inference_job`` fixture's default)."""
        if self._job is not None:
            return self._job
        settings = self.settings
        if not settings.model:
            pytest.fail(MODEL_MISSING, pytrace=False)
        located = locate_model(settings.model)
        if located is None:  # checked before importing jax: a typo should not cost a jax import
            pytest.fail(
                f"--reward-model {settings.model}: not a model directory (no config.json) and not a shipped example "
                f"model (available: {', '.join(shipped_models('lm')) or 'none'})",
                pytrace=False,
            )
        try:
            from ..jax import InferenceJob, load_tokenizer, resolve_model

            path = resolve_model(located)
            tokenizer: Any = load_tokenizer(settings.tokenizer) if settings.tokenizer else "auto"
            use_compilation_cache(settings.jax_cache_dir)
            job = InferenceJob.from_checkpoint(
                path, tokenizer=tokenizer, per_device_batch_size=settings.max_batch
            )
        except ImportError as exc:
            pytest.fail(
                f"--reward-model needs the jax extra: pip install 'pytest-reward[jax]' ({exc})", pytrace=False
            )
        except Exception as exc:
            pytest.fail(f"--reward-model {settings.model}: {type(exc).__name__}: {exc}", pytrace=False)
        vocab = getattr(job.tokenizer, "vocab_size", None)
        if vocab is not None and vocab > job.config.vocab_size:
            pytest.fail(
                f"--reward-tokenizer: the tokenizer has {vocab} tokens but the model's vocabulary has "
                f"{job.config.vocab_size}: they do not belong together",
                pytrace=False,
            )
        self._job = job
        return job

    def rollout_settings(self, overrides: dict[str, Any]) -> Any:
        from ..scoring.rollouts import RolloutSettings

        return RolloutSettings(**{**dict(self.settings.rollout), **overrides})

    @property
    def rollouts(self) -> Any:
        if self._rollouts is None:
            from ..scoring.rollouts import RolloutPool

            self._rollouts = RolloutPool(self.settings.max_batch, progress=self.progress)
        return self._rollouts

    def progress(self, label: str, total: int) -> Any:
        from ..report.progress import Progress

        return Progress(self.config, label, total)

    # -- the executor of file-granularity items (--reward-executor) ------------------------------------------

    def _runs_items(self) -> bool:
        """Whether this process runs items (not the controller of pytest-xdist workers, not --collect-only)."""
        config = self.config
        if config.option.collectonly:
            return False
        return self.is_worker or config.getoption("dist", "no") == "no"

    @property
    def executor(self) -> Any:
        """Where ``file`` items score their samples (:mod:`pytest_reward.scoring.executors`), made on first use."""
        if self._executor is None:
            from ..scoring.executors import make_executor

            settings = self.settings
            workers = settings.workers
            if workers is None and settings.executor == "process" and self.is_worker:
                # under -n N the machine's CPUs are shared by the N pytest workers' pools
                from ..scoring.executors import available_cpus

                count = int(self.config.workerinput.get("workercount", 1))  # type: ignore[attr-defined]
                workers = max(1, available_cpus() // max(1, count))
            address, local = settings.ray_address, False
            if self.is_worker and settings.executor == "ray" and address is None:
                # the local Ray that the xdist controller started for the run (see _RayXdistHooks)
                address = self.config.workerinput.get("reward_ray_address")  # type: ignore[attr-defined]
                local = address is not None
            self._executor = make_executor(
                settings.executor,
                workers=workers,
                ray_address=address,
                ray_local=local,
                rootdir=self.config.rootpath,
            )
        return self._executor

    def close_executor(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.close()
        plugin = self.config.pluginmanager.get_plugin(_RayXdistHooks.NAME)
        if plugin is not None:
            self.config.pluginmanager.unregister(plugin)

    # -- rows of file-granularity items (they cannot travel in reports) -------------------------------------

    def setup_parts_dir(self) -> None:
        """Where file-granularity items stream their per-sample rows for the controller (when needed)."""
        if self.is_worker:
            value = self.config.workerinput.get("reward_parts_dir")  # type: ignore[attr-defined]
            self.parts_dir = Path(value) if value else None
        elif self.settings.needs_rows:
            import os
            import tempfile

            from ..atomic import remove_dead_owners

            # Named by this process: a later run removes what a killed one left (its pid is gone).
            remove_dead_owners(Path(tempfile.gettempdir()), _ROWS_PREFIX)
            self.parts_dir = Path(tempfile.mkdtemp(prefix=f"{_ROWS_PREFIX}{os.getpid()}-"))

    def open_rows_part(self, function: str, file: str) -> IO[str] | None:
        if self.parts_dir is None:
            return None
        import uuid

        return open(self.parts_dir / f"{uuid.uuid4().hex}.jsonl", "w", encoding="utf-8", errors=TEXT_ERRORS)

    def write_row(self, row: str) -> list[Any] | None:
        """Append one sample item's full results.jsonl row to this process's rows file; returns where it is
        (``[path, offset, length]``, for the controller to copy from), or None when no report is written."""
        if self.parts_dir is None:
            return None
        sink = self._row_sink
        if sink is None:
            import uuid

            sink = self._row_sink = open(self.parts_dir / f"items-{uuid.uuid4().hex}.jsonl", "ab")  # noqa: SIM115
        data = (row + "\n").encode("utf-8", TEXT_ERRORS)  # a lone surrogate: its JSON escape, never an error
        offset = sink.tell()
        sink.write(data)
        sink.flush()  # the controller (maybe another process) reads it at the end of the session
        return [sink.name, offset, len(data)]

    def cleanup(self) -> None:
        self.close_executor()
        if self._row_sink is not None:
            self._row_sink.close()
            self._row_sink = None
        if self.parts_dir is not None and not self.is_worker:
            import shutil

            shutil.rmtree(self.parts_dir, ignore_errors=True)


_ROWS_PREFIX = "pytest-reward-rows-"


class _RayXdistHooks:
    """``--reward-executor ray`` under pytest-xdist without an address: the controller starts one local Ray for the
    run, and its pytest workers join it (instead of each starting a Ray of its own)."""

    NAME = "pytest-reward-ray-xdist"

    def __init__(self, rs: RewardSession) -> None:
        self.rs = rs
        self.address: str | None = None

    def pytest_configure_node(self, node: Any) -> None:
        if self.rs.settings.ray_address is not None:
            return  # the workers join the cluster named on the command line themselves
        if self.address is None:
            from ..scoring.executors import make_executor

            executor = make_executor("ray", workers=self.rs.settings.workers)
            executor.start()
            self.rs._executor = executor  # closed with the session
            self.address = executor.cluster_address
        node.workerinput["reward_ray_address"] = self.address


MODEL_MISSING = (
    "no model to roll out prompt-only samples or run evaluations: pass --reward-model PATH_OR_NAME (a Hugging Face "
    "model directory, or a shipped example such as tiny-adder), set ini reward_model, or define an "
    "inference_job fixture in conftest.py"
)
session_key = pytest.StashKey[RewardSession]()
#: Reward data of an item's call phase, copied onto its report (``report.reward``) by the plugin.
REWARD_DATA = pytest.StashKey[dict[str, Any]]()
