"""Every contract method of RedisStreamsQueue against a real server."""

from __future__ import annotations

import asyncio
import time

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import Delivery
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import age_lease

from .helpers import open_queue, receive_one

pytestmark = pytest.mark.redis


async def test_add_returns_one_increasing_id_per_body(redis_queue: RedisStreamsQueue) -> None:
    ids = await redis_queue.add([b"a", b"b", b"c"])

    assert len(ids) == 3
    assert len(set(ids)) == 3
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


async def test_add_rejects_non_bytes_before_adding_anything(
    redis_queue: RedisStreamsQueue,
) -> None:
    with pytest.raises(TypeError):
        await redis_queue.add([b"ok", "text"])  # type: ignore[list-item]

    assert await redis_queue.len() == 0


async def test_receive_delivers_bodies_in_order_with_count_one(
    redis_queue: RedisStreamsQueue,
) -> None:
    ids = await redis_queue.add([b"a", b"b", b"c"])

    deliveries = await redis_queue.receive("c1", max_messages=10, wait_seconds=0, lease_seconds=60)

    assert [d.body for d in deliveries] == [b"a", b"b", b"c"]
    assert [d.message_id for d in deliveries] == ids
    assert all(d.delivery_count == 1 for d in deliveries)
    assert all(d.receipt.consumer == "c1" and d.receipt.delivery_count == 1 for d in deliveries)


async def test_receive_returns_at_most_max_messages(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x"] * 5)

    first = await redis_queue.receive("c1", max_messages=2, wait_seconds=0, lease_seconds=60)
    rest = await redis_queue.receive("c1", max_messages=10, wait_seconds=0, lease_seconds=60)

    assert len(first) == 2
    assert len(rest) == 3


async def test_receive_returns_empty_after_wait_when_queue_is_empty(
    redis_queue: RedisStreamsQueue,
) -> None:
    start = time.monotonic()

    deliveries = await redis_queue.receive("c1", max_messages=1, wait_seconds=0.2, lease_seconds=60)

    assert deliveries == []
    assert time.monotonic() - start >= 0.19


async def test_receive_without_wait_returns_empty_at_once(redis_queue: RedisStreamsQueue) -> None:
    assert await redis_queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=60) == []


async def test_blocking_receive_wakes_when_a_message_arrives(
    redis_queue: RedisStreamsQueue,
) -> None:
    waiter = asyncio.create_task(
        redis_queue.receive("c1", max_messages=1, wait_seconds=15, lease_seconds=60)
    )
    await asyncio.sleep(0.1)  # let the XREADGROUP block; not a wait for a result

    await redis_queue.add([b"late"])
    deliveries = await asyncio.wait_for(waiter, 10)

    assert [d.body for d in deliveries] == [b"late"]


async def test_received_message_is_not_delivered_to_another_consumer(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"only"])
    await receive_one(redis_queue, "c1")

    assert await redis_queue.receive("c2", max_messages=1, wait_seconds=0, lease_seconds=60) == []
    assert await redis_queue.reclaim("c2", lease_seconds=60, max_messages=10) == []


async def test_receive_validates_arguments(redis_queue: RedisStreamsQueue) -> None:
    with pytest.raises(ValueError, match="max_messages"):
        await redis_queue.receive("c1", max_messages=0, wait_seconds=0, lease_seconds=60)
    with pytest.raises(ValueError, match="wait_seconds"):
        await redis_queue.receive("c1", max_messages=1, wait_seconds=-1, lease_seconds=60)
    with pytest.raises(ValueError, match="consumer"):
        await redis_queue.receive("", max_messages=1, wait_seconds=0, lease_seconds=60)


async def test_heartbeat_keeps_lease_and_count(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x"])
    delivery = await receive_one(redis_queue, "c1")
    await age_lease(redis_queue, delivery, 60)

    lost = await redis_queue.heartbeat([delivery])

    assert lost == []
    assert await redis_queue.reclaim("c2", lease_seconds=30, max_messages=10) == []
    stats = await redis_queue.stats()
    assert stats.in_flight == 1
    assert stats.oldest_in_flight_age_seconds is not None
    assert stats.oldest_in_flight_age_seconds < 30


async def test_ack_completes_and_deletes_the_entry(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x"])
    delivery = await receive_one(redis_queue, "c1")

    assert await redis_queue.ack([delivery]) == []

    raw_length = await redis_queue._raw.call("xlen", "XLEN", redis_queue.keys.stream)
    assert raw_length == 0
    assert await redis_queue.len() == 0
    await age_lease(redis_queue, delivery, 3600)
    assert await redis_queue.reclaim("c2", lease_seconds=1, max_messages=10) == []


async def test_acking_an_already_completed_delivery_reports_it(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"x", b"y"])
    first, second = await redis_queue.receive(
        "c1", max_messages=2, wait_seconds=0, lease_seconds=60
    )
    await redis_queue.ack([first])

    lost = await redis_queue.ack([first, second])

    assert lost == [first]
    assert await redis_queue.len() == 0


async def test_reclaim_returns_lapsed_message_with_count_plus_one(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"x"])
    delivery = await receive_one(redis_queue, "c1")
    await age_lease(redis_queue, delivery, 120)

    [taken] = await redis_queue.reclaim("c2", lease_seconds=60, max_messages=10)

    assert taken.message_id == message_id
    assert taken.body == b"x"
    assert taken.delivery_count == 2
    assert taken.receipt.consumer == "c2"
    assert taken.receipt.delivery_count == 2


async def test_reclaim_validates_arguments(redis_queue: RedisStreamsQueue) -> None:
    with pytest.raises(ValueError, match="lease_seconds"):
        await redis_queue.reclaim("c1", lease_seconds=0, max_messages=1)
    with pytest.raises(ValueError, match="max_messages"):
        await redis_queue.reclaim("c1", lease_seconds=1, max_messages=0)


async def test_dead_letter_keeps_body_reason_and_count(redis_queue: RedisStreamsQueue) -> None:
    [message_id] = await redis_queue.add([b"poison"])
    delivery = await receive_one(redis_queue, "c1")

    assert await redis_queue.dead_letter([delivery], reason="kaboom") == []

    [letter] = await redis_queue.list_dead_letters()
    assert letter.original_id == message_id
    assert letter.body == b"poison"
    assert letter.reason == "kaboom"
    assert letter.delivery_count == 1
    assert abs(letter.dead_at - time.time()) < 60
    assert await redis_queue.len() == 0
    assert (await redis_queue.stats()).dead == 1
    await age_lease(redis_queue, delivery, 3600)
    assert await redis_queue.reclaim("c2", lease_seconds=1, max_messages=10) == []


async def test_stats_counts_ready_in_flight_dead_and_consumers(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"a", b"b", b"c", b"d"])
    _, b = await redis_queue.receive("c1", max_messages=2, wait_seconds=0, lease_seconds=60)
    await redis_queue.dead_letter([b], reason="r")

    stats = await redis_queue.stats()

    assert (stats.ready, stats.in_flight, stats.dead) == (2, 1, 1)
    assert stats.oldest_ready_age_seconds is not None
    assert stats.oldest_in_flight_age_seconds is not None
    assert [(c.name, c.pending) for c in stats.consumers] == [("c1", 1)]
    assert await redis_queue.len() == 3


async def test_stats_of_an_empty_queue(redis_queue: RedisStreamsQueue) -> None:
    stats = await redis_queue.stats()

    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 0)
    assert stats.oldest_ready_age_seconds is None
    assert stats.oldest_in_flight_age_seconds is None


async def test_two_handles_share_the_queue(
    redis_queue: RedisStreamsQueue, redis_url: str, redis_namespace: str
) -> None:
    other = open_queue(redis_url, redis_namespace)
    try:
        await redis_queue.add([b"shared"])
        delivery = await receive_one(other, "c2")
        assert delivery.body == b"shared"
        assert await redis_queue.ack([delivery]) == []
    finally:
        await other.aclose()


async def test_backlog_added_before_the_group_existed_is_delivered(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue._raw.call("xadd", "XADD", redis_queue.keys.stream, "*", "b", b"early")

    deliveries = await redis_queue.receive("c1", max_messages=5, wait_seconds=0, lease_seconds=60)

    assert [d.body for d in deliveries] == [b"early"]


async def test_deleted_group_is_recreated_at_zero(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"one"])
    await redis_queue._raw.call(
        "destroy", "XGROUP", "DESTROY", redis_queue.keys.stream, redis_queue.keys.group
    )

    deliveries = await redis_queue.receive("c1", max_messages=5, wait_seconds=0, lease_seconds=60)

    assert [d.body for d in deliveries] == [b"one"]


async def test_aclose_is_idempotent_and_later_calls_raise(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x"])
    delivery = await receive_one(redis_queue, "c1")

    await redis_queue.aclose()
    await redis_queue.aclose()

    with pytest.raises(QueueClosedError):
        await redis_queue.add([b"y"])
    with pytest.raises(QueueClosedError):
        await redis_queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=60)
    with pytest.raises(QueueClosedError):
        await redis_queue.ack([delivery])
    with pytest.raises(QueueClosedError):
        await redis_queue.stats()
    with pytest.raises(QueueClosedError):
        await redis_queue.reclaim("c1", lease_seconds=1, max_messages=1)


async def test_aclose_wakes_a_blocked_receive(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.initialize()
    waiter = asyncio.create_task(
        redis_queue.receive("c1", max_messages=1, wait_seconds=30, lease_seconds=60)
    )
    await asyncio.sleep(0.1)  # let it block

    await redis_queue.aclose()

    with pytest.raises(QueueClosedError):
        await asyncio.wait_for(waiter, 10)


async def test_aclose_leaves_an_injected_client_open(redis_url: str, redis_namespace: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    queue = await RedisStreamsQueue.open(client, queue_name="q", namespace=redis_namespace)

    await queue.aclose()

    assert await client.ping()
    await client.aclose()


async def test_cancelled_receive_loses_no_message(redis_queue: RedisStreamsQueue) -> None:
    waiter = asyncio.create_task(
        redis_queue.receive("c1", max_messages=1, wait_seconds=30, lease_seconds=60)
    )
    await asyncio.sleep(0.1)  # let it block
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter

    [message_id] = await redis_queue.add([b"after"])
    got = await redis_queue.receive("c2", max_messages=1, wait_seconds=2, lease_seconds=60)
    if not got:
        # The server may still have served the cancelled read (not cancel-safe):
        # the message is then leased to c1 and reclaim must find it.
        await age_lease(redis_queue, message_id, 120)
        got = await redis_queue.reclaim("c2", lease_seconds=60, max_messages=1)

    assert [d.message_id for d in got] == [message_id]


async def test_capabilities_and_requires_heartbeat(redis_queue: RedisStreamsQueue) -> None:
    capabilities = redis_queue.capabilities

    assert redis_queue.requires_heartbeat is True
    assert capabilities.blocking_receive
    assert not capabilities.cancel_safe_receive
    assert capabilities.shared_across_instances
    assert redis_queue.admin is redis_queue
    assert redis_queue.consumer_cleanup is redis_queue


def test_receipts_and_deliveries_are_plain_values() -> None:
    # Guards the assumption that deliveries can be compared in assertions.
    assert Delivery.__struct_config__.frozen


@pytest.mark.parametrize(
    "options",
    [
        {"protocol": 3},
        {"protocol": 2, "decode_responses": True},
        {"protocol": 3, "decode_responses": True},
    ],
    ids=["resp3", "resp2-decoded", "resp3-decoded"],
)
async def test_client_protocol_and_decoding_settings_do_not_matter(
    redis_url: str, redis_namespace: str, options: dict[str, object]
) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url, **options)  # type: ignore[arg-type]
    queue = await RedisStreamsQueue.open(client, queue_name="q", namespace=redis_namespace)
    try:
        body = bytes(range(256))
        await queue.add([body])
        first = await receive_one(queue, "a")
        waiter = asyncio.create_task(
            queue.receive("a", max_messages=2, wait_seconds=10, lease_seconds=60)
        )
        await asyncio.sleep(0.05)  # let it block, so the XREADGROUP reply is parsed
        await queue.add([b"second"])
        second = await waiter

        assert first.body == body
        assert [d.body for d in second] == [b"second"]
        assert await queue.ack([first, *second]) == []
        assert (await queue.stats()).in_flight == 0
    finally:
        await queue.aclose()
        await client.aclose()
