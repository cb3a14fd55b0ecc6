"""``taskrunner dead-letters``: list, show, retry or purge dead-lettered messages."""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import time
from typing import Any

import msgspec

from taskrunner.backends import open_queue
from taskrunner.cli.common import (
    EXIT_OK,
    NotFoundError,
    Parser,
    UsageError,
    app_and_queue,
    app_argument,
    require_admin,
    setting_option,
)
from taskrunner.cli.output import Output, seconds, short, when
from taskrunner.codec import decode_envelope
from taskrunner.errors import DecodeError
from taskrunner.queue import DeadLetter, QueueAdmin
from taskrunner.settings import Settings

__all__ = ["SHOW_SCAN_LIMIT", "add_parser", "run_dead_letters"]

# `dead-letters show ID` scans this many of the oldest dead letters for ID (the admin
# contract lists oldest first and has no lookup by id).
SHOW_SCAN_LIMIT = 10_000

_IDS_HELP = "dead-letter ids; a first MODULE:APP argument names the App (same as --app)"

# Dead-letter reasons are cut to this many characters in `dead-letters list`.
_REASON_WIDTH = 60


def add_parser(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``dead-letters`` command and its actions."""
    dead = commands.add_parser(
        "dead-letters", help="list, show, retry or purge dead-lettered messages"
    )
    dead_commands = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    dead_common = Parser(add_help=False)
    setting_option(dead_common, "app", metavar="MODULE:APP")
    dead_common.add_argument("--queue", help="queue name (default: the App's queue, else default)")
    listing = dead_commands.add_parser(
        "list", parents=[common, dead_common], help="the oldest dead letters"
    )
    app_argument(listing)
    listing.add_argument("--limit", type=int, default=20, help="how many (default: %(default)s)")
    show = dead_commands.add_parser(
        "show", parents=[common, dead_common], help="one dead letter, with its payload"
    )
    app_argument(show)
    show.add_argument("id", metavar="ID")
    retry = dead_commands.add_parser(
        "retry",
        parents=[common, dead_common],
        help="put dead letters back on their queue (each moved atomically)",
    )
    retry.add_argument("ids", nargs="*", metavar="ID", help=_IDS_HELP)
    retry.add_argument("--all", action="store_true", help="retry every dead letter")
    purge = dead_commands.add_parser(
        "purge", parents=[common, dead_common], help="delete dead letters for good"
    )
    purge.add_argument("ids", nargs="*", metavar="ID", help=_IDS_HELP)
    purge.add_argument("--all", action="store_true", help="delete every dead letter")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")


async def run_dead_letters(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Run one dead-letter action."""
    _, queue_name = app_and_queue(args, settings)
    action: str = args.action
    if action in ("retry", "purge"):
        if args.all and args.ids:
            raise UsageError(f"dead-letters {action}: give IDs or --all, not both")
        if not args.all and not args.ids:
            raise UsageError(f"dead-letters {action}: give the IDs to {action}, or --all")
    async with open_queue(settings.url, queue_name) as queue:
        admin = require_admin(queue, settings.url, "does not support dead-letter administration")
        if action == "list":
            return await _list_dead(admin, queue_name, args.limit, out)
        if action == "show":
            return await _show_dead(admin, queue_name, args.id, out)
        if action == "retry":
            return await _retry_dead(admin, queue_name, None if args.all else args.ids, out)
        dead = (await queue.stats()).dead
        return await _purge_dead(admin, queue_name, None if args.all else args.ids, dead, args, out)


def _task_of(body: bytes) -> str:
    try:
        return decode_envelope(body).task
    except DecodeError:
        return "-"


async def _list_dead(admin: QueueAdmin, queue_name: str, limit: int, out: Output) -> int:
    if limit < 1:
        raise UsageError(f"--limit {limit} must be >= 1")
    letters = await admin.list_dead_letters(limit=limit)
    if out.json:
        out.document({"queue": queue_name, "dead_letters": [_dead_document(d) for d in letters]})
        return EXIT_OK
    if not letters:
        out.line(f"no dead letters on queue {queue_name!r}")
        return EXIT_OK
    out.table(
        ("ID", "TASK", "DELIVERIES", "DEAD AT", "REASON"),
        [
            (
                d.message_id,
                _task_of(d.body),
                str(d.delivery_count),
                when(d.dead_at),
                short(d.reason, _REASON_WIDTH),
            )
            for d in letters
        ],
    )
    if len(letters) == limit:
        out.line(f"(the oldest {limit}; --limit N shows more)")
    return EXIT_OK


def _dead_document(letter: DeadLetter) -> dict[str, Any]:
    envelope: dict[str, Any] | None
    try:
        decoded = decode_envelope(letter.body)
    except DecodeError:
        envelope = None
    else:
        envelope = {
            "id": decoded.id,
            "task": decoded.task,
            "enqueued_at": decoded.enqueued_at,
            "headers": decoded.headers,
            "payload": msgspec.json.decode(decoded.payload),
        }
    return {
        "id": letter.message_id,
        "original_id": letter.original_id,
        "reason": letter.reason,
        "delivery_count": letter.delivery_count,
        "dead_at": letter.dead_at,
        "envelope": envelope,
        "body_base64": base64.b64encode(letter.body).decode(),
    }


async def _find_dead(admin: QueueAdmin, queue_name: str, dead_id: str) -> DeadLetter:
    for letter in await admin.list_dead_letters(limit=SHOW_SCAN_LIMIT):
        if letter.message_id == dead_id:
            return letter
    raise NotFoundError(
        f"no dead letter {dead_id!r} on queue {queue_name!r} (among the oldest "
        f"{SHOW_SCAN_LIMIT}); 'taskrunner dead-letters list' shows the ids"
    )


async def _show_dead(admin: QueueAdmin, queue_name: str, dead_id: str, out: Output) -> int:
    letter = await _find_dead(admin, queue_name, dead_id)
    document = _dead_document(letter)
    if out.json:
        out.document({"queue": queue_name, **document})
        return EXIT_OK
    age = max(0.0, time.time() - letter.dead_at)
    rows = [
        ("dead letter", letter.message_id),
        ("queue", queue_name),
        ("original id", letter.original_id or "-"),
        ("deliveries", str(letter.delivery_count)),
        ("dead at", f"{when(letter.dead_at)} ({seconds(age)} ago)"),
        ("reason", letter.reason),
    ]
    envelope = document["envelope"]
    if envelope is not None:
        rows += [
            ("task", envelope["task"]),
            ("task id", envelope["id"]),
            ("enqueued at", when(envelope["enqueued_at"])),
        ]
        rows += [(f"header {k}", v) for k, v in sorted(envelope["headers"].items())]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.line(f"{label.ljust(width)}  {value}")
    if envelope is not None:
        out.line("payload:")
        pretty = msgspec.json.format(msgspec.json.encode(envelope["payload"]), indent=2)
        out.line(pretty.decode())
    else:
        out.line("body (not a taskrunner message):")
        out.line(repr(letter.body))
    return EXIT_OK


async def _retry_dead(
    admin: QueueAdmin, queue_name: str, ids: list[str] | None, out: Output
) -> int:
    new_ids = await admin.retry_dead_letters(ids)
    missing = None if ids is None else len(ids) - len(new_ids)
    if out.json:
        out.document({"queue": queue_name, "retried": len(new_ids), "message_ids": new_ids})
    else:
        out.line(f"retried {len(new_ids)} dead letter(s) onto queue {queue_name!r}")
        for message_id in new_ids:
            out.line(f"  new message id {message_id}")
    if missing:
        raise NotFoundError(
            f"{missing} of {len(ids or [])} id(s) were not dead letters of queue "
            f"{queue_name!r} (already retried or purged?)"
        )
    return EXIT_OK


async def _purge_dead(
    admin: QueueAdmin,
    queue_name: str,
    ids: list[str] | None,
    dead: int,
    args: argparse.Namespace,
    out: Output,
) -> int:
    count = dead if ids is None else len(ids)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(
                "dead-letters purge deletes messages for good; pass --yes to confirm "
                "(or run it on a terminal to be asked)"
            )
        what = f"all {count} dead letter(s)" if ids is None else f"{count} dead letter(s)"
        prompt = f"Delete {what} of queue {queue_name!r} for good? [y/N] "
        answer = await asyncio.to_thread(input, prompt)
        if answer.strip().lower() not in ("y", "yes"):
            out.line("nothing deleted")
            return EXIT_OK
    deleted = await admin.purge_dead_letters(ids)
    if out.json:
        out.document({"queue": queue_name, "purged": deleted})
    else:
        out.line(f"purged {deleted} dead letter(s) from queue {queue_name!r}")
    if ids is not None and deleted < len(ids):
        raise NotFoundError(
            f"{len(ids) - deleted} of {len(ids)} id(s) were not dead letters of queue "
            f"{queue_name!r}"
        )
    return EXIT_OK
