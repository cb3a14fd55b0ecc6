"""Runners with different lease settings on one queue, and the Redis lease bookkeeping.

Each lease travels with its holder (the group consumer's name carries it), so a runner
configured with a short lease never takes a message that a long-lease runner
heartbeats on time, and a lapsed message is found whatever the reclaimer's lease.
"""

from __future__ import annotations

import asyncio

import pytest

from taskrunner import App, Delivery, Producer, Runner, RunnerConfig, current_task
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import age_lease, remove_payload

from .helpers import eventually, holder, open_queue, pending_of, receive_one

pytestmark = pytest.mark.redis


async def test_short_lease_runner_never_takes_a_task_heartbeated_by_a_long_lease_runner(
    redis_url: str, redis_namespace: str
) -> None:
    app = App("q")
    runs: list[tuple[str, int]] = []
    finish = asyncio.Event()

    @app.task(name="long", max_retries=5)
    async def long_task() -> None:
        context = current_task()
        runs.append((context.consumer, context.delivery_count))
        await finish.wait()

    # A: 6 s leases heartbeated every 2 s. B: 1 s leases, reclaiming every 0.2 s, so B
    # would take the task between two of A's heartbeats if it judged it by its own lease.
    a_queue = open_queue(redis_url, redis_namespace)
    b_queue = open_queue(redis_url, redis_namespace)
    a = Runner(
        a_queue,
        app,
        RunnerConfig(lease_seconds=6.0, heartbeat_interval_seconds=2.0, block_seconds=0.5),
    )
    b = Runner(
        b_queue,
        app,
        RunnerConfig(
            lease_seconds=1.0,
            heartbeat_interval_seconds=0.2,
            reclaim_interval_seconds=0.2,
            block_seconds=0.5,
        ),
    )
    a_run = asyncio.create_task(a.run())
    b_run: asyncio.Task[None] | None = None
    try:
        await a.wait_ready()
        await Producer(a_queue, app).dispatch(long_task)
        await eventually(lambda: _value(len(runs)), lambda n: n == 1, what="A runs the task")
        b_run = asyncio.create_task(b.run())
        await b.wait_ready()
        # Three of B's leases (and fifteen of its reclaim sweeps) pass while A runs it.
        await asyncio.sleep(3.0)
        finish.set()
        await eventually(a_queue.len, lambda n: n == 0, what="the task completed")
    finally:
        finish.set()
        a.stop()
        b.stop()
        await asyncio.gather(a_run, *([] if b_run is None else [b_run]), return_exceptions=True)
        await a_queue.aclose()
        await b_queue.aclose()

    assert len(runs) == 1, f"the task ran {len(runs)} times: {runs}"
    assert b.stats().reclaimed == 0
    assert a.stats().lease_lost == 0


async def _value(value: int) -> int:
    return value


async def test_holders_carry_their_lease_and_reclaim_judges_each_by_its_own(
    redis_queue: RedisStreamsQueue,
) -> None:
    long_id, short_id = await redis_queue.add([b"long", b"short"])
    [long] = await redis_queue.receive("patient", max_messages=1, wait_seconds=0, lease_seconds=30)
    [short] = await redis_queue.receive("hasty", max_messages=1, wait_seconds=0, lease_seconds=2)
    assert await pending_of(redis_queue, long_id) == (holder("patient", 30), 1)
    assert await pending_of(redis_queue, short_id) == (holder("hasty", 2), 1)

    # Both idle for 10 s: past the short lease, inside the long one. The reclaimer's
    # own lease (600 s) is neither of them.
    for delivery in (long, short):
        assert await age_lease(redis_queue, delivery, 10)
    taken = await redis_queue.reclaim("r", lease_seconds=600, max_messages=10)

    assert [d.message_id for d in taken] == [short_id]
    assert await pending_of(redis_queue, short_id) == (holder("r", 600), 2)
    assert await redis_queue.heartbeat([long]) == []
    assert await redis_queue.ack([long, *taken]) == []


async def test_lapsed_entry_whose_payload_vanished_is_dead_lettered_with_its_message_id_and_count(
    redis_queue: RedisStreamsQueue,
) -> None:
    # One message never released (its entry is the message), one released once (its
    # entry is a re-added copy with another id).
    plain_id, released_id = await redis_queue.add([b"plain", b"released"])
    plain = await receive_one(redis_queue, "a")
    first = await receive_one(redis_queue, "a")
    assert await redis_queue.release([first]) == []
    again = await receive_one(redis_queue, "a")
    assert (plain.message_id, again.message_id) == (plain_id, released_id)
    assert again.delivery_count == 2
    for delivery in (plain, again):
        assert await age_lease(redis_queue, delivery, 120)
        assert await remove_payload(redis_queue, delivery)

    assert await redis_queue.reclaim("b", lease_seconds=60, max_messages=10) == []

    letters = {d.original_id: d for d in await redis_queue.list_dead_letters()}
    assert set(letters) == {plain_id, released_id}
    assert letters[plain_id].delivery_count == 1
    assert letters[released_id].delivery_count == 2
    assert await redis_queue.len() == 0
    origins = await redis_queue._raw.call("hlen", "HLEN", redis_queue.keys.origins)
    assert origins == 0, "the re-added entry's origin record was left behind"


async def test_origin_records_of_released_messages_go_with_their_completion(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"a", b"b", b"c"])
    held = [await receive_one(redis_queue, "a") for _ in range(3)]
    assert await redis_queue.release(held[:2]) == []
    assert await redis_queue.release(held[2:], delay_seconds=0.05) == []
    again: list[Delivery] = []

    async def more() -> int:
        again.extend(
            await redis_queue.receive("a", max_messages=3, wait_seconds=0.2, lease_seconds=60)
        )
        return len(again)

    await eventually(more, lambda n: n == 3, what="all three redelivered")
    hlen = await redis_queue._raw.call("hlen", "HLEN", redis_queue.keys.origins)
    assert hlen == 3

    assert await redis_queue.ack(again[:1]) == []
    assert await redis_queue.dead_letter(again[1:2], reason="r") == []
    assert await redis_queue.release(again[2:]) == []
    [last] = await redis_queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=60)
    assert await redis_queue.ack([last]) == []

    assert await redis_queue._raw.call("hlen", "HLEN", redis_queue.keys.origins) == 0
