"""`PartitionedQueue` on a real Redis Cluster: what the conformance suite cannot see.

The cluster is the shipped harness's (``TASKRUNNER_TEST_CLUSTER_URL``, else a private
3 masters + 3 replicas started once per test process). Every test uses its own
namespace and deletes it afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from taskrunner import App, Producer
from taskrunner.errors import BackendUnavailableError, ConfigurationError, QueueClosedError
from taskrunner.queue import AddRequest, Delivery, Receipt
from taskrunner_backends.redis import PartitionedQueue, open_cluster_from_url, open_from_url
from taskrunner_backends.redis.keys import key_slot
from taskrunner_backends.redis.testing import RedisClusterHarness, cluster_harness

from .helpers import eventually

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

LEASE = 30.0


def _url(harness: RedisClusterHarness, namespace: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"namespace": namespace, **options}.items())
    base = harness.url.split("?", 1)[0]
    return f"{base}?{query}"


@pytest.fixture
def cluster() -> Iterator[tuple[RedisClusterHarness, str]]:
    harness = cluster_harness()
    namespace = f"trcl-{uuid.uuid4().hex[:12]}"
    yield harness, namespace
    asyncio.run(harness.cleanup(namespace))


async def _open(cluster: tuple[RedisClusterHarness, str], **options: str) -> PartitionedQueue:
    harness, namespace = cluster
    options.setdefault("shards", "3")
    return await open_cluster_from_url(_url(harness, namespace, **options), queue_name="q")


async def test_three_shards_land_on_three_different_masters(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    try:
        slots = [key_slot(shard.keys.stream) for shard in queue.shards]
        owners = {queue._cluster.nodes_manager.get_node_from_slot(slot).name for slot in slots}
        assert len(owners) == 3, f"shards on {owners} (slots {slots})"
        ids = await queue.add([b"a", b"b", b"c"])
        assert sorted(i.split("@")[0] for i in ids) == ["0", "1", "2"], ids
    finally:
        await queue.delete_queue()
        await queue.aclose()


async def test_a_live_queue_refuses_another_shard_count_until_it_is_deleted(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    await queue.add([b"x"])
    with pytest.raises(ConfigurationError, match="has 3 shards, but this URL asks for shards=4"):
        await _open(cluster, shards="4")
    await queue.delete_queue()
    await queue.aclose()
    other = await _open(cluster, shards="4")
    try:
        assert len(await other.add([b"y"] * 4)) == 4
        with pytest.raises(ConfigurationError, match="has 4 shards"):
            await _open(cluster, shards="3")
    finally:
        await other.delete_queue()
        await other.aclose()


async def test_a_partition_key_keeps_its_messages_on_one_shard_in_dispatch_order(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    app = App(queue="q")

    @app.task
    async def step(n: int) -> None:
        """A step of a workflow."""

    queue = await _open(cluster)
    try:
        producer = Producer(queue, app)
        keyed: list[str] = []
        for n in range(12):
            keyed.append(await producer.dispatch(step, n, partition_key="order-7"))
            await producer.dispatch(step, 100 + n)  # round robin, interleaved
        assert len({i.split("@")[0] for i in keyed}) == 1, keyed
        seen: list[str] = []
        while len(seen) < 24:
            got = await queue.receive("c", max_messages=1, wait_seconds=5, lease_seconds=LEASE)
            assert got, "a dispatched message was not delivered"
            seen.extend(d.message_id for d in got)
            assert await queue.ack(got) == []
        assert [i for i in seen if i in keyed] == keyed
    finally:
        await queue.delete_queue()
        await queue.aclose()


async def test_a_unique_key_is_unique_across_all_shards_and_handles(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    handles = [await _open(cluster) for _ in range(3)]
    try:
        added = []
        for round_ in range(6):
            handle = handles[round_ % 3]
            [one] = await handle.add_requests([AddRequest(body=b"u", unique_key="invoice-42")])
            added.append(one)
        assert [a.added for a in added] == [True] + [False] * 5
        assert {a.message_id for a in added} == {added[0].message_id}
        assert await handles[0].len() == 1
    finally:
        await handles[0].delete_queue()
        for handle in handles:
            await handle.aclose()


async def _blocked_reads(queue: PartitionedQueue, namespace: str) -> int:
    """Blocked XREADGROUPs of `namespace`'s shards on every master (CLIENT LIST)."""
    count = 0
    for node in queue._cluster.get_primaries():
        client = aioredis.Redis(host=node.host, port=int(node.port))
        try:
            for entry in await client.client_list():
                if entry.get("cmd") == "xreadgroup" and "b" in entry.get("flags", ""):
                    count += 1
        finally:
            await client.aclose()
    return count


async def test_concurrent_receives_of_one_handle_block_once_per_shard_and_lose_nothing(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    """Five fetchers waiting on one handle hold three blocked reads, not fifteen.

    When a message arrives, one receive returns it; the receive that blocked on several
    shards ends its other blocks at once, and nothing is leased that nobody returned.
    """
    _, namespace = cluster
    queue = await _open(cluster)
    producer = await _open(cluster)
    tasks = [
        asyncio.create_task(
            queue.receive(f"f{i}", max_messages=10, wait_seconds=20, lease_seconds=LEASE)
        )
        for i in range(5)
    ]
    try:
        await eventually(
            lambda: _blocked_reads(queue, namespace),
            lambda n: n == 3,
            what="one blocked read per shard",
        )
        await producer.add([b"one"])

        async def finished() -> list[asyncio.Task[list[Delivery]]]:
            return [t for t in tasks if t.done()]

        done = await eventually(finished, lambda ended: len(ended) >= 1, what="a receive returned")
        returned = [d for t in done for d in t.result()]
        assert [d.body for d in returned] == [b"one"]
        stats = await producer.stats()
        assert stats.in_flight == 1, "leased without being returned"
        assert await _blocked_reads(queue, namespace) <= 3
    finally:
        await queue.aclose()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        await producer.delete_queue()
        await producer.aclose()
    # The receives still waiting when the handle closed raise QueueClosedError.
    for outcome in outcomes:
        assert isinstance(outcome, list | QueueClosedError), outcome


async def test_receipts_and_ids_naming_another_or_no_shard_are_refused(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster)
    try:
        [message_id] = await queue.add([b"m"])
        [delivery] = await queue.receive("c", max_messages=1, wait_seconds=5, lease_seconds=LEASE)
        shard, _, rest = delivery.receipt.token.partition("@")
        other = str((int(shard) + 1) % 3)
        forged = [
            f"{other}@{rest}",
            f"9@{rest}",
            f"0{shard}@{rest}",
            rest,
            f"x@{rest}",
            "",
        ]
        for token in forged:
            stale = Delivery(
                message_id=delivery.message_id,
                body=delivery.body,
                delivery_count=delivery.delivery_count,
                receipt=Receipt(
                    consumer=delivery.receipt.consumer,
                    delivery_count=delivery.receipt.delivery_count,
                    token=token,
                ),
            )
            assert await queue.ack([stale]) == [stale], f"token {token!r} completed the message"
        assert (await queue.stats()).in_flight == 1
        bad_ids = [f"{other}@{message_id.split('@')[1]}", "3@1-0", "1-0", "@1-0", "a@b"]
        assert await queue.cancel(bad_ids) == [False] * len(bad_ids)
        states = await queue.lookup.lookup([message_id, "9@1-0", "1-0"])
        assert states[0] is not None
        assert states[0].message_id == message_id
        assert states[1:] == [None, None]
        assert await queue.ack([delivery]) == []
    finally:
        await queue.delete_queue()
        await queue.aclose()


async def test_durable_adds_wait_for_a_replica_and_claim_the_capability(
    cluster: tuple[RedisClusterHarness, str],
) -> None:
    queue = await _open(cluster, durable="replica")
    try:
        assert queue.capabilities.durable_enqueue
        ids = await queue.add([b"a", b"b", b"c"])
        assert len(ids) == 3
        [added] = await queue.add_requests([AddRequest(body=b"d", delay_seconds=60)])
        assert added.added
    finally:
        await queue.delete_queue()
        await queue.aclose()
    plain = await _open(cluster)
    try:
        assert not plain.capabilities.durable_enqueue
    finally:
        await plain.aclose()


async def test_a_durable_add_without_any_replica_raises_instead_of_claiming_it_is_safe(
    redis_url: str, redis_namespace: str
) -> None:
    queue = await open_from_url(
        f"{redis_url}?namespace={redis_namespace}&durable=replica", queue_name="q"
    )
    try:
        info = await queue._raw.call("info", "INFO", "replication")
        if b"connected_slaves:0" not in info:
            pytest.skip("this server has replicas")
        with pytest.raises(BackendUnavailableError, match="no replica received the messages"):
            await queue.add([b"a"])
    finally:
        await queue.aclose()
