"""The shards of a `PartitionedQueue`: ids that name them, routing, failures.

Ids and receipts name the shard: a message id is ``<shard>@<stream id>`` and a receipt
token ``<shard>@<shard token>``, so heartbeat, ack, release and dead-letter batches are
split by shard and sent to the shards in parallel (one script per shard per batch). A
receipt or id whose prefix is no shard of this queue is a receipt this queue never
issued (lost) or an unknown id.

A shard that fails is skipped by receives and reclaims for a while
(`SHARD_RETRY_MIN_SECONDS`, doubling up to `SHARD_RETRY_MAX_SECONDS`); the others go on.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from redis.asyncio.cluster import RedisCluster

from taskrunner.clock import Clock
from taskrunner.errors import ConfigurationError, QueueClosedError
from taskrunner.queue import Delivery, Receipt
from taskrunner_backends.checks import check_deliveries

from .keys import QueueKeys
from .queue import RedisStreamsQueue

__all__ = ["SHARD_RETRY_MAX_SECONDS", "SHARD_RETRY_MIN_SECONDS", "ShardsBase", "split_id"]

_log = logging.getLogger("taskrunner_backends.redis")

#: How long receives and reclaims skip a shard after it failed (seconds): doubling from
#: the first to the second figure while it keeps failing. The others go on meanwhile.
SHARD_RETRY_MIN_SECONDS = 0.25
SHARD_RETRY_MAX_SECONDS = 5.0

_T = TypeVar("_T")


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


class ShardsBase:
    """What every part of `PartitionedQueue` shares: its shards, routing and failures.

    `PartitionedQueue` composes the parts (`partitioned_delivery`,
    `partitioned_parts`) and sets the state below in its ``__init__``.
    """

    _cluster: RedisCluster
    _clock: Clock
    _owns_client: bool
    _display: str
    _shards: list[RedisStreamsQueue]
    _count: int
    _meta: QueueKeys
    _queue_name: str
    _closed: bool
    _count_recorded: bool
    # Where the next add, receive and reclaim starts (rotations).
    _next_add: int
    _next_receive: int
    _next_reclaim: int
    # Per shard: how many receives of this handle block on it.
    _watchers: list[int]
    # Per shard: until when receives skip it after it failed, and the current backoff.
    _down_until: list[float]
    _down_for: list[float]
    _watch_ended: asyncio.Event | None

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

    def _split_ids(self, ids: Sequence[object]) -> dict[int, list[tuple[int, str]]]:
        parts: dict[int, list[tuple[int, str]]] = {}
        for index, message_id in enumerate(ids):
            found = split_id(message_id, self._count)
            if found is not None:
                parts.setdefault(found[0], []).append((index, found[1]))
        return parts
