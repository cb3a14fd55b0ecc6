"""Broken in-memory backends for fencing, arguments, closed handles and reclaim progress.

Each class has one defect of the kind the random state machine (P40) finds only in
some runs; the fixed tests of X1, X20-X26 and P30 must fail it on every run.
`BROKEN_FENCING` maps a factory name to the harness factory and the property whose
name names the defect; tests/conformance/broken.py merges it into its `BROKEN`.
Run one with ``python -m taskrunner_conformance
tests.conformance.broken_fencing:release_honours_released_receipt``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from taskrunner.queue import Delivery
from taskrunner_backends.memory import InMemoryQueue, _Message

from .harnesses import MemoryHarness, subclass_factory

__all__ = ["BROKEN_FENCING"]


def _released(queue: InMemoryQueue, delivery: Delivery) -> _Message | None:
    """The message `delivery` was released from, if it waits for redelivery untouched.

    Its delivery count rises only at the next grant, so a count equal to the
    receipt's means "released under this very receipt, not delivered since".
    """
    message = queue._store.messages.get(delivery.message_id)
    if (
        message is None
        or message.state == "in_flight"
        or message.delivery_count != delivery.receipt.delivery_count
    ):
        return None
    return message


def _take_out_of_waiting(queue: InMemoryQueue, message: _Message) -> None:
    """Remove a ready or delayed message from where it waits (a delayed heap entry of a
    message no longer delayed is skipped when it comes due)."""
    if message.state == "ready":
        queue._store.ready.remove(message.id)


# -- fencing ---------------------------------------------------------------------------


class ReleaseHonoursReleasedReceipt(InMemoryQueue):
    """An older receipt, released and not yet redelivered, releases the message again.

    The second release makes the delayed message ready at once (a backend that keys
    the lease on the owner's last receipt and forgets to retire it at release).
    """

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        lost = await super().release(deliveries, delay_seconds=delay_seconds)
        still_lost = []
        for delivery in lost:
            message = _released(self, delivery)
            if message is None or message.state != "delayed" or delay_seconds != 0:
                still_lost.append(delivery)
                continue
            message.state = "ready"
            self._store.ready.append(message.id)
        return still_lost


class ReleaseIgnoresReceipt(InMemoryQueue):
    """Release acts on any in-flight message, whoever holds it under whatever count."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        current = []
        for delivery in deliveries:
            message = self._store.in_flight.get(delivery.message_id)
            if message is None:
                current.append(delivery)
            else:
                current.append(_as_current(delivery, message))
        lost = await super().release(current, delay_seconds=delay_seconds)
        return [deliveries[current.index(d)] for d in lost]


class ReleaseFencedByNameOnly(InMemoryQueue):
    """Release checks the owner's name but not the delivery count (ABA)."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        current = []
        for delivery in deliveries:
            message = self._store.in_flight.get(delivery.message_id)
            if message is not None and message.owner == delivery.receipt.consumer:
                current.append(_as_current(delivery, message))
            else:
                current.append(delivery)
        lost = await super().release(current, delay_seconds=delay_seconds)
        return [deliveries[current.index(d)] for d in lost]


class DeadLetterFencedByNameOnly(InMemoryQueue):
    """Dead-letter checks the owner's name but not the delivery count."""

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        current = []
        for delivery in deliveries:
            message = self._store.in_flight.get(delivery.message_id)
            if message is not None and message.owner == delivery.receipt.consumer:
                current.append(_as_current(delivery, message))
            else:
                current.append(delivery)
        lost = await super().dead_letter(current, reason=reason)
        return [deliveries[current.index(d)] for d in lost]


class HeartbeatRevivesReleased(InMemoryQueue):
    """A heartbeat after a release takes the waiting message back (makes it in flight)."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().heartbeat(deliveries)
        still_lost = []
        now = self._store.clock.monotonic()
        for delivery in lost:
            message = _released(self, delivery)
            if message is None:
                still_lost.append(delivery)
                continue
            _take_out_of_waiting(self, message)
            message.state = "in_flight"
            message.owner = delivery.receipt.consumer
            message.touched_at = now
            self._store.in_flight[message.id] = message
        return still_lost


class AckCompletesReleased(InMemoryQueue):
    """An ack with a released receipt completes the waiting message."""

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().ack(deliveries)
        still_lost = []
        for delivery in lost:
            message = _released(self, delivery)
            if message is None:
                still_lost.append(delivery)
                continue
            _take_out_of_waiting(self, message)
            del self._store.messages[message.id]
        return still_lost


class StaleHeartbeatRestartsLease(InMemoryQueue):
    """A stale heartbeat is reported lost but restarts the current holder's lease.

    As an SQL backend that runs ``UPDATE ... SET touched_at = now WHERE id = ?`` and
    checks the owner only to decide what to report.
    """

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().heartbeat(deliveries)
        now = self._store.clock.monotonic()
        for delivery in lost:
            message = self._store.in_flight.get(delivery.message_id)
            if message is not None:
                message.touched_at = now
        return lost


def _as_current(delivery: Delivery, message: _Message) -> Delivery:
    """`delivery` with the receipt of `message`'s current lease (what a lax check accepts)."""
    receipt = type(delivery.receipt)(
        consumer=message.owner, delivery_count=message.delivery_count, token=""
    )
    return type(delivery)(
        message_id=delivery.message_id,
        body=delivery.body,
        delivery_count=delivery.delivery_count,
        receipt=receipt,
    )


# -- mixed batches ---------------------------------------------------------------------


class ReleaseBatchReportsAll(InMemoryQueue):
    """Release acts on the current deliveries but reports the whole batch once one is lost."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        lost = await super().release(deliveries, delay_seconds=delay_seconds)
        return list(deliveries) if lost else []


class ReleaseBatchAllOrNothing(InMemoryQueue):
    """When one delivery of a batch is lost, release reports it and acts on none."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        lost = [d for d in deliveries if self._owned(d) is None]
        if lost:
            self._check_open()
            return lost
        return await super().release(deliveries, delay_seconds=delay_seconds)


# -- arguments -------------------------------------------------------------------------


class ReleaseAcceptsNan(InMemoryQueue):
    """release(delay_seconds=nan) is accepted; the message is never due again."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        if math.isnan(delay_seconds):
            lost = await super().release(deliveries, delay_seconds=1.0)
            # Due at NaN: never due (NaN compares false with every time).
            self._store.delayed = [
                (math.nan, seq, i) if i in {d.message_id for d in deliveries} else (due, seq, i)
                for due, seq, i in self._store.delayed
            ]
            return lost
        return await super().release(deliveries, delay_seconds=delay_seconds)


class ReceiveAcceptsNegativeWait(InMemoryQueue):
    """receive(wait_seconds < 0) is taken as no wait instead of rejected."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        return await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=max(0.0, wait_seconds),
            lease_seconds=lease_seconds,
        )


class RejectsSubSecondLeases(InMemoryQueue):
    """receive and reclaim reject valid leases shorter than a second."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        if lease_seconds < 1:
            raise ValueError(f"lease_seconds must be >= 1, got {lease_seconds}")
        return await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
        )

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        if lease_seconds < 1:
            raise ValueError(f"lease_seconds must be >= 1, got {lease_seconds}")
        return await super().reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )


class AckValidatesLazily(InMemoryQueue):
    """Ack completes the deliveries before a non-Delivery in the batch, then fails on it."""

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self._check_open()
        lost = []
        for delivery in deliveries:
            if not isinstance(delivery, Delivery):
                raise TypeError(f"expected Delivery, got {type(delivery).__name__}")
            message = self._owned(delivery)
            if message is None:
                lost.append(delivery)
            else:
                self._forget(message)
        return lost


# -- closed handles --------------------------------------------------------------------


class ClosedAckOfEmptyBatch(InMemoryQueue):
    """ack([]) on a closed handle returns [] instead of raising QueueClosedError."""

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        if not deliveries:
            return []
        return await super().ack(deliveries)


# -- reclaim progress ------------------------------------------------------------------

# How many in-flight messages the window-limited reclaimers below look at.
RECLAIM_WINDOW = 50


class ReclaimScansOnlyTheFront(InMemoryQueue):
    """Reclaim only ever looks at the oldest RECLAIM_WINDOW in-flight messages."""

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        by_age = sorted(self._store.in_flight.values(), key=lambda m: int(m.id))
        return await _reclaim_from(
            self, by_age[:RECLAIM_WINDOW], consumer, lease_seconds, max_messages
        )


class ReclaimScansOnlyTheBack(InMemoryQueue):
    """Reclaim only ever looks at the newest RECLAIM_WINDOW in-flight messages."""

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        by_age = sorted(self._store.in_flight.values(), key=lambda m: int(m.id))
        return await _reclaim_from(
            self, by_age[-RECLAIM_WINDOW:], consumer, lease_seconds, max_messages
        )


class ReclaimCursorNeverWraps(InMemoryQueue):
    """Reclaim pages on with a cursor, as it should, but never starts over at the oldest."""

    _cursor = 0

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        by_age = sorted(self._store.in_flight.values(), key=lambda m: int(m.id))
        page = [m for m in by_age if int(m.id) > self._cursor][: 10 * max_messages]
        got = await _reclaim_from(self, page, consumer, lease_seconds, max_messages)
        if got:
            self._cursor = int(got[-1].message_id)
        elif page:
            self._cursor = int(page[-1].id)
        return got


async def _reclaim_from(
    queue: InMemoryQueue,
    candidates: list[_Message],
    consumer: str,
    lease_seconds: float,
    max_messages: int,
) -> list[Delivery]:
    """Reclaim as `InMemoryQueue.reclaim` does, but only among `candidates`."""
    # The real method validates the arguments and the handle; hide everything else
    # from it so that it takes nothing itself.
    store = queue._store
    hidden = {m.id: m for m in store.in_flight.values() if m not in candidates}
    for message_id in hidden:
        del store.in_flight[message_id]
    try:
        return await InMemoryQueue.reclaim(
            queue, consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )
    finally:
        store.in_flight.update(hidden)


# Factory name -> (harness factory, the property that names the defect).
BROKEN_FENCING: dict[str, tuple[Callable[[], MemoryHarness], str]] = {
    "release_honours_released_receipt": (subclass_factory(ReleaseHonoursReleasedReceipt), "X22"),
    "release_ignores_receipt": (subclass_factory(ReleaseIgnoresReceipt), "X22"),
    "release_fenced_by_name_only": (subclass_factory(ReleaseFencedByNameOnly), "X22"),
    "dead_letter_fenced_by_name_only": (subclass_factory(DeadLetterFencedByNameOnly), "X23"),
    "heartbeat_revives_released": (subclass_factory(HeartbeatRevivesReleased), "X20"),
    "ack_completes_released": (subclass_factory(AckCompletesReleased), "X21"),
    "stale_heartbeat_restarts_lease": (subclass_factory(StaleHeartbeatRestartsLease), "X20"),
    "release_batch_reports_all": (subclass_factory(ReleaseBatchReportsAll), "X24"),
    "release_batch_all_or_nothing": (subclass_factory(ReleaseBatchAllOrNothing), "X24"),
    "release_accepts_nan": (subclass_factory(ReleaseAcceptsNan), "P30"),
    "receive_accepts_negative_wait": (subclass_factory(ReceiveAcceptsNegativeWait), "P30"),
    "rejects_sub_second_leases": (subclass_factory(RejectsSubSecondLeases), "X25"),
    "ack_validates_lazily": (subclass_factory(AckValidatesLazily), "P30"),
    "closed_ack_of_empty_batch": (subclass_factory(ClosedAckOfEmptyBatch), "X1"),
    "reclaim_scans_only_the_front": (subclass_factory(ReclaimScansOnlyTheFront), "X26"),
    "reclaim_scans_only_the_back": (subclass_factory(ReclaimScansOnlyTheBack), "X26"),
    "reclaim_cursor_never_wraps": (subclass_factory(ReclaimCursorNeverWraps), "X26"),
}

release_honours_released_receipt = BROKEN_FENCING["release_honours_released_receipt"][0]
