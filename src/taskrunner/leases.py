"""The deliveries this process holds, and whether their leases are still ours.

Internal module. A `Lease` is added when a delivery is handed to a worker and removed
when the worker is done with it. The lease keeper reads the table to heartbeat every
lease in one call and marks the ones the backend reports lost; the executor checks
the mark before acking, so a result computed under a lost lease is never acked.

Three rules keep the marks honest:

* Once the executor sends a lease's ack, release or dead-letter, the lease is
  *settling*: a heartbeat that reaches the backend after that call finds the lease
  gone, rightly, and reports it lost. Such reports are ignored; the settling call's
  own fenced reply says whether the lease was still ours.
* The table holds at most one lease per message. When a receive or reclaim returns a
  message this process is still running (its lease lapsed while heartbeats could not
  get through, and its own reclaimer took it back), the running copy *adopts* the new
  delivery instead of a second copy starting: heartbeats and the final ack use the new
  receipt.
* A reply about a delivery the lease no longer carries (adopted meanwhile) is about an
  old receipt and says nothing about the lease.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from taskrunner.logs import log_delivery
from taskrunner.queue import Delivery
from taskrunner.stats import StatsRecorder

__all__ = ["Lease", "LeaseTable", "Verdict", "adopt"]

_log = logging.getLogger("taskrunner.leases")


class Verdict(enum.Enum):
    """What the backend said about a settling call (ack, release or dead-letter)."""

    DONE = "done"
    """It applied: the lease was ours."""
    LOST = "lost"
    """The lease was no longer ours; nothing changed."""
    UNCERTAIN = "uncertain"
    """Sent again after a failure, and found the lease gone: most likely the first send
    applied before its reply was lost, but the lease may also have lapsed to another
    worker. Either way there is nothing left to do."""


@dataclass(eq=False, slots=True)
class Lease:
    """One message held by this process.

    Attributes:
        delivery: The current delivery (replaced when a newer one is adopted).
        confirmed_at: Monotonic time the lease was granted or last extended.
        lost: The backend reported the lease lost; never ack this delivery.
        uncertain: Heartbeats failed for a whole lease; the lease may be lost, but
            the fenced ack will tell.
        settling: Its ack, release or dead-letter was sent; loss reports of
            heartbeats are moot from then on.
        done: The worker finished with it and it left the table.
        thread: The thread future of a plain ``def`` task that outlived its timeout;
            its worker slot stays taken until the thread returns.
        task: The task name read from the message when it started, kept here so
            warnings about the lease name the task even when the message can no
            longer be read (its data gone after a backend restart); None until read.
    """

    delivery: Delivery
    confirmed_at: float
    lost: bool = False
    uncertain: bool = False
    settling: bool = False
    done: bool = False
    thread: asyncio.Future[Any] | None = None
    task: str | None = None


@dataclass(slots=True)
class LeaseTable:
    """The leases held by one runner, at most one per message."""

    _leases: dict[str, Lease] = field(default_factory=dict)

    def add(self, delivery: Delivery, now: float) -> Lease:
        """Start tracking `delivery`, leased at monotonic time `now`.

        Raises:
            ValueError: The table already holds a lease on this message (adopt it).
        """
        if delivery.message_id in self._leases:
            raise ValueError(f"message {delivery.message_id!r} is already held; adopt it")
        lease = self._leases[delivery.message_id] = Lease(delivery, now)
        return lease

    def holding(self, message_id: str) -> Lease | None:
        """The lease held on `message_id`, if any."""
        return self._leases.get(message_id)

    def remove(self, lease: Lease) -> None:
        """Stop tracking `lease` (idempotent)."""
        lease.done = True
        message_id = lease.delivery.message_id
        if self._leases.get(message_id) is lease:
            del self._leases[message_id]

    def live(self) -> list[Lease]:
        """Leases not known to be lost, for the next heartbeat."""
        return [lease for lease in self._leases.values() if not lease.lost]

    def __len__(self) -> int:
        return len(self._leases)


def adopt(lease: Lease, delivery: Delivery, now: float, stats: StatsRecorder) -> None:
    """Let the running `lease` carry on under `delivery`, a newer delivery of its message.

    Called when a receive or reclaim hands this process a message it is still running;
    starting it would run it twice at once in one process.
    """
    old_count = lease.delivery.delivery_count
    lease.delivery = delivery
    lease.confirmed_at = now
    lease.lost = False
    lease.uncertain = False
    stats.leases_adopted += 1
    log_delivery(
        _log,
        logging.WARNING,
        "got back a message this process is still running (delivery %d): its lease had "
        "lapsed while heartbeats did not get through; the running copy carries on under "
        "the new lease instead of starting a second one",
        old_count,
        delivery=delivery,
        task=lease.task,
    )
