"""The optional parts of a `PartitionedQueue`: stats, leadership, results, lookup, admin.

Stats and len add the shards' figures up (ages: the oldest; consumers: merged by name); dead
letters, purge, delete and consumer clean-up act on every shard; dead-letter listings
merge by time. Leadership, fire records and the worker registry live in shard 0 (one
hash each, as on a single node); schedules therefore add their messages to shard 0.
Results are stored in the shard the id names (an id of no shard: the shard its text
hashes to), under the id as given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from taskrunner.queue import (
    ConsumerStats,
    DeadLetter,
    FireRecord,
    LeaderLease,
    MessageState,
    QueueStats,
    ResultWrite,
    WorkerInfo,
)
from taskrunner_backends.checks import check_ids, check_lookup_ids, check_result_writes

from .partitioned_shards import ShardsBase

__all__ = ["PartsMixin"]


class PartsMixin(ShardsBase):
    """Stats, leadership, results, lookup, admin and the worker registry over the shards."""

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

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result in the shard its id names (see the module docstring)."""
        writes = check_result_writes(results)
        self._check_open()
        parts: dict[int, list[ResultWrite]] = {}
        for write in writes:
            parts.setdefault(self._route(write.message_id), []).append(write)
        await self._gather([self._shards[s].put_results(part) for s, part in parts.items()])

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, read from each id's shard in parallel."""
        ids = check_ids(message_ids)
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
        ids = check_ids(message_ids)
        self._check_open()
        parts: dict[int, list[str]] = {}
        for message_id in dict.fromkeys(ids):
            parts.setdefault(self._route(message_id), []).append(message_id)
        counts = await self._gather(
            [self._shards[s].delete_results(part) for s, part in parts.items()]
        )
        return sum(counts)

    async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, asked of its shard (in parallel); None for ids of none."""
        ids = check_lookup_ids(message_ids)
        self._check_open()
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
                if state is not None and state.waiting is not None and state.waiting.holders:
                    # Holders are ids of the same shard (a flow key lives on one).
                    holders = tuple(f"{s}@{h}" for h in state.waiting.holders)
                    waiting = msgspec.structs.replace(state.waiting, holders=holders)
                    state = msgspec.structs.replace(state, waiting=waiting)
                states[index] = state
        return states

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
        split = self._split_ids(check_ids(message_ids))
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
        split = self._split_ids(check_ids(message_ids))
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
