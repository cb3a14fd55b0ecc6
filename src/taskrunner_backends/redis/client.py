"""A thin command layer over a redis-py asyncio connection pool (internal).

Why not ``client.execute_command``: redis-py post-processes replies with per-command
callbacks whose output depends on the client's protocol (RESP2/RESP3),
``decode_responses`` and ``legacy_responses`` settings, drops duplicate stream fields
into dicts, and retries failed commands on its own. This backend needs the raw
reply (bytes, every field), per-call read timeouts longer than a ``BLOCK``, and no
hidden retries of non-idempotent commands. So it borrows a connection from the
client's pool, sends the command and reads the raw reply itself.

redis-py writes through ``asyncio.wait_for`` when a socket timeout is set (its default
since 8.0), and on Python 3.11 ``wait_for`` swallows a cancellation that arrives just
as the write completes; `RawClient.pipeline` delivers such a cancellation, so a
cancelled loop of the runner really stops.

A connection whose reply was not read completely (error, timeout or cancellation)
is disconnected before it goes back to the pool, so a late reply can never be read
as the answer to another command.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rx

from taskrunner.errors import BackendError

from .errors import translate_errors
from .scripts import Script

__all__ = ["Arg", "RawClient", "is_no_script", "pack_commands"]

Arg = str | bytes | int | float


def _encode(arg: Arg) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, int) and not isinstance(arg, bool):
        return b"%d" % arg
    if isinstance(arg, float):
        return repr(arg).encode()
    raise TypeError(f"invalid command argument of type {type(arg).__name__}")


def pack_commands(commands: Sequence[Sequence[Arg]]) -> bytes:
    """The RESP encoding of `commands`, ready to write in one go.

    redis-py's packer costs a few microseconds per argument; a fenced batch of 500
    deliveries has 3000 arguments, which made packing the largest client-side cost
    of an ack. This builds the same bytes with one join.
    """
    parts: list[bytes] = []
    append = parts.append
    for command in commands:
        append(b"*%d\r\n" % len(command))
        for arg in command:
            # The common types inline, one piece per argument: half the cost of a call
            # to _encode and three appends each (a fenced ack of 100 has 600 arguments).
            kind = type(arg)
            # (No typing.cast here: it is a call at run time.)
            if kind is str:
                data = arg.encode()  # type: ignore[union-attr]
            elif kind is bytes:
                data = arg
            elif kind is int:
                data = b"%d" % arg  # type: ignore[str-format]
            else:
                data = _encode(arg)
            append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class RawClient:
    """Sends commands over connections of `client`'s pool and returns raw replies."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self._pool = client.connection_pool
        # redis-py < 5.3 requires a command name here; later versions warn about it.
        parameters = inspect.signature(self._pool.get_connection).parameters
        command = parameters.get("command_name")
        self._legacy_get = command is not None and command.default is inspect.Parameter.empty

    async def _acquire(self) -> Any:
        """A connection to the server this client talks to (the pool's)."""
        if self._legacy_get:
            return await self._pool.get_connection("_")  # type: ignore[no-untyped-call]
        return await self._pool.get_connection()  # type: ignore[no-untyped-call]

    def connection_kwargs(self) -> dict[str, Any]:
        """The options new connections are made with (client name, timeouts, ...)."""
        return dict(self._pool.connection_kwargs)

    async def _release(self, connection: Any) -> None:
        await self._pool.release(connection)

    async def call(self, action: str, *args: Arg, read_timeout: float | None = None) -> Any:
        """Run one command; `read_timeout` (seconds) overrides the socket timeout of the read.

        Raises:
            BackendUnavailableError: Connection refused or lost, or no reply within
                `read_timeout`.
            BackendError: The server replied with an error.
        """
        replies = await self.pipeline(action, [args], read_timeout=read_timeout)
        reply = replies[0]
        if isinstance(reply, Exception):
            with translate_errors(action):
                raise reply
        return reply

    async def pipeline(
        self, action: str, commands: Sequence[Sequence[Arg]], *, read_timeout: float | None = None
    ) -> list[Any]:
        """Send `commands` in one write and read one reply each (errors are returned).

        Replies that are server errors come back as `redis.exceptions.ResponseError`
        instances in the list; connection problems raise.
        """
        with translate_errors(action):
            task = asyncio.current_task()
            before = 0 if task is None else task.cancelling()
            connection = await self._acquire()
            clean = False
            try:
                # Connecting (the handshake) and sending go through wait_for; see above.
                _deliver_swallowed_cancel(task, before)
                await connection.send_packed_command(pack_commands(commands))
                _deliver_swallowed_cancel(task, before)
                replies: list[Any] = []
                for _ in commands:
                    try:
                        if read_timeout is None:
                            reply = await connection.read_response(disable_decoding=True)
                        else:
                            # Our own deadline instead of read_response(timeout=...), which
                            # reports expiry as a None reply, indistinguishable from a
                            # BLOCK that timed out.
                            async with asyncio.timeout(read_timeout):
                                reply = await connection.read_response(
                                    disable_decoding=True, timeout=math.inf
                                )
                    except rx.ResponseError as exc:
                        reply = exc
                    replies.append(reply)
                clean = True
                return replies
            finally:
                if not clean:
                    await connection.disconnect(nowait=True)
                await self._release(connection)

    async def call_unblocked_after(
        self,
        action: str,
        args: Sequence[Arg],
        *,
        read_timeout: float,
        unblock_after: float | None,
        stop: asyncio.Event | None = None,
    ) -> Any:
        """Run one blocking command, unblocked `unblock_after` seconds after it was sent.

        With `stop`, the command is also unblocked as soon as `stop` is set (a partitioned
        receive ends its other shards' blocks once one shard delivered). With
        `unblock_after` None only `stop` unblocks it; the server ends it at its BLOCK.

        A server wakes blocked clients whose BLOCK expired only at its cron ticks (every
        100 ms at the default ``hz 10``); ``CLIENT UNBLOCK <id> TIMEOUT`` from another
        connection ends the block at once, with the reply a timeout gives. The id comes
        from ``CLIENT ID`` sent in the same write, so this costs no extra round trip
        before the block. An unblock in flight is awaited before the connection goes
        back to the pool, so it can never end another command's block. Where ``CLIENT``
        is not allowed (ACL) the command just runs to its own timeout.

        Raises:
            BackendUnavailableError: Connection refused or lost, or no reply within
                `read_timeout`.
            BackendError: The server replied with an error.
        """
        with translate_errors(action):
            task = asyncio.current_task()
            before = 0 if task is None else task.cancelling()
            connection = await self._acquire()
            clean = False
            timer: asyncio.Task[None] | None = None
            sending = asyncio.Event()
            try:
                _deliver_swallowed_cancel(task, before)
                await connection.send_packed_command(pack_commands([("CLIENT", "ID"), args]))
                _deliver_swallowed_cancel(task, before)
                async with asyncio.timeout(read_timeout):
                    try:
                        client_id = await connection.read_response(
                            disable_decoding=True, timeout=math.inf
                        )
                    except rx.ResponseError:
                        client_id = None
                    if isinstance(client_id, int):
                        timer = asyncio.create_task(
                            self._unblock_later(client_id, unblock_after, sending, stop, connection)
                        )
                    try:
                        reply = await connection.read_response(
                            disable_decoding=True, timeout=math.inf
                        )
                    except rx.ResponseError as exc:
                        reply = exc
                clean = True
            finally:
                try:
                    if timer is not None:
                        if not (clean and sending.is_set()):
                            # Not sent yet, or the connection is dropped below (its id dies).
                            timer.cancel()
                        # A sent unblock must land while this connection is still ours.
                        await asyncio.wait([timer])
                except BaseException:
                    clean = False
                    if timer is not None:
                        timer.cancel()
                    raise
                finally:
                    if not clean:
                        await connection.disconnect(nowait=True)
                    await self._release(connection)
            if isinstance(reply, Exception):
                raise reply
            return reply

    async def _unblock_later(
        self,
        client_id: int,
        delay: float | None,
        sending: asyncio.Event,
        stop: asyncio.Event | None,
        blocked: Any,
    ) -> None:
        if stop is None:
            if delay is None:
                return
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
        sending.set()
        # On failure the block ends at the server's own timeout, a cron tick later.
        with contextlib.suppress(BackendError):
            await self._call_beside(blocked, "unblock", "CLIENT", "UNBLOCK", client_id, "TIMEOUT")

    async def _call_beside(self, connection: Any, action: str, *args: Arg) -> Any:
        """Run one command on the server `connection` talks to (client ids are per server)."""
        return await self.call(action, *args)

    async def run_script(
        self, action: str, script: Script, keys: Sequence[str], args: Sequence[Arg]
    ) -> Any:
        """EVALSHA `script`, loading it first if the server does not know it (NOSCRIPT)."""
        command: list[Arg] = ["EVALSHA", script.sha, len(keys), *keys, *args]
        reply = (await self.pipeline(action, [command]))[0]
        if is_no_script(reply):
            # The server restarted or SCRIPT FLUSH ran since the script was loaded.
            await self.call(action, "SCRIPT", "LOAD", script.source)
            reply = (await self.pipeline(action, [command]))[0]
        if isinstance(reply, Exception):
            with translate_errors(action):
                raise reply
        return reply


def is_no_script(reply: object) -> bool:
    """Whether `reply` is the server's NOSCRIPT error (the script is not loaded)."""
    return isinstance(reply, rx.NoScriptError) or (
        isinstance(reply, rx.ResponseError) and str(reply).startswith("NOSCRIPT")
    )


def _deliver_swallowed_cancel(task: asyncio.Task[Any] | None, before: int) -> None:
    if task is not None and task.cancelling() > before:
        # Python 3.11's wait_for returned a result instead of raising the cancellation
        # requested meanwhile (gh-86296); raise it as the await would have.
        raise asyncio.CancelledError
