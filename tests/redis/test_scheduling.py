"""Scheduling on a real server: unique keys, message ids, cancel, cleanup of every key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from taskrunner.errors import QueueClosedError
from taskrunner.queue import AddRequest, Delivery
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.client import RawClient
from taskrunner_backends.redis.keys import namespace_pattern
from taskrunner_backends.redis.testing import age_lease, entry_id
from tests.servers import RedisServer

from .helpers import DEADLINE_SECONDS, eventually, open_queue, receive_one
from .test_acl import documented_acl

pytestmark = pytest.mark.redis

P = 0.05  # the backend's lease_precision_seconds


async def holder_of(queue: RedisStreamsQueue, key: str) -> str | None:
    value = await queue._raw.call("get", "GET", queue.keys.unique(key))
    return None if value is None else bytes(value).decode()


async def namespace_keys(queue: RedisStreamsQueue) -> list[str]:
    """Every key of the namespace, found with SCAN (what the backend must never need)."""
    client = queue._client
    found = []
    async for key in client.scan_iter(match=namespace_pattern(queue.keys.namespace)):
        found.append(key.decode())
    return sorted(found)


async def test_the_capabilities_and_parts_are_claimed(redis_queue: RedisStreamsQueue) -> None:
    caps = redis_queue.capabilities
    assert (caps.delayed_add, caps.unique_add, caps.cancel, caps.leadership) == (
        True,
        True,
        True,
        True,
    )
    assert redis_queue.scheduling is redis_queue
    assert redis_queue.leadership is redis_queue


async def test_ids_of_delayed_and_plain_adds_never_collide(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue
) -> None:
    # Parked entries and stream entries are two id spaces; both start at the same
    # millisecond with sequence 0. Adds from two handles at once, interleaved.
    other = open_queue(redis_url, redis_namespace)
    try:

        async def plain() -> list[str]:
            ids = []
            for _ in range(20):
                ids += await other.add([b"p1", b"p2"])
            return ids

        async def mixed() -> list[str]:
            ids = []
            for _ in range(20):
                added = await redis_queue.add_requests(
                    [
                        AddRequest(body=b"d", delay_seconds=0.2),
                        AddRequest(body=b"r"),
                        AddRequest(body=b"d", delay_seconds=0.2),
                    ]
                )
                ids += [a.message_id for a in added]
            return ids

        plain_ids, mixed_ids = await asyncio.gather(plain(), mixed())
    finally:
        await other.aclose()

    every = plain_ids + mixed_ids
    assert len(set(every)) == len(every) == 100
    # Each id is delivered once, as the message it names.
    seen: list[str] = []
    while len(seen) < len(every):
        got = await redis_queue.receive("c", max_messages=100, wait_seconds=5, lease_seconds=60)
        assert got, f"only {len(seen)} of {len(every)} delivered"
        seen += [d.message_id for d in got]
        assert all(d.delivery_count == 1 for d in got)
        await redis_queue.ack(got)
    assert sorted(seen) == sorted(every)
    # A plain add after all that still gets a fresh id.
    [later] = await redis_queue.add([b"later"])
    assert later not in every


async def test_a_held_key_adds_nothing_and_returns_the_holder_in_every_state(
    redis_queue: RedisStreamsQueue,
) -> None:
    async def again() -> tuple[str, bool]:
        [a] = await redis_queue.add_requests([AddRequest(body=b"again", unique_key="k")])
        return a.message_id, a.added

    first, second = await redis_queue.add_requests(
        [AddRequest(body=b"x", unique_key="k"), AddRequest(body=b"y", unique_key="k")]
    )
    assert first.added
    assert (second.message_id, second.added) == (first.message_id, False)
    mid = first.message_id
    assert await again() == (mid, False)  # queued
    delivery = await receive_one(redis_queue, "a")
    assert await again() == (mid, False)  # in flight
    assert await redis_queue.release([delivery]) == []
    assert await again() == (mid, False)  # released, ready again
    delivery = await receive_one(redis_queue, "a")
    assert await redis_queue.release([delivery], delay_seconds=60) == []
    assert await again() == (mid, False)  # released with a delay
    assert await redis_queue.len() == 1
    assert await holder_of(redis_queue, "k") == mid


async def test_a_key_survives_reclaim_and_is_freed_by_the_final_ack(
    redis_queue: RedisStreamsQueue,
) -> None:
    [added] = await redis_queue.add_requests([AddRequest(body=b"x", unique_key="k")])
    held = await receive_one(redis_queue, "crashed")
    await age_lease(redis_queue, held, 600)
    [taken] = await redis_queue.reclaim("b", lease_seconds=300, max_messages=1)
    assert taken.message_id == added.message_id
    assert await holder_of(redis_queue, "k") == added.message_id
    # The stale receipt cannot free it either.
    assert await redis_queue.ack([held]) == [held]
    assert await holder_of(redis_queue, "k") == added.message_id

    assert await redis_queue.ack([taken]) == []

    assert await holder_of(redis_queue, "k") is None
    [fresh] = await redis_queue.add_requests([AddRequest(body=b"y", unique_key="k")])
    assert fresh.added
    assert fresh.message_id != added.message_id


async def test_ack_of_a_message_that_came_back_from_a_delayed_add_frees_its_key(
    redis_queue: RedisStreamsQueue,
) -> None:
    [added] = await redis_queue.add_requests(
        [AddRequest(body=b"x", unique_key="k", delay_seconds=0.1)]
    )
    delivery = await receive_one(redis_queue, "a")
    assert delivery.message_id == added.message_id
    assert await holder_of(redis_queue, "k") == added.message_id

    assert await redis_queue.ack([delivery]) == []

    assert await holder_of(redis_queue, "k") is None
    assert await redis_queue._raw.call("moved", "HLEN", redis_queue.keys.moved) == 0
    assert await redis_queue._raw.call("idx", "ZCARD", redis_queue.keys.uniques) == 0


async def test_dead_letter_frees_the_key(redis_queue: RedisStreamsQueue) -> None:
    [added] = await redis_queue.add_requests([AddRequest(body=b"x", unique_key="k")])
    delivery = await receive_one(redis_queue, "a")
    assert await redis_queue.release([delivery]) == []
    delivery = await receive_one(redis_queue, "a")

    assert await redis_queue.dead_letter([delivery], reason="no") == []

    assert await holder_of(redis_queue, "k") is None
    [letter] = await redis_queue.list_dead_letters()
    assert (letter.original_id, letter.body) == (added.message_id, b"x")


async def test_an_old_message_frees_no_key_another_message_took_after_it_expired(
    redis_queue: RedisStreamsQueue,
) -> None:
    [old] = await redis_queue.add_requests(
        [AddRequest(body=b"old", unique_key="k", unique_seconds=0.2)]
    )
    old_delivery = await receive_one(redis_queue, "a")

    async def take() -> bool:
        [a] = await redis_queue.add_requests([AddRequest(body=b"new", unique_key="k")])
        return a.added

    await eventually(take, bool, what="the expired key is taken")
    new_id = await holder_of(redis_queue, "k")
    assert new_id not in (None, old.message_id)

    assert await redis_queue.ack([old_delivery]) == []

    assert await holder_of(redis_queue, "k") == new_id


async def test_unique_seconds_holds_the_key_until_just_before_and_frees_it_right_after(
    redis_queue: RedisStreamsQueue,
) -> None:
    async def server_ms() -> int:
        seconds, micros = await redis_queue._raw.call("time", "TIME")
        return int(seconds) * 1000 + int(micros) // 1000

    # Every bound below is on the server's clock read around each call, so a loaded
    # machine that answers late can slow the test down but never fail it.
    start = await server_ms()
    [added] = await redis_queue.add_requests(
        [AddRequest(body=b"x", unique_key="k", unique_seconds=0.5)]
    )
    added_by = await server_ms()
    # The expiry is 500 ms after the add on the server's clock (PX), never earlier.
    pttl = await redis_queue._raw.call("pttl", "PTTL", redis_queue.keys.unique("k"))
    assert 500 - 2 * P * 1000 <= pttl <= 500

    held_at: list[int] = []
    deadline = asyncio.get_running_loop().time() + DEADLINE_SECONDS
    while True:
        before = await server_ms()
        [a] = await redis_queue.add_requests([AddRequest(body=b"y", unique_key="k")])
        after = await server_ms()
        if a.added:
            break
        held_at.append(before)
        assert asyncio.get_running_loop().time() < deadline, "the key was never freed"
        await asyncio.sleep(0.01)

    # Freed no earlier than 500 ms after the first add began...
    assert after - start >= 500 - P * 1000
    # ...and held by no attempt that began after 500 ms from the first add's end.
    late = [t - added_by for t in held_at if t - added_by > 500 + P * 1000]
    assert not late, f"the key was still held {late} ms after the add"
    assert added.added
    # The message itself is still queued: expiry frees the key, not the message.
    assert await redis_queue.len() == 2


async def test_unique_seconds_zero_holds_no_key(redis_queue: RedisStreamsQueue) -> None:
    added = await redis_queue.add_requests(
        [AddRequest(body=b"x", unique_key="k", unique_seconds=0)] * 2
    )
    assert [a.added for a in added] == [True, True]
    assert await holder_of(redis_queue, "k") is None


async def test_fifty_concurrent_dispatches_of_one_key_add_exactly_one_message(
    redis_url: str, redis_namespace: str
) -> None:
    handles = [open_queue(redis_url, redis_namespace) for _ in range(5)]
    try:
        await asyncio.gather(*(h.initialize() for h in handles))
        start = asyncio.Event()

        async def dispatch(n: int) -> tuple[str, bool]:
            await start.wait()
            request = AddRequest(body=b"%d" % n, unique_key="one", delay_seconds=(n % 2) * 0.1)
            [a] = await handles[n % 5].add_requests([request])
            return a.message_id, a.added

        tasks = [asyncio.create_task(dispatch(n)) for n in range(50)]
        await asyncio.sleep(0)
        start.set()
        results = await asyncio.gather(*tasks)

        assert sum(added for _, added in results) == 1
        assert len({mid for mid, _ in results}) == 1
        assert await handles[0].len() == 1
        [delivery] = await handles[0].receive(
            "c", max_messages=10, wait_seconds=5, lease_seconds=60
        )
        assert delivery.message_id == results[0][0]
    finally:
        for h in handles:
            await h.aclose()


async def test_cancel_removes_ready_delayed_and_released_messages_and_frees_their_keys(
    redis_queue: RedisStreamsQueue,
) -> None:
    [retried_id, requeued_id, _kept] = await redis_queue.add([b"retry", b"requeue", b"kept"])
    got = await redis_queue.receive("a", max_messages=3, wait_seconds=0, lease_seconds=60)
    ready, delayed = await redis_queue.add_requests(
        [
            AddRequest(body=b"ready", unique_key="r"),
            AddRequest(body=b"delayed", unique_key="d", delay_seconds=0.2),
        ]
    )
    by_id = {d.message_id: d for d in got}
    assert await redis_queue.release([by_id[retried_id]], delay_seconds=0.2) == []
    assert await redis_queue.release([by_id[requeued_id]]) == []

    ids = [ready.message_id, delayed.message_id, retried_id, requeued_id]
    assert await redis_queue.cancel(ids) == [True] * 4

    assert await holder_of(redis_queue, "r") is None
    assert await holder_of(redis_queue, "d") is None
    assert await redis_queue.cancel(ids) == [False] * 4  # already cancelled
    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 0, 1)
    assert await redis_queue.len() == 1
    # Never delivered, not after their due times either.
    await asyncio.sleep(0.3)  # past the due time, which is what this checks
    assert await redis_queue.receive("b", max_messages=10, wait_seconds=0.2, lease_seconds=60) == []
    for key in (redis_queue.keys.moved, redis_queue.keys.origins):
        assert await redis_queue._raw.call("len", "HLEN", key) == 0


async def test_cancel_refuses_in_flight_done_dead_and_unknown_messages(
    redis_queue: RedisStreamsQueue,
) -> None:
    [flying, acked, dead] = await redis_queue.add([b"f", b"a", b"d"])
    got = await redis_queue.receive("a", max_messages=3, wait_seconds=0, lease_seconds=60)
    by_id = {d.message_id: d for d in got}
    await redis_queue.ack([by_id[acked]])
    await redis_queue.dead_letter([by_id[dead]], reason="r")
    [released] = await redis_queue.add_requests([AddRequest(body=b"r", unique_key="k")])
    delivery = await receive_one(redis_queue, "a")
    await redis_queue.release([delivery])
    redelivered = await receive_one(redis_queue, "a")  # in flight again, a re-added entry

    flags = await redis_queue.cancel(
        [flying, acked, dead, released.message_id, "1-0", "99999999999999-0", "nonsense", ""]
    )

    assert flags == [False] * 8
    assert await holder_of(redis_queue, "k") == released.message_id
    assert await redis_queue.ack([by_id[flying], redelivered]) == []


async def test_cancel_by_the_entry_id_of_a_re_added_message_removes_nothing(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"x"])
    await redis_queue.release([await receive_one(redis_queue, "a")])
    [entry] = await redis_queue._raw.call("range", "XRANGE", redis_queue.keys.stream, "-", "+")
    current = entry[0].decode()
    assert current != message_id

    assert await redis_queue.cancel([current]) == [False]

    assert (await receive_one(redis_queue, "a")).message_id == message_id


@pytest.mark.parametrize("delayed", [False, True])
async def test_cancel_racing_receive_cancels_or_delivers_each_message_exactly_once(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue, delayed: bool
) -> None:
    # The receive takes from the front, the cancel from the back: they meet somewhere
    # in the middle, where both contend for the same messages.
    requests = [
        AddRequest(body=b"%d" % n, delay_seconds=0.05 if delayed else 0.0) for n in range(400)
    ]
    ids = [a.message_id for a in await redis_queue.add_requests(requests)]
    canceller = open_queue(redis_url, redis_namespace)
    delivered: list[Delivery] = []
    cancelled: list[str] = []
    # The cancels start once a receive has delivered: on a loaded machine they could
    # otherwise cancel all 400 before the delayed ones are due, and the race would
    # prove nothing. From there the two still meet in the middle.
    receiving = asyncio.Event()
    try:

        async def receive_all() -> None:
            while len(delivered) + len(cancelled) < len(ids):
                got = await redis_queue.receive(
                    "c", max_messages=3, wait_seconds=0.1, lease_seconds=60
                )
                delivered.extend(got)
                if got:
                    receiving.set()

        async def cancel_all() -> None:
            await canceller.initialize()
            await receiving.wait()
            for mid in reversed(ids):
                if len(delivered) + len(cancelled) >= len(ids):
                    return
                if await canceller.cancel([mid]) == [True]:
                    cancelled.append(mid)

        await asyncio.wait_for(asyncio.gather(receive_all(), cancel_all()), DEADLINE_SECONDS)
    finally:
        await canceller.aclose()

    got_ids = [d.message_id for d in delivered]
    assert len(got_ids) == len(set(got_ids))
    assert not set(got_ids) & set(cancelled)
    assert sorted(got_ids + cancelled) == sorted(ids)
    assert cancelled, "the race never cancelled anything: the test proved nothing"
    assert got_ids, "the race never delivered anything: the test proved nothing"
    assert await redis_queue.len() == len(got_ids)  # exactly the in-flight ones


async def test_purge_and_delete_queue_leave_no_key_behind(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add_requests(
        [
            AddRequest(body=b"a", unique_key="a"),
            AddRequest(body=b"b", unique_key="b", delay_seconds=60),
            AddRequest(body=b"c", unique_key="c", unique_seconds=60),
        ]
    )
    delivery = await receive_one(redis_queue, "x")
    await redis_queue.release([delivery], delay_seconds=30)
    lease = await redis_queue.acquire_leadership("e", "me", ttl_seconds=60)
    assert lease is not None
    await redis_queue.fire(election="e", token=lease.token, schedule="s", instant=1.0, body=b"f")

    assert await redis_queue.purge() == 4

    left = await namespace_keys(redis_queue)
    assert not [k for k in left if ":u:" in k]
    assert redis_queue.keys.moved not in left
    assert redis_queue.keys.uniques not in left
    assert (await redis_queue.add_requests([AddRequest(body=b"a", unique_key="a")]))[0].added
    # Leadership is not a message: purge keeps it.
    current = await redis_queue.current_leader("e")
    assert current is not None
    assert (current.holder, current.token) == ("me", lease.token)
    assert (await redis_queue.fire_records(["s"]))["s"].instant == 1.0

    await redis_queue.delete_queue()

    assert await namespace_keys(redis_queue) == []


async def test_a_crashed_reader_s_ring_is_cleared_by_remove_consumers(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.receive("r", max_messages=1, wait_seconds=0, lease_seconds=1)  # groups
    bell, group = redis_queue.keys.bell, redis_queue.keys.group
    await redis_queue._raw.call("ring", "XADD", bell, "*", "r", "1")
    # A reader that got the ring and died before acking it.
    await redis_queue._raw.call(
        "read", "XREADGROUP", "GROUP", group, "gone~1000", "STREAMS", bell, ">"
    )
    assert (await redis_queue._raw.call("p", "XPENDING", bell, group))[0] == 1
    # Rings are no messages.
    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight, await redis_queue.len()) == (0, 0, 0, 0)

    assert await redis_queue.remove_consumers(["gone"]) == []

    assert (await redis_queue._raw.call("p", "XPENDING", bell, group))[0] == 0
    assert await redis_queue._raw.call("len", "XLEN", bell) == 0


async def test_remove_idle_consumers_clears_the_rings_of_idle_readers_only(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.receive("r", max_messages=1, wait_seconds=0, lease_seconds=1)
    bell, group = redis_queue.keys.bell, redis_queue.keys.group

    async def ring_and_read(reader: str) -> None:
        await redis_queue._raw.call("ring", "XADD", bell, "*", "r", "1")
        await redis_queue._raw.call(
            "read", "XREADGROUP", "GROUP", group, reader, "STREAMS", bell, ">"
        )

    await ring_and_read("old~1000")
    await asyncio.sleep(0.4)  # the old reader ages; nothing concurrent is awaited
    await ring_and_read("fresh~1000")

    await redis_queue.remove_idle_consumers(0.3)

    left = await redis_queue._raw.call("p", "XPENDING", bell, group, "-", "+", 10)
    assert [entry[1] for entry in left] == [b"fresh~1000"]


async def test_a_vanished_doorbell_group_is_recreated_by_receive(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.receive("r", max_messages=1, wait_seconds=0, lease_seconds=1)
    await redis_queue._raw.call("del", "DEL", redis_queue.keys.bell)
    receiving = asyncio.create_task(
        redis_queue.receive("r", max_messages=1, wait_seconds=5, lease_seconds=60)
    )
    await asyncio.sleep(0.05)
    [added] = await redis_queue.add_requests([AddRequest(body=b"x", delay_seconds=0.1)])

    [delivery] = await asyncio.wait_for(receiving, DEADLINE_SECONDS)

    assert delivery.message_id == added.message_id


async def test_invalid_requests_raise_before_anything_is_added(
    redis_queue: RedisStreamsQueue,
) -> None:
    good = AddRequest(body=b"ok", unique_key="g")
    bad: list[tuple[object, type[Exception]]] = [
        (AddRequest(body="text"), TypeError),  # type: ignore[arg-type]
        (b"raw", TypeError),
        (AddRequest(body=b"x", delay_seconds=-1), ValueError),
        (AddRequest(body=b"x", delay_seconds=float("nan")), ValueError),
        (AddRequest(body=b"x", due_at=float("inf")), ValueError),
        (AddRequest(body=b"x", due_at="soon"), TypeError),  # type: ignore[arg-type]
        (AddRequest(body=b"x", unique_key=""), ValueError),
        (AddRequest(body=b"x", unique_key="\ud800"), ValueError),
        (AddRequest(body=b"x", unique_key="k", unique_seconds=-0.5), ValueError),
        (AddRequest(body=b"x", unique_key="k", unique_seconds=float("inf")), ValueError),
    ]
    for request, error in bad:
        with pytest.raises(error):
            await redis_queue.add_requests([good, request])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        await redis_queue.add_requests(good)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await redis_queue.cancel("1-0")

    assert await redis_queue.len() == 0
    assert await holder_of(redis_queue, "g") is None
    assert await redis_queue.add_requests([]) == []
    assert await redis_queue.cancel([]) == []


async def test_a_closed_queue_refuses_the_scheduling_methods(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.aclose()
    with pytest.raises(QueueClosedError):
        await redis_queue.add_requests([AddRequest(body=b"x")])
    with pytest.raises(QueueClosedError):
        await redis_queue.cancel(["1-0"])
    with pytest.raises(QueueClosedError):
        await redis_queue.add_requests([])


async def test_a_delayed_add_counts_as_delayed_then_ready(redis_queue: RedisStreamsQueue) -> None:
    [added] = await redis_queue.add_requests([AddRequest(body=b"x", delay_seconds=0.2)])
    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed, await redis_queue.len()) == (0, 1, 1)

    async def counts() -> tuple[int, int]:
        s = await redis_queue.stats()
        return s.ready, s.delayed

    assert await eventually(counts, lambda c: c == (1, 0), what="due") == (1, 0)
    assert await redis_queue.len() == 1
    delivery = await receive_one(redis_queue, "a")
    assert (delivery.message_id, delivery.delivery_count) == (added.message_id, 1)
    assert entry_id(delivery) != delivery.message_id


# Commands only the scheduling and leadership scripts use (reserving ids, unique keys,
# cancel); docs/redis.md must list them in its ACL paragraph.
SCHEDULING_ACL_EXTRA = ("XSETID", "GET", "SET", "ZREMRANGEBYSCORE", "ZSCORE")


async def test_scheduling_and_leadership_work_with_the_documented_acl_plus_their_commands(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    commands, pattern = documented_acl()
    admin = RawClient(aioredis.Redis.from_url(server.url))
    try:
        assert set(SCHEDULING_ACL_EXTRA) <= set(commands), "docs/redis.md misses some"
        wanted = commands
        known = await admin.call("command info", "COMMAND", "INFO", *wanted)
        allowed = [f"+{c.lower()}" for c, info in zip(wanted, known, strict=True) if info]
        rules = ["on", ">pw", "resetkeys", pattern.replace("namespace", "aclns"), "-@all"]
        await admin.call("acl", "ACL", "SETUSER", "worker", *rules, *allowed)
    finally:
        await admin.client.aclose()
    url = f"redis://worker:pw@127.0.0.1:{server.port}/0"
    queue = RedisStreamsQueue(
        aioredis.Redis.from_url(url), queue_name="q", namespace="aclns", owns_client=True
    )
    try:
        added = await queue.add_requests(
            [
                AddRequest(body=b"u", unique_key="k", unique_seconds=60),
                AddRequest(body=b"d", delay_seconds=0.15, unique_key="d"),
                AddRequest(body=b"c", delay_seconds=60),
            ]
        )
        assert await queue.cancel([added[2].message_id]) == [True]
        got: list[Delivery] = []
        while len(got) < 2:
            got += await queue.receive("w", max_messages=5, wait_seconds=5, lease_seconds=60)
        assert await queue.release(got[:1], delay_seconds=0.05) == []
        assert await queue.ack(got[1:]) == []
        [again] = await queue.receive("w", max_messages=5, wait_seconds=5, lease_seconds=60)
        assert await queue.dead_letter([again], reason="r") == []
        lease = await queue.acquire_leadership("e", "h", ttl_seconds=30)
        assert lease is not None
        assert await queue.renew_leadership("e", "h", lease.token, ttl_seconds=30)
        assert await queue.fire(election="e", token=lease.token, schedule="s", instant=1, body=b"f")
        assert "s" in await queue.fire_records(["s"])
        assert await queue.current_leader("e") is not None
        assert await queue.resign_leadership("e", "h", lease.token)
        assert await queue.purge() == 1
        await queue.remove_consumers(["w"])
        await queue.delete_queue()
    finally:
        await queue.aclose()
