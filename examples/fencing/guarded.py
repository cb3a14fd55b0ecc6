"""Fencing an external write with `current_task().fence` (the recipe of docs/fencing.md).

A task that lost its lease may keep running: its heartbeats could not reach the backend,
another worker reclaimed the message and runs it again. Both attempts then write. The
fence orders them: each write records the fence it was made with and is refused when
the row already holds that fence or a larger one, so the newest attempt's write stands
whatever the order in which they arrive.

Run it (no server needed; SQLite stands in for the application's database)::

    python -m examples.fencing.guarded
"""

from __future__ import annotations

import sqlite3

__all__ = ["GuardedStore"]


class GuardedStore:
    """Order rows whose state changes only with a larger fence than the last write's."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS orders"
            " (id TEXT PRIMARY KEY, state TEXT NOT NULL, fence INTEGER NOT NULL DEFAULT 0)"
        )

    def create(self, order: str) -> None:
        """Add an order that no attempt has written yet (fence 0)."""
        with self._db:
            self._db.execute("INSERT INTO orders (id, state) VALUES (?, 'new')", (order,))

    def set_state(self, order: str, state: str, *, fence: int) -> bool:
        """Write `state` if `fence` is larger than the row's; True when it was written.

        The comparison is part of the UPDATE, so it holds against concurrent writers:
        the database, not this process, decides which attempt is newer.
        """
        if fence < 1:
            raise ValueError(f"fence must be >= 1 (a delivery count), got {fence}")
        with self._db:
            cursor = self._db.execute(
                "UPDATE orders SET state = ?, fence = ? WHERE id = ? AND fence < ?",
                (state, fence, order, fence),
            )
        return cursor.rowcount == 1

    def state(self, order: str) -> tuple[str, int]:
        """The order's state and the fence it was written with."""
        row = self._db.execute("SELECT state, fence FROM orders WHERE id = ?", (order,)).fetchone()
        if row is None:
            raise KeyError(order)
        return str(row[0]), int(row[1])


def _demo() -> None:
    store = GuardedStore(sqlite3.connect(":memory:"))
    store.create("order-1")
    print("attempt 2 writes:", store.set_state("order-1", "shipped by attempt 2", fence=2))
    print("zombie attempt 1 writes:", store.set_state("order-1", "shipped by attempt 1", fence=1))
    print("the order:", store.state("order-1"))


if __name__ == "__main__":
    _demo()
