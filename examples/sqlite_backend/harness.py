"""The conformance harness for `SqliteQueue`: what a backend author writes to be tested.

Run the whole suite with::

    python -m taskrunner_conformance examples.sqlite_backend.harness:SqliteHarness

or, with no hooks and real waits, against the bare queue factory::

    python -m taskrunner_conformance examples.sqlite_backend.harness:open_queue
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from taskrunner.queue import DeadLetter, Delivery, Queue
from taskrunner_conformance import BaseHarness

from .queue import SqliteQueue

__all__ = ["SqliteHarness", "open_queue"]


class SqliteHarness(BaseHarness):
    """One database file per namespace in a temporary directory; real time, lease hooks.

    `BaseHarness` supplies the lease (1 s times ``TASKRUNNER_CONFORMANCE_TIME_SCALE``),
    `advance` as a real sleep, and no capability overrides.
    """

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="sqlite-queue-"))

    async def open_queue(self, namespace: str) -> Queue:
        return SqliteQueue(self.directory / f"{namespace}.sqlite3")

    async def cleanup(self, namespace: str) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    # Optional hooks: each one unlocks properties that would otherwise be skipped.

    async def age_lease(self, queue: Queue, delivery: Delivery, seconds: float) -> None:
        """Expire a lease without waiting: move its last heartbeat into the past."""
        assert isinstance(queue, SqliteQueue)
        with queue._transaction() as db:
            db.execute(
                "UPDATE messages SET touched_at = touched_at - ? WHERE id = ?",
                (seconds, int(delivery.message_id)),
            )

    async def dead_letters(self, queue: Queue) -> list[DeadLetter]:
        """Every dead letter of the queue, oldest first: the example has no QueueAdmin,
        so this is how the suite checks that dead letters keep body, reason, count and
        time (P26, X30, X31, X37)."""
        assert isinstance(queue, SqliteQueue)
        with queue._transaction() as db:
            rows = db.execute(
                "SELECT id, original_id, body, reason, delivery_count, dead_at"
                " FROM dead_letters WHERE queue = ? ORDER BY id",
                (queue._name,),
            ).fetchall()
        return [
            DeadLetter(
                message_id=str(row[0]),
                original_id=row[1],
                body=bytes(row[2]),
                reason=row[3],
                delivery_count=int(row[4]),
                dead_at=float(row[5]),
            )
            for row in rows
        ]

    async def restart_backend(self) -> None:
        """No server to restart: the suite's fresh handles read the file anew (P37)."""

    async def storage_size(self, queue: Queue) -> int:
        """Rows kept for the queue: messages and dead letters (P36)."""
        assert isinstance(queue, SqliteQueue)
        with queue._transaction() as db:
            (rows,) = db.execute(
                "SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM dead_letters)"
            ).fetchone()
        return int(rows)


_shared = Path(tempfile.mkdtemp(prefix="sqlite-queue-"))


async def open_queue(namespace: str) -> Queue:
    """The bare queue factory: ``async def factory(namespace) -> Queue``."""
    return SqliteQueue(_shared / f"{namespace}.sqlite3")
