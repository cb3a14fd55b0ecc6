"""Receiving and reclaiming: `receive`, the doorbell that keeps it prompt, `reclaim`.

`receive` is ``XREADGROUP >``, so a lease is a pending-entries-list (PEL) entry and
its age is the entry's idle time, measured on the server's clock. Due released or
delayed messages are promoted back onto the stream by a script sent in the same
write as the XREADGROUP, just before it (see `fencing` for how they are parked).

Promptness: the doorbell. A receive blocks in one XREADGROUP on the stream *and* the
``bell`` stream (its group is created with the queue's). A script that parks a message
due earlier than every message parked before rings it once (one XADD; a burst of
delayed adds rings once), which wakes one blocked receive; that receive acks the ring
in its next script call (no extra round trip) and blocks until the new due time. A
server ends an expired BLOCK only at its next cron tick (100 ms at ``hz 10``), so a
block that ends near a due time is ended by ``CLIENT UNBLOCK`` from another connection
(`SERVER_TICK_SECONDS`). Result: a delayed message is delivered at most
`DELAYED_LATENESS_SECONDS` (50 ms; measured 4-5 ms) after its due time to a receive
that was already blocking, on a server under no load. A woken receive that returns
before the due time rings again to hand it on; a receive that crashed or was cancelled
holding a ring leaves it pending in the bell's group, where `remove_consumers` and
`remove_idle_consumers` clear it, and the others still recheck every
`DELAYED_RECHECK_SECONDS`. Rings never count in `stats` or `len`.

Flow control (`taskrunner.queue_flow`). Messages added with a flow wait in per-key
lines (see `keys`) outside the stream. The receive script also says, for one EXISTS on
a queue without flows, whether a flow key may admit now, and counts down to the next
rate-blocked key's time as to a due delayed message (a blocked read ends then). When
the receive's own read left room, one more script (``lua/admit.lua``) leases the ready
messages that arrived meanwhile and then admits waiting messages for the rest:
round-robin over the admissible keys (least recently served first), FIFO within a
key, each key's concurrency counted in ``f:h:<key>`` and its rate by GCRA on the
server's clock. What it admits goes onto the stream, and the receive's next command,
an XREADGROUP of as many, leases it (another receive may read some first; then this
one admits again, `ADMIT_ROUNDS`). So a queue without flows pays one EXISTS per
receive, and a message is admitted only by a receive that is about to read it.
Scripts that make a key admissible (a new waiting message of an idle key, a slot freed
by ack, dead letter or release, a cancel that changes a blocked key's head) ring the
doorbell, which wakes one blocked receive.

Priorities (`AddRequest.priority`). Each priority above 0 has its own stream and group
(``stream:<p>``, see `keys`); priority 0 is the queue's stream, so a queue that never
used one is read exactly as above. A handle learns that priorities are in use from its
own adds and from the receive script, whose one EXISTS of flow control's keys covers
the ``levels`` hash too. From then on the receive script itself leases: it ranks the
oldest unread entry of each level (its level, plus one per ``priority_aging_seconds``
its stream id's time lies before the server's TIME, capped at 9; a tie goes to the
higher level) and XREADGROUPs exactly the chosen entries per level, one script per
receive. A handle whose plain read ran just as priorities appeared gives that read back
unread (``lua/unread.lua``: XACK, then the group's cursor just before it, when nobody
read past it) and leases by priority instead. A blocked read still waits on priority
0's stream and the doorbell only: every add of a higher priority rings the doorbell.
Reclaim, heartbeat, ack, release and dead letter run their scripts once per level, on
that level's stream; the receipt's token names the level.

Reclaim. `reclaim` pages through the PEL with ``XPENDING`` from a cursor kept on the
queue object (restarting at the oldest entry when it reaches the end), at most
`RECLAIM_SCAN_BUDGET` entries per call, so lapsed entries behind many live ones are
found. Entries whose payload was deleted (XCLAIM drops them, 7.0+) are recorded as dead
letters ("payload removed from the stream while pending") with their message id and
real delivery count, and entries that are not taskrunner messages (no ``b`` field,
malformed ``i``/``n``) are dead-lettered with the reason by `receive` and `reclaim`
alike: never returned, never looping.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from taskrunner.errors import BackendError, QueueClosedError
from taskrunner.queue import Delivery, Receipt
from taskrunner_backends.checks import check_count

from .arguments import _check_consumer, _milliseconds
from .client import Arg, is_no_script
from .errors import GroupMissingError, translate_errors
from .fencing import FencingMixin
from .receipts import _holder, _Leveled, _Malformed, _Message, _parse_entry, _token
from .replies import _as_int, _as_str, _stream_entries
from .scripts import SCRIPTS

__all__ = [
    "BLOCK_READ_MARGIN_SECONDS",
    "DELAYED_LATENESS_SECONDS",
    "DELAYED_RECHECK_SECONDS",
    "PROMOTE_BATCH",
    "RECLAIM_SCAN_BUDGET",
    "SERVER_TICK_SECONDS",
    "ReceiveMixin",
]

_log = logging.getLogger("taskrunner_backends.redis")

# Most PEL entries one `reclaim` call inspects (count); bounds the time
# one script holds the server while still reaching lapsed entries behind live ones.
RECLAIM_SCAN_BUDGET = 2000

# Most due delayed messages one `receive` moves back onto the stream (count).
PROMOTE_BATCH = 100

# Most admission calls one read of a `receive` makes. Another receive may read entries
# this one admitted before this one's read does; then this one admits again, so racing
# receives still each lease what is admissible (the bound keeps a race from looping).
ADMIT_ROUNDS = 8

# How long after a BLOCK expires we still wait for the reply (seconds) before
# declaring the server unavailable.
BLOCK_READ_MARGIN_SECONDS = 5.0

# Longest one blocking read of a `receive` lasts (seconds) before the receive script runs
# again. A message another client releases with a delay while a receive blocks waits in
# the parked stream, where XREADGROUP cannot see it; only the script promotes it. So such
# a message is delivered at most this long after its delay ends, at the cost of one
# script call and one read per this many seconds of an idle receive.
DELAYED_RECHECK_SECONDS = 1.0

# How late (seconds) a delayed message is delivered after its due time, at most, to a
# receive blocked on an idle server (no load): the doorbell wakes the receive at the
# add, the receive blocks until the due time and is unblocked then by CLIENT UNBLOCK
# instead of at the server's next cron tick. Under load, add the server's and the
# caller's own delays; without any receive blocked, the next receive delivers it.
DELAYED_LATENESS_SECONDS = 0.05

# How late a server ends a BLOCK that expired (seconds): it checks timeouts at its cron
# ticks, 1 / hz (hz 10 by default). Blocks that must end on time (a delayed message is
# due about then) are ended by CLIENT UNBLOCK instead.
SERVER_TICK_SECONDS = 0.1


class ReceiveMixin(FencingMixin):
    """`receive` (with the doorbell and the promotion of due messages) and `reclaim`."""

    _reclaim_cursor: str
    # Each priority's own reclaim cursor (its stream has its own PEL).
    _level_cursors: dict[int, str]
    # Tasks blocked in a read, and those of them that `aclose` cancelled.
    _blocking: set[asyncio.Task[Any]]
    _cancelled_by_close: set[asyncio.Task[Any]]

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Lease up to `max_messages` new messages to `consumer`, waiting up to `wait_seconds`.

        Due released messages are moved back onto the stream first. Entries that are
        not taskrunner messages are dead-lettered with the reason, never returned.
        Cancelling a waiting receive may leave entries leased to `consumer` that
        only `reclaim` will find (``cancel_safe_receive`` is False). The leases are
        held by the group consumer ``<consumer>~<lease ms>``.

        Raises:
            ValueError: `max_messages` < 1, `wait_seconds` < 0, `lease_seconds` <= 0,
                or a duration that is not finite.
            BackendUnavailableError: The server could not be reached.
            QueueClosedError: The queue is or became closed.
        """
        return await self.receive_until(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
            stop=None,
        )

    async def receive_until(
        self,
        consumer: str,
        *,
        max_messages: int,
        wait_seconds: float,
        lease_seconds: float,
        stop: asyncio.Event | None,
    ) -> list[Delivery]:
        """`receive`, returning early (possibly empty-handed) once `stop` is set.

        A blocked read is ended by ``CLIENT UNBLOCK`` when `stop` is set, so nothing is
        leased that the caller does not get (a cancellation could lose the reply); where
        ACLs forbid ``CLIENT`` the read ends at its block (at most
        `DELAYED_RECHECK_SECONDS`). A partitioned queue blocks on several shards and
        stops the others once one delivered.
        """
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        _milliseconds("wait_seconds", wait_seconds, positive=False)
        lease_ms = _milliseconds("lease_seconds", lease_seconds, positive=True)
        await self._ready()
        holder = _holder(consumer, lease_ms)
        deadline = self._clock.monotonic() + wait_seconds
        rings: list[str] = []
        # Whether a doorbell woke this receive: it then answers for the earlier due time
        # the ring announced, and hands it on if it returns before that (see `_hand_on`).
        woken = False
        while True:
            next_due_ms, entries = await self._receive_now(holder, max_messages, rings)
            rings = []
            if entries:
                deliveries = await self._accept(consumer, lease_ms, entries)
                if deliveries:
                    return await self._hand_on(deliveries, woken, next_due_ms, rings)
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return await self._hand_on([], woken, next_due_ms, rings)
            # Never block past the next due time known now (+1 ms: BLOCK rounds down), nor
            # long enough to miss one released by another client during the block.
            block = min(remaining, DELAYED_RECHECK_SECONDS)
            if next_due_ms >= 0:
                block = min(block, (next_due_ms + 1) / 1000)
            # The server ends an expired BLOCK only at its next cron tick: when a message
            # is due about when this block ends, end it on time (the next block, or the
            # caller's next receive, then delivers it on time too).
            unblock = 0 <= next_due_ms <= (block + SERVER_TICK_SECONDS) * 1000
            if stop is not None and stop.is_set():
                return await self._hand_on([], woken, next_due_ms, rings)
            entries, rings = await self._blocking_read(
                holder, max_messages, block, unblock=unblock, stop=stop
            )
            # Entries read after aclose stay leased until reclaimed; the caller is gone.
            self._check_open()
            if entries:
                deliveries = await self._accept(consumer, lease_ms, entries)
                if deliveries:
                    return await self._hand_on(deliveries, woken, next_due_ms, rings)
            elif rings:
                # Rung: a message is due earlier than this read knew. The script acks
                # the ring and computes the shorter block.
                woken = True
            elif block >= remaining or (stop is not None and stop.is_set()):
                return await self._hand_on([], woken, next_due_ms, rings)

    async def _receive_now(
        self, holder: str, max_messages: int, rings: list[str]
    ) -> tuple[int, list[tuple[str, object]]]:
        """Promote due messages and lease new entries without blocking, in one round trip.

        Returns the ms until the next delayed message is due (-1: none) and the entries.
        The promotion script goes first in the same write, so what it promotes is read.
        """
        if self._levels:
            return await self._receive_by_priority(holder, max_messages, rings)
        keys = self._keys.scheduling
        prepare_args: tuple[Arg, ...] = (
            self._keys.group,
            PROMOTE_BATCH,
            self._keys.flow_prefix,
            "",
            0,
            0,
            *rings,
        )
        read: tuple[Arg, ...] = (
            "XREADGROUP",
            "GROUP",
            self._keys.group,
            holder,
            "COUNT",
            max_messages,
            "STREAMS",
            self._keys.stream,
            ">",
        )
        prepare: tuple[Arg, ...] = ("EVALSHA", SCRIPTS["receive"].sha, len(keys), *keys)
        due, reply = await self._raw.pipeline("receive", [(*prepare, *prepare_args), read])
        if isinstance(reply, Exception):
            if not str(reply).startswith("NOGROUP"):
                with translate_errors("receive"):
                    raise reply
            # First use of the queue by a worker, or the group was deleted: create it at 0.
            self._group_missing("receive")
            await self._create_group()
            reply = await self._raw.call("receive", *read)
        entries, _ = _stream_entries(reply)
        if isinstance(due, Exception):
            if not (is_no_script(due) or str(due).startswith("NOGROUP")):
                with translate_errors("receive"):
                    raise due
            # Not loaded (a restart, SCRIPT FLUSH) or the bell's group is gone: run it
            # again through the path that loads it and recreates groups. The entries
            # read meanwhile are leased already and are returned all the same.
            due = await self._script("receive", "receive", keys, prepare_args)
        if not isinstance(due, list):
            return _as_int(due), entries
        if len(due) > 2:
            # A priority above 0 is in use: from now on this handle leases by priority.
            # What the read took from the priority-0 stream goes back unread if no one
            # read past it meanwhile, and the receive starts over by priority.
            self._learn_levels(due[2])
            if not entries or await self._unread(holder, entries):
                return await self._receive_by_priority(holder, max_messages, [])
            _log.debug("%r: first receive since priorities appeared read priority 0", self)
        # Flow keys wait: the reply also says whether one may admit now.
        return await self._admit_rest(holder, max_messages, due, entries)

    async def _admit_rest(
        self, holder: str, max_messages: int, due: list[Any], entries: list[tuple[str, object]]
    ) -> tuple[int, list[tuple[str, object]]]:
        """Admit waiting flow messages for what `entries` left of `max_messages`."""
        next_due_ms, admissible = _as_int(due[0]), _as_int(due[1])
        rounds = ADMIT_ROUNDS if admissible else 0
        while rounds and len(entries) < max_messages:
            rounds -= 1
            wake_ms, short, admitted = await self._admit(holder, max_messages - len(entries))
            entries.extend(admitted)
            if wake_ms >= 0 and (next_due_ms < 0 or wake_ms < next_due_ms):
                next_due_ms = wake_ms
            if not short:
                break
        return next_due_ms, entries

    async def _receive_by_priority(
        self, holder: str, max_messages: int, rings: list[str]
    ) -> tuple[int, list[tuple[str, object]]]:
        """`_receive_now` when priorities are in use: the receive script leases by priority."""
        keys = self._keys.scheduling
        args: tuple[Arg, ...] = (
            self._keys.group,
            PROMOTE_BATCH,
            self._keys.flow_prefix,
            holder,
            max_messages,
            self._aging_ms,
            *rings,
        )
        reply = await self._script("receive", "receive", keys, args)
        self._learn_levels(reply[2])
        # Each entry with the priority of the stream it came from (0: as read plainly).
        entries: list[tuple[str, object]] = [
            (
                _as_str(reply[i]),
                _Leveled(reply[i + 1], level) if (level := _as_int(reply[i + 2])) else reply[i + 1],
            )
            for i in range(3, len(reply), 3)
        ]
        return await self._admit_rest(holder, max_messages, reply, entries)

    async def _unread(self, holder: str, entries: list[tuple[str, object]]) -> bool:
        """Give back `entries`, just read from the priority-0 stream, as never delivered."""
        reply = await self._script(
            "receive",
            "unread",
            (self._keys.stream,),
            (self._keys.group, holder, *(entry_id for entry_id, _ in entries)),
        )
        return _as_int(reply) == 1

    async def _admit(self, holder: str, count: int) -> tuple[int, bool, list[tuple[str, object]]]:
        """Lease up to `count` ready messages, then admit waiting ones for the rest.

        The script (``lua/admit.lua``) leases ready messages that arrived since the
        receive's own read, then flow control admits waiting messages round-robin over
        their keys onto the stream; one XREADGROUP of as many as it admitted then
        leases them to `holder`. Returns the ms until a rate-blocked key may admit
        again (-1: none), whether that read came back short (another receive read
        some of them first, so more may be admitted for this one) and the leased
        entries.
        """
        reply = await self._script(
            "receive",
            "admit",
            self._keys.scheduling,
            (self._keys.group, holder, count, self._keys.flow_prefix),
        )
        entries: list[tuple[str, object]] = [(_as_str(e[0]), e[1]) for e in reply[2:]]
        admitted = _as_int(reply[1])
        short = False
        if admitted > 0:
            read = await self._raw.call(
                "receive",
                "XREADGROUP",
                "GROUP",
                self._keys.group,
                holder,
                "COUNT",
                admitted,
                "STREAMS",
                self._keys.stream,
                ">",
            )
            leased = _stream_entries(read)[0]
            short = len(leased) < admitted
            entries.extend(leased)
        return _as_int(reply[0]), short, entries

    async def _hand_on(
        self, deliveries: list[Delivery], woken: bool, next_due_ms: int, rings: list[str]
    ) -> list[Delivery]:
        """Settle the doorbell before `receive` returns `deliveries`.

        Rings read by the last blocking read are acked and deleted. A receive woken by
        a ring may be the only reader that knows of an early due time; when it returns
        empty-handed while a message is due within `DELAYED_RECHECK_SECONDS`, it rings
        again so another blocked receive takes over (one round trip, only in that case).
        One that returns messages does not: its caller comes back for more (a saturated
        caller may not, and other readers then recheck within that time), and under load
        receives that ring each other on every return would double the round trips.
        """
        commands: list[tuple[Arg, ...]] = []
        if rings:
            commands.append(("XACK", self._keys.bell, self._keys.group, *rings))
            commands.append(("XDEL", self._keys.bell, *rings))
        if woken and not deliveries and 0 <= next_due_ms < DELAYED_RECHECK_SECONDS * 1000:
            commands.append(("XADD", self._keys.bell, "MAXLEN", "~", 64, "*", "r", "1"))
        if commands:
            try:
                await self._raw.pipeline("receive", commands)
            except BackendError as exc:
                # The deliveries are leased already; losing them for this would be worse
                # than a ring left behind (remove_consumers clears it) or a later wake.
                _log.warning("%r: could not settle the doorbell: %s", self, exc)
        return deliveries

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Lease to `consumer` messages idle for longer than their holder's own lease.

        One script scans up to `RECLAIM_SCAN_BUDGET` pending entries from where the
        previous call of this handle stopped, reads each holder's lease from its
        consumer name and claims the lapsed entries. A holder whose name carries no
        lease (not written by this backend) is judged by `lease_seconds`.

        Raises:
            ValueError: `lease_seconds` <= 0 or not finite, or `max_messages` < 1.
        """
        lease_ms = _milliseconds("lease_seconds", lease_seconds, positive=True)
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        await self._ready()
        deliveries = await self._reclaim_level(consumer, lease_ms, max_messages, 0)
        # Each priority's stream has its own PEL, scanned from its own cursor; higher
        # priorities first.
        for level in self._levels:
            if len(deliveries) >= max_messages:
                break
            more = max_messages - len(deliveries)
            deliveries.extend(await self._reclaim_level(consumer, lease_ms, more, level))
        return deliveries

    async def _reclaim_level(
        self, consumer: str, lease_ms: int, max_messages: int, level: int
    ) -> list[Delivery]:
        reply = await self._script(
            "reclaim",
            "reclaim",
            self._keys.level_scheduling(level),
            (
                self._keys.group,
                _holder(consumer, lease_ms),
                lease_ms,
                max_messages,
                self._level_cursors.get(level, "0-0") if level else self._reclaim_cursor,
                RECLAIM_SCAN_BUDGET,
                self._keys.flow_prefix,
            ),
        )
        if level:
            self._level_cursors[level] = _as_str(reply[0])
        else:
            self._reclaim_cursor = _as_str(reply[0])
        if reply[2]:
            self._learn_levels(reply[2])
        gone = _as_int(reply[1])
        if gone:
            _log.warning(
                "%r: %d pending message(s) lost their payload; recorded as dead letters",
                self,
                gone,
            )
        deliveries = []
        malformed = []
        for i in range(3, len(reply), 3):
            entry_id, pel_count = _as_str(reply[i]), _as_int(reply[i + 1])
            parsed = _parse_entry(entry_id, reply[i + 2], level)
            if isinstance(parsed, _Message):
                deliveries.append(self._delivery(consumer, lease_ms, parsed, pel_count))
            else:
                malformed.append((parsed, pel_count))
        await self._bury_malformed(consumer, lease_ms, malformed)
        return deliveries

    async def _blocking_read(
        self,
        consumer: str,
        max_messages: int,
        block_seconds: float,
        *,
        unblock: bool = False,
        stop: asyncio.Event | None = None,
    ) -> tuple[list[tuple[str, object]], list[str]]:
        """One XREADGROUP BLOCK on the stream and the doorbell: (entries, ring ids).

        With `unblock`, the read is ended by CLIENT UNBLOCK at `block_seconds` instead
        of at the server's next cron tick after its BLOCK expired (up to 100 ms later);
        with `stop`, also when `stop` is set.
        """
        block_ms = max(1, math.ceil(block_seconds * 1000))  # BLOCK 0 would wait forever
        command: tuple[Arg, ...] = (
            "XREADGROUP",
            "GROUP",
            self._keys.group,
            consumer,
            "COUNT",
            max_messages,
            "BLOCK",
            block_ms,
            "STREAMS",
            self._keys.stream,
            self._keys.bell,
            ">",
            ">",
        )
        bell = self._keys.bell.encode()
        task = asyncio.current_task()
        if task is not None:
            self._blocking.add(task)
        try:
            for attempt in (1, 2):
                try:
                    read_timeout = block_ms / 1000 + BLOCK_READ_MARGIN_SECONDS
                    if unblock or stop is not None:
                        reply = await self._raw.call_unblocked_after(
                            "receive",
                            command,
                            read_timeout=read_timeout,
                            unblock_after=block_ms / 1000 if unblock else None,
                            stop=stop,
                        )
                    else:
                        reply = await self._raw.call("receive", *command, read_timeout=read_timeout)
                except GroupMissingError:
                    # Since 7.0, deleting the stream unblocks readers with NOGROUP.
                    if attempt == 2:
                        raise
                    self._group_missing("receive")
                    await self._create_group()
                    continue
                return _stream_entries(reply, bell)
            return [], []
        except asyncio.CancelledError:
            if task is not None and task in self._cancelled_by_close and task.cancelling() <= 1:
                task.uncancel()
                raise QueueClosedError(f"{self!r} was closed while receiving") from None
            raise
        except BackendError as exc:
            if self._closed:
                raise QueueClosedError(f"{self!r} was closed while receiving") from exc
            raise
        finally:
            if task is not None:
                self._blocking.discard(task)
                self._cancelled_by_close.discard(task)

    def _delivery(
        self, consumer: str, lease_ms: int, message: _Message, pel_count: int
    ) -> Delivery:
        count = message.base_count + pel_count
        return Delivery(
            message_id=message.message_id,
            body=message.body,
            delivery_count=count,
            receipt=Receipt(
                consumer=consumer,
                delivery_count=count,
                token=_token(message, message.base_count, lease_ms),
            ),
        )

    async def _accept(
        self, consumer: str, lease_ms: int, entries: list[tuple[str, object]]
    ) -> list[Delivery]:
        """Turn freshly read entries (delivery count 1) into deliveries; bury the rest."""
        deliveries = []
        malformed = []
        for entry_id, fields in entries:
            parsed = _parse_entry(entry_id, fields)
            if isinstance(parsed, _Message):
                deliveries.append(self._delivery(consumer, lease_ms, parsed, 1))
            else:
                malformed.append((parsed, 1))
        await self._bury_malformed(consumer, lease_ms, malformed)
        return deliveries

    async def _bury_malformed(
        self, consumer: str, lease_ms: int, malformed: list[tuple[_Malformed, int]]
    ) -> None:
        if not malformed:
            return
        by_reason: dict[str, list[tuple[Delivery, bytes]]] = {}
        for entry, pel_count in malformed:
            delivery = Delivery(
                message_id=entry.entry_id,
                body=entry.evidence,
                delivery_count=pel_count,
                receipt=Receipt(
                    consumer=consumer,
                    delivery_count=pel_count,
                    token=_token(entry, 0, lease_ms),
                ),
            )
            by_reason.setdefault(entry.reason, []).append((delivery, entry.evidence))
        for reason, items in by_reason.items():
            _log.warning(
                "%r: dead-lettering %d entr%s: %s",
                self,
                len(items),
                "y" if len(items) == 1 else "ies",
                reason,
            )
            try:
                await self._fenced(
                    "dead", [d for d, _ in items], reason, overrides=[e for _, e in items]
                )
            except BackendError as exc:
                # They stay leased to `consumer`; reclaim will find and bury them later.
                # Raising instead would lose the valid deliveries of this same read.
                _log.warning("%r: could not dead-letter malformed entries yet: %s", self, exc)
