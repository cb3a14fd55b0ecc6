"""Priorities on Redis: one stream per priority above 0, leased by priority with aging.

Aging is probed without waiting: a priority-0 entry is written with an explicit stream
id from the past (its age is what its id's time says against the server's TIME), so
"just before" and "just after" an aging edge are a margin either side of it.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from taskrunner.queue import AddRequest, Delivery
from taskrunner_backends.redis import RedisStreamsQueue, testing
from taskrunner_backends.redis.replies import _stream_entries
from tests.redis_fixtures import _QUEUES

from .helpers import open_queue

pytestmark = pytest.mark.redis

AGING = 10.0
# How far from an aging edge the probes sit (ms): far more than the few ms between
# writing the entry and the receive that ranks it, far less than the period.
MARGIN_MS = 300


@pytest.fixture
def queue(
    request: pytest.FixtureRequest, redis_url: str, redis_namespace: str
) -> RedisStreamsQueue:
    """A fresh queue ``q`` with an aging of `AGING` (closed after the test, as redis_queue)."""
    q = RedisStreamsQueue(
        aioredis.Redis.from_url(redis_url),
        queue_name="q",
        namespace=redis_namespace,
        owns_client=True,
        priority_aging_seconds=AGING,
    )
    request.node.stash.setdefault(_QUEUES, []).append(q)
    return q


async def _add(queue: RedisStreamsQueue, *priorities: int, **options: object) -> list[str]:
    requests = [
        AddRequest(body=f"m{i}-p{p}".encode(), priority=p, **options)  # type: ignore[arg-type]
        for i, p in enumerate(priorities)
    ]
    return [a.message_id for a in await queue.add_requests(requests)]


async def _take(queue: RedisStreamsQueue, n: int, consumer: str = "c") -> list[Delivery]:
    return await queue.receive(consumer, max_messages=n, wait_seconds=0, lease_seconds=60)


async def _server_ms(queue: RedisStreamsQueue) -> int:
    seconds, micros = await queue._raw.call("time", "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def _old_plain_entry(queue: RedisStreamsQueue, age_ms: int) -> str:
    """A priority-0 message whose stream id says it was added `age_ms` ago."""
    await queue.initialize()
    entry = f"{await _server_ms(queue) - age_ms}-0"
    await queue._raw.call("xadd", "XADD", queue.keys.stream, entry, "b", b"old")
    return entry


async def test_a_higher_priority_added_after_a_lower_one_is_received_first(
    queue: RedisStreamsQueue,
) -> None:
    (low,) = await _add(queue, 0)
    (high,) = await _add(queue, 7)
    (middle,) = await _add(queue, 3)
    got = [d for _ in range(3) for d in await _take(queue, 1)]
    assert [d.message_id for d in got] == [high, middle, low]
    assert [d.delivery_count for d in got] == [1, 1, 1]
    assert await queue.ack(got) == []
    assert await queue.len() == 0


async def test_one_batch_lists_levels_best_first_each_in_add_order(
    queue: RedisStreamsQueue,
) -> None:
    ids = await _add(queue, 0, 5, 9, 5, 0, 9, 1)
    batch = await _take(queue, 10)
    assert [ids.index(d.message_id) for d in batch] == [2, 5, 1, 3, 6, 0, 4]
    assert await queue.ack(batch) == []


async def test_a_plain_queue_writes_no_priority_key(
    queue: RedisStreamsQueue, redis_url: str, redis_namespace: str
) -> None:
    await _add(queue, 0, 0)
    assert await queue.ack(await _take(queue, 2)) == []
    keys = {k.decode() for k in await queue._raw.call("keys", "KEYS", f"{redis_namespace}:*")}
    assert not any(k.endswith(":levels") or ":stream:" in k for k in keys), keys
    assert queue._levels == ()


@pytest.mark.parametrize(
    ("age_ms", "old_first"),
    [
        # Six periods less a margin: priority 0 ranks 5, ties a fresh 5, which wins.
        (6 * round(AGING * 1000) - MARGIN_MS, False),
        # Six periods and a margin: it ranks 6 and goes first.
        (6 * round(AGING * 1000) + MARGIN_MS, True),
    ],
    ids=["just-before", "just-after"],
)
async def test_an_old_priority_zero_rises_one_level_per_aging_period(
    queue: RedisStreamsQueue, age_ms: int, old_first: bool
) -> None:
    old = await _old_plain_entry(queue, age_ms)
    (fresh,) = await _add(queue, 5)
    first, second = [d for _ in range(2) for d in await _take(queue, 1)]
    expected = [old, fresh] if old_first else [fresh, old]
    assert [first.message_id, second.message_id] == expected
    assert await queue.ack([first, second]) == []


async def test_aging_never_lifts_past_the_top_and_a_nine_is_not_outranked(
    queue: RedisStreamsQueue,
) -> None:
    # Ninety periods old: capped at 9, and a tie with 9 goes to the real 9.
    old = await _old_plain_entry(queue, 90 * round(AGING * 1000))
    (nine,) = await _add(queue, 9)
    got = [d for _ in range(2) for d in await _take(queue, 1)]
    assert [d.message_id for d in got] == [nine, old]
    assert await queue.ack(got) == []


async def test_strict_priorities_never_age(redis_url: str, redis_namespace: str) -> None:
    strict = RedisStreamsQueue(
        aioredis.Redis.from_url(redis_url),
        queue_name="strict",
        namespace=redis_namespace,
        owns_client=True,
        priority_aging_seconds=None,
    )
    try:
        assert strict.capabilities.priorities
        assert strict.capabilities.priority_aging_seconds is None
        old = await _old_plain_entry(strict, 3_600_000)
        (one,) = await _add(strict, 1)
        got = [d for _ in range(2) for d in await _take(strict, 1)]
        assert [d.message_id for d in got] == [one, old]
        assert await strict.ack(got) == []
    finally:
        await strict.aclose()


async def test_a_handle_that_learns_of_priorities_late_gives_back_its_plain_read(
    queue: RedisStreamsQueue, redis_url: str, redis_namespace: str
) -> None:
    # Another handle, opened and reading before any priority existed: its first read
    # after they appear takes priority 0 from the stream and must give it back.
    other = open_queue(redis_url, redis_namespace)
    try:
        assert await _take(other, 1) == []
        low, high = await _add(queue, 0, 9)
        (first,) = await _take(other, 1)
        assert first.message_id == high
        (second,) = await _take(other, 1)
        assert (second.message_id, second.delivery_count) == (low, 1)
        assert other._levels == (9,)
        assert await other.ack([first, second]) == []
        assert await other.len() == 0
    finally:
        await other.aclose()


async def test_an_abandoned_high_priority_message_is_reclaimed(queue: RedisStreamsQueue) -> None:
    (high,) = await _add(queue, 8)
    (lost,) = await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=5)
    assert lost.message_id == high
    assert await testing.age_lease(queue, lost, 6)
    (back,) = await queue.reclaim("b", lease_seconds=5, max_messages=10)
    assert (back.message_id, back.delivery_count) == (high, 2)
    # The old holder's receipt no longer holds the lease; the new one does.
    assert await queue.ack([lost]) == [lost]
    assert await queue.heartbeat([back]) == []
    assert await queue.ack([back]) == []
    assert await queue.reclaim("b", lease_seconds=5, max_messages=10) == []
    assert await queue.len() == 0


async def test_a_fresh_handle_reclaims_a_priority_it_never_saw(
    queue: RedisStreamsQueue, redis_url: str, redis_namespace: str
) -> None:
    (high,) = await _add(queue, 4)
    (lost,) = await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=5)
    assert await testing.age_lease(queue, lost, 6)
    other = open_queue(redis_url, redis_namespace)
    try:
        (back,) = await other.reclaim("b", lease_seconds=5, max_messages=10)
        assert back.message_id == high
        assert await other.ack([back]) == []
    finally:
        await other.aclose()


async def test_release_delay_dead_letter_and_retry_keep_the_priority(
    queue: RedisStreamsQueue,
) -> None:
    high, *_ = await _add(queue, 6, 2, 2)
    (first,) = await _take(queue, 1)
    assert first.message_id == high
    assert await queue.release([first]) == []
    (again,) = await _take(queue, 1)
    assert (again.message_id, again.delivery_count) == (high, 2)

    # A release with a delay, made due without waiting: it comes back on its level.
    assert await queue.release([again], delay_seconds=3600) == []
    parked = await queue._raw.call("zrange", "ZRANGE", queue.keys.delayed, 0, -1)
    await queue._raw.call("zadd", "ZADD", queue.keys.delayed, "XX", 0, *parked)
    (due,) = await _take(queue, 1)
    assert (due.message_id, due.delivery_count) == (high, 3)

    assert await queue.dead_letter([due], reason="test") == []
    (letter,) = await queue.list_dead_letters()
    (retried,) = await queue.retry_dead_letters([letter.message_id])
    (back,) = await _take(queue, 1)
    assert (back.message_id, back.delivery_count) == (retried, 1)
    rest = await _take(queue, 5)
    assert len(rest) == 2
    assert await queue.ack([back, *rest]) == []
    assert await queue.len() == 0


async def test_a_delayed_add_with_a_priority_lands_on_its_level(queue: RedisStreamsQueue) -> None:
    (late,) = await _add(queue, 7, delay_seconds=3600)
    await _add(queue, 1, 1)
    parked = await queue._raw.call("zrange", "ZRANGE", queue.keys.delayed, 0, -1)
    await queue._raw.call("zadd", "ZADD", queue.keys.delayed, "XX", 0, *parked)
    batch = await _take(queue, 5)
    assert batch[0].message_id == late
    assert len(batch) == 3
    assert await queue.ack(batch) == []


async def test_cancel_lookup_browse_and_stats_cover_every_level(
    queue: RedisStreamsQueue,
) -> None:
    low, mid, high = await _add(queue, 0, 3, 9)
    (later,) = await _add(queue, 4, delay_seconds=3600)
    stats = await queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (3, 1, 0)
    assert stats.oldest_ready_age_seconds is not None
    assert await queue.len() == 4
    states = await queue.lookup_messages([low, mid, high, later])
    assert [s.state if s else None for s in states] == ["ready", "ready", "ready", "delayed"]

    (running,) = await _take(queue, 1)
    assert running.message_id == high
    stats = await queue.stats()
    assert (stats.ready, stats.in_flight) == (2, 1)
    assert [(c.name, c.pending) for c in stats.consumers] == [("c", 1)]
    (state,) = await queue.lookup_messages([high])
    assert state is not None
    assert (state.state, state.consumer, state.delivery_count) == ("running", "c", 1)

    # Browse: priorities above 0 first, highest first, one page at a time.
    waiting = []
    after = None
    while page := await queue.browse_messages("waiting", after=after, limit=1):
        waiting.extend(page)
        after = page[-1].cursor
    assert [m.message_id for m in waiting] == [mid, low]
    (flying,) = await queue.browse_messages("in_flight")
    assert (flying.message_id, flying.consumer) == (high, "c")

    # Cancel: ready on any level yes, running no.
    assert await queue.cancel([mid, high, later]) == [True, False, True]
    assert await queue.lookup_messages([mid]) == [None]
    stats = await queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (1, 0, 1)
    # A consumer that holds a priority's message is not removed.
    assert await queue.remove_consumers(["c"]) == []
    assert await queue.ack([running]) == []
    assert await queue.remove_consumers(["c"]) == ["c"]
    assert await queue.purge() == 1
    assert await queue.len() == 0


async def test_purge_and_delete_clear_every_level(
    queue: RedisStreamsQueue, redis_namespace: str
) -> None:
    await _add(queue, 0, 2, 5)
    (held,) = await _take(queue, 1)
    assert await queue.purge() == 3
    assert await queue.len() == 0
    assert await queue.ack([held]) == [held]
    await _add(queue, 5)
    await queue.delete_queue()
    keys = await queue._raw.call("keys", "KEYS", f"{redis_namespace}:*")
    assert keys == []


@pytest.mark.parametrize("priority", [10, -1, 1.5, True, "5", None])
async def test_a_hostile_priority_is_refused_before_anything_is_added(
    queue: RedisStreamsQueue, redis_namespace: str, priority: object
) -> None:
    good = AddRequest(body=b"good", priority=9)
    bad = AddRequest(body=b"bad", priority=priority)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="priority"):
        await queue.add_requests([good, bad])
    assert await queue.len() == 0
    assert await queue._raw.call("keys", "KEYS", f"{redis_namespace}:*") == []
    assert queue._levels == ()


async def test_a_malformed_entry_on_a_priority_stream_is_dead_lettered_once(
    queue: RedisStreamsQueue,
) -> None:
    (good,) = await _add(queue, 3)
    stray = await queue._raw.call(
        "xadd", "XADD", queue.keys.level_stream(3), "*", "garbage", b"\xff"
    )
    (got,) = await _take(queue, 5)
    assert got.message_id == good
    (letter,) = await queue.list_dead_letters()
    assert letter.original_id == stray.decode()
    assert "no body field" in letter.reason
    assert await queue.ack([got]) == []
    assert await queue.reclaim("b", lease_seconds=0.001, max_messages=5) == []
    assert await queue.len() == 0


async def test_a_plain_read_is_given_back_only_while_nobody_read_past_it(
    queue: RedisStreamsQueue,
) -> None:
    first, second = (
        a.message_id
        for a in await queue.add_requests([AddRequest(body=b"1"), AddRequest(body=b"2")])
    )
    await queue._create_group()

    async def read(consumer: str) -> list[tuple[str, object]]:
        reply = await queue._raw.call(
            "read",
            *("XREADGROUP", "GROUP", queue.keys.group, consumer, "COUNT", 1),
            *("STREAMS", queue.keys.stream, ">"),
        )
        return _stream_entries(reply)[0]

    taken = await read("a~60000")
    assert [e for e, _ in taken] == [first]
    assert await queue._unread("a~60000", taken)
    # Unread again: the next read gets it first, as a first delivery.
    again = await read("b~60000")
    assert [e for e, _ in again] == [first]
    later = await read("c~60000")
    assert [e for e, _ in later] == [second]
    # Someone read past it: it stays leased (the caller keeps it).
    assert not await queue._unread("b~60000", again)
    assert (await queue.stats()).in_flight == 2
