"""Cancelling a blocked receive: a caller's cancellation is never turned into anything else."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from taskrunner import QueueClosedError
from taskrunner_backends.redis import RedisStreamsQueue

from .helpers import eventually

pytestmark = pytest.mark.redis


async def test_a_callers_cancel_stays_a_cancel_even_on_a_closed_queue(
    redis_url: str, redis_namespace: str
) -> None:
    # A client the queue does not own: closing the queue leaves the connection usable.
    client = aioredis.Redis.from_url(redis_url)
    queue = RedisStreamsQueue(client, queue_name="q", namespace=redis_namespace)
    reading = asyncio.Event()
    original = queue._blocking_read

    async def spy(*args: Any, **kwargs: Any) -> Any:
        reading.set()
        return await original(*args, **kwargs)

    queue._blocking_read = spy  # type: ignore[method-assign]
    await queue.len()  # initialised, so the receive goes straight to its scripts
    receive = asyncio.create_task(
        queue.receive("c", max_messages=1, wait_seconds=30, lease_seconds=60)
    )
    await asyncio.sleep(0)  # the receive is waiting for its first script's reply
    await queue.aclose()  # closed before the read blocks: aclose cancels nothing
    await asyncio.wait_for(reading.wait(), 10)
    await eventually(lambda: asyncio.sleep(0, bool(queue._blocking)), bool, what="read blocks")

    receive.cancel()  # the caller's own cancellation

    try:
        with pytest.raises(asyncio.CancelledError):
            await receive
    finally:
        await client.aclose()


async def test_aclose_turns_a_blocked_receive_into_queue_closed(
    redis_queue: RedisStreamsQueue,
) -> None:
    receive = asyncio.create_task(
        redis_queue.receive("c", max_messages=1, wait_seconds=30, lease_seconds=60)
    )
    await eventually(
        lambda: asyncio.sleep(0, bool(redis_queue._blocking)), bool, what="read blocks"
    )

    await redis_queue.aclose()

    with pytest.raises(QueueClosedError):
        await receive
