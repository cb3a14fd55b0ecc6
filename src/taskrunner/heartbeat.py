"""The lease keeper: extends every lease this process holds, in one call per tick.

Internal module. Started only when the queue says ``requires_heartbeat``. Every
``heartbeat_interval_seconds`` it heartbeats the whole lease table in a single
`Queue.heartbeat` call (not one timer per task). A delivery the backend reports lost
is marked so its late result is not acked; the loss is logged and counted. When
heartbeats fail (backend unreachable) for a whole lease, the affected leases are
marked *uncertain*: another worker may have reclaimed them, and only the fenced ack
will tell.

After a failure, a lease survives only if a heartbeat gets through before a reclaimer
sees it lapsed (a restarted Redis counts its downtime as idle time). So while
heartbeats fail, or as soon as any loop of the runner reports the backend
unavailable through the `ReconnectGate`, the keeper retries within
`RETRY_MAX_SECONDS` instead of waiting a whole interval, and it opens the gate
(letting fetchers and the reclaimer take work again) once a heartbeat of every lease
got through. The safe length of an outage follows from this: see docs/redis.md,
"Restarts".
"""

from __future__ import annotations

import logging

from taskrunner.clock import Clock, wait_event
from taskrunner.errors import BackendError
from taskrunner.leases import Lease, LeaseTable
from taskrunner.logs import log_delivery
from taskrunner.queue import Queue
from taskrunner.reconnect import ReconnectGate
from taskrunner.retry import Backoff
from taskrunner.stats import StatsRecorder

__all__ = ["RETRY_MAX_SECONDS", "LeaseKeeper"]

_log = logging.getLogger("taskrunner.heartbeat")

# Delays between heartbeat attempts while the backend is failing: 20 ms doubling to
# 100 ms (with jitter), never more than the interval. Every moment a lease waits for
# its first heartbeat after an outage comes off the outage it survives.
RETRY_BASE_SECONDS = 0.02
RETRY_MAX_SECONDS = 0.1


class LeaseKeeper:
    """Heartbeats the leases in `leases` every `interval_seconds`.

    Args:
        queue: The backend.
        leases: This runner's lease table.
        clock: Paces the ticks.
        interval_seconds: Time between two heartbeats.
        lease_seconds: The lease length; heartbeats failing this long make leases uncertain.
        stats: Where lease losses are counted.
        gate: Shared with the loops that take work; a private one by default.
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
        gate: ReconnectGate | None = None,
    ) -> None:
        self._queue = queue
        self._leases = leases
        self._clock = clock
        self._interval = interval_seconds
        self._lease_seconds = lease_seconds
        self._stats = stats
        self._gate = gate or ReconnectGate()
        self._retry = Backoff(
            base_seconds=min(RETRY_BASE_SECONDS, interval_seconds),
            max_seconds=min(RETRY_MAX_SECONDS, interval_seconds),
        )
        # Monotonic time of the first failure of the current streak, and of its last warning.
        self._failing_since: float | None = None
        self._warned_at = 0.0

    async def run(self) -> None:
        """Heartbeat forever; cancel to stop."""
        while True:
            if self._gate.is_open:
                # A failure reported by another loop ends the wait early.
                await wait_event(self._clock, self._gate.failed_event, self._interval)
            else:
                await self._clock.sleep(self._retry.next_delay())
            try:
                await self.beat()
            except Exception:
                # A bug must not end heartbeating for the life of the process, nor hold
                # the fetchers back for good.
                _log.exception("heartbeat crashed")
                self._gate.force_open()

    async def beat(self) -> None:
        """Heartbeat every live lease once; opens the gate when that got through."""
        failures_before = self._gate.failures
        leases = self._leases.live()
        if not leases:
            self._gate.passed(failures_before)
            return
        started = self._clock.monotonic()
        sent = [lease.delivery for lease in leases]
        try:
            lost = await self._queue.heartbeat(sent)
        except BackendError as exc:
            # Whatever the error, these leases are not being extended: hold new work back.
            self._gate.failure()
            self._failed(leases, started, exc)
            return
        self._retry.reset()
        if self._failing_since is not None:
            _log.warning(
                "heartbeats got through again after %.2fs of failures",
                started - self._failing_since,
            )
            self._failing_since = None
        self._gate.passed(failures_before)
        lost_set = set(lost)
        for lease, delivery in zip(leases, sent, strict=True):
            if lease.delivery is not delivery:
                continue  # a newer delivery was adopted meanwhile; this was the old receipt
            if delivery in lost_set:
                self._mark_lost(lease)
            else:
                lease.confirmed_at = started
                lease.uncertain = False

    def _failed(self, leases: list[Lease], started: float, exc: BackendError) -> None:
        if self._failing_since is None:
            self._failing_since = started
            self._warned_at = started
            _log.warning(
                "heartbeat of %d leases failed, retrying every %.2fs at most: %s",
                len(leases),
                RETRY_MAX_SECONDS,
                exc,
            )
        elif started - self._warned_at >= self._interval:
            # One line per interval, not one per retry.
            self._warned_at = started
            _log.warning(
                "heartbeats of %d leases still failing after %.1fs: %s",
                len(leases),
                started - self._failing_since,
                exc,
            )
        for lease in leases:
            if not lease.uncertain and started - lease.confirmed_at >= self._lease_seconds:
                lease.uncertain = True
                log_delivery(
                    _log,
                    logging.WARNING,
                    "lease not confirmed for %.1fs; it may have been reclaimed",
                    started - lease.confirmed_at,
                    delivery=lease.delivery,
                    task=lease.task,
                )

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
            task=lease.task,
        )
