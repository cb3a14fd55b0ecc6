"""`PostgresScheduling`: delayed adds, unique adds and cancellation (internal).

A delayed message is a ``messages`` row whose ``available_at`` lies in the future on
the server's clock: receive skips it until then, with no other bookkeeping. A unique
key is the row's ``unique_key`` column; the partial unique index ``messages_unique``
makes two holders of one key in one queue impossible, whoever inserts. The key goes
with its row (ack, dead-letter, cancel and purge delete the row), so nothing else has
to free it; ``unique_until`` frees it earlier: a keyed add first clears the key of a
row whose ``unique_until`` has passed, then inserts.

Also the small argument checks shared by the other optional parts (`check_text`,
`check_seconds`, `parse_message_id`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from taskrunner.errors import BackendError
from taskrunner.queue import Added, AddRequest
from taskrunner_backends.checks import (
    check_ids,
    check_request,
    check_requests,
    check_seconds as shared_check_seconds,
    check_text as shared_check_text,
)

from .db import Database
from .schema import notify_channel

__all__ = [
    "MAX_MESSAGE_ID",
    "MAX_SECONDS",
    "PostgresScheduling",
    "check_seconds",
    "check_text",
    "parse_message_id",
]

#: The largest message id (``bigint``): larger digit strings are nobody's id.
MAX_MESSAGE_ID = 2**63 - 1

#: Durations are capped here (about 142,000 years, as the Redis backend caps them), so a
#: huge one stays inside ``timestamptz``.
MAX_SECONDS = 2**52 / 1000

# Instants (Unix seconds) outside this range are clamped before `to_timestamp`, which
# refuses values beyond timestamptz: far past = past, far future = never in practice.
_MIN_INSTANT = -1e10
_MAX_INSTANT = 4e12

# How many times one keyed request is retried when its key's holder vanished between
# the conflict and the read of the holder's id (an ack or cancel racing the add).
_UNIQUE_RETRIES = 20

# One server instant per statement: added_at, and the base of every delay, so a delay
# is exact and a batch shares one add time (ids break the tie in FIFO order).
_PLAIN_INSERT = """
WITH t AS (SELECT clock_timestamp() AS now), new AS (
    INSERT INTO {s}.messages (queue, body, added_at, available_at)
    SELECT %s, r.body, t.now,
           CASE WHEN r.due IS NOT NULL THEN greatest(to_timestamp(r.due), t.now)
                ELSE t.now + r.delay * interval '1 second' END
    FROM t, unnest(%s::bytea[], %s::float8[], %s::float8[])
         WITH ORDINALITY AS r(body, delay, due, n)
    ORDER BY r.n
    RETURNING id
)
SELECT (SELECT array_agg(id ORDER BY id) FROM new), pg_notify(%s, %s)
"""

_FREE_KEY = """
UPDATE {s}.messages SET unique_key = NULL, unique_until = NULL
WHERE queue = %s AND unique_key = %s AND unique_until <= clock_timestamp()
"""

# The fallback SELECT reads the statement's snapshot, which includes the earlier
# statements of this transaction (a holder added earlier in the batch).
_KEYED_INSERT = """
WITH t AS (SELECT clock_timestamp() AS now), ins AS (
    INSERT INTO {s}.messages (queue, body, added_at, available_at, unique_key, unique_until)
    SELECT %(q)s, %(body)s, t.now,
           CASE WHEN %(due)s::float8 IS NOT NULL
                THEN greatest(to_timestamp(%(due)s::float8), t.now)
                ELSE t.now + %(delay)s::float8 * interval '1 second' END,
           %(key)s,
           t.now + %(hold)s::float8 * interval '1 second'
    FROM t
    ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id, true FROM ins
UNION ALL
SELECT id, false FROM {s}.messages
WHERE queue = %(q)s AND unique_key = %(key)s AND NOT EXISTS (SELECT 1 FROM ins)
"""

# Advisory locks on the batch's keys, taken in one order: two batches naming the same
# keys in different orders would otherwise deadlock on each other's uncommitted
# index entries. Collisions of the hash only serialize unrelated batches a little.
_LOCK_KEYS = """
SELECT count(pg_advisory_xact_lock(h)) FROM (
    SELECT DISTINCT hashtextextended(%s || ':' || k, 0) AS h FROM unnest(%s::text[]) AS k
    ORDER BY h
) AS keys
"""

_CANCEL = """
DELETE FROM {s}.messages
WHERE queue = %s AND id = ANY(%s::bigint[]) AND owner IS NULL
RETURNING id
"""


class _Request:
    """One checked request, as the statements take it."""

    __slots__ = ("body", "delay", "due", "hold", "key")

    def __init__(
        self, body: bytes, delay: float, due: float | None, key: str | None, hold: float | None
    ) -> None:
        self.body = body
        self.delay = delay
        self.due = due
        self.key = key
        self.hold = hold


class PostgresScheduling:
    """Delayed and unique adds and cancellation of one queue (`taskrunner.queue.Scheduling`).

    Guarantees (on top of the protocol's):

    * Due times are on the server's clock: ``delay_seconds`` counts from the
      server's ``clock_timestamp()`` at the add, ``due_at`` is compared with it; a due
      time in the past is ready at once and keeps its place in FIFO order (it counts
      from the add, never earlier).
    * Requests without a unique key are added in one statement per call; a batch with
      keys runs in one transaction sent in one pipelined round trip (plus a retry
      round for a request whose key holder vanished in between).
    * Every add notifies the queue's channel in the same transaction, so a blocked
      receive wakes.
    * cancel deletes only rows that are not leased, in one statement; a cancel
      racing a receive either removes the message or finds it delivered.

    Args:
        db: The backend's `Database`.
        queue: The queue's name.
        check_open: Raises `QueueClosedError` once the queue handle is closed.
    """

    def __init__(self, db: Database, queue: str, *, check_open: Callable[[], None]) -> None:
        self._db = db
        self._queue = queue
        self._check_open = check_open
        self._channel = notify_channel(db.schema)
        self._plain = db.sql(_PLAIN_INSERT)
        self._free = db.sql(_FREE_KEY)
        self._keyed = db.sql(_KEYED_INSERT)
        self._cancel = db.sql(_CANCEL)

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request's body with its options; one `Added` per request, in order.

        Raises:
            TypeError: A request is not an `AddRequest`, or a field has the wrong type.
            ValueError: A duration is negative or not finite, a unique key is empty
                or holds NUL or a lone surrogate; nothing is added.
            BackendUnavailableError: The server could not be reached; with unique keys
                nothing was added (one transaction), without them likewise (one
                statement), unless the connection broke during the commit.
        """
        self._check_open()
        checked = [_request(request) for request in check_requests(requests, nul=False)]
        if not checked:
            return []
        if all(item.key is None for item in checked):
            return [Added(message_id=i) for i in await self._add_plain(checked)]
        return await self._add_keyed(checked)

    async def _add_plain(self, items: Sequence[_Request]) -> list[str]:
        rows = await self._db.fetch(
            "add requests",
            self._plain,
            (self._queue, *_columns(items), self._channel, self._queue),
        )
        return _ids(rows[0][0] if rows else None, len(items))

    async def _add_keyed(self, items: Sequence[_Request]) -> list[Added]:
        results: list[Added | None] = [None] * len(items)
        keys = sorted({item.key for item in items if item.key is not None})
        connection = self._db.connection("add requests")
        async with connection as conn, conn.pipeline(), conn.transaction():
            await conn.execute(self._db.sql(_LOCK_KEYS), (self._queue, keys))
            pending = list(range(len(items)))
            for _ in range(_UNIQUE_RETRIES):
                pending = await self._run_batch(conn, items, pending, results)
                if not pending:
                    break
            else:
                raise BackendError(
                    "add requests: a unique key's holder kept vanishing between the "
                    f"conflict and the read of its id ({_UNIQUE_RETRIES} tries)"
                )
            await conn.execute("SELECT pg_notify(%s, %s)", (self._channel, self._queue))
        return [r for r in results if r is not None]

    async def _run_batch(
        self,
        conn: Any,
        items: Sequence[_Request],
        indexes: Sequence[int],
        results: list[Added | None],
    ) -> list[int]:
        """Send the requests at `indexes` (runs of plain ones as one insert); the retries."""
        cursors: list[tuple[list[int], Any, bool]] = []
        start = 0
        while start < len(indexes):
            item = items[indexes[start]]
            if item.key is None:
                end = start
                while end < len(indexes) and items[indexes[end]].key is None:
                    end += 1
                run = list(indexes[start:end])
                cursor = await conn.execute(
                    self._plain,
                    (self._queue, *_columns([items[i] for i in run]), self._channel, self._queue),
                )
                cursors.append((run, cursor, False))
                start = end
                continue
            await conn.execute(self._free, (self._queue, item.key))
            cursor = await conn.execute(self._keyed, _keyed_params(self._queue, item))
            cursors.append(([indexes[start]], cursor, True))
            start += 1
        again: list[int] = []
        for run, cursor, keyed in cursors:
            rows = await cursor.fetchall()
            if not keyed:
                for index, message_id in zip(run, _ids(rows[0][0], len(run)), strict=True):
                    results[index] = Added(message_id=message_id)
            elif rows:
                results[run[0]] = Added(message_id=str(rows[0][0]), added=bool(rows[0][1]))
            else:
                again.append(run[0])
        return again

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Remove queued or delayed messages so they are never delivered; frees their keys.

        One statement; a row is removed only while no consumer holds it.

        Returns:
            One flag per id, in order: True when this call removed the message; False
            when it was leased, completed, dead, cancelled, unknown or not an id of
            this backend (not digits, or out of range: never sent to the server). A
            duplicated id is True once, at its first place.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`.
        """
        self._check_open()
        ids = [parse_message_id(i) for i in check_ids(message_ids)]
        wanted = sorted({i for i in ids if i is not None})
        if not wanted:
            return [False] * len(ids)
        rows = await self._db.fetch("cancel", self._cancel, (self._queue, wanted))
        removed = {int(row[0]) for row in rows}
        flags = []
        for i in ids:
            flags.append(i is not None and i in removed)
            if i is not None:
                removed.discard(i)
        return flags


def _keyed_params(queue: str, item: _Request) -> dict[str, Any]:
    """The parameters of `_KEYED_INSERT` for one keyed request."""
    return {
        "q": queue,
        "body": item.body,
        "key": item.key,
        "hold": item.hold,
        "due": item.due,
        "delay": item.delay,
    }


def _columns(items: Sequence[_Request]) -> tuple[list[bytes], list[float], list[float | None]]:
    return [i.body for i in items], [i.delay for i in items], [i.due for i in items]


def _ids(values: Sequence[int] | None, expected: int) -> list[str]:
    """The new ids of one insert in request order: identities grow in insertion order."""
    ids = [str(v) for v in values or ()]
    if len(ids) != expected:
        raise BackendError(f"add requests: the server returned {len(ids)} ids for {expected}")
    return ids


def _request(request: AddRequest) -> _Request:
    """A request `check_request` accepted, its times clamped to what the columns hold."""
    check_request(request, nul=False)
    due_at, hold = request.due_at, request.unique_seconds
    return _Request(
        request.body,
        min(MAX_SECONDS, float(request.delay_seconds)),
        None if due_at is None else min(_MAX_INSTANT, max(_MIN_INSTANT, float(due_at))),
        request.unique_key,
        None if hold is None else min(MAX_SECONDS, float(hold)),
    )


def check_text(name: str, value: str) -> str:
    """`value` if it is a non-empty str PostgreSQL text can hold; else TypeError/ValueError."""
    return shared_check_text(name, value, nul=False)


def storable_text(value: str) -> bool:
    """Whether `value` (a str) could be stored as text: non-empty, no NUL, valid UTF-8."""
    if not value or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_seconds(name: str, seconds: float, *, positive: bool) -> float:
    """`seconds` as a float capped at `MAX_SECONDS`; TypeError/ValueError when unusable."""
    return min(MAX_SECONDS, shared_check_seconds(name, seconds, positive=positive))


def parse_message_id(value: object) -> int | None:
    """The row id a message id names, or None when it is no id of this backend.

    Only the canonical spelling (``str(id)``): ASCII digits, no sign, no leading zero,
    within ``bigint``; so ``"01"`` or ``" 1"`` never alias message 1.
    """
    if not isinstance(value, str) or not value or len(value) > 19:
        return None
    if not value.isascii() or not value.isdigit() or (value[0] == "0"):
        return None
    number = int(value)
    return number if number <= MAX_MESSAGE_ID else None
