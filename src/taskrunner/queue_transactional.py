"""The optional part of the backend contract for transactional enqueue.

A backend that can write messages inside the application's own database transaction
offers it as a property of its queue named ``transactional`` (`TransactionalAdd`),
read with `transactional_of`; `Producer.dispatch(..., connection=conn)` uses it.
Re-exported from `taskrunner.queue`, the contract's import path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from taskrunner.queue import Queue
    from taskrunner.queue_extensions import Added, AddRequest

__all__ = ["TransactionalAdd", "transactional_of"]


class TransactionalAdd(Protocol):
    """Adds written in the caller's open transaction on the caller's connection.

    Contract, one sentence per guarantee:

    * A message added through it is delivered if and only if the caller's transaction
      commits; rolled back (or the process killed before COMMIT), it never existed.
    * No consumer receives it before that commit.
    * Delayed and unique requests behave as in `Scheduling.add_requests`.
    * A connection that cannot take part (closed, outside a transaction, in a failed
      transaction, another database, the queue's tables missing) is refused with a
      `ConfigurationError` before anything is written; a connection of a kind the
      backend does not take raises `TypeError`.
    """

    def add_sync(self, connection: object, requests: Sequence[AddRequest]) -> list[Added]:
        """Add `requests` in `connection`'s transaction, blocking; one `Added` per request."""
        ...

    async def add(self, connection: object, requests: Sequence[AddRequest]) -> list[Added]:
        """`add_sync` from asyncio code (asyncio connections awaited, blocking ones run)."""
        ...


def transactional_of(queue: Queue) -> TransactionalAdd | None:
    """The backend's `TransactionalAdd` (its ``transactional`` property), or None."""
    part: TransactionalAdd | None = getattr(queue, "transactional", None)
    return part
