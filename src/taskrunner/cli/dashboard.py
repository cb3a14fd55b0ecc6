"""``taskrunner dashboard``: the web view of the queues (needs the ``dashboard`` extra).

Serves until SIGINT/SIGTERM. Read-only unless ``--allow-actions``; then the token
(``TASKRUNNER_DASHBOARD_TOKEN``, or the older ``TR_DASHBOARD_TOKEN``, or a random one
printed at start) signs a browser in for retry and purge, for ``--session-hours``
(8 by default). Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from taskrunner.app import App
from taskrunner.cli.app import load_app
from taskrunner.cli.common import (
    DEFAULT_QUEUE,
    EXIT_OK,
    Parser,
    UsageError,
    app_options,
    signal_handlers,
)
from taskrunner.redaction import mask_url
from taskrunner.settings import Settings

__all__ = ["DEFAULT_PORT", "add_parser", "dashboard_guard", "import_dashboard", "run_dashboard"]

DEFAULT_PORT = 8181
_INSTALL = "pip install 'taskrunner-queue[dashboard]'"


def add_parser(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``dashboard`` command."""
    parser = commands.add_parser(
        "dashboard",
        parents=[common],
        help="serve a web dashboard of the queues (extra 'dashboard')",
        description="A web view of the queues: counts, workers, throughput, dead letters. "
        f"Needs the dashboard extra: {_INSTALL}.",
    )
    app_options(parser)
    parser.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help="queue to show (repeatable; default: the App's queue, else every queue the "
        "backend can list, else 'default')",
    )
    web_options(parser)


def web_options(parser: argparse.ArgumentParser) -> None:
    """``--port``, ``--addr``, ``--allow-remote``, ``--allow-actions`` and ``--session-hours``.

    Shared with the demo.
    """
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help="port (default: %(default)s; 0: any)"
    )
    parser.add_argument(
        "--addr", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow an --addr other machines can reach (payloads become visible to them)",
    )
    parser.add_argument(
        "--allow-actions",
        action="store_true",
        help="offer retry and purge of dead letters, to a browser signed in with the token "
        "(TASKRUNNER_DASHBOARD_TOKEN, or one printed at start)",
    )
    parser.add_argument(
        "--session-hours",
        type=_hours,
        default=8.0,
        metavar="HOURS",
        help="with --allow-actions: a sign-in lasts this long (default: %(default)s)",
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {port}")
    return port


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    # Also refuses nan and inf: a session must end.
    if not 0 < hours < float("inf"):
        raise argparse.ArgumentTypeError(f"session hours must be positive, got {text}")
    return hours


def import_dashboard() -> Any:
    """The dashboard package, or a UsageError naming the extra to install."""
    try:
        import taskrunner.dashboard.build
        import taskrunner.dashboard.server
    except ImportError as exc:
        missing = exc.name or "a module"
        raise UsageError(
            f"the dashboard needs the extra ({missing} is missing): {_INSTALL}"
        ) from exc
    return taskrunner.dashboard


def dashboard_guard(args: argparse.Namespace) -> Any:
    """The `Guard` for ``--allow-actions`` (None without it); prints a generated token."""
    if not args.allow_actions:
        return None
    from taskrunner.dashboard.security import Guard, token_from_env

    try:
        given = token_from_env(os.environ)
        guard = Guard(given, session_seconds=args.session_hours * 3600)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if given is None:
        # On stdout, for the operator who started it; never logged.
        print(f"dashboard action token (sign in with it): {guard.token}", flush=True)  # noqa: T201
    return guard


async def serve_until_signal(server: Any, addr: str, url: str) -> None:
    """Run `server` until SIGINT/SIGTERM; prints where it listens."""
    stop = asyncio.Event()
    with signal_handlers(lambda _: stop.set()):
        async with asyncio.TaskGroup() as group:
            serving = group.create_task(server.run())
            port = await server.started()
            host = f"[{addr}]" if ":" in addr else addr
            where = f"dashboard of {mask_url(url)} at http://{host}:{port}/ (Ctrl-C stops)"
            print(where, flush=True)  # noqa: T201
            stopping = group.create_task(stop.wait())
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            server.stop()
            stopping.cancel()


async def run_dashboard(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the dashboard until SIGINT/SIGTERM."""
    package = import_dashboard()
    from taskrunner.dashboard.server import check_bind_address

    try:
        addr = check_bind_address(args.addr, allow_remote=args.allow_remote)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    app = None if settings.app is None else load_app(settings.app, where=settings.source_of("app"))
    names: list[str] = args.queue or [app.queue if app is not None else DEFAULT_QUEUE]
    for name in names:
        App(name)  # the App's rule for queue names, so a bad --queue fails here, named
    board = package.build.build_dashboard(
        settings.url,
        names,
        app=app,
        guard=dashboard_guard(args),
        loopback_only=not args.allow_remote,
        # Told nothing: list the backend's queues where it can.
        discover=not args.queue and app is None,
    )
    server = package.server.Server(board, host=addr, port=args.port)
    await serve_until_signal(server, addr, settings.url)
    return EXIT_OK
