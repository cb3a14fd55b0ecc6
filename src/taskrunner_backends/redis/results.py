"""Results: the `ResultStore` part, and the listener that wakes every `wait_result`.

Storage. A result is the string ``r:<message id>`` in the queue's slot,
``SET ... PX`` (last write wins, TTL restarted), indexed in the ``results`` zset so
delete_queue finds it; a put is one script per `RESULTS_BATCH` results, all in one
round trip, and appends the ids it stored to the capped ``done`` stream. Waits of one
handle share one listener task reading that stream with a blocking XREAD (below).

The listener. One blocking XREAD per queue handle wakes every `wait_result`.

Why a stream, not Pub/Sub. The put script appends one entry naming the stored ids to
the queue's capped ``done`` stream (see `keys`). A listener reads it with ``XREAD
BLOCK`` from an explicit position, so nothing is lost while its connection is down:
after a reconnect it reads on from where it was. It needs no channel permissions
under ACL and no dedicated connection mode, and on Redis Cluster the stream lives in
the queue's slot like every other key.

Sharing. Waiters of one handle register a future under their message id and share
one listener task; so 1000 concurrent waits cost one blocking connection plus at most
`CHECK_CONCURRENCY` connections for their first look at the key. The listener wakes
the waiters of every id a notification names, with one MGET of their keys per read.

No notification is missed:

* A waiter reads its key once (a stored result needs no listener), then registers,
  waits until the listener knows its position in the stream, and reads the key
  again. A put before that second read is seen by it; a put after it appends an
  entry after the position, which the listener reads.
* The stream is capped with ``MAXLEN ~ NOTIFY_CAP``, which keeps at least that many
  entries. A read that returns `NOTIFY_CAP` entries may have been overtaken by
  trimming, so the listener then looks at every waiting key (one MGET per 1000).
  It does the same after any error (a lost connection, the stream deleted by
  delete_queue), before reading on.
* A notification is only "look again": a waiter wakes with the body the listener read,
  or keeps waiting when the key is empty (expired or deleted meanwhile).

Ownership (structured concurrency). The listener task is started by the first waiter
of a handle, runs while anyone waits, and ends by itself after a read that finds no
waiter left (at most `LISTEN_BLOCK_SECONDS` later). `ResultListener.aclose` cancels
and awaits it, then fails every pending wait with `QueueClosedError`; the task never
swallows its own cancellation.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from taskrunner.errors import BackendError, QueueClosedError
from taskrunner.queue import ResultWrite
from taskrunner_backends.checks import check_ids, check_result_writes, check_text

from .arguments import _milliseconds
from .base import QueueBase
from .client import Arg
from .errors import translate_errors
from .replies import _as_int, _stream_entries

__all__ = [
    "CHECK_CONCURRENCY",
    "RESULTS_BATCH",
    "LISTEN_BLOCK_SECONDS",
    "NOTIFY_CAP",
    "ResultListener",
    "ResultsMixin",
    "notify_token",
]

_log = logging.getLogger("taskrunner_backends.redis")

# Entries the notification stream keeps at least (MAXLEN ~), and the COUNT of one read.
NOTIFY_CAP = 256

# Results per put/delete script call (count); one round trip carries them all.
RESULTS_BATCH = 500

# Longest one blocking read of the listener (seconds); also how long an idle listener
# lingers after its last waiter left, so back-to-back waits reuse it.
LISTEN_BLOCK_SECONDS = 5.0

# How long after a BLOCK expires the listener still waits for the reply (seconds).
_READ_MARGIN_SECONDS = 5.0

# Waiters reading their key for the first time at once, per handle (connections).
CHECK_CONCURRENCY = 8

# Back-off after a failed read (seconds): first retry at once, then doubling.
_RETRY_FIRST_SECONDS = 0.05
_RETRY_MAX_SECONDS = 2.0

# Ids longer than this (bytes) are named in notifications by '#' + their SHA1, as the
# put script does: the notification stream stays small whatever the ids are.
_LONG_ID_BYTES = 128

_MGET_CHUNK = 1000


def notify_token(message_id: str) -> str:
    """How the put script names `message_id` in a notification (see ``lua/results.lua``)."""
    raw = message_id.encode()
    if len(raw) > _LONG_ID_BYTES:
        return "#" + hashlib.sha1(raw).hexdigest()
    return message_id


class ResultListener:
    """The waiters of one queue handle and the task that wakes them (internal)."""

    def __init__(self, queue: QueueBase, client_name: str) -> None:
        self._queue = queue
        # message id -> futures of its waiters; token -> ids (equal but for long ids).
        self._waiters: dict[str, set[asyncio.Future[bytes]]] = {}
        self._by_token: dict[str, set[str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._closed = False
        self._checks = asyncio.Semaphore(CHECK_CONCURRENCY)
        # Set on the listener's connection for the length of each read, so CLIENT LIST
        # shows it (and tests can find it); restored to the pool's own name after.
        self._name = client_name
        self._pool_name: str = queue._raw.connection_kwargs().get("client_name") or ""
        #: Waits that looked at their key and now wait for a notification (for tests).
        self.parked = 0
        #: Reads that failed and were retried (for tests and diagnostics).
        self.failures = 0
        #: Times every waiting key was looked at again (after a failure or a full read).
        self.rechecks = 0

    @property
    def running(self) -> bool:
        """Whether the listener task is alive."""
        return self._task is not None

    @property
    def waiting(self) -> int:
        """How many waits are registered."""
        return sum(len(f) for f in self._waiters.values())

    async def wait(self, message_id: str, key: str, timeout_seconds: float) -> bytes | None:
        """The body stored under `key` for `message_id`, waiting up to `timeout_seconds`."""
        loop = asyncio.get_running_loop()
        timeout = asyncio.timeout_at(loop.time() + timeout_seconds)
        future: asyncio.Future[bytes] = loop.create_future()
        try:
            async with timeout:
                # Usually the task has finished already: one GET, and no listener.
                self._check_open()
                async with self._checks:
                    body = await self._get(key)
                if body is not None:
                    return body
                # Registered before the listener starts (no await in between), so an
                # idle listener never ends under a waiter it has not seen.
                self._add(message_id, future)
                ready = self._start()
                await ready.wait()
                self._check_open()
                async with self._checks:
                    body = await self._get(key)
                if body is not None:
                    return body
                self.parked += 1
                try:
                    return await future
                finally:
                    self.parked -= 1
        except TimeoutError:
            if timeout.expired():
                return None
            raise
        finally:
            self._discard(message_id, future)
            if future.done() and not future.cancelled():
                # Retrieved, so a close that failed it while we were elsewhere logs nothing.
                future.exception()

    async def aclose(self) -> None:
        """Stop the listener (cancelled and awaited); pending waits raise QueueClosedError."""
        self._closed = True
        task = self._task
        if task is not None:
            task.cancel()
            # Not `await task`: its CancelledError is its own, not ours to raise.
            await asyncio.wait([task])
        error = QueueClosedError(f"{self._queue!r} was closed while waiting for a result")
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)
        self._ready.set()  # waiters still waiting for the listener see the close

    # -- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed or self._queue._closed:
            raise QueueClosedError(f"{self._queue!r} was closed while waiting for a result")

    def _add(self, message_id: str, future: asyncio.Future[bytes]) -> None:
        self._waiters.setdefault(message_id, set()).add(future)
        self._by_token.setdefault(notify_token(message_id), set()).add(message_id)

    def _discard(self, message_id: str, future: asyncio.Future[bytes]) -> None:
        futures = self._waiters.get(message_id)
        if futures is None:
            return
        futures.discard(future)
        if not futures:
            del self._waiters[message_id]
            token = notify_token(message_id)
            ids = self._by_token.get(token)
            if ids is not None:
                ids.discard(message_id)
                if not ids:
                    del self._by_token[token]

    def _start(self) -> asyncio.Event:
        self._check_open()
        if self._task is None:
            self._ready = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name=f"result listener {self._name}")
        return self._ready

    async def _get(self, key: str) -> bytes | None:
        try:
            body = await self._queue._raw.call("wait result", "GET", key)
        except BackendError as exc:
            if self._closed or self._queue._closed:
                raise QueueClosedError(
                    f"{self._queue!r} was closed while waiting for a result"
                ) from exc
            raise
        self._check_open()
        return body if isinstance(body, bytes) else None

    async def _run(self) -> None:
        position: str | None = None
        recheck = False
        backoff = _RETRY_FIRST_SECONDS
        try:
            while True:
                try:
                    if position is None:
                        position = await self._tail()
                        self._ready.set()
                    if recheck:
                        self.rechecks += 1
                        await self._wake(list(self._waiters))
                        recheck = False
                    entries = await self._read(position)
                except BackendError as exc:
                    self.failures += 1
                    level = logging.WARNING if backoff >= _RETRY_MAX_SECONDS else logging.DEBUG
                    _log.log(level, "%r: result listener read failed: %s", self._queue, exc)
                    recheck = True
                    await asyncio.sleep(backoff)
                    backoff = min(_RETRY_MAX_SECONDS, backoff * 2)
                    if not self._waiters:
                        return
                    continue
                backoff = _RETRY_FIRST_SECONDS
                if entries:
                    position = entries[-1][0]
                    # A full read may have been overtaken by trimming: look at everything.
                    recheck = len(entries) >= NOTIFY_CAP
                    ids = self._named(entries)
                    if ids and not recheck:
                        try:
                            await self._wake(ids)
                        except BackendError as exc:
                            _log.debug("%r: result listener MGET failed: %s", self._queue, exc)
                            recheck = True
                if not self._waiters:
                    # Idle: end here, with no await between this check and the reset,
                    # so the next waiter starts a new listener (and a new position).
                    return
        except Exception as exc:
            # A bug, not an outage: hand it to every waiter instead of leaving them to
            # their timeouts (the next wait starts a new listener).
            _log.exception("%r: result listener failed", self._queue)
            error = BackendError(f"result listener failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            for futures in self._waiters.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(error)
            self._ready.set()
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    def _named(self, entries: list[tuple[str, object]]) -> list[str]:
        ids: set[str] = set()
        for _, fields in entries:
            if not isinstance(fields, list):
                continue
            for value in fields[1::2]:
                if isinstance(value, bytes):
                    found = self._by_token.get(value.decode("utf-8", "surrogateescape"))
                    if found:
                        ids.update(found)
        return list(ids)

    async def _tail(self) -> str:
        """The id of the newest notification, or 0-0: the listener reads after it."""
        reply = await self._queue._raw.call(
            "result listener", "XREVRANGE", self._queue.keys.done, "+", "-", "COUNT", 1
        )
        if not reply:
            return "0-0"
        first = reply[0][0]
        return first.decode() if isinstance(first, bytes) else str(first)

    async def _read(self, position: str) -> list[tuple[str, object]]:
        block_ms = max(1, round(LISTEN_BLOCK_SECONDS * 1000))
        xread: tuple[Arg, ...] = (
            "XREAD",
            "COUNT",
            NOTIFY_CAP,
            "BLOCK",
            block_ms,
            "STREAMS",
            self._queue.keys.done,
            position,
        )
        # The name is set and restored in the same write, no round trip of its own; a
        # server that refuses CLIENT (ACL) just answers with errors we ignore.
        replies = await self._queue._raw.pipeline(
            "result listener",
            [("CLIENT", "SETNAME", self._name), xread, ("CLIENT", "SETNAME", self._pool_name)],
            read_timeout=LISTEN_BLOCK_SECONDS + _READ_MARGIN_SECONDS,
        )
        reply = replies[1]
        if isinstance(reply, Exception):
            with translate_errors("result listener"):
                raise reply
        entries, _ = _stream_entries(reply)
        return entries

    async def _wake(self, ids: Sequence[str]) -> None:
        """Read the keys of `ids` and hand each body found to its waiters."""
        keys = self._queue.keys
        for start in range(0, len(ids), _MGET_CHUNK):
            chunk = ids[start : start + _MGET_CHUNK]
            command: list[Arg] = ["MGET", *(keys.result(i) for i in chunk)]
            bodies: Any = await self._queue._raw.call("result listener", *command)
            for message_id, body in zip(chunk, bodies, strict=True):
                if not isinstance(body, bytes):
                    continue
                for future in self._waiters.get(message_id, ()):
                    if not future.done():
                        future.set_result(body)


class ResultsMixin(QueueBase):
    """The `ResultStore` part: results as string keys with PX in the queue's slot."""

    # Built lazily: it holds asyncio objects, which belong to the running loop.
    _listener: ResultListener | None

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result under its message id for its TTL (server clock, ms rounded up).

        One round trip per call: one script per `RESULTS_BATCH` results, all sent in
        one write. Each result is ``SET <prefix>r:<id> <body> PX <ttl>`` (a later
        write of an id, in this batch or after, replaces the body and restarts the
        TTL), an entry in the ``results`` index (so delete_queue finds it) and one
        XADD per script naming the ids on the ``done`` stream, which wakes waiters.
        Ids are stored as given, whatever their text: the key's hash tag is the
        queue's, always.

        Raises:
            TypeError: `results` is a single `ResultWrite`, an item is not one, a
                message id is no str, a body is not `bytes` or a TTL no number.
            ValueError: A TTL is <= 0 or not finite, or a message id is empty or not
                encodable as UTF-8; nothing is sent.
            BackendUnavailableError: The server could not be reached; some of the
                results may have been stored.
        """
        items = self.check_results(results)
        await self._ready()
        if not items:
            return
        keys = self._keys
        calls = []
        for start in range(0, len(items), RESULTS_BATCH):
            chunk = items[start : start + RESULTS_BATCH]
            call_keys = [keys.results, keys.done, *(keys.result(i) for i, _, _ in chunk)]
            args: list[Arg] = ["put", NOTIFY_CAP]
            for item in chunk:
                args.extend(item)
            calls.append((call_keys, args))
        await self._batched("put results", "results", calls)

    def check_results(self, results: Sequence[ResultWrite]) -> list[tuple[str, int, bytes]]:
        """What `put_results` would send: (id, TTL ms, body) each; raises as it does."""
        items: list[tuple[str, int, bytes]] = []
        for write in check_result_writes(results):
            ttl_ms = _milliseconds("ttl_seconds", write.ttl_seconds, positive=True)
            items.append((write.message_id, ttl_ms, write.body))
        return items

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, in order; None where there is none or it expired.

        One MGET (one round trip) whatever the number of ids. An id that could never
        have been stored (empty, not encodable) is None without being sent.

        Raises:
            TypeError: `message_ids` is a single string, or holds something else.
        """
        ids = _result_ids(message_ids)
        await self._ready()
        sendable = [i for i in ids if i is not None]
        if not sendable:
            return [None] * len(ids)
        reply = await self._raw.call("get results", "MGET", *map(self._keys.result, sendable))
        found = iter(reply)
        bodies: list[bytes | None] = []
        for i in ids:
            body = None if i is None else next(found)
            bodies.append(body if isinstance(body, bytes) else None)
        return bodies

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        """The body of `message_id`'s result, waiting up to `timeout_seconds` for it.

        Returns at once when it is stored (one GET). Otherwise the wait registers with the
        handle's one result listener (a task reading the ``done`` stream with a
        blocking XREAD; see `taskrunner_backends.redis.results`), which wakes it when a
        put names the id: no polling, and any number of concurrent waits of one handle
        share one blocking connection (plus at most
        `~taskrunner_backends.redis.results.CHECK_CONCURRENCY` for their first look at
        the key). The timeout runs on the event loop's clock; on an idle server a
        result stored meanwhile is returned within a few milliseconds.

        Returns:
            The body, or None when none was stored by the timeout (never before it).

        Raises:
            TypeError: `message_id` is no str or `timeout_seconds` no number.
            ValueError: `timeout_seconds` < 0 or not finite, or `message_id` empty.
            QueueClosedError: The queue is or became closed while waiting.
            BackendUnavailableError: The server could not be reached for the first
                look at the key (the listener itself retries until the timeout).
        """
        check_text("message_id", message_id)
        _milliseconds("timeout_seconds", timeout_seconds, positive=False)
        await self._ready()
        key = self._keys.result(message_id)
        if timeout_seconds == 0:
            body = await self._raw.call("wait result", "GET", key)
            return body if isinstance(body, bytes) else None
        # initialize() may have awaited the server while aclose ran.
        self._check_open()
        if self._listener is None:
            self._listener = ResultListener(
                self, f"taskrunner-results:{self._keys.namespace}:{self._keys.queue_name}"
            )
        return await self._listener.wait(message_id, key, timeout_seconds)

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        """Delete the results of `message_ids`; returns how many existed.

        One round trip (a script per `RESULTS_BATCH` ids). A duplicated id counts once.

        Raises:
            TypeError: `message_ids` is a single string, or holds something else.
        """
        ids = [i for i in _result_ids(message_ids) if i is not None]
        await self._ready()
        if not ids:
            return 0
        keys = self._keys
        calls: list[tuple[Sequence[str], Sequence[Arg]]] = []
        for start in range(0, len(ids), RESULTS_BATCH):
            chunk = ids[start : start + RESULTS_BATCH]
            args: list[Arg] = ["delete", 0, *chunk]
            calls.append(([keys.results, keys.done, *map(keys.result, chunk)], args))
        replies = await self._batched("delete results", "results", calls)
        return sum(_as_int(reply) for reply in replies)

    @property
    def result_listener(self) -> ResultListener | None:
        """The handle's result listener, once a `wait_result` has needed one (for tests)."""
        return self._listener


def _result_ids(message_ids: Sequence[str]) -> list[str | None]:
    """`message_ids` with None for each id no result can be stored under."""
    ids: list[str | None] = []
    for message_id in check_ids(message_ids):
        try:
            message_id.encode("utf-8")
        except UnicodeEncodeError:
            ids.append(None)
            continue
        ids.append(message_id or None)
    return ids
