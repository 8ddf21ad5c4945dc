"""``pytest-reward serve``'s command line: the arguments, and the handler that turns them into a running server
(or one ``error:`` line and exit status 2). Cheap to import: the server itself loads when the command runs."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable

from ...errors import ServeError
from .options import DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY, ENV_TOKEN, ServeOptions

__all__ = ["configure"]


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)i?[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (bytes, or with a K/M/G suffix)")
    return int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[match.group(2).lower()]


_DESCRIPTION = """\
Serve tested reward functions over HTTP, in the formats RL trainers speak:

  GET  /health  /manifest
  POST /reward               reward-kit: {messages, ground_truth?, **kwargs} -> EvaluateResult
  POST /evaluate             reward-kit generic server / Fireworks shim: {messages, ground_truth?, tools?, kwargs?}
  POST /openrlhf/get_reward  OpenRLHF --reward.remote_url: {query, prompts, labels} -> {rewards, scores, extra_logs}
  POST /get_reward           the same
  POST /slime                slime --rm-url: {prompt, response, label} -> number (?format=dict: a dict)

With several functions these score their weighted mean; /functions/NAME/<route> scores one.
A failing or timed-out reward answers 200 with score 0 and is_score_valid false. See docs/serve.md.
"""


def configure(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Add ``pytest-reward serve``'s arguments to ``parser``; returns its handler."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = _DESCRIPTION
    parser.add_argument(
        "target",
        metavar="BUNDLE_OR_MODULE",
        help="a bundle directory or .tar.gz (pytest --reward-deploy), a .py file, or package.module[:function]",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"require this token (Authorization: Bearer, X-Api-Key or ?token=); default: ${ENV_TOKEN} if set",
    )
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--threads", type=int, default=8, help="threads per process for sync reward functions (default 8)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        help="seconds a request's reward calls may take; later: score 0, is_score_valid false (default 20)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        help="seconds within which request headers, then the body, must arrive (default 10)",
    )
    parser.add_argument(
        "--max-body", type=_size, default=DEFAULT_MAX_BODY, help="largest request body, e.g. 8M (default 8M)"
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_BATCH,
        metavar="N",
        help=f"most samples in one request (OpenRLHF's query list); more get 413 (default {DEFAULT_MAX_BATCH})",
    )
    parser.add_argument(
        "--max-connections", type=int, default=1024, help="concurrent connections before 503 (default 1024)"
    )
    parser.add_argument("--function", default=None, metavar="NAME", help="serve only this reward function")
    parser.add_argument("--no-access-log", action="store_true", help="no access-log line per request")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="(default info)"
    )

    def handle(args: argparse.Namespace) -> int:
        token = args.token if args.token is not None else os.environ.get(ENV_TOKEN) or None
        try:
            from .server import run  # the server's dependencies (starlette, uvicorn, pydantic) load here

            options = ServeOptions(
                token=token,
                timeout=args.timeout,
                read_timeout=args.read_timeout,
                max_body=args.max_body,
                max_batch=args.max_batch,
                threads=args.threads,
                access_log=not args.no_access_log,
            )
            return run(
                args.target,
                host=args.host,
                port=args.port,
                workers=args.workers,
                function=args.function,
                options=options,
                max_connections=args.max_connections,
                log_level=args.log_level,
            )
        except ServeError as exc:
            print(f"pytest-reward serve: error: {exc}", file=sys.stderr)
            return 2
        except ImportError as exc:
            print(
                f"pytest-reward serve: error: {exc}; install the server: pip install 'pytest-reward[serve]'",
                file=sys.stderr,
            )
            return 2

    return handle
