"""Record what concurrent clients did to a queue, then check it (Jepsen style).

Wrap every handle a workload uses with `History.wrap`; each call is logged with the
times it was invoked and completed, what went in and what came out. `check_history`
then judges the whole run:

* **Total queue** (Jepsen's ``total-queue``): *lost* messages were added (the add
  returned their id) but never delivered; *unexpected* deliveries carry an id or body
  nobody added; *duplicated* messages were delivered more than once (allowed: delivery
  is at least once; reported); *recovered* messages came from an add that raised, so
  their outcome was unknown. *Unfinished* messages were added but never acked or
  dead-lettered, which after a final drain means they were lost in flight. Valid
  means nothing lost and nothing unexpected.
* **Leases**: no two leases on one message may be live at the same time. A lease is
  *confirmed live* from its grant until ``lease - precision`` after the invocation of
  its grant or of its last successful heartbeat (less any ``age_lease`` applied since
  to the message),
  or until its owner's successful ack, release or dead-letter. A later lease granted
  while an earlier one was confirmed live is an *overlap*. A heartbeat, ack, release
  or dead-letter that succeeds with a receipt older than a lease granted before it
  was invoked is a *stale success*; a message completed twice, or delivered after it
  was completed, is reported too.

Time comes from the clock given to `History` (the scenario's: a fake clock, or real
monotonic time), so the comparisons never produce a false alarm: a lease is only
called live when the backend could not yet have let it lapse.

Example::

    history = History(clock=time.monotonic)
    queue = history.wrap(await harness.open_queue(ns), "worker-1")
    ...  # run the workload, then drain
    report = check_history(history, lease_seconds=30)
    assert report.valid, report.describe()
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from taskrunner.queue import (
    Capabilities,
    ConsumerCleanup,
    Delivery,
    Queue,
    QueueAdmin,
    QueueStats,
    WorkerRegistry,
)

__all__ = [
    "Event",
    "EventKind",
    "History",
    "HistoryReport",
    "LeaseViolation",
    "QueueCheck",
    "RecordingQueue",
    "check_history",
]

EventKind = Literal[
    "add", "receive", "reclaim", "heartbeat", "ack", "release", "dead_letter", "age"
]


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded call.

    Attributes:
        index: Position in the history (invocation order).
        kind: The method (or ``"age"`` for an ``age_lease`` hook call).
        process: Who called: a consumer, producer or handle label.
        invoked_at: Clock reading before the call.
        completed_at: Clock reading after the call returned or raised.
        bodies: For ``add``: the bodies.
        ids: For ``add``: the ids returned.
        sent: For heartbeat, ack, release, dead_letter and age: the deliveries passed.
        returned: For receive and reclaim: the deliveries granted; for heartbeat, ack,
            release and dead_letter: the deliveries reported lost.
        error: ``repr`` of the exception if the call raised (outcome unknown).
        seconds: For ``age``: how much older the lease was made.
    """

    index: int
    kind: EventKind
    process: str
    invoked_at: float
    completed_at: float
    bodies: tuple[bytes, ...] = ()
    ids: tuple[str, ...] = ()
    sent: tuple[Delivery, ...] = ()
    returned: tuple[Delivery, ...] = ()
    error: str | None = None
    seconds: float = 0.0

    def succeeded(self) -> list[Delivery]:
        """Deliveries sent to a heartbeat/ack/release/dead_letter that were not reported lost."""
        if self.error is not None:
            return []
        reported = Counter(_key(d) for d in self.returned)
        done = []
        for delivery in self.sent:
            if reported[_key(delivery)] > 0:
                reported[_key(delivery)] -= 1
            else:
                done.append(delivery)
        return done


def _key(delivery: Delivery) -> tuple[str, str, int]:
    return (delivery.message_id, delivery.receipt.consumer, delivery.receipt.delivery_count)


class History:
    """An append-only log of queue calls.

    Args:
        clock: Returns the current time in seconds on the backend's timeline.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.events: list[Event] = []
        self._index = itertools.count()

    def wrap(self, queue: Queue, process: str) -> RecordingQueue:
        """A handle that records every call it forwards to `queue` under `process`."""
        return RecordingQueue(queue, self, process)

    def record(
        self, event_kind: EventKind, process: str, invoked_at: float, **fields: object
    ) -> None:
        """Append one event completed now (used by `RecordingQueue` and hooks)."""
        self.events.append(
            Event(
                index=next(self._index),
                kind=event_kind,
                process=process,
                invoked_at=invoked_at,
                completed_at=self.clock(),
                **fields,  # type: ignore[arg-type]
            )
        )

    def record_age(self, delivery: Delivery, seconds: float) -> None:
        """Note that the lease `delivery` holds was made `seconds` older by the harness."""
        now = self.clock()
        self.record("age", "harness", now, sent=(delivery,), seconds=seconds)


class RecordingQueue:
    """A `Queue` that logs every call into a `History` and forwards it unchanged."""

    def __init__(self, queue: Queue, history: History, process: str) -> None:
        self.inner = queue
        self.history = history
        self.process = process

    @property
    def requires_heartbeat(self) -> bool:
        """The wrapped queue's value."""
        return self.inner.requires_heartbeat

    @property
    def capabilities(self) -> Capabilities:
        """The wrapped queue's value."""
        return self.inner.capabilities

    @property
    def admin(self) -> QueueAdmin | None:
        """None: admin operations would bypass the history, so none are offered."""
        return None

    @property
    def worker_registry(self) -> WorkerRegistry | None:
        """None: the history records queue operations only."""
        return None

    @property
    def consumer_cleanup(self) -> ConsumerCleanup | None:
        """None: the history records queue operations only."""
        return None

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Forward and record."""
        start = self.history.clock()
        try:
            ids = await self.inner.add(bodies)
        except Exception as exc:
            self.history.record("add", self.process, start, bodies=tuple(bodies), error=repr(exc))
            raise
        self.history.record("add", self.process, start, bodies=tuple(bodies), ids=tuple(ids))
        return ids

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Forward and record."""
        start = self.history.clock()
        try:
            got = await self.inner.receive(
                consumer,
                max_messages=max_messages,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
            )
        except Exception as exc:
            self.history.record("receive", consumer, start, error=repr(exc))
            raise
        self.history.record("receive", consumer, start, returned=tuple(got))
        return got

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Forward and record."""
        start = self.history.clock()
        try:
            got = await self.inner.reclaim(
                consumer, lease_seconds=lease_seconds, max_messages=max_messages
            )
        except Exception as exc:
            self.history.record("reclaim", consumer, start, error=repr(exc))
            raise
        self.history.record("reclaim", consumer, start, returned=tuple(got))
        return got

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Forward and record."""
        return await self._settle("heartbeat", deliveries, self.inner.heartbeat(deliveries))

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Forward and record."""
        return await self._settle("ack", deliveries, self.inner.ack(deliveries))

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Forward and record."""
        call = self.inner.release(deliveries, delay_seconds=delay_seconds)
        return await self._settle("release", deliveries, call)

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Forward and record."""
        call = self.inner.dead_letter(deliveries, reason=reason)
        return await self._settle("dead_letter", deliveries, call)

    async def stats(self) -> QueueStats:
        """Forward (not recorded)."""
        return await self.inner.stats()

    async def len(self) -> int:
        """Forward (not recorded)."""
        return await self.inner.len()

    async def aclose(self) -> None:
        """Forward (not recorded)."""
        await self.inner.aclose()

    async def _settle(
        self,
        kind: EventKind,
        deliveries: Sequence[Delivery],
        call: object,
    ) -> list[Delivery]:
        start = self.history.clock()
        process = self.process
        try:
            lost: list[Delivery] = await call  # type: ignore[misc]
        except Exception as exc:
            self.history.record(kind, process, start, sent=tuple(deliveries), error=repr(exc))
            raise
        self.history.record(kind, process, start, sent=tuple(deliveries), returned=tuple(lost))
        return lost


@dataclass(slots=True)
class QueueCheck:
    """Jepsen total-queue result.

    Attributes:
        attempted: Bodies whose add was invoked.
        acknowledged: Messages whose add returned an id.
        delivered: Deliveries made (receive and reclaim results).
        completed: Messages acked or dead-lettered successfully.
        lost: Ids added but never delivered.
        unfinished: Ids added but never completed.
        unexpected: Descriptions of deliveries nobody added (or with a changed body).
        duplicated: Id -> deliveries, for messages delivered more than once.
        recovered: Ids delivered whose add raised.
    """

    attempted: int = 0
    acknowledged: int = 0
    delivered: int = 0
    completed: int = 0
    lost: set[str] = field(default_factory=set)
    unfinished: set[str] = field(default_factory=set)
    unexpected: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    recovered: set[str] = field(default_factory=set)

    @property
    def valid(self) -> bool:
        """Nothing lost and nothing unexpected (duplicates are allowed)."""
        return not self.lost and not self.unexpected


@dataclass(frozen=True, slots=True)
class LeaseViolation:
    """One breach of lease exclusivity or fencing.

    Attributes:
        message_id: The message concerned.
        kind: ``overlap``, ``stale-success``, ``double-grant``, ``double-completion``,
            ``delivered-after-completion`` or ``unknown-receipt``.
        detail: What happened, with event indexes.
    """

    message_id: str
    kind: str
    detail: str


@dataclass(slots=True)
class HistoryReport:
    """Everything `check_history` found.

    Attributes:
        queue: The total-queue result.
        violations: Lease and fencing violations; must be empty.
    """

    queue: QueueCheck
    violations: list[LeaseViolation]

    @property
    def valid(self) -> bool:
        """Total queue valid and no lease violations."""
        return self.queue.valid and not self.violations

    def describe(self, limit: int = 10) -> str:
        """A readable summary for assertion messages."""
        q = self.queue
        lines = [
            f"attempted={q.attempted} acknowledged={q.acknowledged} delivered={q.delivered} "
            f"completed={q.completed} lost={len(q.lost)} unfinished={len(q.unfinished)} "
            f"unexpected={len(q.unexpected)} duplicated={len(q.duplicated)} "
            f"recovered={len(q.recovered)} violations={len(self.violations)}"
        ]
        if q.lost:
            lines.append(f"lost: {sorted(q.lost)[:limit]}")
        if q.unfinished:
            lines.append(f"unfinished: {sorted(q.unfinished)[:limit]}")
        lines.extend(f"unexpected: {u}" for u in q.unexpected[:limit])
        lines.extend(f"{v.kind} on {v.message_id}: {v.detail}" for v in self.violations[:limit])
        return "\n".join(lines)


@dataclass(slots=True)
class _Lease:
    message_id: str
    consumer: str
    count: int
    granted: Event
    live_until: float
    ended_at: float = float("inf")

    @property
    def label(self) -> str:
        return f"{self.consumer}#{self.count}"


def check_history(
    history: History | Sequence[Event], *, lease_seconds: float, precision: float = 0.0
) -> HistoryReport:
    """Check a recorded history; see the module docstring for the rules.

    Args:
        history: The history (or its events).
        lease_seconds: The ``idle_seconds`` every reclaim in the run used.
        precision: The backend's `Capabilities.lease_precision_seconds`.
    """
    events = sorted(
        history.events if isinstance(history, History) else history,
        key=lambda e: (e.invoked_at, e.index),
    )
    return HistoryReport(
        queue=_check_total_queue(events),
        violations=_check_leases(events, lease_seconds - precision),
    )


def _check_total_queue(events: Sequence[Event]) -> QueueCheck:
    check = QueueCheck()
    acknowledged: dict[str, bytes] = {}
    indeterminate: Counter[bytes] = Counter()
    # Adds first: a message can be delivered before the add that created it returns.
    for event in events:
        if event.kind == "add":
            check.attempted += len(event.bodies)
            if event.error is None:
                acknowledged.update(zip(event.ids, event.bodies, strict=True))
            else:
                indeterminate.update(event.bodies)
    deliveries: Counter[str] = Counter()
    completed: set[str] = set()
    for event in events:
        if event.kind in ("receive", "reclaim"):
            for delivery in event.returned:
                check.delivered += 1
                deliveries[delivery.message_id] += 1
                _judge_delivery(check, delivery, acknowledged, indeterminate)
        elif event.kind in ("ack", "dead_letter"):
            completed.update(d.message_id for d in event.succeeded())
    check.acknowledged = len(acknowledged)
    check.completed = len(completed)
    check.lost = set(acknowledged) - set(deliveries)
    check.unfinished = set(acknowledged) - completed
    check.duplicated = {i: n for i, n in deliveries.items() if n > 1}
    return check


def _judge_delivery(
    check: QueueCheck,
    delivery: Delivery,
    acknowledged: dict[str, bytes],
    indeterminate: Counter[bytes],
) -> None:
    added = acknowledged.get(delivery.message_id)
    if added is None:
        if delivery.body in indeterminate:
            check.recovered.add(delivery.message_id)
        else:
            check.unexpected.append(
                f"{delivery.message_id} ({delivery.body[:40]!r}) was never added"
            )
    elif added != delivery.body:
        check.unexpected.append(
            f"{delivery.message_id} came back with body {delivery.body[:40]!r}, "
            f"added as {added[:40]!r}"
        )


def _check_leases(events: Sequence[Event], live_span: float) -> list[LeaseViolation]:
    violations: list[LeaseViolation] = []
    leases: dict[tuple[str, str, int], _Lease] = {}
    by_message: defaultdict[str, list[_Lease]] = defaultdict(list)
    completions: defaultdict[str, list[Event]] = defaultdict(list)

    for event in events:
        if event.error is not None:
            continue
        if event.kind in ("receive", "reclaim"):
            for delivery in event.returned:
                key = _key(delivery)
                if key in leases:
                    violations.append(
                        LeaseViolation(
                            delivery.message_id,
                            "double-grant",
                            f"lease {key[1]}#{key[2]} granted twice (events "
                            f"{leases[key].granted.index} and {event.index})",
                        )
                    )
                    continue
                same_count = [
                    lease
                    for lease in by_message[delivery.message_id]
                    if lease.count == delivery.receipt.delivery_count
                ]
                if same_count:
                    violations.append(
                        LeaseViolation(
                            delivery.message_id,
                            "double-grant",
                            f"delivery count {delivery.receipt.delivery_count} granted to "
                            f"{same_count[0].label} (event {same_count[0].granted.index}) and "
                            f"{delivery.receipt.consumer} (event {event.index})",
                        )
                    )
                lease = _Lease(
                    delivery.message_id,
                    delivery.receipt.consumer,
                    delivery.receipt.delivery_count,
                    event,
                    live_until=event.invoked_at + live_span,
                )
                leases[key] = lease
                by_message[delivery.message_id].append(lease)
        elif event.kind == "age":
            # A hook may age whichever lease is current on the message, not only the
            # one the delivery names; shortening every lease of the message can only
            # hide an overlap, never invent one.
            for delivery in event.sent:
                for aged in by_message[delivery.message_id]:
                    aged.live_until -= event.seconds
        elif event.kind in ("heartbeat", "ack", "release", "dead_letter"):
            for delivery in event.succeeded():
                holder = leases.get(_key(delivery))
                if holder is None:
                    violations.append(
                        LeaseViolation(
                            delivery.message_id,
                            "unknown-receipt",
                            f"{event.kind} (event {event.index}) succeeded for receipt "
                            f"{delivery.receipt.consumer}#{delivery.receipt.delivery_count}, "
                            "which no receive or reclaim granted",
                        )
                    )
                    continue
                newer = [
                    other
                    for other in by_message[delivery.message_id]
                    if other.count > holder.count and other.granted.completed_at < event.invoked_at
                ]
                if newer:
                    violations.append(
                        LeaseViolation(
                            delivery.message_id,
                            "stale-success",
                            f"{event.kind} by {holder.label} (event {event.index}) succeeded after "
                            f"{newer[0].label} was granted (event {newer[0].granted.index})",
                        )
                    )
                if event.kind == "heartbeat":
                    holder.live_until = max(holder.live_until, event.invoked_at + live_span)
                else:
                    holder.ended_at = min(holder.ended_at, event.invoked_at)
                if event.kind in ("ack", "dead_letter"):
                    completions[delivery.message_id].append(event)

    for message_id, done in completions.items():
        if len(done) > 1:
            violations.append(
                LeaseViolation(
                    message_id,
                    "double-completion",
                    f"completed by events {[e.index for e in done]}",
                )
            )
        first = done[0]
        for lease in by_message[message_id]:
            if lease.granted.invoked_at > first.completed_at:
                violations.append(
                    LeaseViolation(
                        message_id,
                        "delivered-after-completion",
                        f"{first.kind} (event {first.index}) completed it, then "
                        f"{lease.granted.kind} (event {lease.granted.index}) delivered it "
                        f"to {lease.label}",
                    )
                )

    for message_id, message_leases in by_message.items():
        ordered = sorted(message_leases, key=lambda lease: lease.count)
        for earlier, later in itertools.combinations(ordered, 2):
            if later.count == earlier.count:
                continue
            live_end = min(earlier.live_until, earlier.ended_at)
            if later.granted.completed_at < live_end:
                violations.append(
                    LeaseViolation(
                        message_id,
                        "overlap",
                        f"{later.granted.kind} (event {later.granted.index}) granted "
                        f"{later.label} while {earlier.label} (event {earlier.granted.index}) "
                        f"was live for {live_end - later.granted.completed_at:.3f}s more",
                    )
                )
    return violations
