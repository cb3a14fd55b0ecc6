"""Heartbeat, ack, release and dead letter: the lease operations, fenced by receipt.

Fencing. Heartbeat, ack, release and dead-letter run in one Lua script
(``lua/fenced.lua``) that first probes the entry with ``XPENDING id id 1`` and acts
only if the owner *and* the delivery count still match the receipt: XCLAIM checks no
owner and XACK is silent, so without the probe a stale holder could steal a message
back or complete somebody else's lease. The delivery count is the lease's epoch, so a
consumer that reclaims its own lapsed message cannot act with its old receipt (ABA).
A heartbeat is ``XCLAIM <same consumer> 0 <id> JUSTID``: idle resets, count stays.
Ack deletes the entry in the same script (``XACKDEL`` where the server has it, found
with COMMAND INFO; ``XACK`` + ``XDEL`` otherwise; one command for the whole batch, after
every entry was checked), so the stream holds only ready and in-flight messages and
never grows with completed work.

Release with a delay. Release atomically removes the entry and re-adds the message
(an XCLAIM with a shifted IDLE would hand it to `reclaim`, and the contract says
released messages come back through `receive`):
with no delay straight onto the stream, with a delay into a parked stream plus a
sorted set keyed by the due time (server clock). `receive` promotes due messages
with a script sent in the same write as its XREADGROUP, just before it (so the read
sees them; the read itself is no script, whose reply would cost a Lua table per
entry), and never blocks past the next due time,
so a released message is redelivered no earlier than its delay and is never lost
(it is in exactly one place at any instant). A message parked by another client while
a receive blocks is invisible to that XREADGROUP; the doorbell (see `receiving`)
wakes the receive, and as a fallback one blocking read lasts at most `DELAYED_RECHECK_SECONDS`
before the script runs again. The re-added entry carries the
original message id (field ``i``) and its delivery count so far (field ``n``): the
`Delivery` keeps the message id `Queue.add` returned, and its delivery count goes on
from where it was (+1). The price: a released message goes to the back of the queue,
and the receipt's token names the current stream entry. The hash ``origins`` maps each
re-added entry to its message id and earlier count until it completes, so a dead letter
of an entry deleted underneath still names the right message.
"""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner.queue import Delivery
from taskrunner_backends.checks import check_deliveries, encode_reason

from .arguments import _milliseconds
from .base import QueueBase
from .client import Arg
from .receipts import _holder, _locate
from .replies import _as_int
from .scripts import SCRIPTS

__all__ = ["FENCED_BATCH", "FencingMixin"]

# Deliveries per fenced script call (count); larger batches are split.
FENCED_BATCH = 500


class FencingMixin(QueueBase):
    """Heartbeat, ack, release and dead letter: one fenced script per batch."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Reset the idle time of each delivery still owned under its receipt.

        Returns:
            The deliveries whose lease was already lost; they are left untouched.
        """
        return await self._fenced("heartbeat", deliveries, "")

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Complete and delete each delivery still owned under its receipt.

        An owned message whose stream entry was deleted underneath (trimming, a stray
        XDEL) counts as completed: its lease was current and nothing is left to redo.

        Returns:
            The deliveries not completed by this call (lease lost, already completed).
        """
        return await self._fenced("ack", deliveries, "")

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Re-add owned deliveries, ready at once or after `delay_seconds` (server clock).

        Returns:
            The deliveries whose lease was already lost; they are left untouched.

        Raises:
            ValueError: `delay_seconds` < 0 or not finite.
        """
        delay_ms = _milliseconds("delay_seconds", delay_seconds, positive=False)
        return await self._fenced("release", deliveries, delay_ms)

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Atomically move owned deliveries to the dead-letter stream and delete them.

        Returns:
            The deliveries whose lease was already lost; they are left untouched.
        """
        encode_reason(reason)
        return await self._fenced("dead", deliveries, reason)

    async def _fenced(
        self,
        op: str,
        deliveries: Sequence[Delivery],
        arg: Arg,
        *,
        overrides: Sequence[bytes] | None = None,
    ) -> list[Delivery]:
        check_deliveries(deliveries)
        await self._ready()
        lost: list[Delivery] = []
        items: list[tuple[Delivery, tuple[Arg, ...]]] = []
        # Deliveries of a priority above 0, by level: their entries are on that level's
        # stream, which the same script acts on as KEYS[1].
        leveled: dict[int, list[tuple[Delivery, tuple[Arg, ...]]]] = {}
        for index, delivery in enumerate(deliveries):
            located = _locate(delivery)
            receipt = delivery.receipt
            pel_count = None if located is None else receipt.delivery_count - located.base
            if located is None or pel_count is None or pel_count < 1:
                lost.append(delivery)  # a receipt we never issued cannot hold a lease
                continue
            if overrides is not None:
                override = b"=" + overrides[index]
            else:
                override = (b"u" if located.unique else b"") + (b"f" if located.flow else b"")
            (items if not located.level else leveled.setdefault(located.level, [])).append(
                (
                    delivery,
                    (
                        located.entry_id,
                        _holder(receipt.consumer, located.lease_ms),
                        pel_count,
                        delivery.message_id,
                        receipt.delivery_count,
                        override,
                    ),
                )
            )
        flag = "1" if self._has_xackdel else "0"
        chunks = [
            (0, items[start : start + FENCED_BATCH]) for start in range(0, len(items), FENCED_BATCH)
        ]
        for level, entries in sorted(leveled.items()):
            chunks.extend(
                (level, entries[start : start + FENCED_BATCH])
                for start in range(0, len(entries), FENCED_BATCH)
            )
        calls: list[tuple[tuple[str, ...], list[Arg]]] = []
        for level, chunk in chunks:
            args: list[Arg] = [
                op,
                self._keys.group,
                arg,
                flag,
                self._keys.unique_prefix,
                self._keys.flow_prefix,
            ]
            for _, item_args in chunk:
                args.extend(item_args)
            calls.append((self._keys.level_scheduling(level), args))
        if leveled and len(calls) > 1:
            # Several priorities: one round trip for all their scripts.
            replies = await self._batched(op, "fenced", calls)
        else:
            replies = [await self._raw.run_script(op, SCRIPTS["fenced"], *c) for c in calls]
        for (_, chunk), statuses in zip(chunks, replies, strict=True):
            for (delivery, _), status in zip(chunk, statuses, strict=True):
                if _as_int(status) != 1:
                    lost.append(delivery)
        if len(lost) > 1:
            order = {id(d): i for i, d in enumerate(deliveries)}
            lost.sort(key=lambda d: order[id(d)])
        return lost
