"""`SqliteQueue`: a leased, at-least-once queue in one SQLite file, standard library only.

One table holds every message of every queue in the file; a message is ``ready`` (with
the time it becomes available, for release delays) or ``in_flight`` (with its owner, its
delivery count, the time of its last delivery or heartbeat and the lease it was granted:
the lease travels with the message, so reclaimers with other lease settings judge it by
its holder's lease). Every operation that
checks and then changes a lease runs inside ``BEGIN IMMEDIATE``, which takes SQLite's
write lock first, so two handles (or processes) can never both claim one message, and
an ack with a stale receipt cannot slip in between the check and the delete.

Leases are measured in wall-clock seconds (`Clock.time`), because several processes
share the file and monotonic clocks are per process. The calls are synchronous and
quick on a local disk; a backend talking to a network server would await its client
instead (or use `asyncio.to_thread`).

What it does not do, and therefore does not claim: a blocking receive (it polls every
`POLL_SECONDS`), admin operations, durable-on-return adds (``synchronous=NORMAL``).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from taskrunner.clock import Clock, SystemClock
from taskrunner.errors import BackendUnavailableError, QueueClosedError
from taskrunner.queue import (
    CONTRACT_VERSION,
    Capabilities,
    ConsumerCleanup,
    Delivery,
    QueueAdmin,
    QueueStats,
    Receipt,
    WorkerRegistry,
)

__all__ = ["POLL_SECONDS", "SqliteQueue"]

# How often a waiting receive looks for new messages (seconds).
POLL_SECONDS = 0.05

# The largest rowid SQLite stores (a signed 64-bit integer).
_MAX_ROWID = 2**63 - 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    body BLOB NOT NULL,
    state TEXT NOT NULL DEFAULT 'ready',
    owner TEXT NOT NULL DEFAULT '',
    delivery_count INTEGER NOT NULL DEFAULT 0,
    available_at REAL NOT NULL,
    touched_at REAL NOT NULL DEFAULT 0,
    lease_seconds REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_by_state ON messages (queue, state, id);
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    original_id TEXT NOT NULL,
    body BLOB NOT NULL,
    reason TEXT NOT NULL,
    delivery_count INTEGER NOT NULL,
    dead_at REAL NOT NULL
);
"""

_CAPABILITIES = Capabilities(
    ordering="fifo",
    persistent=True,
    shared_across_instances=True,
    lease_precision_seconds=0.01,
)


class SqliteQueue:
    """The queue `name` in the SQLite file at `path`; open several handles on one file.

    Args:
        path: The database file (created if missing).
        name: The queue's name within the file.
        clock: Source of wall-clock time for leases and delays.
    """

    contract_version = CONTRACT_VERSION  # what the conformance suite checks

    def __init__(
        self, path: str | Path, *, name: str = "default", clock: Clock | None = None
    ) -> None:
        self._name = name
        self._clock: Clock = clock or SystemClock()
        self._closed = False
        try:
            self._db = sqlite3.connect(path, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise BackendUnavailableError(f"cannot open {path}: {exc}") from exc

    @property
    def requires_heartbeat(self) -> bool:
        """Leases lapse unless heartbeated."""
        return True

    @property
    def capabilities(self) -> Capabilities:
        """FIFO, persistent, shared by every handle on the file."""
        return _CAPABILITIES

    # The three parts every `Queue` names, none offered here. A queue class that
    # implements a part's methods itself inherits its `taskrunner.queue_parts` base
    # (`class SqliteQueue(AdminOnSelf)`, with list_dead_letters, purge, ... defined
    # below) instead of writing the property: the base provides it and checks, when
    # the class is defined, that every method of the part is there.

    @property
    def admin(self) -> QueueAdmin | None:
        """No dead-letter administration in this example."""
        return None

    @property
    def worker_registry(self) -> WorkerRegistry | None:
        """No worker registry in this example."""
        return None

    @property
    def consumer_cleanup(self) -> ConsumerCleanup | None:
        """Nothing to clean up: consumers are not recorded apart from their messages."""
        return None

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        for body in bodies:
            if not isinstance(body, bytes):
                raise TypeError(f"message body must be bytes, not {type(body).__name__}")
        now = self._now()
        with self._transaction() as db:
            return [
                str(
                    db.execute(
                        "INSERT INTO messages (queue, body, available_at) VALUES (?, ?, ?)",
                        (self._name, body, now),
                    ).lastrowid
                )
                for body in bodies
            ]

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        _check_count(max_messages)
        _check_seconds("wait_seconds", wait_seconds)
        _check_seconds("lease_seconds", lease_seconds, positive=True)
        deadline = self._clock.monotonic() + wait_seconds
        while True:
            got = self._lease(
                consumer,
                lease_seconds,
                "state = 'ready' AND available_at <= ?",
                (self._now(),),
                max_messages,
            )
            remaining = deadline - self._clock.monotonic()
            if got or remaining <= 0:
                return got
            await self._clock.sleep(min(POLL_SECONDS, remaining))

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        sql = "UPDATE messages SET touched_at = ? WHERE id = ?"
        return self._fenced(deliveries, sql, (self._now(),))

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        return self._fenced(deliveries, "DELETE FROM messages WHERE id = ?", ())

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        _check_seconds("delay_seconds", delay_seconds)
        sql = "UPDATE messages SET state = 'ready', owner = '', available_at = ? WHERE id = ?"
        return self._fenced(deliveries, sql, (self._now() + delay_seconds,))

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        _check_seconds("lease_seconds", lease_seconds, positive=True)
        _check_count(max_messages)
        # Lapsed leases are selected directly, so live ones never hide them; each is
        # judged by the lease its holder was granted.
        return self._lease(
            consumer,
            lease_seconds,
            "state = 'in_flight' AND touched_at + lease_seconds < ?",
            (self._now(),),
            max_messages,
        )

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        _check_deliveries(deliveries)
        _check_reason(reason)
        lost = []
        now = self._now()
        with self._transaction() as db:
            for delivery in deliveries:
                row = self._owned(db, delivery)
                if row is None:
                    lost.append(delivery)
                    continue
                db.execute(
                    "INSERT INTO dead_letters (queue, original_id, body, reason, delivery_count,"
                    " dead_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (self._name, delivery.message_id, row[0], reason, row[1], now),
                )
                db.execute("DELETE FROM messages WHERE id = ?", (int(delivery.message_id),))
        return lost

    async def stats(self) -> QueueStats:
        now = self._now()
        with self._transaction() as db:
            counts = dict(
                db.execute(
                    "SELECT CASE WHEN state = 'ready' AND available_at > ? THEN 'delayed'"
                    " ELSE state END AS s, count(*) FROM messages WHERE queue = ? GROUP BY s",
                    (now, self._name),
                ).fetchall()
            )
            (dead,) = db.execute(
                "SELECT count(*) FROM dead_letters WHERE queue = ?", (self._name,)
            ).fetchone()
            # A ready message's age runs from when it became available (its add, or the
            # end of its release delay); an in-flight one's from its last delivery or
            # heartbeat, as a lease's idle time does.
            ready_since, touched = db.execute(
                "SELECT min(CASE WHEN state = 'ready' AND available_at <= ? THEN available_at END),"
                " min(CASE WHEN state = 'in_flight' THEN touched_at END)"
                " FROM messages WHERE queue = ?",
                (now, self._name),
            ).fetchone()
        return QueueStats(
            ready=counts.get("ready", 0),
            delayed=counts.get("delayed", 0),
            in_flight=counts.get("in_flight", 0),
            dead=dead,
            oldest_ready_age_seconds=None if ready_since is None else max(0.0, now - ready_since),
            oldest_in_flight_age_seconds=None if touched is None else max(0.0, now - touched),
        )

    async def len(self) -> int:
        with self._transaction() as db:
            (count,) = db.execute(
                "SELECT count(*) FROM messages WHERE queue = ?", (self._name,)
            ).fetchone()
        return int(count)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()

    # -- internals ------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock.time()

    def _transaction(self) -> _Transaction:
        if self._closed:
            raise QueueClosedError("this SqliteQueue was closed")
        return _Transaction(self._db)

    def _lease(
        self,
        consumer: str,
        lease_seconds: float,
        where: str,
        params: tuple[float, ...],
        limit: int,
    ) -> list[Delivery]:
        now = self._now()
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT id, body, delivery_count FROM messages WHERE queue = ? AND {where}"
                " ORDER BY id LIMIT ?",
                (self._name, *params, limit),
            ).fetchall()
            for message_id, _, count in rows:
                db.execute(
                    "UPDATE messages SET state = 'in_flight', owner = ?, delivery_count = ?,"
                    " touched_at = ?, lease_seconds = ? WHERE id = ?",
                    (consumer, count + 1, now, lease_seconds, message_id),
                )
        return [
            Delivery(
                message_id=str(message_id),
                body=bytes(body),
                delivery_count=count + 1,
                receipt=Receipt(consumer=consumer, delivery_count=count + 1),
            )
            for message_id, body, count in rows
        ]

    def _owned(self, db: sqlite3.Connection, delivery: Delivery) -> tuple[bytes, int] | None:
        """The body and count of the message if `delivery`'s receipt is its current lease."""
        # Only ids this queue can have issued: ASCII digits within SQLite's 64-bit rowid
        # (a larger number would make sqlite3 raise OverflowError mid-transaction).
        message_id = delivery.message_id
        if not (message_id.isascii() and message_id.isdigit()) or int(message_id) > _MAX_ROWID:
            return None
        row = db.execute(
            "SELECT body, delivery_count FROM messages WHERE id = ? AND queue = ?"
            " AND state = 'in_flight' AND owner = ? AND delivery_count = ?",
            (
                int(delivery.message_id),
                self._name,
                delivery.receipt.consumer,
                delivery.receipt.delivery_count,
            ),
        ).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def _fenced(
        self, deliveries: Sequence[Delivery], sql: str, params: tuple[float, ...]
    ) -> list[Delivery]:
        """Run `sql` (its last parameter: the id) on each delivery still owned; return the rest.

        The ownership check and the change share one write transaction: nobody can
        reclaim the message in between.
        """
        _check_deliveries(deliveries)
        lost = []
        with self._transaction() as db:
            for delivery in deliveries:
                if self._owned(db, delivery) is None:
                    lost.append(delivery)
                else:
                    db.execute(sql, (*params, int(delivery.message_id)))
        return lost


def _check_deliveries(deliveries: Sequence[Delivery]) -> None:
    # The whole batch is checked before the transaction starts acting on it.
    for delivery in deliveries:
        if not isinstance(delivery, Delivery):
            raise TypeError(f"expected a Delivery, got {type(delivery).__name__}")


def _check_count(max_messages: int) -> None:
    if isinstance(max_messages, bool) or not isinstance(max_messages, int):
        raise TypeError(f"max_messages must be an int, not {type(max_messages).__name__}")
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, got {max_messages}")


def _check_seconds(name: str, value: float, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value}")


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error); SQLite errors become ours."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise BackendUnavailableError(f"SQLite: {exc}") from exc
        return self._db

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        try:
            self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        except sqlite3.Error as error:
            raise BackendUnavailableError(f"SQLite: {error}") from error


def _check_reason(reason: str) -> None:
    """Refuse a reason that is no str, or one UTF-8 cannot encode (a lone surrogate)."""
    if not isinstance(reason, str):
        raise TypeError(f"reason must be a str, not {type(reason).__name__}")
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"reason holds a lone surrogate at position {exc.start}: not storable text"
        ) from None
