"""Connection loss: typed errors while the server is away, recovery when it is back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from taskrunner.errors import BackendUnavailableError
from taskrunner.queue import Delivery, QueueStats
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url

from ..servers import RedisServer, free_port
from .helpers import eventually

pytestmark = pytest.mark.redis


async def test_stopped_server_raises_backend_unavailable_and_work_resumes_after_restart(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory(appendonly=True, appendfsync="always")
    queue = await open_from_url(server.url + "?namespace=conn", queue_name="q")
    try:
        await queue.add([b"before"])

        server.stop()
        with pytest.raises(BackendUnavailableError):
            await queue.add([b"while down"])
        with pytest.raises(BackendUnavailableError):
            await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=60)
        with pytest.raises(BackendUnavailableError):
            await queue.stats()

        server.restart()
        deliveries = await eventually(
            lambda: _receive_or_none(queue),
            lambda result: result is not None,
            what="receive works again after restart",
        )
        assert deliveries is not None
        assert [d.body for d in deliveries] == [b"before"]
        assert await queue.ack(deliveries) == []
    finally:
        await queue.aclose()


async def _receive_or_none(queue: RedisStreamsQueue) -> list[Delivery] | None:
    try:
        return await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=60)
    except BackendUnavailableError:
        return None


async def test_server_killed_during_a_blocking_receive_raises_backend_unavailable(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    queue = await open_from_url(server.url, queue_name="q")
    try:
        waiter = asyncio.create_task(
            queue.receive("a", max_messages=1, wait_seconds=30, lease_seconds=60)
        )
        await asyncio.sleep(0.1)  # let it block

        server.stop(kill=True)

        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(waiter, 20)
    finally:
        await queue.aclose()


async def test_open_from_url_fails_fast_when_nothing_listens() -> None:
    with pytest.raises(BackendUnavailableError):
        await open_from_url(f"redis://127.0.0.1:{free_port()}/0", queue_name="q")


async def test_recovered_data_survives_restart_with_aof_always(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory(appendonly=True, appendfsync="always")
    queue = await open_from_url(server.url, queue_name="q")
    try:
        await queue.add([b"1", b"2"])
        [leased] = await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=60)

        server.restart(kill=True)

        stats = await eventually(
            lambda: _stats_or_none(queue), lambda s: s is not None, what="stats after restart"
        )
        assert stats is not None
        assert (stats.ready, stats.in_flight) == (1, 1)
        assert await queue.heartbeat([leased]) == []
    finally:
        await queue.aclose()


async def _stats_or_none(queue: RedisStreamsQueue) -> QueueStats | None:
    try:
        return await queue.stats()
    except BackendUnavailableError:
        return None


async def test_a_cancelled_call_ends_cancelled_even_when_its_write_completes(
    redis_queue: RedisStreamsQueue,
) -> None:
    # redis-py writes through asyncio.wait_for, which on Python 3.11 can return the
    # write's result instead of the cancellation; the runner's loops would then go on.
    # Cancelling after every possible number of loop steps hits that window for sure.
    await redis_queue.initialize()
    swallowed = []
    for fresh_connection in (False, True):
        for steps in range(24):
            if fresh_connection:
                # The connection handshake is written through wait_for too.
                await redis_queue._client.connection_pool.disconnect()
            else:
                await redis_queue.len()
            task = asyncio.create_task(redis_queue.len())
            for _ in range(steps):
                await asyncio.sleep(0)
            if task.cancel():
                await asyncio.wait({task})
                if not task.cancelled():
                    swallowed.append((fresh_connection, steps))
    assert swallowed == []


async def test_unix_socket_url_with_db_and_namespace(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory(unixsocket=True)
    queue = await open_from_url(f"unix://{server.socket_path}?db=3&namespace=sock", queue_name="q")
    try:
        [message_id] = await queue.add([b"over the socket"])
        [delivery] = await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=60)
        assert (delivery.message_id, delivery.body) == (message_id, b"over the socket")
        assert await queue.ack([delivery]) == []
        assert "unix://" in repr(queue)
        assert queue._client.connection_pool.connection_kwargs["db"] == 3
    finally:
        await queue.aclose()
