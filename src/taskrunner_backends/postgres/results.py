"""`PostgresResults`: task results by message id with a TTL (internal).

A result is a ``results`` row keyed by (queue, message id) with its expiry on the
server's clock; readers see only unexpired rows, and every `put_results` also deletes
up to `PRUNE_LIMIT` expired rows (of any queue), so the table does not grow with
results nobody reads. Message ids are any text here (a result may be stored under an
id that is no message id of this backend); an id PostgreSQL text cannot hold (NUL, a
lone surrogate) is refused on writes and unknown on reads.

Waking waiters. `put_results` notifies the channel ``notify_channel(schema) +
".results"`` with ``["queue", "message id"]`` per result, in the statement that stores
them. `PostgresResults.wait_result` watches its id on the queue handle's `Listener`
(which LISTENs that channel) and looks again after each wake; while the listener is
missing or not connected it looks every `POLL_SECONDS` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from taskrunner.clock import Clock
from taskrunner.errors import QueueClosedError
from taskrunner.queue import ResultWrite
from taskrunner_backends.checks import check_ids, check_result_writes, check_text

from .db import Database
from .scheduling import MAX_SECONDS, check_seconds, storable_text
from .schema import notify_channel

__all__ = ["POLL_SECONDS", "PRUNE_LIMIT", "SAFETY_POLL_SECONDS", "PostgresResults", "ResultWatch"]

#: How often a wait looks at its result while no listener connection is up (seconds).
POLL_SECONDS = 0.05

#: The longest a wait relies on notifications alone before looking again (seconds):
#: a bound on the damage of a missed notification, and how soon a wait notices a close
#: that nobody announced through `PostgresResults.close`.
SAFETY_POLL_SECONDS = 1.0

#: Expired rows one put_results deletes at most.
PRUNE_LIMIT = 100


class ResultWatch(Protocol):
    """What `wait_result` needs of the queue handle's listener (see ``listener.py``)."""

    @property
    def connected(self) -> bool:
        """Whether LISTEN is active now."""
        ...

    def watch_result(self, message_id: str) -> asyncio.Event:
        """An event set when a result of `message_id` is notified, and on each reconnect."""
        ...

    def unwatch_result(self, message_id: str, event: asyncio.Event) -> None:
        """Forget the event `watch_result` returned."""
        ...


# One row per distinct id (the last write of an id in the batch wins), stored; the
# prune skips the ids being written (two changes of one row in one statement are
# refused); one notification per stored id.
_PUT = f"""
WITH w AS (
    SELECT DISTINCT ON (r.id) r.id, r.body, r.ttl
    FROM unnest(%(ids)s::text[], %(bodies)s::bytea[], %(ttls)s::float8[])
         WITH ORDINALITY AS r(id, body, ttl, n)
    ORDER BY r.id, r.n DESC
), up AS (
    INSERT INTO {{s}}.results AS r (queue, message_id, body, expires_at)
    SELECT %(q)s, w.id, w.body, clock_timestamp() + w.ttl * interval '1 second' FROM w
    ON CONFLICT (queue, message_id) DO UPDATE
        SET body = EXCLUDED.body, expires_at = EXCLUDED.expires_at
    RETURNING r.message_id
), pruned AS (
    DELETE FROM {{s}}.results WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM {{s}}.results
        WHERE expires_at <= clock_timestamp()
          AND NOT (queue = %(q)s AND message_id = ANY(%(ids)s::text[]))
        LIMIT {PRUNE_LIMIT} FOR UPDATE SKIP LOCKED))
)
SELECT count(*) FROM (
    SELECT pg_notify(%(channel)s, json_build_array(%(q)s::text, up.message_id)::text) FROM up
) AS notified
"""

_GET = """
SELECT message_id, body FROM {s}.results
WHERE queue = %s AND message_id = ANY(%s::text[]) AND expires_at > clock_timestamp()
"""

_DELETE = """
WITH gone AS (
    DELETE FROM {s}.results WHERE queue = %s AND message_id = ANY(%s::text[])
    RETURNING expires_at > clock_timestamp() AS live
)
SELECT count(*) FILTER (WHERE gone.live) FROM gone
"""


class PostgresResults:
    """Results of one queue (`taskrunner.queue.ResultStore`), with ``result_notify``.

    Guarantees (on top of the protocol's):

    * TTLs are on the server's clock: a result is returned while its expiry (the
      server's ``clock_timestamp()`` at the write + ``ttl_seconds``) is ahead.
    * Each call is one statement: put_results stores, prunes and notifies at once.
    * wait_result sleeps on its listener event, not on a poll, while the listener is
      connected (at most `SAFETY_POLL_SECONDS` between looks); without one it looks
      every `POLL_SECONDS`. Its timeout runs on the injected `Clock`.
    * A wait raises `QueueClosedError` once `close` is called (the queue's aclose
      calls it), within `SAFETY_POLL_SECONDS` of a close it was not told about.

    Args:
        db: The backend's `Database`.
        queue: The queue's name.
        check_open: Raises `QueueClosedError` once the queue handle is closed.
        listener: Returns the handle's listener, or None while it has none.
        clock: The clock of wait_result's timeout.
    """

    def __init__(
        self,
        db: Database,
        queue: str,
        *,
        check_open: Callable[[], None],
        listener: Callable[[], ResultWatch | None],
        clock: Clock,
    ) -> None:
        self._db = db
        self._queue = queue
        self._check_open = check_open
        self._listener = listener
        self._clock = clock
        self._channel = notify_channel(db.schema) + ".results"
        self._put = db.sql(_PUT)
        self._get = db.sql(_GET)
        self._delete = db.sql(_DELETE)
        # Set by `close`: every wait in progress wakes and raises QueueClosedError.
        self._closed = asyncio.Event()

    def close(self) -> None:
        """Wake every wait in progress with `QueueClosedError` (the queue's aclose calls it)."""
        self._closed.set()

    def _ensure_open(self) -> None:
        self._check_open()
        if self._closed.is_set():
            raise QueueClosedError("the queue handle was closed")

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result under its message id for its TTL; one statement per call.

        Two writes of one id in one batch: the later one wins.

        Raises:
            TypeError: `results` is a single `ResultWrite`, an item is not one, a
                message id is no str, a body is not `bytes` or a TTL no number.
            ValueError: A TTL is <= 0 or not finite, or a message id is empty or holds
                NUL or a lone surrogate; nothing is stored.
            BackendUnavailableError: The server could not be reached; nothing or
                everything was stored (one statement), unless the connection broke
                during its commit.
        """
        self._ensure_open()
        writes = check_result_writes(results, nul=False)
        ids = [write.message_id for write in writes]
        bodies = [write.body for write in writes]
        ttls = [min(MAX_SECONDS, float(write.ttl_seconds)) for write in writes]
        if not ids:
            return
        await self._db.fetch(
            "put results",
            self._put,
            {
                "q": self._queue,
                "ids": ids,
                "bodies": bodies,
                "ttls": ttls,
                "channel": self._channel,
            },
        )

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, in order; None where there is none or it expired.

        One statement whatever the number of ids; an id that could never be stored
        (empty, NUL, a lone surrogate) is None without being sent.

        Raises:
            TypeError: `message_ids` is a single string, or holds something else.
        """
        self._ensure_open()
        ids = _read_ids(message_ids)
        found = await self._fetch([i for i in ids if i is not None])
        return [None if i is None else found.get(i) for i in ids]

    async def _fetch(self, ids: Sequence[str]) -> dict[str, bytes]:
        if not ids:
            return {}
        rows = await self._db.fetch("get results", self._get, (self._queue, list(set(ids))))
        return {str(row[0]): bytes(row[1]) for row in rows}

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        """The body of `message_id`'s result, waiting up to `timeout_seconds` for it.

        Returns at once when it is stored (one statement). Otherwise it watches the id
        on the listener before each look (so a put between the look and the sleep
        still wakes it), sleeps until a notification, a reconnect, the safety poll or
        the timeout, and looks again. An id no result can be stored under waits out
        its timeout without asking the server.

        Returns:
            The body, or None when none was stored by the timeout (never before it).

        Raises:
            TypeError: `message_id` is no str or `timeout_seconds` no number.
            ValueError: `timeout_seconds` < 0 or not finite, or `message_id` empty.
            QueueClosedError: The handle is or became closed while waiting.
            BackendUnavailableError: The server could not be reached to look.
        """
        self._ensure_open()
        # NUL is allowed: no result is stored under such an id, so it waits out its timeout.
        check_text("message_id", message_id)
        timeout = check_seconds("timeout_seconds", timeout_seconds, positive=False)
        deadline = self._clock.monotonic() + timeout
        storable = storable_text(message_id)
        listener = self._listener() if storable and timeout > 0 else None
        # Watched before the first look, so a put right after the look still wakes us.
        event = listener.watch_result(message_id) if listener is not None else None
        try:
            while True:
                self._ensure_open()
                # Cleared before the look: a notification during it sets it again.
                if event is not None:
                    event.clear()
                if storable:
                    body = (await self._fetch([message_id])).get(message_id)
                    if body is not None:
                        return body
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    return None
                if (listener is not None and listener.connected) or not storable:
                    pause = min(remaining, SAFETY_POLL_SECONDS)
                else:
                    pause = min(remaining, POLL_SECONDS)
                await self._pause(event, pause)
        finally:
            if listener is not None and event is not None:
                listener.unwatch_result(message_id, event)

    async def _pause(self, event: asyncio.Event | None, seconds: float) -> None:
        """Sleep `seconds` on the clock, or until `event` is set or `close` is called."""
        waits: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(self._clock.sleep(seconds)),
            asyncio.ensure_future(self._closed.wait()),
        }
        if event is not None:
            waits.add(asyncio.ensure_future(event.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        """Delete the results of `message_ids`; returns how many unexpired ones existed.

        One statement; a duplicated id counts once; ids that could never be stored
        are skipped.

        Raises:
            TypeError: `message_ids` is a single string, or holds something else.
        """
        self._ensure_open()
        ids = sorted({i for i in _read_ids(message_ids) if i is not None})
        if not ids:
            return 0
        rows = await self._db.fetch("delete results", self._delete, (self._queue, ids))
        return int(rows[0][0]) if rows else 0


def _read_ids(message_ids: Sequence[str]) -> list[str | None]:
    """`message_ids` with None for each id no result can be stored under."""
    return [i if storable_text(i) else None for i in check_ids(message_ids)]
