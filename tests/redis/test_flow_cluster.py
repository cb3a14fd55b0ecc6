"""Flow control on a partitioned queue over a real Redis Cluster: routing and refusals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from taskrunner.queue import AddRequest, Flow
from taskrunner_backends.redis import PartitionedQueue, open_cluster_from_url
from taskrunner_backends.redis.partitioned_shards import _hash_shard, split_id
from taskrunner_backends.redis.testing import RedisClusterHarness, cluster_harness

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


@pytest.fixture
def cluster() -> Iterator[tuple[RedisClusterHarness, str]]:
    harness = cluster_harness()
    namespace = f"trcl-{uuid.uuid4().hex[:12]}"
    yield harness, namespace
    asyncio.run(harness.cleanup(namespace))


async def _open(
    cluster: tuple[RedisClusterHarness, str], shards: int = 3, name: str = "q"
) -> PartitionedQueue:
    harness, namespace = cluster
    base = harness.url.split("?", 1)[0]
    url = f"{base}?namespace={namespace}&shards={shards}"
    return await open_cluster_from_url(url, queue_name=name)


async def test_a_flow_keys_messages_all_go_to_its_shard_and_its_limit_holds(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    try:
        for key in ("a", "b", "c", "d"):
            flow = Flow(key=key, concurrency=2)
            added = await queue.add_requests([AddRequest(body=key.encode(), flow=flow)] * 5)
            shards = set()
            for a in added:
                split = split_id(a.message_id, 3)
                assert split is not None
                shards.add(split[0])
            assert shards == {_hash_shard(key, 3)}
        held = await asyncio.gather(
            *(
                queue.receive(f"w{i}", max_messages=3, wait_seconds=0, lease_seconds=30)
                for i in range(8)
            )
        )
        by_key: dict[bytes, int] = {}
        for d in (d for batch in held for d in batch):
            by_key[d.body] = by_key.get(d.body, 0) + 1
            assert d.delivery_count == 1
        assert by_key == {b"a": 2, b"b": 2, b"c": 2, b"d": 2}
        assert (await queue.stats()).ready == 12
    finally:
        await queue.aclose()


async def test_flows_that_no_shard_could_hold_exactly_are_refused(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    try:
        good = AddRequest(body=b"good")
        shared_rate = AddRequest(body=b"x", flow=Flow(key="a", rate=1.0, rate_key="global"))
        with pytest.raises(ValueError, match="rate_key"):
            await queue.add_requests([good, shared_rate])
        elsewhere = AddRequest(body=b"x", partition_key="p", flow=Flow(key="a"))
        with pytest.raises(ValueError, match="partition_key"):
            await queue.add_requests([good, elsewhere])
        with pytest.raises(ValueError, match="rate_key"):
            await queue.add_relayed([shared_rate], ["r1"], record_seconds=60)
        assert await queue.len() == 0
        # The rate counting on the key itself, or a partition key equal to it, is fine.
        own = [
            AddRequest(body=b"1", flow=Flow(key="a", rate=1.0, rate_key="a")),
            AddRequest(body=b"2", partition_key="a", flow=Flow(key="a")),
        ]
        assert all(a.added for a in await queue.add_requests(own))
    finally:
        await queue.aclose()


async def test_one_shard_takes_any_flow(cluster: tuple[RedisClusterHarness, str]) -> None:
    # Another queue name: the fixture's clean-up opens "q" with the harness's 3 shards.
    queue = await _open(cluster, shards=1, name="one")
    try:
        flow = Flow(key="a", rate=0.001, rate_key="global")
        other = Flow(key="b", rate=0.001, rate_key="global")
        await queue.add_requests(
            [AddRequest(body=b"a", flow=flow), AddRequest(body=b"b", flow=other)]
        )
        got = await queue.receive("w", max_messages=5, wait_seconds=0, lease_seconds=30)
        assert [d.body for d in got] == [b"a"]
        assert await queue.ack(got) == []
        assert await queue.receive("w", max_messages=5, wait_seconds=0, lease_seconds=30) == []
    finally:
        await queue.aclose()
