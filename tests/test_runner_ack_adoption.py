"""An ack in flight when its message is adopted again is resent with the new receipt.

The executor's ack loop (written out in `Executor._complete` for speed): a task has
returned and its ack is on its way when the lease lapses and this runner's own
reclaimer hands the message back, so the running lease adopts the new delivery. The
backend then reports the first ack lost (its receipt is stale); the executor must ack
again with the adopted receipt instead of counting the lease lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from taskrunner import Delivery, Producer, Runner
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import LEASE, config, make, running


class HeldFirstAck(InMemoryQueue):
    """Heartbeats change nothing (the lease lapses); the first ack waits for `let_go`."""

    let_go: asyncio.Event
    acks: list[int]  # delivery counts of the acks sent, in order

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        return []  # looks fine, extends nothing

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        first = not self.acks
        self.acks.extend(delivery.delivery_count for delivery in deliveries)
        if first:
            await self.let_go.wait()
        return await super().ack(deliveries)


async def test_an_ack_whose_message_was_adopted_meanwhile_is_resent_with_the_new_receipt() -> None:
    clock = FakeClock()
    app, store = make(clock)
    queue = HeldFirstAck._on_store(store._store)
    queue.let_go = asyncio.Event()
    queue.acks = []
    runs = 0

    @app.task(max_retries=5)
    async def job() -> None:
        nonlocal runs
        runs += 1

    runner = Runner(queue, app, config(), clock=clock)
    async with running(runner):
        await Producer(queue, app, clock=clock).dispatch(job)
        await clock.run_until(lambda: queue.acks == [1], step=0.5, limit=5)
        # The ack hangs; the lease lapses and the runner's reclaimer takes it back.
        await clock.run_until(lambda: runner.stats().leases_adopted == 1, step=0.5, limit=3 * LEASE)
        queue.let_go.set()
        await clock.run_until(lambda: not store.in_flight(), step=0.5, limit=LEASE)

    assert runs == 1  # adopted, never started twice
    assert queue.acks == [1, 2]  # the stale receipt, then the adopted one
    stats = runner.stats()
    assert stats.succeeded == 1
    assert stats.lease_lost == 0
    assert await store.len() == 0
    assert store.dead_letters() == []
