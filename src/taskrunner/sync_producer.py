"""Dispatching from plain `def` code: `SyncProducer`, the blocking face of `Producer`.

Example (a Flask route; one instance per process, shared by its threads)::

    producer = taskrunner.SyncProducer("redis://localhost:6379", app)

    @flask_app.post("/signup")
    def signup() -> dict[str, str]:
        message_id = producer.dispatch(send_email, Email(to=request.form["email"]))
        return {"queued": message_id}

How: each instance runs one event loop on a daemon thread of its own (started by the
first call, named ``taskrunner-sync-producer``), and the async `Producer` and its queue
live there. A call hands its coroutine to that loop and blocks until it finishes, so
all threads share one connection pool and their commands interleave on it; the
value comes back, or the exception is raised, in the calling thread. After
``os.fork()`` the child sees the parent's loop as belonging to another process and
starts its own, with new connections, leaving the parent's sockets untouched
(`taskrunner.loop_thread`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, TypedDict, TypeVar, cast, overload

from taskrunner.app import App, Task
from taskrunner.backends import check_url, connect
from taskrunner.clock import Clock
from taskrunner.errors import QueueClosedError
from taskrunner.loop_thread import LoopStoppedError, LoopThread
from taskrunner.names import check_queue_name
from taskrunner.producer import Dispatched, DispatchedList, Producer, check_outbox
from taskrunner.queue import Capabilities, Queue, TransactionalAdd
from taskrunner.redaction import mask_url
from taskrunner.results import TaskStatus

__all__ = ["SyncProducer"]

PayloadT = TypeVar("PayloadT")
T = TypeVar("T")
Delay = float | timedelta

# How long `close` lets calls in flight finish before cancelling them (seconds).
CLOSE_GRACE_SECONDS = 5.0

# Every live instance, so the fork hook can reset them in the child.
_INSTANCES: weakref.WeakSet[SyncProducer] = weakref.WeakSet()


class BlockingAdder(Protocol):
    """What a backend's ``sync_add`` module makes: `Queue.add`, blocking and thread-safe."""

    def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue `bodies` in one round trip; their message ids, in order."""
        ...

    def close(self) -> None:
        """Release its connections."""
        ...


class _BlockingQueue:
    """The one part of a `Queue` a plain dispatch uses, backed by a `BlockingAdder`.

    A `Producer` on it runs a plain dispatch to the end without ever suspending, so
    `_drive` can run it on the calling thread with no event loop.
    """

    def __init__(self, adder: BlockingAdder, capabilities: Capabilities) -> None:
        self._adder = adder
        self.capabilities = capabilities

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        return self._adder.add(bodies)


class _Options(TypedDict):
    """A dispatch's options beside its task, payload, headers and connection."""

    delay: Delay | None
    at: datetime | None
    unique_key: str | None
    partition_key: str | None
    priority: int | None


def _drive(coro: Awaitable[T]) -> T:
    """Run a coroutine that never suspends to its end, here, without a loop."""
    step = coro.__await__()
    try:
        step.send(None)
    except StopIteration as stop:
        return cast(T, stop.value)
    step.close()
    raise RuntimeError("a blocking dispatch suspended: it needs the loop thread")


def _find_blocking_adder(queue: Queue, url: str) -> BlockingAdder | None:
    """The blocking adder the queue's backend offers in ``<package>.sync_add``, if any."""
    package = type(queue).__module__.rpartition(".")[0]
    if not package:
        return None
    name = f"{package}.sync_add"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None
    make = getattr(module, "sync_adder", None)
    if not callable(make):
        return None
    return cast("BlockingAdder | None", make(queue, url))


class _Connection:
    """The queue and `Producer` of one `LoopThread`; opened by the first call, on the loop.

    `blocking` is a second `Producer`, on the backend's blocking adder when it has one:
    plain dispatches run it on the calling thread (set once, before any caller sees it).
    """

    def __init__(
        self,
        url: str,
        queue_name: str,
        app: App,
        clock: Clock | None,
        outbox: TransactionalAdd | None = None,
    ) -> None:
        self._url = url
        self._outbox = outbox
        self._queue_name = queue_name
        self._app = app
        self._clock = clock
        self._queue: Queue | None = None
        self._producer: Producer | None = None
        self._opening: asyncio.Lock | None = None
        self._adder: BlockingAdder | None = None
        self.blocking: Producer | None = None
        self._closing = False

    async def producer(self) -> Producer:
        if self._closing:
            # A call that slipped in while closing must not open a new queue.
            raise QueueClosedError("this SyncProducer is closing")
        if self._producer is not None:
            return self._producer
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._closing:
                raise QueueClosedError("this SyncProducer is closing")
            if self._producer is None:
                # A failed open leaves nothing behind: the next call tries again.
                queue = await connect(self._url, self._queue_name, clock=self._clock)
                try:
                    adder = _find_blocking_adder(queue, self._url)
                except BaseException:
                    await queue.aclose()
                    raise
                if adder is not None:
                    shim = cast(Queue, _BlockingQueue(adder, queue.capabilities))
                    self.blocking = Producer(shim, self._app, clock=self._clock)
                self._queue, self._adder = queue, adder
                self._producer = Producer(queue, self._app, clock=self._clock, outbox=self._outbox)
        return self._producer

    async def aclose(self, loop_thread: LoopThread, grace: float) -> None:
        self._closing = True
        current = asyncio.current_task()
        pending = [task for task in loop_thread.in_flight() if task is not current]
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        queue, self._queue, self._producer = self._queue, None, None
        adder, self._adder, self.blocking = self._adder, None, None
        try:
            if adder is not None:
                adder.close()
        finally:
            if queue is not None:
                await queue.aclose()


class _Engine:
    """A `LoopThread` and the `_Connection` living on it: what one process uses."""

    def __init__(self, loop_thread: LoopThread, connection: _Connection) -> None:
        self.loop_thread = loop_thread
        self.connection = connection
        self.pid = loop_thread.pid


class SyncProducer:
    """Dispatches tasks of `app` onto the queue at `url` from synchronous code.

    The blocking counterpart of `Producer`: the same methods and options, the same
    validation and the same typed errors, raised in the calling thread; no event loop
    is needed by the caller. Open one per process and share it.

    Guarantees:
        Thread-safe: any number of threads may call one instance at once; their calls
        share one connection pool on the instance's own loop thread.
        Fork-safe: an instance made before ``os.fork()`` works in the child, which
        opens connections of its own on first use and never uses, closes or writes on
        the parent's (pre-fork servers: make it at import, dispatch in the workers).
        Lazy: nothing connects until the first call; a URL whose scheme no backend
        serves is refused at once. A first call that cannot connect raises and the next
        one tries again.
        Closed for good by `close` (or leaving the ``with`` block): later calls raise
        `QueueClosedError`.

    ``memory://`` is in-process: a SyncProducer opened on ``memory://NAME`` shares the
    store with every handle of this process opened on the same URL and queue (a
    worker's), like the async producer; its calls run on its own thread, so run such a
    worker while no call is in flight (a test: dispatch, then run the worker in burst
    mode), since the memory backend is not made for two threads at once.

    Don't call it from async code (it blocks that loop while it waits): use `Producer`
    there.

    Args:
        url: The backend URL, as for `taskrunner.open_queue` (``taskrunner.DEFAULT_URL``
            is ``memory://``).
        app: The application whose tasks (and size limit) apply.
        queue_name: The queue to dispatch to; the app's queue (``app.queue``) if None.
        clock: Source of the enqueue timestamp (and the memory backend's clock).
        outbox: As for `Producer`: where ``dispatch(..., connection=)`` writes when the
            queue's backend cannot write in the caller's transaction itself
            (`taskrunner_backends.postgres.outbox.OutboxWriter`).

    Raises:
        ConfigurationError: The URL's scheme is unknown or the queue name invalid.
        ValueError: `outbox` writes for another queue than the app's.
    """

    def __init__(
        self,
        url: str,
        app: App,
        *,
        queue_name: str | None = None,
        clock: Clock | None = None,
        outbox: TransactionalAdd | None = None,
    ) -> None:
        check_url(url)
        self._queue_name = app.queue if queue_name is None else queue_name
        check_queue_name(self._queue_name)
        self._url = url
        self._app = app
        self._clock = clock
        self._outbox = outbox
        check_outbox(outbox, app)
        self._lock = threading.Lock()
        self._engine: _Engine | None = None
        self._closed = False
        _INSTANCES.add(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<SyncProducer {mask_url(self._url)} queue={self._queue_name!r} {state}>"

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def close(self, *, timeout: float = CLOSE_GRACE_SECONDS) -> None:
        """Close the connections and stop the loop thread; idempotent.

        Calls other threads have in flight get up to `timeout` seconds to finish; those
        still running then are cancelled and raise `QueueClosedError` (a dispatch
        cancelled so may or may not have been added). Every later call raises
        `QueueClosedError`. In a forked child, closing an instance the parent made
        closes only the child's own connections.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            engine, self._engine = self._engine, None
        if engine is None:
            return
        if engine.pid != os.getpid():
            engine.loop_thread.orphan(isolate=False)  # a fork no hook saw: only kept
            return
        try:
            engine.loop_thread.call(engine.connection.aclose(engine.loop_thread, timeout))
        finally:
            engine.loop_thread.stop()

    @overload
    def dispatch(
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
    def dispatch(
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
    def dispatch(
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

    def dispatch(
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
        """Enqueue one run of `task` with `payload`; returns the message id.

        Exactly `Producer.dispatch` (same options, same errors), blocking until the
        backend has accepted the message.

        A plain dispatch (no delay, time, unique or partition key) on a backend with a
        blocking adder (Redis, not Cluster, not durable) is sent from the calling
        thread itself, in one round trip; every other call goes through the loop thread.

        With `connection`, the message is written in that connection's open
        transaction, from the calling thread (as `Producer.dispatch` describes).

        Raises:
            QueueClosedError: This SyncProducer was closed.
            UnknownTaskError: As `Producer.dispatch`; so are the errors below.
            PayloadValidationError: The payload does not match the task's type.
            PayloadTooLargeError: The encoded message exceeds the app's limit.
            ValueError: A bad delay, time or key.
            TypeError: `connection` is no connection the backend takes.
            ConfigurationError: `connection` cannot take part in a transactional dispatch.
            UnsupportedFeatureError: The backend lacks the feature asked for.
            BackendUnavailableError: The backend could not be reached.
        """
        options = _Options(
            delay=delay,
            at=at,
            unique_key=unique_key,
            partition_key=partition_key,
            priority=priority,
        )
        if connection is not None:
            # In the calling thread, on the caller's connection (see `_in_transaction`).
            (dispatched,) = self._in_transaction(task, [payload], connection, headers, options)
            return dispatched
        blocking = self._blocking(task, options)
        if blocking is not None:
            return _drive(blocking.dispatch(cast(Any, task), payload, headers=headers))
        return self._call(
            lambda p: p.dispatch(cast(Any, task), payload, headers=headers, **options)
        )

    def dispatch_many(
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
        """Enqueue one run of `task` per payload; exactly `Producer.dispatch_many`."""
        # Materialized here: a generator must not be consumed on another thread.
        items = list(payloads)
        options = _Options(
            delay=delay,
            at=at,
            unique_key=unique_key,
            partition_key=partition_key,
            priority=priority,
        )
        if connection is not None:
            return DispatchedList(self._in_transaction(task, items, connection, headers, options))
        blocking = self._blocking(task, options)
        if blocking is not None:
            return _drive(blocking.dispatch_many(task, items, headers=headers))
        return self._call(lambda p: p.dispatch_many(task, items, headers=headers, **options))

    def result(self, message_id: str, *, timeout: float = 30.0) -> Any:
        """The task's return value for `message_id`, waiting up to `timeout` seconds.

        Exactly `Producer.result`: TimeoutError when no result is stored in time,
        TaskFailedError when the task failed terminally.
        """
        return self._call(lambda p: p.result(message_id, timeout=timeout))

    def status(self, message_id: str) -> TaskStatus:
        """Where the message is; exactly `Producer.status`."""
        return self._call(lambda p: p.status(message_id))

    def status_many(self, message_ids: Sequence[str]) -> list[TaskStatus]:
        """`status` of each id, in order; exactly `Producer.status_many`."""
        ids = message_ids if isinstance(message_ids, str) else list(message_ids)
        return self._call(lambda p: p.status_many(ids))

    def cancel(self, message_id: str) -> bool:
        """Remove a queued or delayed message so it never runs; exactly `Producer.cancel`."""
        return self._call(lambda p: p.cancel(message_id))

    def cancel_many(self, message_ids: Sequence[str]) -> list[bool]:
        """`cancel` for several ids in one round trip; exactly `Producer.cancel_many`."""
        ids = message_ids if isinstance(message_ids, str) else list(message_ids)
        return self._call(lambda p: p.cancel_many(ids))

    def _blocking(self, task: Task[Any] | str, options: _Options) -> Producer | None:
        """The blocking producer, when this dispatch is plain and the backend has one."""
        if any(value is not None for value in options.values()):
            return None
        blocking = self._current().connection.blocking
        if blocking is None:
            return None  # not opened yet (the first call opens it), or none offered
        resolved = self._app.get_task(task) if isinstance(task, str) else task
        if resolved.is_unique or resolved.flow.active or resolved.priority:
            return None
        return blocking

    def _in_transaction(
        self,
        task: Task[Any] | str,
        payloads: list[Any],
        connection: object,
        headers: Mapping[str, str] | None,
        options: _Options,
    ) -> list[Dispatched]:
        """A dispatch written on the caller's `connection`, in the calling thread.

        The caller's connection belongs to the caller's thread (Django's even refuses
        other threads), so the statements run here; the loop thread only opens the
        queue (whose part says how to write them) on first use.
        """
        producer = self._call(_opened)
        resolved = self._app.get_task(task) if isinstance(task, str) else task
        return producer._send_in_transaction_sync(
            resolved,
            payloads,
            connection=connection,
            headers=headers,
            **options,
        )

    def _call(self, method: Callable[[Producer], Awaitable[T]]) -> T:
        engine = self._current()

        async def run() -> T:
            producer = await engine.connection.producer()
            return await method(producer)

        try:
            return engine.loop_thread.call(run())
        except (concurrent.futures.CancelledError, LoopStoppedError):
            if self._closed:
                raise QueueClosedError(
                    "this SyncProducer was closed while the call was in flight (a dispatch "
                    "may or may not have been added)"
                ) from None
            raise

    def _current(self) -> _Engine:
        engine = self._engine
        # The fast path reads without the lock: an engine is replaced, never mutated.
        if engine is not None and engine.pid == os.getpid() and not self._closed:
            return engine
        with self._lock:
            if self._closed:
                raise QueueClosedError(f"{self!r} was closed; make a new one to dispatch")
            engine = self._engine
            if engine is not None and engine.pid != os.getpid():
                # Forked without the hook having run (it always does on os.fork; this
                # is the belt to its braces). Its descriptor numbers may be reused by
                # now, so the copy is only kept, not isolated.
                engine.loop_thread.orphan(isolate=False)
                engine = None
            if engine is None:
                loop_thread = LoopThread(name=f"taskrunner-sync-producer-{self._queue_name}")
                connection = _Connection(
                    self._url, self._queue_name, self._app, self._clock, self._outbox
                )
                engine = _Engine(loop_thread, connection)
                self._engine = engine
            return engine

    def _after_fork_in_child(self) -> None:
        # The lock may have been held by a parent thread that does not exist here.
        self._lock = threading.Lock()
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.loop_thread.orphan()


async def _opened(producer: Producer) -> Producer:
    return producer


def _after_fork_in_child() -> None:
    for producer in list(_INSTANCES):
        producer._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
