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

Those six parts and their value types are defined in `taskrunner.queue_extensions` and
re-exported here, so this module reads as the contract every backend implements and
that one as the parts a backend may add; import both from here.

A queue class that implements a part's methods itself need not write its property:
it inherits the base of `taskrunner.queue_parts` named after the property
(`AdminOnSelf`, `SchedulingOnSelf`, `LookupOnSelf`, ...), which provides it and checks,
when the class is defined, that every method of the part is there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, Protocol

import msgspec

from taskrunner.queue_extensions import (
    BROWSE_LIMIT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_NAMES_LIMIT,
    Added,
    AddRequest,
    BrowsedMessage,
    BrowseState,
    FireRecord,
    LeaderLease,
    Leadership,
    MessageBrowser,
    MessageLookup,
    MessageState,
    MessageStateName as MessageStateName,  # importable from here, as before the split
    QueueNameList,
    QueueNames,
    ResultStore,
    ResultWrite,
    Scheduling,
    browse_of,
    browse_takes_body_bytes,
    check_body_bytes,
    check_browse,
    check_names_limit,
    cut_body,
    leadership_of,
    lookup_of,
    names_of,
    results_of,
    scheduling_of,
)
from taskrunner.queue_flow import Flow, FlowWait
from taskrunner.queue_transactional import TransactionalAdd, transactional_of

__all__ = [
    "BROWSE_LIMIT",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
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
    "Flow",
    "FlowWait",
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
    "TransactionalAdd",
    "WorkerInfo",
    "WorkerRegistry",
    "browse_of",
    "browse_takes_body_bytes",
    "check_body_bytes",
    "check_browse",
    "cut_body",
    "check_names_limit",
    "leadership_of",
    "lookup_of",
    "names_of",
    "results_of",
    "scheduling_of",
    "transactional_of",
]

CONTRACT_VERSION: Final = (2, 2)
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
        flow_control: `Scheduling.add_requests` honours `AddRequest.flow`: receive
            admits waiting messages under their concurrency and rate limits, taking
            turns across keys (`taskrunner.queue_flow`).
        priorities: `Scheduling.add_requests` honours `AddRequest.priority`.
        priority_aging_seconds: With `priorities`: how long the oldest ready message
            of a level waits for each level it rises (see `Scheduling`); None for
            strict priorities, where a steady flow of higher ones starves lower ones.
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
    flow_control: bool = False
    priorities: bool = False
    priority_aging_seconds: float | None = None


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
