"""Round trips are batched: one heartbeat call per tick, coalesced acks, pipelined dispatch.

The queue's command layer is wrapped to count round trips (one per write of a
pipeline) by action, and the contract calls are recorded with their batch sizes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis

from taskrunner import App, Producer, Runner, RunnerConfig
from taskrunner.queue import Delivery
from taskrunner_backends.redis import RedisStreamsQueue

from .helpers import count_round_trips, eventually

pytestmark = pytest.mark.redis


class RecordingQueue(RedisStreamsQueue):
    """Records the batch size of every heartbeat and ack call."""

    def __init__(self, url: str, namespace: str) -> None:
        super().__init__(
            aioredis.Redis.from_url(url), queue_name="q", namespace=namespace, owns_client=True
        )
        self.heartbeats: list[int] = []
        self.acks: list[int] = []

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self.heartbeats.append(len(deliveries))
        return await super().heartbeat(deliveries)

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self.acks.append(len(deliveries))
        return await super().ack(deliveries)


@asynccontextmanager
async def recording_queue(url: str, namespace: str) -> AsyncIterator[RecordingQueue]:
    queue = RecordingQueue(url, namespace)
    try:
        await queue.initialize()
        yield queue
    finally:
        await queue.aclose()


async def test_dispatch_many_is_one_round_trip_per_thousand_messages(
    redis_queue: RedisStreamsQueue,
) -> None:
    app = App("q")

    @app.task(name="t")
    async def t(n: int) -> None:
        pass

    await redis_queue.initialize()
    trips = count_round_trips(redis_queue)

    ids = await Producer(redis_queue, app).dispatch_many(t, range(2500))

    assert len(set(ids)) == 2500
    assert trips == {"add": 3}
    assert await redis_queue.len() == 2500


async def test_lease_keeper_extends_every_lease_in_one_call_per_tick(
    redis_url: str, redis_namespace: str
) -> None:
    app = App("q")
    started = 0
    release = asyncio.Event()

    @app.task(name="hold")
    async def hold(n: int) -> None:
        nonlocal started
        started += 1
        await release.wait()

    async with recording_queue(redis_url, redis_namespace) as queue:
        await Producer(queue, app).dispatch_many(hold, range(40))
        config = RunnerConfig(num_workers=40, batch_size=40, lease_seconds=1.0)
        runner = Runner(queue, app, config)
        trips = count_round_trips(queue)
        run = asyncio.create_task(runner.run(burst=True))
        try:
            await eventually(
                lambda: _value(lambda: started), lambda n: n == 40, what="all 40 tasks running"
            )
            before = trips["heartbeat"]
            await eventually(
                lambda: _value(lambda: trips["heartbeat"]),
                lambda n: n >= before + 3,
                what="three more heartbeat ticks",
            )
        finally:
            release.set()
            await run

        # Every tick while the 40 ran: one call, one round trip, all 40 leases.
        assert queue.heartbeats.count(40) >= 3
        assert trips["heartbeat"] == len(queue.heartbeats)
        assert runner.stats().succeeded == 40
        assert runner.stats().lease_lost == 0


async def test_acks_of_finishing_tasks_are_coalesced(redis_url: str, redis_namespace: str) -> None:
    app = App("q")

    @app.task(name="noop")
    async def noop(n: int) -> None:
        pass

    async with recording_queue(redis_url, redis_namespace) as queue:
        await Producer(queue, app).dispatch_many(noop, range(2000))
        runner = Runner(queue, app, RunnerConfig(num_workers=100, batch_size=100))
        trips = count_round_trips(queue)

        await runner.run(burst=True)

        assert runner.stats().succeeded == 2000
        assert sum(queue.acks) == 2000
        # A batch of 100 no-op tasks finishes within a loop turn, so its acks travel
        # together, and the fetcher asks for the next whole batch in one receive:
        # about 20 of each (2000 / 100), never one per task.
        assert len(queue.acks) <= 2000 / 50
        assert trips["ack"] == len(queue.acks)
        assert trips["receive"] <= 2000 / 50
        assert await queue.len() == 0


async def _value(read: object) -> int:
    assert callable(read)
    value = read()
    assert isinstance(value, int)
    return value
