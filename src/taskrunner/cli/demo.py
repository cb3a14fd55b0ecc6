"""``taskrunner demo``: a producer and a burst worker with live progress."""

from __future__ import annotations

import argparse
import asyncio
import sys

from taskrunner.cli import dashboard
from taskrunner.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Parser,
    UsageError,
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
    demo.add_argument(
        "--dashboard",
        action="store_true",
        help="also serve the web dashboard of the demo's queue, in this process, until "
        "Ctrl-C (extra 'dashboard'; --port, --addr, --allow-actions as for "
        "'taskrunner dashboard')",
    )
    dashboard.web_options(demo)


async def run_demo_command(args: argparse.Namespace, settings: Settings) -> int:
    """Run the demo; a signal stops its worker (a second one skips the drain)."""
    if args.dashboard:
        return await _demo_with_dashboard(args, settings)
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


async def _demo_with_dashboard(args: argparse.Namespace, settings: Settings) -> int:
    """The demo with the dashboard served beside it, and on after it until a signal.

    A signal stops the demo's worker as without the dashboard, and the dashboard once
    the demo has ended.
    """
    from taskrunner.demo import run_demo

    package = dashboard.import_dashboard()
    from taskrunner.dashboard.server import check_bind_address

    try:
        addr = check_bind_address(args.addr, allow_remote=args.allow_remote)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    runners: list[Runner] = []
    guard = dashboard.dashboard_guard(args)
    board = package.build.build_dashboard(
        settings.url,
        [],
        guard=guard,
        actions=args.allow_actions,
        completed_source=lambda: sum(r.stats().succeeded for r in runners),
        loopback_only=not args.allow_remote,
    )

    def on_runner(runner: Runner) -> None:
        runners.append(runner)
        board.queues.names.append(runner.queue_name)

    async def demo() -> None:
        await run_demo(
            url=settings.url, tasks=args.tasks, num_workers=args.num_workers, on_runner=on_runner
        )
        print("demo finished; the dashboard stays up until Ctrl-C", flush=True)

    server = package.server.Server(board, host=addr, port=args.port)
    dashboard.bind(server)
    print(dashboard.access_line(guard, actions=args.allow_actions), flush=True)
    stop = asyncio.Event()

    def on_signal(_: int) -> None:
        for runner in runners:
            runner.stop()
        stop.set()

    with signal_handlers(on_signal):
        async with asyncio.TaskGroup() as group:
            serving = group.create_task(server.run())
            port = await server.started()
            host = f"[{addr}]" if ":" in addr else addr
            print(f"dashboard at http://{host}:{port}/", flush=True)
            group.create_task(demo())
            stopping = group.create_task(stop.wait())
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            server.stop()
            stopping.cancel()
    return EXIT_OK
