"""The transactional outbox: dispatch in your PostgreSQL transaction, deliver through Redis.

For an application whose data lives in PostgreSQL and whose queue is Redis (or Redis
Cluster). `OutboxWriter` is a `TransactionalAdd`: ``dispatch(..., connection=conn)``
inserts one row per message into ``<schema>.outbox`` on the caller's connection, in
the caller's transaction, so the row exists if and only if that transaction commits.
`OutboxRelay` moves committed rows into the queue and deletes them.

Exactly one queue message per row. The relay takes a batch of rows with ``FOR UPDATE
SKIP LOCKED`` (several relays take disjoint batches), adds them with the queue's
`add_relayed` (idempotent per row id: the add script records each row's outcome in
the queue's own slot, atomically with the add), then deletes the rows and commits.
A relay killed after its add but before its commit leaves the rows unlocked and in
place; whichever relay takes them next adds nothing for them (the record answers)
and deletes them. The record is kept `RECORD_SECONDS` (7 days): a row whose relay
died after the add and that no relay takes for that long could be sent twice.

Latency. Every outbox insert sends ``pg_notify`` in the caller's transaction (delivered
at COMMIT); the relay LISTENs and wakes at once, and polls every `POLL_SECONDS` in
case a notification was missed (a reconnect).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Sequence
from typing import Any, Protocol

import psycopg
from psycopg import sql

from taskrunner.clock import Clock, SystemClock
from taskrunner.errors import BackendError, ConfigurationError
from taskrunner.queue import Added, AddRequest
from taskrunner.redaction import mask_secrets
from taskrunner_backends.checks import check_requests

from .errors import translate_errors
from .scheduling import MAX_SECONDS, _request
from .transactional import TransactionError, async_runner, drive_async, drive_sync, sync_runner
from .url import parse_url

__all__ = [
    "BATCH",
    "POLL_SECONDS",
    "RECORD_SECONDS",
    "OutboxRelay",
    "OutboxSink",
    "OutboxWriter",
    "create_outbox",
    "relay_from_url",
    "writer_from_url",
]

log = logging.getLogger("taskrunner.outbox")

#: Rows per relay transaction.
BATCH = 500
#: How long a relayed row's record is kept in the queue (seconds): a resend within it is
#: recognised.
RECORD_SECONDS = 7 * 24 * 3600.0
#: The relay's fallback poll when no notification arrives (seconds).
POLL_SECONDS = 1.0
#: The relay's pause after a failed round (server down), before it tries again.
RETRY_SECONDS = 1.0

_Step = tuple[str, Any]
_Rows = list[tuple[Any, ...]]

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL,
    body bytea NOT NULL,
    due_at float8,
    unique_key text,
    unique_seconds float8,
    partition_key text,
    added_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS outbox_queue_id ON {s}.outbox (queue, id);
"""

# A delay becomes a due time on the database's clock at the insert, so a row relayed
# late is still due when it was meant to be (on the queue server's clock: keep them in
# sync, as for any delayed dispatch).
_INSERT = """
WITH new AS (
    INSERT INTO {s}.outbox (queue, body, due_at, unique_key, unique_seconds, partition_key)
    SELECT %s, r.body,
           CASE WHEN r.due IS NOT NULL THEN r.due
                WHEN r.delay > 0 THEN extract(epoch FROM clock_timestamp()) + r.delay END,
           r.ukey, r.hold, r.pkey
    FROM unnest(%s::bytea[], %s::float8[], %s::float8[], %s::text[], %s::float8[], %s::text[])
         WITH ORDINALITY AS r(body, delay, due, ukey, hold, pkey, n)
    ORDER BY r.n
    RETURNING id
)
SELECT (SELECT array_agg(id ORDER BY id) FROM new), pg_notify(%s, %s)
"""

_TAKE = """
SELECT id, body, due_at, unique_key, unique_seconds, partition_key FROM {s}.outbox
WHERE queue = %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
"""

_DELETE = "DELETE FROM {s}.outbox WHERE id = ANY(%s::bigint[])"


def _render(template: str, schema: str) -> str:
    return sql.SQL(template).format(s=sql.Identifier(schema)).as_string(None)


def _channel(schema: str) -> str:
    return f"taskrunner_outbox.{schema}"


class OutboxSink(Protocol):
    """What the relay adds to: a queue whose adds are idempotent per relay id.

    The Redis backend's `RedisStreamsQueue` and `PartitionedRedisQueue` are sinks.
    """

    async def add_relayed(
        self, requests: Sequence[AddRequest], relay_ids: Sequence[str], *, record_seconds: float
    ) -> list[Added]:
        """Add each request once per relay id; a recorded id adds nothing again."""
        ...


def create_outbox(conn: psycopg.Connection[Any], schema: str = "taskrunner") -> None:
    """Create the outbox table (and its schema) if missing; idempotent, safe concurrently."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"taskrunner outbox {schema}",))
        conn.execute(_render(_DDL, schema))


class OutboxWriter:
    """Writes dispatches into the outbox in the caller's transaction (`TransactionalAdd`).

    Give it to the producer: ``Producer(queue, app, outbox=OutboxWriter(app.queue))``;
    then ``dispatch(..., connection=conn)`` inserts into ``<schema>.outbox`` on `conn`.
    The connection kinds taken and the refusals (closed, autocommit outside a
    transaction, failed transaction) are those of the PostgreSQL backend's
    transactional dispatch; a database without the outbox table is refused too.

    The dispatch returns ``outbox-<row id>`` as the message id: the queue's own id
    exists only once the relay moved the row, so ``status``/``result``/``cancel`` by
    that id are not available.

    Args:
        queue_name: The queue the relay moves these rows to (the app's queue).
        schema: The schema holding the outbox table.
    """

    def __init__(self, queue_name: str, *, schema: str = "taskrunner") -> None:
        self.queue_name = queue_name
        self.schema = schema
        self._table = _render("{s}.outbox", schema)
        self._insert = _render(_INSERT, schema)
        self._channel = _channel(schema)

    def add_sync(self, connection: object, requests: Sequence[AddRequest]) -> list[Added]:
        """Insert one outbox row per request in `connection`'s open transaction, blocking."""
        columns = _columns(requests)
        return drive_sync(self._steps(columns, len(requests)), sync_runner(connection))

    async def add(self, connection: object, requests: Sequence[AddRequest]) -> list[Added]:
        """`add_sync` from asyncio code."""
        columns = _columns(requests)
        run = async_runner(connection)
        if run is None:
            return self.add_sync(connection, requests)
        return await drive_async(self._steps(columns, len(requests)), run)

    def _steps(
        self, columns: tuple[list[Any], ...], count: int
    ) -> Generator[_Step, _Rows, list[Added]]:
        checked = yield ("SELECT current_database(), to_regclass(%s)::text", (self._table,))
        database, table = checked[0]
        if table is None:
            raise TransactionError(
                f"database {database!r} has no outbox table {self._table}: create it with "
                "taskrunner_backends.postgres.outbox.create_outbox or start a relay once "
                "(taskrunner relay --outbox URL); nothing was written"
            )
        if count == 0:
            return []
        rows = yield (self._insert, (self.queue_name, *columns, self._channel, self.queue_name))
        ids = [str(i) for i in (rows[0][0] or ())]
        if len(ids) != count:
            raise BackendError(f"outbox insert: the server returned {len(ids)} ids for {count}")
        return [Added(message_id=f"outbox-{i}") for i in ids]


def _columns(requests: Sequence[AddRequest]) -> tuple[list[Any], ...]:
    checked = [(r, _request(r)) for r in check_requests(requests, nul=False)]
    return (
        [item.body for _, item in checked],
        [item.delay for _, item in checked],
        [item.due for _, item in checked],
        [item.key for _, item in checked],
        [item.hold for _, item in checked],
        [request.partition_key for request, _ in checked],
    )


class OutboxRelay:
    """Moves committed outbox rows of one queue into it, each exactly once, and deletes them.

    Several relays may run on one outbox (in one process or many): each takes its own
    rows (``SKIP LOCKED``). `run` loops until cancelled; `relay_once` moves one batch
    (for tests and tools).

    Args:
        url: libpq URL of the application's database (where the outbox is).
        sink: The queue to add to (a Redis queue).
        queue_name: Whose rows to move.
        schema: The outbox's schema; the table is created at start when missing.
        batch: Rows per transaction.
        record_seconds: How long the queue remembers a relayed row (see the module).
        clock: For the waits between rounds.
    """

    def __init__(
        self,
        url: str,
        sink: OutboxSink,
        queue_name: str,
        *,
        schema: str = "taskrunner",
        batch: int = BATCH,
        record_seconds: float = RECORD_SECONDS,
        clock: Clock | None = None,
    ) -> None:
        given: object = batch
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ValueError(f"batch must be a whole number >= 1, got {batch!r}")
        if not 0 < record_seconds <= MAX_SECONDS:
            raise ValueError(f"record_seconds must be > 0, got {record_seconds!r}")
        self._url = url
        self._sink = sink
        self._queue = queue_name
        self._schema = schema
        self._batch = batch
        self._record = record_seconds
        self._clock = clock or SystemClock()
        self._take = _render(_TAKE, schema)
        self._delete = _render(_DELETE, schema)
        self._channel = _channel(schema)
        self._failing = False
        self.relayed = 0
        """Rows moved (and deleted) by this relay so far."""

    async def relay_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Move one batch of committed rows on `conn` (autocommit); how many were moved."""
        async with conn.transaction():
            cursor = await conn.execute(self._take, (self._queue, self._batch), binary=True)
            rows = await cursor.fetchall()
            if not rows:
                return 0
            requests = [
                AddRequest(
                    body=bytes(body),
                    due_at=due,
                    unique_key=key,
                    unique_seconds=hold,
                    partition_key=pkey,
                )
                for _, body, due, key, hold, pkey in rows
            ]
            ids = [int(row[0]) for row in rows]
            await self._sink.add_relayed(
                requests, [str(i) for i in ids], record_seconds=self._record
            )
            await conn.execute(self._delete, (ids,))
        self.relayed += len(rows)
        return len(rows)

    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Relay until cancelled: drain, then wait for a notification or the poll.

        A failure of the database or the queue (unreachable, a refused statement) is
        logged once per outage and retried every `RETRY_SECONDS`; no row is lost
        meanwhile (it stays in the outbox). `ready` is set once the first connection is up.
        """
        while True:
            try:
                await self._serve(ready)
            except (psycopg.Error, BackendError) as exc:
                if not self._failing:
                    log.warning(
                        "outbox relay for queue %r: %s; retrying every %gs",
                        self._queue,
                        mask_secrets(str(exc)),
                        RETRY_SECONDS,
                    )
                self._failing = True
                await self._clock.sleep(RETRY_SECONDS)

    async def _serve(self, ready: asyncio.Event | None) -> None:
        with translate_errors("outbox relay", ()):
            async with (
                await psycopg.AsyncConnection.connect(self._url, autocommit=True) as conn,
                await psycopg.AsyncConnection.connect(self._url, autocommit=True) as listen,
            ):
                await asyncio.to_thread(self._create)
                await listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                if ready is not None:
                    ready.set()
                while True:
                    while await self.relay_once(conn) == self._batch:
                        pass
                    if self._failing:
                        log.warning("outbox relay for queue %r: relaying again", self._queue)
                        self._failing = False
                    async for _ in listen.notifies(timeout=POLL_SECONDS, stop_after=1):
                        pass

    def _create(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            create_outbox(conn, self._schema)


def relay_from_url(outbox_url: str, queue: object, queue_name: str) -> OutboxRelay:
    """The relay of `queue_name` for the outbox at `outbox_url` into `queue`.

    `outbox_url` is a ``postgresql://`` URL of the application's database; its
    ``?schema=`` option names the outbox's schema (default ``taskrunner``).

    Raises:
        ConfigurationError: A bad URL, or `queue` is no queue the relay can add to
            idempotently (today: Redis, single server or Cluster).
    """
    parsed = parse_url(outbox_url)
    add_relayed = getattr(queue, "add_relayed", None)
    if not callable(add_relayed):
        raise ConfigurationError(
            f"outbox_url is set, but {type(queue).__name__} cannot take relayed rows "
            "(an outbox relays into a Redis queue; a PostgreSQL queue writes in your "
            "transaction itself, without an outbox)",
            setting="outbox_url",
        )
    sink: OutboxSink = queue  # type: ignore[assignment]
    return OutboxRelay(parsed.conninfo, sink, queue_name, schema=parsed.schema)


def writer_from_url(outbox_url: str, queue_name: str) -> OutboxWriter:
    """The `OutboxWriter` of `queue_name` for the outbox at `outbox_url` (its ``?schema=``).

    Raises:
        ConfigurationError: A bad URL.
    """
    return OutboxWriter(queue_name, schema=parse_url(outbox_url).schema)
