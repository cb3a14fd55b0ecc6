"""A reference model of the `taskrunner.queue.Queue` contract, written from its docstrings.

The model does not predict what a backend will choose; it checks that each choice the
backend made is one the contract allows, then applies it ("check, don't predict").
`receive` may return any subset of the ready messages (at least one if a message never
delivered is waiting); `reclaim` any subset of the lapsed or released ones. What the
contract fixes exactly is predicted exactly: which deliveries a heartbeat, ack,
release or dead-letter reports lost, delivery counts, bodies, `len` and the dead count.

Time is known only within bounds. The model counts the time it was told about (fake
clock advances, ``age_lease`` calls); on a real-time backend the wall time since a
lease was touched may be added on top. A lease is *surely live* when even the upper
bound of its idle time is below the lease minus the precision, *surely lapsed* when
the lower bound is above the lease plus the precision; in between either outcome is
accepted.

It is deliberately independent of `taskrunner_backends.memory`, so that the in-memory
backend is itself under test.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from taskrunner.queue import Delivery, Receipt

__all__ = ["ModelMessage", "ReferenceModel"]

State = Literal["ready", "in_flight", "released", "acked", "dead"]

# Floating-point slack added to every boundary, relative to the lease.
_EPSILON = 1e-9


@dataclass(slots=True)
class ModelMessage:
    """What the model knows about one message.

    Attributes:
        id: The id `add` returned.
        body: The body added.
        state: ``ready`` (never delivered), ``in_flight``, ``released`` (given back,
            maybe not yet due), ``acked`` or ``dead``.
        count: Deliveries so far.
        receipt: The receipt of the current lease, when in flight.
        idle: Known idle time of the current lease (lower bound).
        touched_real: Real monotonic time of the last grant or heartbeat.
        delay: For released messages, the delay asked for.
        waited: For released messages, known time since the release (lower bound).
        released_real: Real monotonic time of the release.
    """

    id: str
    body: bytes
    state: State = "ready"
    count: int = 0
    receipt: Receipt | None = None
    idle: float = 0.0
    touched_real: float = 0.0
    delay: float = 0.0
    waited: float = 0.0
    released_real: float = 0.0


@dataclass(slots=True)
class ReferenceModel:
    """The expected state of one queue.

    Args:
        lease: The ``idle_seconds`` every reclaim uses.
        precision: `Capabilities.lease_precision_seconds`.
        requires_heartbeat: Whether leases lapse at all.
        real_time: Whether wall time passes on the backend's clock too.
        max_batch: `Capabilities.max_batch`.
    """

    lease: float
    precision: float = 0.0
    requires_heartbeat: bool = True
    real_time: bool = False
    max_batch: int | None = None
    messages: dict[str, ModelMessage] = field(default_factory=dict)
    dead: int = 0
    # (original id, body, reason, delivery count) of every dead letter, oldest first.
    dead_letters: list[tuple[str, bytes, str, int]] = field(default_factory=list)

    # -- time ------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Time passed on the backend's clock for every lease and delay."""
        for message in self.messages.values():
            message.idle += seconds
            message.waited += seconds

    def age(self, message_id: str, seconds: float) -> None:
        """The harness made one lease `seconds` older."""
        self.messages[message_id].idle += seconds

    def _slack(self) -> float:
        return self.precision + _EPSILON * self.lease

    def _idle_upper(self, message: ModelMessage) -> float:
        extra = time.monotonic() - message.touched_real if self.real_time else 0.0
        return message.idle + extra

    def _waited_upper(self, message: ModelMessage) -> float:
        extra = time.monotonic() - message.released_real if self.real_time else 0.0
        return message.waited + extra

    def surely_live(self, message: ModelMessage) -> bool:
        """In flight, and the lease cannot have lapsed yet."""
        if message.state != "in_flight":
            return False
        if not self.requires_heartbeat:
            return True
        return self._idle_upper(message) < self.lease - self._slack()

    def surely_lapsed(self, message: ModelMessage) -> bool:
        """In flight, and the lease has certainly lapsed."""
        return (
            message.state == "in_flight"
            and self.requires_heartbeat
            and message.idle > self.lease + self._slack()
        )

    def surely_due(self, message: ModelMessage) -> bool:
        """Released, and its delay has certainly passed."""
        return message.state == "released" and message.waited >= message.delay + self._slack()

    def surely_not_due(self, message: ModelMessage) -> bool:
        """Released, and its delay cannot have passed yet."""
        return (
            message.state == "released"
            and self._waited_upper(message) < message.delay - self._slack()
        )

    # -- views -----------------------------------------------------------------------

    def live(self) -> list[ModelMessage]:
        """Messages not yet acked or dead-lettered."""
        return [m for m in self.messages.values() if m.state not in ("acked", "dead")]

    def length(self) -> int:
        """What `len` must return: ready, released and in-flight messages."""
        return len(self.live())

    def is_current(self, delivery: Delivery) -> bool:
        """Whether `delivery` holds the message's current lease."""
        message = self.messages.get(delivery.message_id)
        return (
            message is not None
            and message.state == "in_flight"
            and message.receipt == delivery.receipt
        )

    # -- operations --------------------------------------------------------------------

    def added(self, bodies: Sequence[bytes], ids: Sequence[str]) -> None:
        """Check and apply the result of `add`."""
        assert len(ids) == len(bodies), f"add of {len(bodies)} bodies returned {len(ids)} ids"
        assert len(set(ids)) == len(ids), f"add returned duplicate ids {list(ids)}"
        reused = [i for i in ids if i in self.messages]
        assert not reused, f"add returned ids already in use: {reused}"
        for message_id, body in zip(ids, bodies, strict=True):
            self.messages[message_id] = ModelMessage(message_id, body)

    def received(self, consumer: str, max_messages: int, got: Sequence[Delivery]) -> None:
        """Check and apply the result of ``receive(consumer, max_messages, wait_seconds=0)``."""
        self._check_batch("receive", max_messages, got)
        for delivery in got:
            message = self._known(delivery)
            eligible = message.state == "ready" or (
                message.state == "released" and not self.surely_not_due(message)
            )
            assert eligible, f"receive returned {message.id}, which is {self._describe(message)}"
        if not got:
            waiting = [m.id for m in self.messages.values() if m.state == "ready"]
            assert not waiting, (
                f"receive returned [] while {len(waiting)} never-delivered message(s) "
                f"were ready: {waiting[:5]}"
            )
        self._grant(consumer, got)

    def reclaimed(self, consumer: str, max_messages: int, got: Sequence[Delivery]) -> None:
        """Check and apply the result of ``reclaim(consumer, idle_seconds=lease, ...)``."""
        self._check_batch("reclaim", max_messages, got)
        for delivery in got:
            message = self._known(delivery)
            eligible = (
                message.state == "in_flight"
                and self.requires_heartbeat
                and not self.surely_live(message)
            ) or (message.state == "released" and not self.surely_not_due(message))
            assert eligible, f"reclaim returned {message.id}, which is {self._describe(message)}"
        self._grant(consumer, got)

    def heartbeat(self, sent: Sequence[Delivery], lost: Sequence[Delivery]) -> None:
        """Check and apply the result of `heartbeat`."""
        expected = [d for d in sent if not self.is_current(d)]
        _same("heartbeat", sent, expected, lost)
        now = time.monotonic()
        for delivery in sent:
            if self.is_current(delivery):
                message = self.messages[delivery.message_id]
                message.idle = 0.0
                message.touched_real = now

    def acked(self, sent: Sequence[Delivery], lost: Sequence[Delivery]) -> None:
        """Check and apply the result of `ack`."""
        self._finish("ack", sent, lost, "acked", "")

    def dead_lettered(
        self, sent: Sequence[Delivery], lost: Sequence[Delivery], reason: str = ""
    ) -> None:
        """Check and apply the result of `dead_letter`."""
        self._finish("dead_letter", sent, lost, "dead", reason)

    def released(self, sent: Sequence[Delivery], lost: Sequence[Delivery], delay: float) -> None:
        """Check and apply the result of `release`."""
        expected = []
        now = time.monotonic()
        for delivery in sent:
            if not self.is_current(delivery):
                expected.append(delivery)
                continue
            message = self.messages[delivery.message_id]
            message.state = "released"
            message.receipt = None
            message.delay = delay
            message.waited = 0.0
            message.released_real = now
        _same("release", sent, expected, lost)

    # -- internals ---------------------------------------------------------------------

    def _finish(
        self,
        operation: str,
        sent: Sequence[Delivery],
        lost: Sequence[Delivery],
        state: State,
        reason: str,
    ) -> None:
        expected = []
        for delivery in sent:
            # Sequential semantics: a second copy of a delivery in one batch finds the
            # message already completed.
            if not self.is_current(delivery):
                expected.append(delivery)
                continue
            message = self.messages[delivery.message_id]
            message.state = state
            message.receipt = None
            if state == "dead":
                self.dead += 1
                self.dead_letters.append((message.id, message.body, reason, message.count))
        _same(operation, sent, expected, lost)

    def _check_batch(self, operation: str, max_messages: int, got: Sequence[Delivery]) -> None:
        limit = max_messages if self.max_batch is None else min(max_messages, self.max_batch)
        assert len(got) <= limit, (
            f"{operation}(max_messages={max_messages}) returned {len(got)} deliveries"
        )
        ids = [d.message_id for d in got]
        assert len(set(ids)) == len(ids), f"{operation} returned one message twice: {ids}"

    def _known(self, delivery: Delivery) -> ModelMessage:
        message = self.messages.get(delivery.message_id)
        assert message is not None, f"delivery of unknown message id {delivery.message_id!r}"
        assert delivery.body == message.body, (
            f"{message.id} delivered with body {delivery.body!r}, added as {message.body!r}"
        )
        assert delivery.delivery_count == message.count + 1, (
            f"{message.id} delivered with count {delivery.delivery_count}, "
            f"expected {message.count + 1}"
        )
        assert delivery.receipt.delivery_count == delivery.delivery_count, (
            f"receipt count {delivery.receipt.delivery_count} != delivery count "
            f"{delivery.delivery_count}"
        )
        return message

    def _grant(self, consumer: str, got: Sequence[Delivery]) -> None:
        now = time.monotonic()
        for delivery in got:
            assert delivery.receipt.consumer == consumer, (
                f"{delivery.message_id} leased to {delivery.receipt.consumer!r}, "
                f"asked by {consumer!r}"
            )
            message = self.messages[delivery.message_id]
            message.state = "in_flight"
            message.count += 1
            message.receipt = delivery.receipt
            message.idle = 0.0
            message.touched_real = now

    def _describe(self, message: ModelMessage) -> str:
        if message.state == "in_flight":
            return (
                f"in flight to {message.receipt.consumer if message.receipt else '?'} "
                f"with a live lease (idle {message.idle:.3f}s of {self.lease:.3f}s)"
            )
        if message.state == "released":
            return f"released with a delay of {message.delay:.3f}s, {message.waited:.3f}s ago"
        if message.state == "ready":
            return "ready and never delivered"
        return message.state


def _same(
    operation: str,
    sent: Sequence[Delivery],
    expected: Sequence[Delivery],
    lost: Sequence[Delivery],
) -> None:
    def keys(items: Sequence[Delivery]) -> list[tuple[str, str, int]]:
        return sorted((d.message_id, d.receipt.consumer, d.receipt.delivery_count) for d in items)

    assert keys(lost) == keys(expected), (
        f"{operation} of {keys(sent)} reported lost {keys(lost)}, expected {keys(expected)}"
    )
