"""The in-memory backend's Scheduling part, on the fake clock, edge by edge."""

from __future__ import annotations

import asyncio
import math

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import Added, AddRequest, Delivery, scheduling_of
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

LEASE = 30.0


def make() -> tuple[InMemoryQueue, FakeClock]:
    clock = FakeClock()
    return InMemoryQueue(clock=clock), clock


async def take(queue: InMemoryQueue, consumer: str = "c") -> list[Delivery]:
    return await queue.receive(consumer, max_messages=10, wait_seconds=0, lease_seconds=LEASE)


async def bodies(queue: InMemoryQueue) -> list[bytes]:
    return [d.body for d in await take(queue)]


def test_capabilities_and_part() -> None:
    queue = InMemoryQueue()
    caps = queue.capabilities
    assert (caps.delayed_add, caps.unique_add, caps.cancel, caps.leadership) == (
        True,
        True,
        True,
        True,
    )
    assert scheduling_of(queue) is queue


# -- delayed adds -------------------------------------------------------------------


async def test_delay_not_delivered_just_before_due_and_delivered_at_due() -> None:
    queue, clock = make()
    [added] = await queue.add_requests([AddRequest(body=b"d", delay_seconds=5.0)])
    assert added.added
    await clock.advance(5.0 - 1e-6)
    assert await take(queue) == []
    await clock.advance(1e-6)
    [delivery] = await take(queue)
    assert (delivery.message_id, delivery.body, delivery.delivery_count) == (
        added.message_id,
        b"d",
        1,
    )


async def test_due_at_just_before_and_after() -> None:
    queue, clock = make()
    due = clock.time() + 7.0
    await queue.add_requests([AddRequest(body=b"a", due_at=due)])
    await clock.advance(7.0 - 1e-6)
    assert await take(queue) == []
    await clock.advance(1e-6)
    assert await bodies(queue) == [b"a"]


async def test_due_at_replaces_delay_seconds() -> None:
    queue, clock = make()
    await queue.add_requests([AddRequest(body=b"a", delay_seconds=100.0, due_at=clock.time() + 1)])
    await clock.advance(1.0)
    assert await bodies(queue) == [b"a"]


@pytest.mark.parametrize("due_offset", [0.0, -5.0, -1e9])
async def test_due_at_now_or_past_is_ready_at_once(due_offset: float) -> None:
    queue, clock = make()
    await queue.add_requests([AddRequest(body=b"p", due_at=clock.time() + due_offset)])
    assert queue.ready_bodies() == [b"p"]
    assert await bodies(queue) == [b"p"]


async def test_delay_zero_is_ready_at_once_in_fifo_order_with_add() -> None:
    queue, _ = make()
    first = await queue.add([b"1"])
    [second] = await queue.add_requests([AddRequest(body=b"2", delay_seconds=0)])
    third = await queue.add([b"3"])
    assert int(first[0]) < int(second.message_id) < int(third[0])
    assert await bodies(queue) == [b"1", b"2", b"3"]


async def test_delayed_counts_as_delayed_in_stats_and_len_until_due() -> None:
    queue, clock = make()
    await queue.add([b"r"])
    await queue.add_requests([AddRequest(body=b"d", delay_seconds=2.0)])
    stats = await queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (1, 1, 0)
    assert await queue.len() == 2
    await clock.advance(2.0)
    stats = await queue.stats()
    assert (stats.ready, stats.delayed) == (2, 0)
    assert await queue.len() == 2


async def test_receive_waiting_is_woken_by_a_delayed_add() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(
        queue.receive("c", max_messages=1, wait_seconds=60, lease_seconds=LEASE)
    )
    await clock.advance(1.0)
    assert not waiter.done()
    await queue.add_requests([AddRequest(body=b"soon", delay_seconds=3.0)])
    # The receive must recompute its wait to the new due time, not sleep to 60 s.
    await clock.advance(3.0 - 1e-6)
    assert not waiter.done()
    await clock.advance(1e-6)
    [delivery] = await asyncio.wait_for(waiter, 1.0)
    assert delivery.body == b"soon"
    assert clock.monotonic() == pytest.approx(4.0)


async def test_receive_waiting_is_woken_by_an_add_request_due_now() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(
        queue.receive("c", max_messages=1, wait_seconds=60, lease_seconds=LEASE)
    )
    await clock.advance(1.0)
    await queue.add_requests([AddRequest(body=b"now")])
    await clock.advance(0)
    [delivery] = await asyncio.wait_for(waiter, 1.0)
    assert delivery.body == b"now"


async def test_ids_share_the_add_sequence_and_never_repeat() -> None:
    queue, _ = make()
    ids = await queue.add([b"a"])
    ids += [
        a.message_id for a in await queue.add_requests([AddRequest(body=b"b", delay_seconds=1)])
    ]
    ids += await queue.add([b"c"])
    assert len(set(ids)) == 3
    assert [int(i) for i in ids] == sorted(int(i) for i in ids)


# -- unique keys --------------------------------------------------------------------


async def test_held_key_adds_nothing_and_returns_holder() -> None:
    queue, _ = make()
    [first] = await queue.add_requests([AddRequest(body=b"1", unique_key="k")])
    [second] = await queue.add_requests([AddRequest(body=b"2", unique_key="k")])
    assert second == Added(message_id=first.message_id, added=False)
    assert await queue.len() == 1


async def test_two_same_key_requests_in_one_batch_add_one() -> None:
    queue, _ = make()
    results = await queue.add_requests(
        [
            AddRequest(body=b"1", unique_key="k"),
            AddRequest(body=b"x", unique_key="other"),
            AddRequest(body=b"2", unique_key="k", delay_seconds=5),
        ]
    )
    assert [r.added for r in results] == [True, True, False]
    assert results[2].message_id == results[0].message_id
    assert await bodies(queue) == [b"1", b"x"]


async def test_key_held_through_receive_release_and_reclaim_freed_by_ack() -> None:
    queue, clock = make()
    [first] = await queue.add_requests([AddRequest(body=b"1", unique_key="k")])

    async def held() -> bool:
        [again] = await queue.add_requests([AddRequest(body=b"2", unique_key="k")])
        return not again.added and again.message_id == first.message_id

    [delivery] = await take(queue)
    assert await held()
    assert await queue.release([delivery], delay_seconds=1.0) == []
    assert await held()
    await clock.advance(1.0)
    [delivery] = await take(queue)
    await clock.advance(LEASE + 1)
    [reclaimed] = await queue.reclaim("other", lease_seconds=LEASE, max_messages=10)
    assert await held()
    assert await queue.ack([delivery]) == [delivery]  # stale receipt: still held
    assert await held()
    assert await queue.ack([reclaimed]) == []
    [fresh] = await queue.add_requests([AddRequest(body=b"3", unique_key="k")])
    assert fresh.added
    assert fresh.message_id != first.message_id


async def test_key_freed_by_dead_letter() -> None:
    queue, _ = make()
    await queue.add_requests([AddRequest(body=b"1", unique_key="k")])
    await queue.dead_letter(await take(queue), reason="poison")
    [again] = await queue.add_requests([AddRequest(body=b"2", unique_key="k")])
    assert again.added


@pytest.mark.parametrize("delay", [0.0, 5.0])
async def test_key_freed_by_cancel(delay: float) -> None:
    queue, _ = make()
    [first] = await queue.add_requests([AddRequest(body=b"1", unique_key="k", delay_seconds=delay)])
    assert await queue.cancel([first.message_id]) == [True]
    [again] = await queue.add_requests([AddRequest(body=b"2", unique_key="k")])
    assert again.added


@pytest.mark.parametrize("how", ["purge", "delete_queue"])
async def test_key_freed_by_purge_and_delete_queue(how: str) -> None:
    queue, _ = make()
    await queue.add_requests([AddRequest(body=b"1", unique_key="k", delay_seconds=3)])
    await getattr(queue, how)()
    [again] = await queue.add_requests([AddRequest(body=b"2", unique_key="k")])
    assert again.added
    assert await queue.len() == 1


async def test_key_expires_at_unique_seconds_not_before() -> None:
    queue, clock = make()
    [first] = await queue.add_requests([AddRequest(body=b"1", unique_key="k", unique_seconds=10.0)])
    await clock.advance(10.0 - 1e-6)
    [held] = await queue.add_requests([AddRequest(body=b"2", unique_key="k")])
    assert held == Added(message_id=first.message_id, added=False)
    await clock.advance(1e-6)
    [second] = await queue.add_requests([AddRequest(body=b"3", unique_key="k")])
    assert second.added
    assert await queue.len() == 2


async def test_unique_seconds_zero_holds_for_no_time() -> None:
    queue, _ = make()
    results = await queue.add_requests(
        [
            AddRequest(body=b"1", unique_key="k", unique_seconds=0),
            AddRequest(body=b"2", unique_key="k"),
        ]
    )
    assert [r.added for r in results] == [True, True]


async def test_stale_message_does_not_free_a_retaken_key() -> None:
    queue, clock = make()
    [old] = await queue.add_requests([AddRequest(body=b"old", unique_key="k", unique_seconds=1)])
    [delivery] = await take(queue)
    await clock.advance(1.0)
    [new] = await queue.add_requests([AddRequest(body=b"new", unique_key="k")])
    assert new.added
    assert new.message_id != old.message_id
    assert await queue.ack([delivery]) == []
    [again] = await queue.add_requests([AddRequest(body=b"x", unique_key="k")])
    assert again == Added(message_id=new.message_id, added=False)


async def test_keys_are_shared_by_handles_of_one_store() -> None:
    queue, _ = make()
    other = queue.open_handle()
    [first] = await queue.add_requests([AddRequest(body=b"1", unique_key="k")])
    [second] = await other.add_requests([AddRequest(body=b"2", unique_key="k")])
    assert second == Added(message_id=first.message_id, added=False)


# -- invalid batches ----------------------------------------------------------------

GOOD = AddRequest(body=b"ok", unique_key="good")


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (b"raw bytes", TypeError),
        (AddRequest(body="text"), TypeError),  # type: ignore[arg-type]
        (AddRequest(body=b"x", delay_seconds=-1e-9), ValueError),
        (AddRequest(body=b"x", delay_seconds=math.inf), ValueError),
        (AddRequest(body=b"x", delay_seconds=math.nan), ValueError),
        (AddRequest(body=b"x", delay_seconds=True), TypeError),
        (AddRequest(body=b"x", delay_seconds="1"), TypeError),  # type: ignore[arg-type]
        (AddRequest(body=b"x", due_at=math.nan), ValueError),
        (AddRequest(body=b"x", due_at=math.inf), ValueError),
        (AddRequest(body=b"x", due_at="soon"), TypeError),  # type: ignore[arg-type]
        (AddRequest(body=b"x", unique_key=""), ValueError),
        (AddRequest(body=b"x", unique_key="\ud800"), ValueError),
        (AddRequest(body=b"x", unique_key=b"k"), TypeError),  # type: ignore[arg-type]
        (AddRequest(body=b"x", unique_key="k", unique_seconds=-1), ValueError),
        (AddRequest(body=b"x", unique_key="k", unique_seconds=math.inf), ValueError),
    ],
)
async def test_invalid_batch_changes_nothing(bad: object, error: type[Exception]) -> None:
    queue, _ = make()
    with pytest.raises(error):
        await queue.add_requests([GOOD, bad])  # type: ignore[list-item]
    assert await queue.len() == 0
    stats = await queue.stats()
    assert (stats.ready, stats.delayed) == (0, 0)
    [added] = await queue.add_requests([GOOD])
    assert added.added  # the good request's key was not taken by the refused batch


async def test_empty_batch_adds_nothing() -> None:
    queue, _ = make()
    assert await queue.add_requests([]) == []
    assert await queue.len() == 0


# -- cancel -------------------------------------------------------------------------


async def test_cancel_ready_message_is_never_delivered_and_counts_stay_exact() -> None:
    queue, _ = make()
    ids = await queue.add([b"a", b"b", b"c"])
    assert await queue.cancel([ids[1]]) == [True]
    stats = await queue.stats()
    assert (stats.ready, stats.delayed) == (2, 0)
    assert await queue.len() == 2
    assert queue.ready_bodies() == [b"a", b"c"]
    assert await bodies(queue) == [b"a", b"c"]


async def test_cancel_head_keeps_oldest_ready_age_of_the_next() -> None:
    queue, clock = make()
    [head] = await queue.add([b"a"])
    await clock.advance(2.0)
    await queue.add([b"b"])
    await clock.advance(1.0)
    assert await queue.cancel([head]) == [True]
    stats = await queue.stats()
    assert stats.ready == 1
    assert stats.oldest_ready_age_seconds == pytest.approx(1.0)


async def test_cancel_delayed_message_is_never_delivered() -> None:
    queue, clock = make()
    [added] = await queue.add_requests([AddRequest(body=b"d", delay_seconds=1)])
    assert await queue.cancel([added.message_id]) == [True]
    stats = await queue.stats()
    assert (stats.ready, stats.delayed) == (0, 0)
    assert await queue.len() == 0
    await clock.advance(2.0)
    assert await take(queue) == []


async def test_cancel_released_with_delay_message() -> None:
    queue, clock = make()
    await queue.add([b"r"])
    [delivery] = await take(queue)
    await queue.release([delivery], delay_seconds=5)
    assert await queue.cancel([delivery.message_id]) == [True]
    await clock.advance(6)
    assert await take(queue) == []
    assert await queue.ack([delivery]) == [delivery]


async def test_cancel_in_flight_acked_dead_unknown_or_twice_returns_false() -> None:
    queue, _ = make()
    flying, acked, dead, twice = await queue.add([b"f", b"a", b"d", b"t"])
    assert await queue.cancel([twice]) == [True]
    deliveries = {d.message_id: d for d in await take(queue)}
    await queue.ack([deliveries[acked]])
    await queue.dead_letter([deliveries[dead]], reason="x")
    flags = await queue.cancel([flying, acked, dead, "unknown", twice])
    assert flags == [False, False, False, False, False]
    assert queue.in_flight() == {flying: ("c", 1)}
    assert await queue.ack([deliveries[flying]]) == []


async def test_cancel_same_id_twice_in_one_call() -> None:
    queue, _ = make()
    [one] = await queue.add([b"x"])
    assert await queue.cancel([one, one]) == [True, False]


async def test_cancel_of_a_due_delayed_message() -> None:
    queue, clock = make()
    [added] = await queue.add_requests([AddRequest(body=b"d", delay_seconds=1)])
    await clock.advance(1)
    assert await queue.cancel([added.message_id]) == [True]
    assert await take(queue) == []


async def test_cancel_refuses_a_single_string_and_non_str_ids() -> None:
    queue, _ = make()
    [one] = await queue.add([b"x"])
    with pytest.raises(TypeError):
        await queue.cancel(one)
    with pytest.raises(TypeError):
        await queue.cancel([one, 1])  # type: ignore[list-item]
    assert await queue.len() == 1


# -- closed handles -----------------------------------------------------------------


async def test_closed_handle_refuses_scheduling_calls() -> None:
    queue, _ = make()
    other = queue.open_handle()
    await other.aclose()
    with pytest.raises(QueueClosedError):
        await other.add_requests([AddRequest(body=b"x")])
    with pytest.raises(QueueClosedError):
        await other.cancel(["1"])
    assert await queue.len() == 0


# -- cancelled entries are skipped lazily; counts stay exact ------------------------


async def test_receive_with_only_cancelled_ready_entries_waits_for_a_new_add() -> None:
    queue, clock = make()
    ids = await queue.add([b"a", b"b"])
    assert await queue.cancel(ids) == [True, True]
    waiter = asyncio.ensure_future(
        queue.receive("c", max_messages=5, wait_seconds=60, lease_seconds=LEASE)
    )
    await clock.advance(1.0)
    assert not waiter.done()  # it did not return early on the skipped entries
    await queue.add([b"c"])
    await clock.advance(0)
    [delivery] = await asyncio.wait_for(waiter, 1.0)
    assert delivery.body == b"c"
    stats = await queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 0, 1)


async def test_counts_exact_after_cancelled_delayed_entries_fall_due() -> None:
    queue, clock = make()
    added = await queue.add_requests(
        [AddRequest(body=b"%d" % i, delay_seconds=1 + i) for i in range(4)]
    )
    assert await queue.cancel([added[0].message_id, added[2].message_id]) == [True, True]
    stats = await queue.stats()
    assert (stats.ready, stats.delayed) == (0, 2)
    await clock.advance(10)
    stats = await queue.stats()
    assert (stats.ready, stats.delayed) == (2, 0)
    assert await bodies(queue) == [b"1", b"3"]
    stats = await queue.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 0, 2)


async def test_counts_exact_after_cancel_then_purge() -> None:
    queue, _ = make()
    ids = await queue.add([b"a", b"b"])
    [delayed] = await queue.add_requests([AddRequest(body=b"d", delay_seconds=5)])
    await queue.cancel([ids[0], delayed.message_id])
    assert await queue.purge() == 1
    await queue.add([b"n"])
    await queue.add_requests([AddRequest(body=b"m", delay_seconds=5)])
    stats = await queue.stats()
    assert (stats.ready, stats.delayed) == (1, 1)
    assert await queue.len() == 2


async def test_max_messages_counts_only_live_messages() -> None:
    queue, _ = make()
    ids = await queue.add([b"a", b"b", b"c", b"d"])
    await queue.cancel(ids[:2])
    got = await queue.receive("c", max_messages=2, wait_seconds=0, lease_seconds=LEASE)
    assert [d.body for d in got] == [b"c", b"d"]


async def test_cancel_takes_a_one_shot_iterable_of_ids() -> None:
    queue = InMemoryQueue(clock=FakeClock())
    ids = await queue.add([b"a", b"b", b"c"])

    # A generator is consumed by the type check; the ids must still be cancelled.
    flags = await queue.cancel(message_id for message_id in ids[:2])  # type: ignore[arg-type]

    assert flags == [True, True]
    assert await queue.len() == 1
