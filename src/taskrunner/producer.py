"""The enqueue side: turn (task, payload) into messages on a queue.

Example::

    producer = taskrunner.Producer(queue, app)
    message_id = await producer.dispatch(send_email, Email(to="ada@example.com"))
    ids = await producer.dispatch_many(send_email, [Email(to=a) for a in addresses])
    later = await producer.dispatch(send_email, email, delay=30)        # in 30 s
    once = await producer.dispatch(send_invoice, inv, unique_key="invoice-42")
    if not once.added: ...                  # a message with that key was already there
    await producer.cancel(later)            # True: removed before it ran
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from taskrunner.app import App, Task, check_priority
from taskrunner.clock import Clock, SystemClock
from taskrunner.codec import encode_envelope
from taskrunner.errors import TaskFailedError, UnsupportedFeatureError
from taskrunner.messages import Envelope
from taskrunner.queue import (
    AddRequest,
    MessageLookup,
    MessageState,
    Queue,
    QueueStats,
    ResultStore,
    Scheduling,
    TransactionalAdd,
    lookup_of,
    results_of,
    scheduling_of,
    transactional_of,
)
from taskrunner.results import (
    TaskState,
    TaskStatus,
    decode_result,
    result_value,
    statuses,
    waiting_text,
)
from taskrunner.tracing import dispatching

__all__ = ["Dispatched", "DispatchedList", "Producer", "encode_message"]

Delay = float | timedelta


class Dispatched(str):
    """The message id `Producer.dispatch` returns: a `str`, plus whether it added.

    Code that treats the result as the message id keeps working; ``added`` is False
    when a unique dispatch found its key held and added nothing, in which case the id
    is the holding message's.
    """

    __slots__ = ("added",)
    added: bool

    def __new__(cls, message_id: str, *, added: bool = True) -> Dispatched:
        """The id `message_id`, with its `added` flag."""
        self = super().__new__(cls, message_id)
        self.added = added
        return self

    def __repr__(self) -> str:
        return f"Dispatched({str(self)!r}, added={self.added})"


class DispatchedList(list[str]):
    """The message ids `Producer.dispatch_many` returns: a ``list[str]``, plus flags.

    A subclass of ``list[str]``, so code that annotates or uses the result as a list
    of ids keeps working; each element is a `Dispatched`, and `added` lists the flags.
    """

    @property
    def added(self) -> list[bool]:
        """Whether each dispatch added its message (False: its unique key was held)."""
        return [getattr(message_id, "added", True) for message_id in self]

    def dispatched(self) -> list[Dispatched]:
        """The elements as `Dispatched` (typed), in order."""
        return [m if isinstance(m, Dispatched) else Dispatched(m) for m in self]


PayloadT = TypeVar("PayloadT")

# Messages per `Queue.add` call in dispatch_many: one round trip each, bounded memory.
_ADD_CHUNK = 1000


class Producer:
    """Dispatches tasks of `app` onto `queue`.

    Guarantees: a payload is validated against its task's declared type and the
    message size limit before anything is sent; when `dispatch` returns, the backend
    has accepted the message (durably only if its capabilities say
    ``durable_enqueue``).

    Args:
        queue: The backend queue to add messages to.
        app: The application whose tasks (and size limit) apply.
        clock: Source of the enqueue timestamp.
        outbox: Where ``dispatch(..., connection=)`` writes when the queue's backend
            cannot write in the caller's transaction itself: an outbox in the
            application's PostgreSQL database
            (`taskrunner_backends.postgres.outbox.OutboxWriter`), whose relay moves the
            committed rows into the queue. Its queue name must be the app's.

    Raises:
        ValueError: `outbox` writes for another queue than the app's.
    """

    def __init__(
        self,
        queue: Queue,
        app: App,
        *,
        clock: Clock | None = None,
        outbox: TransactionalAdd | None = None,
    ) -> None:
        check_outbox(outbox, app)
        self._queue = queue
        self._app = app
        self._clock = clock or SystemClock()
        self._outbox = outbox

    @overload
    async def dispatch(
        self,
        task: Task[PayloadT],
        payload: PayloadT,
        *,
        headers: Mapping[str, str] | None = None,
        delay: Delay | None = None,
        at: datetime | None = None,
        unique_key: str | None = None,
        partition_key: str | None = None,
        priority: int | None = None,
        connection: object | None = None,
    ) -> Dispatched: ...
    @overload
    async def dispatch(
        self,
        task: Task[None],
        payload: None = None,
        *,
        headers: Mapping[str, str] | None = None,
        delay: Delay | None = None,
        at: datetime | None = None,
        unique_key: str | None = None,
        partition_key: str | None = None,
        priority: int | None = None,
        connection: object | None = None,
    ) -> Dispatched: ...
    @overload
    async def dispatch(
        self,
        task: str,
        payload: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        delay: Delay | None = None,
        at: datetime | None = None,
        unique_key: str | None = None,
        partition_key: str | None = None,
        priority: int | None = None,
        connection: object | None = None,
    ) -> Dispatched: ...

    async def dispatch(
        self,
        task: Task[Any] | str,
        payload: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        delay: Delay | None = None,
        at: datetime | None = None,
        unique_key: str | None = None,
        partition_key: str | None = None,
        priority: int | None = None,
        connection: object | None = None,
    ) -> Dispatched:
        """Enqueue one run of `task` with `payload`; returns the backend's message id.

        Args:
            task: The task, or its registered name.
            payload: Validated against the task's payload type before anything is sent.
            headers: String metadata carried with the message.
            delay: Not delivered before this long from now (seconds or a timedelta,
                measured on the backend's clock; 0 = at once).
            at: Not delivered before this instant (an aware datetime; compared with
                the backend's wall clock; in the past = at once). Not with `delay`.
            unique_key: Adds nothing while a message dispatched with this key is
                queued, delayed or running: the result is then that message's id with
                ``added=False``. The key is used as given, scoped to the queue. Without
                it, a task declared with ``unique_for``/``unique_key`` makes its own
                key (see `App.task`); its ``unique_for`` bounds how long the key is held.
            partition_key: On a queue spread over partitions (a Redis Cluster URL with
                ``shards`` > 1), every message dispatched with this key goes to one
                partition, so they run in dispatch order when one worker takes them
                one at a time; elsewhere the queue has one partition and keeps that
                order anyway, and the key changes nothing.
            priority: 0 (lowest) to 9: a worker receives ready messages of higher
                priority first (an old message rises one level per the backend's
                ``priority_aging_seconds``, so none waits forever). None takes the
                task's own (``@app.task(priority=...)``, default 0). Any but 0 needs a
                backend with the ``priorities`` capability; on a partitioned queue it
                orders each partition. Not for a task with flow limits.
            connection: Write the message in the open transaction of this database
                connection (a psycopg 3 connection, a SQLAlchemy connection or session,
                Django's connection): it exists if and only if that transaction
                commits, and no worker sees it before. Needs a backend with the
                transactional part (PostgreSQL: the connection must reach the queue's
                database). See docs/transactional.md.

        Returns:
            The message id (a `Dispatched`, a `str` with ``added``).

        Raises:
            UnknownTaskError: `task` is a name no task of the app has.
            PayloadValidationError: The payload does not match the task's type.
            PayloadTooLargeError: The encoded message exceeds the app's limit.
            ValueError: A negative or non-finite delay, a naive `at`, both `delay` and
                `at`, an empty unique or partition key, or a priority for a task with
                flow limits.
            ConfigurationError: A priority that is no whole number from 0 to 9.
            UnsupportedFeatureError: The backend does not offer delayed, unique or
                transactional dispatch; nothing was sent.
            TypeError: `connection` is no connection the backend takes.
            ConfigurationError: `connection` cannot take part (closed, autocommit
                outside a transaction, a failed transaction, another database, the
                queue's schema missing); nothing was written.
            BackendUnavailableError: The backend could not be reached.
        """
        resolved = self._app.get_task(task) if isinstance(task, str) else task
        (result,) = await self._send(
            resolved,
            [payload],
            headers=headers,
            delay=delay,
            at=at,
            unique_key=unique_key,
            partition_key=partition_key,
            priority=priority,
            connection=connection,
        )
        return result

    async def dispatch_many(
        self,
        task: Task[PayloadT] | str,
        payloads: Iterable[PayloadT],
        *,
        headers: Mapping[str, str] | None = None,
        delay: Delay | None = None,
        at: datetime | None = None,
        unique_key: str | None = None,
        partition_key: str | None = None,
        priority: int | None = None,
        connection: object | None = None,
    ) -> DispatchedList:
        """Enqueue one run of `task` per payload; returns message ids in order.

        Every payload is validated before the first message is sent. Messages are
        sent in chunks, one backend round trip per chunk. The result is a
        `DispatchedList` (a ``list[str]``; ``.added`` has the flags). `delay`, `at`,
        `unique_key` and `partition_key` apply to every message as in `dispatch` (one
        `unique_key` for all adds only the first; a unique task's own keys are per
        payload).

        Raises:
            BackendUnavailableError: The backend could not be reached; some chunks may
                have been added. The other errors are those of `dispatch`.
        """
        resolved = self._app.get_task(task) if isinstance(task, str) else task
        return DispatchedList(
            await self._send(
                resolved,
                list(payloads),
                headers=headers,
                delay=delay,
                at=at,
                unique_key=unique_key,
                partition_key=partition_key,
                priority=priority,
                connection=connection,
            )
        )

    async def cancel(self, message_id: str) -> bool:
        """Remove a queued or delayed message so it never runs; returns whether it did.

        A message whose task is running is not interrupted (False), nor is one that
        completed, was dead-lettered, already cancelled or is unknown (False). A removed
        message's unique key is freed.

        Raises:
            UnsupportedFeatureError: The backend does not offer cancel.
            BackendUnavailableError: The backend could not be reached.
        """
        (removed,) = await self.cancel_many([message_id])
        return removed

    async def cancel_many(self, message_ids: Sequence[str]) -> list[bool]:
        """`cancel` for several ids in one round trip; one flag per id, in order."""
        if isinstance(message_ids, str):
            raise TypeError("cancel_many takes a sequence of message ids, not one str")
        ids = list(message_ids)
        for message_id in ids:
            if not isinstance(message_id, str):
                raise TypeError(f"a message id must be a str, got {type(message_id).__name__}")
        part = self._scheduling("cancel", "cancel")
        if not ids:
            return []
        return await part.cancel(ids)

    # The timeout is the backend's (a server-side blocking wait), not asyncio.timeout's.
    async def result(self, message_id: str, *, timeout: float = 30.0) -> Any:  # noqa: ASYNC109
        """The return value of the task run for `message_id`, waiting up to `timeout` seconds.

        The task must store results (``store_result=True`` on the task or
        ``store_results=True`` on the app). The value is decoded against the return
        annotation of the task as this producer's app registers it (plain JSON values
        for a task it does not know). Returns at once when the result is already
        stored; otherwise waits without polling where the backend can notify
        (``Capabilities.result_notify``). A stored result is kept for the task's
        ``result_ttl``; a message that ran twice (its lease lapsed) holds the result
        of the run that finished last.

        Raises:
            TaskFailedError: The task failed terminally; the exception carries the
                stored error type and message. Raised at once, without waiting, for a
                message that was dead-lettered without a stored result, where the
                backend can look messages up (``error_type`` ``DeadLettered``, the
                reason as ``error_message``).
            TimeoutError: No result was stored within `timeout` (still queued or
                running, or the task does not store results, or it expired).
            UnsupportedFeatureError: The backend has no result store.
            ValueError: `timeout` is negative or not finite.
            PayloadValidationError: The stored value does not match the return type.
        """
        _check_id(message_id)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
        if not math.isfinite(timeout) or timeout < 0:
            raise ValueError(f"timeout={timeout!r} must be a finite number of seconds >= 0")
        message_id = str(message_id)  # a `Dispatched` is a str subclass
        store = self._result_store()
        dead: TaskStatus | None = None
        if self._queue.capabilities.lookup:
            status = await self.status(message_id)
            if status.state == TaskState.DEAD:
                dead = status
        # A dead letter has its stored failure now or never gets one: no waiting.
        wait = 0.0 if dead is not None else float(timeout)
        body = await store.wait_result(message_id, timeout_seconds=wait)
        if body is None and dead is not None:
            raise _dead_letter_error(dead)
        if body is None:
            raise TimeoutError(
                f"no result for message {message_id} within {timeout:g}s (not finished yet, "
                "its task does not store results, or the result expired)"
            )
        return result_value(message_id, decode_result(body), self._app.tasks)

    async def status(self, message_id: str) -> TaskStatus:
        """Where the message `message_id` is, with its delivery count, last error and times.

        The state is one of delayed, ready, running, succeeded, failed, dead and
        unknown (see `TaskState`). Derived from the backend's own records while it
        holds the message, then from the stored result, so tasks without results
        read ``unknown`` once acked.

        Raises:
            UnsupportedFeatureError: The backend can neither look messages up nor
                store results.
        """
        [status] = await self.status_many([message_id])
        return status

    async def status_many(self, message_ids: Sequence[str]) -> list[TaskStatus]:
        """`status` of each id, in order, with one lookup and one result read for all."""
        if isinstance(message_ids, str):
            raise TypeError("status_many takes a sequence of message ids, not one str")
        for message_id in message_ids:
            _check_id(message_id)
        # Plain str: a `Dispatched` passed back in would otherwise ride into the status.
        ids = [str(message_id) for message_id in message_ids]
        lookup = lookup_of(self._queue) if self._queue.capabilities.lookup else None
        store = results_of(self._queue) if self._queue.capabilities.results else None
        if lookup is None and store is None:
            backend = type(self._queue).__name__
            raise UnsupportedFeatureError(
                f"status needs a backend with the 'lookup' or 'results' capability; "
                f"{backend} offers neither",
                backend=backend,
                capability="lookup",
            )
        if not ids:
            return []
        states = await lookup.lookup(ids) if lookup is not None else [None] * len(ids)
        stored = await store.get_results(ids) if store is not None else [None] * len(ids)
        found = statuses(ids, states, stored)
        if lookup is None or not any(s is not None and s.state == "ready" for s in states):
            return found
        return await self._explain_waits(lookup, found, states)

    async def _explain_waits(
        self,
        lookup: MessageLookup,
        found: list[TaskStatus],
        states: Sequence[MessageState | None],
    ) -> list[TaskStatus]:
        """Name the holders of full slots, and say when no worker receives lately."""
        holder_ids = sorted(
            {i for s in states if s is not None and s.waiting for i in s.waiting.holders}
        )
        holders = {
            i: h
            for i, h in zip(holder_ids, await lookup.lookup(holder_ids), strict=True)
            if h is not None
        }
        idle = _consumers_idle(await self._queue.stats())
        explained = []
        for status, state in zip(found, states, strict=True):
            if state is not None and state.state == "ready":
                text = waiting_text(state, holders)
                if idle is not None:
                    text = f"{text}; {idle}"
                status = dataclasses.replace(status, waiting_for=text)
            explained.append(status)
        return explained

    def _result_store(self) -> ResultStore:
        store = results_of(self._queue)
        if store is None or not self._queue.capabilities.results:
            raise self._unsupported("results", "results")
        return store

    async def _send(
        self,
        task: Task[Any],
        payloads: list[Any],
        *,
        headers: Mapping[str, str] | None,
        delay: Delay | None,
        at: datetime | None,
        unique_key: str | None,
        partition_key: str | None,
        priority: int | None,
        connection: object | None = None,
    ) -> list[Dispatched]:
        options = _options(task, delay, at, unique_key, partition_key, priority)
        with dispatching(self._app.queue, task.name, len(payloads)) as trace:
            headers = _with_trace(trace, headers)
            if connection is not None:
                part, requests = self._in_transaction(task, payloads, headers, options)
                added = await part.add(connection, requests)
                return [Dispatched(a.message_id, added=a.added) for a in added]
            return await self._add(task, payloads, headers, options)

    def _send_in_transaction_sync(
        self,
        task: Task[Any],
        payloads: list[Any],
        *,
        connection: object,
        headers: Mapping[str, str] | None,
        delay: Delay | None,
        at: datetime | None,
        unique_key: str | None,
        partition_key: str | None,
        priority: int | None,
    ) -> list[Dispatched]:
        """`_send` with a connection, blocking, in the calling thread (for `SyncProducer`).

        Touches no connection of the queue's: the statements run on `connection`.
        """
        options = _options(task, delay, at, unique_key, partition_key, priority)
        with dispatching(self._app.queue, task.name, len(payloads)) as trace:
            headers = _with_trace(trace, headers)
            part, requests = self._in_transaction(task, payloads, headers, options)
            added = part.add_sync(connection, requests)
        return [Dispatched(a.message_id, added=a.added) for a in added]

    def _in_transaction(
        self,
        task: Task[Any],
        payloads: list[Any],
        headers: Mapping[str, str] | None,
        options: _SendOptions,
    ) -> tuple[TransactionalAdd, list[AddRequest]]:
        """The part that writes in the caller's transaction, and the checked requests."""
        part = self._transactional()
        if task.flow.active and self._outbox is not None:
            # The outbox's rows carry no flow yet: refusing beats adding the message
            # without its limits.
            raise UnsupportedFeatureError(
                f"task {task.name!r} has a rate limit, concurrency limit or fairness key, "
                "and dispatch with connection= through the outbox does not carry them yet: "
                "dispatch it without connection= (nothing was sent)",
                backend=type(self._queue).__name__,
                capability="flow_control",
            )
        if options.priority and self._outbox is not None:
            raise UnsupportedFeatureError(
                f"a priority (task {task.name!r}) does not travel through the outbox yet: "
                "dispatch it without connection= (nothing was sent)",
                backend=type(self._queue).__name__,
                capability="priorities",
            )
        if self._outbox is None:
            # The outbox takes delays and keys to the queue itself, which checks them.
            self._capabilities_for(task, options)
        bodies = self._bodies(task, payloads, headers, options)
        return part, self._requests(task, payloads, bodies, options)

    async def _add(
        self,
        task: Task[Any],
        payloads: list[Any],
        headers: Mapping[str, str] | None,
        options: _SendOptions,
    ) -> list[Dispatched]:
        bodies = self._bodies(task, payloads, headers, options)
        partitioned = options.partition_key is not None and scheduling_of(self._queue) is not None
        if options.plain and not task.flow.active and not partitioned:
            # The hot path: plain dispatches keep using Queue.add (and so does a
            # partition key on a backend without the Scheduling part: one partition).
            ids: list[str] = []
            for start in range(0, len(bodies), _ADD_CHUNK):
                ids.extend(await self._queue.add(bodies[start : start + _ADD_CHUNK]))
            return [Dispatched(message_id) for message_id in ids]
        part = self._capabilities_for(task, options)
        assert part is not None  # a partition key with no Scheduling part took the hot path
        requests = self._requests(task, payloads, bodies, options)
        results: list[Dispatched] = []
        for start in range(0, len(requests), _ADD_CHUNK):
            added = await part.add_requests(requests[start : start + _ADD_CHUNK])
            results.extend(Dispatched(a.message_id, added=a.added) for a in added)
        return results

    def _bodies(
        self,
        task: Task[Any],
        payloads: list[Any],
        headers: Mapping[str, str] | None,
        options: _SendOptions,
    ) -> list[bytes]:
        """Each payload's encoded message; a delayed one carries the instant it is due."""
        due: float | None = options.due_at
        if due is None and options.delay_seconds > 0:
            due = self._clock.time() + options.delay_seconds
        return [
            encode_message(self._app, task, payload, clock=self._clock, headers=headers, due_at=due)
            for payload in payloads
        ]

    @staticmethod
    def _requests(
        task: Task[Any], payloads: list[Any], bodies: list[bytes], options: _SendOptions
    ) -> list[AddRequest]:
        unique = options.unique
        unique_seconds = task.unique_for if unique else None
        return [
            AddRequest(
                body=body,
                delay_seconds=options.delay_seconds,
                due_at=options.due_at,
                unique_key=(
                    None if not unique else options.unique_key or _default_key(task, payload)
                ),
                unique_seconds=unique_seconds,
                partition_key=options.partition_key,
                flow=task.flow.flow_for(payload),
                priority=options.priority,
            )
            for payload, body in zip(payloads, bodies, strict=True)
        ]

    def _transactional(self) -> TransactionalAdd:
        part = self._outbox or transactional_of(self._queue)
        if part is None:
            backend = type(self._queue).__name__
            raise UnsupportedFeatureError(
                f"dispatch with connection= writes the message in your database "
                f"transaction, which needs a backend that can: PostgreSQL (a postgresql:// "
                f"queue URL on the same database as the connection), or an outbox in your "
                f"PostgreSQL database (Producer(..., outbox=OutboxWriter(app.queue)) and a "
                f"relay); {backend} has neither, so nothing was sent (docs/transactional.md)",
                backend=backend,
                capability="transactional",
            )
        return part

    def _capabilities_for(self, task: Task[Any], options: _SendOptions) -> Scheduling | None:
        """The Scheduling part (None: none), once each capability the dispatch needs is checked."""
        part = scheduling_of(self._queue)
        if options.delay_seconds > 0 or options.due_at is not None:
            part = self._scheduling("delayed_add", "delayed dispatch (delay= or at=)")
        if options.unique:
            part = self._scheduling("unique_add", "unique dispatch")
        if options.priority:
            part = self._scheduling("priorities", f"a dispatch with priority {options.priority}")
        if task.flow.active:
            part = self._scheduling(
                "flow_control", "a task with a rate limit, concurrency limit or fairness key"
            )
        return part

    def _scheduling(self, capability: str, what: str) -> Scheduling:
        part = scheduling_of(self._queue)
        if part is None or not getattr(self._queue.capabilities, capability, False):
            raise self._unsupported(what, capability)
        return part

    def _unsupported(self, what: str, capability: str) -> UnsupportedFeatureError:
        backend = type(self._queue).__name__
        return UnsupportedFeatureError(
            f"{what} needs a backend with the {capability!r} capability; {backend} "
            "does not offer it",
            backend=backend,
            capability=capability,
        )

    def encode(
        self, task: Task[Any] | str, payload: Any, *, headers: Mapping[str, str] | None = None
    ) -> bytes:
        """The message body `dispatch` would send, validated and size-checked."""
        return encode_message(self._app, task, payload, clock=self._clock, headers=headers)


def encode_message(
    app: App,
    task: Task[Any] | str,
    payload: Any,
    *,
    clock: Clock | None = None,
    headers: Mapping[str, str] | None = None,
    due_at: float | None = None,
) -> bytes:
    """The body `Producer.dispatch` would send for `payload`, without a queue.

    `due_at` (Unix seconds) records when a delayed dispatch is due, so queue latency
    is measured from then.

    Raises:
        UnknownTaskError: `task` is a name `app` does not know.
        PayloadValidationError: The payload does not match the task's payload type.
        PayloadTooLargeError: The body exceeds the app's ``max_message_bytes``.
    """
    resolved = app.get_task(task) if isinstance(task, str) else task
    envelope = Envelope(
        id=uuid.uuid4().hex,
        task=resolved.name,
        payload=resolved.codec.encode(payload),
        enqueued_at=(clock or SystemClock()).time(),
        headers=dict(headers) if headers else {},
        due_at=due_at,
    )
    return encode_envelope(envelope, max_bytes=app.max_message_bytes)


def check_outbox(outbox: TransactionalAdd | None, app: App) -> None:
    """Refuse an outbox whose rows the relay would move to another queue than the app's.

    Raises:
        ValueError: `outbox` names a ``queue_name`` other than ``app.queue``.
    """
    queue_name = getattr(outbox, "queue_name", app.queue)
    if queue_name != app.queue:
        raise ValueError(
            f"the outbox writes rows for queue {queue_name!r}, the app's queue is "
            f"{app.queue!r}: the relay would move them to the wrong queue"
        )


def _with_trace(
    trace: dict[str, str], headers: Mapping[str, str] | None
) -> Mapping[str, str] | None:
    """The headers to send: the trace context, with the caller's own headers winning."""
    if not trace:
        return headers
    return {**trace, **headers} if headers else trace


@dataclasses.dataclass(frozen=True, slots=True)
class _SendOptions:
    """A dispatch's checked options, as every add path needs them."""

    delay_seconds: float
    due_at: float | None
    unique: bool
    unique_key: str | None
    partition_key: str | None
    priority: int

    @property
    def plain(self) -> bool:
        """Nothing but a body: `Queue.add` can take it."""
        return not (
            self.unique or self.priority or self.delay_seconds > 0 or self.due_at is not None
        )


def _options(
    task: Task[Any],
    delay: Delay | None,
    at: datetime | None,
    unique_key: str | None,
    partition_key: str | None,
    priority: int | None,
) -> _SendOptions:
    """The checked timing, key and priority options of one dispatch."""
    delay_seconds, due_at = _when(delay, at)
    key: Any = unique_key
    if key is not None and (not isinstance(key, str) or not key):
        raise ValueError(f"unique_key must be a non-empty str, got {unique_key!r}")
    key = partition_key
    if key is not None and (not isinstance(key, str) or not key):
        raise ValueError(f"partition_key must be a non-empty str, got {partition_key!r}")
    chosen = task.priority if priority is None else check_priority(priority)
    if chosen and task.flow.active:
        raise ValueError(
            f"task {task.name!r} has flow limits, and a priority does not apply to it "
            "(its messages are admitted in their keys' turns)"
        )
    return _SendOptions(
        delay_seconds,
        due_at,
        unique_key is not None or task.is_unique,
        unique_key,
        partition_key,
        chosen,
    )


# A queue whose every consumer has been idle this long is said to have no worker
# receiving (a live worker's fetchers receive at least every block_seconds).
_IDLE_CONSUMERS_SECONDS = 60.0


def _consumers_idle(stats: QueueStats) -> str | None:
    """A note that no worker has received lately, when none has; else None."""
    idle = [c.idle_seconds for c in stats.consumers if c.idle_seconds is not None]
    if not stats.consumers:
        return "no worker has received from this queue"
    if idle and min(idle) >= _IDLE_CONSUMERS_SECONDS:
        return f"no worker has received from this queue for {min(idle):.0f} s"
    return None


def _check_id(message_id: object) -> None:
    if not isinstance(message_id, str):
        raise TypeError(f"a message id must be a str, got {type(message_id).__name__}")
    if not message_id:
        raise ValueError("a message id must not be empty")


def _when(delay: Delay | None, at: datetime | None) -> tuple[float, float | None]:
    """`delay` and `at`, checked, as `AddRequest.delay_seconds` and `due_at`."""
    if delay is not None and at is not None:
        raise ValueError("give delay= or at=, not both")
    if at is not None:
        if not isinstance(at, datetime):
            raise TypeError(f"at must be a datetime, got {type(at).__name__}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(
                f"at={at.isoformat()} is naive: give a timezone-aware datetime "
                "(e.g. datetime(..., tzinfo=timezone.utc)) so the instant is unambiguous"
            )
        return 0.0, at.timestamp()
    if delay is None:
        return 0.0, None
    seconds: Any = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"delay must be seconds or a timedelta, got {type(delay).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"delay={delay!r} must be finite and >= 0")
    return float(seconds), None


def _default_key(task: Task[Any], payload: Any) -> str:
    """A unique task's own key: ``name:fn(payload)``, or ``name:sha256(payload JSON)``."""
    if task.unique_key is not None:
        made: Any = task.unique_key(payload)
        if not isinstance(made, str) or not made:
            raise ValueError(
                f"task {task.name!r}: unique_key(payload) must return a non-empty str, got {made!r}"
            )
        return f"{task.name}:{made}"
    return f"{task.name}:{hashlib.sha256(bytes(task.codec.encode(payload))).hexdigest()}"


def _dead_letter_error(status: TaskStatus) -> TaskFailedError:
    reason = status.last_error or "no reason recorded"
    task = status.task or "?"
    return TaskFailedError(
        f"message {status.message_id} (task {task!r}) was dead-lettered without a stored "
        f"result: {reason}",
        message_id=status.message_id,
        task=task,
        error_type="DeadLettered",
        error_message=reason,
        delivery_count=status.delivery_count or 0,
    )
