"""A process never starts a message it is already running.

When a running message's lease lapses (its heartbeats did not reach the backend in
time) and this same process gets it back, through its own reclaimer or a receive, the
running copy adopts the new delivery: heartbeats and the final ack use the new
receipt, and no second copy starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from taskrunner import Delivery, Producer, Runner, current_task
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import LEASE, config, make, running


class DroppedHeartbeats(InMemoryQueue):
    """Heartbeats that look fine but, while `dropping`, change nothing.

    Models heartbeat writes the backend lost (a crash with ``appendfsync everysec``, a
    failover to a replica that missed them): the worker cannot tell.
    """

    dropping = False

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        if DroppedHeartbeats.dropping:
            return []
        return await super().heartbeat(deliveries)


class RedeliveringReceive(DroppedHeartbeats):
    """A backend that hands lapsed messages out through `receive`, not `reclaim`.

    The contract forbids it (X6); the runner must still never start a message twice.
    """

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        lapsed = await super().reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )
        return lapsed or await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=min(wait_seconds, 0.5),
            lease_seconds=lease_seconds,
        )

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        return []


@pytest.mark.parametrize("handle_type", [DroppedHeartbeats, RedeliveringReceive])
async def test_message_handed_back_while_it_runs_is_adopted_not_started_twice(
    handle_type: type[DroppedHeartbeats],
) -> None:
    clock = FakeClock()
    app, queue = make(clock)
    finish = asyncio.Event()
    runs: list[tuple[str, int]] = []

    @app.task(max_retries=5)
    async def long_job() -> None:
        runs.append((current_task().consumer, current_task().delivery_count))
        await finish.wait()

    DroppedHeartbeats.dropping = False
    a = Runner(handle_type._on_store(queue._store), app, config(), clock=clock)
    async with running(a):
        await Producer(queue, app, clock=clock).dispatch(long_job)
        await clock.run_until(lambda: len(runs) == 1, step=0.5, limit=5)
        DroppedHeartbeats.dropping = True  # the lease lapses though the task runs on
        await clock.run_until(
            lambda: a.stats().reclaimed + a.stats().received == 2, step=0.5, limit=3 * LEASE
        )
        DroppedHeartbeats.dropping = False
        ((owner, count),) = queue.in_flight().values()
        assert count == 2
        assert owner in a.consumer_names
        # Heartbeats now carry the new receipt: another worker never gets the message.
        b = Runner(queue.open_handle(), app, config(), clock=clock)
        async with running(b):
            for _ in range(int(5 * LEASE)):
                await clock.advance(1.0)
            finish.set()
            await clock.run_until(lambda: not queue.in_flight(), step=0.5, limit=LEASE)
        assert b.stats().reclaimed == 0
        assert b.stats().received == 0

    assert len(runs) == 1  # one copy ever started
    stats = a.stats()
    assert stats.leases_adopted == 1
    assert stats.succeeded == 1
    assert stats.lease_lost == 0  # the final ack used the adopted receipt
    assert await queue.len() == 0
    assert queue.dead_letters() == []
