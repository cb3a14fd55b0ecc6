"""Browsing with ``body_bytes`` on Redis: the script cuts the body on the server.

Measured by the server's own count of bytes sent to clients (``INFO stats``
``total_net_output_bytes``) on a private server, so no other test's traffic counts:
a page with a 50 MB message in it sends kilobytes; the same page uncut sends the 50 MB,
which shows the measure would catch a full read.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from taskrunner_backends.redis import RedisStreamsQueue
from tests.servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LARGE = 50 * 1024 * 1024


async def _sent(client: aioredis.Redis) -> int:
    info = await client.info("stats")
    return int(info["total_net_output_bytes"])


async def test_a_50_mb_body_is_cut_on_the_server(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    large = bytes(range(256)) * (LARGE // 256)
    client = aioredis.Redis.from_url(server.url)
    queue = RedisStreamsQueue(
        aioredis.Redis.from_url(server.url), queue_name="q", namespace="cut", owns_client=True
    )
    try:
        ids = await queue.add([b"small", large, b""])
        # The large one in flight, the other two waiting: both listings are measured.
        held = await queue.receive("c1", max_messages=2, wait_seconds=0, lease_seconds=60)
        assert [d.message_id for d in held] == ids[:2]
        assert await queue.release(held[:1]) == []
        part = queue.browse
        await part.browse("waiting", body_bytes=200)  # scripts loaded, group read once

        before = await _sent(client)
        waiting = await part.browse("waiting", body_bytes=200)
        in_flight = await part.browse("in_flight", body_bytes=200)
        cut_sent = await _sent(client) - before

        before = await _sent(client)
        whole = await part.browse("in_flight")
        whole_sent = await _sent(client) - before
    finally:
        await queue.aclose()
        await client.aclose()

    assert sorted((m.body, m.body_size) for m in waiting) == [(b"", None), (b"small", None)]
    [listed] = in_flight
    assert (listed.message_id, listed.body, listed.body_size) == (ids[1], large[:200], LARGE)
    assert listed.consumer == "c1"
    # Both pages and two INFO replies: a few kilobytes, not 50 MB.
    assert cut_sent < 64 * 1024, cut_sent
    assert whole[0].body == large
    assert whole[0].body_size is None
    assert whole_sent >= LARGE


async def test_body_bytes_that_is_no_size_is_refused(redis_queue: RedisStreamsQueue) -> None:
    for bad in (-1, 1.5, "200", True):
        with pytest.raises(ValueError, match="body_bytes"):
            await redis_queue.browse.browse("waiting", body_bytes=bad)  # type: ignore[arg-type]


async def test_an_entry_that_is_no_message_is_cut_too(
    redis_queue: RedisStreamsQueue, redis_url: str
) -> None:
    await redis_queue.add([b"first"])
    # Written by someone else: its fields are listed as evidence, cut like a body.
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.xadd(redis_queue._keys.stream, {"x": b"y" * 5000})
    finally:
        await raw.aclose()
    page = await redis_queue.browse.browse("waiting", body_bytes=100)
    assert [len(m.body) for m in page] == [5, 100]
    assert page[1].body_size is not None
    assert page[1].body_size > 5000
