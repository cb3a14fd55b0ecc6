"""The in-memory backend: the full `Queue` contract inside one process.

Use it for unit tests and as the embedded default (``memory://``). Differences from a
server-backed queue, stated up front:

* State lives in a process-local store. Handles opened on the same store (with
  `InMemoryQueue.open_handle`, or with the same ``memory://NAME`` URL in one process)
  see the same messages; other processes see nothing, and nothing survives the process.
* Leases are measured on the injected `Clock`, so a test advances a
  `taskrunner.testing.FakeClock` past a lease instead of sleeping.
* With ``requires_heartbeat=False`` leases never lapse: `reclaim` returns nothing and
  in-flight messages come back only through `release`.
* All handles must be used from one event loop; the store is not thread-safe.
* Delayed adds, unique keys, cancellation and leadership (`scheduling`, `leadership`)
  are exact on the injected clock: precision 0, so a delayed message is ready at its
  due time and a unique key or a leader lease lapses at its deadline, to the tick.
  ``due_at`` is read against the clock's wall time once, at the add, and then waits
  on its monotonic time like a release delay. `cancel` leaves the entry in place and
  skips it when reached (constant time per id); counts subtract the skipped entries.
* Results (`results`) are exact on the injected clock too: a result is returned while
  the clock reads before its expiry and never from its expiry on. Handles of one store
  share them, as they share messages. Expired results are dropped when read and swept
  from a heap of expiries on every `ResultStore` call, at most ``256`` plus the number
  of writes in the call each time, so no call pauses on a backlog, a backlog drains
  (each call removes more than it adds), and the heap is rebuilt once it holds more
  than twice the results plus 1024 entries (stale entries of overwritten results).
  `wait_result` waits on a future that `put_results` completes: no polling.
* `browse` lists waiting messages in id order (the add order; a released message keeps
  its place) by walking the store's records from the first, so a page costs a walk
  up to its cursor (in process: about 50 ns per message passed over); in-flight ones
  in id order from the leased set, a page costing the number in flight.
* `lookup` answers from the message records and an index of dead letters by original
  id, in constant time per id. Times are read off the monotonic clock and reported on
  the wall clock as the clock reads it now (``added_at`` and ``due_at`` move with any
  step of the wall clock since the add).

Below the contract methods, under "Test conveniences", sit synchronous inspection
helpers (`ready_bodies`, `in_flight`, `dead_letters`, `held_results`). The runner
never calls them.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Self
from urllib.parse import parse_qsl, urlsplit

from taskrunner.clock import Clock, SystemClock, wait_event, wait_future
from taskrunner.errors import ConfigurationError, QueueClosedError
from taskrunner.queue import (
    Added,
    AddRequest,
    BrowsedMessage,
    BrowseState,
    Capabilities,
    ConsumerCleanup,
    ConsumerStats,
    DeadLetter,
    Delivery,
    FireRecord,
    LeaderLease,
    Leadership,
    MessageBrowser,
    MessageLookup,
    MessageState,
    QueueAdmin,
    QueueNameList,
    QueueNames,
    QueueStats,
    Receipt,
    ResultStore,
    ResultWrite,
    Scheduling,
    WorkerInfo,
    WorkerRegistry,
    check_browse,
    check_names_limit,
)

from .checks import (
    check_bodies,
    check_body,
    check_count,
    check_deliveries,
    check_ids,
    check_instant,
    check_names,
    check_requests,
    check_result_writes,
    check_seconds,
    check_text,
    check_token,
    check_worker,
    encode_reason,
)

__all__ = ["InMemoryQueue", "open_from_url"]

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
)

# Expired results each ResultStore call sweeps at most (beyond the writes it makes), so
# a backlog costs no single call more than this many heap pops.
_SWEEP_PER_CALL = 256
# The expiry heap is rebuilt from the live entries once it holds more than twice as
# many entries as there are results plus this slack (stale entries of overwrites).
_HEAP_SLACK = 1024
# Fencing tokens are Python ints here; the bound is PostgreSQL's bigint, so a token
# another backend could not hold is refused here too.
_TOKEN_BITS = 63


@dataclass(slots=True)
class _Message:
    id: str
    body: bytes
    added_at: float
    state: Literal["ready", "delayed", "in_flight"] = "ready"
    delivery_count: int = 0
    owner: str = ""
    # Monotonic time of the last delivery or heartbeat; idle time is measured from it.
    touched_at: float = 0.0
    # The lease its holder was granted; it lapses once idle for longer.
    lease_seconds: float = 0.0
    # The unique key this message was added with, freed at its final outcome.
    unique_key: str | None = None
    # Monotonic time a delayed message falls due (meaningful while state is "delayed").
    due: float = 0.0


@dataclass(slots=True)
class _Election:
    holder: str
    token: int
    # Monotonic time the lease lapses at.
    expiry: float


@dataclass(slots=True)
class _Store:
    clock: Clock
    requires_heartbeat: bool
    messages: dict[str, _Message] = field(default_factory=dict)
    ready: deque[str] = field(default_factory=deque)
    # (due monotonic time, sequence, message id) of released messages not yet due.
    delayed: list[tuple[float, int, str]] = field(default_factory=list)
    # Entries of `ready` and `delayed` whose message was cancelled: left in place (removal
    # from the middle is O(n)), skipped when reached and subtracted from the counts.
    cancelled_ready: int = 0
    cancelled_delayed: int = 0
    in_flight: dict[str, _Message] = field(default_factory=dict)
    dead: dict[str, DeadLetter] = field(default_factory=dict)
    # original message id -> dead-letter id, so lookup finds a dead letter in O(1).
    dead_by_original: dict[str, str] = field(default_factory=dict)
    consumers_seen: dict[str, float] = field(default_factory=dict)
    # instance -> (entry, monotonic expiry)
    workers: dict[str, tuple[WorkerInfo, float]] = field(default_factory=dict)
    sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # unique key -> (message id holding it, monotonic expiry or None)
    unique: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    elections: dict[str, _Election] = field(default_factory=dict)
    # Latest token issued per election; survives resignations so tokens never repeat.
    tokens: dict[str, int] = field(default_factory=dict)
    fired: dict[str, FireRecord] = field(default_factory=dict)
    # message id -> (result body, monotonic expiry)
    results: dict[str, tuple[bytes, float]] = field(default_factory=dict)
    # (monotonic expiry, message id) per write; entries of overwritten results go stale
    # and are skipped when popped.
    result_expiries: list[tuple[float, str]] = field(default_factory=list)
    # message id -> {future of a waiting wait_result: the handle it waits through}
    result_waiters: dict[str, dict[asyncio.Future[None], InMemoryQueue]] = field(
        default_factory=dict
    )
    # Replaced by a fresh event each time it is set, so every waiter of one
    # generation wakes once.
    arrival: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self.arrival.set()
        self.arrival = asyncio.Event()


class InMemoryQueue:
    """A `taskrunner.queue.Queue` held in process memory.

    Args:
        clock: Measures leases and delays; defaults to the system clock.
        requires_heartbeat: Whether leases lapse without heartbeats (default True).
            With False, `reclaim` never returns anything.

    Use `open_handle` for a second, independently closable handle on the same store,
    as a second worker process would have on a server-backed queue.
    """

    def __init__(self, *, clock: Clock | None = None, requires_heartbeat: bool = True) -> None:
        self._store = _Store(clock=clock or SystemClock(), requires_heartbeat=requires_heartbeat)
        self._closed = False
        # The ``memory://NAME`` a handle was opened through, for `queue_names`.
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
    def admin(self) -> QueueAdmin:
        """This queue: dead letters, purge and delete are implemented."""
        return self

    @property
    def worker_registry(self) -> WorkerRegistry:
        """This queue: it keeps a worker registry."""
        return self

    @property
    def consumer_cleanup(self) -> ConsumerCleanup:
        """This queue: it forgets idle consumers on request."""
        return self

    @property
    def scheduling(self) -> Scheduling:
        """This queue: delayed and unique adds and cancellation are implemented."""
        return self

    @property
    def leadership(self) -> Leadership:
        """This queue: leader leases and fire-once records are implemented."""
        return self

    @property
    def results(self) -> ResultStore:
        """This queue: task results with a TTL, shared by the handles of one store."""
        return self

    @property
    def lookup(self) -> MessageLookup:
        """The state of messages by id, answered from this store's records.

        A separate object, not the queue itself: the part's one method is also named
        ``lookup``, which the queue's own attribute of that name (this property) hides.
        """
        return _Lookup(self)

    @property
    def queue_names(self) -> QueueNames | None:
        """The queues opened in this process through the same ``memory://NAME`` URL.

        None for a handle built directly (not through `open_from_url`): it belongs to
        no named store. A queue is listed from its first open on, used or not, until
        the process ends.
        """
        return None if self._url_prefix is None else _Names(self, self._url_prefix)

    @property
    def browse(self) -> MessageBrowser:
        """A read-only, keyset-paged listing of waiting and in-flight messages (`browse_messages`).

        A separate object, as `lookup`: the part's one method is also named ``browse``.
        """
        return _Browser(self)

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
            store.ready.append(message_id)
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
            if len(store.ready) > store.cancelled_ready:
                return self._lease_ready(consumer, max_messages, lease_seconds, now)
            remaining = deadline - now
            if remaining <= 0:
                return []
            if store.delayed:
                remaining = min(remaining, store.delayed[0][0] - now)
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
            if delay_seconds == 0:
                message.state = "ready"
                store.ready.append(message.id)
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
        oldest_ready = store.messages[store.ready[0]].added_at if store.ready else None
        oldest_touch = min((m.touched_at for m in store.in_flight.values()), default=None)
        return QueueStats(
            ready=len(store.ready) - store.cancelled_ready,
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
        chosen = list(store.dead) if message_ids is None else list(message_ids)
        bodies = [self._pop_dead(i).body for i in chosen if i in store.dead]
        return await self.add(bodies)

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters; returns how many."""
        self._check_open()
        store = self._store
        chosen = list(store.dead) if message_ids is None else list(message_ids)
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
        return count

    async def delete_queue(self) -> None:
        """Delete messages, dead letters, consumers, worker entries and results of this store.

        A `wait_result` pending on the store keeps waiting (for a result stored later).
        """
        await self.purge()
        store = self._store
        store.dead.clear()
        store.dead_by_original.clear()
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

    # -- Scheduling ------------------------------------------------------------------

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request with its delay and unique key, in order, atomically per request."""
        self._check_open()
        requests = check_requests(requests)
        store = self._store
        now = store.clock.monotonic()
        wall = store.clock.time()
        results = []
        for request in requests:
            key = request.unique_key
            if key is not None:
                holder = self._key_holder(key, now)
                if holder is not None:
                    results.append(Added(message_id=holder, added=False))
                    continue
            message_id = str(next(store.sequence))
            message = _Message(message_id, request.body, now, unique_key=key)
            store.messages[message_id] = message
            delay = request.delay_seconds if request.due_at is None else request.due_at - wall
            if delay > 0:
                message.state = "delayed"
                self._park(message_id, now + delay)
            else:
                store.ready.append(message_id)
            if key is not None:
                expiry = None if request.unique_seconds is None else now + request.unique_seconds
                store.unique[key] = (message_id, expiry)
            results.append(Added(message_id=message_id))
        if results:
            # A receive waiting for a later due time (or for nothing) recomputes its wait.
            store.notify()
        return results

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Remove ready or delayed messages; in-flight and unknown ones are left alone."""
        message_ids = check_ids(message_ids)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        self._promote_due(now)
        removed = []
        for message_id in message_ids:
            message = store.messages.get(message_id)
            if message is None or message.state == "in_flight":
                removed.append(False)
                continue
            del store.messages[message_id]
            if message.state == "ready":
                store.cancelled_ready += 1
            else:
                store.cancelled_delayed += 1
            self._free_key(message)
            removed.append(True)
        return removed

    # -- Leadership --------------------------------------------------------------------

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Take or renew the lease of `name` for `holder`; None when another holds it."""
        check_text("name", name)
        check_text("holder", holder)
        check_seconds("ttl_seconds", ttl_seconds, positive=True)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        election = store.elections.get(name)
        if election is not None and now < election.expiry:
            if election.holder != holder:
                return None
            election.expiry = now + ttl_seconds
            return _lease(name, election, now)
        token = store.tokens.get(name, 0) + 1
        store.tokens[name] = token
        election = _Election(holder=holder, token=token, expiry=now + ttl_seconds)
        store.elections[name] = election
        return _lease(name, election, now)

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Extend the lease if `holder` still holds it under `token`, lapsed or not."""
        check_text("name", name)
        check_text("holder", holder)
        check_token(token, bits=_TOKEN_BITS)
        check_seconds("ttl_seconds", ttl_seconds, positive=True)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        election = store.elections.get(name)
        if election is None or election.holder != holder or election.token != token:
            return None
        election.expiry = now + ttl_seconds
        return _lease(name, election, now)

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        """End the lease now if `holder` holds it under `token`."""
        check_text("name", name)
        check_text("holder", holder)
        check_token(token, bits=_TOKEN_BITS)
        self._check_open()
        election = self._store.elections.get(name)
        if election is None or election.holder != holder or election.token != token:
            return False
        del self._store.elections[name]
        return True

    async def current_leader(self, name: str) -> LeaderLease | None:
        """The live lease of `name`, if any."""
        check_text("name", name)
        self._check_open()
        now = self._store.clock.monotonic()
        election = self._store.elections.get(name)
        if election is None or now >= election.expiry:
            return None
        return _lease(name, election, now)

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        """Add `body` and record `instant` fired, under the latest token, once per instant."""
        check_text("election", election)
        check_text("schedule", schedule)
        check_token(token, bits=_TOKEN_BITS)
        instant = check_instant("instant", instant)
        check_body(body)
        self._check_open()
        store = self._store
        last = store.fired.get(schedule)
        if store.tokens.get(election) != token or (last is not None and instant <= last.instant):
            return None
        (message_id,) = await self.add([body])
        store.fired[schedule] = FireRecord(
            schedule=schedule, instant=float(instant), message_id=message_id
        )
        return message_id

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        """The latest fire record of each named schedule that has one."""
        schedules = check_names("schedules", schedules, item="schedule")
        self._check_open()
        fired = self._store.fired
        return {name: fired[name] for name in schedules if name in fired}

    # -- ResultStore ---------------------------------------------------------------------

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result for its TTL; the later of two writes of one id wins.

        The whole batch is checked first: nothing is stored when any item is invalid.
        Each write (also the second of one id in one batch) restarts the id's TTL, and
        every `wait_result` waiting on a written id, through any handle, wakes.

        Raises:
            TypeError: `results` is a single `ResultWrite`, an item is not a
                `ResultWrite`, or a body is not `bytes`, a TTL not a number or an id
                not a `str`.
            ValueError: A TTL is <= 0 or not finite, or an id is empty or holds a lone
                surrogate.
        """
        results = check_result_writes(results)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        for write in results:
            expiry = now + write.ttl_seconds
            store.results[write.message_id] = (write.body, expiry)
            heapq.heappush(store.result_expiries, (expiry, write.message_id))
        self._sweep_results(now, len(results))
        for message_id in dict.fromkeys(write.message_id for write in results):
            for future in store.result_waiters.pop(message_id, {}):
                if not future.done():
                    future.set_result(None)

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, in order; None for unknown, expired or odd ids.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`.
        """
        message_ids = check_ids(message_ids)
        self._check_open()
        now = self._store.clock.monotonic()
        self._sweep_results(now, 0)
        return [self._live_result(message_id, now) for message_id in message_ids]

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        """The result of `message_id`, waiting up to `timeout_seconds` on the store's clock.

        Returns at once when the result is stored; otherwise waits on a future that
        `put_results` of this id completes (no polling), and returns None once the
        clock has moved `timeout_seconds` with no result stored. A result that expired
        is not returned. Cancelling the call leaves nothing behind.

        Raises:
            TypeError: `message_id` is not a `str` or `timeout_seconds` not a number.
            ValueError: `timeout_seconds` < 0 or not finite, or `message_id` empty.
            QueueClosedError: This handle is closed, also while the call waits.
        """
        check_text("message_id", message_id)
        check_seconds("timeout_seconds", timeout_seconds)
        self._check_open()
        store = self._store
        deadline = store.clock.monotonic() + timeout_seconds
        while True:
            now = store.clock.monotonic()
            self._sweep_results(now, 0)
            body = self._live_result(message_id, now)
            if body is not None:
                return body
            remaining = deadline - now
            if remaining <= 0:
                return None
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            store.result_waiters.setdefault(message_id, {})[future] = self
            try:
                await wait_future(store.clock, future, remaining)
            finally:
                # put_results pops the whole set it wakes; on a timeout or a
                # cancellation this waiter removes itself, so no future is left behind.
                waiters = store.result_waiters.get(message_id)
                if waiters is not None:
                    waiters.pop(future, None)
                    if not waiters:
                        del store.result_waiters[message_id]
                future.cancel()
            self._check_open()

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        """Delete the results of `message_ids`; returns how many unexpired ones existed.

        An id named twice counts once. `QueueAdmin.delete_queue` deletes every result;
        `QueueAdmin.purge` deletes messages only and leaves results.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`.
        """
        message_ids = check_ids(message_ids)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        self._sweep_results(now, 0)
        deleted = 0
        for message_id in message_ids:
            held = store.results.pop(message_id, None)
            if held is not None and now < held[1]:
                deleted += 1
        return deleted

    # -- MessageLookup -----------------------------------------------------------------

    def _lookup_states(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        message_ids = check_ids(message_ids)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        wall = store.clock.time()
        states: list[MessageState | None] = []
        for message_id in message_ids:
            message = store.messages.get(message_id)
            if message is not None:
                states.append(_state_of(message, now, wall))
            else:
                states.append(self._dead_state(message_id))
        return states

    def _dead_state(self, original_id: str) -> MessageState | None:
        store = self._store
        dead_id = store.dead_by_original.get(original_id)
        if dead_id is None:
            return None
        letter = store.dead.get(dead_id)
        if letter is None or letter.original_id != original_id:
            # Defensive: an index entry outliving its letter must not report a state.
            del store.dead_by_original[original_id]
            return None
        return MessageState(
            message_id=original_id,
            state="dead",
            delivery_count=letter.delivery_count,
            body=letter.body,
            dead_reason=letter.reason,
            dead_at=letter.dead_at,
        )

    # -- MessageBrowser ------------------------------------------------------------------

    def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        """Up to `limit` messages in `state` with an id after `after`, in id order.

        Reads only: no lease, delivery count or queue order changes. ``waiting`` walks
        the records in id order (ready, and delayed ones whose due time passed, as
        `lookup` says); ``in_flight`` takes the `limit` smallest ids of the leased set.
        The cursor is the message id.

        Raises:
            ValueError: See `taskrunner.queue.MessageBrowser.browse`; `after` must be
                an id this backend issues (decimal digits).
            QueueClosedError: The handle is closed.
        """
        check_browse(state, limit)
        start = 0
        if after is not None:
            if not after.isascii() or not after.isdigit():
                raise ValueError(f"after must be a message id of this queue, got {after!r:.60}")
            start = int(after)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        wall = store.clock.time()
        if state == "in_flight":
            held = heapq.nsmallest(
                limit,
                (m for m in store.in_flight.values() if int(m.id) > start),
                key=lambda m: int(m.id),
            )
            return [_browsed(m, now, wall) for m in held]
        page: list[BrowsedMessage] = []
        for message in store.messages.values():
            if len(page) >= limit:
                break
            if int(message.id) <= start:
                continue
            if message.state == "ready" or (message.state == "delayed" and message.due <= now):
                page.append(_browsed(message, now, wall))
        return page

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

    def _pop_dead(self, dead_id: str) -> DeadLetter:
        store = self._store
        letter = store.dead.pop(dead_id)
        if store.dead_by_original.get(letter.original_id) == dead_id:
            del store.dead_by_original[letter.original_id]
        return letter

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError("this InMemoryQueue handle was closed")

    def _promote_due(self, now: float) -> None:
        store = self._store
        while store.delayed and store.delayed[0][0] <= now:
            _, _, message_id = heapq.heappop(store.delayed)
            message = store.messages.get(message_id)
            if message is None:
                store.cancelled_delayed -= 1
            if message is not None and message.state == "delayed":
                message.state = "ready"
                store.ready.append(message_id)

    def _skip_cancelled_head(self) -> None:
        # So the head of `ready` is a live message (its age is the oldest ready age).
        store = self._store
        while store.ready and store.ready[0] not in store.messages:
            store.ready.popleft()
            store.cancelled_ready -= 1

    def _lease_ready(
        self, consumer: str, max_messages: int, lease_seconds: float, now: float
    ) -> list[Delivery]:
        store = self._store
        deliveries: list[Delivery] = []
        while store.ready and len(deliveries) < max_messages:
            message = store.messages.get(store.ready.popleft())
            if message is None:
                store.cancelled_ready -= 1
                continue
            deliveries.append(self._grant(message, consumer, lease_seconds, now))
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

    def _forget(self, message: _Message) -> None:
        del self._store.in_flight[message.id]
        del self._store.messages[message.id]
        self._free_key(message)

    def _free_key(self, message: _Message) -> None:
        # Only while the key still names this message: after it expired, another
        # message may hold it.
        key = message.unique_key
        if key is not None and self._store.unique.get(key, ("",))[0] == message.id:
            del self._store.unique[key]

    def _key_holder(self, key: str, now: float) -> str | None:
        held = self._store.unique.get(key)
        if held is None:
            return None
        holder, expiry = held
        if expiry is not None and now >= expiry:
            del self._store.unique[key]
            return None
        return holder

    def _park(self, message_id: str, due: float) -> None:
        store = self._store
        store.messages[message_id].due = due
        heapq.heappush(store.delayed, (due, next(store.sequence), message_id))

    def _live_result(self, message_id: str, now: float) -> bytes | None:
        store = self._store
        held = store.results.get(message_id)
        if held is None:
            return None
        body, expiry = held
        if now >= expiry:
            # Its heap entry goes stale and is skipped when popped.
            del store.results[message_id]
            return None
        return body

    def _sweep_results(self, now: float, writes: int) -> None:
        # Bounded so a backlog of expiries costs no call more than a fixed number of
        # pops beyond its own writes; every call removes more than it adds, so it drains.
        store = self._store
        heap = store.result_expiries
        budget = _SWEEP_PER_CALL + writes
        while heap and budget > 0 and heap[0][0] <= now:
            expiry, message_id = heapq.heappop(heap)
            budget -= 1
            held = store.results.get(message_id)
            if held is not None and held[1] == expiry:
                del store.results[message_id]
        if len(heap) > 2 * len(store.results) + _HEAP_SLACK:
            # Overwrites leave stale entries until their old expiry; rebuilding now and
            # then keeps the heap proportional to the results, at O(1) amortized per write.
            store.result_expiries = [(held[1], key) for key, held in store.results.items()]
            heapq.heapify(store.result_expiries)


class _Lookup:
    """`MessageLookup` over one handle (see `InMemoryQueue.lookup`)."""

    __slots__ = ("_queue",)

    def __init__(self, queue: InMemoryQueue) -> None:
        self._queue = queue

    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, in order; None where the store holds no such message.

        Ready: never delivered (delivery count 0) or released and due. Delayed: added
        with a delay, or released with one, not yet due, with ``due_at`` on the wall
        clock. Running: leased, with its holder, idle time and delivery count (also
        once the lease lapsed, until it is reclaimed). Dead: found by the message's
        original id, with reason, time and body. Acked, cancelled, purged, retried
        (the retry has a new id), unknown and malformed ids are None. Constant time
        per id.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`.
            QueueClosedError: The handle is closed.
        """
        return self._queue._lookup_states(message_ids)


class _Names:
    """`QueueNames` of the stores opened through one ``memory://NAME`` (see `InMemoryQueue`)."""

    __slots__ = ("_prefix", "_queue")

    def __init__(self, queue: InMemoryQueue, prefix: str) -> None:
        self._queue = queue
        self._prefix = prefix

    async def queue_names(self, *, after: str | None = None, limit: int = 1000) -> QueueNameList:
        """Up to `limit` names after `after`, ascending; always complete within the limit."""
        check_names_limit(limit)
        self._queue._check_open()
        cut = len(self._prefix)
        names = sorted(
            key[cut:]
            for key in _NAMED_STORES
            if key.startswith(self._prefix) and (after is None or key[cut:] > after)
        )
        return QueueNameList(names=tuple(names[:limit]), complete=len(names) <= limit)


class _Browser:
    """`MessageBrowser` over one handle (see `InMemoryQueue.browse_messages`)."""

    __slots__ = ("_queue",)

    def __init__(self, queue: InMemoryQueue) -> None:
        self._queue = queue

    async def browse(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        """See `InMemoryQueue.browse_messages`."""
        return self._queue.browse_messages(state, after=after, limit=limit)


def _browsed(message: _Message, now: float, wall: float) -> BrowsedMessage:
    leased = message.state == "in_flight"
    return BrowsedMessage(
        cursor=message.id,
        message_id=message.id,
        body=message.body,
        delivery_count=message.delivery_count,
        added_at=wall - (now - message.added_at),
        consumer=message.owner if leased else None,
        idle_seconds=now - message.touched_at if leased else None,
        lease_seconds=message.lease_seconds if leased else None,
    )


def _state_of(message: _Message, now: float, wall: float) -> MessageState:
    added_at = wall - (now - message.added_at)
    if message.state == "in_flight":
        return MessageState(
            message_id=message.id,
            state="running",
            delivery_count=message.delivery_count,
            body=message.body,
            added_at=added_at,
            consumer=message.owner,
            idle_seconds=now - message.touched_at,
        )
    # A delayed message past its due time is ready, whether or not a receive has
    # moved it to the ready deque yet.
    if message.state == "delayed" and message.due > now:
        return MessageState(
            message_id=message.id,
            state="delayed",
            delivery_count=message.delivery_count,
            body=message.body,
            added_at=added_at,
            due_at=wall + (message.due - now),
        )
    return MessageState(
        message_id=message.id,
        state="ready",
        delivery_count=message.delivery_count,
        body=message.body,
        added_at=added_at,
    )


def _lease(name: str, election: _Election, now: float) -> LeaderLease:
    return LeaderLease(
        name=name,
        holder=election.holder,
        token=election.token,
        remaining_seconds=max(0.0, election.expiry - now),
    )


# Stores opened by URL, so a producer and a worker in one process share a queue.
_NAMED_STORES: dict[str, InMemoryQueue] = {}

_URL_OPTIONS = ("requires_heartbeat",)


async def open_from_url(url: str, *, queue_name: str, clock: Clock | None = None) -> InMemoryQueue:
    """Open ``memory://[NAME][?requires_heartbeat=true|false]`` for queue `queue_name`.

    Handles opened with the same NAME and queue name in one process share a store; the
    first opener's clock and options win.

    Raises:
        ConfigurationError: An unknown option or a value that is not a boolean.
    """
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - set(_URL_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"unknown memory:// option(s) {', '.join(unknown)}; known: {', '.join(_URL_OPTIONS)}",
            setting="url",
        )
    requires_heartbeat = _parse_bool(options.get("requires_heartbeat", "true"))
    key = f"{parts.netloc}{parts.path}/{queue_name}"
    first = _NAMED_STORES.get(key)
    if first is None:
        first = InMemoryQueue(clock=clock, requires_heartbeat=requires_heartbeat)
        _NAMED_STORES[key] = first
    handle = first.open_handle()
    handle._url_prefix = f"{parts.netloc}{parts.path}/"
    return handle


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(
        f"requires_heartbeat must be true or false, got {text!r}", setting="requires_heartbeat"
    )
