"""`PartitionedQueue`: one logical queue over K shard streams of a Redis Cluster.

How it works. Shard ``i`` of queue ``q`` is a complete `RedisStreamsQueue` whose keys
carry the hash tag ``q#i.<salt>`` (`keys.shard_tag`: the salt puts shard i's slot in
the i-th K-th of the slot range, so K shards on K masters with contiguous slot ranges
land one per master). Each shard talks to its slot's master through a `SlotClient`, so
every command and every Lua script of a shard touches only keys of one slot, and every
guarantee of the single-stream queue (fencing, leases carried in consumer names,
release, delays, the doorbell, results, lookup) holds per shard unchanged.

Ids and receipts name the shard: a message id is ``<shard>@<stream id>`` and a receipt
token ``<shard>@<shard token>``, so heartbeat, ack, release and dead-letter batches are
split by shard and sent to the shards in parallel (one script per shard per batch). A
receipt or id whose prefix is no shard of this queue is a receipt this queue never
issued (lost) or an unknown id.

Where each part is: `partitioned_shards` (ids naming shards, routing, a failed
shard's backoff), `partitioned_delivery` (adds, receive, reclaim, the fenced lease
operations, cancel), `partitioned_parts` (stats, leadership, results, lookup, admin,
worker registry); they are mixins composed here, as `RedisStreamsQueue`'s are.

Shard count. The count is recorded in shard 0 (key ``<namespace>:{<shard 0 tag>}:shards``)
by the first add. Opening a queue whose recorded count differs from the URL's raises
`ConfigurationError`: changing K on a live queue would strand the messages of the
shards that disappear (or hide new ones from old readers). Drain and delete the queue
(`delete_queue` removes the record) to change it.

Ordering: ``none`` across the queue (each shard is FIFO; a partition key keeps one
key's messages in order on one shard).
"""

from __future__ import annotations

import asyncio
import random

import msgspec
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

from taskrunner.clock import Clock, SystemClock
from taskrunner.errors import ConfigurationError
from taskrunner.queue import (
    CONTRACT_VERSION,
    Capabilities,
)
from taskrunner.queue_parts import (
    AdminOnSelf,
    ConsumerCleanupOnSelf,
    LeadershipOnSelf,
    LookupOnSelf,
    ResultsOnSelf,
    SchedulingOnSelf,
    WorkerRegistryOnSelf,
)
from taskrunner.redaction import mask_secrets, mask_url, url_secrets

from .base import Durability
from .cluster_client import SlotClient, Topology
from .cluster_url import split_cluster_url
from .errors import translate_errors
from .keys import QueueKeys, key_slot, shard_tag
from .partitioned_delivery import UNWATCHED_RECHECK_SECONDS, DeliveryMixin
from .partitioned_parts import PartsMixin
from .partitioned_shards import SHARD_RETRY_MAX_SECONDS, SHARD_RETRY_MIN_SECONDS, split_id
from .queue import (
    _CAPABILITIES,
    DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
    DEFAULT_SOCKET_TIMEOUT_SECONDS,
    RedisStreamsQueue,
    _durable_option,
)

__all__ = [
    "MAX_SHARDS",
    "SHARD_RETRY_MAX_SECONDS",
    "SHARD_RETRY_MIN_SECONDS",
    "UNWATCHED_RECHECK_SECONDS",
    "PartitionedQueue",
    "open_cluster_from_url",
    "split_id",
]

#: Most shards one queue may have (each costs K round trips per idle poll and K keys).
MAX_SHARDS = 1024

_CLUSTER_CAPABILITIES = msgspec.structs.replace(_CAPABILITIES, ordering="none")


class PartitionedQueue(
    DeliveryMixin,
    PartsMixin,
    AdminOnSelf,
    WorkerRegistryOnSelf,
    ConsumerCleanupOnSelf,
    SchedulingOnSelf,
    LeadershipOnSelf,
    ResultsOnSelf,
    LookupOnSelf,
):
    """A `taskrunner.queue.Queue` spread over `shards` streams of a Redis Cluster.

    Args:
        cluster: A ``redis.asyncio.cluster.RedisCluster``; closed by `aclose` only when
            `owns_client` is true. Its decoding settings do not matter.
        queue_name: The queue; each shard's hash tag starts with it.
        shards: How many shard streams (1 to `MAX_SHARDS`).
        namespace: Key prefix shared by all queues of one application.
        clock: Bounds the waits of `receive`; leases and delays run on the servers'
            clocks (each shard's master's).
        durable: As for `RedisStreamsQueue`: each shard's adds wait for one replica
            (``"replica"``) or one replica's fsynced AOF (``"aof"``).

    Every optional part of `RedisStreamsQueue` is offered, with the same guarantees per
    message (see the module docstring for where each part lives). Ordering across the
    queue is ``none``.
    """

    contract_version = CONTRACT_VERSION  # what the conformance suite checks

    def __init__(
        self,
        cluster: RedisCluster,
        *,
        queue_name: str,
        shards: int,
        namespace: str = "taskrunner",
        clock: Clock | None = None,
        owns_client: bool = False,
        durable: Durability = "",
        _display: str | None = None,
    ) -> None:
        if not isinstance(cluster, RedisCluster):
            raise TypeError(
                "cluster must be a redis.asyncio.cluster.RedisCluster, "
                f"not {type(cluster).__name__}"
            )
        wrong_type = isinstance(shards, bool) or not isinstance(shards, int)
        if wrong_type or not 1 <= shards <= MAX_SHARDS:
            raise ConfigurationError(
                f"shards must be a whole number from 1 to {MAX_SHARDS}, got {shards!r}",
                setting="shards",
            )
        self._cluster = cluster
        self._clock: Clock = clock or SystemClock()
        self._owns_client = owns_client
        self._display = _display or "redis cluster"
        tags = [shard_tag(queue_name, i, shards) for i in range(shards)]
        topology = Topology(cluster)
        self._shards = [
            RedisStreamsQueue(
                cluster,  # type: ignore[arg-type]
                queue_name=queue_name,
                namespace=namespace,
                clock=self._clock,
                _display=f"{self._display} shard {i}",
                durable=durable,
                _shard=tag,
                _raw=SlotClient(topology, key_slot("{" + tag + "}")),
            )
            for i, tag in enumerate(tags)
        ]
        self._count = shards
        self._meta = QueueKeys(namespace=namespace, queue_name=queue_name, shard=tags[0])
        self._queue_name = queue_name
        self._closed = False
        self._count_recorded = False
        # Rotations start anywhere, so handles receiving one message at a time (each
        # can block on one shard only) do not all start on shard 0.
        start = random.randrange(shards)
        self._next_add = start
        self._next_receive = start
        self._next_reclaim = start
        self._watchers = [0] * shards
        self._down_until = [0.0] * shards
        self._down_for = [0.0] * shards
        self._watch_ended: asyncio.Event | None = None

    def __repr__(self) -> str:
        return (
            f"PartitionedQueue(queue_name={self._queue_name!r}, shards={self._count}, "
            f"server={self._display!r})"
        )

    # -- parts -------------------------------------------------------------------------
    # admin, worker_registry, consumer_cleanup, scheduling, leadership, results and lookup
    # come from the taskrunner.queue_parts bases: the methods are DeliveryMixin's and
    # PartsMixin's.

    @property
    def requires_heartbeat(self) -> bool:
        """Always True, as for each shard."""
        return True

    @property
    def capabilities(self) -> Capabilities:
        """Those of `RedisStreamsQueue`, with ordering ``none`` (each shard is FIFO).

        Without ``browse``: a listing paged over every shard at once is not
        implemented (a single-shard queue's shard can be browsed on its own).
        """
        return msgspec.structs.replace(
            self._shards[0].capabilities, ordering=_CLUSTER_CAPABILITIES.ordering, browse=False
        )

    # -- lifecycle ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every shard (blocked receives raise `QueueClosedError`); idempotent."""
        if self._closed:
            return
        self._closed = True
        for shard in self._shards:
            await shard.aclose()
        if self._owns_client:
            with translate_errors("close"):
                await self._cluster.aclose()


async def open_cluster_from_url(
    url: str, *, queue_name: str, clock: Clock | None = None
) -> PartitionedQueue:
    """Open `queue_name` on the Redis Cluster of a ``redis+cluster://`` URL.

    ``redis+cluster://[[user]:password@]host:port[,host:port...][?shards=K&namespace=NAME&
    <redis-py options>]``; ``rediss+cluster://`` uses TLS. Socket timeouts default as for
    ``redis://`` URLs. The cluster and every shard's master are checked (and the
    recorded shard count compared) before this returns.

    Raises:
        ConfigurationError: A malformed URL, an unknown option, or a shard count that
            differs from the one recorded for the queue.
        UnsupportedServerError: A master is too old.
        BackendUnavailableError: The cluster could not be reached.
    """
    target = split_cluster_url(url)
    target.kwargs.setdefault("socket_timeout", DEFAULT_SOCKET_TIMEOUT_SECONDS)
    target.kwargs.setdefault("socket_connect_timeout", DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS)
    try:
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            **target.kwargs,
        )
    except (ValueError, TypeError, RedisClusterException) as exc:
        problem = mask_secrets(str(exc), url_secrets(url))
        raise ConfigurationError(
            f"invalid Redis Cluster URL {mask_url(url)}: {problem}", setting="url"
        ) from None
    queue: PartitionedQueue | None = None
    try:
        queue = PartitionedQueue(
            cluster,
            queue_name=queue_name,
            shards=target.shards,
            namespace=target.namespace,
            clock=clock,
            owns_client=True,
            durable=_durable_option(target.durable, url),
            _display=mask_url(url),
        )
        await queue.initialize()
    except BaseException:
        if queue is not None:
            await queue.aclose()
        else:
            await cluster.aclose()
        raise
    return queue
