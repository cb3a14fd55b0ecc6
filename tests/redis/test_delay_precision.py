"""Delayed adds on a real server: due-time edges on the server's clock, and lateness.

Every instant is read from the server (``TIME``), the clock delays are measured on,
so the edges do not depend on the test machine's clock. Lateness is measured against
the exact due time the server recorded (the delayed set's score).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from taskrunner.queue import AddRequest, Delivery
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.queue import DELAYED_LATENESS_SECONDS, DELAYED_RECHECK_SECONDS

from .helpers import DEADLINE_SECONDS, open_queue, receive_one

pytestmark = pytest.mark.redis

P = 0.05  # the backend's lease_precision_seconds


async def server_ms(queue: RedisStreamsQueue) -> int:
    seconds, micros = await queue._raw.call("time", "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def due_ms(queue: RedisStreamsQueue, message_id: str) -> int:
    """The due time (server ms) the backend recorded for a delayed message."""
    location = await queue._raw.call("moved", "HGET", queue.keys.moved, message_id)
    assert location is not None
    assert location.startswith(b"p"), location
    score = await queue._raw.call("score", "ZSCORE", queue.keys.delayed, location[1:])
    return int(float(score))


async def poll_until_delivered(queue: RedisStreamsQueue) -> tuple[Delivery, int, int]:
    """Receive without waiting until the message comes; (it, last empty poll ms, found ms).

    Each poll's server time is read before it (for empty polls) and after it (for the
    one that delivered), so the window the delivery happened in is bounded from both
    sides on the server's clock.
    """
    last_empty = -1
    deadline = await server_ms(queue) + DEADLINE_SECONDS * 1000
    while True:
        before = await server_ms(queue)
        got = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=60)
        if got:
            return got[0], last_empty, await server_ms(queue)
        last_empty = before
        assert before < deadline, "the delayed message was never delivered"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("form", ["delay_seconds", "due_at"])
async def test_a_delayed_add_is_not_delivered_before_due_and_is_ready_right_after(
    redis_queue: RedisStreamsQueue, form: str
) -> None:
    now = await server_ms(redis_queue)
    if form == "delay_seconds":
        request = AddRequest(body=b"x", delay_seconds=0.4)
    else:
        request = AddRequest(body=b"x", due_at=(now + 400) / 1000)
    [added] = await redis_queue.add_requests([request])
    due = await due_ms(redis_queue, added.message_id)
    assert now + 400 <= due <= now + 400 + 50

    delivery, last_empty, found = await poll_until_delivered(redis_queue)

    assert delivery.message_id == added.message_id
    assert (delivery.body, delivery.delivery_count) == (b"x", 1)
    # Never delivered before due - p: the poll that found it ended after that.
    assert found >= due - P * 1000
    # Ready after due + p: no poll that started after it came back empty.
    assert last_empty <= due + P * 1000
    assert await redis_queue.ack([delivery]) == []


async def test_due_at_in_the_past_and_delay_zero_are_ready_at_once_as_plain_entries(
    redis_queue: RedisStreamsQueue,
) -> None:
    now = await server_ms(redis_queue)
    added = await redis_queue.add_requests(
        [
            AddRequest(body=b"past", due_at=(now - 60_000) / 1000),
            AddRequest(body=b"now", due_at=now / 1000),
            AddRequest(body=b"zero", delay_seconds=0.0),
            AddRequest(body=b"epoch", due_at=0.0),
        ]
    )

    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed) == (4, 0)
    got = await redis_queue.receive("c", max_messages=10, wait_seconds=0, lease_seconds=60)
    assert [(d.message_id, d.body, d.delivery_count) for d in got] == [
        (a.message_id, body, 1)
        for a, body in zip(added, [b"past", b"now", b"zero", b"epoch"], strict=True)
    ]
    # Plain entries: the message id is the stream entry id (no moved record).
    assert await redis_queue._raw.call("moved", "HLEN", redis_queue.keys.moved) == 0


async def test_due_at_one_second_ahead_is_not_ready_now(redis_queue: RedisStreamsQueue) -> None:
    now = await server_ms(redis_queue)
    [added] = await redis_queue.add_requests([AddRequest(body=b"x", due_at=(now + 1000) / 1000)])

    assert await redis_queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=60) == []
    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed) == (0, 1)
    assert await redis_queue.len() == 1
    assert await due_ms(redis_queue, added.message_id) == now + 1000


def spy_blocking(queue: RedisStreamsQueue) -> asyncio.Event:
    """An event set whenever `queue` enters a blocking read."""
    entered = asyncio.Event()
    original = queue._blocking_read

    async def spy(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        return await original(*args, **kwargs)

    queue._blocking_read = spy  # type: ignore[method-assign]
    return entered


async def blocked_then(
    queue: RedisStreamsQueue, wait_seconds: float, action: Callable[[], Awaitable[str]]
) -> tuple[Delivery, float]:
    """Start a receive, let it block, run `action` (returns the message id) elsewhere.

    Returns the delivery and its lateness: server time when the receive returned minus
    the due time the server recorded for the message.
    """
    entered = spy_blocking(queue)
    await queue.len()  # initialised, so the receive goes straight to its script
    receive = asyncio.create_task(
        queue.receive("blocked", max_messages=1, wait_seconds=wait_seconds, lease_seconds=60)
    )
    await asyncio.wait_for(entered.wait(), DEADLINE_SECONDS)
    # The read is on its way to the server; a few ms for it to arrive and block.
    await asyncio.sleep(0.05)
    assert not receive.done()
    message_id = await action()
    due = await due_ms(queue, message_id)
    [delivery] = await asyncio.wait_for(receive, DEADLINE_SECONDS)
    returned = await server_ms(queue)
    assert delivery.message_id == message_id
    return delivery, (returned - due) / 1000


async def test_a_receive_already_blocking_delivers_a_delayed_add_of_another_client_on_time(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue
) -> None:
    other = open_queue(redis_url, redis_namespace)
    try:
        lateness = []
        for _ in range(5):

            async def add_delayed() -> str:
                [added] = await other.add_requests([AddRequest(body=b"d", delay_seconds=0.3)])
                return added.message_id

            delivery, late = await blocked_then(redis_queue, 10, add_delayed)
            lateness.append(late)
            assert delivery.delivery_count == 1
            await redis_queue.ack([delivery])
    finally:
        await other.aclose()

    # Never early; at most DELAYED_LATENESS_SECONDS late, far below the 1 s recheck that
    # was the bound before the doorbell.
    assert min(lateness) >= -P
    assert max(lateness) <= DELAYED_LATENESS_SECONDS
    assert DELAYED_LATENESS_SECONDS < DELAYED_RECHECK_SECONDS / 4


async def test_an_earlier_due_time_than_one_already_parked_wakes_the_blocked_receive(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue
) -> None:
    other = open_queue(redis_url, redis_namespace)
    try:
        await other.add_requests([AddRequest(body=b"later", delay_seconds=30)])

        async def add_earlier() -> str:
            [added] = await other.add_requests([AddRequest(body=b"soon", delay_seconds=0.25)])
            return added.message_id

        delivery, late = await blocked_then(redis_queue, 10, add_earlier)
    finally:
        await other.aclose()

    assert delivery.body == b"soon"
    assert -P <= late <= DELAYED_LATENESS_SECONDS


async def test_a_release_with_delay_by_another_client_wakes_the_blocked_receive(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue
) -> None:
    other = open_queue(redis_url, redis_namespace)
    try:
        [message_id] = await other.add([b"x"])
        first = await receive_one(other, "first")

        async def release() -> str:
            assert await other.release([first], delay_seconds=0.3) == []
            return message_id

        delivery, late = await blocked_then(redis_queue, 10, release)
    finally:
        await other.aclose()

    assert delivery.delivery_count == 2
    assert -P <= late <= DELAYED_LATENESS_SECONDS


async def test_a_woken_receive_that_returns_before_the_due_time_hands_it_to_another(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue
) -> None:
    # The first receive to block gets the ring (a doorbell entry goes to one reader);
    # it gives up before the message is due and must ring again for the second one.
    short = open_queue(redis_url, redis_namespace)
    other = open_queue(redis_url, redis_namespace)
    try:
        entered = spy_blocking(short)
        await short.len()
        early = asyncio.create_task(
            short.receive("short", max_messages=1, wait_seconds=0.3, lease_seconds=60)
        )
        await asyncio.wait_for(entered.wait(), DEADLINE_SECONDS)
        await asyncio.sleep(0.05)

        async def add_delayed() -> str:
            [added] = await other.add_requests([AddRequest(body=b"d", delay_seconds=0.6)])
            return added.message_id

        delivery, late = await blocked_then(redis_queue, 10, add_delayed)
        assert await asyncio.wait_for(early, DEADLINE_SECONDS) == []
    finally:
        await short.aclose()
        await other.aclose()

    assert delivery.body == b"d"
    assert -P <= late <= DELAYED_LATENESS_SECONDS
