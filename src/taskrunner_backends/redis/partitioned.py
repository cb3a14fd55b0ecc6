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

Adds. `add` spreads bodies round robin over the shards (one pipelined XADD batch per
shard, in parallel). `add_requests` routes a request with a ``partition_key`` to the
shard that key hashes to (CRC32 mod K), so one key's messages stay on one shard in add
order; a request with a ``unique_key`` and no partition key goes to the shard its unique
key hashes to, so a unique key is unique across the whole queue; other requests go
round robin. A unique key given with a partition key is unique within that partition's
shard (always give one key's messages the same partition key).

Receive. A receive first polls up to ``max_messages`` shards without blocking, in
parallel, starting at a shard that rotates with every call (fairness: no shard is
always read first), with ``max_messages`` split between them. Empty-handed, it blocks
on the shards no other receive of this handle is blocking on (each shard has at most
one blocked read per handle, so a handle with F fetchers holds at most K blocked
connections, not F x K); when one of its shards delivers, the others are ended at once
with ``CLIENT UNBLOCK`` and return what they leased, so nothing leased is ever dropped.
A receive finding every shard watched waits for a watch to end (or
`UNWATCHED_RECHECK_SECONDS`) and polls again; while some shard is watched by nobody, a
block lasts at most that long, so a message there waits at most that long.

Reclaim visits the shards in rotating order until it has ``max_messages``; stats and
len add the shards' figures up (ages: the oldest; consumers: merged by name); dead
letters, purge, delete and consumer clean-up act on every shard; dead-letter listings
merge by time. Leadership, fire records and the worker registry live in shard 0 (one
hash each, as on a single node); schedules therefore add their messages to shard 0.
Results are stored in the shard the id names (an id of no shard: the shard its text
hashes to), under the id as given.

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
import contextlib
import logging
import random
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

from taskrunner.clock import Clock, SystemClock
from taskrunner.errors import BackendUnavailableError, ConfigurationError, QueueClosedError
from taskrunner.queue import (
    Added,
    AddRequest,
    Capabilities,
    ConsumerCleanup,
    ConsumerStats,
    DeadLetter,
    Delivery,
    FireRecord,
    LeaderLease,
    Leadership,
    MessageLookup,
    MessageState,
    QueueAdmin,
    QueueStats,
    Receipt,
    ResultStore,
    ResultWrite,
    Scheduling,
    WorkerInfo,
    WorkerRegistry,
)
from taskrunner.redaction import mask_secrets, mask_url, url_secrets
from taskrunner_backends.checks import check_count, check_deliveries, encode_reason

from .adding import _encode_request
from .arguments import _check_consumer, _milliseconds
from .base import Durability
from .cluster_client import SlotClient, Topology
from .cluster_url import split_cluster_url
from .errors import translate_errors
from .keys import QueueKeys, key_slot, shard_tag
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

_log = logging.getLogger("taskrunner_backends.redis")

#: Most shards one queue may have (each costs K round trips per idle poll and K keys).
MAX_SHARDS = 1024

#: How long receives and reclaims skip a shard after it failed (seconds): doubling from
#: the first to the second figure while it keeps failing. The others go on meanwhile.
SHARD_RETRY_MIN_SECONDS = 0.25
SHARD_RETRY_MAX_SECONDS = 5.0

#: Longest a blocked receive lasts (seconds) while some shard has no blocked reader
#: of this handle: a message on such a shard waits at most this long for a receive.
UNWATCHED_RECHECK_SECONDS = 1.0

_T = TypeVar("_T")

_CLUSTER_CAPABILITIES = msgspec.structs.replace(_CAPABILITIES, ordering="none")


def split_id(text: object, shards: int) -> tuple[int, str] | None:
    """``(shard, inner)`` of a partitioned id or token ``<shard>@<inner>``, or None."""
    if not isinstance(text, str):
        return None
    head, separator, inner = text.partition("@")
    if not separator or not head.isascii() or not head.isdigit() or len(head) > 4:
        return None
    if str(int(head)) != head or int(head) >= shards:
        return None
    return int(head), inner


def _hash_shard(key: str, shards: int) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % shards


def _split_evenly(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class PartitionedQueue:
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
        # Per shard: until when receives skip it after it failed, and the current backoff.
        self._down_until = [0.0] * shards
        self._down_for = [0.0] * shards
        self._watch_ended: asyncio.Event | None = None

    def __repr__(self) -> str:
        return (
            f"PartitionedQueue(queue_name={self._queue_name!r}, shards={self._count}, "
            f"server={self._display!r})"
        )

    # -- parts -------------------------------------------------------------------------

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

    @property
    def admin(self) -> QueueAdmin:
        """This queue: every shard's dead letters, purge and delete."""
        return self

    @property
    def worker_registry(self) -> WorkerRegistry:
        """This queue: the registry hash of shard 0."""
        return self

    @property
    def consumer_cleanup(self) -> ConsumerCleanup:
        """This queue: consumers are removed from every shard's group."""
        return self

    @property
    def scheduling(self) -> Scheduling:
        """This queue: delayed and unique adds routed as the module docstring says."""
        return self

    @property
    def leadership(self) -> Leadership:
        """This queue: leader leases and fire records live in shard 0."""
        return self

    @property
    def results(self) -> ResultStore:
        """This queue: each result lives in the shard its id names."""
        return self

    @property
    def lookup(self) -> MessageLookup:
        """The state of a message by id, asked of the shard its id names."""
        return _Lookup(self)

    @property
    def shards(self) -> tuple[RedisStreamsQueue, ...]:
        """The shard queues, in shard order (for tests and tooling)."""
        return tuple(self._shards)

    # -- lifecycle ---------------------------------------------------------------------

    async def initialize(self) -> None:
        """Check every shard's server and the recorded shard count.

        Raises:
            ConfigurationError: The queue exists with another shard count.
            UnsupportedServerError: A master is too old.
            BackendUnavailableError: The cluster could not be reached.
        """
        self._check_open()
        await self._each(lambda shard: shard.initialize())
        recorded = await self._shards[0]._raw.call("shard count", "GET", self._shard_key)
        if recorded is not None:
            self._check_count(recorded)
            self._count_recorded = True

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

    @property
    def _shard_key(self) -> str:
        return f"{self._meta.stream.removesuffix(':stream')}:shards"

    def _check_count(self, recorded: object) -> None:
        text = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
        if text != str(self._count):
            raise ConfigurationError(
                f"queue {self._queue_name!r} has {text} shards, but this URL asks for "
                f"shards={self._count}: changing the shard count of a live queue is not "
                "supported (it would strand messages); use the recorded count, or drain "
                "the queue and delete it first (taskrunner queue delete)",
                setting="shards",
            )

    async def _record_count(self) -> None:
        if self._count_recorded:
            return
        previous = await self._shards[0]._raw.call(
            "shard count", "SET", self._shard_key, self._count, "NX", "GET"
        )
        if previous is not None:
            self._check_count(previous)
        self._count_recorded = True

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"{self!r} was closed")

    # -- helpers -----------------------------------------------------------------------

    async def _each(self, call: Callable[[RedisStreamsQueue], Awaitable[_T]]) -> list[_T]:
        """`call` on every shard in parallel; the first failure is raised after all ended."""
        return await self._gather([call(shard) for shard in self._shards])

    @staticmethod
    async def _gather(calls: Sequence[Awaitable[_T]]) -> list[_T]:
        # Not a TaskGroup: one shard's failure must not cancel another shard's call
        # halfway (a cancelled receive could strand leased messages until reclaimed).
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes  # type: ignore[return-value]

    def _wrap(self, shard: int, delivery: Delivery) -> Delivery:
        receipt = delivery.receipt
        return Delivery(
            message_id=f"{shard}@{delivery.message_id}",
            body=delivery.body,
            delivery_count=delivery.delivery_count,
            receipt=Receipt(
                consumer=receipt.consumer,
                delivery_count=receipt.delivery_count,
                token=f"{shard}@{receipt.token}",
            ),
        )

    def _unwrap(self, delivery: Delivery) -> tuple[int, Delivery] | None:
        token = split_id(delivery.receipt.token, self._count)
        message = split_id(delivery.message_id, self._count)
        if token is None or message is None or token[0] != message[0]:
            return None
        receipt = delivery.receipt
        inner = Delivery(
            message_id=message[1],
            body=delivery.body,
            delivery_count=delivery.delivery_count,
            receipt=Receipt(
                consumer=receipt.consumer, delivery_count=receipt.delivery_count, token=token[1]
            ),
        )
        return token[0], inner

    def _usable(self, order: list[int]) -> list[int]:
        """`order` without the shards skipped after a failure; all of them if none is left."""
        now = self._clock.monotonic()
        live = [s for s in order if self._down_until[s] <= now]
        return live or order

    def _shard_failed(self, shard: int, error: Exception) -> None:
        """Skip `shard` in receives and reclaims for a while (doubling, capped)."""
        first = self._down_for[shard] == 0
        self._down_for[shard] = min(
            max(2 * self._down_for[shard], SHARD_RETRY_MIN_SECONDS), SHARD_RETRY_MAX_SECONDS
        )
        self._down_until[shard] = self._clock.monotonic() + self._down_for[shard]
        if first:
            _log.warning(
                "%r: shard %d unavailable (%s); receiving from the others, retrying it "
                "with backoff",
                self,
                shard,
                error,
            )

    def _shard_ok(self, shard: int) -> None:
        if self._down_for[shard]:
            _log.info("%r: shard %d is back", self, shard)
        self._down_for[shard] = 0.0
        self._down_until[shard] = 0.0

    def _rotation(self, attribute: str) -> list[int]:
        start = getattr(self, attribute)
        setattr(self, attribute, (start + 1) % self._count)
        return [(start + i) % self._count for i in range(self._count)]

    async def _by_shard(
        self,
        deliveries: Sequence[Delivery],
        call: Callable[[RedisStreamsQueue, list[Delivery]], Awaitable[list[Delivery]]],
    ) -> list[Delivery]:
        """Split `deliveries` by shard, `call` each shard's part in parallel, map back."""
        check_deliveries(deliveries)
        self._check_open()
        lost: list[Delivery] = []
        parts: dict[int, list[tuple[Delivery, Delivery]]] = {}
        for delivery in deliveries:
            unwrapped = self._unwrap(delivery)
            if unwrapped is None:
                lost.append(delivery)  # a receipt this queue never issued holds no lease
            else:
                parts.setdefault(unwrapped[0], []).append((delivery, unwrapped[1]))
        shards = list(parts)
        replies = await self._gather(
            [call(self._shards[s], [inner for _, inner in parts[s]]) for s in shards]
        )
        for s, reply in zip(shards, replies, strict=True):
            outer_of = {id(inner): outer for outer, inner in parts[s]}
            lost.extend(outer_of[id(inner)] for inner in reply)
        if len(lost) > 1:
            order = {id(d): i for i, d in enumerate(deliveries)}
            lost.sort(key=lambda d: order[id(d)])
        return lost

    def _route(self, message_id: str) -> int:
        found = split_id(message_id, self._count)
        return found[0] if found is not None else _hash_shard(message_id, self._count)

    # -- the contract ------------------------------------------------------------------

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue bodies round robin over the shards, in parallel (one batch per shard).

        Raises:
            TypeError: A body is not `bytes` (nothing is added).
            BackendUnavailableError: A master could not be reached; some bodies may
                have been added.
        """
        for body in bodies:
            if not isinstance(body, bytes):
                raise TypeError(f"message body must be bytes, not {type(body).__name__}")
        self._check_open()
        if not bodies:
            return []
        await self._record_count()
        start = self._next_add
        self._next_add = (start + len(bodies)) % self._count
        parts: dict[int, list[int]] = {}
        for index in range(len(bodies)):
            parts.setdefault((start + index) % self._count, []).append(index)
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].add([bodies[i] for i in parts[s]]) for s in shards]
        )
        ids = [""] * len(bodies)
        for s, reply in zip(shards, replies, strict=True):
            for index, message_id in zip(parts[s], reply, strict=True):
                ids[index] = f"{s}@{message_id}"
        return ids

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Lease up to `max_messages` messages from the shards, waiting up to `wait_seconds`.

        See the module docstring for how shards are polled and watched. Not cancel-safe
        (as a single stream): a cancelled receive may leave messages leased until
        reclaimed.

        Raises:
            ValueError: `max_messages` < 1, `wait_seconds` < 0, `lease_seconds` <= 0,
                or a duration that is not finite.
            BackendUnavailableError: A master could not be reached.
            QueueClosedError: The queue is or became closed.
        """
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        _milliseconds("wait_seconds", wait_seconds, positive=False)
        _milliseconds("lease_seconds", lease_seconds, positive=True)
        self._check_open()
        deadline = self._clock.monotonic() + wait_seconds
        while True:
            order = self._usable(self._rotation("_next_receive"))
            got = await self._poll(order, consumer, max_messages, lease_seconds)
            if got:
                return got
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return []
            free = [s for s in order if self._watchers[s] == 0][:max_messages]
            if not free:
                await self._await_watch_end(min(remaining, UNWATCHED_RECHECK_SECONDS))
                continue
            for s in free:
                self._watchers[s] += 1
            try:
                block = remaining
                if any(w == 0 for w in self._watchers):
                    block = min(block, UNWATCHED_RECHECK_SECONDS)
                got = await self._receive_from(
                    free, consumer, max_messages, block, lease_seconds, stop=asyncio.Event()
                )
            finally:
                for s in free:
                    self._watchers[s] -= 1
                if self._watch_ended is not None:
                    self._watch_ended.set()
                    self._watch_ended = None
            if got:
                return got

    async def _poll(
        self, order: list[int], consumer: str, max_messages: int, lease_seconds: float
    ) -> list[Delivery]:
        """Receive without blocking from every shard, in `order`, up to `max_messages`.

        In parallel (`max_messages` split between the shards) when every shard can be
        asked for at least one; else one shard after the other, so a small batch still
        looks at every shard and never leases more than `max_messages`.
        """
        if max_messages >= self._count:
            return await self._receive_from(
                order, consumer, max_messages, 0.0, lease_seconds, stop=None
            )
        return await self._one_by_one(
            order,
            max_messages,
            lambda shard, remaining: shard.receive(
                consumer, max_messages=remaining, wait_seconds=0.0, lease_seconds=lease_seconds
            ),
        )

    async def _one_by_one(
        self,
        order: list[int],
        limit: int,
        call: Callable[[RedisStreamsQueue, int], Awaitable[list[Delivery]]],
    ) -> list[Delivery]:
        """`call(shard, still wanted)` shard after shard in `order` until `limit` deliveries.

        An unreachable shard is skipped for a while (`_shard_failed`); the error is
        raised only when every shard of `order` failed.
        """
        found: list[Delivery] = []
        errors: list[BackendUnavailableError] = []
        for s in order:
            try:
                got = await call(self._shards[s], limit - len(found))
            except BackendUnavailableError as exc:
                self._shard_failed(s, exc)
                errors.append(exc)
                continue
            self._shard_ok(s)
            found.extend(self._wrap(s, d) for d in got)
            if len(found) >= limit:
                break
        if errors and len(errors) == len(order):
            raise errors[0]
        return found

    async def _await_watch_end(self, seconds: float) -> None:
        if self._watch_ended is None:
            self._watch_ended = asyncio.Event()
        ended = self._watch_ended
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await ended.wait()

    async def _receive_from(
        self,
        shards: list[int],
        consumer: str,
        max_messages: int,
        wait_seconds: float,
        lease_seconds: float,
        *,
        stop: asyncio.Event | None,
    ) -> list[Delivery]:
        """Receive from `shards` in parallel, `max_messages` split between them.

        With `stop`, the first shard to deliver sets it and the others return at once
        with whatever they leased; every leased message is returned, and an error is
        raised only when no shard delivered anything.
        """
        shares = _split_evenly(max_messages, len(shards))

        async def one(s: int, share: int) -> list[Delivery]:
            got = await self._shards[s].receive_until(
                consumer,
                max_messages=share,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
                stop=stop,
            )
            if got and stop is not None:
                stop.set()
            return [self._wrap(s, d) for d in got]

        async def guarded(s: int, share: int) -> list[Delivery] | BaseException:
            try:
                got = await one(s, share)
            except BackendUnavailableError as exc:
                # Skipped for a while; the other shards go on (one dead master must not
                # stop the queue).
                self._shard_failed(s, exc)
                return exc
            except Exception as exc:
                if stop is not None:
                    stop.set()
                return exc
            self._shard_ok(s)
            return got

        outcomes = await asyncio.gather(
            *(guarded(s, n) for s, n in zip(shards, shares, strict=True))
        )
        deliveries = [d for o in outcomes if not isinstance(o, BaseException) for d in o]
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        unreachable = [e for e in errors if isinstance(e, BackendUnavailableError)]
        if errors and not deliveries and (len(errors) == len(shards) or errors != unreachable):
            # Every shard failed, or one failed otherwise: the caller backs off.
            raise errors[0]
        for error in errors:
            if error not in unreachable:
                _log.warning("%r: a shard failed while another delivered: %s", self, error)
        return deliveries

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Heartbeat each delivery in its shard (one fenced script per shard, in parallel)."""
        return await self._by_shard(deliveries, lambda shard, part: shard.heartbeat(part))

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Complete each delivery in its shard; returns those not completed by this call."""
        return await self._by_shard(deliveries, lambda shard, part: shard.ack(part))

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Re-add owned deliveries to their own shard, ready at once or after the delay."""
        _milliseconds("delay_seconds", delay_seconds, positive=False)
        return await self._by_shard(
            deliveries, lambda shard, part: shard.release(part, delay_seconds=delay_seconds)
        )

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Dead-letter owned deliveries in their own shard, in the order given.

        Runs of consecutive deliveries of one shard go in one script, one run after the
        other (not in parallel), so the dead letters are listed in the order of the
        batch, as on a single stream. Dead-lettering is rare; the round trips are not.
        """
        check_deliveries(deliveries)
        encode_reason(reason)
        self._check_open()
        lost: list[Delivery] = []
        start = 0
        while start < len(deliveries):
            unwrapped = self._unwrap(deliveries[start])
            end = start + 1
            if unwrapped is not None:
                while end < len(deliveries):
                    after = self._unwrap(deliveries[end])
                    if after is None or after[0] != unwrapped[0]:
                        break
                    end += 1
            lost += await self._by_shard(
                deliveries[start:end], lambda shard, part: shard.dead_letter(part, reason=reason)
            )
            start = end
        return lost

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Reclaim lapsed leases shard by shard, from a rotating start, up to `max_messages`."""
        _milliseconds("lease_seconds", lease_seconds, positive=True)
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        self._check_open()
        return await self._one_by_one(
            self._usable(self._rotation("_next_reclaim")),
            max_messages,
            lambda shard, remaining: shard.reclaim(
                consumer, lease_seconds=lease_seconds, max_messages=remaining
            ),
        )

    async def stats(self) -> QueueStats:
        """Every shard's stats, taken in parallel and added up (not one atomic snapshot)."""
        self._check_open()
        parts = await self._each(lambda shard: shard.stats())
        consumers: dict[str, ConsumerStats] = {}
        for part in parts:
            for c in part.consumers:
                seen = consumers.get(c.name)
                if seen is None:
                    consumers[c.name] = c
                    continue
                idles = [i for i in (seen.idle_seconds, c.idle_seconds) if i is not None]
                consumers[c.name] = ConsumerStats(
                    name=c.name,
                    pending=seen.pending + c.pending,
                    idle_seconds=min(idles) if idles else None,
                )
        return QueueStats(
            ready=sum(p.ready for p in parts),
            in_flight=sum(p.in_flight for p in parts),
            dead=sum(p.dead for p in parts),
            delayed=sum(p.delayed for p in parts),
            oldest_ready_age_seconds=_oldest(p.oldest_ready_age_seconds for p in parts),
            oldest_in_flight_age_seconds=_oldest(p.oldest_in_flight_age_seconds for p in parts),
            consumers=tuple(consumers[name] for name in sorted(consumers)),
        )

    async def len(self) -> int:
        """Ready, delayed and in-flight messages of every shard."""
        self._check_open()
        return sum(await self._each(lambda shard: shard.len()))

    # -- Scheduling --------------------------------------------------------------------

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request in the shard its partition key (or unique key) picks.

        Raises:
            TypeError: A request is not an `AddRequest`, or a field has the wrong type.
            ValueError: A duration is negative or not finite, or a key is empty.
            BackendUnavailableError: A master could not be reached; some of the
                requests may have been added.
        """
        if isinstance(requests, AddRequest):
            raise TypeError("requests must be a sequence of AddRequest, not a single one")
        self._check_open()
        # Every request is checked before any shard adds anything.
        for request in requests:
            _encode_request(request)
        parts: dict[int, list[int]] = {}
        for index, request in enumerate(requests):
            parts.setdefault(self._shard_for(request), []).append(index)
        if not parts:
            return []
        await self._record_count()
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].add_requests([requests[i] for i in parts[s]]) for s in shards]
        )
        added: list[Added] = [Added(message_id="")] * len(requests)
        for s, reply in zip(shards, replies, strict=True):
            for index, one in zip(parts[s], reply, strict=True):
                added[index] = Added(message_id=f"{s}@{one.message_id}", added=one.added)
        return added

    def _shard_for(self, request: AddRequest) -> int:
        key = request.partition_key if request.partition_key is not None else request.unique_key
        if key is not None:
            if not isinstance(key, str) or not key:  # type: ignore[redundant-expr]
                name = "partition_key" if request.partition_key is not None else "unique_key"
                raise ValueError(f"{name} must be a non-empty str, got {key!r}")
            return _hash_shard(key, self._count)
        shard = self._next_add
        self._next_add = (shard + 1) % self._count
        return shard

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Cancel each id in its shard; False for ids of no shard of this queue."""
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        self._check_open()
        ids = list(message_ids)
        flags = [False] * len(ids)
        parts = self._split_ids(ids)
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].cancel([inner for _, inner in parts[s]]) for s in shards]
        )
        for s, reply in zip(shards, replies, strict=True):
            for (index, _), flag in zip(parts[s], reply, strict=True):
                flags[index] = flag
        return flags

    def _split_ids(self, ids: Sequence[object]) -> dict[int, list[tuple[int, str]]]:
        parts: dict[int, list[tuple[int, str]]] = {}
        for index, message_id in enumerate(ids):
            found = split_id(message_id, self._count)
            if found is not None:
                parts.setdefault(found[0], []).append((index, found[1]))
        return parts

    # -- Leadership (shard 0) ----------------------------------------------------------

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """See `RedisStreamsQueue.acquire_leadership` (shard 0)."""
        self._check_open()
        return await self._shards[0].acquire_leadership(name, holder, ttl_seconds=ttl_seconds)

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """See `RedisStreamsQueue.renew_leadership` (shard 0)."""
        self._check_open()
        return await self._shards[0].renew_leadership(name, holder, token, ttl_seconds=ttl_seconds)

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        """See `RedisStreamsQueue.resign_leadership` (shard 0)."""
        self._check_open()
        return await self._shards[0].resign_leadership(name, holder, token)

    async def current_leader(self, name: str) -> LeaderLease | None:
        """See `RedisStreamsQueue.current_leader` (shard 0)."""
        self._check_open()
        return await self._shards[0].current_leader(name)

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        """See `RedisStreamsQueue.fire`; the message goes to shard 0."""
        self._check_open()
        await self._record_count()
        fired = await self._shards[0].fire(
            election=election, token=token, schedule=schedule, instant=instant, body=body
        )
        return None if fired is None else f"0@{fired}"

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        """See `RedisStreamsQueue.fire_records` (shard 0)."""
        self._check_open()
        records = await self._shards[0].fire_records(schedules)
        return {
            name: msgspec.structs.replace(record, message_id=f"0@{record.message_id}")
            for name, record in records.items()
        }

    # -- ResultStore -------------------------------------------------------------------

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result in the shard its id names (see the module docstring)."""
        if isinstance(results, ResultWrite):
            raise TypeError("results must be a sequence of ResultWrite, not a single one")
        self._check_open()
        parts: dict[int, list[ResultWrite]] = {}
        for write in results:
            if not isinstance(write, ResultWrite):
                raise TypeError(f"expected ResultWrite, got {type(write).__name__}")
            if not isinstance(write.message_id, str):
                raise TypeError(f"message ids must be str, not {type(write.message_id).__name__}")
            parts.setdefault(self._route(write.message_id), []).append(write)
        # Every shard checks its part before sending anything, so check them all first.
        for s, part in parts.items():
            self._shards[s].check_results(part)
        await self._gather([self._shards[s].put_results(part) for s, part in parts.items()])

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, read from each id's shard in parallel."""
        ids = self._result_ids(message_ids)
        self._check_open()
        bodies: list[bytes | None] = [None] * len(ids)
        parts: dict[int, list[int]] = {}
        for index, message_id in enumerate(ids):
            parts.setdefault(self._route(message_id), []).append(index)
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].get_results([ids[i] for i in parts[s]]) for s in shards]
        )
        for s, reply in zip(shards, replies, strict=True):
            for index, body in zip(parts[s], reply, strict=True):
                bodies[index] = body
        return bodies

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        """Wait in the id's shard (its result listener; see `RedisStreamsQueue.wait_result`)."""
        self._check_open()
        # A non-str id is refused by the shard, with the same error as a single stream's.
        shard = self._route(message_id) if isinstance(message_id, str) else 0  # type: ignore[redundant-expr]
        return await self._shards[shard].wait_result(message_id, timeout_seconds=timeout_seconds)

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        """Delete the results of `message_ids` in their shards; returns how many existed."""
        ids = self._result_ids(message_ids)
        self._check_open()
        parts: dict[int, list[str]] = {}
        for message_id in dict.fromkeys(ids):
            parts.setdefault(self._route(message_id), []).append(message_id)
        counts = await self._gather(
            [self._shards[s].delete_results(part) for s, part in parts.items()]
        )
        return sum(counts)

    @staticmethod
    def _result_ids(message_ids: Sequence[str]) -> list[str]:
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        ids = list(message_ids)
        for message_id in ids:
            if not isinstance(message_id, str):
                raise TypeError(f"message ids must be str, not {type(message_id).__name__}")
        return ids

    # -- MessageLookup -----------------------------------------------------------------

    async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, asked of its shard (in parallel); None for ids of none."""
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        self._check_open()
        ids = list(message_ids)
        states: list[MessageState | None] = [None] * len(ids)
        parts = self._split_ids(ids)
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].lookup_messages([inner for _, inner in parts[s]]) for s in shards]
        )
        for s, reply in zip(shards, replies, strict=True):
            for (index, _), state in zip(parts[s], reply, strict=True):
                if state is not None:
                    state = msgspec.structs.replace(state, message_id=ids[index])
                states[index] = state
        return states

    # -- QueueAdmin --------------------------------------------------------------------

    def _wrap_dead(self, shard: int, letter: DeadLetter) -> DeadLetter:
        return msgspec.structs.replace(
            letter,
            message_id=f"{shard}@{letter.message_id}",
            original_id=f"{shard}@{letter.original_id}",
        )

    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters of all shards, oldest first."""
        self._check_open()
        parts = await self._each(lambda shard: shard.list_dead_letters(limit=limit))
        letters = [self._wrap_dead(s, d) for s, part in enumerate(parts) for d in part]
        letters.sort(key=lambda d: d.dead_at)
        return letters[:limit]

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        """Move dead letters back to their own shard's queue; returns the new ids."""
        self._check_open()
        if message_ids is None:
            parts = await self._each(lambda shard: shard.retry_dead_letters(None))
            return [f"{s}@{i}" for s, part in enumerate(parts) for i in part]
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        split = self._split_ids(list(message_ids))
        shards = list(split)
        replies = await self._gather(
            [self._shards[s].retry_dead_letters([inner for _, inner in split[s]]) for s in shards]
        )
        return [f"{s}@{i}" for s, reply in zip(shards, replies, strict=True) for i in reply]

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters of every shard (or the named ones); returns how many."""
        self._check_open()
        if message_ids is None:
            return sum(await self._each(lambda shard: shard.purge_dead_letters(None)))
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        split = self._split_ids(list(message_ids))
        counts = await self._gather(
            [self._shards[s].purge_dead_letters([i for _, i in part]) for s, part in split.items()]
        )
        return sum(counts)

    async def purge(self) -> int:
        """Purge every shard; returns how many messages were removed."""
        self._check_open()
        return sum(await self._each(lambda shard: shard.purge()))

    async def delete_queue(self) -> None:
        """Delete every shard's keys and the shard-count record."""
        self._check_open()
        await self._each(lambda shard: shard.delete_queue())
        await self._shards[0]._raw.call("delete queue", "DEL", self._shard_key)
        self._count_recorded = False

    # -- ConsumerCleanup ---------------------------------------------------------------

    async def remove_idle_consumers(self, idle_seconds: float) -> list[str]:
        """Remove idle consumers holding nothing from every shard's group."""
        self._check_open()
        parts = await self._each(lambda shard: shard.remove_idle_consumers(idle_seconds))
        return sorted({name for part in parts for name in part})

    async def remove_consumers(self, names: Sequence[str]) -> list[str]:
        """Remove the named consumers (holding nothing) from every shard's group."""
        self._check_open()
        parts = await self._each(lambda shard: shard.remove_consumers(names))
        return sorted({name for part in parts for name in part})

    # -- WorkerRegistry (shard 0) ------------------------------------------------------

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        """See `RedisStreamsQueue.publish_worker` (shard 0)."""
        self._check_open()
        await self._shards[0].publish_worker(info, ttl_seconds=ttl_seconds)

    async def remove_worker(self, instance: str) -> None:
        """See `RedisStreamsQueue.remove_worker` (shard 0)."""
        self._check_open()
        await self._shards[0].remove_worker(instance)

    async def live_workers(self) -> list[WorkerInfo]:
        """See `RedisStreamsQueue.live_workers` (shard 0)."""
        self._check_open()
        return await self._shards[0].live_workers()


def _oldest(ages: Any) -> float | None:
    known = [age for age in ages if age is not None]
    return max(known) if known else None


class _Lookup:
    """The ``lookup`` part of a `PartitionedQueue`."""

    def __init__(self, queue: PartitionedQueue) -> None:
        self._queue = queue

    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """See `PartitionedQueue.lookup_messages`."""
        return await self._queue.lookup_messages(message_ids)


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
