"""The optional parts of the backend contract that are not members of `Queue`.

`taskrunner.queue` is the contract every backend implements; this module holds the
parts a backend may add on top, each as a property of its queue that callers read
through an accessor returning None when the backend lacks it (so a backend written
before a part existed still satisfies `Queue`): ``scheduling`` (`Scheduling`, read with
`scheduling_of`), ``leadership`` (`Leadership`, `leadership_of`), ``results``
(`ResultStore`, `results_of`), ``lookup`` (`MessageLookup`, `lookup_of`), ``browse``
(`MessageBrowser`, `browse_of`) and ``queue_names`` (`QueueNames`, `names_of`), with
their value types. A backend author implements only the parts whose `Capabilities`
flags it claims; each part's docstring is its contract, one conformance test per
bullet, as for `Queue`.

Everything here is re-exported from `taskrunner.queue`, which stays the import path
backends, the conformance suite and the docs use. A queue class that implements a
part's methods itself inherits the part's base from `taskrunner.queue_parts` instead
of writing the property.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import msgspec

from taskrunner.queue_flow import Flow, FlowWait

if TYPE_CHECKING:
    # Only the accessors' signatures name Queue; taskrunner.queue imports this module.
    from taskrunner.queue import Queue

__all__ = [
    "BROWSE_LIMIT",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "QUEUE_NAMES_LIMIT",
    "AddRequest",
    "Added",
    "BrowseState",
    "BrowsedMessage",
    "FireRecord",
    "LeaderLease",
    "Leadership",
    "MessageBrowser",
    "MessageLookup",
    "MessageState",
    "MessageStateName",
    "QueueNameList",
    "QueueNames",
    "ResultStore",
    "ResultWrite",
    "Scheduling",
    "browse_of",
    "browse_takes_body_bytes",
    "takes_body_bytes",
    "check_body_bytes",
    "check_browse",
    "cut_body",
    "check_names_limit",
    "leadership_of",
    "lookup_of",
    "names_of",
    "results_of",
    "scheduling_of",
]


#: The lowest and highest `AddRequest.priority`; higher is received first.
PRIORITY_MIN = 0
PRIORITY_MAX = 9


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
        flow: Admit the message through flow control (`taskrunner.queue_flow`): it
            waits until its key's turn, concurrency slot and rate allow. Needs
            ``Capabilities.flow_control``. A delayed message with a flow starts
            waiting when it falls due.
        priority: `PRIORITY_MIN` (the default) to `PRIORITY_MAX`: a receive leases
            ready messages of higher priority first (see `Scheduling`). Any value but
            0 needs ``Capabilities.priorities``; not with a `flow` (admission has an
            order of its own).
    """

    body: bytes
    delay_seconds: float = 0.0
    due_at: float | None = None
    unique_key: str | None = None
    unique_seconds: float | None = None
    partition_key: str | None = None
    flow: Flow | None = None
    priority: int = PRIORITY_MIN


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

    With ``Capabilities.priorities`` (checked by X100-X104), a receive leases ready
    messages of a higher effective priority first, and a released, delayed or retried
    message keeps its priority. The *effective* priority of the oldest ready
    message of each level is its priority plus one for every
    ``Capabilities.priority_aging_seconds`` it has been ready (added, fallen due or
    released), up to `PRIORITY_MAX`; with no aging it is its priority (strict). So a
    lower level is never starved for longer than its distance to the top times the
    aging. Equal effective priorities go to the higher level.
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
        waiting: For ``ready``: why a message with a flow is not admitted yet, on a
            backend that can tell (contract 2.2); None otherwise.
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
    waiting: FlowWait | None = None


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
        body: The message bytes, unchanged; with ``browse(..., body_bytes=N)`` at most
            their first N bytes.
        delivery_count: Deliveries so far (0 before the first).
        added_at: Wall-clock time (Unix seconds) the message was added, when known.
        consumer: For ``in_flight``: the consumer holding the lease.
        idle_seconds: For ``in_flight``: seconds since it was leased or last heartbeated.
        lease_seconds: For ``in_flight``: the lease its holder was granted, when known
            (the lease lapses once ``idle_seconds`` exceeds it).
        body_size: The whole body's length in bytes when `body` holds only its start
            (``body_bytes`` cut it); None when `body` is the whole body. A backend may
            also set it, to ``len(body)``, when nothing was cut. Added in contract 2.1.
    """

    cursor: str
    message_id: str
    body: bytes
    delivery_count: int
    added_at: float | None = None
    consumer: str | None = None
    idle_seconds: float | None = None
    lease_seconds: float | None = None
    body_size: int | None = None


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
    * With body_bytes, a longer body is cut to it and body_size is its length.

    ``body_bytes`` was added in contract 2.1: a caller that may meet a backend of
    contract 2.0 checks `browse_takes_body_bytes` first (a 2.0 ``browse`` has no such
    argument) and cuts the bodies itself otherwise.
    """

    async def browse(
        self,
        state: BrowseState,
        *,
        after: str | None = None,
        limit: int = 100,
        body_bytes: int | None = None,
    ) -> list[BrowsedMessage]:
        """Up to `limit` messages in `state` whose cursor comes after `after`, in cursor order.

        ``after=None`` starts at the first. Fewer than `limit` (or ``[]``) means the
        listing reached its end when it was read. With `body_bytes`, a body longer than
        that is cut to its first `body_bytes` bytes where the backend stores it (the
        rest is not read, nor sent), and `BrowsedMessage.body_size` gives its whole
        length: a listing then costs about ``limit * body_bytes`` bytes however large
        the messages are. None: whole bodies.

        Raises:
            ValueError: `state` is not ``waiting`` or ``in_flight``, `limit` is below 1
                or above `BROWSE_LIMIT`, `body_bytes` is not None nor a whole number of
                0 or more, or `after` is no cursor this backend issues.
            QueueClosedError: The handle is closed.
            BackendUnavailableError: The backend could not be reached.
        """
        ...


def browse_of(queue: Queue) -> MessageBrowser | None:
    """The backend's `MessageBrowser` (its ``browse`` property), or None."""
    part: MessageBrowser | None = getattr(queue, "browse", None)
    return part


def browse_takes_body_bytes(part: MessageBrowser) -> bool:
    """Whether `part`'s ``browse`` accepts ``body_bytes`` (contract 2.1; a 2.0 one does not).

    Read from the method's signature, so a backend written against contract 2.0 is
    called without the argument instead of failing with a TypeError.
    """
    return takes_body_bytes(part.browse)


def takes_body_bytes(method: object) -> bool:
    """Whether the callable `method` accepts a ``body_bytes`` keyword (by its signature)."""
    try:
        parameters = inspect.signature(method).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    if "body_bytes" in parameters:
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def cut_body(body: bytes, body_bytes: int | None) -> tuple[bytes, int | None]:
    """`body` cut to `body_bytes`, with its whole length when cut (backends share it).

    Returns ``(body, None)`` when `body_bytes` is None or the body is not longer.
    """
    if body_bytes is None or len(body) <= body_bytes:
        return body, None
    return body[:body_bytes], len(body)


def check_browse(state: object, limit: object, body_bytes: object = None) -> None:
    """The argument checks every `MessageBrowser.browse` makes first (backends share it).

    Raises:
        ValueError: `state` is not ``waiting`` or ``in_flight``, `limit` is not a
            whole number from 1 to `BROWSE_LIMIT`, or `body_bytes` is neither None
            nor a whole number of 0 or more.
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
    check_body_bytes(body_bytes)


def check_body_bytes(body_bytes: object) -> None:
    """The check of `MessageBrowser.browse`'s ``body_bytes`` (part of `check_browse`).

    Raises:
        ValueError: `body_bytes` is neither None nor a whole number of 0 or more.
    """
    if body_bytes is not None and (
        isinstance(body_bytes, bool) or not isinstance(body_bytes, int) or body_bytes < 0
    ):
        raise ValueError(f"body_bytes must be None or a whole number >= 0, got {body_bytes!r:.40}")


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
