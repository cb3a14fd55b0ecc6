"""Shared helpers of the Redis backend tests."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis

from taskrunner.queue import Delivery
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.client import Arg, RawClient

T = TypeVar("T")

# Upper bound for anything we wait for; generous for a loaded 2-core CI machine.
DEADLINE_SECONDS = 20.0


async def eventually(
    attempt: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool],
    *,
    what: str,
    within: float = DEADLINE_SECONDS,
    interval: float = 0.02,
) -> T:
    """Call `attempt` until `accept(result)`; fail naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = await attempt()
        if accept(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not true after {within} s (last: {result!r})")
        await asyncio.sleep(interval)


def open_queue(url: str, namespace: str, queue_name: str = "q") -> RedisStreamsQueue:
    """Another handle on a queue (the caller closes it)."""
    return RedisStreamsQueue(
        aioredis.Redis.from_url(url), queue_name=queue_name, namespace=namespace, owns_client=True
    )


async def receive_one(queue: RedisStreamsQueue, consumer: str) -> Delivery:
    """Receive exactly one delivery (waiting up to the deadline)."""
    [delivery] = await queue.receive(
        consumer, max_messages=1, wait_seconds=DEADLINE_SECONDS, lease_seconds=60
    )
    return delivery


async def pending_of(queue: RedisStreamsQueue, entry_id: str) -> tuple[str, int] | None:
    """(owner, PEL delivery count) of a pending entry, straight from XPENDING.

    The owner is the group consumer: the caller's consumer name, ``~`` and the lease in
    milliseconds (see `holder`).
    """
    reply = await queue._raw.call(
        "xpending", "XPENDING", queue.keys.stream, queue.keys.group, entry_id, entry_id, 1
    )
    if not reply:
        return None
    return reply[0][1].decode(), int(reply[0][3])


def holder(consumer: str, lease_seconds: float) -> str:
    """The group consumer that holds leases of `lease_seconds` for `consumer`."""
    return f"{consumer}~{round(lease_seconds * 1000)}"


class CountingRawClient(RawClient):
    """A `RawClient` that counts round trips (one per pipeline write) by action."""

    def __init__(self, client: aioredis.Redis) -> None:
        super().__init__(client)
        self.round_trips: Counter[str] = Counter()

    async def pipeline(
        self, action: str, commands: Sequence[Sequence[Arg]], *, read_timeout: float | None = None
    ) -> list[Any]:
        self.round_trips[action] += 1
        return await super().pipeline(action, commands, read_timeout=read_timeout)


def count_round_trips(queue: RedisStreamsQueue) -> Counter[str]:
    """Count `queue`'s round trips to the server from now on, by action (a live Counter)."""
    counting = CountingRawClient(queue._client)
    queue._raw = counting
    return counting.round_trips
