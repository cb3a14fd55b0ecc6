"""``taskrunner demo``: a producer and a burst worker with live progress."""

from __future__ import annotations

import argparse
import asyncio
import sys

from taskrunner.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Parser,
    common_options,
    positive_int,
    renamed_flag,
    signal_handlers,
)
from taskrunner.runner import Runner
from taskrunner.settings import Settings

__all__ = ["add_parser", "run_demo_command"]


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add the ``demo`` command."""
    demo = commands.add_parser(
        "demo",
        parents=[common_options(output=False)],
        help="dispatch and process a few thousand tasks, with live progress",
        description="A producer and a burst worker on the configured backend (default "
        "memory://, nothing to install). On a shared backend the demo uses a queue of "
        "its own and deletes it at the end.",
    )
    demo.add_argument("--tasks", type=positive_int, default=3000, help="tasks to dispatch")
    demo.add_argument(
        "--num-workers",
        type=positive_int,
        default=64,
        help="the demo worker's pool size (default: %(default)s; the demo sets its own "
        "runner settings)",
    )
    renamed_flag(demo, "--workers", "--num-workers")


async def run_demo_command(args: argparse.Namespace, settings: Settings) -> int:
    """Run the demo; a signal stops its worker (a second one skips the drain)."""
    from taskrunner.demo import run_demo

    runners: list[Runner] = []
    main_task = asyncio.current_task()

    def on_signal(signum: int) -> None:
        if not runners and main_task is not None and not main_task.cancelling():
            # Once only: a second cancellation would cut short the clean-up that
            # deletes the demo's queue.
            main_task.cancel()
        for runner in runners:
            runner.stop()  # the second signal skips the drain

    with signal_handlers(on_signal):
        try:
            await run_demo(
                url=settings.url,
                tasks=args.tasks,
                num_workers=args.num_workers,
                on_runner=runners.append,
            )
        except asyncio.CancelledError:
            print("taskrunner: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
    return EXIT_OK
