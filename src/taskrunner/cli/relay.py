"""``taskrunner relay``: move committed outbox rows into the queue, without running tasks.

The worker relays its queue's outbox itself when ``outbox_url`` is set; this command
runs a relay alone (for example beside workers that are configured without it, or for a
queue no worker of this deployment serves). Several relays may run at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from taskrunner.backends import connect, outbox_relay
from taskrunner.cli.common import EXIT_OK, Parser, UsageError, setting_option, signal_handlers
from taskrunner.redaction import mask_url
from taskrunner.settings import Settings

__all__ = ["add_parser", "run_relay"]

_log = logging.getLogger("taskrunner.outbox")


def add_parser(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``relay`` command."""
    relay = commands.add_parser(
        "relay",
        parents=[common],
        help="move committed outbox rows into the queue (until SIGTERM/SIGINT)",
        description="Relay the transactional outbox at --outbox-url (the application's "
        "PostgreSQL database; ?schema= names the outbox's schema, default taskrunner) into "
        "queue NAME on --url (a Redis queue), each row exactly once. Runs until SIGTERM or "
        "SIGINT. See docs/transactional.md.",
    )
    relay.add_argument("name", metavar="NAME", help="the queue whose rows to move")
    setting_option(relay, "outbox_url", metavar="URL")


async def run_relay(args: argparse.Namespace, settings: Settings) -> int:
    """Relay until a signal; 0 then."""
    if settings.outbox_url is None:
        raise UsageError(
            "relay needs the outbox's database: --outbox-url postgresql://... (or "
            "TASKRUNNER_OUTBOX_URL, or 'outbox_url' in the config file)"
        )
    name: str = args.name
    queue = await connect(settings.url, name)
    try:
        relay = outbox_relay(settings.outbox_url, queue, name)
        stopping = asyncio.Event()
        _log.info(
            "relaying the outbox at %s into queue %r on %s",
            mask_url(settings.outbox_url),
            name,
            mask_url(settings.url),
        )
        with signal_handlers(lambda _signum: stopping.set()):
            relaying = asyncio.create_task(relay.run(), name="outbox relay")
            stopper = asyncio.create_task(stopping.wait(), name="relay stop")
            try:
                await asyncio.wait({relaying, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (relaying, stopper):
                    task.cancel()
                await asyncio.gather(relaying, stopper, return_exceptions=True)
            failure = None if relaying.cancelled() else relaying.exception()
            if failure is not None:
                raise failure
        _log.info("relay stopped")
    finally:
        await queue.aclose()
    return EXIT_OK
