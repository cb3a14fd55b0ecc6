"""``taskrunner db migrate|status``: a backend's schema (PostgreSQL): apply, or report."""

from __future__ import annotations

import argparse
from typing import Any

from taskrunner.backends import migrate, schema_status
from taskrunner.cli.common import EXIT_OK, Parser
from taskrunner.cli.output import Output
from taskrunner.redaction import mask_url
from taskrunner.settings import Settings

__all__ = ["EXIT_NEEDS_MIGRATE", "EXIT_NEWER", "add_parser", "run_db"]

#: ``db status``: the schema is missing or older than this taskrunner writes.
EXIT_NEEDS_MIGRATE = 3
#: ``db status``: a newer taskrunner wrote the schema; this one would refuse it.
EXIT_NEWER = 4

_EXIT_BY_STATE = {"up-to-date": EXIT_OK, "needs-migrate": EXIT_NEEDS_MIGRATE, "newer": EXIT_NEWER}
_WORDS = {
    "up-to-date": "up to date",
    "needs-migrate": "needs `taskrunner db migrate`",
    "newer": "newer than this taskrunner (upgrade taskrunner)",
}


def add_parser(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``db`` command and its actions."""
    db = commands.add_parser("db", help="manage a backend's schema (PostgreSQL)")
    actions = db.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser(
        "migrate",
        parents=[common],
        help="apply the schema migrations the backend at --url still needs",
        description="Bring the schema of the backend at --url to the latest version this "
        "taskrunner knows, in one transaction (workers starting meanwhile wait for it). "
        "Running it again applies nothing. Needed before starting workers whose URL says "
        "migrate=never; a schema written by a newer taskrunner is refused.",
    )
    actions.add_parser(
        "status",
        parents=[common],
        help="the schema's version against this taskrunner's, and counts per queue",
        description="Print the schema at --url, its applied version against the version "
        "this taskrunner writes, and per queue the ready, delayed, in-flight and dead "
        "message counts (one scan of the tables; only when the schema is up to date). "
        "Reads, changes nothing. Exit codes: 0 up to date; "
        f"{EXIT_NEEDS_MIGRATE} the schema is missing or older (run `taskrunner db "
        f"migrate`); {EXIT_NEWER} a newer taskrunner wrote it; 1 the server could not "
        "be reached or refused; 2 a bad URL or a backend without a schema.",
    )


async def run_db(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Run ``db migrate`` or ``db status``."""
    if args.action == "status":
        return await _status(settings, out)
    applied = await migrate(settings.url)
    if out.json:
        out.document({"url": mask_url(settings.url), "applied": applied})
    elif applied:
        for step in applied:
            out.line(f"applied {step}")
    else:
        out.line(f"the schema at {mask_url(settings.url)} is up to date: nothing to apply")
    return EXIT_OK


async def _status(settings: Settings, out: Output) -> int:
    status = await schema_status(settings.url)
    state = str(status.get("state"))
    if out.json:
        out.document({"url": mask_url(settings.url), **status})
    else:
        _print_status(status, state, out)
    return _EXIT_BY_STATE.get(state, EXIT_NEEDS_MIGRATE)


def _print_status(status: dict[str, Any], state: str, out: Output) -> None:
    version = status.get("version")
    out.line(f"schema   {status.get('schema')}")
    shown = "none (never migrated)" if version == 0 else str(version)
    out.line(f"version  {shown}; this taskrunner writes {status.get('latest')}")
    out.line(f"state    {_WORDS.get(state, state)}")
    for step in status.get("pending") or ():
        out.line(f"pending  {step['version']}: {step['description']}")
    _print_queues(status.get("queues"), out)
    tables = status.get("tables")
    if tables:
        out.line()
        out.table(
            ["TABLE", "SIZE", "LIVE ROWS", "DEAD ROWS"],
            [
                [str(t["table"]), _size(int(t["bytes"])), str(t["live_rows"]), str(t["dead_rows"])]
                for t in tables
            ],
        )


def _size(size: int) -> str:
    """Bytes in the largest unit that keeps a whole number in front (``72 kB``)."""
    units = ("B", "kB", "MB", "GB")
    step = 0
    while size >= 1024 and step < len(units) - 1:
        size //= 1024
        step += 1
    return f"{size} {units[step]}"


def _print_queues(queues: Any, out: Output) -> None:
    if queues is None:
        return
    if not queues:
        out.line("queues   none")
        return
    out.line()
    out.table(
        ["QUEUE", "READY", "DELAYED", "IN FLIGHT", "DEAD"],
        [
            [
                str(q["queue"]),
                str(q["ready"]),
                str(q["delayed"]),
                str(q["in_flight"]),
                str(q["dead"]),
            ]
            for q in queues
        ],
    )
