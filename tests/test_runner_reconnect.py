"""After the backend was unreachable, heartbeats go out first, and promptly.

A backend that comes back after an outage (a Redis restart) counts the outage as idle
time of every lease. Each lease survives only if its heartbeat gets through before a
reclaimer sees it lapsed, so after a failure the lease keeper retries at once (a short
backoff, not a whole heartbeat interval), and fetchers and the reclaimer hold back
until a heartbeat of every lease held has got through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from taskrunner import BackendUnavailableError, Delivery, Producer, Runner
from taskrunner.heartbeat import RETRY_MAX_SECONDS
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import LEASE, Flaky, Link, config, make, running

LOOPS_THAT_TAKE_WORK = ("receive", "reclaim")


@pytest.mark.parametrize("outage", [1.0, 6.0], ids=["shorter_than_a_tick", "several_ticks"])
async def test_after_an_outage_every_lease_is_heartbeated_at_once_before_any_receive_or_reclaim(
    outage: float,
) -> None:
    clock = FakeClock()
    app, queue = make(clock)
    finish = asyncio.Event()
    done: list[int] = []

    @app.task(max_retries=0)
    async def long_job(n: int) -> None:
        await finish.wait()
        done.append(n)

    link = Link(clock)
    flaky = Flaky._on_store(queue._store)
    flaky.link = link
    # Free workers, so fetchers keep receiving (and notice the outage) throughout.
    runner = Runner(flaky, app, config(num_workers=5, block_seconds=0.5), clock=clock)
    async with running(runner):
        await Producer(queue, app, clock=clock).dispatch_many(long_job, range(3))
        await clock.run_until(lambda: runner.pool.busy == 3, step=0.5, limit=5)
        await clock.advance(0.3)  # off the grid of the loops' ticks

        link.down = True
        await clock.advance(outage)
        link.down = False
        back = clock.monotonic()
        await clock.advance(LEASE)

        noticed = min(a.ended for a in link.attempts if not a.ok)
        first_beat = next(
            a for a in link.attempts if a.operation == "heartbeat" and a.ok and a.started >= back
        )
        taking_work = [
            a
            for a in link.attempts
            if a.operation in LOOPS_THAT_TAKE_WORK and noticed < a.started < first_beat.ended
        ]
        assert first_beat.size == 3
        assert first_beat.started - back <= RETRY_MAX_SECONDS
        assert taking_work == []
        # Nothing was stolen or lost meanwhile, and work goes on.
        finish.set()
        await Producer(queue, app, clock=clock).dispatch_many(long_job, range(3, 6))
        await clock.run_until(lambda: len(done) == 6, step=0.5, limit=3 * LEASE)

    assert sorted(done) == list(range(6))
    assert runner.stats().reclaimed == 0
    assert runner.stats().lease_lost == 0
    assert await queue.len() == 0


async def test_a_bug_in_heartbeats_does_not_hold_the_fetchers_back_after_an_outage() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    finish = asyncio.Event()
    started: list[int] = []
    done: list[int] = []
    fail_next_receive = False

    class BuggyHeartbeat(InMemoryQueue):
        async def receive(
            self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
        ) -> list[Delivery]:
            nonlocal fail_next_receive
            if fail_next_receive:
                fail_next_receive = False
                raise BackendUnavailableError("connection reset")
            return await super().receive(
                consumer,
                max_messages=max_messages,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
            )

        async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
            raise KeyError("bug in a backend")

    @app.task
    async def job(n: int) -> None:
        started.append(n)
        if n == 0:
            await finish.wait()
        done.append(n)

    runner = Runner(BuggyHeartbeat._on_store(queue._store), app, config(), clock=clock)
    async with running(runner):
        producer = Producer(queue, app, clock=clock)
        await producer.dispatch(job, 0)
        await clock.run_until(lambda: started == [0], step=0.5, limit=5)
        fail_next_receive = True  # closes the gate; the heartbeat meant to open it crashes
        await clock.run_until(lambda: not fail_next_receive, step=0.5, limit=5)
        await producer.dispatch(job, 1)
        await clock.run_until(lambda: done == [1], step=0.5, limit=LEASE / 2)
        finish.set()
        await clock.run_until(lambda: len(done) == 2, step=0.5, limit=LEASE / 2)

    assert sorted(done) == [0, 1]
