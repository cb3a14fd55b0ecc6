"""The lease keeper: extends every lease this process holds, in one call per tick.

Internal module. Started only when the queue says ``requires_heartbeat``. Every
``heartbeat_interval_seconds`` it heartbeats the whole lease table in a single
`Queue.heartbeat` call (not one timer per task). A delivery the backend reports lost
is marked so its late result is not acked; the loss is logged and counted. When
heartbeats fail (backend unreachable) for a whole lease, the affected leases are
marked *uncertain*: another worker may have reclaimed them, and only the fenced ack
will tell.
"""

from __future__ import annotations

import logging

from taskrunner.clock import Clock
from taskrunner.errors import BackendError
from taskrunner.leases import Lease, LeaseTable
from taskrunner.logs import log_delivery
from taskrunner.queue import Queue
from taskrunner.stats import StatsRecorder

__all__ = ["LeaseKeeper"]

_log = logging.getLogger("taskrunner.heartbeat")


class LeaseKeeper:
    """Heartbeats the leases in `leases` every `interval_seconds`.

    Args:
        queue: The backend.
        leases: This runner's lease table.
        clock: Paces the ticks.
        interval_seconds: Time between two heartbeats.
        lease_seconds: The lease length; heartbeats failing this long make leases uncertain.
        stats: Where lease losses are counted.
    """

    def __init__(
        self,
        queue: Queue,
        leases: LeaseTable,
        *,
        clock: Clock,
        interval_seconds: float,
        lease_seconds: float,
        stats: StatsRecorder,
    ) -> None:
        self._queue = queue
        self._leases = leases
        self._clock = clock
        self._interval = interval_seconds
        self._lease_seconds = lease_seconds
        self._stats = stats

    async def run(self) -> None:
        """Heartbeat forever; cancel to stop."""
        while True:
            await self._clock.sleep(self._interval)
            try:
                await self.beat()
            except Exception:
                # A bug must not end heartbeating for the life of the process.
                _log.exception("heartbeat crashed")

    async def beat(self) -> None:
        """Heartbeat every live lease once."""
        leases = self._leases.live()
        if not leases:
            return
        started = self._clock.monotonic()
        sent = [lease.delivery for lease in leases]
        try:
            lost = await self._queue.heartbeat(sent)
        except BackendError as exc:
            _log.warning("heartbeat of %d leases failed: %s", len(leases), exc)
            for lease in leases:
                if not lease.uncertain and started - lease.confirmed_at >= self._lease_seconds:
                    lease.uncertain = True
                    log_delivery(
                        _log,
                        logging.WARNING,
                        "lease not confirmed for %.1fs; it may have been reclaimed",
                        started - lease.confirmed_at,
                        delivery=lease.delivery,
                    )
            return
        lost_set = set(lost)
        for lease, delivery in zip(leases, sent, strict=True):
            if lease.delivery is not delivery:
                continue  # a newer delivery was adopted meanwhile; this was the old receipt
            if delivery in lost_set:
                self._mark_lost(lease)
            else:
                lease.confirmed_at = started
                lease.uncertain = False

    def _mark_lost(self, lease: Lease) -> None:
        if lease.done or lease.lost or lease.settling:
            # Finished, or its ack, release or dead-letter went out while the heartbeat
            # was in flight and reached the backend first: not a loss. The settling
            # call's own fenced reply tells whether the lease was still ours.
            return
        lease.lost = True
        self._stats.lease_lost += 1
        log_delivery(
            _log,
            logging.WARNING,
            "lease lost: another worker may run this message; its result will not be acked",
            delivery=lease.delivery,
        )
