"""The deliveries this process holds, and whether their leases are still ours.

Internal module. A `Lease` is added when a delivery is handed to a worker and removed
when the worker is done with it. The lease keeper reads the table to heartbeat every
lease in one call and marks the ones the backend reports lost; the executor checks
the mark before acking, so a result computed under a lost lease is never acked.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from taskrunner.queue import Delivery

__all__ = ["Lease", "LeaseTable"]


@dataclass(eq=False, slots=True)
class Lease:
    """One delivery held by this process.

    Attributes:
        delivery: The delivery.
        confirmed_at: Monotonic time the lease was granted or last extended.
        lost: The backend reported the lease lost; never ack this delivery.
        uncertain: Heartbeats failed for a whole lease; the lease may be lost, but
            the fenced ack will tell.
        done: The worker finished with it and it left the table.
        thread: The thread future of a plain ``def`` task that outlived its timeout;
            its worker slot stays taken until the thread returns.
    """

    delivery: Delivery
    confirmed_at: float
    lost: bool = False
    uncertain: bool = False
    done: bool = False
    thread: asyncio.Future[Any] | None = None


@dataclass(slots=True)
class LeaseTable:
    """The set of leases held by one runner."""

    _leases: set[Lease] = field(default_factory=set)

    def add(self, delivery: Delivery, now: float) -> Lease:
        """Start tracking `delivery`, leased at monotonic time `now`."""
        lease = Lease(delivery, now)
        self._leases.add(lease)
        return lease

    def remove(self, lease: Lease) -> None:
        """Stop tracking `lease` (idempotent)."""
        lease.done = True
        self._leases.discard(lease)

    def live(self) -> list[Lease]:
        """Leases not known to be lost, for the next heartbeat."""
        return [lease for lease in self._leases if not lease.lost]

    def __len__(self) -> int:
        return len(self._leases)
