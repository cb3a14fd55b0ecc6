"""MessageLookup on a real server: every state, dead letters by original id, the index
kept by retry/purge/delete, stale and hostile ids, and one round trip per batch.
"""

from __future__ import annotations

import asyncio

import pytest

from taskrunner.queue import AddRequest, MessageState, lookup_of
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import age_lease, entry_id, remove_payload

from .helpers import count_round_trips, eventually, receive_one

pytestmark = pytest.mark.redis

P = 0.05  # the backend's lease_precision_seconds


async def server_seconds(queue: RedisStreamsQueue) -> float:
    seconds, micros = await queue._raw.call("time", "TIME")
    return int(seconds) + int(micros) / 1e6


async def state_of(queue: RedisStreamsQueue, message_id: str) -> MessageState | None:
    [state] = await queue.lookup.lookup([message_id])
    return state


async def dead_index(queue: RedisStreamsQueue) -> dict[str, str]:
    raw = await queue._raw.call("hgetall", "HGETALL", queue.keys.dead_ids)
    if isinstance(raw, dict):  # RESP3
        return {k.decode(): v.decode() for k, v in raw.items()}
    return {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}


async def test_the_part_is_found_by_lookup_of(redis_queue: RedisStreamsQueue) -> None:
    part = lookup_of(redis_queue)
    assert part is not None
    assert await part.lookup([]) == []


async def test_a_message_not_yet_delivered_is_ready_with_count_0(
    redis_queue: RedisStreamsQueue,
) -> None:
    before = await server_seconds(redis_queue)
    [message_id] = await redis_queue.add([b"body"])
    after = await server_seconds(redis_queue)

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert (state.state, state.delivery_count, state.body) == ("ready", 0, b"body")
    assert state.message_id == message_id
    assert state.added_at is not None
    assert before - 0.001 <= state.added_at <= after
    assert (state.consumer, state.idle_seconds, state.due_at, state.dead_reason) == (
        None,
        None,
        None,
        None,
    )


async def test_a_leased_message_is_running_with_holder_idle_time_and_count(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"b"])
    delivery = await receive_one(redis_queue, "worker-1")
    assert await age_lease(redis_queue, delivery, 2.5)

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert (state.state, state.consumer, state.delivery_count) == ("running", "worker-1", 1)
    assert state.idle_seconds is not None
    assert 2.5 <= state.idle_seconds < 2.5 + 1.0

    assert await redis_queue.heartbeat([delivery]) == []
    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert state.idle_seconds is not None
    assert state.idle_seconds < 1.0


async def test_a_reclaimed_message_is_running_under_its_new_holder_with_count_2(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"b"])
    delivery = await receive_one(redis_queue, "crashed")
    assert await age_lease(redis_queue, delivery, 120)
    [taken] = await redis_queue.reclaim("rescuer", lease_seconds=60, max_messages=1)

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert (state.state, state.consumer, state.delivery_count) == ("running", "rescuer", 2)
    assert taken.delivery_count == 2


async def test_a_released_message_is_ready_then_running_with_the_count_going_on(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"b"])
    first = await receive_one(redis_queue, "a")
    assert await redis_queue.release([first]) == []

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert (state.state, state.delivery_count, state.body) == ("ready", 1, b"b")
    # The entry moved; the time in the id is still when the message was added.
    assert state.added_at == int(message_id.split("-")[0]) / 1000

    second = await receive_one(redis_queue, "b")
    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert (state.state, state.consumer, state.delivery_count) == ("running", "b", 2)
    assert second.delivery_count == 2


async def test_a_message_released_with_a_delay_is_delayed_until_due_then_ready(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"b"])
    delivery = await receive_one(redis_queue, "a")
    before = await server_seconds(redis_queue)
    assert await redis_queue.release([delivery], delay_seconds=0.4) == []
    after = await server_seconds(redis_queue)

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert (state.state, state.delivery_count, state.body) == ("delayed", 1, b"b")
    assert state.due_at is not None
    assert before + 0.4 - 0.001 <= state.due_at <= after + 0.4 + 0.001
    due_at = state.due_at

    async def probe() -> tuple[float, MessageState | None]:
        return await server_seconds(redis_queue), await state_of(redis_queue, message_id)

    # Just before the due time (server clock) it is delayed; after it, ready, before any
    # receive promoted it.
    while True:
        now, seen = await probe()
        assert seen is not None
        if now < due_at - P:
            assert seen.state == "delayed"
        if now > due_at + 0.002:
            break
        assert now < due_at + 5, "server clock stalled?"
        await asyncio.sleep(0.005)
    _, seen = await probe()
    assert seen is not None
    assert (seen.state, seen.delivery_count, seen.due_at) == ("ready", 1, None)


async def test_a_delayed_add_is_delayed_with_count_0_and_due_at(
    redis_queue: RedisStreamsQueue,
) -> None:
    now = await server_seconds(redis_queue)
    [added] = await redis_queue.add_requests([AddRequest(body=b"later", due_at=now + 3600)])

    state = await state_of(redis_queue, added.message_id)
    assert state is not None
    assert (state.state, state.delivery_count, state.body) == ("delayed", 0, b"later")
    assert state.due_at is not None
    assert abs(state.due_at - (now + 3600)) < 0.002
    assert state.added_at is not None
    assert abs(state.added_at - now) < 1.0


async def test_a_dead_letter_is_found_by_its_original_id(redis_queue: RedisStreamsQueue) -> None:
    [message_id] = await redis_queue.add([b"doomed"])
    first = await receive_one(redis_queue, "a")
    assert await redis_queue.release([first]) == []  # the entry id now differs
    second = await receive_one(redis_queue, "a")
    # Stream ids are <server ms>-<seq>: dead-lettered within the millisecond of the add,
    # the dead letter's own id would spell the message id, and the check at the end
    # would ask about the message itself. Wait for the server's clock to move on.
    latest_ms = int(entry_id(second).split("-")[0])
    deadline = asyncio.get_running_loop().time() + 5
    while int(await server_seconds(redis_queue) * 1000) <= latest_ms:
        assert asyncio.get_running_loop().time() < deadline, "the server's clock stands still"
        await asyncio.sleep(0.001)
    before = await server_seconds(redis_queue)
    assert await redis_queue.dead_letter([second], reason="boom: it failed") == []
    after = await server_seconds(redis_queue)

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert state.state == "dead"
    assert state.message_id == message_id
    assert (state.delivery_count, state.body, state.dead_reason) == (
        2,
        b"doomed",
        "boom: it failed",
    )
    assert state.dead_at is not None
    assert before - 0.001 <= state.dead_at <= after + 0.001
    [letter] = await redis_queue.list_dead_letters()
    assert letter.original_id == message_id
    # The dead letter's own id is no message id.
    assert await state_of(redis_queue, letter.message_id) is None


async def test_a_payload_lost_under_a_lease_is_dead_by_its_id_via_reclaim(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"vanishing"])
    delivery = await receive_one(redis_queue, "a")
    assert await age_lease(redis_queue, delivery, 120)
    assert await remove_payload(redis_queue, delivery)
    assert await redis_queue.reclaim("r", lease_seconds=60, max_messages=1) == []

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert (state.state, state.delivery_count) == ("dead", 1)
    assert state.dead_reason == "payload removed from the stream while pending"


async def test_acked_cancelled_purged_and_unknown_messages_have_no_state(
    redis_queue: RedisStreamsQueue,
) -> None:
    acked, cancelled, delayed_cancelled = await redis_queue.add([b"a", b"c", b"x"])
    delivery = await receive_one(redis_queue, "w")
    assert delivery.message_id == acked
    assert await redis_queue.ack([delivery]) == []
    [later] = await redis_queue.add_requests([AddRequest(body=b"d", delay_seconds=3600)])
    assert await redis_queue.cancel([cancelled, later.message_id]) == [True, True]
    released_id = delayed_cancelled
    held = await receive_one(redis_queue, "w")
    assert held.message_id == released_id
    assert await redis_queue.release([held], delay_seconds=3600) == []
    assert await redis_queue.cancel([released_id]) == [True]

    ids = [acked, cancelled, later.message_id, released_id, "1-1", "0-0"]
    assert await redis_queue.lookup.lookup(ids) == [None] * len(ids)

    [purged] = await redis_queue.add([b"p"])
    assert await redis_queue.purge() == 1
    assert await state_of(redis_queue, purged) is None


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x",
        "1-",
        "-1",
        "1-1-1",
        " 1-1",
        "1-1\n",
        "{1}-1",
        "18446744073709551616-0",  # 2**64: not a stream id the server accepts
        "0-18446744073709551616",
        "99999999999999999999-1",
        "1" * 100_000,
        "\u0661-\u0661",  # Arabic-Indic digits match \\d but are no stream id
    ],
)
async def test_ids_not_in_stream_id_format_are_none_never_an_error(
    redis_queue: RedisStreamsQueue, bad: str
) -> None:
    [message_id] = await redis_queue.add([b"real"])

    states = await redis_queue.lookup.lookup([bad, message_id, bad])
    assert states[0] is None
    assert states[2] is None
    assert states[1] is not None
    assert states[1].state == "ready"


async def test_non_string_ids_are_none_and_a_single_string_is_refused(
    redis_queue: RedisStreamsQueue,
) -> None:
    assert await redis_queue.lookup.lookup([None, 7, b"1-1"]) == [None, None, None]  # type: ignore[list-item]
    with pytest.raises(TypeError):
        await redis_queue.lookup.lookup("1-1")


async def test_another_spelling_of_a_message_id_is_not_that_message(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"real"])
    ms, seq = message_id.split("-")
    await receive_one(redis_queue, "a")
    aliases = [f"0{ms}-{seq}", f"{ms}-0{seq}", f"00{ms}-00{seq}"]

    states = await redis_queue.lookup.lookup([*aliases, message_id])
    assert states[:3] == [None, None, None]
    assert states[3] is not None
    assert states[3].state == "running"


async def test_the_largest_stream_id_is_looked_up_not_refused(
    redis_queue: RedisStreamsQueue,
) -> None:
    top = f"{2**64 - 1}-{2**64 - 1}"
    assert await redis_queue.lookup.lookup([top]) == [None]


async def test_a_retried_dead_letter_leaves_the_index_and_its_new_id_is_ready(
    redis_queue: RedisStreamsQueue,
) -> None:
    ids = await redis_queue.add([b"one", b"two"])
    held = await redis_queue.receive("a", max_messages=2, wait_seconds=0, lease_seconds=60)
    assert await redis_queue.dead_letter(held, reason="r") == []
    assert set(await dead_index(redis_queue)) == set(ids)
    letters = await redis_queue.list_dead_letters()

    [new_id] = await redis_queue.retry_dead_letters([letters[0].message_id])

    assert await state_of(redis_queue, ids[0]) is None
    assert set(await dead_index(redis_queue)) == {ids[1]}
    state = await state_of(redis_queue, new_id)
    assert state is not None
    assert (state.state, state.body) == ("ready", b"one")

    # Retry of everything clears the rest of the index.
    assert len(await redis_queue.retry_dead_letters()) == 1
    assert await dead_index(redis_queue) == {}
    assert await state_of(redis_queue, ids[1]) is None


async def test_purging_dead_letters_removes_their_index_entries(
    redis_queue: RedisStreamsQueue,
) -> None:
    ids = await redis_queue.add([b"1", b"2", b"3"])
    held = await redis_queue.receive("a", max_messages=3, wait_seconds=0, lease_seconds=60)
    assert await redis_queue.dead_letter(held, reason="r") == []
    letters = {
        letter.original_id: letter.message_id for letter in await redis_queue.list_dead_letters()
    }

    assert await redis_queue.purge_dead_letters([letters[ids[0]], "9-9", "bad"]) == 1
    assert set(await dead_index(redis_queue)) == {ids[1], ids[2]}
    assert await state_of(redis_queue, ids[0]) is None
    dead = await state_of(redis_queue, ids[1])
    assert dead is not None
    assert dead.state == "dead"

    assert await redis_queue.purge_dead_letters() == 2
    assert await redis_queue._raw.call("exists", "EXISTS", redis_queue.keys.dead_ids) == 0
    assert await redis_queue.lookup.lookup(ids) == [None, None, None]


async def test_purge_keeps_dead_letters_and_their_index(redis_queue: RedisStreamsQueue) -> None:
    [message_id] = await redis_queue.add([b"d"])
    delivery = await receive_one(redis_queue, "a")
    assert await redis_queue.dead_letter([delivery], reason="r") == []

    await redis_queue.purge()

    state = await state_of(redis_queue, message_id)
    assert state is not None
    assert state.state == "dead"


async def test_delete_queue_clears_the_index(redis_queue: RedisStreamsQueue) -> None:
    [message_id] = await redis_queue.add([b"d"])
    delivery = await receive_one(redis_queue, "a")
    assert await redis_queue.dead_letter([delivery], reason="r") == []
    assert await dead_index(redis_queue) != {}

    await redis_queue.delete_queue()

    assert await redis_queue._raw.call("exists", "EXISTS", redis_queue.keys.dead_ids) == 0
    assert await state_of(redis_queue, message_id) is None


async def test_a_stale_index_entry_whose_dead_letter_is_gone_is_none(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"d"])
    delivery = await receive_one(redis_queue, "a")
    assert await redis_queue.dead_letter([delivery], reason="r") == []
    [letter] = await redis_queue.list_dead_letters()
    # Trimmed or deleted by hand, behind the backend's back.
    await redis_queue._raw.call("xdel", "XDEL", redis_queue.keys.dead, letter.message_id)

    assert await state_of(redis_queue, message_id) is None


async def test_lookup_of_a_re_added_entry_by_its_entry_id_is_none(
    redis_queue: RedisStreamsQueue,
) -> None:
    [message_id] = await redis_queue.add([b"b"])
    first = await receive_one(redis_queue, "a")
    assert await redis_queue.release([first]) == []
    entry = await redis_queue._raw.call("xrange", "XRANGE", redis_queue.keys.stream, "-", "+")
    [(entry_id, _)] = entry
    assert entry_id.decode() != message_id

    assert await state_of(redis_queue, entry_id.decode()) is None


async def test_a_batch_of_1200_ids_is_one_round_trip_in_order(
    redis_queue: RedisStreamsQueue,
) -> None:
    ids = await redis_queue.add([f"{n}".encode() for n in range(1100)])
    asked = [*ids, *(f"1-{n}" for n in range(100))]
    trips = count_round_trips(redis_queue)

    states = await redis_queue.lookup.lookup(asked)

    assert dict(trips) == {"lookup": 1}
    assert [s.body if s else None for s in states] == [
        *(f"{n}".encode() for n in range(1100)),
        *([None] * 100),
    ]


async def test_lookup_writes_nothing(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.initialize()
    assert await redis_queue.lookup.lookup(["1-1", "2-0"]) == [None, None]

    found = [
        k async for k in redis_queue._client.scan_iter(match=f"{redis_queue.keys.namespace}:*")
    ]
    assert found == []


async def test_running_then_acked_goes_from_a_state_to_none(redis_queue: RedisStreamsQueue) -> None:
    [message_id] = await redis_queue.add([b"b"])
    delivery = await receive_one(redis_queue, "a")

    async def running() -> MessageState | None:
        return await state_of(redis_queue, message_id)

    seen = await eventually(
        running, lambda s: s is not None and s.state == "running", what="running"
    )
    assert seen is not None
    assert await redis_queue.ack([delivery]) == []
    assert await state_of(redis_queue, message_id) is None
