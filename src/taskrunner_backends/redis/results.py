"""The result listener: one blocking XREAD per queue handle wakes every `wait_result`.

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
from typing import TYPE_CHECKING, Any

from taskrunner.errors import BackendError, QueueClosedError

from .client import Arg
from .errors import translate_errors

if TYPE_CHECKING:
    from .queue import RedisStreamsQueue

__all__ = [
    "CHECK_CONCURRENCY",
    "LISTEN_BLOCK_SECONDS",
    "NOTIFY_CAP",
    "ResultListener",
    "notify_token",
]

_log = logging.getLogger("taskrunner_backends.redis")

# Entries the notification stream keeps at least (MAXLEN ~), and the COUNT of one read.
NOTIFY_CAP = 256

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

    def __init__(self, queue: RedisStreamsQueue, client_name: str) -> None:
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
        from .queue import _stream_entries  # queue.py imports this module

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
