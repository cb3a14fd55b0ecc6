"""``taskrunner dashboard``: the web view of the queues (needs the ``dashboard`` extra).

Serves until SIGINT/SIGTERM. With a token (``TASKRUNNER_DASHBOARD_TOKEN``, or the
older ``TR_DASHBOARD_TOKEN``, or with ``--allow-actions`` a random one printed at
start) every page and API answer needs a sign-in with it, lasting ``--session-hours``
(``TASKRUNNER_DASHBOARD_SESSION_HOURS``, 8 by default); ``--allow-actions`` adds retry
and purge for signed-in browsers. Without a token it is read-only and open to whoever
reaches it, so it then binds only a loopback address: a reachable ``--addr`` without a
token is a usage error. Binds 127.0.0.1 unless told otherwise. One line at start says
whether reading needs sign-in; a port it cannot listen on is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
from collections.abc import Mapping
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
from taskrunner.errors import ConfigurationError
from taskrunner.redaction import mask_url
from taskrunner.settings import Settings

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_SESSION_HOURS",
    "SESSION_HOURS_ENV",
    "access_line",
    "add_parser",
    "bind",
    "dashboard_guard",
    "import_dashboard",
    "run_dashboard",
    "session_hours",
]

DEFAULT_PORT = 8181
DEFAULT_SESSION_HOURS = 8.0
# Read here (reserved in taskrunner.settings, like the token): a dashboard setting only.
SESSION_HOURS_ENV = "TASKRUNNER_DASHBOARD_SESSION_HOURS"
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
        help="allow an --addr other machines can reach (needs a token: "
        "TASKRUNNER_DASHBOARD_TOKEN, or --allow-actions for a generated one)",
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
        default=None,
        metavar="HOURS",
        help=f"with a token: a sign-in lasts this long (default: {SESSION_HOURS_ENV}, "
        f"else {DEFAULT_SESSION_HOURS:g})",
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


def session_hours(args: argparse.Namespace, env: Mapping[str, str]) -> float:
    """``--session-hours``, else `SESSION_HOURS_ENV`, else `DEFAULT_SESSION_HOURS`.

    Raises:
        ConfigurationError: The environment's value is not a positive, finite number of
            hours (exit code 2).
    """
    if args.session_hours is not None:
        hours: float = args.session_hours
        return hours
    text = env.get(SESSION_HOURS_ENV, "").strip()
    if not text:
        return DEFAULT_SESSION_HOURS
    try:
        return _hours(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigurationError(
            f"{SESSION_HOURS_ENV}={text[:40]!r}: {exc}", setting=SESSION_HOURS_ENV
        ) from None


def dashboard_guard(args: argparse.Namespace) -> Any:
    """The dashboard's `Guard`, or None when it has no token; prints a generated token.

    A token from the environment makes one (reading then needs sign-in), and so does
    ``--allow-actions`` (with a random token when the environment has none).

    Raises:
        UsageError: The token is too short or given twice differently, the session
            time is bad, or ``--addr`` is not a loopback address and there is no token
            (anyone who reaches it would read the payloads).
    """
    from taskrunner.dashboard.security import Guard, token_from_env

    try:
        given = token_from_env(os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    hours = session_hours(args, os.environ)
    if given is None and not args.allow_actions:
        if not ipaddress.ip_address(args.addr).is_loopback:
            # As Redis's protected mode: reachable and unauthenticated is refused, not warned.
            raise UsageError(
                f"--addr {args.addr} without a token: anyone who reaches it would read the "
                "queues and message payloads; set TASKRUNNER_DASHBOARD_TOKEN (or add "
                "--allow-actions to have one generated), or bind 127.0.0.1"
            )
        return None
    try:
        guard = Guard(given, session_seconds=hours * 3600)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if given is None:
        # On stdout, for the operator who started it; never logged.
        print(f"dashboard token (sign in with it): {guard.token}", flush=True)  # noqa: T201
    return guard


def access_line(guard: Any, *, actions: bool) -> str:
    """The start-up line saying whether reading needs sign-in, and whether actions are on."""
    if guard is None:
        return (
            "dashboard access: reading needs no sign-in (no TASKRUNNER_DASHBOARD_TOKEN; "
            "loopback only); read-only"
        )
    hours = guard.session_seconds / 3600
    what = "retry and purge offered when signed in" if actions else "read-only"
    return (
        f"dashboard access: reading needs sign-in with the token (sessions last {hours:g} h, "
        f"or the token as a Bearer header on /api/); {what}"
    )


def bind(server: Any) -> None:
    """Take `server`'s address before serving.

    Raises:
        ConfigurationError: It cannot listen there (the port in use, the address not
            this machine's): one line naming the address, exit code 2, no traceback.
    """
    from taskrunner.dashboard.server import BindError

    try:
        server.bind()
    except BindError as exc:
        raise ConfigurationError(f"dashboard: {exc}", setting="port") from None


async def serve_until_signal(server: Any, addr: str, url: str, access: str) -> None:
    """Run `server` until SIGINT/SIGTERM; prints `access`, then where it listens."""
    print(access, flush=True)  # noqa: T201
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
    guard = dashboard_guard(args)
    board = package.build.build_dashboard(
        settings.url,
        names,
        app=app,
        guard=guard,
        actions=args.allow_actions,
        loopback_only=not args.allow_remote,
        # Told nothing: list the backend's queues where it can.
        discover=not args.queue and app is None,
    )
    server = package.server.Server(board, host=addr, port=args.port)
    bind(server)
    access = access_line(guard, actions=args.allow_actions)
    await serve_until_signal(server, addr, settings.url, access)
    return EXIT_OK
