"""Release: immediate and delayed redelivery, with delivery count + 1 and a stable id."""

from __future__ import annotations

import asyncio
import time

import pytest

from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.queue import DELAYED_RECHECK_SECONDS
from taskrunner_backends.redis.testing import age_lease

from .helpers import eventually, receive_one

pytestmark = pytest.mark.redis


async def test_release_without_delay_is_redelivered_by_receive_with_count_plus_one(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"x"])
    first = await receive_one(redis_queue, "a")

    assert await redis_queue.release([first]) == []
    second = await receive_one(redis_queue, "b")

    assert second.message_id == message_id
    assert second.body == b"x"
    assert second.delivery_count == 2
    assert second.receipt.delivery_count == 2


async def test_release_with_delay_is_not_redelivered_before_the_delay(
    redis_queue: RedisStreamsQueue,
) -> None:
    delay = 1.0
    [message_id] = await redis_queue.add([b"x"])
    first = await receive_one(redis_queue, "a")
    released_at = time.monotonic()

    assert await redis_queue.release([first], delay_seconds=delay) == []

    assert await redis_queue.receive("b", max_messages=1, wait_seconds=0, lease_seconds=300) == []
    assert await redis_queue.reclaim("b", lease_seconds=0.001, max_messages=1) == []
    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 1, 0)
    [again] = await eventually(
        lambda: redis_queue.receive("b", max_messages=1, wait_seconds=0.5, lease_seconds=300),
        bool,
        what="released message redelivered",
    )
    assert time.monotonic() - released_at >= delay - 0.01
    assert again.message_id == message_id
    assert again.delivery_count == 2


async def test_blocking_receive_wakes_when_a_delayed_message_is_due(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x"])
    first = await receive_one(redis_queue, "a")
    start = time.monotonic()  # before the server computes the due time
    await redis_queue.release([first], delay_seconds=0.3)

    deliveries = await redis_queue.receive("b", max_messages=1, wait_seconds=20, lease_seconds=300)

    assert [d.delivery_count for d in deliveries] == [2]
    assert 0.3 <= time.monotonic() - start < 15


async def test_blocking_receive_wakes_for_a_message_released_with_a_delay_while_it_waits(
    redis_queue: RedisStreamsQueue,
) -> None:
    # Regression (conformance X17): the parked message is invisible to the XREADGROUP
    # the receive blocks in, which used to block for the whole wait (here 20 s).
    await redis_queue.add([b"x"])
    first = await receive_one(redis_queue, "a")
    waiting = asyncio.create_task(
        redis_queue.receive("b", max_messages=1, wait_seconds=20, lease_seconds=300)
    )
    await eventually(
        lambda: asyncio.sleep(0, bool(redis_queue._blocking)), bool, what="read blocks"
    )
    start = time.monotonic()  # before the server computes the due time
    await redis_queue.release([first], delay_seconds=0.3)

    deliveries = await asyncio.wait_for(waiting, 15)

    assert [d.delivery_count for d in deliveries] == [2]
    # Due after 0.3 s, noticed by the next script run at most DELAYED_RECHECK_SECONDS
    # later; the rest is slack for a loaded machine.
    assert 0.3 <= time.monotonic() - start < 0.3 + DELAYED_RECHECK_SECONDS + 2


async def test_released_message_keeps_counting_across_release_and_reclaim(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"x"])
    d1 = await receive_one(redis_queue, "a")
    await redis_queue.release([d1])
    d2 = await receive_one(redis_queue, "a")
    await age_lease(redis_queue, d2, 600)
    [d3] = await redis_queue.reclaim("b", lease_seconds=300, max_messages=1)
    await redis_queue.release([d3])
    d4 = await receive_one(redis_queue, "c")

    assert [d.delivery_count for d in (d1, d2, d3, d4)] == [1, 2, 3, 4]
    assert {d.message_id for d in (d1, d2, d3, d4)} == {message_id}
    # Every earlier receipt is stale now.
    assert await redis_queue.heartbeat([d1, d2, d3]) == [d1, d2, d3]
    await redis_queue.dead_letter([d4], reason="enough")
    [letter] = await redis_queue.list_dead_letters()
    assert (letter.original_id, letter.delivery_count) == (message_id, 4)


async def test_release_of_a_stale_receipt_leaves_the_message_alone(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x"])
    first = await receive_one(redis_queue, "a")
    await redis_queue.release([first])

    assert await redis_queue.release([first], delay_seconds=5) == [first]

    assert [
        d.delivery_count
        for d in await redis_queue.receive("b", max_messages=5, wait_seconds=0, lease_seconds=300)
    ] == [2]


async def test_release_rejects_a_negative_delay(redis_queue: RedisStreamsQueue) -> None:
    with pytest.raises(ValueError, match="delay_seconds"):
        await redis_queue.release([], delay_seconds=-1)


async def test_purge_removes_delayed_messages(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x", b"y"])
    first = await receive_one(redis_queue, "a")
    await redis_queue.release([first], delay_seconds=60)

    assert await redis_queue.purge() == 2

    assert await redis_queue.len() == 0
