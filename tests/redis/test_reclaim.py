"""Reclaim: the XAUTOCLAIM cursor, and entries that can no longer be delivered."""

from __future__ import annotations

import pytest

from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import age_lease, inject_raw, remove_payload

from .helpers import DEADLINE_SECONDS, pending_of, receive_one

pytestmark = pytest.mark.redis


async def test_reclaim_finds_lapsed_entries_behind_thousands_of_live_ones(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"live"] * 2000 + [b"lapsed"] * 5)
    deliveries = await redis_queue.receive(
        "a", max_messages=2005, wait_seconds=0, lease_seconds=300
    )
    lapsed = deliveries[2000:]
    for delivery in lapsed:
        await age_lease(redis_queue, delivery, 600)

    found = []
    for _ in range(100):  # each call scans a bounded part of the PEL
        found += await redis_queue.reclaim("b", lease_seconds=300, max_messages=5)
        if len(found) == 5:
            break

    assert sorted(d.message_id for d in found) == sorted(d.message_id for d in lapsed)
    assert all(d.body == b"lapsed" and d.delivery_count == 2 for d in found)


async def test_reclaim_cursor_wraps_around_to_find_entries_that_lapse_later(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"m"] * 50)
    deliveries = await redis_queue.receive("a", max_messages=50, wait_seconds=0, lease_seconds=300)
    await age_lease(redis_queue, deliveries[40], 600)
    [first] = await redis_queue.reclaim("b", lease_seconds=300, max_messages=1)
    assert first.message_id == deliveries[40].message_id

    await age_lease(redis_queue, deliveries[3], 600)
    found = []
    for _ in range(10):
        found += await redis_queue.reclaim("b", lease_seconds=300, max_messages=1)
        if found:
            break

    assert [d.message_id for d in found] == [deliveries[3].message_id]


async def test_payload_removed_under_a_pending_message_is_dead_lettered(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"doomed", b"fine"])
    doomed, fine = await redis_queue.receive("a", max_messages=2, wait_seconds=0, lease_seconds=300)
    await age_lease(redis_queue, doomed, 600)
    await age_lease(redis_queue, fine, 600)
    assert await remove_payload(redis_queue, doomed)

    taken = await redis_queue.reclaim("b", lease_seconds=300, max_messages=10)

    assert [d.body for d in taken] == [b"fine"]
    [letter] = await redis_queue.list_dead_letters()
    assert letter.reason == "payload removed from the stream while pending"
    assert letter.original_id == doomed.message_id
    assert await pending_of(redis_queue, doomed.message_id) is None
    assert await redis_queue.reclaim("c", lease_seconds=300, max_messages=10) == []


async def test_heartbeat_of_a_message_whose_payload_was_removed_reports_lost(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"doomed"])
    delivery = await receive_one(redis_queue, "a")
    await remove_payload(redis_queue, delivery)

    assert await redis_queue.heartbeat([delivery]) == [delivery]

    [letter] = await redis_queue.list_dead_letters()
    assert letter.reason == "payload removed from the stream while pending"
    assert letter.original_id == delivery.message_id
    assert await redis_queue.len() == 0


async def test_entry_without_body_is_dead_lettered_on_receive_while_the_rest_flows(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"before"])
    foreign = await inject_raw(redis_queue, {"payload": b"someone else's"})
    await redis_queue.add([b"after"])

    deliveries = await redis_queue.receive("a", max_messages=10, wait_seconds=0, lease_seconds=300)

    assert [d.body for d in deliveries] == [b"before", b"after"]
    [letter] = await redis_queue.list_dead_letters()
    assert letter.original_id == foreign
    assert "no body field 'b'" in letter.reason
    assert b"someone else's" in letter.body
    assert await redis_queue.ack(deliveries) == []
    assert await redis_queue.len() == 0
    assert await redis_queue.receive("a", max_messages=10, wait_seconds=0, lease_seconds=300) == []


async def test_receive_waits_on_when_only_malformed_entries_arrive(
    redis_queue: RedisStreamsQueue,
) -> None:
    await inject_raw(redis_queue, {"b": b"x", "n": b"minus one"})

    deliveries = await redis_queue.receive(
        "a", max_messages=10, wait_seconds=0.2, lease_seconds=300
    )

    assert deliveries == []
    [letter] = await redis_queue.list_dead_letters()
    assert "'n'" in letter.reason


async def test_malformed_entry_found_by_reclaim_is_dead_lettered_not_returned(
    redis_queue: RedisStreamsQueue,
) -> None:
    bad = await inject_raw(redis_queue, {"b": b"one", "i": b"not-an-id"})
    await redis_queue.add([b"good"])
    # A worker of an older version (no lease in its consumer name) that read the raw
    # entries and died before handling them.
    await redis_queue._create_group()
    await redis_queue._raw.call(
        "xreadgroup",
        "XREADGROUP",
        "GROUP",
        redis_queue.keys.group,
        "dead-worker",
        "COUNT",
        10,
        "STREAMS",
        redis_queue.keys.stream,
        ">",
    )
    for entry in (bad,):
        await age_lease(redis_queue, entry, 600)
    stats = await redis_queue.stats()
    assert stats.in_flight == 2

    taken = await redis_queue.reclaim("b", lease_seconds=300, max_messages=10)

    assert taken == []  # the good one is not lapsed; the bad one is buried
    [letter] = await redis_queue.list_dead_letters()
    assert letter.original_id == bad
    assert "'i'" in letter.reason
    assert (await redis_queue.stats()).in_flight == 1
    assert await redis_queue.reclaim("b", lease_seconds=300, max_messages=10) == []


async def test_duplicate_body_fields_are_malformed(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue._raw.call(
        "xadd", "XADD", redis_queue.keys.stream, "*", "b", b"one", "b", b"two"
    )

    assert await redis_queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=300) == []

    [letter] = await redis_queue.list_dead_letters()
    assert "repeated" in letter.reason


async def test_reclaim_of_the_same_lapsed_message_by_two_reclaimers_hands_it_to_one(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x"])
    delivery = await receive_one(redis_queue, "a")
    await age_lease(redis_queue, delivery, 600)

    first = await redis_queue.reclaim("b", lease_seconds=300, max_messages=1)
    second = await redis_queue.reclaim("c", lease_seconds=300, max_messages=1)

    assert len(first) + len(second) == 1
    assert DEADLINE_SECONDS > 0
