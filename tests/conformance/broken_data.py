"""Broken in-memory backends for the data-shape, admin, stats, ordering and batch properties.

Like `tests.conformance.broken`, each class has one defect, of the kind a real backend
has when it works for the examples its author tried: a reason column of 1024
characters, a latin-1 client, a size limit, a counter that restarts, a listing in the
wrong order. `BROKEN_DATA` maps a factory name to the harness factory and the property
whose failure names the defect; `tests.conformance.broken.BROKEN` includes it. Run one
with ``python -m taskrunner_conformance tests.conformance.broken_data:fifo_per_handle``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence

import msgspec

from taskrunner.queue import Capabilities, DeadLetter, Delivery, Queue, QueueStats
from taskrunner_backends.memory import InMemoryQueue, _Message

from .harnesses import (
    MAX_BATCH,
    BatchLimitedQueue,
    SubclassHarness,
    subclass_factory,
)

__all__ = ["BROKEN_DATA"]

REASON_COLUMN = 1024
BODY_LIMIT = 512 * 1024


class TruncatesReasons(InMemoryQueue):
    """Dead-letter reasons are cut to 1024 characters (a VARCHAR(1024) column)."""

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        return await super().dead_letter(deliveries, reason=reason[:REASON_COLUMN])


class MangledReasons(InMemoryQueue):
    """Reasons go through latin-1 with replacement (a client configured for latin-1)."""

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        mangled = reason.encode("latin-1", "replace").decode("latin-1")
        return await super().dead_letter(deliveries, reason=mangled)


class TruncatesLargeBodies(InMemoryQueue):
    """Bodies above 512 KiB are cut to 512 KiB (a value-size limit, silently applied)."""

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        # What is not bytes stays wrong (str, bytearray) or fails to slice: TypeError either way.
        return await super().add([body[:BODY_LIMIT] for body in bodies])


class ReusesIdsAfterPurge(InMemoryQueue):
    """Purge restarts the id counter (a table truncated with its sequence)."""

    async def purge(self) -> int:
        count = await super().purge()
        self._store.sequence = itertools.count(1)
        return count


class RetryKeepsOldIds(InMemoryQueue):
    """Retried dead letters go back on the queue under their original message id."""

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        self._check_open()
        store = self._store
        chosen = list(store.dead) if message_ids is None else list(message_ids)
        now = store.clock.monotonic()
        moved = []
        for key in chosen:
            letter = store.dead.pop(key, None)
            if letter is None:
                continue
            store.messages[letter.original_id] = _Message(letter.original_id, letter.body, now)
            store.ready.append(letter.original_id)
            moved.append(letter.original_id)
        if moved:
            store.notify()
        return moved


class PurgeLeavesDelayed(InMemoryQueue):
    """Purge deletes ready and in-flight messages but not those waiting out a delay."""

    async def purge(self) -> int:
        store = self._store
        schedule = list(store.delayed)
        kept = {
            message_id: store.messages[message_id]
            for _, _, message_id in schedule
            if message_id in store.messages
        }
        count = await super().purge() - len(kept)
        store.messages.update(kept)
        store.delayed.extend(schedule)
        heapq.heapify(store.delayed)
        return count


class StatsCountDelayedAsReady(InMemoryQueue):
    """stats reports delayed messages as ready."""

    async def stats(self) -> QueueStats:
        stats = await super().stats()
        return msgspec.structs.replace(stats, ready=stats.ready + stats.delayed, delayed=0)


class StatsCountLapsedAsReady(InMemoryQueue):
    """stats reports leases that lapsed (but were not reclaimed) as ready."""

    async def stats(self) -> QueueStats:
        stats = await super().stats()
        now = self._store.clock.monotonic()
        lapsed = sum(now - m.touched_at > m.lease_seconds for m in self._store.in_flight.values())
        return msgspec.structs.replace(
            stats, ready=stats.ready + lapsed, in_flight=stats.in_flight - lapsed
        )


class StatsWithoutAges(InMemoryQueue):
    """stats never reports the oldest ready and in-flight ages."""

    async def stats(self) -> QueueStats:
        stats = await super().stats()
        return msgspec.structs.replace(
            stats, oldest_ready_age_seconds=None, oldest_in_flight_age_seconds=None
        )


class ListsNewestFirst(InMemoryQueue):
    """list_dead_letters returns the newest `limit` dead letters, newest first."""

    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        self._check_open()
        return list(reversed(self._store.dead.values()))[:limit]


class DeadAtIsMonotonic(InMemoryQueue):
    """Dead letters are stamped with the monotonic clock instead of wall-clock time."""

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        before = set(self._store.dead)
        lost = await super().dead_letter(deliveries, reason=reason)
        now = self._store.clock.monotonic()
        for key in set(self._store.dead) - before:
            self._store.dead[key] = msgspec.structs.replace(self._store.dead[key], dead_at=now)
        return lost


class DeleteQueueKeepsDeadLetters(InMemoryQueue):
    """delete_queue removes messages, consumers and workers, but not the dead letters."""

    async def delete_queue(self) -> None:
        dead = dict(self._store.dead)
        await super().delete_queue()
        self._store.dead.update(dead)


class ExceedsMaxBatch(InMemoryQueue):
    """Claims max_batch=5 and returns whatever was asked for."""

    @property
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(super().capabilities, max_batch=MAX_BATCH)


class ReceivePrefetchesBeyondMaxBatch(BatchLimitedQueue):
    """Leases all a receive asked for, returns max_batch, keeps the rest for the next call.

    A client-side prefetch: nothing is lost for the consumer that asked, but the extra
    messages sit leased where no other consumer can have them, their leases running.
    """

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        buffers: dict[str, list[Delivery]] = self.__dict__.setdefault("prefetched", {})
        buffer = buffers.setdefault(consumer, [])
        if not buffer:
            buffer += await InMemoryQueue.receive(
                self,
                consumer,
                max_messages=max_messages,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
            )
        take = min(max_messages, MAX_BATCH)
        got, buffer[:] = buffer[:take], buffer[take:]
        return got


class ReclaimTakesBeyondMaxBatch(BatchLimitedQueue):
    """Reclaim takes every lapsed lease it was asked for but returns only max_batch of them."""

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        got = await InMemoryQueue.reclaim(
            self, consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )
        return got[:MAX_BATCH]


# More than any test has ready at once.
_EVERYTHING = 10_000


class OverLeasesOnWake(InMemoryQueue):
    """A receive woken by an add leases everything ready but returns max_messages of it."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        if not 0 < wait_seconds < math.inf:
            # No wait (or an invalid one, for the base class to reject): no defect.
            return await super().receive(
                consumer,
                max_messages=max_messages,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
            )
        got = await super().receive(
            consumer, max_messages=max_messages, wait_seconds=0, lease_seconds=lease_seconds
        )
        if got:
            return got
        woken = await super().receive(
            consumer,
            max_messages=_EVERYTHING,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
        )
        return woken[:max_messages]


class FifoPerHandle(InMemoryQueue):
    """Each handle's adds form a partition drained before the next: FIFO per producer only."""

    # Set by `PartitionedHarness`: this handle's partition, and every message's partition
    # (shared by the handles of one queue).
    partition = 0
    partitions: dict[str, int]

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        ids = await super().add(bodies)
        for message_id in ids:
            self.partitions[message_id] = self.partition
        return ids

    def _lease_ready(
        self, consumer: str, max_messages: int, lease_seconds: float, now: float
    ) -> list[Delivery]:
        store = self._store
        # A stable sort: each partition keeps its own order.
        ordered = sorted(store.ready, key=lambda message_id: self.partitions.get(message_id, 0))
        store.ready.clear()
        store.ready.extend(ordered)
        return super()._lease_ready(consumer, max_messages, lease_seconds, now)


class PartitionedHarness(SubclassHarness):
    """`SubclassHarness` for `FifoPerHandle`: a new partition per handle opened."""

    def __init__(self) -> None:
        super().__init__(FifoPerHandle)
        self._partitions: dict[str, dict[str, int]] = {}
        self._handles = itertools.count()

    async def open_queue(self, namespace: str) -> Queue:
        handle = await super().open_queue(namespace)
        assert isinstance(handle, FifoPerHandle)
        handle.partitions = self._partitions.setdefault(namespace, {})
        handle.partition = next(self._handles)
        return handle


def fifo_per_handle() -> SubclassHarness:
    """`FifoPerHandle` on its partitioning harness."""
    return PartitionedHarness()


# Factory name -> (harness factory, the property that names the defect).
BROKEN_DATA: dict[str, tuple[Callable[[], SubclassHarness], str]] = {
    "truncates_dead_letter_reasons": (subclass_factory(TruncatesReasons), "X31"),
    "mangles_non_ascii_reasons": (subclass_factory(MangledReasons), "X31"),
    "truncates_large_bodies": (subclass_factory(TruncatesLargeBodies), "X30"),
    "reuses_ids_after_purge": (subclass_factory(ReusesIdsAfterPurge), "X8"),
    "retry_keeps_old_ids": (subclass_factory(RetryKeepsOldIds), "X36"),
    "purge_leaves_delayed": (subclass_factory(PurgeLeavesDelayed), "X35"),
    "stats_count_delayed_as_ready": (subclass_factory(StatsCountDelayedAsReady), "X39"),
    "stats_count_lapsed_as_ready": (subclass_factory(StatsCountLapsedAsReady), "X39"),
    "stats_without_ages": (subclass_factory(StatsWithoutAges), "X39"),
    "lists_newest_dead_letters_first": (subclass_factory(ListsNewestFirst), "X37"),
    "dead_at_is_monotonic": (subclass_factory(DeadAtIsMonotonic), "X37"),
    "delete_queue_keeps_dead_letters": (subclass_factory(DeleteQueueKeepsDeadLetters), "X38"),
    "exceeds_max_batch": (subclass_factory(ExceedsMaxBatch), "X33"),
    "receive_prefetches_beyond_max_batch": (
        subclass_factory(ReceivePrefetchesBeyondMaxBatch),
        "X33",
    ),
    "reclaim_takes_beyond_max_batch": (subclass_factory(ReclaimTakesBeyondMaxBatch), "X33"),
    "over_leases_on_wake": (subclass_factory(OverLeasesOnWake), "X34"),
    "fifo_per_handle": (fifo_per_handle, "X32"),
}

truncates_dead_letter_reasons = BROKEN_DATA["truncates_dead_letter_reasons"][0]
lists_newest_dead_letters_first = BROKEN_DATA["lists_newest_dead_letters_first"][0]
over_leases_on_wake = BROKEN_DATA["over_leases_on_wake"][0]
