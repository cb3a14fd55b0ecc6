"""The ACL documented in docs/redis.md is enough for everything taskrunner does.

The test reads the command list and key pattern from the documentation itself, creates
exactly that user on a private server, and drives producer, runner, reclaimer, delayed
retries, dead-letter administration, the worker registry, consumer clean-up and queue
deletion through it. A command the code uses but the documentation omits fails with
NOPERM here (before this test, ``dead-letters retry --all`` did, for XREVRANGE).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from taskrunner import App, Producer, Runner, RunnerConfig, current_task, open_queue
from taskrunner.errors import BackendError
from taskrunner.queue import WorkerInfo
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.client import RawClient
from taskrunner_backends.redis.testing import age_lease, remove_payload
from tests.servers import RedisServer

from .helpers import eventually

pytestmark = pytest.mark.redis

_DOCS = Path(__file__).resolve().parents[2] / "docs" / "redis.md"
_NAMESPACE = "aclns"
_PASSWORD = "acl-test-password"


def documented_acl() -> tuple[list[str], str]:
    """(commands, key pattern) of the "With ACLs" paragraph of docs/redis.md."""
    text = _DOCS.read_text()
    start = text.index("**With ACLs**")
    paragraph = text[start : text.index("\n\n", start)]
    pattern = re.search(r"`(~[^`]+)`", paragraph)
    assert pattern is not None, "the ACL paragraph names no key pattern"
    commands = re.findall(r"`([A-Z][A-Z]+)`", paragraph)
    assert len(commands) > 20, f"found only {commands} in the ACL paragraph"
    return sorted(set(commands)), pattern.group(1)


def test_the_documented_acl_is_read_from_the_docs() -> None:
    commands, pattern = documented_acl()

    assert pattern == "~namespace:*"
    assert {"XREVRANGE", "EVALSHA", "XPENDING", "XCLAIM"} <= set(commands)


@pytest.fixture
def acl_url(redis_server_factory: Callable[..., RedisServer]) -> str:
    server = redis_server_factory()
    commands, pattern = documented_acl()
    rules = ["on", f">{_PASSWORD}", "resetkeys", pattern.replace("namespace", _NAMESPACE)]
    rules.append("-@all")

    async def create() -> None:
        admin = RawClient(aioredis.Redis.from_url(server.url))
        try:
            # Commands of newer servers (XACKDEL) are documented "where it exists".
            known = await admin.call("command info", "COMMAND", "INFO", *commands)
            present = [c for c, info in zip(commands, known, strict=True) if info is not None]
            allowed = [f"+{command.lower()}" for command in present]
            await admin.call("acl", "ACL", "SETUSER", "worker", *rules, *allowed)
            # The test must not pass on the default user's rights: lock it out.
            await admin.call("acl", "ACL", "SETUSER", "default", "off")
        finally:
            await admin.client.aclose()

    asyncio.run(create())
    return f"redis://worker:{_PASSWORD}@127.0.0.1:{server.port}/0?namespace={_NAMESPACE}"


async def test_everything_taskrunner_does_works_with_exactly_the_documented_acl(
    acl_url: str,
) -> None:
    app = App("acl")
    runs: dict[int, int] = {}

    @app.task(max_retries=1)
    async def job(n: int) -> None:
        runs[n] = current_task().delivery_count
        if n % 5 == 0:
            raise ValueError("dead on purpose")
        if n % 3 == 0 and current_task().delivery_count == 1:
            raise ValueError("retried with a delay")

    async with open_queue(acl_url, "acl") as queue:
        assert isinstance(queue, RedisStreamsQueue)
        await Producer(queue, app).dispatch_many(job, list(range(1, 21)))
        config = RunnerConfig(
            lease_seconds=3.0, retry_base_seconds=0.05, retry_max_seconds=0.1, block_seconds=0.2
        )
        runner = Runner(queue, app, config)
        await runner.run(burst=True)

        assert sorted(runs) == list(range(1, 21))
        stats = await queue.stats()
        assert (stats.ready, stats.delayed, stats.in_flight, stats.dead) == (0, 0, 0, 4)

        # A crashed worker's lease, taken over by the reclaimer.
        await queue.add([b"abandoned"])
        [held] = await queue.receive("crashed", max_messages=1, wait_seconds=0, lease_seconds=0.05)
        taken = await eventually(
            lambda: queue.reclaim("rescuer", lease_seconds=5, max_messages=1),
            bool,
            what="reclaimed",
        )
        assert await queue.heartbeat(taken) == []
        assert await queue.heartbeat([held]) == [held]
        assert await queue.dead_letter(taken, reason="abandoned") == []

        # A released message whose payload is deleted under its next lease.
        await queue.add([b"vanishing"])
        [first] = await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=5)
        assert await queue.release([first]) == []
        [again] = await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=5)
        assert await age_lease(queue, again, 60)
        assert await remove_payload(queue, again)
        assert await queue.reclaim("rescuer", lease_seconds=5, max_messages=1) == []

        admin = queue.admin
        assert admin is not None
        letters = await admin.list_dead_letters()
        assert len(letters) == 6
        assert letters[-1].original_id == first.message_id
        assert letters[-1].delivery_count == 2
        assert len(await admin.retry_dead_letters([letters[0].message_id])) == 1
        assert len(await admin.retry_dead_letters()) == 5  # all: XREVRANGE
        assert await admin.purge() == 6
        await queue.add([b"x"])
        await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=5)
        assert await admin.purge_dead_letters() == 0

        registry = queue.worker_registry
        assert registry is not None
        await registry.publish_worker(
            WorkerInfo(instance="w", workers=1, busy=0, average_seconds=None, seen_at=0),
            ttl_seconds=5,
        )
        assert [w.instance for w in await registry.live_workers()] == ["w"]
        await registry.remove_worker("w")
        cleanup = queue.consumer_cleanup
        assert cleanup is not None
        await cleanup.remove_idle_consumers(0)
        await cleanup.remove_consumers(["a"])
        await admin.delete_queue()
        assert await queue.len() == 0


async def test_keys_outside_the_documented_pattern_are_refused(acl_url: str) -> None:
    # Proves the user really is restricted: the same code in another namespace fails.
    foreign = acl_url.replace(f"namespace={_NAMESPACE}", "namespace=elsewhere")
    async with open_queue(foreign, "acl") as queue:
        with pytest.raises(BackendError, match=r"NOPERM|permission|refused"):
            await queue.add([b"x"])
