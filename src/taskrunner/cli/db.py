"""``taskrunner db migrate``: bring a backend's schema (PostgreSQL) to the latest version."""

from __future__ import annotations

import argparse

from taskrunner.backends import migrate
from taskrunner.cli.common import EXIT_OK, Parser
from taskrunner.cli.output import Output
from taskrunner.redaction import mask_url
from taskrunner.settings import Settings

__all__ = ["add_parser", "run_db"]


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


async def run_db(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Run ``db migrate``: print each step applied, or that the schema is up to date."""
    applied = await migrate(settings.url)
    if out.json:
        out.document({"url": mask_url(settings.url), "applied": applied})
    elif applied:
        for step in applied:
            out.line(f"applied {step}")
    else:
        out.line(f"the schema at {mask_url(settings.url)} is up to date: nothing to apply")
    return EXIT_OK
