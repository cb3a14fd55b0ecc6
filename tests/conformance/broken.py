"""Deliberately broken in-memory backends: each has one defect the suite must catch.

Each class overrides one method of `InMemoryQueue`; `BROKEN` maps a factory name to
the class and the property whose failure names its defect. Run one with
``python -m taskrunner_conformance tests.conformance.broken:heartbeat_does_not_extend``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from taskrunner.queue import Delivery
from taskrunner_backends.memory import InMemoryQueue

from .broken_browse import BROKEN_BROWSE
from .broken_data import BROKEN_DATA
from .broken_edges import BROKEN_EDGES
from .broken_fencing import BROKEN_FENCING
from .broken_results import BROKEN_RESULTS
from .broken_scheduling import BROKEN_SCHEDULING
from .broken_timing import BROKEN_TIMING
from .harnesses import MemoryHarness, subclass_factory

__all__ = ["BROKEN"]


class HeartbeatDoesNotExtend(InMemoryQueue):
    """Heartbeat checks the receipt but never restarts the lease."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self._check_open()
        return [d for d in deliveries if self._owned(d) is None]


class HeartbeatStealsBack(InMemoryQueue):
    """A stale heartbeat takes the message back from its new owner (plain XCLAIM)."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self._check_open()
        now = self._store.clock.monotonic()
        for delivery in deliveries:
            message = self._store.in_flight.get(delivery.message_id)
            if message is not None:
                message.owner = delivery.receipt.consumer
                message.delivery_count = delivery.receipt.delivery_count
                message.touched_at = now
        return [d for d in deliveries if d.message_id not in self._store.in_flight]


class AckIgnoresOwnership(InMemoryQueue):
    """Ack completes any in-flight message, whoever holds it (plain XACK)."""

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self._check_open()
        lost = []
        for delivery in deliveries:
            message = self._store.in_flight.get(delivery.message_id)
            if message is None:
                lost.append(delivery)
            else:
                self._forget(message)
        return lost


class ReclaimTakesLiveLeases(InMemoryQueue):
    """Reclaim ignores the idle bound and takes live leases too."""

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        if lease_seconds <= 0 or max_messages < 1:
            raise ValueError("bad arguments")
        self._check_open()
        now = self._store.clock.monotonic()
        taken = list(self._store.in_flight.values())[:max_messages]
        deliveries = []
        for message in taken:
            del self._store.in_flight[message.id]
            deliveries.append(self._grant(message, consumer, lease_seconds, now))
        return deliveries


class AckedMessagesComeBack(InMemoryQueue):
    """Ack reports success but the message goes back to the ready queue."""

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self._check_open()
        lost = []
        for delivery in deliveries:
            message = self._owned(delivery)
            if message is None:
                lost.append(delivery)
                continue
            del self._store.in_flight[message.id]
            message.state = "ready"
            message.owner = ""
            self._store.ready.append(message.id)
        return lost


class ReleaseLosesMessage(InMemoryQueue):
    """Release deletes the message instead of giving it back."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        if delay_seconds < 0:
            raise ValueError("delay_seconds must be >= 0")
        self._check_open()
        lost = []
        for delivery in deliveries:
            message = self._owned(delivery)
            if message is None:
                lost.append(delivery)
            else:
                self._forget(message)
        return lost


class HeartbeatBumpsCount(InMemoryQueue):
    """Heartbeat increments the delivery count (and so fences out its own caller)."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().heartbeat(deliveries)
        for delivery in deliveries:
            if delivery not in lost:
                self._store.in_flight[delivery.message_id].delivery_count += 1
        return lost


class LenCountsDeadLetters(InMemoryQueue):
    """len adds the dead letters to ready and in-flight messages."""

    async def len(self) -> int:
        return await super().len() + len(self._store.dead)


class ReclaimKeepsCount(InMemoryQueue):
    """Reclaim hands the message over without incrementing its delivery count."""

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        for message in self._store.in_flight.values():
            if self._store.clock.monotonic() - message.touched_at > message.lease_seconds:
                message.delivery_count -= 1
        got = await super().reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )
        # Messages that were lapsed but not taken keep their count.
        taken = {d.message_id for d in got}
        for message in self._store.in_flight.values():
            lapsed = self._store.clock.monotonic() - message.touched_at > message.lease_seconds
            if lapsed and message.id not in taken and message.owner != consumer:
                message.delivery_count += 1
        return got


class DeadLetterDropsBody(InMemoryQueue):
    """Dead letters keep the reason but not the body."""

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        lost = await super().dead_letter(deliveries, reason=reason)
        for key, letter in list(self._store.dead.items()):
            self._store.dead[key] = type(letter)(
                message_id=letter.message_id,
                original_id=letter.original_id,
                body=b"",
                reason=letter.reason,
                delivery_count=letter.delivery_count,
                dead_at=letter.dead_at,
            )
        return lost


class ReclaimWithoutCursor(InMemoryQueue):
    """Reclaim only ever looks at the oldest few in-flight messages (no cursor)."""

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        if lease_seconds <= 0 or max_messages < 1:
            raise ValueError("bad arguments")
        self._check_open()
        now = self._store.clock.monotonic()
        window = sorted(self._store.in_flight.values(), key=lambda m: int(m.id))[
            : 10 * max_messages
        ]
        lapsed = [m for m in window if now - m.touched_at > m.lease_seconds][:max_messages]
        deliveries = []
        for message in lapsed:
            del self._store.in_flight[message.id]
            deliveries.append(self._grant(message, consumer, lease_seconds, now))
        return deliveries


class RepeatAckNotReported(InMemoryQueue):
    """Acking an already completed delivery claims success."""

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().ack(deliveries)
        return [d for d in lost if d.message_id in self._store.messages]


# Factory name -> (harness factory, the property that names the defect).
BROKEN: dict[str, tuple[Callable[[], MemoryHarness], str]] = {
    "heartbeat_does_not_extend": (subclass_factory(HeartbeatDoesNotExtend), "P15"),
    "heartbeat_steals_back": (subclass_factory(HeartbeatStealsBack), "P16"),
    "ack_ignores_ownership": (subclass_factory(AckIgnoresOwnership), "P12"),
    "reclaim_takes_live_leases": (subclass_factory(ReclaimTakesLiveLeases), "P13"),
    "acked_messages_come_back": (subclass_factory(AckedMessagesComeBack), "P9"),
    "release_loses_message": (subclass_factory(ReleaseLosesMessage), "P25"),
    "heartbeat_bumps_count": (subclass_factory(HeartbeatBumpsCount), "P22"),
    "len_counts_dead_letters": (subclass_factory(LenCountsDeadLetters), "P7"),
    "reclaim_keeps_count": (subclass_factory(ReclaimKeepsCount), "P14"),
    "dead_letter_drops_body": (subclass_factory(DeadLetterDropsBody), "P26"),
    "reclaim_without_cursor": (subclass_factory(ReclaimWithoutCursor), "P21"),
    "repeat_ack_not_reported": (subclass_factory(RepeatAckNotReported), "P10"),
}
BROKEN.update(BROKEN_FENCING)
BROKEN.update(BROKEN_DATA)
BROKEN.update(BROKEN_TIMING)
BROKEN.update(BROKEN_SCHEDULING)
BROKEN.update(BROKEN_RESULTS)
BROKEN.update(BROKEN_BROWSE)
BROKEN.update(BROKEN_EDGES)

heartbeat_does_not_extend = BROKEN["heartbeat_does_not_extend"][0]
heartbeat_steals_back = BROKEN["heartbeat_steals_back"][0]
ack_ignores_ownership = BROKEN["ack_ignores_ownership"][0]
reclaim_takes_live_leases = BROKEN["reclaim_takes_live_leases"][0]
acked_messages_come_back = BROKEN["acked_messages_come_back"][0]
release_loses_message = BROKEN["release_loses_message"][0]
