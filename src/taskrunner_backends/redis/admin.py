"""Operating a queue: stats, dead letters, purge and delete, consumers, queue names.

Everything here is one script or one command per call (SCAN for queue names, bounded
by `NAMES_SCAN_CALLS`); none of it is on a worker's hot path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from taskrunner.queue import ConsumerStats, DeadLetter, QueueNameList, QueueStats, check_names_limit
from taskrunner_backends.checks import check_ids

from .arguments import _check_consumer, _milliseconds
from .base import QueueBase
from .fencing import FENCED_BATCH
from .receipts import _caller_name
from .replies import _as_int, _as_str, _is_stream_id, _text
from .scripts import SCRIPTS

__all__ = [
    "DELETE_ID_WAIT_SECONDS",
    "NAMES_SCAN_CALLS",
    "NAMES_SCAN_COUNT",
    "STATS_PENDING_SAMPLE",
    "AdminMixin",
]

_log = logging.getLogger("taskrunner_backends.redis")

# SCAN calls and keys per call one `queue_names` call makes at most: it examines at most
# their product of keys (of the whole database, every namespace), then says whether it
# saw them all.
NAMES_SCAN_CALLS = 100
NAMES_SCAN_COUNT = 1000

# Longest `delete_queue` waits for the server's clock to pass the last id handed out
# (seconds); ids are ahead of the clock by more only after the clock stepped back.
DELETE_ID_WAIT_SECONDS = 1.0

# Pending entries `stats` inspects for the longest idle time (count).
STATS_PENDING_SAMPLE = 1000


class AdminMixin(QueueBase):
    """Stats, dead letters, purge, delete, consumer clean-up and queue names."""

    async def stats(self) -> QueueStats:
        """A snapshot taken in one script: counts, ages (server clock) and consumers.

        ``ready`` counts entries not yet delivered (stream length minus pending, bounded
        by the group's lag where the server reports one) and released messages whose
        delay is over but that no receive has moved back yet (delayed adds alike);
        ``delayed`` the released messages and delayed adds still waiting for their due
        time. Doorbell rings are no messages and count nowhere.
        ``oldest_in_flight_age_seconds`` is the longest idle time among the
        `STATS_PENDING_SAMPLE` oldest pending entries. A consumer's
        ``idle_seconds`` is the time since its last successful interaction where the
        server reports it (Redis and Valkey >= 7.2), else since its last attempt.
        """
        await self._ready()
        r = await self._script(
            "stats",
            "stats",
            self._keys.all,
            (self._keys.group, STATS_PENDING_SAMPLE, "all", self._keys.flow_prefix),
        )
        lag, length, pending, dead, delayed, now_ms = (_as_int(v) for v in r[:6])
        oldest_ready_id, max_idle_ms = _as_str(r[6]), _as_int(r[7])
        # Released messages whose delay is over but that no receive has promoted yet.
        due, first_due_ms = _as_int(r[8]), _as_int(r[9])
        count = _as_int(r[10])
        # Messages waiting for flow control's admission are ready to callers.
        waiting, first_waiting_ms = (_as_int(v) for v in r[11 + 4 * count : 13 + 4 * count])
        # The streams of priorities above 0 (all -1 or 0 on a queue without them).
        level_ready, level_pending, level_oldest_ms, level_idle_ms = (
            _as_int(v) for v in r[13 + 4 * count : 17 + 4 * count]
        )
        ready = _ready_count(lag, length, pending) + due + waiting + level_ready
        pending += level_pending
        max_idle_ms = max(max_idle_ms, level_idle_ms)
        ready_since = []
        if oldest_ready_id:
            ready_since.append(int(oldest_ready_id.split("-")[0]))
        if level_oldest_ms >= 0:
            ready_since.append(level_oldest_ms)
        if first_due_ms >= 0:
            ready_since.append(first_due_ms)
        if first_waiting_ms >= 0:
            ready_since.append(first_waiting_ms)
        oldest_ready_age = None
        if ready_since:
            oldest_ready_age = max(0, now_ms - min(ready_since)) / 1000
        # One caller-visible consumer may hold leases of several lengths (one group
        # consumer each): report it once, with the sum of pending and the least idle.
        consumers: dict[str, ConsumerStats] = {}
        for i in range(11, 11 + 4 * count, 4):
            idle_ms, inactive_ms = _as_int(r[i + 2]), _as_int(r[i + 3])
            name = _caller_name(_as_str(r[i]))
            pending_here = _as_int(r[i + 1])
            idle = (inactive_ms if inactive_ms >= 0 else idle_ms) / 1000
            seen = consumers.get(name)
            if seen is not None:
                pending_here += seen.pending
                idle = min(idle, seen.idle_seconds if seen.idle_seconds is not None else idle)
            consumers[name] = ConsumerStats(name=name, pending=pending_here, idle_seconds=idle)
        return QueueStats(
            ready=ready,
            delayed=delayed,
            in_flight=pending,
            dead=dead,
            oldest_ready_age_seconds=oldest_ready_age,
            oldest_in_flight_age_seconds=None if max_idle_ms < 0 else max_idle_ms / 1000,
            consumers=tuple(consumers[name] for name in sorted(consumers)),
        )

    async def len(self) -> int:
        """Ready, delayed and in-flight messages, counted as `stats` counts them."""
        await self._ready()
        r = await self._script(
            "len", "stats", self._keys.all, (self._keys.group, 0, "counts", self._keys.flow_prefix)
        )
        lag, length, pending, _, delayed, waiting, level_ready, level_pending = (
            _as_int(v) for v in r[:8]
        )
        return (
            _ready_count(lag, length, pending)
            + delayed
            + pending
            + waiting
            + level_ready
            + level_pending
        )

    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters, oldest first."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        await self._ready()
        if limit == 0:
            return []
        reply = await self._raw.call(
            "list dead letters", "XRANGE", self._keys.dead, "-", "+", "COUNT", limit
        )
        letters = []
        for entry in reply or ():
            fields = entry[1] or []
            values = dict(zip(fields[0::2], fields[1::2], strict=True))
            letters.append(
                DeadLetter(
                    message_id=_as_str(entry[0]),
                    original_id=_text(values.get(b"o", b"")),
                    body=values.get(b"b", b""),
                    reason=_text(values.get(b"r", b"")),
                    delivery_count=int(values.get(b"c", b"0") or 0),
                    dead_at=_stamp_seconds(values.get(b"t", b"0")),
                )
            )
        return letters

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        """Put dead letters back as new messages (all when `message_ids` is None).

        Each one is added and removed from the dead-letter stream in one script, so it
        is neither lost nor duplicated. Unknown ids are skipped. A dead letter of a
        message with a flow keeps the flow (its fields) and waits again under it, at
        the back of its key's line.

        Returns:
            The new message ids, one per dead letter moved.
        """
        await self._ready()
        k = self._keys
        keys = (k.stream, k.dead, k.dead_ids, k.parked, k.moved, k.bell)
        common = (k.flow_prefix, k.group)
        if message_ids is not None:
            ids = self._valid_ids(message_ids)
            moved: list[str] = []
            for start in range(0, len(ids), FENCED_BATCH):
                reply = await self._script(
                    "retry",
                    "retry_dead",
                    keys,
                    (0, "+", *common, *ids[start : start + FENCED_BATCH]),
                )
                moved.extend(_as_str(v) for v in reply)
            return moved
        # Only what is dead now: messages that die again while this runs wait for the
        # next retry instead of keeping this one going round forever.
        newest = await self._raw.call("retry", "XREVRANGE", self._keys.dead, "+", "-", "COUNT", 1)
        if not newest:
            return []
        last = _as_str(newest[0][0])
        moved = []
        while True:
            reply = await self._script("retry", "retry_dead", keys, (FENCED_BATCH, last, *common))
            moved.extend(_as_str(v) for v in reply)
            if len(reply) < FENCED_BATCH:
                return moved

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters (all when `message_ids` is None); returns how many."""
        await self._ready()
        keys = (self._keys.dead, self._keys.dead_ids)
        if message_ids is None:
            return _as_int(await self._script("purge dead", "purge_dead", keys, ()))
        ids = self._valid_ids(message_ids)
        deleted = 0
        for start in range(0, len(ids), FENCED_BATCH):
            chunk = ids[start : start + FENCED_BATCH]
            deleted += _as_int(await self._script("purge dead", "purge_dead", keys, chunk))
        return deleted

    async def purge(self) -> int:
        """Delete every ready, delayed and in-flight message; returns how many.

        Receipts of purged messages report lost from then on; dead letters stay, and so
        do stored results (they expire by their TTL, or go with `delete_queue`).
        """
        await self._ready()
        return _as_int(
            await self._script(
                "purge",
                "clear",
                self._keys.scheduling,
                ("purge", self._keys.group, self._keys.unique_prefix, "", self._keys.flow_prefix),
            )
        )

    async def delete_queue(self) -> None:
        """Delete every key of the queue: messages, dead letters, consumers, worker entries.

        Stored results and the result notification stream go too (the ``results``
        index lists the result keys, so no SCAN is needed).

        One DEL of keys in one slot: atomic. Workers still running recreate an empty
        group at their next receive. Every message id (and dead-letter id) handed out
        after this returns is larger than every one handed out before it, so a receipt
        issued before the delete never fits a message added after it: the new streams
        start their ids afresh from the server's clock, so this waits (on that clock)
        until the millisecond of the last id handed out is over, usually under 1 ms, at
        most `DELETE_ID_WAIT_SECONDS` (an id further ahead, after the clock stepped
        back, is logged). Do not delete a queue that workers are still using.
        """
        await self._ready()
        last_ms, now_ms = await self._raw.run_script(
            "delete queue",
            SCRIPTS["clear"],
            self._keys.every_key,
            (
                "delete",
                self._keys.group,
                self._keys.unique_prefix,
                self._keys.result_prefix,
                self._keys.flow_prefix,
            ),
        )
        await self._outlast(_as_int(last_ms), _as_int(now_ms))

    async def _outlast(self, last_ms: int, now_ms: int) -> None:
        """Return once the server's clock is past millisecond `last_ms` (bounded)."""
        # The event loop's clock, not the queue's: this waits for real time to pass.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DELETE_ID_WAIT_SECONDS
        while now_ms <= last_ms:
            left = deadline - loop.time()
            if left <= 0:
                _log.warning(
                    "%r: ids were handed out up to %d ms ahead of the server's clock; "
                    "ids of messages added soon after this delete may repeat them",
                    self,
                    last_ms - now_ms,
                )
                return
            # Bounded polling of the server's clock: the wait is for time to pass there.
            await asyncio.sleep(min(left, (last_ms - now_ms + 1) / 1000))
            seconds, micros = await self._raw.call("delete queue", "TIME")
            now_ms = _as_int(seconds) * 1000 + _as_int(micros) // 1000

    async def remove_idle_consumers(self, idle_seconds: float) -> list[str]:
        """Delete consumers that own no pending message and were inactive for `idle_seconds`.

        The pending check and the delete run in one script, so a consumer that owns
        a message is never deleted (deleting it would make its messages unclaimable).

        Returns:
            The names of the deleted consumers, as callers know them.

        Raises:
            ValueError: `idle_seconds` < 0 or not finite.
        """
        idle_ms = _milliseconds("idle_seconds", idle_seconds, positive=False)
        return await self._remove_consumers("remove idle consumers", idle_ms, ())

    async def remove_consumers(self, names: Sequence[str]) -> list[str]:
        """Delete the named consumers (all their lease lengths) that own no pending message.

        Returns:
            The names removed, as callers know them; unknown names are skipped.

        Raises:
            TypeError: `names` is a single string or holds something else.
        """
        if isinstance(names, str):
            raise TypeError("names must be a sequence of consumer names, not a single string")
        for name in names:
            _check_consumer(name)
        if not names:
            # Nothing to remove, but a closed queue still says so.
            self._check_open()
            return []
        return await self._remove_consumers("remove consumers", 0, names)

    async def _remove_consumers(self, action: str, idle_ms: int, names: Sequence[str]) -> list[str]:
        await self._ready()
        reply = await self._raw.run_script(
            action,
            SCRIPTS["remove_idle_consumers"],
            (self._keys.stream, self._keys.bell),
            (self._keys.group, idle_ms, *names),
        )
        return list(dict.fromkeys(_caller_name(_as_str(name)) for name in reply))

    async def list_queue_names(
        self, *, after: str | None = None, limit: int = 1000
    ) -> QueueNameList:
        """The queues of this handle's namespace that have a stream or a dead-letter key.

        A SCAN with MATCH over ``<namespace>:{*}:[sd][te][ra]*`` (the ``stream`` and
        ``dead`` keys), at most `NAMES_SCAN_CALLS` calls of `NAMES_SCAN_COUNT` keys
        each; SCAN walks the whole database, so ``complete`` is False when the scan
        stopped before its end (a database of more than about 100,000 keys) or more
        than `limit` names follow `after`. Shards of partitioned queues (tags with
        ``#``) are left out. A queue whose messages were all acked keeps its stream
        key, so it is listed until deleted. Nothing is written.

        Raises:
            ValueError: `limit` is below 1 or above `taskrunner.queue.QUEUE_NAMES_LIMIT`.
        """
        check_names_limit(limit)
        await self._ready()
        head = f"{self._keys.namespace}:{{"
        pattern = head + "*}:[sd][te][ra]*"
        found: set[str] = set()
        cursor: bytes | str = "0"
        calls = 0
        while True:
            reply = await self._raw.call(
                "queue names", "SCAN", cursor, "MATCH", pattern, "COUNT", NAMES_SCAN_COUNT
            )
            cursor, keys = reply[0], reply[1]
            calls += 1
            for raw in keys:
                key = _as_str(raw)
                tag, _, rest = key[len(head) :].partition("}")
                if rest in (":stream", ":dead") and "#" not in tag and tag:
                    found.add(tag)
            if cursor in (b"0", "0") or calls >= NAMES_SCAN_CALLS:
                break
        names = sorted(n for n in found if after is None or n > after)
        done = cursor in (b"0", "0")
        return QueueNameList(names=tuple(names[:limit]), complete=done and len(names) <= limit)

    def _valid_ids(self, message_ids: Sequence[str]) -> list[str]:
        # The shared type check; an id that is no stream id is unknown, and skipped.
        return [i for i in check_ids(message_ids) if _is_stream_id(i)]


def _ready_count(lag: int, length: int, pending: int) -> int:
    # Acked, cancelled and dead-lettered entries are deleted, so every stream entry that
    # is not pending is ready. The group's lag is only a bound: after XDELs around the
    # cursor (cancel) a server may still report one it no longer can compute (seen on
    # a cluster node: lag 1 with the one entry of the stream pending), so the smaller
    # of the two counts.
    unread = max(0, length - pending)
    return min(lag, unread) if lag >= 0 else unread


def _stamp_seconds(raw: bytes) -> float:
    """A dead letter's time field (ms, with a fraction since 0.x; older: whole ms) in s."""
    try:
        return float(raw or b"0") / 1000
    except ValueError:
        return 0.0
