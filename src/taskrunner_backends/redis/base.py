"""`QueueBase`: the state and the shared calls of `RedisStreamsQueue`'s parts.

Initialisation (version check, feature detection, script loading), the consumer group
(created at id 0 on first use, recreated when it vanished) and running scripts with a
reload after SCRIPT FLUSH or a restart live here, so that no part imports another part.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Literal

import redis.asyncio as aioredis

from taskrunner.clock import Clock
from taskrunner.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    QueueClosedError,
)

from .client import Arg, RawClient, is_no_script
from .errors import GroupMissingError, credentials_refused, translate_errors
from .keys import QueueKeys
from .scripts import SCRIPTS
from .server import ServerInfo, _parse_info, check_server

__all__ = ["Durability", "QueueBase"]

_log = logging.getLogger("taskrunner_backends.redis")

#: What the ``durable`` option accepts: "" (off), "replica" (WAIT) or "aof" (WAITAOF).
Durability = Literal["", "replica", "aof"]


class QueueBase:
    """What every part of `RedisStreamsQueue` shares: its state and the calls they all make.

    The parts (`receiving`, `fencing`, `adding`, `admin`, ...) are mixins of this class;
    `RedisStreamsQueue` composes them and sets the state below in its ``__init__``.
    """

    _keys: QueueKeys
    _client: aioredis.Redis
    # A shard of a partitioned queue gets its cluster slot's client.
    _raw: RawClient
    _clock: Clock
    _owns_client: bool
    _display: str
    _durable: Durability
    _closed: bool
    _initialized: bool
    _init_lock: asyncio.Lock
    _server: ServerInfo | None
    _has_xackdel: bool
    # Whether this handle created (or found) the group: a later NOGROUP means it
    # was deleted underneath, which is worth a warning; a first one is not.
    _group_created: bool
    # The priorities above 0 this handle knows to have a stream, highest first; learned
    # from its own adds and from script replies. While empty, a receive reads the
    # priority-0 stream directly, as a queue without priorities always does.
    _levels: tuple[int, ...]
    # Aging of priorities, in ms (0: strict).
    _aging_ms: int

    def _learn_levels(self, levels: object) -> None:
        """Record the levels named by a script reply (``b"5,9"``) or an add (ints)."""
        if isinstance(levels, bytes):
            found = {int(level) for level in levels.split(b",") if level}
        elif isinstance(levels, str):
            found = {int(level) for level in levels.split(",") if level}
        else:
            assert isinstance(levels, (set, frozenset, tuple, list))
            found = {int(level) for level in levels}
        found.discard(0)
        if not found <= set(self._levels):
            self._levels = tuple(sorted(found | set(self._levels), reverse=True))

    @property
    def keys(self) -> QueueKeys:
        """The Redis keys of this queue."""
        return self._keys

    @property
    def server(self) -> ServerInfo | None:
        """The server found by `initialize`, None before it ran."""
        return self._server

    @property
    def has_xackdel(self) -> bool:
        """Whether the server has XACKDEL (found by `initialize`)."""
        return self._has_xackdel

    # -- lifecycle ---------------------------------------------------------------------

    async def initialize(self) -> None:
        """Check the server, detect optional commands, load the scripts; idempotent.

        Nothing is created here: the stream appears with the first `add`, the consumer
        group with the first `receive` or `reclaim` (at id 0, so a backlog added
        before it is delivered). Opening a queue only to inspect it leaves no key.

        Raises:
            UnsupportedServerError: Redis older than 7.0 or Valkey older than 7.2.
            ConfigurationError: ``durable="aof"`` on a server without WAITAOF.
            BackendUnavailableError: The server could not be reached; the next call
                tries again.
            QueueClosedError: The queue was closed.
        """
        self._check_open()
        async with self._init_lock:
            if self._initialized:
                return
            try:
                raw_info = await self._raw.call("INFO server", "INFO", "server")
            except BackendError as exc:
                # The first command: where a missing or wrong password shows.
                options = self._raw.connection_kwargs()
                refused = credentials_refused(
                    exc, self._display, options.get("username"), bool(options.get("password"))
                )
                if refused is exc:
                    raise
                raise refused from exc.__cause__
            self._server = check_server(_parse_info(raw_info))
            self._has_xackdel = await self._supports("XACKDEL")
            if self._durable == "aof" and not await self._supports("WAITAOF"):
                raise ConfigurationError(
                    f"durable=aof needs WAITAOF, which {self._server} does not have "
                    "(Redis or Valkey >= 7.2); use durable=replica (WAIT) instead",
                    setting="durable",
                )
            # Loading up front keeps the first real calls at one round trip each.
            await self._raw.pipeline(
                "SCRIPT LOAD", [("SCRIPT", "LOAD", s.source) for s in SCRIPTS.values()]
            )
            self._initialized = True
            _log.debug("opened %r on %s (XACKDEL: %s)", self, self._server, self._has_xackdel)

    # -- shared internals ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"{self!r} was closed")

    async def _ready(self) -> None:
        self._check_open()
        if not self._initialized:
            await self.initialize()

    async def _supports(self, command: str) -> bool:
        try:
            reply = await self._raw.call("COMMAND INFO", "COMMAND", "INFO", command)
        except BackendUnavailableError:
            raise
        except BackendError:
            # COMMAND may be renamed or forbidden by ACL; assume the baseline.
            return False
        return bool(reply) and reply[0] is not None

    def _group_missing(self, action: str) -> None:
        if self._group_created:
            _log.warning("%r: consumer group missing during %s; recreating it", self, action)
        else:
            _log.debug("%r: creating the consumer group (first %s)", self, action)

    async def _create_group(self) -> None:
        keys = self._keys
        # At 0, never $: $ would skip every message added before the group existed. The
        # doorbell's group goes with it (a ring from before only wakes one read early).
        replies = await self._raw.pipeline(
            "create group",
            [
                ("XGROUP", "CREATE", keys.stream, keys.group, "0", "MKSTREAM"),
                ("XGROUP", "CREATE", keys.bell, keys.group, "0", "MKSTREAM"),
            ],
        )
        for reply in replies:
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                with translate_errors("create group"):
                    raise reply
        self._group_created = True

    async def _script(
        self, action: str, name: str, keys: Sequence[str], args: Sequence[Arg]
    ) -> Any:
        try:
            return await self._raw.run_script(action, SCRIPTS[name], keys, args)
        except GroupMissingError:
            # First use of the queue by a worker, or the stream or group was deleted
            # (FLUSHDB, DEL, eviction): create it at 0.
            self._group_missing(action)
            await self._create_group()
            try:
                return await self._raw.run_script(action, SCRIPTS[name], keys, args)
            except GroupMissingError as exc:
                raise BackendError(f"{action}: consumer group keeps disappearing") from exc

    async def _batched(
        self, action: str, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Arg]]]
    ) -> list[Any]:
        """Run script `name` once per (keys, args) in one round trip; the replies, in order.

        Raises the first error reply (translated) after reloading a forgotten script.
        """
        script = SCRIPTS[name]
        commands = [("EVALSHA", script.sha, len(k), *k, *a) for k, a in calls]
        replies = await self._raw.pipeline(action, commands)
        if any(is_no_script(reply) for reply in replies):
            # The server restarted or SCRIPT FLUSH ran: nothing of those calls ran.
            await self._raw.call(action, "SCRIPT", "LOAD", script.source)
            again = [i for i, reply in enumerate(replies) if is_no_script(reply)]
            rerun = await self._raw.pipeline(action, [commands[i] for i in again])
            for i, reply in zip(again, rerun, strict=True):
                replies[i] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                with translate_errors(action):
                    raise reply
        return replies
