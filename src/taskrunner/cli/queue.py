"""``taskrunner queue delete NAME``: delete a queue and everything the backend keeps for it."""

from __future__ import annotations

import argparse

from taskrunner.backends import open_queue
from taskrunner.cli.common import EXIT_OK, Parser, UsageError, require_admin
from taskrunner.cli.output import Output
from taskrunner.settings import Settings

__all__ = ["add_parser", "run_queue"]


def add_parser(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``queue`` command and its actions."""
    queue = commands.add_parser("queue", help="delete a queue")
    actions = queue.add_subparsers(dest="action", required=True, metavar="ACTION")
    delete = actions.add_parser(
        "delete",
        parents=[common],
        help="delete a queue: its messages, dead letters, consumers and worker entries",
        description="Delete queue NAME and everything the backend keeps for it. Without "
        "--yes it only says what would be deleted. Workers still serving the queue start "
        "an empty one at their next receive.",
    )
    delete.add_argument("name", metavar="NAME", help="the queue to delete")
    delete.add_argument("--yes", action="store_true", help="really delete it")


async def run_queue(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Count what the queue holds, then delete it (with ``--yes``) or refuse."""
    name: str = args.name
    async with open_queue(settings.url, name) as queue:
        admin = require_admin(queue, settings.url, "cannot delete queues")
        stats = await queue.stats()
        counts = {
            "ready": stats.ready,
            "delayed": stats.delayed,
            "in_flight": stats.in_flight,
            "dead": stats.dead,
            "consumers": len(stats.consumers),
        }
        what = (
            f"{stats.ready} ready, {stats.delayed} delayed, {stats.in_flight} in flight, "
            f"{stats.dead} dead letter(s), {len(stats.consumers)} consumer(s)"
        )
        if not args.yes:
            raise UsageError(
                f"queue delete: would delete queue {name!r} for good: {what}; pass --yes to confirm"
            )
        await admin.delete_queue()
    if out.json:
        out.document({"queue": name, "deleted": True, **counts})
    else:
        out.line(f"deleted queue {name!r}: {what}")
    return EXIT_OK
