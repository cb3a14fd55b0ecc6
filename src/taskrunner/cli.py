"""The ``taskrunner`` command.

Exit codes: 0 success; 1 an operation failed (e.g. the backend is unreachable);
2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from taskrunner.backends import DEFAULT_URL
from taskrunner.errors import BackendError, ConfigurationError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taskrunner", description="Run and operate taskrunner workers."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="dispatch and process a few thousand tasks, with live progress"
    )
    demo.add_argument("--url", default=DEFAULT_URL, help="backend URL (default: %(default)s)")
    demo.add_argument("--tasks", type=int, default=3000, help="tasks to dispatch")
    demo.add_argument("--workers", type=int, default=64, help="worker pool size")
    demo.add_argument(
        "--log-level",
        default="critical",
        choices=["debug", "info", "warning", "error", "critical"],
        help="log level (default: %(default)s; the demo prints its own progress)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command == "demo":
            from taskrunner.demo import run_demo

            asyncio.run(run_demo(url=args.url, tasks=args.tasks, workers=args.workers))
    except ConfigurationError as exc:
        print(f"taskrunner: configuration error: {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:
        print(f"taskrunner: backend error: {exc}", file=sys.stderr)
        return 1
    return 0
