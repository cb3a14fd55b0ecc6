"""The contract between the runner and a message backend.

The runner talks to storage only through `Queue`. A backend moves opaque bytes under
leases and never decodes them. `Queue` is a `typing.Protocol`: a backend implements it
structurally and imports nothing from taskrunner except, if it likes, the value types
below. Every guarantee is one sentence of the `Queue` docstring, and each sentence has
a test of the same name in `taskrunner_conformance`.

Leases. A message received by consumer C is leased to C for the ``lease_seconds`` that
C passed to the `Queue.receive` or `Queue.reclaim` that granted it. The lease lives while
the message's *idle time* (time since it was granted or last heartbeated) stays within
that lease; the lease travels with the delivery, so a reclaimer configured with a
shorter lease never takes a message whose holder heartbeats within its own, longer one.
A `Receipt` fences the lease: it names the owner and the delivery count seen when the
lease was granted, so a heartbeat or ack holding an older receipt is reported as lost
instead of acting on somebody else's lease.

Boundaries. With ``p`` the backend's `Capabilities.lease_precision_seconds`, a lease is
live at every idle time below ``lease_seconds - p`` and lapsed (reclaimable) at every
idle time above ``lease_seconds + p``; a message released with ``delay_seconds`` is not
delivered before ``delay_seconds - p`` and is ready after ``delay_seconds + p``;
`Queue.receive` returns by ``wait_seconds + p`` (a blocking one not before
``wait_seconds - p``); worker entries and idle thresholds keep the same tolerance.

Optional parts. A backend offers more through typed accessors that return None when it
does not: `Queue.admin` (`QueueAdmin`: dead letters, purge, delete),
`Queue.worker_registry` (`WorkerRegistry`), `Queue.consumer_cleanup`
(`ConsumerCleanup`). The type checker sees the protocol each one returns, so no caller
casts on the strength of a flag.

Two newer parts are not members of `Queue`, so backends written before them still
satisfy it: a backend offers them as properties named ``scheduling`` (`Scheduling`:
delayed and unique adds, cancellation) and ``leadership`` (`Leadership`: leader leases
with fencing tokens, fire-once records for periodic schedules), and callers read them
with `scheduling_of` and `leadership_of`, which return None for a backend without them.
Issue 12 added two more of the same kind: ``results`` (`ResultStore`: task results
with a TTL) and ``lookup`` (`MessageLookup`: the state of one message by id), read
with `results_of` and `lookup_of`. Issue 15 added ``browse`` (`MessageBrowser`: a
bounded, keyset-paged listing of the waiting and in-flight messages), read with
`browse_of`, and ``queue_names`` (`QueueNames`: the names of the queues the backend
holds, bounded and paged), read with `names_of`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, Protocol

import msgspec

__all__ = [
    "BROWSE_LIMIT",
    "CONTRACT_VERSION",
    "QUEUE_NAMES_LIMIT",
    "AddRequest",
    "Added",
    "BrowseState",
    "BrowsedMessage",
    "Capabilities",
    "ConsumerCleanup",
    "ConsumerStats",
    "DeadLetter",
    "Delivery",
    "FireRecord",
    "LeaderLease",
    "Leadership",
    "MessageBrowser",
    "MessageLookup",
    "MessageState",
    "Queue",
    "QueueAdmin",
    "QueueNameList",
    "QueueNames",
    "QueueStats",
    "Receipt",
    "ResultStore",
    "ResultWrite",
    "Scheduling",
    "WorkerInfo",
    "WorkerRegistry",
    "browse_of",
    "check_browse",
    "check_names_limit",
    "leadership_of",
    "lookup_of",
    "names_of",
    "results_of",
    "scheduling_of",
]

CONTRACT_VERSION: Final = (2, 0)
"""This contract's version, (major, minor).

A backend declares the version it implements as a ``contract_version`` attribute of its
queue class; the conformance suite reports it and fails a backend that declares a major
it does not test. An incompatible change (a changed signature or meaning, a new
required member) bumps the major, an addition every older backend still satisfies (an
optional part, a capability flag) the minor; CHANGELOG.md ("Backend contract") lists
each change and how to migrate.
"""


class Receipt(msgspec.Struct, frozen=True, kw_only=True):
    """Fences one lease of one message; only the issuing backend interprets it.

    Attributes:
        consumer: The consumer the lease was granted to.
        delivery_count: The message's delivery count when the lease was granted.
        token: Backend-private data (for example a partition), opaque to everyone else.
    """

    consumer: str
    delivery_count: int
    token: str = ""


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """One message leased to one consumer.

    Attributes:
        message_id: The id `Queue.add` returned for the message; stable across deliveries.
        body: The bytes given to `Queue.add`, unchanged.
        delivery_count: 1 on the first delivery; +1 on each reclaim or redelivery
            after `Queue.release`; unchanged by heartbeats.
        receipt: The lease fence to pass back to heartbeat, ack, release and dead_letter.
    """

    message_id: str
    body: bytes
    delivery_count: int
    receipt: Receipt


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What a backend claims beyond the core contract.

    The runner and the conformance suite read it; a property the backend does not
    claim is skipped by the suite with the reason, never silently passed. New flags
    default to "not claimed".

    Attributes:
        blocking_receive: `receive` waits for a message (up to ``wait_seconds``) without
            busy polling and wakes when one arrives.
        cancel_safe_receive: Cancelling a pending `receive` never leaves a message
            leased to the caller without the caller seeing it, so the runner may cancel
            receives at shutdown instead of waiting for them to return.
        ordering: ``"fifo"`` when a single consumer receives messages in the order
            they were added (redeliveries excepted); ``"none"`` otherwise.
        persistent: Messages survive a restart of the backend's server.
        durable_enqueue: `add` returns only after the messages are durable.
        shared_across_instances: Two `Queue` objects opened on the same name (in one or
            several processes) see the same messages.
        max_batch: Largest ``max_messages`` honoured per call; larger requests are
            clamped. None means no limit.
        lease_precision_seconds: How far every duration the backend measures may
            deviate from its nominal value, either way (server clock granularity,
            replication lag): lease expiry, release delays, receive waits, worker
            entry TTLs and consumer idle thresholds. The conformance suite probes each
            of them just beyond this far on each side of its edge.
        delayed_add: `Queue.scheduling` honours `AddRequest.delay_seconds` and
            `AddRequest.due_at` (with the same precision as release delays).
        unique_add: `Queue.scheduling` honours `AddRequest.unique_key`.
        cancel: `Scheduling.cancel` removes queued and delayed messages.
        leadership: `Queue.leadership` is implemented.
        results: `Queue.results` (`ResultStore`) is implemented.
        result_notify: `ResultStore.wait_result` wakes when the result is stored,
            without polling (else it may poll, at most every 50 ms).
        lookup: `Queue.lookup` (`MessageLookup`) is implemented.
        browse: `Queue.browse` (`MessageBrowser`) is implemented.
    """

    blocking_receive: bool = False
    cancel_safe_receive: bool = False
    ordering: Literal["none", "fifo"] = "none"
    persistent: bool = False
    durable_enqueue: bool = False
    shared_across_instances: bool = False
    max_batch: int | None = None
    lease_precision_seconds: float = 0.0
    delayed_add: bool = False
    unique_add: bool = False
    cancel: bool = False
    leadership: bool = False
    results: bool = False
    result_notify: bool = False
    lookup: bool = False
    browse: bool = False


class ConsumerStats(msgspec.Struct, frozen=True, kw_only=True):
    """One consumer as the backend sees it.

    Attributes:
        name: The consumer name.
        pending: Messages currently leased to it.
        idle_seconds: Seconds since the backend last heard from it, if known.
    """

    name: str
    pending: int
    idle_seconds: float | None = None


class QueueStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a queue.

    Attributes:
        ready: Messages that `receive` would hand out now: never delivered, or released
            and due.
        in_flight: Messages leased to a consumer and not yet completed.
        dead: Messages in the dead-letter store.
        delayed: Messages released with a delay that is not over yet.
        oldest_ready_age_seconds: Age of the oldest ready message, None when none.
        oldest_in_flight_age_seconds: Idle time of the longest-idle in-flight message,
            None when none.
        consumers: The consumers the backend knows of, when it tracks them.
    """

    ready: int
    in_flight: int
    dead: int
    delayed: int = 0
    oldest_ready_age_seconds: float | None = None
    oldest_in_flight_age_seconds: float | None = None
    consumers: tuple[ConsumerStats, ...] = ()


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """A message in the dead-letter store.

    Attributes:
        message_id: The id of the dead-letter entry (used by the admin methods).
        original_id: The message id it had on the queue.
        body: The message bytes, unchanged.
        reason: Why it was dead-lettered.
        delivery_count: Its delivery count when it was dead-lettered.
        dead_at: Wall-clock time (Unix seconds) it was dead-lettered.
    """

    message_id: str
    original_id: str
    body: bytes
    reason: str
    delivery_count: int
    dead_at: float


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What one worker process publishes about itself, for sizing and inspection.

    Attributes:
        instance: Unique name of the process (its consumer-name prefix).
        workers: Its current pool size.
        busy: Workers running a task.
        average_seconds: Moving average of its task durations, None before the first.
        seen_at: Wall-clock time (Unix seconds) of publication.
        succeeded: Attempts this process ran that succeeded, since it started; None
            when not published (a worker of an older taskrunner). With `failed`, what
            a dashboard reads completed and failed jobs per second from.
        failed: Attempts this process ran that raised or timed out, since it started;
            None when not published.
    """

    instance: str
    workers: int
    busy: int
    average_seconds: float | None
    seen_at: float
    succeeded: int | None = None
    failed: int | None = None


class Queue(Protocol):
    """A leased, at-least-once queue of opaque messages.

    Guarantees, one per line; each has a conformance test that reads the same:

    * Every added message is delivered at least once, unless it is dead-lettered.
    * A delivered message is not delivered to another consumer while its lease is live.
    * A lease lasts the lease_seconds its holder was granted, whatever the reclaimer's own lease.
    * A message whose lease lapsed is returned by reclaim with its delivery count + 1.
    * `receive` never returns a message whose lease lapsed; only reclaim does.
    * A heartbeat with a current receipt keeps the lease live.
    * A heartbeat never changes the delivery count.
    * A heartbeat with a stale receipt reports the delivery lost and never takes the message back.
    * An ack with a current receipt completes the message; it is never delivered again.
    * An ack with a stale receipt reports the delivery lost and does not complete the message.
    * Acking an already completed delivery reports it and changes nothing else.
    * A released message is delivered again by receive after its delay, with its delivery count + 1.
    * A released delivery's receipt is stale from the release on, even before redelivery.
    * A dead-lettered message is never delivered again and keeps its body and reason.
    * Message ids are unique within the queue and never reused.
    * `len` counts ready, delayed and in-flight messages; dead letters are not counted.
    * `receive` returns at most ``max_messages`` deliveries and `[]` when none arrive in time.
    * Invalid arguments raise ValueError or TypeError before anything changes.
    * `aclose` is idempotent; every other method called after it raises `QueueClosedError`.
    * Client-library exceptions never escape; failures raise `BackendError` subclasses.

    "Stale" receipts are those of any earlier lease of the message: before a reclaim by
    another consumer or by the same one, before a release (redelivered or not), or
    older by several leases. heartbeat, ack, release and dead_letter holding one report
    the delivery lost and change nothing.

    Methods take and return batches so a backend can use one round trip per call.
    Expected conditions are return values: an empty queue is `[]`, a lost lease is a
    delivery in the returned list. Durations are finite numbers of seconds: NaN,
    infinities and negative values (zero too, for leases) are invalid arguments.
    """

    @property
    def requires_heartbeat(self) -> bool:
        """Whether leases lapse unless heartbeated; when False the runner starts no lease keeper.

        When False, leases never lapse: `reclaim` returns nothing and messages come back
        only through `release`.
        """
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the backend claims beyond the core contract."""
        ...

    @property
    def admin(self) -> QueueAdmin | None:
        """Dead-letter management, purge and delete; None when the backend has none."""
        ...

    @property
    def worker_registry(self) -> WorkerRegistry | None:
        """The registry of live worker processes; None when the backend keeps none."""
        ...

    @property
    def consumer_cleanup(self) -> ConsumerCleanup | None:
        """Forgetting unused consumer names; None when the backend needs no clean-up."""
        ...

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue message bodies (any bytes, including empty ones).

        Returns:
            One message id per body, in order; ids are unique within the queue and never
            reused, also after the message was acked, purged or retried from the
            dead-letter store.

        Raises:
            TypeError: A body is not `bytes`.
            BackendUnavailableError: The backend could not be reached; some of the
                bodies may have been added.
        """
        ...

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Lease up to `max_messages` ready messages to `consumer` for `lease_seconds` each.

        Waits at most `wait_seconds` for the first message (0 does not wait) and may
        return fewer than asked for, but returns at least one delivery when a message is
        ready. Each returned delivery's lease starts now and lasts `lease_seconds` from
        now or from its latest heartbeat. Only ready messages are returned (never
        delivered, or released and due); a message whose lease lapsed comes back only
        through `reclaim`.

        Raises:
            ValueError: `max_messages` < 1, `wait_seconds` < 0, `lease_seconds` <= 0,
                or a duration that is not finite.
            BackendUnavailableError: The backend could not be reached.
        """
        ...

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Restart the lease of each delivery still owned under its receipt.

        The lease restarts with the length it was granted with. A lease that lapsed but
        was not reclaimed yet is still owned, and restarts.

        Returns:
            The deliveries whose lease was already lost (reclaimed, released, acked,
            dead-lettered, or the message is gone); they are left untouched.
        """
        ...

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Complete each delivery still owned under its receipt and remove its message.

        A current receipt on a message whose stored body vanished underneath (trimmed or
        deleted) completes it: nothing is left to redo. Two copies of one delivery in
        one batch complete the message once; the second copy may be reported or not.

        Returns:
            The deliveries this call did not complete because their lease was lost or
            they were already completed; those messages are left as they are.
        """
        ...

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Give deliveries back for redelivery once `delay_seconds` have passed.

        The message is redelivered by `receive` no earlier than the delay, with its
        delivery count + 1; until then it counts as delayed in `stats`. Used for retry
        backoff and at shutdown. From the release on, the released delivery's receipt
        is stale: heartbeat, ack, release and dead_letter report it lost, before and
        after the message is delivered again.

        Returns:
            The deliveries whose lease was already lost; they are left untouched.

        Raises:
            ValueError: `delay_seconds` < 0 or not finite.
        """
        ...

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Lease to `consumer`, for `lease_seconds`, messages whose own lease lapsed.

        A message is taken only when its idle time exceeds the lease its holder was
        granted; the reclaimer's `lease_seconds` is the length of the new lease, not a
        threshold. Each returned delivery has its delivery count + 1 and a new receipt.
        Successive calls make progress through the whole set of in-flight messages, so
        lapsed messages behind many live ones are found. Messages that can no longer be
        delivered (their body is gone or unreadable by the backend) are dead-lettered
        with a reason instead of being returned.

        Raises:
            ValueError: `lease_seconds` <= 0 or not finite, or `max_messages` < 1.
        """
        ...

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Move deliveries to the dead-letter store with `reason`, completing them atomically.

        The reason is kept whole, whatever its length or characters.

        Returns:
            The deliveries whose lease was already lost; they are left untouched.

        Raises:
            TypeError: `reason` is not a `str`.
            ValueError: `reason` is not Unicode text that UTF-8 can encode (it holds a
                lone surrogate, as ``str()`` of an exception about an undecodable file
                name may).
        """
        ...

    async def stats(self) -> QueueStats:
        """A snapshot of ready, delayed, in-flight and dead-lettered counts."""
        ...

    async def len(self) -> int:
        """Ready, delayed and in-flight messages."""
        ...

    async def aclose(self) -> None:
        """Release the backend's resources; idempotent.

        Leases held through this handle are not given back: they lapse as if the process
        had crashed.
        """
        ...


class QueueAdmin(Protocol):
    """Operations for people, not workers: dead-letter management, purging, deleting.

    A backend that implements it returns it from `Queue.admin`.
    """

    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters, oldest first."""
        ...

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        """Put dead letters back on the queue as new messages (all when `message_ids` is None).

        Each message is added back and removed from the dead-letter store atomically,
        so it is neither lost nor duplicated.

        Returns:
            The new message ids, one per dead letter moved; unknown ids are skipped.
        """
        ...

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters (all when `message_ids` is None); returns how many."""
        ...

    async def purge(self) -> int:
        """Delete every ready, delayed and in-flight message; returns how many.

        Receipts of purged in-flight messages report lost from then on; dead letters stay.
        """
        ...

    async def delete_queue(self) -> None:
        """Delete the queue and everything the backend keeps for it; idempotent.

        Messages, dead letters, consumers and worker entries are gone afterwards, and
        receipts report lost. Using the queue again starts an empty one.
        """
        ...


class WorkerRegistry(Protocol):
    """A small registry of live worker processes, kept by the backend.

    Runners publish themselves every few seconds; an entry not refreshed within its
    ``ttl_seconds`` is no longer listed. The tuning controller and ``taskrunner inspect``
    read it to know how many workers serve the queue across processes, without
    scanning the backend's keyspace. A backend that implements it returns it from
    `Queue.worker_registry`.
    """

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        """Create or refresh `info.instance`'s entry, listed for `ttl_seconds` from now."""
        ...

    async def remove_worker(self, instance: str) -> None:
        """Remove `instance`'s entry (at shutdown); idempotent."""
        ...

    async def live_workers(self) -> list[WorkerInfo]:
        """Entries refreshed within their TTL, in no particular order."""
        ...


class ConsumerCleanup(Protocol):
    """Forgetting consumers nobody uses any more.

    Consumer names are unique per process incarnation, so a backend that records
    consumers would collect them forever. Runners call `remove_idle_consumers` now and
    then and `remove_consumers` for their own names at a clean stop; a backend that
    implements it returns it from `Queue.consumer_cleanup`.
    """

    async def remove_idle_consumers(self, idle_seconds: float) -> list[str]:
        """Forget consumers idle for `idle_seconds` that hold no message; returns their names.

        A consumer that holds a message is never removed (its messages would become
        unreachable); the check and the removal are one atomic step.
        """
        ...

    async def remove_consumers(self, names: Sequence[str]) -> list[str]:
        """Forget the consumers in `names` that hold no message; returns those forgotten.

        A named consumer that holds a message is kept, as in `remove_idle_consumers`;
        unknown names are skipped.
        """
        ...


class AddRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One message to add through `Scheduling.add_requests`, with its options.

    Attributes:
        body: The message bytes, as for `Queue.add`.
        delay_seconds: Not delivered before this many seconds from now on the backend's
            clock (0: ready at once). Needs ``Capabilities.delayed_add`` when > 0.
        due_at: Not delivered before this wall-clock instant (Unix seconds) of the
            backend's clock; when set it replaces `delay_seconds`, and an instant in
            the past means ready at once. Needs ``Capabilities.delayed_add``.
        unique_key: While a message added with this key is queued, delayed or in
            flight, another request with the key adds nothing and returns that
            message's id. Keys are scoped to the queue. Needs
            ``Capabilities.unique_add``.
        unique_seconds: The key is also freed this many seconds after the add, even if
            its message is still there; None holds it until the message's final outcome.
        partition_key: On a backend that spreads one queue over partitions (a Redis
            Cluster queue with ``shards`` > 1), every message with this key goes to the
            same partition, so one consumer sees them in add order where the partition
            is FIFO. A backend with one partition ignores it (it keeps one order anyway).
    """

    body: bytes
    delay_seconds: float = 0.0
    due_at: float | None = None
    unique_key: str | None = None
    unique_seconds: float | None = None
    partition_key: str | None = None


class Added(msgspec.Struct, frozen=True, kw_only=True):
    """What `Scheduling.add_requests` did with one request.

    Attributes:
        message_id: The new message's id, or the id of the message holding the unique key.
        added: False when nothing was added because the unique key was held.
    """

    message_id: str
    added: bool = True


class Scheduling(Protocol):
    """Delayed adds, unique adds and cancellation.

    Which of them a backend honours is said by `Capabilities` (``delayed_add``,
    ``unique_add``, ``cancel``); a request using an option the backend does not claim
    raises ValueError before anything is added. A backend that implements any of them
    returns this from `Queue.scheduling`.

    Guarantees, one per line; each has a conformance test that reads the same:

    * A delayed message is not delivered before its due time, and is ready after it.
    * A delayed message counts as delayed in `stats` and in `len` until it is due.
    * A request with a held unique key adds nothing and returns the holder's message id.
    * Concurrent requests with one unique key add exactly one message.
    * A unique key is held until its message is acked or dead-lettered, not freed by a release.
    * A unique key is freed after unique_seconds, never before.
    * A cancelled message is never delivered, and its unique key is freed.
    * Cancelling an in-flight, completed or unknown message returns False and changes nothing.
    """

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request's body with its options; one `Added` per request, in order.

        Each request is one atomic step: the unique-key check and the add cannot be
        split by another request. Two requests with one unique key in one batch add
        one message; the second returns the first's id with ``added=False``.

        Raises:
            TypeError: A request is not an `AddRequest`, or a body is not `bytes`.
            ValueError: A duration is negative or not finite, a unique key is empty,
                or a request uses an option the backend does not claim; nothing is added.
            BackendUnavailableError: The backend could not be reached; some of the
                requests may have been added.
        """
        ...

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Remove queued or delayed messages so they are never delivered.

        A message that is in flight (leased) is not touched: its task is running, and
        interrupting it is not the backend's business. A removed message's unique key
        is freed at once.

        Returns:
            One flag per id, in order: True when this call removed the message, False
            when it was in flight, already completed, dead-lettered, cancelled or unknown.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`
                (``a message id must be a str, not int``); nothing is removed.
        """
        ...


class LeaderLease(msgspec.Struct, frozen=True, kw_only=True):
    """Who leads an election, as the backend records it.

    Attributes:
        name: The election's name.
        holder: The holder of the lease.
        token: Fencing token: grows every time the lease changes holder (or is taken
            again after it lapsed or was resigned), never repeats for one election
            while the queue exists (`QueueAdmin.delete_queue` forgets elections).
        remaining_seconds: Time left on the lease, on the backend's clock.
    """

    name: str
    holder: str
    token: int
    remaining_seconds: float


class FireRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The last instant a periodic schedule was fired for.

    Attributes:
        schedule: The schedule's name.
        instant: The scheduled instant (Unix seconds) of its latest firing.
        message_id: The message that firing added.
    """

    schedule: str
    instant: float
    message_id: str


class Leadership(Protocol):
    """Leader leases with fencing tokens, and fire-once records for periodic schedules.

    A backend that implements it returns it from `Queue.leadership`. Times are
    measured on the backend's clock, never on the callers'.

    Guarantees, one per line; each has a conformance test that reads the same:

    * At most one holder has a live lease of an election at any time.
    * A lease lasts its ttl_seconds from its last acquire or renew, and then lapses.
    * Each change of holder (or retake after a lapse) issues a larger fencing token.
    * Renew and resign with a stale token change nothing.
    * A schedule's instant is fired at most once, and only under the current token.
    """

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Take the lease of election `name` for `holder` when it is free or lapsed.

        When `holder` already holds a live lease it is renewed and keeps its token.

        Returns:
            The lease now held by `holder`, or None when another holder's lease is live.

        Raises:
            ValueError: `ttl_seconds` <= 0 or not finite, or `name`/`holder` empty.
        """
        ...

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Extend the lease by `ttl_seconds` from now if `holder` holds it under `token`.

        A lease that lapsed but was not taken by anyone else is still held, and renews.

        Returns:
            The renewed lease, or None when `holder` no longer holds it under `token`.
        """
        ...

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        """End the lease now if `holder` holds it under `token`; returns whether it did."""
        ...

    async def current_leader(self, name: str) -> LeaderLease | None:
        """The live lease of election `name`, or None when nobody holds one."""
        ...

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        """Add `body` for `schedule`'s `instant` and record it fired, in one atomic step.

        Nothing is added unless `token` is the latest token issued for `election` (its
        lease may have lapsed, or been resigned, as long as nobody took it since) and
        `instant` is later than the
        schedule's last fired instant. So an instant is fired at most once, whoever
        calls, and a deposed leader fires nothing.

        Returns:
            The new message's id, or None when nothing was added.

        Raises:
            TypeError: `body` is not bytes.
            ValueError: `instant` is not finite, or `schedule`/`election` is empty.
        """
        ...

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        """The latest fire record of each named schedule that has one."""
        ...


def scheduling_of(queue: Queue) -> Scheduling | None:
    """The backend's `Scheduling` part (its ``scheduling`` property), or None.

    None when the backend has no such property (written before it existed) or its
    property returns None.
    """
    part: Scheduling | None = getattr(queue, "scheduling", None)
    return part


def leadership_of(queue: Queue) -> Leadership | None:
    """The backend's `Leadership` part (its ``leadership`` property), or None."""
    part: Leadership | None = getattr(queue, "leadership", None)
    return part


class ResultWrite(msgspec.Struct, frozen=True, kw_only=True):
    """One result to store through `ResultStore.put_results`.

    Attributes:
        message_id: The message the result belongs to (the key it is stored under).
        body: Opaque bytes (the engine's encoded result); the backend never decodes them.
        ttl_seconds: How long the result is kept from this write on; > 0 and finite.
    """

    message_id: str
    body: bytes
    ttl_seconds: float


class ResultStore(Protocol):
    """Task results by message id, each kept for its TTL.

    A backend that implements it returns it from `Queue.results` and claims
    ``Capabilities.results``. The runner writes a task's result before it acks the
    message (or dead-letters it), so an acked message that stores results always has
    one; a message run twice (its lease lapsed) writes the same key twice, and the last
    write wins. TTLs are measured on the backend's clock with the backend's
    ``lease_precision_seconds``.

    Guarantees, one per line; each has a conformance test that reads the same:

    * A stored result is returned, byte for byte, until its TTL has passed, and not after.
    * A later write of one message id replaces the earlier one and restarts its TTL.
    * Results of different message ids are independent; an unknown id has no result.
    * wait_result returns a result stored while it waits, well before its timeout.
    * wait_result returns None when no result is stored within its timeout, not before.
    * Deleted results, and those of a deleted queue, are gone.
    * Invalid result arguments raise ValueError or TypeError before anything changes.
    """

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result under its message id for its TTL; one round trip per call.

        Two writes of one id in one batch: the later one wins. Returns once every
        result is stored.

        Raises:
            TypeError: An item is not a `ResultWrite`, or a body is not `bytes`.
            ValueError: A TTL is <= 0 or not finite, or a message id is empty;
                nothing is stored.
            BackendUnavailableError: The backend could not be reached; some of the
                results may have been stored.
        """
        ...

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, in order; None where there is none (or it expired).

        An id that could never have been stored (empty, say) is None, not an error.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`.
        """
        ...

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        """The body of `message_id`'s result, waiting up to `timeout_seconds` for it.

        Returns at once when it is already stored. Without busy polling when the
        backend claims ``Capabilities.result_notify``.

        The timeout is measured on the caller's clock (the event loop's, or the
        backend's injected clock); the result's TTL on the backend's.

        Returns:
            The body, or None when none was stored by the timeout.

        Raises:
            ValueError: `timeout_seconds` < 0 or not finite, or `message_id` empty.
            QueueClosedError: The handle was closed before or while waiting.
            BackendUnavailableError: The backend could not be reached to look.
        """
        ...

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        """Delete the results of `message_ids`; returns how many existed (expired ones do not).

        Unknown and empty ids are skipped; a non-`str` id raises TypeError.
        """
        ...


MessageStateName = Literal["ready", "delayed", "running", "dead"]


class MessageState(msgspec.Struct, frozen=True, kw_only=True):
    """Where one message is, as its backend sees it.

    Attributes:
        message_id: The id asked about (for a dead letter: its original id).
        state: ``ready`` (receive would hand it out), ``delayed`` (added with a delay
            or released with one that is not over), ``running`` (leased to a
            consumer) or ``dead`` (in the dead-letter store).
        delivery_count: Deliveries so far (0 before the first).
        body: The message bytes, when the backend can return them cheaply.
        added_at: Wall-clock time (Unix seconds) the message was added, when known.
        due_at: For ``delayed``: the wall-clock time it becomes ready, when known.
        consumer: For ``running``: the consumer holding the lease.
        idle_seconds: For ``running``: seconds since it was leased or last heartbeated.
        dead_reason: For ``dead``: the dead-letter reason.
        dead_at: For ``dead``: wall-clock time it was dead-lettered.
    """

    message_id: str
    state: MessageStateName
    delivery_count: int
    body: bytes | None = None
    added_at: float | None = None
    due_at: float | None = None
    consumer: str | None = None
    idle_seconds: float | None = None
    dead_reason: str | None = None
    dead_at: float | None = None


class MessageLookup(Protocol):
    """The state of messages by id, read from what the backend keeps anyway.

    A backend that implements it returns it from `Queue.lookup` and claims
    ``Capabilities.lookup``. It costs the hot path nothing: it answers from the
    backend's existing records (and, for dead letters, an index by original id).

    Guarantees, one per line; each has a conformance test that reads the same:

    * A message not yet delivered is ready, with delivery count 0.
    * A delayed message is delayed until it is due, then ready.
    * A leased message is running, with its holder and delivery count.
    * A released message is delayed or ready, with the delivery count it had.
    * A dead-lettered message is dead, under its original id, with its reason.
    * An acked, cancelled, purged or unknown message has no state.
    """

    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, in order; None where the backend holds no such message.

        A dead letter is found by the id the message had on the queue
        (`DeadLetter.original_id`). Ids that are not in the backend's format are
        unknown (None), never an error.
        """
        ...


def results_of(queue: Queue) -> ResultStore | None:
    """The backend's `ResultStore` (its ``results`` property), or None."""
    part: ResultStore | None = getattr(queue, "results", None)
    return part


def lookup_of(queue: Queue) -> MessageLookup | None:
    """The backend's `MessageLookup` (its ``lookup`` property), or None."""
    part: MessageLookup | None = getattr(queue, "lookup", None)
    return part


#: Most messages one `MessageBrowser.browse` call returns; a larger limit is refused.
BROWSE_LIMIT = 500

BrowseState = Literal["waiting", "in_flight"]


class BrowsedMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message as `MessageBrowser.browse` lists it.

    Attributes:
        cursor: Its place in the listing: pass the last one's as ``after`` for the next
            page. Backend-private text (for example a stream entry id), not always the
            message id.
        message_id: The id `Queue.add` returned for the message.
        body: The message bytes, unchanged.
        delivery_count: Deliveries so far (0 before the first).
        added_at: Wall-clock time (Unix seconds) the message was added, when known.
        consumer: For ``in_flight``: the consumer holding the lease.
        idle_seconds: For ``in_flight``: seconds since it was leased or last heartbeated.
        lease_seconds: For ``in_flight``: the lease its holder was granted, when known
            (the lease lapses once ``idle_seconds`` exceeds it).
    """

    cursor: str
    message_id: str
    body: bytes
    delivery_count: int
    added_at: float | None = None
    consumer: str | None = None
    idle_seconds: float | None = None
    lease_seconds: float | None = None


class MessageBrowser(Protocol):
    """A bounded, read-only listing of the messages waiting and in flight, page by page.

    A backend that implements it returns it from `Queue.browse` and claims
    ``Capabilities.browse``. Paging is by keyset: each page starts after the ``cursor``
    of the last message of the previous one, so a page costs the backend about
    ``limit`` entries however long the queue is, and no call ever counts or scans the
    whole queue. ``waiting`` lists the ready messages (never delivered, or released and
    due); ``in_flight`` the leased ones (a lapsed lease not yet reclaimed included).
    A message that moves while a listing is paged (received, released, reclaimed) may
    be missed or listed again by the later pages; one that stays put is listed once.

    Guarantees, one per line; each has a conformance test that reads the same:

    * Waiting messages are listed once each, in cursor order, across pages.
    * In-flight messages are listed with their holder, delivery count and body.
    * Browsing never changes a lease, a delivery count or what receive returns.
    * Delayed, acked and dead-lettered messages are not listed.
    * Invalid browse arguments raise ValueError before anything is read.
    """

    async def browse(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        """Up to `limit` messages in `state` whose cursor comes after `after`, in cursor order.

        ``after=None`` starts at the first. Fewer than `limit` (or ``[]``) means the
        listing reached its end when it was read.

        Raises:
            ValueError: `state` is not ``waiting`` or ``in_flight``, `limit` is below 1
                or above `BROWSE_LIMIT`, or `after` is no cursor this backend issues.
            QueueClosedError: The handle is closed.
            BackendUnavailableError: The backend could not be reached.
        """
        ...


def browse_of(queue: Queue) -> MessageBrowser | None:
    """The backend's `MessageBrowser` (its ``browse`` property), or None."""
    part: MessageBrowser | None = getattr(queue, "browse", None)
    return part


def check_browse(state: object, limit: object) -> None:
    """The argument checks every `MessageBrowser.browse` makes first (backends share it).

    Raises:
        ValueError: `state` is not ``waiting`` or ``in_flight``, or `limit` is not a
            whole number from 1 to `BROWSE_LIMIT`.
    """
    if state not in ("waiting", "in_flight"):
        raise ValueError(f"state must be 'waiting' or 'in_flight', got {state!r}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"limit must be a whole number, got {limit!r}")
    if not 1 <= limit <= BROWSE_LIMIT:
        raise ValueError(
            f"limit must be from 1 to {BROWSE_LIMIT} (a listing is paged, never read "
            f"whole), got {limit}"
        )


#: Most names one `QueueNames.queue_names` call returns; a larger limit is refused.
QUEUE_NAMES_LIMIT = 10_000


class QueueNameList(msgspec.Struct, frozen=True, kw_only=True):
    """One page of queue names.

    Attributes:
        names: Names in ascending order, each once: code point order, or the order
            of the backend's own text comparison (a database collation), the one
            ``after`` is compared with.
        complete: True when no name after the last one was left out: neither beyond
            the limit nor beyond what the backend was willing to look at (a Redis
            backend stops scanning after a fixed number of keys).
    """

    names: tuple[str, ...]
    complete: bool


class QueueNames(Protocol):
    """The names of the queues a backend holds, for tools that were not told them.

    Not a member of `Queue`: a backend offers it as a property named ``queue_names``
    (None when it cannot tell), read with `names_of`. Which queues count is the
    backend's to say and its docstring's to state (for example: those with a stream
    or dead-letter key in the namespace; those with a message or dead-letter row in the
    schema; those opened in this process). A call is bounded: it reads at most a
    fixed amount whatever the number of queues, and says with ``complete`` when it
    stopped early. Reading names changes nothing.
    """

    async def queue_names(self, *, after: str | None = None, limit: int = 1000) -> QueueNameList:
        """Up to `limit` names greater than `after` (None: from the first), ascending.

        Raises:
            ValueError: `limit` is below 1 or above `QUEUE_NAMES_LIMIT`.
            QueueClosedError: The handle is closed.
            BackendUnavailableError: The backend could not be reached.
        """
        ...


def names_of(queue: Queue) -> QueueNames | None:
    """The backend's `QueueNames` (its ``queue_names`` property), or None."""
    part: QueueNames | None = getattr(queue, "queue_names", None)
    return part


def check_names_limit(limit: object) -> None:
    """The check of `QueueNames.queue_names`' `limit` (backends share it).

    Raises:
        ValueError: `limit` is not a whole number from 1 to `QUEUE_NAMES_LIMIT`.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= QUEUE_NAMES_LIMIT:
        raise ValueError(
            f"limit must be a whole number from 1 to {QUEUE_NAMES_LIMIT}, got {limit!r}"
        )
