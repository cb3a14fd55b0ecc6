"""Runner level: after a takeover, the old owner's late ack and stale heartbeat report lost.

Two runners in this process share a queue on the real server. Runner A's link to the
server "stalls" (its heartbeats and reclaims wait on an event, as in a network
partition or a long pause); its leases are aged past the lease, runner B takes both
messages over, and then A's work resumes: one task finishes and acks late, the other's
delayed heartbeat goes through. Both are reported lost to A, neither completes or
steals back the message, and B's leases stay intact until B acks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from taskrunner import App, Producer, Runner, RunnerConfig, current_task
from taskrunner.queue import Delivery
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import age_lease

from .helpers import eventually, holder, open_queue, pending_of

pytestmark = pytest.mark.redis

T = TypeVar("T")


class StallableQueue(RedisStreamsQueue):
    """A handle whose heartbeats and reclaims wait while `link` is clear."""

    def __init__(self, url: str, namespace: str) -> None:
        super().__init__(
            aioredis.Redis.from_url(url), queue_name="q", namespace=namespace, owns_client=True
        )
        self.link = asyncio.Event()
        self.link.set()
        self.heartbeats_in_flight = 0

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        await self.link.wait()
        self.heartbeats_in_flight += 1
        try:
            return await super().heartbeat(deliveries)
        finally:
            self.heartbeats_in_flight -= 1

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        await self.link.wait()
        return await super().reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )


async def test_late_ack_and_stale_heartbeat_after_takeover_report_lost_and_spare_the_new_owner(
    redis_url: str, redis_namespace: str
) -> None:
    app = App("q")
    started: dict[tuple[str, int], tuple[str, str]] = {}
    gates = {(name, n): asyncio.Event() for name in ("late-ack", "stale-beat") for n in (1, 2)}

    @app.task(name="job")
    async def job(name: str) -> None:
        ctx = current_task()
        started[(name, ctx.delivery_count)] = (ctx.consumer, ctx.message_id)
        await gates[(name, ctx.delivery_count)].wait()

    config = RunnerConfig(num_workers=4, lease_seconds=2.0, block_seconds=0.5)
    a_queue = StallableQueue(redis_url, redis_namespace)
    b_queue = open_queue(redis_url, redis_namespace)
    a, b = Runner(a_queue, app, config), Runner(b_queue, app, config)
    a_run = asyncio.create_task(a.run())
    b_run: asyncio.Task[None] | None = None
    try:
        await Producer(a_queue, app).dispatch_many(job, ["late-ack", "stale-beat"])
        await eventually(_now(started), lambda s: len(s) == 2, what="A runs both tasks")

        a_queue.link.clear()
        await eventually(
            _now(a_queue), lambda q: q.heartbeats_in_flight == 0, what="A's link stalled"
        )
        for name in ("late-ack", "stale-beat"):
            assert await age_lease(a_queue, started[(name, 1)][1], 120)
        b_run = asyncio.create_task(b.run())
        await eventually(_now(started), lambda s: len(s) == 4, what="B took both over")
        b_owner = b.consumer_names[-1]  # B's reclaimer
        assert started[("late-ack", 2)][0] == started[("stale-beat", 2)][0] == b_owner

        # A's task finishes after the takeover: its ack is fenced off.
        gates[("late-ack", 1)].set()
        await eventually(_now(a), lambda r: r.stats().lease_lost == 1, what="A's late ack lost")
        # A's delayed heartbeat goes through: both leases are reported lost, the
        # finished one is ignored, the running one is marked lost.
        a_queue.link.set()
        await eventually(
            _now(a), lambda r: r.stats().lease_lost == 2, what="A's stale heartbeat lost"
        )
        gates[("stale-beat", 1)].set()
        await eventually(_now(a), lambda r: r.stats().in_flight == 0, what="A's tasks returned")

        for name in ("late-ack", "stale-beat"):
            assert await pending_of(a_queue, started[(name, 2)][1]) == (
                holder(b_owner, config.lease_seconds),
                2,
            )
        assert await a_queue.len() == 2

        gates[("late-ack", 2)].set()
        gates[("stale-beat", 2)].set()
        await eventually(a_queue.len, lambda n: n == 0, what="B acked both")
    finally:
        for gate in gates.values():
            gate.set()
        a.stop()
        b.stop()
        await asyncio.gather(a_run, *([] if b_run is None else [b_run]))
        await a_queue.aclose()
        await b_queue.aclose()

    assert a.stats().lease_lost == 2
    assert a.stats().dead_lettered == 0
    assert b.stats().lease_lost == 0
    assert b.stats().reclaimed == 2
    assert b.stats().succeeded == 2


def _now(value: T) -> Callable[[], Awaitable[T]]:
    """An `eventually` attempt that reads an object the event loop updates."""

    async def read() -> T:
        return value

    return read
