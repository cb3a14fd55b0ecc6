"""Lease fencing: stale receipts never act, never steal back, and ABA is caught."""

from __future__ import annotations

import msgspec
import pytest

from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import age_lease

from .helpers import holder, pending_of, receive_one

pytestmark = pytest.mark.redis


async def test_stale_heartbeat_after_takeover_is_lost_and_leaves_new_lease_intact(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x"])
    old = await receive_one(redis_queue, "a")
    await age_lease(redis_queue, old, 120)
    [new] = await redis_queue.reclaim("b", lease_seconds=60, max_messages=1)

    lost = await redis_queue.heartbeat([old])

    assert lost == [old]
    assert await pending_of(redis_queue, new.message_id) == (holder("b", 60), 2)
    assert await redis_queue.heartbeat([new]) == []
    assert await redis_queue.ack([new]) == []
    assert await redis_queue.len() == 0


async def test_stale_heartbeat_does_not_reset_the_new_owners_idle_time(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x"])
    old = await receive_one(redis_queue, "a")
    await age_lease(redis_queue, old, 120)
    [new] = await redis_queue.reclaim("b", lease_seconds=60, max_messages=1)
    await age_lease(redis_queue, new, 120)

    await redis_queue.heartbeat([old])

    # Still lapsed for b: the stale heartbeat neither refreshed nor took it.
    [again] = await redis_queue.reclaim("c", lease_seconds=60, max_messages=1)
    assert again.delivery_count == 3


async def test_late_ack_after_takeover_is_lost_and_does_not_complete(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x"])
    old = await receive_one(redis_queue, "a")
    await age_lease(redis_queue, old, 120)
    [new] = await redis_queue.reclaim("b", lease_seconds=60, max_messages=1)

    assert await redis_queue.ack([old]) == [old]

    assert await redis_queue.len() == 1
    assert await pending_of(redis_queue, new.message_id) == (holder("b", 60), 2)
    assert await redis_queue.ack([new]) == []


async def test_stale_release_and_dead_letter_are_lost(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x"])
    old = await receive_one(redis_queue, "a")
    await age_lease(redis_queue, old, 120)
    [new] = await redis_queue.reclaim("b", lease_seconds=60, max_messages=1)

    assert await redis_queue.release([old]) == [old]
    assert await redis_queue.dead_letter([old], reason="late") == [old]

    assert await redis_queue.list_dead_letters() == []
    assert await pending_of(redis_queue, new.message_id) == (holder("b", 60), 2)


async def test_same_consumer_reclaiming_its_own_message_fences_the_old_receipt(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x"])
    old = await receive_one(redis_queue, "a")
    await age_lease(redis_queue, old, 120)
    [new] = await redis_queue.reclaim("a", lease_seconds=60, max_messages=1)
    assert new.receipt.consumer == old.receipt.consumer

    assert await redis_queue.heartbeat([old]) == [old]
    assert await redis_queue.ack([old]) == [old]

    assert await redis_queue.heartbeat([new]) == []
    assert await redis_queue.ack([new]) == []
    assert await redis_queue.len() == 0


async def test_forged_receipts_are_lost(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x"])
    real = await receive_one(redis_queue, "a")
    other_owner = msgspec.structs.replace(
        real, receipt=msgspec.structs.replace(real.receipt, consumer="z")
    )
    other_count = msgspec.structs.replace(
        real, receipt=msgspec.structs.replace(real.receipt, delivery_count=5)
    )
    garbage_token = msgspec.structs.replace(
        real, receipt=msgspec.structs.replace(real.receipt, token="not a token")
    )

    lost = await redis_queue.ack([other_owner, other_count, garbage_token])

    assert lost == [other_owner, other_count, garbage_token]
    assert await redis_queue.ack([real]) == []


async def test_heartbeat_of_many_deliveries_is_one_batch(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"m"] * 1200)
    deliveries = await redis_queue.receive("a", max_messages=1200, wait_seconds=0, lease_seconds=60)
    for delivery in deliveries[::100]:
        await age_lease(redis_queue, delivery, 120)
    stale = deliveries[:3]
    for delivery in stale:
        await age_lease(redis_queue, delivery, 120)
    taken = await redis_queue.reclaim("b", lease_seconds=60, max_messages=3)
    taken_ids = {d.message_id for d in taken}

    lost = await redis_queue.heartbeat(deliveries)

    assert {d.message_id for d in lost} == taken_ids
    assert len(lost) == 3
    assert await redis_queue.reclaim("c", lease_seconds=60, max_messages=100) == []
    assert await redis_queue.ack(deliveries) == lost
    assert await redis_queue.ack(taken) == []
    assert await redis_queue.len() == 0


async def test_purged_in_flight_receipts_report_lost(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x", b"y"])
    delivery = await receive_one(redis_queue, "a")

    assert await redis_queue.purge() == 2

    assert await redis_queue.heartbeat([delivery]) == [delivery]
    assert await redis_queue.ack([delivery]) == [delivery]
    assert await redis_queue.len() == 0
    [fresh] = await redis_queue.add([b"z"])
    assert [
        d.message_id
        for d in await redis_queue.receive("a", max_messages=5, wait_seconds=0, lease_seconds=60)
    ] == [fresh]
