"""Flow control on a partitioned queue over a real Redis Cluster: routing and refusals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from taskrunner.queue import AddRequest, Flow, FlowWait
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


async def test_a_shared_rate_key_routes_its_flows_to_one_shard_and_both_limits_hold(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    try:
        # Per-customer concurrency 1 under one rate of the task (burst 3, then 1 / 1000 s).
        def call(customer: str, body: bytes) -> AddRequest:
            flow = Flow(key=f"call:{customer}", concurrency=1, rate=0.001, burst=3, rate_key="call")
            return AddRequest(body=body, flow=flow)

        added = await queue.add_requests(
            [
                call("a", b"a1"),
                call("a", b"a2"),
                call("b", b"b1"),
                call("c", b"c1"),
                call("d", b"d1"),
            ]
        )
        shards = set()
        for a in added:
            split = split_id(a.message_id, 3)
            assert split is not None
            shards.add(split[0])
        assert shards == {_hash_shard("call", 3)}
        got = await queue.receive("w", max_messages=10, wait_seconds=0, lease_seconds=30)
        # The rate allows 3; a's concurrency 1 keeps a2 waiting whatever the rate says.
        assert sorted(d.body for d in got) == [b"a1", b"b1", b"c1"]
        assert await queue.ack(got) == []
        assert await queue.receive("w", max_messages=10, wait_seconds=0, lease_seconds=30) == []
    finally:
        await queue.aclose()


async def test_a_second_route_for_a_flow_key_is_refused_before_anything_is_added(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    try:
        good = AddRequest(body=b"good")
        shared = Flow(key="k", rate=1.0, rate_key="global")
        assert (await queue.add_requests([AddRequest(body=b"1", flow=shared)]))[0].added
        before = await queue.len()
        for other in (
            Flow(key="k"),  # routed by the key itself
            Flow(key="k", rate=1.0),  # its rate counts on the key
            Flow(key="k", rate=1.0, rate_key="elsewhere"),
        ):
            with pytest.raises(ValueError, match="routed by 'global'"):
                await queue.add_requests([good, AddRequest(body=b"x", flow=other)])
            with pytest.raises(ValueError, match="routed by 'global'"):
                await queue.add_relayed(
                    [AddRequest(body=b"x", flow=other)], ["r1"], record_seconds=60
                )
        # Two routes for one new key within one batch.
        with pytest.raises(ValueError, match="routed by"):
            await queue.add_requests(
                [
                    AddRequest(body=b"x", flow=Flow(key="n")),
                    AddRequest(body=b"y", flow=Flow(key="n", rate=1.0, rate_key="global")),
                ]
            )
        with pytest.raises(ValueError, match="partition_key"):
            await queue.add_requests([AddRequest(body=b"x", partition_key="k", flow=shared)])
        assert await queue.len() == before
        # The same route again, and a partition key equal to it, are fine.
        again = [
            AddRequest(body=b"2", flow=shared),
            AddRequest(body=b"3", partition_key="global", flow=shared),
        ]
        assert all(a.added for a in await queue.add_requests(again))
        # Purge forgets the routes with the messages.
        await queue.purge()
        assert (await queue.add_requests([AddRequest(body=b"4", flow=Flow(key="k"))]))[0].added
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


async def test_lookup_names_the_slot_holders_by_their_queue_ids(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    try:
        flow = Flow(key="a", concurrency=1)
        added = await queue.add_requests([AddRequest(body=b"1", flow=flow)] * 2)
        [held] = await queue.receive("w", max_messages=5, wait_seconds=0, lease_seconds=30)
        assert held.message_id == added[0].message_id
        [state] = await queue.lookup_messages([added[1].message_id])
        assert state is not None
        assert state.state == "ready"
        assert state.waiting == FlowWait(key="a", reason="slot", holders=(held.message_id,))
    finally:
        await queue.aclose()
