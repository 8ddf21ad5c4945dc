"""The ``pytest-reward`` command: helpers around the pytest plugin (the plugin itself runs inside pytest)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from . import __version__

__all__ = ["main"]

#: Subcommands register here: name -> (help, configure(parser) -> handler(args) -> exit code).
SUBCOMMANDS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], Callable[[argparse.Namespace], int]]]
] = {}


def _compare_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("baseline", help="stored run to compare against: name, number, 'latest' or a path")
    parser.add_argument("current", help="stored run to compare: name, number, 'latest' or a path")
    parser.add_argument("--storage", default=".reward", help="directory of stored runs (default: .reward)")
    parser.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="RULES",
        help="fail (exit 1) when a drop exceeds a tolerance: mean:0.02,pass_rate:0.05,sample:0.3 (a probe that "
        "passed in BASELINE and fails in CURRENT fails it without a rule)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="mean/pass_rate rules need the interval below zero too"
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument(
        "--confidence", type=float, default=0.99, help="confidence of the strict rule (default 0.99)"
    )

    def run(args: argparse.Namespace) -> int:
        from pathlib import Path

        from .errors import UsageError
        from .report.terminal import render_comparison, render_probe_changes, terminal_width
        from .report.text import visible
        from .run.baseline import (
            Storage,
            compare_probes,
            compare_runs,
            evaluate_rules,
            parse_rules,
            probe_regressions,
        )

        storage = Storage(Path(args.storage))
        try:
            rules = parse_rules(args.fail, "--fail")
            base_path, cur_path = storage.resolve(args.baseline), storage.resolve(args.current)
            if base_path.resolve() == cur_path.resolve():
                raise UsageError(
                    f"{args.baseline!r} and {args.current!r} are the same stored run ({base_path.stem}): "
                    "nothing to compare; name two different runs (see the list in "
                    f"{storage.directory})"
                )
            base, cur = storage.load(base_path), storage.load(cur_path)
        except UsageError as exc:
            print(visible(f"pytest-reward compare: {exc}"), file=sys.stderr)
            return 4
        comparisons = compare_runs(
            cur, base, seed=args.seed, n_resamples=args.resamples, strict_confidence=args.confidence
        )
        markup = sys.stdout.isatty()
        width = terminal_width()
        print(visible(f"{cur_path.stem} vs {base_path.stem}"))
        print(render_comparison(comparisons, base_path.stem, markup=markup, width=width), end="")
        probe_changes = compare_probes(cur, base)
        if probe_changes:
            print(render_probe_changes(probe_changes, markup=markup, width=width), end="")
        failures = evaluate_rules(comparisons, rules, strict=args.strict)
        failures += probe_regressions(
            probe_changes
        )  # a probe that passed there and fails now: no rule needed
        for line in failures:
            print(visible(f"FAIL {line}"))
        return 1 if failures else 0

    return run


def _metrics_folders_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-folders",
        "-m",
        nargs="+",
        action="extend",
        required=True,
        metavar="NAME=PATH",
        help="metrics folders: a directory whose main.py defines a @reward_function (repeatable)",
    )


def _preview_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    _metrics_folders_argument(parser)
    parser.add_argument("--samples", "-s", required=True, metavar="FILE", help="samples file (JSONL)")
    parser.add_argument(
        "--max-samples",
        type=int,
        default=5,
        metavar="N",
        help="run the first N samples of the file (default 5; 0: all)",
    )

    def run(args: argparse.Namespace) -> int:
        from .errors import UsageError
        from .plugin.metrics_folders import preview_folders

        try:
            return preview_folders(args.metrics_folders, args.samples, max_samples=args.max_samples).exit_code
        except UsageError as exc:
            if not getattr(exc, "shown", False):  # not printed by the session already
                print(f"pytest-reward preview: {exc}", file=sys.stderr)
            return 4

    return run


def _deploy_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("--id", required=True, help="evaluator id: the deployment's name at the target")
    _metrics_folders_argument(parser)
    parser.add_argument("--display-name", help="display name carried by the deployment (default: the id)")
    parser.add_argument("--description", help="description carried by the deployment")
    parser.add_argument(
        "--force", "-f", action="store_true", help="replace an existing deployment with this id"
    )
    parser.add_argument(
        "--target",
        help="dir:PATH, http(s)://URL, fireworks[:ID] or a plugin's scheme (default: ini reward_deploy_target, "
        "else dir:.reward/deploy)",
    )
    parser.add_argument(
        "--samples",
        "-s",
        metavar="FILE",
        help="samples file to test on (default: the samples bound by marker or ini reward_samples_glob)",
    )

    def run(args: argparse.Namespace) -> int:
        from .errors import RewardDeployError, UsageError
        from .plugin.metrics_folders import deploy_folders

        try:
            result = deploy_folders(
                args.id,
                args.metrics_folders,
                display_name=args.display_name,
                description=args.description,
                force=args.force,
                target=args.target,
                samples=args.samples,
            )
        except UsageError as exc:
            if not getattr(exc, "shown", False):  # not printed by the session already
                print(f"pytest-reward deploy: {exc}", file=sys.stderr)
            return 4
        except RewardDeployError as exc:
            print(f"pytest-reward deploy: {exc}", file=sys.stderr)
            return 1
        print(
            f"Deployed evaluator {result['id']!r}: {result['name']} ({result['bundle']} at {result['location']})"
        )
        return 0

    return run


SUBCOMMANDS["compare"] = ("Compare two stored runs (no test is run).", _compare_command)
SUBCOMMANDS["preview"] = (
    "Run the reward functions of metrics folders on samples and show the preview (reward-kit's preview).",
    _preview_command,
)
SUBCOMMANDS["deploy"] = (
    "Test metrics folders on their samples and deploy them under an id if green (reward-kit's deploy).",
    _deploy_command,
)
SUBCOMMANDS["serve"] = (
    "Serve reward functions over HTTP to RL trainers (reward-kit, OpenRLHF, slime routes).",
    lambda parser: __import__("pytest_reward.deploy.serve", fromlist=["configure"]).configure(parser),
)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    parser = argparse.ArgumentParser(
        prog="pytest-reward",
        description="Reward functions as test suites. Run them with: pytest --reward-samples samples.jsonl",
    )
    parser.add_argument("--version", action="version", version=f"pytest-reward {__version__}")
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {}
    if SUBCOMMANDS:
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        for name, (help_text, configure) in SUBCOMMANDS.items():
            handlers[name] = configure(sub.add_parser(name, help=help_text, description=help_text))
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    command = getattr(args, "command", None)
    if command is None:
        parser.print_help()
        return 0
    return handlers[command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
