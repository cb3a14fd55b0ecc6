"""Results and lookup work with exactly the ACL docs/redis.md documents (see test_acl)."""

from __future__ import annotations

import asyncio

import pytest

from taskrunner.queue import ResultWrite
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url

from .helpers import DEADLINE_SECONDS, eventually, receive_one
from .test_acl import acl_url

__all__ = ["acl_url"]  # the fixture, imported for this module's tests

pytestmark = pytest.mark.redis


async def test_results_and_lookup_work_with_exactly_the_documented_acl(acl_url: str) -> None:
    queue = await open_from_url(acl_url, queue_name="acl-results")
    assert isinstance(queue, RedisStreamsQueue)
    try:
        waiter = asyncio.create_task(queue.wait_result("w", timeout_seconds=DEADLINE_SECONDS))

        async def parked() -> int:
            listener = queue.result_listener
            return 0 if listener is None else listener.parked

        await eventually(parked, lambda n: n == 1, what="waiter parked")
        await queue.put_results([ResultWrite(message_id="w", body=b"ok", ttl_seconds=60)])
        assert await waiter == b"ok"
        assert queue.result_listener is not None
        assert queue.result_listener.failures == 0
        assert await queue.get_results(["w", "x"]) == [b"ok", None]
        assert await queue.delete_results(["w"]) == 1

        [message_id] = await queue.add([b"m"])
        delivery = await receive_one(queue, "a")
        [running] = await queue.lookup.lookup([message_id])
        assert running is not None
        assert running.state == "running"
        assert await queue.release([delivery], delay_seconds=60) == []
        [delayed] = await queue.lookup.lookup([message_id])
        assert delayed is not None
        assert delayed.state == "delayed"
        await queue.add([b"d"])
        dying = await receive_one(queue, "a")
        assert await queue.dead_letter([dying], reason="r") == []
        [dead] = await queue.lookup.lookup([dying.message_id])
        assert dead is not None
        assert dead.state == "dead"
        letters = await queue.list_dead_letters()
        assert await queue.purge_dead_letters([letters[0].message_id]) == 1
        await queue.delete_queue()
    finally:
        await queue.aclose()
