"""The in-memory backend's MessageLookup part, on the fake clock, state by state."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import AddRequest, Delivery, MessageLookup, MessageState, lookup_of
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

LEASE = 30.0
EPS = 1e-6


def make() -> tuple[InMemoryQueue, FakeClock]:
    clock = FakeClock()
    return InMemoryQueue(clock=clock), clock


def part(queue: InMemoryQueue) -> MessageLookup:
    found = lookup_of(queue)
    assert found is not None
    return found


async def state(queue: InMemoryQueue, message_id: str) -> MessageState | None:
    [found] = await part(queue).lookup([message_id])
    return found


async def take(queue: InMemoryQueue, consumer: str = "c") -> list[Delivery]:
    return await queue.receive(consumer, max_messages=10, wait_seconds=0, lease_seconds=LEASE)


async def dead_one(queue: InMemoryQueue, body: bytes = b"m", reason: str = "boom") -> str:
    """Add, receive and dead-letter one message; call it with nothing else ready."""
    [message_id] = await queue.add([body])
    [delivery] = await queue.receive("d", max_messages=1, wait_seconds=0, lease_seconds=LEASE)
    assert delivery.message_id == message_id
    assert await queue.dead_letter([delivery], reason=reason) == []
    return message_id


def test_capabilities_and_part() -> None:
    queue = InMemoryQueue()
    assert queue.capabilities.lookup
    assert callable(part(queue).lookup)


async def test_every_state_of_one_message_from_add_to_ack() -> None:
    queue, clock = make()
    await clock.advance(10.0)
    added_wall = clock.time()
    [message_id] = await queue.add([b"body"])
    ready = await state(queue, message_id)
    assert ready is not None
    assert (ready.message_id, ready.state, ready.delivery_count, ready.body) == (
        message_id,
        "ready",
        0,
        b"body",
    )
    assert ready.added_at == pytest.approx(added_wall, abs=EPS)
    assert (ready.consumer, ready.idle_seconds, ready.due_at, ready.dead_reason) == (
        None,
        None,
        None,
        None,
    )

    await clock.advance(2.0)
    [delivery] = await take(queue, "worker-1")
    await clock.advance(3.0)
    running = await state(queue, message_id)
    assert running is not None
    assert (running.state, running.consumer, running.delivery_count) == ("running", "worker-1", 1)
    assert running.idle_seconds == pytest.approx(3.0, abs=EPS)
    assert running.added_at == pytest.approx(added_wall, abs=EPS)
    assert await queue.heartbeat([delivery]) == []
    running = await state(queue, message_id)
    assert running is not None
    assert running.idle_seconds == 0.0

    release_wall = clock.time()
    assert await queue.release([delivery], delay_seconds=5.0) == []
    delayed = await state(queue, message_id)
    assert delayed is not None
    assert (delayed.state, delayed.delivery_count, delayed.consumer) == ("delayed", 1, None)
    assert delayed.due_at == pytest.approx(release_wall + 5.0, abs=EPS)
    await clock.advance(5.0 - EPS)
    still = await state(queue, message_id)
    assert still is not None
    assert still.state == "delayed"
    await clock.advance(EPS)
    # Due: ready although no receive has moved it out of the delayed heap yet.
    due = await state(queue, message_id)
    assert due is not None
    assert (due.state, due.delivery_count, due.due_at) == ("ready", 1, None)

    [again] = await take(queue, "worker-2")
    second = await state(queue, message_id)
    assert second is not None
    assert (second.state, second.consumer, second.delivery_count) == ("running", "worker-2", 2)
    assert await queue.ack([again]) == []
    assert await state(queue, message_id) is None


async def test_released_without_delay_is_ready_with_its_delivery_count() -> None:
    queue, _ = make()
    [message_id] = await queue.add([b"m"])
    deliveries = await take(queue)
    await queue.release(deliveries)
    found = await state(queue, message_id)
    assert found is not None
    assert (found.state, found.delivery_count) == ("ready", 1)


async def test_delayed_add_is_delayed_until_due_with_count_zero() -> None:
    queue, clock = make()
    due_at = clock.time() + 7.0
    [by_delay, by_due_at] = await queue.add_requests(
        [AddRequest(body=b"d", delay_seconds=3.0), AddRequest(body=b"a", due_at=due_at)]
    )
    first = await state(queue, by_delay.message_id)
    second = await state(queue, by_due_at.message_id)
    assert first is not None
    assert second is not None
    assert (first.state, first.delivery_count) == ("delayed", 0)
    assert first.due_at == pytest.approx(clock.time() + 3.0, abs=EPS)
    assert (second.state, second.delivery_count) == ("delayed", 0)
    assert second.due_at == pytest.approx(due_at, abs=EPS)
    await clock.advance(3.0 - EPS)
    early = await state(queue, by_delay.message_id)
    assert early is not None
    assert early.state == "delayed"
    await clock.advance(EPS)
    now_ready = await state(queue, by_delay.message_id)
    assert now_ready is not None
    assert now_ready.state == "ready"
    later = await state(queue, by_due_at.message_id)
    assert later is not None
    assert later.state == "delayed"
    await clock.advance(4.0)
    assert [s.state if s else None for s in await part(queue).lookup([by_due_at.message_id])] == [
        "ready"
    ]


async def test_past_due_at_is_ready_at_once() -> None:
    queue, clock = make()
    [added] = await queue.add_requests([AddRequest(body=b"p", due_at=clock.time() - 5)])
    found = await state(queue, added.message_id)
    assert found is not None
    assert found.state == "ready"


async def test_lapsed_lease_stays_running_until_reclaimed() -> None:
    queue, clock = make()
    [message_id] = await queue.add([b"m"])
    await take(queue, "a")
    await clock.advance(LEASE + 5.0)
    lapsed = await state(queue, message_id)
    assert lapsed is not None
    assert (lapsed.state, lapsed.consumer, lapsed.delivery_count) == ("running", "a", 1)
    assert lapsed.idle_seconds == pytest.approx(LEASE + 5.0, abs=EPS)
    [_] = await queue.reclaim("b", lease_seconds=LEASE, max_messages=10)
    taken = await state(queue, message_id)
    assert taken is not None
    assert (taken.state, taken.consumer, taken.delivery_count, taken.idle_seconds) == (
        "running",
        "b",
        2,
        0.0,
    )


async def test_dead_letter_is_found_by_its_original_id() -> None:
    queue, clock = make()
    await clock.advance(4.0)
    message_id = await dead_one(queue, b"\x00payload", reason="bad input \u2603")
    found = await state(queue, message_id)
    assert found is not None
    assert found.message_id == message_id
    assert (found.state, found.delivery_count, found.body, found.dead_reason) == (
        "dead",
        1,
        b"\x00payload",
        "bad input \u2603",
    )
    assert found.dead_at == clock.time()
    [letter] = queue.dead_letters()
    # The dead-letter entry's own id is not a message id.
    assert await state(queue, letter.message_id) is None


async def test_retried_dead_letter_has_a_new_id_and_the_original_is_gone() -> None:
    queue, _ = make()
    message_id = await dead_one(queue)
    [letter] = queue.dead_letters()
    [new_id] = await queue.retry_dead_letters([letter.message_id])
    assert new_id != message_id
    assert await state(queue, message_id) is None
    fresh = await state(queue, new_id)
    assert fresh is not None
    assert (fresh.state, fresh.delivery_count, fresh.body) == ("ready", 0, b"m")


async def test_retry_all_and_purge_dead_letters_clear_the_index() -> None:
    queue, _ = make()
    retried = [await dead_one(queue, bytes([i])) for i in range(3)]
    assert len(await queue.retry_dead_letters()) == 3
    assert queue._store.dead_by_original == {}
    # The retries are new messages; complete them so only the next dead letters remain.
    assert await queue.ack(await take(queue)) == []
    purged = [await dead_one(queue, bytes([i])) for i in range(3)]
    letters = queue.dead_letters()
    assert await queue.purge_dead_letters([letters[0].message_id]) == 1
    assert set(queue._store.dead_by_original) == set(purged[1:])
    assert await state(queue, purged[0]) is None
    still = await state(queue, purged[1])
    assert still is not None
    assert still.state == "dead"
    assert await queue.purge_dead_letters() == 2
    assert await part(queue).lookup(retried + purged) == [None] * 6
    assert queue._store.dead_by_original == {}


@pytest.mark.parametrize("where", ["ready", "delayed", "released-delayed"])
async def test_cancelled_message_has_no_state_while_its_entry_stays_queued(where: str) -> None:
    queue, _ = make()
    if where == "ready":
        [message_id] = await queue.add([b"m"])
    elif where == "delayed":
        [added] = await queue.add_requests([AddRequest(body=b"m", delay_seconds=5)])
        message_id = added.message_id
    else:
        [message_id] = await queue.add([b"m"])
        await queue.release(await take(queue), delay_seconds=5)
    assert await queue.cancel([message_id]) == [True]
    # Cancel is lazy: the entry is still in the deque or heap, the message is not.
    entries = list(queue._store.ready) + [entry[2] for entry in queue._store.delayed]
    assert message_id in entries
    assert await state(queue, message_id) is None


async def test_purge_leaves_no_state_for_any_live_message() -> None:
    queue, _ = make()
    dead = await dead_one(queue)
    [leased, ready] = await queue.add([b"l", b"r"])
    [delivery] = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=LEASE)
    assert delivery.message_id == leased
    [delayed] = await queue.add_requests([AddRequest(body=b"d", delay_seconds=5)])
    assert await queue.purge() == 3
    assert await part(queue).lookup([ready, leased, delayed.message_id]) == [None] * 3
    # purge keeps dead letters.
    kept = await state(queue, dead)
    assert kept is not None
    assert kept.state == "dead"


async def test_delete_queue_leaves_no_state() -> None:
    queue, _ = make()
    dead = await dead_one(queue)
    [ready] = await queue.add([b"r"])
    await queue.delete_queue()
    assert await part(queue).lookup([ready, dead]) == [None, None]
    assert queue._store.dead_by_original == {}


async def test_handles_of_one_store_see_the_same_states() -> None:
    queue, _ = make()
    other = queue.open_handle()
    [message_id] = await queue.add([b"m"])
    await take(other, "o")
    found = await state(queue, message_id)
    assert found is not None
    assert (found.state, found.consumer) == ("running", "o")


HOSTILE_IDS = [
    "",
    "0",
    "-1",
    "1.0",
    " 1",
    "1 ",
    "01",
    "\u0661",  # ARABIC-INDIC DIGIT ONE: str.isdigit() is True for it
    "abc",
    "dead-1",
    "dead-2",
    "\x00",
    "\ud800",
    "9" * 10_000,
    "x" * 100_000,
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
async def test_hostile_ids_are_unknown_never_an_error(hostile: str) -> None:
    queue, _ = make()
    # Id "1" is dead (its letter is "dead-2"), id "3" is ready.
    assert await dead_one(queue) == "1"
    [message_id] = await queue.add([b"m"])
    found = await part(queue).lookup([hostile, message_id, hostile])
    assert found[0] is None
    assert found[2] is None
    assert found[1] is not None
    assert found[1].state == "ready"


async def test_order_duplicates_and_empty_batches() -> None:
    queue, _ = make()
    [a, b] = await queue.add([b"a", b"b"])
    states = await part(queue).lookup([b, "nope", a, b])
    assert [s.message_id if s else None for s in states] == [b, None, a, b]
    assert await part(queue).lookup([]) == []


@pytest.mark.parametrize("ids", ["1", b"1"])
async def test_refuses_a_single_string(ids: Any) -> None:
    queue, _ = make()
    await queue.add([b"m"])
    with pytest.raises(TypeError):
        await part(queue).lookup(ids)


async def test_a_non_str_id_is_unknown_never_an_error() -> None:
    # As the contract says of ids the backend never issues, and as Redis and PostgreSQL
    # answer (taskrunner_backends.checks.check_lookup_ids).
    queue, _ = make()
    [message_id] = await queue.add([b"m"])
    states = await part(queue).lookup([1, None, [message_id], message_id, b"1"])  # type: ignore[list-item]
    assert states[:3] == [None, None, None]
    assert states[4] is None
    assert states[3] is not None
    assert states[3].state == "ready"


async def test_closed_handle_refuses_lookup() -> None:
    queue, _ = make()
    lookup = part(queue)
    await queue.aclose()
    with pytest.raises(QueueClosedError):
        await lookup.lookup(["1"])


class _NoScan(dict[str, Any]):
    """A dict that fails any whole-table walk: lookup must index, not scan."""

    def _refuse(self, *_: object) -> NoReturn:
        raise AssertionError("lookup scanned a whole table")

    __iter__ = keys = values = items = _refuse


async def test_lookup_reads_by_key_and_never_scans_a_table() -> None:
    queue, _ = make()
    dead = await dead_one(queue)
    ids = await queue.add([b"%d" % i for i in range(50)])
    await take(queue)
    store = queue._store
    store.messages = _NoScan(store.messages)
    store.dead = _NoScan(store.dead)
    store.in_flight = _NoScan(store.in_flight)
    store.dead_by_original = _NoScan(store.dead_by_original)
    states = await part(queue).lookup([ids[0], ids[49], dead, "unknown"])
    assert [s.state if s else None for s in states] == ["running", "ready", "dead", None]


async def test_a_one_shot_iterable_of_ids_is_used_whole() -> None:
    queue, _ = make()
    ids = await queue.add([b"a", b"b"])
    states = await part(queue).lookup(i for i in ids)  # type: ignore[arg-type]
    assert [s.message_id if s else None for s in states] == ids
