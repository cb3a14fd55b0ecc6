"""A fetcher: the loop that leases batches from the backend for the worker pool.

Internal module. Each fetcher has its own consumer name. Before each receive it
reserves free workers and asks for at most that many messages, so every leased message
starts at once (a leased message never waits unheartbeated behind a full pool). An
unreachable backend is retried with backoff; any other crash of the loop is logged and
the loop restarts after a growing delay, so the number of fetchers stays constant
until shutdown. After the backend was unreachable, a fetcher receives again only once
the lease keeper got heartbeats of every lease through (see `taskrunner.reconnect`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from taskrunner.clock import Clock, wait_event
from taskrunner.errors import BackendError, BackendUnavailableError
from taskrunner.pool import WorkerPool
from taskrunner.queue import Delivery, Queue
from taskrunner.reconnect import ReconnectGate
from taskrunner.retry import Backoff

__all__ = ["Fetcher", "HandOver"]

_log = logging.getLogger("taskrunner.fetcher")

HandOver = Callable[[list[Delivery], int], None]
"""Receives a batch and the number of workers reserved for it (>= len(batch))."""


class Fetcher:
    """Receives for one consumer name and hands deliveries to the pool.

    Args:
        queue: The backend.
        pool: Worker capacity to reserve from.
        consumer: This fetcher's consumer name.
        hand_over: Starts the deliveries and returns unused reservations.
        batch_size: Most messages per receive (adjustable at run time).
        wait_seconds: How long one receive waits for a first message.
        lease_seconds: The lease each received delivery is granted.
        clock: Paces backoff.
        stopping: Set when the runner shuts down.
        cooldown_seconds: In tuning mode, the batch size follows the pool's free
            capacity, changing at most once per this many seconds (0: any time). None
            keeps the batch size fixed.
        gate: Closed after a backend failure until heartbeats got through; None when
            the queue needs no heartbeats.
    """

    def __init__(
        self,
        queue: Queue,
        pool: WorkerPool,
        *,
        consumer: str,
        hand_over: HandOver,
        batch_size: int,
        wait_seconds: float,
        lease_seconds: float,
        clock: Clock,
        stopping: asyncio.Event,
        cooldown_seconds: float | None = None,
        gate: ReconnectGate | None = None,
    ) -> None:
        self.consumer = consumer
        self._gate = gate
        self.batch_size = batch_size
        self._base_batch = batch_size
        self._cooldown = cooldown_seconds
        self._batch_changed_at: float | None = None
        self._queue = queue
        self._pool = pool
        self._hand_over = hand_over
        self._wait_seconds = wait_seconds
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._stopping = stopping
        self.receiving = False

    async def run(self) -> None:
        """Fetch until shutdown, restarting the loop after a crash."""
        crashes = Backoff(base_seconds=0.5, max_seconds=30.0)
        while not self._stopping.is_set():
            try:
                await self._fetch_until_stopped()
            except Exception:
                delay = crashes.next_delay()
                _log.exception("fetcher %s crashed; restarting in %.1fs", self.consumer, delay)
                await wait_event(self._clock, self._stopping, delay)

    async def _fetch_until_stopped(self) -> None:
        unavailable = Backoff()
        while not self._stopping.is_set():
            if self._gate is not None and not await self._gate.wait_open(self._stopping):
                return
            if self._cooldown is not None:
                self.follow_free_capacity()
            reserved = await self._pool.reserve(self.batch_size)
            if not reserved:
                return
            if reserved < self.batch_size:
                # `reserve` hands over the first worker that frees up; the tasks that
                # finished in the same loop turn (a batch whose acks came back
                # together) are free by now too, so ask for them in the same receive.
                reserved += self._pool.try_reserve(self.batch_size - reserved)
            try:
                self.receiving = True
                deliveries = await self._queue.receive(
                    self.consumer,
                    max_messages=reserved,
                    wait_seconds=self._wait_seconds,
                    lease_seconds=self._lease_seconds,
                )
            except BackendError as exc:
                self._pool.unreserve(reserved)
                if self._gate is not None and isinstance(exc, BackendUnavailableError):
                    self._gate.failure()
                delay = unavailable.next_delay()
                _log.warning("receive failed, retrying in %.2fs: %s", delay, exc)
                await wait_event(self._clock, self._stopping, delay)
                continue
            except BaseException:
                self._pool.unreserve(reserved)
                raise
            finally:
                self.receiving = False
            unavailable.reset()
            self._hand_over(deliveries, reserved)

    def follow_free_capacity(self) -> None:
        """Move the batch size to the pool's free capacity when it strayed too far.

        The band rule of the design: a batch size outside free capacity ± the
        configured batch size becomes the free capacity, at most once per cooldown. A
        pool that grew to 200 free workers is fed in batches of about 200, and one that
        shrank is not over-asked (the reservation caps every receive at the free
        capacity anyway). As in the seed, no more free workers than the configured
        batch size leave the batch as it is: following free capacity down to it would
        leave the batch at 1 after a burst (one message per receive) until more than
        the configured size were free again. So the batch never drops below the
        configured size.
        """
        assert self._cooldown is not None
        free = self._pool.free()
        base = self._base_batch
        if free <= base or free - base <= self.batch_size <= free + base:
            return
        now = self._clock.monotonic()
        if (
            self._cooldown > 0
            and self._batch_changed_at is not None
            and now - self._batch_changed_at < self._cooldown
        ):
            return
        self.batch_size = free
        self._batch_changed_at = now
