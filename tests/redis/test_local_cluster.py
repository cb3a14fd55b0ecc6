"""The shipped test harness `LocalCluster`: forms a sound cluster, fails over, rejoins.

One cluster per module (3 masters, 3 replicas) of the server TASKRUNNER_TEST_SERVER
names. The failover test changes who is master, so every other test reads the
topology it finds instead of assuming the one `start` made.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.cluster
from redis.crc import key_slot

from taskrunner_backends.redis.local_cluster import (
    TOTAL_SLOTS,
    ClusterError,
    LocalCluster,
    ServerNotFoundError,
    find_server_binary,
    server_kind_from_env,
)

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    local = LocalCluster.from_env()
    local.start()
    try:
        # The offsets write (see LocalCluster) must leave no key behind.
        for node in local.masters:
            with _direct(node.port) as direct:
                assert direct.dbsize() == 0
        yield local
    finally:
        local.cleanup()


def _client(cluster: LocalCluster) -> redis.cluster.RedisCluster:
    startup = [
        redis.cluster.ClusterNode(node.host, node.port)  # type: ignore[no-untyped-call]
        for node in cluster.masters
    ]
    return redis.cluster.RedisCluster(startup_nodes=startup, decode_responses=True)


def _direct(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True)


def test_three_masters_each_with_one_replica_cover_every_slot(cluster: LocalCluster) -> None:
    masters, replicas = cluster.masters, cluster.replicas
    assert len(masters) == 3
    assert len(replicas) == 3
    assert all(node.running and node.pid is not None for node in cluster.nodes)
    assert {id(cluster.master_of(replica)) for replica in replicas} == {id(m) for m in masters}
    ranges = sorted(r for master in masters for r in master.slots)
    covered = [slot for first, last in ranges for slot in range(first, last + 1)]
    assert covered == list(range(TOTAL_SLOTS))
    for master in masters:
        for first, last in master.slots:
            assert cluster.master_for_slot(first) is master
            assert cluster.master_for_slot(last) is master
    for node in cluster.nodes:
        with _direct(node.port) as direct:
            info = direct.execute_command("CLUSTER INFO")
            assert info["cluster_state"] == "ok"
            assert int(info["cluster_slots_ok"]) == TOTAL_SLOTS
            if node in replicas:
                assert direct.info("replication")["master_link_status"] == "up"
    with pytest.raises(ValueError, match="served no slots"):
        cluster.wait_for_failover(replicas[0])


def test_a_key_written_through_a_cluster_client_reads_back(cluster: LocalCluster) -> None:
    with _client(cluster) as client:
        assert len(client.get_primaries()) == 3
        assert len(client.get_replicas()) == 3
        for index in range(20):
            client.set(f"roundtrip:{index}", str(index))
        assert [client.get(f"roundtrip:{index}") for index in range(20)] == [
            str(index) for index in range(20)
        ]


def test_url_and_startup_nodes_name_the_masters(cluster: LocalCluster) -> None:
    startup = ",".join(f"127.0.0.1:{node.port}" for node in cluster.masters)
    assert cluster.startup_nodes == startup
    assert cluster.url() == f"redis+cluster://{startup}"
    assert cluster.url(namespace="ns", shards=4) == (
        f"redis+cluster://{startup}?shards=4&namespace=ns"
    )
    assert cluster.url(shards=2, socket_timeout=1.5, retry_on_timeout=True) == (
        f"redis+cluster://{startup}?shards=2&socket_timeout=1.5&retry_on_timeout=true"
    )


def test_killed_master_fails_over_keeps_replicated_writes_and_rejoins_as_replica(
    cluster: LocalCluster,
) -> None:
    key = "failover:{local-cluster}"
    slot = key_slot(key.encode())
    old_master = cluster.master_for_slot(slot)
    (replica,) = cluster.replicas_of(old_master)
    with _client(cluster) as client:
        client.set(key, "before")
    with _direct(old_master.port) as direct:
        # Acknowledged by the replica, so the failover must not lose it.
        assert direct.execute_command("WAIT", 1, 1000) >= 1

    cluster.kill(old_master)
    assert old_master.pid is None
    new_master = cluster.wait_for_failover(old_master)

    assert new_master is replica
    assert new_master.role == "master"
    assert cluster.master_for_slot(slot) is new_master
    assert old_master not in cluster.masters
    with _client(cluster) as fresh:
        assert fresh.get(key) == "before"
        fresh.set(key, "after")

    cluster.restart(old_master)

    assert old_master.running
    assert old_master.role == "replica"
    assert cluster.master_of(old_master) is new_master
    with _direct(old_master.port) as direct:
        info = direct.info("replication")
        assert info["role"] == "slave"
        assert info["master_port"] == new_master.port
        assert info["master_link_status"] == "up"
        # A replica serves reads of its master's slots after READONLY: the data is there.
        direct.execute_command("READONLY")
        with _direct(new_master.port) as master:
            assert master.execute_command("WAIT", 1, 1000) >= 1
        assert direct.get(key) == "after"
    assert len(cluster.masters) == 3
    assert len(cluster.replicas) == 3


def test_a_server_that_cannot_start_is_an_error_that_leaves_nothing_behind() -> None:
    false = shutil.which("false")
    assert false is not None
    local = LocalCluster(masters=1, replicas_per_master=1, binary=Path(false))
    with pytest.raises(ClusterError, match="did not start"):
        local.start()
    assert local.directory is not None
    assert not local.directory.exists()
    assert not any(node.running for node in local.nodes)


def test_server_choice_follows_the_environment_and_fails_clearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert server_kind_from_env({}) == "auto"
    assert server_kind_from_env({"TASKRUNNER_TEST_SERVER": " Valkey "}) == "valkey"
    with pytest.raises(ValueError, match="redis, valkey or auto"):
        server_kind_from_env({"TASKRUNNER_TEST_SERVER": "memcached"})
    with pytest.raises(ValueError, match="redis, valkey or auto"):
        find_server_binary("memcached")  # type: ignore[arg-type]
    monkeypatch.setenv("PATH", os.devnull)
    with pytest.raises(ServerNotFoundError, match="redis-server is not on PATH"):
        find_server_binary("redis")
