"""A blocking `add` for `taskrunner.SyncProducer`'s plain dispatches (internal).

Why: a plain dispatch through the SyncProducer's loop thread costs the async client's
per-command overhead plus two thread wake-ups, several times a redis-py ``XADD``. This
sends the same pipelined ``XADD``s as `AddingMixin.add` from the calling thread, on a
thread-safe redis-py (sync) pool of its own, so a dispatch is one round trip on the
caller's thread and threads dispatching at once each use a connection.

Only a plain `RedisStreamsQueue` without durable enqueue is served (delayed, unique
and partitioned adds, durable adds and Redis Cluster go through the loop). The
SyncProducer finds this module beside its queue's (``<package>.sync_add``) and calls
`sync_adder` once, after the queue is open (so the server was checked).

Fork: redis-py's sync pool notices a new pid and makes new connections in the child;
a connection inherited from the parent is shut down only by the process that made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
import redis.backoff
import redis.retry

from taskrunner.errors import BackendUnavailableError, QueueClosedError

from .client import pack_commands
from .errors import translate_errors
from .queue import (
    DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
    DEFAULT_SOCKET_TIMEOUT_SECONDS,
    RedisStreamsQueue,
)
from .url import split_url

__all__ = ["SyncAdder", "sync_adder"]

_SINGLE_NODE_SCHEMES = ("redis", "rediss", "unix")


class SyncAdder:
    """Blocking pipelined ``XADD``s onto one queue's stream; thread-safe and fork-aware."""

    def __init__(self, client: redis.Redis, stream: str) -> None:
        self._client = client
        self._stream = stream.encode()
        self._closed = False

    def add(self, bodies: Sequence[bytes]) -> list[str]:
        """`AddingMixin.add`, blocking: one round trip, the stream entry ids in order.

        Raises:
            TypeError: A body is not `bytes`.
            QueueClosedError: `close` was called.
            BackendUnavailableError: The server could not be reached; some bodies may
                have been added.
        """
        for body in bodies:
            if not isinstance(body, bytes):
                raise TypeError(f"message body must be bytes, not {type(body).__name__}")
        if not bodies:
            return []
        if self._closed:
            # A caller that raced the SyncProducer's close: never reopen the pool.
            raise QueueClosedError("this SyncProducer was closed")
        packed = pack_commands([(b"XADD", self._stream, b"*", b"b", body) for body in bodies])
        pool = self._client.connection_pool
        with translate_errors("add"):
            connection: Any = pool.get_connection()
            try:
                connection.send_packed_command([packed])
                replies = [connection.read_response(disable_decoding=True) for _ in bodies]
            except BaseException:
                # A reply left unread must never be read as another command's answer.
                connection.disconnect()
                raise
            finally:
                pool.release(connection)
        ids = []
        for reply in replies:
            if isinstance(reply, Exception):
                with translate_errors("add"):
                    raise reply
            if not isinstance(reply, bytes):
                raise BackendUnavailableError(f"add: unexpected reply to XADD: {reply!r}")
            ids.append(reply.decode())
        return ids

    def close(self) -> None:
        """Close the pool's connections (of this process); later adds raise QueueClosedError."""
        self._closed = True
        self._client.close()


def sync_adder(queue: object, url: str) -> SyncAdder | None:
    """A `SyncAdder` for `queue` opened from `url`, or None where it would not be the same.

    None for anything but a plain `RedisStreamsQueue` (a partitioned one spreads its
    adds), and for durable enqueue (its ``WAIT`` stays in one place, the async add).
    """
    if type(queue) is not RedisStreamsQueue or queue._durable:
        return None
    if url.partition(":")[0].lower() not in _SINGLE_NODE_SCHEMES:
        return None  # a cluster URL, even of one shard: its slot's node may move
    redis_url, _ = split_url(url)
    client = redis.Redis.from_url(
        redis_url,
        socket_timeout=DEFAULT_SOCKET_TIMEOUT_SECONDS,
        socket_connect_timeout=DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
        # An XADD is not idempotent: never resent behind the caller's back.
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
    )
    return SyncAdder(client, queue.keys.stream)
