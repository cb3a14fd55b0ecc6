"""Hooks for tests and the conformance harness: reach under the contract on purpose.

None of these are for production code. They manipulate the server state behind a
queue so tests can produce, without sleeping, situations that otherwise take time or
a misbehaving client:

* `age_lease` makes a lease look expired (XCLAIM to the current owner with
  ``IDLE``, ``JUSTID``): owner and delivery count stay, only the idle time moves.
* `remove_payload` deletes the stream entry under a pending message (as trimming or a
  stray XDEL would).
* `inject_raw` adds an entry with arbitrary fields, bypassing `RedisStreamsQueue.add`.

Age a lease *before* removing its payload: XCLAIM (which `age_lease` uses) drops a
pending entry whose payload is gone.

Each hook takes a `RedisStreamsQueue` or a `PartitionedQueue` (Redis Cluster): for the
latter it acts on the shard the delivery's receipt names (`inject_raw`: on shard 0).

`RedisClusterHarness` is the conformance harness for ``redis+cluster://`` URLs::

    python -m taskrunner_conformance taskrunner_backends.redis.testing:cluster_harness

runs the suite on the cluster at ``TASKRUNNER_TEST_CLUSTER_URL`` or, without it, on a
private local cluster of 3 masters and 3 replicas it starts (see `local_cluster`).
"""

from __future__ import annotations

import asyncio
import atexit
import math
import os
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis.asyncio as aioredis

from taskrunner.queue import Delivery, Queue

from .keys import namespace_pattern
from .partitioned import PartitionedQueue, open_cluster_from_url, split_id
from .queue import RedisStreamsQueue
from .receipts import _locate
from .scripts import SCRIPTS
from .url import join_url

__all__ = [
    "CLUSTER_LEASE_SECONDS",
    "RedisClusterHarness",
    "age_lease",
    "cluster_harness",
    "entry_id",
    "inject_raw",
    "remove_payload",
]

AnyQueue = RedisStreamsQueue | PartitionedQueue


def _shard_of(
    queue: AnyQueue, delivery: Delivery | str
) -> tuple[RedisStreamsQueue, Delivery | str]:
    """The shard queue holding `delivery` (or id) and the delivery as that shard issued it."""
    if isinstance(queue, RedisStreamsQueue):
        return queue, delivery
    count = len(queue.shards)
    if isinstance(delivery, str):
        found = split_id(delivery, count)
        if found is None:
            raise ValueError(f"not an id of {queue!r}: {delivery!r}")
        return queue.shards[found[0]], found[1]
    unwrapped = queue._unwrap(delivery)
    if unwrapped is None:
        raise ValueError(f"not a receipt issued by {queue!r}: {delivery.receipt!r}")
    return queue.shards[unwrapped[0]], unwrapped[1]


def entry_id(delivery_or_id: Delivery | str) -> str:
    """The stream entry currently holding a delivery's message (or the id itself)."""
    if isinstance(delivery_or_id, str):
        return delivery_or_id
    located = _locate(delivery_or_id)
    if located is None:
        raise ValueError(f"not a receipt issued by RedisStreamsQueue: {delivery_or_id.receipt!r}")
    return located.entry_id


def _stream_of(queue: RedisStreamsQueue, delivery_or_id: Delivery | str) -> str:
    """The stream of the entry: its priority's (named by the receipt), else priority 0's."""
    located = None if isinstance(delivery_or_id, str) else _locate(delivery_or_id)
    return queue.keys.level_stream(0 if located is None else located.level)


async def age_lease(queue: AnyQueue, delivery: Delivery | str, seconds: float) -> bool:
    """Make the message's current lease look idle for `seconds`, whoever holds it.

    Returns:
        True when the message was pending (and is now aged), False otherwise.
    """
    queue, delivery = _shard_of(queue, delivery)
    await queue.initialize()
    reply = await queue._raw.run_script(
        "age lease",
        SCRIPTS["age_lease"],
        (_stream_of(queue, delivery),),
        (queue.keys.group, entry_id(delivery), max(0, math.ceil(seconds * 1000))),
    )
    return bool(reply)


async def remove_payload(queue: AnyQueue, delivery_or_id: Delivery | str) -> bool:
    """XDEL the stream entry under a (pending) message; returns whether it existed."""
    queue, delivery_or_id = _shard_of(queue, delivery_or_id)
    await queue.initialize()
    deleted = await queue._raw.call(
        "remove payload", "XDEL", _stream_of(queue, delivery_or_id), entry_id(delivery_or_id)
    )
    return bool(deleted)


async def inject_raw(queue: AnyQueue, fields: Mapping[str, bytes | str]) -> str:
    """XADD an entry with exactly `fields` (bypassing the encoder); returns its id.

    On a `PartitionedQueue` the entry goes to shard 0 and the id has its ``0@`` prefix.
    """
    if isinstance(queue, PartitionedQueue):
        return "0@" + await inject_raw(queue.shards[0], fields)
    await queue.initialize()
    flat: list[str | bytes] = []
    for name, value in fields.items():
        flat.extend((name, value))
    reply = await queue._raw.call("inject raw", "XADD", queue.keys.stream, "*", *flat)
    return reply.decode() if isinstance(reply, bytes) else str(reply)


#: The lease the cluster harness grants (seconds, before the suite's time scale): longer
#: than the single-server harness's, since every shard adds round trips.
CLUSTER_LEASE_SECONDS = 2.0


def _with_options(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(options)
    return join_url(parts._replace(query=urlencode(query)))


class RedisClusterHarness:
    """The conformance harness for `PartitionedQueue` on a real Redis Cluster.

    Args:
        url: A ``redis+cluster://`` URL (its ``shards`` option, default 3 here, is kept;
            each test's namespace is added).
        lease_seconds: The lease the suite grants.

    Hooks: `age_lease`, `inject_raw`, `remove_payload` and `storage_size`. `cleanup`
    deletes the namespace's keys on every master (SCAN MATCH per master, never FLUSH).
    """

    def __init__(self, url: str, *, lease_seconds: float = CLUSTER_LEASE_SECONDS) -> None:
        options = dict(parse_qsl(urlsplit(url).query))
        self.url = url if "shards" in options else _with_options(url, shards="3")
        self.lease_seconds = lease_seconds

    async def open_queue(self, namespace: str) -> Queue:
        """A new handle on the queue of `namespace` (its own cluster client)."""
        return await open_cluster_from_url(
            _with_options(self.url, namespace=namespace), queue_name="q"
        )

    async def advance(self, seconds: float) -> None:
        """Real time passes: the servers measure leases on their own clocks."""
        await asyncio.sleep(seconds)

    async def cleanup(self, namespace: str) -> None:
        """Delete the namespace's keys on every master, one UNLINK per key."""
        queue = await open_cluster_from_url(
            _with_options(self.url, namespace=namespace), queue_name="q"
        )
        try:
            cluster = queue._cluster
            for node in cluster.get_primaries():
                client = aioredis.Redis(
                    host=node.host,
                    port=int(node.port),
                    username=cluster.nodes_manager.connection_kwargs.get("username"),
                    password=cluster.nodes_manager.connection_kwargs.get("password"),
                )
                try:
                    pattern = namespace_pattern(namespace)
                    keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
                    for key in keys:
                        # One key per UNLINK: a cluster refuses multi-key commands across slots.
                        await client.unlink(key)
                finally:
                    await client.aclose()
        finally:
            await queue.aclose()

    async def age_lease(self, queue: Queue, delivery: Delivery, seconds: float) -> None:
        """Age the lease in the shard the receipt names (see `age_lease`)."""
        assert isinstance(queue, PartitionedQueue)
        await age_lease(queue, delivery, seconds)

    async def inject_raw(self, queue: Queue) -> None:
        """Add an entry without a body field to shard 0."""
        assert isinstance(queue, PartitionedQueue)
        # No "b" field: not a taskrunner message.
        await inject_raw(queue, {"garbage": b"\xff\x00 not a message"})

    async def remove_payload(self, queue: Queue, delivery: Delivery) -> None:
        """XDEL the entry under the delivery in its shard."""
        assert isinstance(queue, PartitionedQueue)
        await remove_payload(queue, delivery)

    async def storage_size(self, queue: Queue) -> int:
        """Entries of every shard's streams, delayed set and origins map."""
        assert isinstance(queue, PartitionedQueue)
        total = 0
        for shard in queue.shards:
            keys = shard.keys
            replies = await shard._raw.pipeline(
                "storage size",
                [
                    ("XLEN", keys.stream),
                    ("XLEN", keys.dead),
                    ("XLEN", keys.parked),
                    ("ZCARD", keys.delayed),
                    ("HLEN", keys.origins),
                ],
            )
            total += sum(int(r) for r in replies if isinstance(r, int))
        return total


_LOCAL: list[object] = []


def cluster_harness() -> RedisClusterHarness:
    """A harness on ``TASKRUNNER_TEST_CLUSTER_URL``, else on a private local cluster.

    The private cluster (3 masters, 3 replicas, of the server kind
    ``TASKRUNNER_TEST_SERVER`` names) is started once per process and stopped at exit.
    """
    given = os.environ.get("TASKRUNNER_TEST_CLUSTER_URL")
    if given:
        return RedisClusterHarness(given)
    if not _LOCAL:
        from .local_cluster import LocalCluster

        cluster = LocalCluster.from_env()
        cluster.start()
        atexit.register(cluster.cleanup)
        _LOCAL.append(cluster)
    local = _LOCAL[0]
    return RedisClusterHarness(local.url(shards=3))  # type: ignore[attr-defined]
