"""`add_relayed` on Redis Cluster: a resent outbox row meets its record, whatever the shard.

A keyless request of the partitioned queue goes to the shard its relay id hashes to,
not to the next shard in turn, so sending a batch again (a relay that died before its
DELETE committed) adds nothing, on one shard and on three.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from taskrunner.queue import AddRequest
from taskrunner_backends.redis import open_cluster_from_url
from taskrunner_backends.redis.testing import cluster_harness

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


@pytest.fixture(params=["1", "3"], ids=["1-shard", "3-shards"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    harness = cluster_harness()
    namespace = f"trcl-{uuid.uuid4().hex[:12]}"
    base = harness.url.split("?", 1)[0]
    yield f"{base}?namespace={namespace}&shards={request.param}"
    asyncio.run(harness.cleanup(namespace))


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Any]:
    # Not "q": the harness opens that name with one shard to clean up.
    queue = await open_cluster_from_url(url, queue_name="relayed")
    try:
        yield queue
    finally:
        await queue.aclose()


async def test_a_resent_batch_adds_nothing_and_returns_the_first_ids(url: str) -> None:
    async with opened(url) as queue:
        requests = [AddRequest(body=f"row {n}".encode()) for n in range(30)]
        ids = [str(1000 + n) for n in range(30)]
        first = await queue.add_relayed(requests, ids, record_seconds=60)
        again = await queue.add_relayed(requests, ids, record_seconds=60)
        assert all(a.added for a in first)
        assert [a.message_id for a in again] == [a.message_id for a in first]
        assert not any(a.added for a in again)
        assert (await queue.stats()).ready == 30


async def test_keyed_rows_follow_their_key_and_still_meet_their_record(url: str) -> None:
    async with opened(url) as queue:
        requests = [AddRequest(body=b"k", partition_key=f"customer-{n % 4}") for n in range(12)]
        ids = [f"k{n}" for n in range(12)]
        first = await queue.add_relayed(requests, ids, record_seconds=60)
        again = await queue.add_relayed(requests, ids, record_seconds=60)
        assert [a.message_id for a in again] == [a.message_id for a in first]
        assert (await queue.stats()).ready == 12
