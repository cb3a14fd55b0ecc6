"""`InMemoryQueue`: the core of the contract, admin, workers and consumers in memory.

The optional parts live beside it (`scheduling`, `leadership`, `results`, `browse`) as
bases of the class; see the package docstring for what differs from a server.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Self

from taskrunner.clock import Clock, SystemClock, wait_event
from taskrunner.queue import (
    CONTRACT_VERSION,
    AddRequest,
    Capabilities,
    ConsumerStats,
    DeadLetter,
    Delivery,
    QueueNames,
    QueueStats,
    Receipt,
    WorkerInfo,
)
from taskrunner.queue_parts import (
    AdminOnSelf,
    BrowseOnSelf,
    ConsumerCleanupOnSelf,
    LeadershipOnSelf,
    LookupOnSelf,
    ResultsOnSelf,
    SchedulingOnSelf,
    WorkerRegistryOnSelf,
)

from ..checks import (
    check_bodies,
    check_count,
    check_deliveries,
    check_ids,
    check_seconds,
    check_worker,
    encode_reason,
)
from .browse import _Browsing, _Names
from .leadership import _Leadership
from .results import _Results
from .scheduling import _Scheduling
from .store import _Message, _Store

__all__ = ["InMemoryQueue"]

# The oldest ready message of a level rises one level per this many seconds ready.
PRIORITY_AGING_SECONDS = 60.0

_CAPABILITIES = Capabilities(
    blocking_receive=True,
    cancel_safe_receive=True,
    ordering="fifo",
    persistent=False,
    durable_enqueue=False,
    shared_across_instances=True,
    max_batch=None,
    delayed_add=True,
    unique_add=True,
    cancel=True,
    leadership=True,
    results=True,
    result_notify=True,
    lookup=True,
    browse=True,
    flow_control=True,
    priorities=True,
    priority_aging_seconds=PRIORITY_AGING_SECONDS,
)


class InMemoryQueue(
    _Scheduling,
    _Leadership,
    _Results,
    _Browsing,
    AdminOnSelf,
    WorkerRegistryOnSelf,
    ConsumerCleanupOnSelf,
    SchedulingOnSelf,
    LeadershipOnSelf,
    ResultsOnSelf,
    LookupOnSelf,
    BrowseOnSelf,
):
    """A `taskrunner.queue.Queue` held in process memory.

    Args:
        clock: Measures leases and delays; defaults to the system clock.
        requires_heartbeat: Whether leases lapse without heartbeats (default True).
            With False, `reclaim` never returns anything.

    Use `open_handle` for a second, independently closable handle on the same store,
    as a second worker process would have on a server-backed queue.
    """

    contract_version = CONTRACT_VERSION  # what the conformance suite checks

    def __init__(self, *, clock: Clock | None = None, requires_heartbeat: bool = True) -> None:
        self._store = _Store(clock=clock or SystemClock(), requires_heartbeat=requires_heartbeat)
        self._closed = False
        self._url_prefix: str | None = None

    @classmethod
    def _on_store(cls, store: _Store) -> Self:
        handle = cls.__new__(cls)
        handle._store = store
        handle._closed = False
        handle._url_prefix = None
        return handle

    def open_handle(self) -> InMemoryQueue:
        """Another handle on the same store, closed independently of this one."""
        return InMemoryQueue._on_store(self._store)

    @property
    def requires_heartbeat(self) -> bool:
        """Whether leases lapse unless heartbeated (set at construction)."""
        return self._store.requires_heartbeat

    @property
    def capabilities(self) -> Capabilities:
        """Blocking, cancel-safe, FIFO, shared by handles of one store, not persistent."""
        return _CAPABILITIES

    @property
    def queue_names(self) -> QueueNames | None:
        """The queues opened in this process through the same ``memory://NAME`` URL.

        None for a handle built directly (not through `open_from_url`): it belongs to
        no named store. A queue is listed from its first open on, used or not, until
        the process ends.
        """
        return None if self._url_prefix is None else _Names(self, self._url_prefix)

    # -- the contract ------------------------------------------------------------

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue bodies; ids are increasing decimal strings."""
        self._check_open()
        bodies = check_bodies(bodies)
        store = self._store
        now = store.clock.monotonic()
        ids = []
        for body in bodies:
            message_id = str(next(store.sequence))
            store.messages[message_id] = _Message(message_id, body, now)
            store.ready.append(message_id, 0, now)
            ids.append(message_id)
        if ids:
            store.notify()
        return ids

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Lease up to `max_messages` ready messages, waiting up to `wait_seconds`."""
        check_count("max_messages", max_messages)
        check_seconds("wait_seconds", wait_seconds)
        check_seconds("lease_seconds", lease_seconds, positive=True)
        self._check_open()
        store = self._store
        deadline = store.clock.monotonic() + wait_seconds
        while True:
            now = store.clock.monotonic()
            self._promote_due(now)
            store.consumers_seen[consumer] = now
            deliveries = self._lease_ready(consumer, max_messages, lease_seconds, now)
            if len(deliveries) < max_messages and store.flow.waiting:
                for message in store.flow.admit(now, max_messages - len(deliveries)):
                    deliveries.append(self._grant(message, consumer, lease_seconds, now))
            if deliveries:
                return deliveries
            remaining = deadline - now
            if remaining <= 0:
                return []
            if store.delayed:
                remaining = min(remaining, store.delayed[0][0] - now)
            wake = store.flow.next_wake()
            if wake is not None:
                remaining = min(remaining, wake - now)
            await wait_event(store.clock, store.arrival, remaining)
            self._check_open()

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Reset the idle time of owned deliveries; report the rest."""
        self._check_open()
        check_deliveries(deliveries)
        now = self._store.clock.monotonic()
        lost = []
        for delivery in deliveries:
            message = self._owned(delivery)
            if message is None:
                lost.append(delivery)
            else:
                message.touched_at = now
                self._store.consumers_seen[message.owner] = now
        return lost

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Complete and remove owned deliveries; report the rest."""
        self._check_open()
        check_deliveries(deliveries)
        lost = []
        for delivery in deliveries:
            message = self._owned(delivery)
            if message is None:
                lost.append(delivery)
            else:
                self._forget(message)
        return lost

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Make owned deliveries ready again after `delay_seconds`; report the rest."""
        check_seconds("delay_seconds", delay_seconds)
        self._check_open()
        check_deliveries(deliveries)
        store = self._store
        now = store.clock.monotonic()
        lost = []
        for delivery in deliveries:
            message = self._owned(delivery)
            if message is None:
                lost.append(delivery)
                continue
            del store.in_flight[message.id]
            message.owner = ""
            self._free_slot(message)
            if delay_seconds == 0:
                self._make_ready(message, now)
            else:
                message.state = "delayed"
                self._park(message.id, now + delay_seconds)
        store.notify()
        return lost

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Lease to `consumer` in-flight messages idle for longer than their own lease."""
        check_seconds("lease_seconds", lease_seconds, positive=True)
        check_count("max_messages", max_messages)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        store.consumers_seen[consumer] = now
        if not store.requires_heartbeat:
            return []
        lapsed = [
            message
            for message in store.in_flight.values()
            if now - message.touched_at > message.lease_seconds
        ][:max_messages]
        deliveries = []
        for message in lapsed:
            # Re-insert so in_flight stays ordered by the latest lease grant.
            del store.in_flight[message.id]
            deliveries.append(self._grant(message, consumer, lease_seconds, now))
        return deliveries

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Move owned deliveries to the dead-letter store; report the rest."""
        self._check_open()
        check_deliveries(deliveries)
        encode_reason(reason)
        store = self._store
        lost = []
        for delivery in deliveries:
            message = self._owned(delivery)
            if message is None:
                lost.append(delivery)
                continue
            self._forget(message)
            dead_id = f"dead-{next(store.sequence)}"
            store.dead_by_original[message.id] = dead_id
            if message.flow is not None or message.priority:
                store.dead_options[dead_id] = (message.flow, message.priority)
            store.dead[dead_id] = DeadLetter(
                message_id=dead_id,
                original_id=message.id,
                body=message.body,
                reason=reason,
                delivery_count=message.delivery_count,
                dead_at=store.clock.time(),
            )
        return lost

    async def stats(self) -> QueueStats:
        """Counts, ages and per-consumer pending counts."""
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        self._promote_due(now)
        pending: dict[str, int] = dict.fromkeys(store.consumers_seen, 0)
        for message in store.in_flight.values():
            pending[message.owner] = pending.get(message.owner, 0) + 1
        self._skip_cancelled_head()
        oldest_ready = store.ready.oldest_added_at(store.messages)
        oldest_waiting = store.flow.oldest_added_at() if store.flow.waiting else None
        if oldest_waiting is not None:
            oldest_ready = min(oldest_waiting, oldest_ready or oldest_waiting)
        oldest_touch = min((m.touched_at for m in store.in_flight.values()), default=None)
        return QueueStats(
            ready=len(store.ready) - store.cancelled_ready + store.flow.waiting,
            in_flight=len(store.in_flight),
            dead=len(store.dead),
            delayed=len(store.delayed) - store.cancelled_delayed,
            oldest_ready_age_seconds=None if oldest_ready is None else now - oldest_ready,
            oldest_in_flight_age_seconds=None if oldest_touch is None else now - oldest_touch,
            consumers=tuple(
                ConsumerStats(
                    name=name,
                    pending=count,
                    idle_seconds=now - store.consumers_seen.get(name, now),
                )
                for name, count in sorted(pending.items())
            ),
        )

    async def len(self) -> int:
        """Ready (including delayed) plus in-flight messages."""
        self._check_open()
        return len(self._store.messages)

    async def aclose(self) -> None:
        """Close this handle; other handles on the store stay open."""
        if not self._closed:
            self._closed = True
            # Wake this handle's waiting receives and wait_results so they raise
            # QueueClosedError; those of other handles keep waiting.
            self._store.notify()
            for waiters in self._store.result_waiters.values():
                for future, handle in waiters.items():
                    if handle is self and not future.done():
                        future.set_result(None)

    # -- QueueAdmin -----------------------------------------------------------------

    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters."""
        self._check_open()
        return list(itertools.islice(self._store.dead.values(), limit))

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        """Move dead letters back to the queue as new messages."""
        self._check_open()
        store = self._store
        chosen = list(store.dead) if message_ids is None else check_ids(message_ids)
        chosen = [i for i in chosen if i in store.dead]
        # A limited message stays limited (it waits for admission again), and a
        # message keeps its priority.
        options = [store.dead_options.get(i) for i in chosen]
        bodies = [self._pop_dead(i).body for i in chosen]
        if not any(options):
            return await self.add(bodies)
        requests = [
            AddRequest(body=b) if o is None else AddRequest(body=b, flow=o[0], priority=o[1])
            for b, o in zip(bodies, options, strict=True)
        ]
        return [added.message_id for added in await self.add_requests(requests)]

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters; returns how many."""
        self._check_open()
        store = self._store
        chosen = list(store.dead) if message_ids is None else check_ids(message_ids)
        return sum(self._pop_dead(i) is not None for i in chosen if i in store.dead)

    async def purge(self) -> int:
        """Delete every ready, delayed and in-flight message; dead letters and results stay."""
        self._check_open()
        store = self._store
        count = len(store.messages)
        store.messages.clear()
        store.ready.clear()
        store.delayed.clear()
        store.cancelled_ready = store.cancelled_delayed = 0
        store.in_flight.clear()
        store.unique.clear()
        store.flow.clear()
        return count

    async def delete_queue(self) -> None:
        """Delete messages, dead letters, consumers, worker entries and results of this store.

        A `wait_result` pending on the store keeps waiting (for a result stored later).
        """
        await self.purge()
        store = self._store
        store.dead.clear()
        store.dead_by_original.clear()
        store.dead_options.clear()
        store.results.clear()
        store.result_expiries.clear()
        store.consumers_seen.clear()
        store.workers.clear()
        store.elections.clear()
        store.tokens.clear()
        store.fired.clear()

    # -- WorkerRegistry --------------------------------------------------------------

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        """Create or refresh the entry of `info.instance` for `ttl_seconds`."""
        ttl_seconds = check_worker(info, ttl_seconds)
        self._check_open()
        store = self._store
        store.workers[info.instance] = (info, store.clock.monotonic() + ttl_seconds)

    async def remove_worker(self, instance: str) -> None:
        """Remove the entry of `instance`, if any."""
        self._check_open()
        self._store.workers.pop(instance, None)

    async def live_workers(self) -> list[WorkerInfo]:
        """Entries whose TTL has not run out."""
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        for instance in [i for i, (_, expiry) in store.workers.items() if expiry <= now]:
            del store.workers[instance]
        return [info for info, _ in store.workers.values()]

    # -- ConsumerCleanup ---------------------------------------------------------------

    async def remove_idle_consumers(self, idle_seconds: float) -> list[str]:
        """Forget consumers idle for `idle_seconds` that hold no message."""
        check_seconds("idle_seconds", idle_seconds)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        holders = {message.owner for message in store.in_flight.values()}
        removed = [
            name
            for name, seen in store.consumers_seen.items()
            if now - seen >= idle_seconds and name not in holders
        ]
        for name in removed:
            del store.consumers_seen[name]
        return removed

    async def remove_consumers(self, names: Sequence[str]) -> list[str]:
        """Forget the named consumers that hold no message."""
        if isinstance(names, str):
            raise TypeError("names must be a sequence of consumer names, not a single string")
        self._check_open()
        store = self._store
        holders = {message.owner for message in store.in_flight.values()}
        removed = [
            name
            for name in dict.fromkeys(names)
            if name in store.consumers_seen and name not in holders
        ]
        for name in removed:
            del store.consumers_seen[name]
        return removed

    # -- test conveniences (not part of the contract; the runner never calls these) --

    def held_results(self) -> int:
        """Results the store holds, expired ones not yet swept included."""
        return len(self._store.results)

    def ready_bodies(self) -> list[bytes]:
        """Bodies of ready messages in delivery order (delayed ones excluded)."""
        messages = self._store.messages
        return [messages[i].body for i in self._store.ready if i in messages]

    def in_flight(self) -> dict[str, tuple[str, int]]:
        """Message id -> (owner, delivery count) of every leased message."""
        return {m.id: (m.owner, m.delivery_count) for m in self._store.in_flight.values()}

    def dead_letters(self) -> list[DeadLetter]:
        """Every dead letter, oldest first."""
        return list(self._store.dead.values())

    # -- internals ------------------------------------------------------------------

    def _skip_cancelled_head(self) -> None:
        # So the head of `ready` is a live message (its age is the oldest ready age).
        store = self._store
        store.cancelled_ready -= store.ready.skip_gone(store.messages)

    def _lease_ready(
        self, consumer: str, max_messages: int, lease_seconds: float, now: float
    ) -> list[Delivery]:
        store = self._store
        deliveries: list[Delivery] = []
        aging = _CAPABILITIES.priority_aging_seconds
        while len(deliveries) < max_messages:
            message_id, dropped = store.ready.pop(now, aging, store.messages)
            store.cancelled_ready -= dropped
            if message_id is None:
                break
            deliveries.append(self._grant(store.messages[message_id], consumer, lease_seconds, now))
        return deliveries

    def _grant(
        self, message: _Message, consumer: str, lease_seconds: float, now: float
    ) -> Delivery:
        message.state = "in_flight"
        message.owner = consumer
        message.delivery_count += 1
        message.touched_at = now
        message.lease_seconds = lease_seconds
        self._store.in_flight[message.id] = message
        return Delivery(
            message_id=message.id,
            body=message.body,
            delivery_count=message.delivery_count,
            receipt=Receipt(consumer=consumer, delivery_count=message.delivery_count),
        )

    def _owned(self, delivery: Delivery) -> _Message | None:
        message = self._store.in_flight.get(delivery.message_id)
        receipt = delivery.receipt
        if (
            message is None
            or message.owner != receipt.consumer
            or message.delivery_count != receipt.delivery_count
        ):
            return None
        return message
