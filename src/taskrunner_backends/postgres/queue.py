"""`PostgresQueue`: the `taskrunner.queue.Queue` contract on PostgreSQL.

Every message of every queue of a schema is a row of ``messages`` (see `schema`). A
receive leases rows with one ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP
LOCKED)``: concurrent receivers never wait for each other and never take the same row.
A lease is the row's ``owner`` and ``delivery_count`` (the receipt) plus ``expires_at``
on the server's clock; heartbeat, ack, release and dead-letter act on a batch in one
statement whose ``WHERE`` matches id, queue, owner and delivery count, so a stale
receipt finds no row and is reported lost, and nothing happens between the check and
the change. Reclaim leases rows whose ``expires_at`` passed, judged by the lease their
holder was granted.

A receive that finds nothing waits on LISTEN/NOTIFY (`listener`): every add, release
and dead-letter retry notifies the queue in its own transaction, and the waiter also
wakes at the next delayed message's due time and every `SAFETY_POLL_SECONDS` in case a
notification was lost (the listener's connection dropped), so it never busy-polls.

Durations are measured on the server's clock (``clock_timestamp()``), never the
client's: workers on machines with skewed clocks agree on every lease.

Opening the pool and checking the schema live in `opening` (re-exported here, with
`open_from_url` building the queue on top). What stays is over 800 lines on purpose: the
lease statements and the `PostgresQueue` methods that run them are read side by side,
since each statement's ``WHERE`` is the receipt check its method's guarantee rests on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import msgspec

from taskrunner.clock import Clock, SystemClock
from taskrunner.errors import (
    BackendError,
    QueueClosedError,
)
from taskrunner.names import check_queue_name
from taskrunner.queue import (
    CONTRACT_VERSION,
    AddRequest,
    Capabilities,
    ConsumerCleanup,
    ConsumerStats,
    DeadLetter,
    Delivery,
    Leadership,
    MessageBrowser,
    MessageLookup,
    QueueNames,
    QueueStats,
    Receipt,
    ResultStore,
    Scheduling,
    TransactionalAdd,
    WorkerInfo,
)
from taskrunner.queue_parts import AdminOnSelf, WorkerRegistryOnSelf
from taskrunner_backends.checks import (
    check_bodies,
    check_count,
    check_deliveries,
    check_ids,
    check_worker,
    encode_reason,
)

from .browse import PostgresBrowser, PostgresQueueNames
from .db import Database
from .leadership import PostgresLeadership
from .listener import Listener
from .lookup import PostgresLookup
from .opening import migrate_from_url, open_database, prepare_schema
from .results import PostgresResults
from .scheduling import (
    MAX_SECONDS,
    PostgresScheduling,
    check_seconds,
    check_text,
    parse_message_id,
    storable_text,
)
from .schema import notify_channel
from .transactional import PostgresTransactionalAdd
from .url import parse_url

# migrate_from_url lives in `opening`; it stays importable from here, as it always was.
__all__ = ["SAFETY_POLL_SECONDS", "PostgresQueue", "migrate_from_url", "open_from_url"]

#: A waiting receive looks again at least this often, in case a notification was lost.
SAFETY_POLL_SECONDS = 1.0
#: ... and this often while the LISTEN connection is down.
DISCONNECTED_POLL_SECONDS = 0.25
# When ready rows exist but are locked by someone else's transaction.
_LOCKED_POLL_SECONDS = 0.05

_MAX_INT4 = 2**31 - 1
_MAX_INT8 = 2**63 - 1

_BASE = Capabilities(
    blocking_receive=True,
    ordering="fifo",
    persistent=True,
    durable_enqueue=True,
    shared_across_instances=True,
    # The server's clock is exact to the microsecond; the margin covers a round trip
    # and a busy event loop between the statement and the caller's own clock. 0.01
    # passes the suite on an idle machine, but with three suites at once on two CPUs
    # its edge probes landed 49-64 ms past their 30 ms slack (three tries of five
    # failed); 0.05 leaves that room, and is nothing next to leases of seconds.
    lease_precision_seconds=0.05,
    delayed_add=True,
    unique_add=True,
    cancel=True,
    leadership=True,
    results=True,
    result_notify=True,
    lookup=True,
    browse=True,
)
_NOT_DURABLE = msgspec.structs.replace(_BASE, durable_enqueue=False)

_LEASE_SET = """
    owner = %(consumer)s,
    delivery_count = m.delivery_count + 1,
    leased_at = clock_timestamp(),
    lease_seconds = %(lease)s,
    expires_at = clock_timestamp() + %(lease)s * interval '1 second'
"""

_RECEIVE = (
    """
WITH picked AS (
    SELECT id FROM {s}.messages
    WHERE queue = %(queue)s AND owner IS NULL AND available_at <= clock_timestamp()
    ORDER BY available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {s}.messages m SET"""
    + _LEASE_SET
    + """
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.body, m.delivery_count, m.available_at
"""
)

_RECLAIM = (
    """
WITH picked AS (
    SELECT id FROM {s}.messages
    WHERE queue = %(queue)s AND owner IS NOT NULL AND expires_at < clock_timestamp()
    ORDER BY expires_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {s}.messages m SET"""
    + _LEASE_SET
    + """
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.body, m.delivery_count, m.expires_at
"""
)

# Seconds until the next not-leased row is due (<= 0: ready rows exist, locked by
# someone else's transaction); NULL when there is none.
_NEXT_DUE = """
SELECT extract(epoch FROM min(available_at) - clock_timestamp())::float8
FROM {s}.messages WHERE queue = %s AND owner IS NULL
"""

# The owner test is IS NOT DISTINCT FROM (with d.owner never NULL) rather than `=`
# because a strict `m.owner = d.owner` implies `owner IS NOT NULL`, the predicate of
# messages_leased: the planner may then fetch the fenced rows by scanning every leased
# row of the queue (it did, after an ANALYZE taken while few rows were leased: 1.8 ms per
# ack of 100 with 2,000 in flight, growing with the rows in flight). Without that
# implication the only index that fits is the primary key, whatever the statistics say.
_OWNER_MATCHES = "m.owner IS NOT DISTINCT FROM d.owner AND d.owner IS NOT NULL"

_FENCE = (
    """
FROM unnest(%(ids)s::bigint[], %(owners)s::text[], %(counts)s::int[]) AS d(id, owner, dc)
WHERE m.id = d.id AND m.queue = %(queue)s AND """
    + _OWNER_MATCHES
    + """
  AND m.delivery_count = d.dc
"""
)

_HEARTBEAT = (
    """
UPDATE {s}.messages m SET leased_at = clock_timestamp(),
    expires_at = clock_timestamp() + m.lease_seconds * interval '1 second'"""
    + _FENCE
    + "RETURNING m.id, d.owner, d.dc"
)

_ACK = (
    "DELETE FROM {s}.messages m USING"
    + _FENCE.replace("FROM", "", 1)
    + ("RETURNING m.id, d.owner, d.dc")
)

_RELEASE = (
    """
WITH released AS (
    UPDATE {s}.messages m SET owner = NULL, leased_at = NULL, lease_seconds = NULL,
        expires_at = NULL, available_at = clock_timestamp() + %(delay)s * interval '1 second'"""
    + _FENCE
    + """RETURNING m.id, d.owner, d.dc
)
SELECT r.id, r.owner, r.dc,
       CASE WHEN r.n = 1 THEN pg_notify(%(channel)s, %(queue)s) END
FROM (SELECT released.*, row_number() OVER () AS n FROM released) r
"""
)

# Dead letters are stored in the batch's order (a delivery's first copy counts), so
# list_dead_letters shows them in the order the caller gave them up.
_DEAD_LETTER = (
    """
WITH d AS (
    SELECT DISTINCT ON (id, owner, dc) id, owner, dc, n
    FROM unnest(%(ids)s::bigint[], %(owners)s::text[], %(counts)s::int[])
         WITH ORDINALITY AS u(id, owner, dc, n)
    ORDER BY id, owner, dc, n
), gone AS (
    DELETE FROM {s}.messages m USING d
    WHERE m.id = d.id AND m.queue = %(queue)s AND """
    + _OWNER_MATCHES
    + """
      AND m.delivery_count = d.dc
    RETURNING m.id, d.owner, d.dc, d.n, m.body, m.added_at
), buried AS (
    INSERT INTO {s}.dead_letters (queue, original_id, body, reason, delivery_count, added_at)
    SELECT %(queue)s, gone.id, gone.body, %(reason)s, gone.dc, gone.added_at
    FROM gone ORDER BY gone.n
)
SELECT id, owner, dc FROM gone
"""
)

# One statement, one instant (statement_timestamp()) for every count and age; the
# consumers are the owners of in-flight rows (idle = since their latest grant or
# heartbeat), aggregated into parallel arrays.
_STATS = """
WITH q AS (
    SELECT owner, available_at, leased_at FROM {s}.messages WHERE queue = %(queue)s
), c AS (
    SELECT owner, count(*) AS n,
           extract(epoch FROM statement_timestamp() - max(leased_at))::float8 AS idle
    FROM q WHERE owner IS NOT NULL GROUP BY owner
)
SELECT
    (SELECT count(*) FROM q WHERE owner IS NULL AND available_at <= statement_timestamp()),
    (SELECT count(*) FROM q WHERE owner IS NULL AND available_at > statement_timestamp()),
    (SELECT count(*) FROM q WHERE owner IS NOT NULL),
    (SELECT extract(epoch FROM statement_timestamp() - min(available_at))::float8
     FROM q WHERE owner IS NULL AND available_at <= statement_timestamp()),
    (SELECT extract(epoch FROM statement_timestamp() - min(leased_at))::float8
     FROM q WHERE owner IS NOT NULL),
    (SELECT count(*) FROM {s}.dead_letters WHERE queue = %(queue)s),
    (SELECT array_agg(owner ORDER BY owner) FROM c),
    (SELECT array_agg(n ORDER BY owner) FROM c),
    (SELECT array_agg(idle ORDER BY owner) FROM c)
"""

_LEN = "SELECT count(*) FROM {s}.messages WHERE queue = %s"

_LIST_DEAD = """
SELECT id, original_id, body, reason, delivery_count, extract(epoch FROM dead_at)::float8
FROM {s}.dead_letters WHERE queue = %s ORDER BY id LIMIT %s
"""

_RETRY_DEAD = """
WITH picked AS (
    DELETE FROM {s}.dead_letters
    WHERE queue = %(queue)s AND (%(all)s OR id = ANY(%(ids)s::bigint[]))
    RETURNING id, body
), added AS (
    INSERT INTO {s}.messages (queue, body)
    SELECT %(queue)s, picked.body FROM picked ORDER BY picked.id
    RETURNING id
)
SELECT (SELECT array_agg(id ORDER BY id) FROM added),
       CASE WHEN EXISTS (SELECT 1 FROM added) THEN pg_notify(%(channel)s, %(queue)s) END
"""

_PURGE_DEAD = """
DELETE FROM {s}.dead_letters
WHERE queue = %(queue)s AND (%(all)s OR id = ANY(%(ids)s::bigint[]))
"""

_PURGE = "DELETE FROM {s}.messages WHERE queue = %s"

_DELETE_QUEUE = (
    "DELETE FROM {s}.messages WHERE queue = %s",
    "DELETE FROM {s}.dead_letters WHERE queue = %s",
    "DELETE FROM {s}.workers WHERE queue = %s",
    "DELETE FROM {s}.leaders WHERE queue = %s",
    "DELETE FROM {s}.fires WHERE queue = %s",
    "DELETE FROM {s}.results WHERE queue = %s",
)

_PUBLISH_WORKER = """
INSERT INTO {s}.workers
    (queue, instance, workers, busy, average_seconds, seen_at, succeeded, failed, expires_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, clock_timestamp() + %s * interval '1 second')
ON CONFLICT (queue, instance) DO UPDATE SET
    workers = EXCLUDED.workers, busy = EXCLUDED.busy,
    average_seconds = EXCLUDED.average_seconds, seen_at = EXCLUDED.seen_at,
    succeeded = EXCLUDED.succeeded, failed = EXCLUDED.failed,
    expires_at = EXCLUDED.expires_at
"""

_REMOVE_WORKER = "DELETE FROM {s}.workers WHERE queue = %s AND instance = %s"

# Reads the live rows and forgets long-expired ones in one statement (the DELETE sees
# the same snapshot, so it never removes a row this read lists).
_LIVE_WORKERS = """
WITH forgotten AS (
    DELETE FROM {s}.workers
    WHERE queue = %(queue)s AND expires_at <= clock_timestamp() - interval '1 minute'
)
SELECT instance, workers, busy, average_seconds, seen_at, succeeded, failed FROM {s}.workers
WHERE queue = %(queue)s AND expires_at > clock_timestamp()
"""


def _count_or_none(count: int | None) -> int | None:
    """A published count as a bigint column takes it (a caller's int may be any size)."""
    return None if count is None else max(0, min(count, _MAX_INT8))


def _fence_key(delivery: Delivery) -> tuple[int, str, int] | None:
    """(row id, owner, delivery count) of a receipt this backend could have issued."""
    row = parse_message_id(delivery.message_id)
    # Receipts come back from callers: their fields are not necessarily what they say.
    consumer: object = delivery.receipt.consumer
    count: object = delivery.receipt.delivery_count
    if row is None or not isinstance(consumer, str) or not storable_text(consumer):
        return None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _MAX_INT4:
        return None
    return row, consumer, count


# Array parameters as array literals, cast by the statement (``%(ids)s::bigint[]``):
# psycopg dumps a list element by element in Python (a regex per text element), which
# cost about 5 µs per element of a fenced batch, more than the rest of an ack's client
# side; one str.join is a fraction of that.


def _int_array(values: Sequence[int]) -> str:
    """A PostgreSQL array literal of `values` (ints, so nothing to quote)."""
    return "{" + ",".join(map(str, values)) + "}"


def _text_array(values: Sequence[str]) -> str:
    """A PostgreSQL array literal of `values`, each element quoted (no NUL: checked before)."""
    return (
        "{"
        + ",".join(
            ['"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values]
        )
        + "}"
    )


def _dead_ids(message_ids: Sequence[str] | None) -> tuple[bool, list[int]]:
    if message_ids is None:
        return True, []
    ids: list[int] = []
    for value in check_ids(message_ids):
        row = parse_message_id(value)
        if row is not None:
            ids.append(row)
    return False, ids


class PostgresQueue(AdminOnSelf, WorkerRegistryOnSelf):
    """A `taskrunner.queue.Queue` on PostgreSQL, with every optional part but consumer clean-up.

    It is its own `QueueAdmin` and `WorkerRegistry`; `scheduling`, `leadership`,
    `results` and `lookup` are small objects on the same `Database`. Consumers are not
    recorded apart from the rows they hold, so there is nothing to clean up
    (`consumer_cleanup` is None).

    Build one with `open_from_url`. Handles on the same server, schema and queue name,
    in one process or many, share the queue.

    Args:
        db: The pool and schema (closed by `aclose`).
        queue_name: The queue; ``.`` and ``..`` raise `ConfigurationError`, as on every
            backend.
        conninfo: The libpq connection string, for the LISTEN connection.
        clock: Bounds the waits of `receive` and `wait_result`; leases and delays are
            measured on the server's clock, whatever this is.
        durable: Whether a committed insert is durable (``synchronous_commit`` is not
            ``off``): claims ``durable_enqueue``.
        display: How to name the server in messages (the masked URL).
    """

    contract_version = CONTRACT_VERSION  # what the conformance suite checks

    def __init__(
        self,
        db: Database,
        *,
        queue_name: str,
        conninfo: str,
        clock: Clock | None = None,
        durable: bool = True,
        display: str = "",
    ) -> None:
        self._queue = check_queue_name(check_text("queue_name", queue_name))
        self._db = db
        self._clock: Clock = clock or SystemClock()
        self._capabilities = _BASE if durable else _NOT_DURABLE
        self._display = display
        self._closed = False
        self._closing = asyncio.Event()
        self._channel = notify_channel(db.schema)
        self._listener = Listener(conninfo, db.schema, self._queue, secrets=db.secrets)
        self._scheduling = PostgresScheduling(db, self._queue, check_open=self._check_open)
        self._leadership = PostgresLeadership(db, self._queue, check_open=self._check_open)
        self._lookup = PostgresLookup(db, self._queue, check_open=self._check_open)
        self._browse = PostgresBrowser(db, self._queue, check_open=self._check_open)
        self._names = PostgresQueueNames(db, check_open=self._check_open)
        self._transactional = PostgresTransactionalAdd(
            db, self._queue, conninfo=conninfo, channel=self._channel
        )
        self._results = PostgresResults(
            db,
            self._queue,
            check_open=self._check_open,
            listener=lambda: self._listener,
            clock=self._clock,
        )
        sql = db.sql
        self._receive_sql = sql(_RECEIVE)
        self._reclaim_sql = sql(_RECLAIM)
        self._next_due_sql = sql(_NEXT_DUE)
        self._heartbeat_sql = sql(_HEARTBEAT)
        self._ack_sql = sql(_ACK)
        self._release_sql = sql(_RELEASE)
        self._dead_letter_sql = sql(_DEAD_LETTER)
        self._stats_sql = sql(_STATS)

    def __repr__(self) -> str:
        return (
            f"PostgresQueue(queue_name={self._queue!r}, schema={self._db.schema!r}, "
            f"server={self._display!r})"
        )

    # -- parts -------------------------------------------------------------------------

    @property
    def requires_heartbeat(self) -> bool:
        """Always True: a lease lapses at its ``expires_at`` unless heartbeated."""
        return True

    @property
    def capabilities(self) -> Capabilities:
        """Blocking (LISTEN/NOTIFY), FIFO, persistent, shared, durable on commit."""
        return self._capabilities

    @property
    def consumer_cleanup(self) -> ConsumerCleanup | None:
        """None: consumers exist only as the owners of the rows they hold."""
        return None

    @property
    def scheduling(self) -> Scheduling:
        """Delayed adds, unique adds and cancellation."""
        return self._scheduling

    @property
    def leadership(self) -> Leadership:
        """Leader leases with fencing tokens and fire-once records."""
        return self._leadership

    @property
    def results(self) -> ResultStore:
        """Task results by message id, woken by NOTIFY."""
        return self._results

    @property
    def lookup(self) -> MessageLookup:
        """The state of messages by id."""
        return self._lookup

    @property
    def browse(self) -> MessageBrowser:
        """Keyset-paged, read-only listings of waiting and in-flight messages."""
        return self._browse

    @property
    def queue_names(self) -> QueueNames:
        """The queues of the schema that hold a message or a dead letter."""
        return self._names

    @property
    def transactional(self) -> TransactionalAdd:
        """Adds written in the caller's own transaction (`transactional`)."""
        return self._transactional

    @property
    def listener(self) -> Listener:
        """The handle's LISTEN connection (for tests: `Listener.connected`, its events)."""
        return self._listener

    @property
    def database(self) -> Database:
        """The pool and schema (for tests and tools)."""
        return self._db

    @property
    def queue_name(self) -> str:
        """The queue's name."""
        return self._queue

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the LISTEN connection (in the background; it retries on its own)."""
        await self._listener.start()

    async def aclose(self) -> None:
        """Close the queue; idempotent.

        Waiting receives and `wait_result` calls raise `QueueClosedError`; leases held
        through this handle are not given back (they lapse as after a crash).
        """
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._results.close()
        await self._listener.aclose()
        await self._db.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"{self!r} is closed")

    async def _fetch(
        self, action: str, query: Any, params: Any, *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """`Database.fetch`, reporting a call cut short by `aclose` as `QueueClosedError`."""
        self._check_open()
        try:
            return await self._db.fetch(action, query, params, binary=binary)
        except BackendError:
            if self._closed:
                raise QueueClosedError(f"{self!r} was closed during {action}") from None
            raise

    # -- the contract ------------------------------------------------------------------

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue bodies in one statement; ids in order (see `Queue.add`)."""
        self._check_open()
        bodies = check_bodies(bodies)
        if not bodies:
            return []
        added = await self._scheduling.add_requests([AddRequest(body=body) for body in bodies])
        return [item.message_id for item in added]

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Lease up to `max_messages` ready messages (see `Queue.receive`)."""
        self._check_open()
        check_text("consumer", consumer)
        check_count("max_messages", max_messages)
        wait = check_seconds("wait_seconds", wait_seconds, positive=False)
        lease = check_seconds("lease_seconds", lease_seconds, positive=True)
        deadline = self._clock.monotonic() + wait
        event = self._listener.messages_event()
        while True:
            # Cleared before looking: a notification during the look is kept for the wait.
            event.clear()
            got = await self._lease(self._receive_sql, "receive", consumer, lease, max_messages)
            if got:
                return got
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return []
            rows = await self._fetch("receive", self._next_due_sql, (self._queue,))
            due = rows[0][0] if rows else None
            poll = SAFETY_POLL_SECONDS if self._listener.connected else DISCONNECTED_POLL_SECONDS
            pause = min(remaining, poll)
            if due is not None:
                pause = min(pause, max(float(due), _LOCKED_POLL_SECONDS))
            await self._wait(event, pause)
            self._check_open()

    async def _wait(self, event: asyncio.Event, seconds: float) -> None:
        """Until `event` is set, the queue closes, or `seconds` pass on the clock."""
        if event.is_set():
            return
        waiters = [
            asyncio.ensure_future(event.wait()),
            asyncio.ensure_future(self._closing.wait()),
            asyncio.ensure_future(self._clock.sleep(seconds)),
        ]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            # Reap them so none is left pending. asyncio.wait collects their
            # CancelledErrors without raising them, but still raises a cancellation of
            # this task (suppressing CancelledError here could swallow that one).
            await asyncio.wait(waiters)

    async def _lease(
        self, query: Any, action: str, consumer: str, lease: float, limit: int
    ) -> list[Delivery]:
        params = {"queue": self._queue, "consumer": consumer, "lease": lease, "limit": limit}
        # Binary results: the bodies arrive as they are instead of in hex, which cuts
        # the client's cost of a batch's rows by a third to a half.
        rows = await self._fetch(action, query, params, binary=True)
        rows.sort(key=lambda row: (row[3], row[0]))
        return [
            Delivery(
                message_id=str(row_id),
                body=bytes(body),
                delivery_count=count,
                receipt=Receipt(consumer=consumer, delivery_count=count),
            )
            for row_id, body, count, _ in rows
        ]

    async def _fenced(
        self, action: str, query: Any, deliveries: Sequence[Delivery], **extra: Any
    ) -> list[Delivery]:
        """Run a fenced statement on the deliveries it can match; return the rest (lost)."""
        self._check_open()
        check_deliveries(deliveries)
        keys = [_fence_key(delivery) for delivery in deliveries]
        usable = [key for key in keys if key is not None]
        done: set[tuple[int, str, int]] = set()
        if usable:
            rows = await self._fetch(
                action,
                query,
                {
                    "ids": _int_array([key[0] for key in usable]),
                    "owners": _text_array([key[1] for key in usable]),
                    "counts": _int_array([key[2] for key in usable]),
                    "queue": self._queue,
                    **extra,
                },
            )
            done = {(row[0], row[1], row[2]) for row in rows}
        return [
            delivery
            for delivery, key in zip(deliveries, keys, strict=True)
            if key is None or key not in done
        ]

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Restart each lease still owned; returns the lost ones (see `Queue.heartbeat`)."""
        return await self._fenced("heartbeat", self._heartbeat_sql, deliveries)

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Complete each delivery still owned; returns the rest (see `Queue.ack`)."""
        return await self._fenced("ack", self._ack_sql, deliveries)

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Give deliveries back after `delay_seconds`; returns the lost ones."""
        self._check_open()
        delay = check_seconds("delay_seconds", delay_seconds, positive=False)
        return await self._fenced(
            "release", self._release_sql, deliveries, delay=delay, channel=self._channel
        )

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Lease messages whose own lease lapsed (see `Queue.reclaim`)."""
        self._check_open()
        check_text("consumer", consumer)
        lease = check_seconds("lease_seconds", lease_seconds, positive=True)
        check_count("max_messages", max_messages)
        return await self._lease(self._reclaim_sql, "reclaim", consumer, lease, max_messages)

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Move owned deliveries to the dead letters, atomically; returns the lost ones."""
        self._check_open()
        encoded = encode_reason(reason)
        return await self._fenced("dead letter", self._dead_letter_sql, deliveries, reason=encoded)

    async def stats(self) -> QueueStats:
        """Counts, ages and consumers, in one statement (one instant of the server's clock)."""
        rows = await self._fetch("stats", self._stats_sql, {"queue": self._queue})
        ready, delayed, in_flight, ready_age, idle, dead, owners, counts, idles = rows[0]
        return QueueStats(
            ready=int(ready),
            delayed=int(delayed),
            in_flight=int(in_flight),
            dead=int(dead),
            oldest_ready_age_seconds=None if ready_age is None else max(0.0, float(ready_age)),
            oldest_in_flight_age_seconds=None if idle is None else max(0.0, float(idle)),
            consumers=tuple(
                ConsumerStats(
                    name=owner,
                    pending=int(count),
                    idle_seconds=None if seconds is None else max(0.0, float(seconds)),
                )
                for owner, count, seconds in zip(
                    owners or (), counts or (), idles or (), strict=True
                )
            ),
        )

    async def len(self) -> int:
        """Ready, delayed and in-flight messages."""
        rows = await self._fetch("len", self._db.sql(_LEN), (self._queue,))
        return int(rows[0][0])

    # -- QueueAdmin --------------------------------------------------------------------

    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters, oldest first."""
        check_count("limit", limit)
        rows = await self._fetch(
            "list dead letters", self._db.sql(_LIST_DEAD), (self._queue, limit)
        )
        return [
            DeadLetter(
                message_id=str(row_id),
                original_id=str(original),
                body=bytes(body),
                reason=bytes(reason).decode("utf-8", "replace"),
                delivery_count=int(count),
                dead_at=float(dead_at),
            )
            for row_id, original, body, reason, count, dead_at in rows
        ]

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        """Move dead letters back as new messages, in one statement; returns the new ids."""
        self._check_open()
        everything, ids = _dead_ids(message_ids)
        if not everything and not ids:
            return []
        rows = await self._fetch(
            "retry dead letters",
            self._db.sql(_RETRY_DEAD),
            {"queue": self._queue, "all": everything, "ids": ids, "channel": self._channel},
        )
        added = rows[0][0] if rows else None
        return [str(row_id) for row_id in added or ()]

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters (all when `message_ids` is None); returns how many."""
        self._check_open()
        everything, ids = _dead_ids(message_ids)
        if not everything and not ids:
            return 0
        return await self._db.execute(
            "purge dead letters",
            self._db.sql(_PURGE_DEAD),
            {"queue": self._queue, "all": everything, "ids": ids},
        )

    async def purge(self) -> int:
        """Delete every ready, delayed and in-flight message; returns how many."""
        self._check_open()
        return await self._db.execute("purge", self._db.sql(_PURGE), (self._queue,))

    async def delete_queue(self) -> None:
        """Delete the queue's rows in every table, in one transaction; idempotent."""
        self._check_open()
        async with self._db.transaction("delete queue") as conn:
            for statement in _DELETE_QUEUE:
                await conn.execute(self._db.sql(statement), (self._queue,))

    # -- WorkerRegistry ----------------------------------------------------------------

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        """Create or refresh `info.instance`'s row, listed for `ttl_seconds` from now."""
        self._check_open()
        ttl = min(MAX_SECONDS, check_worker(info, ttl_seconds, nul=False))
        await self._db.execute(
            "publish worker",
            self._db.sql(_PUBLISH_WORKER),
            (
                self._queue,
                info.instance,
                min(info.workers, _MAX_INT4),
                min(info.busy, _MAX_INT4),
                info.average_seconds,
                info.seen_at,
                _count_or_none(info.succeeded),
                _count_or_none(info.failed),
                ttl,
            ),
        )

    async def remove_worker(self, instance: str) -> None:
        """Remove `instance`'s row; idempotent."""
        self._check_open()
        if not isinstance(instance, str):
            raise TypeError(f"instance must be a str, not {type(instance).__name__}")
        if storable_text(instance):
            await self._db.execute(
                "remove worker", self._db.sql(_REMOVE_WORKER), (self._queue, instance)
            )

    async def live_workers(self) -> list[WorkerInfo]:
        """Rows refreshed within their TTL (one statement; it also deletes long-expired rows)."""
        rows = await self._fetch(
            "live workers", self._db.sql(_LIVE_WORKERS), {"queue": self._queue}
        )
        return [
            WorkerInfo(
                instance=instance,
                workers=int(workers),
                busy=int(busy),
                average_seconds=None if average is None else float(average),
                seen_at=float(seen_at),
                succeeded=None if succeeded is None else int(succeeded),
                failed=None if failed is None else int(failed),
            )
            for instance, workers, busy, average, seen_at, succeeded, failed in rows
        ]


async def open_from_url(url: str, *, queue_name: str, clock: Clock | None = None) -> PostgresQueue:
    """Open the queue `queue_name` at `url` (the engine's entry point for postgresql://).

    ``postgresql://[user[:password]@]host[:port]/database[?schema=NAME&pool_min=N&
    pool_max=N&pool_timeout=S&migrate=auto|never&<libpq options>]`` (or
    ``postgres://``). The schema is migrated first when needed and allowed.

    Raises:
        ConfigurationError: A bad URL or option, a bad queue name, a schema that needs
            a migration under ``migrate=never``, or one newer than this taskrunner.
        BackendUnavailableError: The server could not be reached.
    """
    parsed = parse_url(url)
    check_queue_name(check_text("queue_name", queue_name))
    db = await open_database(parsed)
    try:
        durable = await prepare_schema(db, parsed)
        queue = PostgresQueue(
            db,
            queue_name=queue_name,
            conninfo=parsed.conninfo,
            clock=clock,
            durable=durable,
            display=parsed.display,
        )
        await queue.start()
    except BaseException:
        await db.aclose()
        raise
    return queue
