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
