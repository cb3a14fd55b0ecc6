"""QueueAdmin: dead-letter listing, retry, purge; and consumer garbage collection."""

from __future__ import annotations

import asyncio

import pytest

from taskrunner.queue import WorkerInfo
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import age_lease

from .helpers import receive_one

pytestmark = pytest.mark.redis


async def _dead_letters(queue: RedisStreamsQueue, bodies: list[bytes]) -> list[str]:
    await queue.add(bodies)
    deliveries = await queue.receive(
        "a", max_messages=len(bodies), wait_seconds=0, lease_seconds=300
    )
    await queue.dead_letter(deliveries, reason="bad")
    return [letter.message_id for letter in await queue.list_dead_letters()]


async def test_list_dead_letters_is_oldest_first_and_limited(
    redis_queue: RedisStreamsQueue,
) -> None:
    await _dead_letters(redis_queue, [b"1", b"2", b"3"])

    letters = await redis_queue.list_dead_letters(limit=2)

    assert [letter.body for letter in letters] == [b"1", b"2"]
    assert await redis_queue.list_dead_letters(limit=0) == []


async def test_retry_dead_letters_moves_each_back_exactly_once(
    redis_queue: RedisStreamsQueue,
) -> None:
    dead_ids = await _dead_letters(redis_queue, [b"1", b"2", b"3"])

    new_ids = await redis_queue.retry_dead_letters([dead_ids[0], "9-9", "junk", dead_ids[2]])
    again = await redis_queue.retry_dead_letters([dead_ids[0]])

    assert len(new_ids) == 2
    assert again == []
    assert [letter.body for letter in await redis_queue.list_dead_letters()] == [b"2"]
    deliveries = await redis_queue.receive("b", max_messages=10, wait_seconds=0, lease_seconds=300)
    assert [d.body for d in deliveries] == [b"1", b"3"]
    assert [d.message_id for d in deliveries] == new_ids
    assert all(d.delivery_count == 1 for d in deliveries)


async def test_retry_all_dead_letters(redis_queue: RedisStreamsQueue) -> None:
    await _dead_letters(redis_queue, [b"%d" % i for i in range(7)])

    new_ids = await redis_queue.retry_dead_letters()

    assert len(new_ids) == 7
    assert (await redis_queue.stats()).dead == 0
    assert await redis_queue.len() == 7


async def test_concurrent_retries_neither_lose_nor_duplicate(
    redis_queue: RedisStreamsQueue,
) -> None:
    dead_ids = await _dead_letters(redis_queue, [b"%d" % i for i in range(20)])

    results = await asyncio.gather(
        *(redis_queue.retry_dead_letters(dead_ids) for _ in range(4)),
        redis_queue.retry_dead_letters(),
    )

    assert sum(len(r) for r in results) == 20
    bodies = [
        d.body
        for d in await redis_queue.receive("b", max_messages=100, wait_seconds=0, lease_seconds=300)
    ]
    assert sorted(bodies) == sorted(b"%d" % i for i in range(20))


async def test_purge_dead_letters_by_id_and_all(redis_queue: RedisStreamsQueue) -> None:
    dead_ids = await _dead_letters(redis_queue, [b"1", b"2", b"3"])

    assert await redis_queue.purge_dead_letters([dead_ids[1], "1-1", "junk"]) == 1
    assert await redis_queue.purge_dead_letters() == 2
    assert await redis_queue.purge_dead_letters() == 0
    assert (await redis_queue.stats()).dead == 0


async def test_purge_deletes_ready_and_in_flight_but_keeps_dead_letters(
    redis_queue: RedisStreamsQueue,
) -> None:
    await _dead_letters(redis_queue, [b"dead"])
    await redis_queue.add([b"1", b"2", b"3"])
    await receive_one(redis_queue, "a")

    assert await redis_queue.purge() == 3

    stats = await redis_queue.stats()
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 1)


async def test_remove_idle_consumers_never_deletes_one_with_pending_entries(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"1", b"2"])
    busy = await receive_one(redis_queue, "busy")
    done = await receive_one(redis_queue, "done")
    await redis_queue.ack([done])
    await redis_queue.receive(
        "idle", max_messages=1, wait_seconds=0, lease_seconds=300
    )  # an empty read
    await age_lease(redis_queue, busy, 600)

    removed = await redis_queue.remove_idle_consumers(0)

    assert "busy" not in removed
    assert "done" in removed
    names = [c.name for c in (await redis_queue.stats()).consumers]
    assert names == ["busy"]
    [taken] = await redis_queue.reclaim("other", lease_seconds=300, max_messages=1)
    assert taken.message_id == busy.message_id


async def test_remove_idle_consumers_respects_the_idle_threshold(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"1"])
    delivery = await receive_one(redis_queue, "recent")
    await redis_queue.ack([delivery])

    assert await redis_queue.remove_idle_consumers(3600) == []
    assert [c.name for c in (await redis_queue.stats()).consumers] == ["recent"]


async def _existing_keys(queue: RedisStreamsQueue) -> list[str]:
    found = []
    for key in queue.keys.every_key:
        if await queue._raw.call("exists", "EXISTS", key):
            found.append(key)
    return found


async def test_opening_and_reading_a_queue_creates_nothing(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.initialize()
    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight, stats.dead) == (0, 0, 0, 0)
    assert await redis_queue.len() == 0
    assert await redis_queue.list_dead_letters() == []
    assert await redis_queue.live_workers() == []
    assert await redis_queue.remove_idle_consumers(0) == []

    assert await _existing_keys(redis_queue) == []


async def test_stats_count_a_backlog_added_before_any_worker_read(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"a", b"b"])
    stats = await redis_queue.stats()

    assert (stats.ready, stats.in_flight) == (2, 0)
    assert await redis_queue.len() == 2
    assert (
        len(await redis_queue.receive("a", max_messages=5, wait_seconds=0, lease_seconds=60)) == 2
    )


async def test_delete_queue_removes_every_key_and_old_receipts_report_lost(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"a", b"b", b"c"])
    held = await redis_queue.receive("a", max_messages=3, wait_seconds=0, lease_seconds=60)
    assert await redis_queue.dead_letter(held[:1], reason="r") == []
    assert await redis_queue.release(held[1:2], delay_seconds=60) == []
    await redis_queue.publish_worker(
        WorkerInfo(instance="w", workers=1, busy=0, average_seconds=None, seen_at=0),
        ttl_seconds=60,
    )

    await redis_queue.delete_queue()
    await redis_queue.delete_queue()  # idempotent

    assert await _existing_keys(redis_queue) == []
    assert await redis_queue.ack(held[2:]) == held[2:]
    assert await redis_queue.len() == 0
    [new_id] = await redis_queue.add([b"after"])
    assert new_id not in {d.message_id for d in held}


async def test_remove_consumers_forgets_named_consumers_of_every_lease_but_spares_holders(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"held", b"done once", b"done twice"])
    [held] = await redis_queue.receive("busy", max_messages=1, wait_seconds=0, lease_seconds=60)
    for lease in (30, 60):
        done = await redis_queue.receive(
            "idle", max_messages=1, wait_seconds=0, lease_seconds=lease
        )
        assert await redis_queue.ack(done) == []

    removed = await redis_queue.remove_consumers(["idle", "busy", "unknown"])

    assert removed == ["idle"]
    names = {c.name for c in (await redis_queue.stats()).consumers}
    assert names == {"busy"}
    assert await redis_queue.ack([held]) == []
    assert await redis_queue.remove_consumers(["busy"]) == ["busy"]
    assert (await redis_queue.stats()).consumers == ()


def _id_order(message_id: str) -> tuple[int, int]:
    ms, _, seq = message_id.partition("-")
    return int(ms), int(seq)


async def test_ids_after_delete_queue_are_larger_than_every_id_before_it(
    redis_queue: RedisStreamsQueue,
) -> None:
    # The stream is created afresh after a delete, so without care an add in the same
    # millisecond of the server's clock as the last one before the delete gets that
    # message's id back (and an old receipt could fit the new message). A delete and
    # an add take well under a millisecond on loopback: 30 rounds hit it many times.
    [previous] = await redis_queue.add([b"first"])
    for _ in range(30):
        await redis_queue.delete_queue()
        [new] = await redis_queue.add([b"next"])

        assert _id_order(new) > _id_order(previous)
        previous = new


async def test_delete_queue_outlasts_ids_handed_out_ahead_of_the_servers_clock(
    redis_queue: RedisStreamsQueue,
) -> None:
    # Ids run ahead of the clock when it stepped back (a stream's ids only grow); here
    # the stream's last id is moved 300 ms ahead.
    await redis_queue.add([b"first"])
    seconds, micros = await redis_queue._raw.call("time", "TIME")
    ahead_ms = int(seconds) * 1000 + int(micros) // 1000 + 300
    await redis_queue._raw.call("setid", "XSETID", redis_queue.keys.stream, f"{ahead_ms}-7")
    [ahead] = await redis_queue.add([b"ahead"])
    assert _id_order(ahead) == (ahead_ms, 8)

    await redis_queue.delete_queue()
    [after] = await redis_queue.add([b"after"])

    assert _id_order(after) > _id_order(ahead)


@pytest.mark.parametrize(
    ("lag", "length", "pending", "ready"),
    [
        (1, 1, 1, 0),  # a cluster node's stale lag after XDELs: the one entry is pending
        (5, 3, 1, 2),  # a lag above what the stream holds
        (0, 2, 0, 0),  # the lag is the smaller bound
        (-1, 4, 1, 3),  # no lag (tombstones after the cursor): length minus pending
        (-1, 1, 2, 0),  # never negative
    ],
)
def test_ready_is_unread_entries_bounded_by_the_lag(
    lag: int, length: int, pending: int, ready: int
) -> None:
    from taskrunner_backends.redis.admin import _ready_count

    assert _ready_count(lag, length, pending) == ready
