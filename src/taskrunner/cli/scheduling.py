"""``taskrunner cancel ID...`` and ``taskrunner schedules``.

``cancel`` removes queued or delayed messages so they never run (a running task is not
interrupted). ``schedules`` lists the App's periodic schedules with their last fire
(from the backend's fire records), their next instant and the current leader.
"""

from __future__ import annotations

import argparse
import time

from taskrunner.app import App
from taskrunner.backends import open_queue
from taskrunner.cli.common import (
    EXIT_BACKEND,
    EXIT_OK,
    Parser,
    UsageError,
    app_and_queue,
    app_options,
)
from taskrunner.cli.output import Output, when
from taskrunner.producer import Producer
from taskrunner.scheduler import schedule_overview
from taskrunner.settings import Settings

__all__ = ["add_parsers", "run_cancel", "run_schedules"]


def add_parsers(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``cancel`` and ``schedules`` commands."""
    cancel = commands.add_parser(
        "cancel",
        parents=[common],
        help="remove queued or delayed messages so they never run",
        description="Cancel each message ID: a queued or delayed message is removed (and "
        "its unique key freed); one whose task is running, finished, dead-lettered or "
        "unknown is left alone. Exit code 1 when any ID was not cancelled.",
    )
    app_options(cancel)
    cancel.add_argument("--queue", help="queue name when no App is given (default: default)")
    cancel.add_argument("ids", nargs="+", metavar="ID", help="message ids")
    schedules = commands.add_parser(
        "schedules",
        parents=[common],
        help="list the App's periodic schedules, their last and next fire times",
        description="List the periodic schedules of the App (MODULE:APP or --app): task, "
        "timing, catch-up policy, the last instant fired (from the backend) and the next "
        "one, and which worker leads the scheduler.",
    )
    app_options(schedules)
    schedules.set_defaults(queue=None)


async def run_cancel(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Cancel every id; print one line per id."""
    app, queue_name = app_and_queue(args, settings)
    ids: list[str] = args.ids
    async with open_queue(settings.url, queue_name) as queue:
        flags = await Producer(queue, app or App(queue_name)).cancel_many(ids)
    if out.json:
        out.document({"queue": queue_name, "cancelled": dict(zip(ids, flags, strict=True))})
    else:
        for message_id, removed in zip(ids, flags, strict=True):
            state = "cancelled" if removed else "not cancelled (running, done, or unknown)"
            out.line(f"{message_id}  {state}")
    return EXIT_OK if all(flags) else EXIT_BACKEND


async def run_schedules(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """List the schedules with their fire records and the current leader."""
    app, queue_name = app_and_queue(args, settings, note=False)
    if app is None:
        raise UsageError("schedules: give the App as MODULE:APP or --app")
    schedules = list(app.schedules.values())
    async with open_queue(settings.url, queue_name) as queue:
        rows, has_leadership, leader = await schedule_overview(queue, schedules, now=time.time())
    if out.json:
        out.document(
            {
                "queue": queue_name,
                "leader": None if leader is None else leader.holder,
                "leadership": has_leadership,
                "schedules": rows,
            }
        )
        return EXIT_OK
    if not has_leadership:
        out.line("the backend offers no leadership: no worker fires these schedules")
    else:
        out.line(f"leader: {'none' if leader is None else leader.holder}")
    out.table(
        ["NAME", "TASK", "WHEN", "CATCH-UP", "LAST FIRED", "NEXT"],
        [
            [
                row["name"],
                row["task"],
                row["timing"],
                row["catch_up"],
                "-" if row["last_fired"] is None else when(row["last_fired"]),
                "-" if row["next"] is None else when(row["next"]),
            ]
            for row in rows
        ],
    )
    return EXIT_OK
