"""The reclaimer: takes over messages whose lease lapsed, e.g. of a crashed worker.

Internal module. Every ``reclaim_interval_seconds`` it asks the backend for messages
whose holder's lease lapsed (whatever lease the holder was granted), as many as there
are free workers, and keeps asking while
the backend returns some. Like a fetcher, it never leases more than the pool can
start. Backends redeliver released (retried) messages through this path too. After
the backend was unreachable, it reclaims again only once the lease keeper got
heartbeats of every lease through (see `taskrunner.reconnect`), and a message it
takes back that this process still runs is adopted, never started twice.
"""

from __future__ import annotations

import asyncio
import logging

from taskrunner.clock import Clock, wait_event
from taskrunner.errors import BackendError, BackendUnavailableError
from taskrunner.fetcher import HandOver
from taskrunner.pool import WorkerPool
from taskrunner.queue import Queue
from taskrunner.reconnect import ReconnectGate

__all__ = ["Reclaimer"]

_log = logging.getLogger("taskrunner.reclaimer")


class Reclaimer:
    """Periodically reclaims lapsed leases for this runner.

    Args:
        queue: The backend.
        pool: Worker capacity to reserve from.
        consumer: The consumer name reclaimed messages are leased to.
        hand_over: Starts the deliveries and returns unused reservations.
        batch_size: Most messages per reclaim call.
        interval_seconds: Time between two sweeps.
        lease_seconds: The lease each reclaimed delivery is granted.
        clock: Paces the sweeps.
        stopping: Set when the runner shuts down.
        gate: Closed after a backend failure until heartbeats got through.
    """

    def __init__(
        self,
        queue: Queue,
        pool: WorkerPool,
        *,
        consumer: str,
        hand_over: HandOver,
        batch_size: int,
        interval_seconds: float,
        lease_seconds: float,
        clock: Clock,
        stopping: asyncio.Event,
        gate: ReconnectGate | None = None,
    ) -> None:
        self.consumer = consumer
        self._gate = gate
        self._queue = queue
        self._pool = pool
        self._hand_over = hand_over
        self._batch_size = batch_size
        self._interval = interval_seconds
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._stopping = stopping

    async def run(self) -> None:
        """Sweep every interval until shutdown."""
        while not await wait_event(self._clock, self._stopping, self._interval):
            try:
                await self.sweep()
            except BackendError as exc:
                if self._gate is not None and isinstance(exc, BackendUnavailableError):
                    self._gate.failure()
                _log.warning("reclaim failed, next attempt in %.1fs: %s", self._interval, exc)
            except Exception:
                # A bug must not end reclaiming for the life of the process.
                _log.exception("reclaim crashed, next attempt in %.1fs", self._interval)

    async def sweep(self) -> int:
        """Reclaim lapsed messages while there are some and free workers for them.

        Returns:
            How many deliveries were reclaimed.
        """
        total = 0
        while not self._stopping.is_set():
            if self._gate is not None and not await self._gate.wait_open(self._stopping):
                break
            reserved = await self._pool.reserve(self._batch_size)
            if not reserved:
                break
            try:
                deliveries = await self._queue.reclaim(
                    self.consumer, lease_seconds=self._lease_seconds, max_messages=reserved
                )
            except BaseException:
                self._pool.unreserve(reserved)
                raise
            self._hand_over(deliveries, reserved)
            total += len(deliveries)
            if not deliveries:
                break
        return total
