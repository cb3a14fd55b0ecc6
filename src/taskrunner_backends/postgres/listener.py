"""`Listener`: one LISTEN connection per queue handle, turning NOTIFY into asyncio events.

Adds, releases and dead-letter retries send ``pg_notify(<schema channel>, <queue>)`` in
the transaction that makes a message ready; result writes send
``pg_notify(<schema channel>.results, json [queue, message_id])``. A waiting receive
(or `wait_result`) clears its event, looks, and then waits on the event, so a
notification that arrives between the look and the wait is never missed.

The connection is its own (not from the pool: a pooled connection would be handed to
other callers) and in autocommit mode. When it breaks, the listener reconnects with
backoff (0.1 s doubling to 5 s) and sets every event on each (re)connect, since
notifications sent while it was away are gone; until then waiters fall back to their
safety poll. Its one background task is started by `start` and cancelled and awaited by
`aclose`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from taskrunner.redaction import mask_secrets

from .schema import notify_channel

__all__ = ["RESULTS_SUFFIX", "Listener"]

_log = logging.getLogger("taskrunner.postgres")

#: The results channel is the schema's channel plus this.
RESULTS_SUFFIX = ".results"

_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 5.0


class Listener:
    """Notifications of one queue, as events.

    Args:
        conninfo: libpq connection string.
        schema: The schema whose channels to listen on.
        queue: The queue whose notifications set the events.
        secrets: Masked in logged errors.
    """

    def __init__(
        self, conninfo: str, schema: str, queue: str, *, secrets: Sequence[str] = ()
    ) -> None:
        self._conninfo = conninfo
        self._channel = notify_channel(schema)
        self._queue = queue
        self._secrets = tuple(secrets)
        self._messages = asyncio.Event()
        self._results: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._connected = False
        self._conn: psycopg.AsyncConnection[Any] | None = None

    @property
    def connected(self) -> bool:
        """Whether LISTEN is active now, so waiters may rely on notifications."""
        return self._connected

    def messages_event(self) -> asyncio.Event:
        """Set on each message notification of the queue and on every (re)connect."""
        return self._messages

    def watch_result(self, message_id: str) -> asyncio.Event:
        """An event set when a result for `message_id` is notified (and on reconnects)."""
        event = asyncio.Event()
        self._results.setdefault(message_id, set()).add(event)
        return event

    def unwatch_result(self, message_id: str, event: asyncio.Event) -> None:
        """Stop setting `event`; idempotent."""
        watchers = self._results.get(message_id)
        if watchers is not None:
            watchers.discard(event)
            if not watchers:
                del self._results[message_id]

    async def start(self) -> None:
        """Start listening in the background; never raises when the server is down."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"taskrunner-postgres-listener:{self._queue}"
            )

    async def aclose(self) -> None:
        """Stop listening and close the connection; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # The task ends with the CancelledError we asked for; any other outcome was
            # already logged by the task itself.
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._connected = False

    def _wake_all(self) -> None:
        self._messages.set()
        for watchers in self._results.values():
            for event in watchers:
                event.set()

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == self._channel:
            if payload == self._queue:
                self._messages.set()
            return
        # Payloads come from anyone who may NOTIFY on the channel: a malformed one is
        # ignored, never allowed to end the listener.
        try:
            queue, message_id = json.loads(payload)
        except (ValueError, TypeError):
            return
        if queue == self._queue and isinstance(message_id, str):
            for event in self._results.get(message_id, ()):
                event.set()

    async def _run(self) -> None:
        delay = _BACKOFF_FIRST
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    for channel in (self._channel, self._channel + RESULTS_SUFFIX):
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self._connected = True
                    delay = _BACKOFF_FIRST
                    self._wake_all()
                    async for note in conn.notifies():
                        self._dispatch(note.channel, note.payload)
            except (psycopg.Error, OSError) as exc:
                if self._connected:
                    _log.warning(
                        "LISTEN connection lost (receives poll until it is back): %s",
                        mask_secrets(str(exc), self._secrets),
                    )
            except Exception as exc:
                # Not a connection problem: the listener must outlive it, so retry (waiters
                # poll meanwhile), but say so.
                _log.error(
                    "LISTEN connection failed unexpectedly: %s",
                    mask_secrets(repr(exc), self._secrets),
                )
            finally:
                self._connected = False
            # Waiters fall back to polling; wake them so none sleeps on a dead channel.
            self._wake_all()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)
