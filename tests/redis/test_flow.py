"""Flow control on a real server: slots, round-robin, GCRA rates, waiting, waking."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
import redis.asyncio as aioredis

from taskrunner.queue import AddRequest, Delivery, Flow, FlowWait
from taskrunner_backends.redis import RedisStreamsQueue, receiving
from taskrunner_backends.redis.client import RawClient
from taskrunner_backends.redis.keys import namespace_pattern
from taskrunner_backends.redis.testing import age_lease
from tests.servers import RedisServer

from .helpers import DEADLINE_SECONDS, open_queue
from .test_acl import documented_acl

pytestmark = pytest.mark.redis

P = 0.05  # the backend's lease_precision_seconds


def flowed(key: str, bodies: Sequence[bytes], **limits: object) -> list[AddRequest]:
    return [AddRequest(body=b, flow=Flow(key=key, **limits)) for b in bodies]  # type: ignore[arg-type]


async def take(queue: RedisStreamsQueue, n: int = 100, *, wait: float = 0) -> list[Delivery]:
    return await queue.receive("w", max_messages=n, wait_seconds=wait, lease_seconds=60)


async def server_ms(queue: RedisStreamsQueue) -> float:
    seconds, micros = await queue._raw.call("time", "TIME")
    return int(seconds) * 1000 + int(micros) / 1000


async def flow_keys(queue: RedisStreamsQueue) -> list[str]:
    found = []
    async for key in queue._client.scan_iter(match=namespace_pattern(queue.keys.namespace)):
        if key.decode().startswith(queue.keys.flow_prefix):
            found.append(key.decode())
    return sorted(found)


async def test_flow_control_is_claimed(redis_queue: RedisStreamsQueue) -> None:
    assert redis_queue.capabilities.flow_control


async def test_concurrency_admits_exactly_n_then_one_per_freed_slot(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add_requests(flowed("a", [b"1", b"2", b"3", b"4"], concurrency=2))
    first = await take(redis_queue)
    assert [d.body for d in first] == [b"1", b"2"]
    assert [d.delivery_count for d in first] == [1, 1]
    assert await take(redis_queue) == []
    # Waiting messages are ready to callers; in flight are the admitted ones.
    stats = await redis_queue.stats()
    assert (stats.ready, stats.in_flight, stats.delayed) == (2, 2, 0)
    assert await redis_queue.len() == 4
    assert stats.oldest_ready_age_seconds is not None

    assert await redis_queue.ack(first[:1]) == []
    again = await take(redis_queue)
    assert [d.body for d in again] == [b"3"]
    assert again[0].delivery_count == 1
    assert await take(redis_queue) == []
    # Acking twice frees one slot, not two.
    assert await redis_queue.ack(first[:1]) == [first[0]]
    assert await take(redis_queue) == []
    assert await redis_queue.ack(again) == []
    assert [d.body for d in await take(redis_queue)] == [b"4"]


async def test_ready_messages_without_a_flow_go_first(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add_requests(flowed("a", [b"f1", b"f2"]))
    await redis_queue.add([b"p1", b"p2"])
    got = await take(redis_queue, 3)
    assert [d.body for d in got] == [b"p1", b"p2", b"f1"]
    assert [d.body for d in await take(redis_queue, 3)] == [b"f2"]


async def test_round_robin_in_one_receive(redis_queue: RedisStreamsQueue) -> None:
    requests = (
        flowed("A", [b"A1", b"A2", b"A3", b"A4", b"A5"])
        + flowed("B", [b"B1", b"B2"])
        + flowed("C", [b"C1"])
    )
    await redis_queue.add_requests(requests)
    got = await take(redis_queue, 8)
    assert [d.body for d in got] == [b"A1", b"B1", b"C1", b"A2", b"B2", b"A3", b"A4", b"A5"]


async def test_the_key_served_least_recently_goes_first(redis_queue: RedisStreamsQueue) -> None:
    # A is served, then B; new messages of B then A: A's last admission is older.
    await redis_queue.add_requests(flowed("A", [b"A1"]) + flowed("B", [b"B1"]))
    assert [d.body for d in await take(redis_queue)] == [b"A1", b"B1"]
    await redis_queue.add_requests(flowed("B", [b"B2"]) + flowed("A", [b"A2"]))
    assert [d.body for d in await take(redis_queue)] == [b"A2", b"B2"]


async def test_release_frees_the_slot_and_waits_at_the_back(
    redis_queue: RedisStreamsQueue,
) -> None:
    added = await redis_queue.add_requests(flowed("a", [b"1", b"2", b"3"], concurrency=1))
    [one] = await take(redis_queue)
    assert one.message_id == added[0].message_id
    assert await redis_queue.release([one]) == []
    [two] = await take(redis_queue)
    assert two.body == b"2"
    assert await take(redis_queue) == []
    assert await redis_queue.ack([two]) == []
    [three] = await take(redis_queue)
    assert three.body == b"3"
    assert await redis_queue.ack([three]) == []
    [back] = await take(redis_queue)
    assert (back.message_id, back.body, back.delivery_count) == (added[0].message_id, b"1", 2)


async def test_release_with_a_delay_waits_from_its_due_time(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add_requests(flowed("a", [b"1", b"2"], concurrency=1))
    [one] = await take(redis_queue)
    assert await redis_queue.release([one], delay_seconds=0.3) == []
    released_at = await server_ms(redis_queue)
    [two] = await take(redis_queue)
    assert two.body == b"2"
    state = (await redis_queue.lookup_messages([one.message_id]))[0]
    assert state is not None
    assert state.state == "delayed"
    assert await redis_queue.ack([two]) == []
    [back] = await take(redis_queue, wait=DEADLINE_SECONDS)
    assert back.body == b"1"
    assert back.delivery_count == 2
    assert await server_ms(redis_queue) - released_at >= 300 - P * 1000


async def test_dead_letter_frees_the_slot(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add_requests(flowed("a", [b"1", b"2"], concurrency=1))
    [one] = await take(redis_queue)
    assert await take(redis_queue) == []
    assert await redis_queue.dead_letter([one], reason="bad") == []
    assert [d.body for d in await take(redis_queue)] == [b"2"]
    [letter] = await redis_queue.list_dead_letters()
    assert (letter.original_id, letter.body) == (one.message_id, b"1")


async def test_cancel_removes_a_waiting_message_and_frees_nothing(
    redis_queue: RedisStreamsQueue,
) -> None:
    added = await redis_queue.add_requests(flowed("a", [b"1", b"2", b"3"], concurrency=1))
    ids = [a.message_id for a in added]
    [one] = await take(redis_queue)
    [state] = await redis_queue.lookup_messages([ids[1]])
    assert state is not None
    assert state.state == "ready"
    # In flight: not cancellable; waiting: cancelled, never delivered.
    assert await redis_queue.cancel([ids[0], ids[1], ids[1]]) == [False, True, False]
    assert await redis_queue.len() == 2
    assert await take(redis_queue) == []  # the slot is still one's
    assert await redis_queue.ack([one]) == []
    got = await take(redis_queue)
    assert [d.body for d in got] == [b"3"]
    assert await redis_queue.lookup_messages([ids[1]]) == [None]


async def test_cancel_of_the_last_waiting_message_of_a_blocked_key(
    redis_queue: RedisStreamsQueue,
) -> None:
    added = await redis_queue.add_requests(flowed("a", [b"1", b"2"], concurrency=1))
    [one] = await take(redis_queue)
    assert await take(redis_queue) == []  # a is now blocked on its slot
    assert await redis_queue.cancel([added[1].message_id]) == [True]
    assert await redis_queue.ack([one]) == []
    assert await take(redis_queue) == []
    assert await redis_queue.len() == 0
    await redis_queue.add_requests(flowed("a", [b"3"], concurrency=1))
    assert [d.body for d in await take(redis_queue)] == [b"3"]


async def test_purge_clears_every_flow_key(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add_requests(flowed("a", [b"1", b"2", b"3"], concurrency=1))
    await redis_queue.add_requests(flowed("r", [b"x", b"y"], rate=0.001))
    got = await take(redis_queue)
    assert sorted(d.body for d in got) == [b"1", b"x"]
    assert await redis_queue.purge() == 5
    assert await flow_keys(redis_queue) == []
    assert await redis_queue.len() == 0
    # The slot and the rate were cleared with the messages.
    await redis_queue.add_requests(flowed("a", [b"4"], concurrency=1))
    await redis_queue.add_requests(flowed("r", [b"z"], rate=0.001))
    assert sorted(d.body for d in await take(redis_queue)) == [b"4", b"z"]
    assert await redis_queue.ack(got) == got  # purged receipts are lost
    await redis_queue.delete_queue()
    assert await flow_keys(redis_queue) == []


async def test_a_lapsed_lease_keeps_its_slot_through_reclaim(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add_requests(flowed("a", [b"1", b"2"], concurrency=1))
    [one] = await take(redis_queue)
    assert await age_lease(redis_queue, one, 120)
    assert await take(redis_queue) == []
    [again] = await redis_queue.reclaim("thief", lease_seconds=60, max_messages=10)
    assert (again.message_id, again.delivery_count) == (one.message_id, 2)
    assert await take(redis_queue) == []  # reclaim admitted nothing
    assert await redis_queue.ack([one]) == [one]  # the old receipt is stale
    assert await take(redis_queue) == []
    assert await redis_queue.ack([again]) == []
    assert [d.body for d in await take(redis_queue)] == [b"2"]


async def test_rate_admits_a_burst_then_one_per_interval(
    redis_queue: RedisStreamsQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A blocked receive must wake on the rate key's own time, not on a periodic recheck.
    monkeypatch.setattr(receiving, "DELAYED_RECHECK_SECONDS", 30.0)
    await redis_queue.add_requests(flowed("a", [b"1", b"2", b"3", b"4"], rate=4.0, burst=2))
    before = await server_ms(redis_queue)
    burst = await take(redis_queue)
    after = await server_ms(redis_queue)
    assert [d.body for d in burst] == [b"1", b"2"]
    assert await take(redis_queue) == []
    # GCRA at 4/s, burst 2: admission k (from 0) is allowed at first + (k - 1) * 250 ms.
    times = []
    for body in (b"3", b"4"):
        [d] = await take(redis_queue, 1, wait=DEADLINE_SECONDS)
        times.append(await server_ms(redis_queue))
        assert d.body == body
    assert times[0] - before >= 250 - 1
    assert times[1] - before >= 500 - 1
    # Woken at the rate's time, not DELAYED_RECHECK_SECONDS later (generous bounds).
    assert times[0] - after < 250 + 2000
    assert times[1] - times[0] < 250 + 2000


async def test_rate_key_counts_across_flow_keys(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add_requests(
        flowed("a", [b"a1", b"a2"], rate=0.01, rate_key="shared")
        + flowed("b", [b"b1"], rate=0.01, rate_key="shared")
        + flowed("c", [b"c1"], rate=0.01)
    )
    got = await take(redis_queue)
    assert sorted(d.body for d in got) == [b"a1", b"c1"]
    assert await redis_queue.len() == 4


async def test_a_delayed_message_with_a_flow_waits_from_its_due_time(
    redis_queue: RedisStreamsQueue,
) -> None:
    [added] = await redis_queue.add_requests(
        [AddRequest(body=b"d", delay_seconds=0.3, flow=Flow(key="a", concurrency=1))]
    )
    [state] = await redis_queue.lookup_messages([added.message_id])
    assert state is not None
    assert state.state == "delayed"
    assert await take(redis_queue) == []
    [d] = await take(redis_queue, wait=DEADLINE_SECONDS)
    assert (d.message_id, d.delivery_count) == (added.message_id, 1)


async def test_unique_keys_and_flows_are_freed_together(redis_queue: RedisStreamsQueue) -> None:
    requests = [
        AddRequest(body=b"1", unique_key="u", flow=Flow(key="a", concurrency=1)),
        AddRequest(body=b"2", unique_key="u", flow=Flow(key="a", concurrency=1)),
        AddRequest(body=b"3", flow=Flow(key="a", concurrency=1)),
    ]
    added = await redis_queue.add_requests(requests)
    assert [a.added for a in added] == [True, False, True]
    [one] = await take(redis_queue)
    assert await redis_queue.ack([one]) == []
    [again] = await redis_queue.add_requests(requests[:1])
    assert again.added
    assert [d.body for d in await take(redis_queue)] == [b"3"]


async def test_concurrent_receivers_never_exceed_the_limit(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue
) -> None:
    limit, total = 3, 30
    await redis_queue.add_requests(
        flowed("a", [b"%d" % i for i in range(total)], concurrency=limit)
    )
    handles = [open_queue(redis_url, redis_namespace) for _ in range(4)]
    try:
        done: list[bytes] = []
        for _ in range(total):
            batches = await asyncio.gather(*(take(handles[i % len(handles)], 2) for i in range(12)))
            held = [d for batch in batches for d in batch]
            assert len(held) <= limit
            if not held:
                break
            assert await handles[0].ack(held) == []
            done += [d.body for d in held]
        assert sorted(done) == sorted(b"%d" % i for i in range(total))
        # Exactly `limit` at a time when none is acked in between.
        await redis_queue.add_requests(flowed("a", [b"x"] * 5, concurrency=limit))
        batches = await asyncio.gather(*(take(h, 5) for h in handles))
        assert sum(len(b) for b in batches) == limit
    finally:
        for h in handles:
            await h.aclose()


async def test_a_blocked_receive_wakes_when_a_slot_is_freed(
    redis_url: str,
    redis_namespace: str,
    redis_queue: RedisStreamsQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(receiving, "DELAYED_RECHECK_SECONDS", 30.0)
    await redis_queue.add_requests(flowed("a", [b"1", b"2"], concurrency=1))
    [one] = await take(redis_queue)
    other = open_queue(redis_url, redis_namespace)
    try:
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(take(other, 5, wait=DEADLINE_SECONDS))
        deadline = loop.time() + DEADLINE_SECONDS
        while not other._blocking:  # bounded: until the receive is in its blocking read
            assert loop.time() < deadline
            assert not waiting.done()
            await asyncio.sleep(0.005)
        acked_at = loop.time()
        assert await redis_queue.ack([one]) == []
        got = await waiting
        assert [d.body for d in got] == [b"2"]
        # The doorbell woke it, not its (30 s) recheck nor its 20 s wait.
        assert loop.time() - acked_at < 5
    finally:
        await other.aclose()


async def test_a_blocked_receive_wakes_for_a_new_waiting_message(
    redis_url: str,
    redis_namespace: str,
    redis_queue: RedisStreamsQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(receiving, "DELAYED_RECHECK_SECONDS", 30.0)
    other = open_queue(redis_url, redis_namespace)
    try:
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(take(other, 5, wait=DEADLINE_SECONDS))
        deadline = loop.time() + DEADLINE_SECONDS
        while not other._blocking:
            assert loop.time() < deadline
            assert not waiting.done()
            await asyncio.sleep(0.005)
        added_at = loop.time()
        await redis_queue.add_requests(flowed("a", [b"1"], concurrency=1))
        got = await waiting
        assert [d.body for d in got] == [b"1"]
        assert loop.time() - added_at < 5
    finally:
        await other.aclose()


async def test_plain_receive_runs_no_admission(redis_queue: RedisStreamsQueue) -> None:
    from .helpers import count_round_trips

    assert await take(redis_queue) == []  # creates the group
    await redis_queue.add([b"p"])
    trips = count_round_trips(redis_queue)
    [d] = await take(redis_queue)
    assert d.body == b"p"
    assert trips["receive"] == 1
    assert await flow_keys(redis_queue) == []


async def test_browse_lists_waiting_messages_after_the_streams_once_each(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add([b"p1", b"p2"])
    added = await redis_queue.add_requests(flowed("a", [b"1", b"2", b"3"], concurrency=1))
    await redis_queue.add([b"p3"])
    listed = []
    after = None
    for _ in range(10):
        page = await redis_queue.browse_messages("waiting", after=after, limit=2)
        listed += page
        if len(page) < 2:
            break
        after = page[-1].cursor
    assert [m.body for m in listed] == [b"p1", b"p2", b"p3", b"1", b"2", b"3"]
    assert [m.message_id for m in listed[3:]] == [a.message_id for a in added]
    assert all(m.delivery_count == 0 and m.consumer is None for m in listed)
    # Browsing changed nothing: the plain ones first, then one admission.
    got = await take(redis_queue)
    assert [d.body for d in got] == [b"p1", b"p2", b"p3", b"1"]
    flow_page = await redis_queue.browse_messages("waiting")
    assert [m.body for m in flow_page] == [b"2", b"3"]
    running = await redis_queue.browse_messages("in_flight")
    assert [m.body for m in running] == [b"p1", b"p2", b"p3", b"1"]
    assert running[-1].message_id == added[0].message_id
    with pytest.raises(ValueError, match="flow cursor"):
        await redis_queue.browse_messages("waiting", after="wx")


async def test_one_admission_call_judges_a_bounded_number_of_blocked_keys(
    redis_queue: RedisStreamsQueue,
) -> None:
    keys = 1100
    requests = [
        AddRequest(body=b"%d" % i, flow=Flow(key=f"k{i}", concurrency=1))
        for i in range(keys)
        for _ in range(2)
    ]
    await redis_queue.add_requests(requests)
    first = await take(redis_queue, keys)
    assert len(first) == keys  # one per key; every key still waits with its second
    ring = redis_queue.keys.flow_prefix + "ring"
    assert await redis_queue._raw.call("zcard", "ZCARD", ring) == keys
    # Every key is blocked on its slot: one call moves at most 10 + 1000 out of the ring.
    assert await take(redis_queue, 10) == []
    assert await redis_queue._raw.call("zcard", "ZCARD", ring) == keys - 1010
    assert await take(redis_queue, 10) == []
    assert await redis_queue._raw.call("zcard", "ZCARD", ring) == 0
    assert await redis_queue.ack(first[-1:]) == []
    [second] = await take(redis_queue, 10)
    assert second.body == first[-1].body


async def test_flow_control_works_with_the_documented_acl(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    commands, pattern = documented_acl()
    admin = RawClient(aioredis.Redis.from_url(server.url))
    try:
        known = await admin.call("command info", "COMMAND", "INFO", *commands)
        allowed = [f"+{c.lower()}" for c, info in zip(commands, known, strict=True) if info]
        rules = ["on", ">pw", "resetkeys", pattern.replace("namespace", "aclns"), "-@all"]
        await admin.call("acl", "ACL", "SETUSER", "worker", *rules, *allowed)
    finally:
        await admin.client.aclose()
    url = f"redis://worker:pw@127.0.0.1:{server.port}/0"
    queue = RedisStreamsQueue(
        aioredis.Redis.from_url(url), queue_name="q", namespace="aclns", owns_client=True
    )
    try:
        limits = {"concurrency": 1, "rate": 1000.0, "burst": 5}
        added = await queue.add_requests(
            [
                *flowed("a", [b"1", b"2", b"3"], **limits),
                AddRequest(body=b"d", delay_seconds=0.05, flow=Flow(key="b")),
            ]
        )
        assert (await queue.stats()).ready == 3
        assert await queue.len() == 4
        assert len(await queue.browse_messages("waiting")) == 3
        assert (await queue.lookup_messages([added[1].message_id]))[0] is not None
        assert await queue.cancel([added[2].message_id]) == [True]
        got: list[Delivery] = []
        while len(got) < 2:
            got += await queue.receive("w", max_messages=5, wait_seconds=5, lease_seconds=60)
        assert sorted(d.body for d in got) == [b"1", b"d"]
        assert await queue.release(got[:1]) == []
        assert await queue.ack(got[1:]) == []
        [again] = await queue.receive("w", max_messages=5, wait_seconds=5, lease_seconds=60)
        assert await queue.dead_letter([again], reason="r") == []
        [letter] = await queue.list_dead_letters()
        assert len(await queue.retry_dead_letters([letter.message_id])) == 1
        assert await age_lease(queue, (await take(queue))[0], 120)
        assert len(await queue.reclaim("t", lease_seconds=60, max_messages=5)) == 1
        assert await queue.purge() == 2
        await queue.delete_queue()
    finally:
        await queue.aclose()


async def test_blocked_receives_hand_admissible_keys_on_to_each_other(
    redis_url: str,
    redis_namespace: str,
    redis_queue: RedisStreamsQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(receiving, "DELAYED_RECHECK_SECONDS", 30.0)
    handles = [open_queue(redis_url, redis_namespace) for _ in range(3)]
    try:
        loop = asyncio.get_running_loop()
        waiting = [asyncio.ensure_future(take(h, 1, wait=DEADLINE_SECONDS)) for h in handles]
        deadline = loop.time() + DEADLINE_SECONDS
        while not all(h._blocking for h in handles):
            assert loop.time() < deadline
            await asyncio.sleep(0.005)
        added_at = loop.time()
        # One add rings the doorbell once; each receive it wakes takes one and hands on.
        await redis_queue.add_requests(flowed("a", [b"1", b"2", b"3"]))
        got = await asyncio.gather(*waiting)
        assert sorted(d.body for batch in got for d in batch) == [b"1", b"2", b"3"]
        assert loop.time() - added_at < 5
    finally:
        for h in handles:
            await h.aclose()


async def test_lookup_says_why_a_message_waits(redis_queue: RedisStreamsQueue) -> None:
    added = await redis_queue.add_requests(
        flowed("a", [b"1", b"2"], concurrency=1)
        + flowed("r", [b"x", b"y"], rate=0.5, rate_key="shared")
        + flowed("t", [b"t"])
    )
    ids = [a.message_id for a in added]
    [before] = await redis_queue.lookup_messages([ids[4]])
    assert before is not None
    assert before.waiting == FlowWait(key="t", reason="turn")
    got = await take(redis_queue, 2)
    assert [d.body for d in got] == [b"1", b"x"]
    after = await server_ms(redis_queue)
    states = await redis_queue.lookup_messages(ids)
    assert [s.state if s else None for s in states] == [
        "running",
        "ready",
        "running",
        "ready",
        "ready",
    ]
    assert states[0] is not None
    assert states[0].waiting is None
    assert states[1] is not None
    assert states[1].waiting == FlowWait(key="a", reason="slot", holders=(ids[0],))
    assert states[3] is not None
    wait = states[3].waiting
    assert wait is not None
    assert (wait.key, wait.reason, wait.rate_key, wait.holders) == ("r", "rate", "shared", ())
    # The next admission is 2 s after the first, on the server's (wall) clock.
    assert wait.until is not None
    assert after / 1000 + 2 - 1 < wait.until <= after / 1000 + 2
    assert states[4] is not None
    assert states[4].waiting == FlowWait(key="t", reason="turn")
    assert await redis_queue.ack(got[:1]) == []
    [freed] = await redis_queue.lookup_messages([ids[1]])
    assert freed is not None
    assert freed.waiting == FlowWait(key="a", reason="turn")
