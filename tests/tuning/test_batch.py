"""The batch rule of issue 17 item 3 never leases more messages than workers are free.

The batch size stays at or above the configured size (and at a grown pool's free
capacity); the reservation is what caps each receive. These tests drive the real
`Fetcher.run` loop against a queue that records what it was asked for.
"""

from __future__ import annotations

import asyncio

import pytest

from taskrunner.fetcher import Fetcher
from taskrunner.pool import WorkerPool
from taskrunner.queue import Delivery
from taskrunner.testing import FakeClock


class _RecordingQueue:
    """Answers each receive with nothing, records `max_messages`, stops after `stop_after`."""

    def __init__(self, stopping: asyncio.Event, stop_after: int) -> None:
        self.asked: list[int] = []
        self._stopping = stopping
        self._stop_after = stop_after

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        self.asked.append(max_messages)
        if len(self.asked) >= self._stop_after:
            self._stopping.set()
        await asyncio.sleep(0)
        return []


@pytest.mark.parametrize(("busy", "free"), [(190, 10), (195, 5), (199, 1)])
async def test_a_large_batch_after_a_burst_leases_only_the_free_workers(
    busy: int, free: int
) -> None:
    clock = FakeClock()
    pool = WorkerPool(200)
    stopping = asyncio.Event()
    queue = _RecordingQueue(stopping, stop_after=2)
    fetcher = Fetcher(
        queue,  # type: ignore[arg-type]
        pool,
        consumer="c",
        hand_over=lambda deliveries, reserved: pool.unreserve(reserved - len(deliveries)),
        batch_size=10,
        wait_seconds=1,
        lease_seconds=30,
        clock=clock,
        stopping=stopping,
        cooldown_seconds=0,
    )
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 200  # the grown pool, all free
    for _ in range(busy):  # a burst occupies all but `free` workers
        assert pool.try_reserve(1) == 1
        pool.start()

    await asyncio.wait_for(fetcher.run(), 5)

    assert fetcher.batch_size == 200  # not collapsed to `free` (nor to 1)
    assert queue.asked == [free, free]  # yet never more than the free workers
    assert pool.free() == free  # and every reservation was given back
