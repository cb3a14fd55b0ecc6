"""One bad argument reads the same from the memory and the Redis backend.

The Redis sibling of tests/postgres/test_argument_messages.py: the calls listed in
`SHARED` go through `taskrunner_backends.checks` on both backends, so each raises the
same exception with the same text. A Redis check of its own that drifts fails here,
on a single server and on a partitioned (Redis Cluster) queue, which checks some
arguments itself before routing them to its shards.
"""

from __future__ import annotations

import uuid

import pytest

from taskrunner_backends.memory import InMemoryQueue
from taskrunner_backends.redis import RedisStreamsQueue, open_cluster_from_url
from taskrunner_backends.redis.testing import cluster_harness

from ..argument_calls import BAD_CALLS, refusal

pytestmark = pytest.mark.redis

# A fencing token fits 52 bits on Redis (Lua numbers are doubles), 63 elsewhere: the
# same check, a different bound in the text.
_OWN_BOUND = {"renew(token=-1)", "resign(token=2**63)"}
SHARED = [label for label in BAD_CALLS if label not in _OWN_BOUND]


async def test_bad_arguments_raise_the_same_error_with_the_same_text_as_memory(
    redis_queue: RedisStreamsQueue,
) -> None:
    memory = InMemoryQueue()
    differ = {}
    for label in SHARED:
        expected = await refusal(BAD_CALLS[label], memory)
        assert expected[0] != "no error", f"memory accepted {label}"
        got = await refusal(BAD_CALLS[label], redis_queue)
        if got != expected:
            differ[label] = {"memory": expected, "redis": got}
    assert await redis_queue.len() == 0
    assert differ == {}, "\n".join(f"{k}: {v}" for k, v in differ.items())


async def test_a_fencing_token_is_bounded_at_2_to_the_52_in_the_shared_wording(
    redis_queue: RedisStreamsQueue,
) -> None:
    for call in (
        lambda t: redis_queue.renew_leadership("e", "h", t, ttl_seconds=1),
        lambda t: redis_queue.resign_leadership("e", "h", t),
        lambda t: redis_queue.fire(election="e", token=t, schedule="s", instant=1.0, body=b"x"),
    ):
        with pytest.raises(
            ValueError, match=r"^token must be >= 0 and < 2\*\*52, got 4503599627370496$"
        ):
            await call(2**52)
        await call(2**52 - 1)  # the largest token Lua holds exactly is accepted
    assert await redis_queue.len() == 0


@pytest.mark.cluster
async def test_a_partitioned_queue_raises_the_same_errors_with_the_same_text_as_memory() -> None:
    harness = cluster_harness()
    namespace = f"trarg-{uuid.uuid4().hex[:12]}"
    base = harness.url.split("?", 1)[0]
    queue = await open_cluster_from_url(f"{base}?namespace={namespace}&shards=3", queue_name="q")
    memory = InMemoryQueue()
    differ = {}
    try:
        for label in SHARED:
            expected = await refusal(BAD_CALLS[label], memory)
            got = await refusal(BAD_CALLS[label], queue)
            if got != expected:
                differ[label] = {"memory": expected, "partitioned": got}
        assert await queue.len() == 0
    finally:
        await queue.aclose()
        await harness.cleanup(namespace)
    assert differ == {}, "\n".join(f"{k}: {v}" for k, v in differ.items())
