"""The worker registry (`WorkerRegistry`): one hash of live worker entries per queue.

Worker registry. ``publish_worker`` writes one field per worker process into the hash
``workers`` (see `keys`), its value carrying an expiry time taken from the server's
``TIME``; ``live_workers`` prunes expired fields in the same script and returns the
rest. No KEYS or SCAN: one small hash per queue, which itself expires when its
longest-lived entry does.
"""

from __future__ import annotations

import logging
import math

import msgspec

from taskrunner.queue import WorkerInfo

from .arguments import _check_consumer
from .base import QueueBase
from .scripts import SCRIPTS

__all__ = ["WorkersMixin"]

_log = logging.getLogger("taskrunner_backends.redis")


class _RegistryEntry(msgspec.Struct, frozen=True):
    """A worker-registry value as ``lua/workers.lua`` writes it."""

    expires_ms: int
    info: WorkerInfo


_REGISTRY_DECODER = msgspec.json.Decoder(_RegistryEntry)
_INFO_ENCODER = msgspec.json.Encoder()


class WorkersMixin(QueueBase):
    """The worker registry: one hash of worker entries per queue."""

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        """Create or refresh `info.instance`'s entry, listed for `ttl_seconds` from now.

        The expiry is computed on the server's clock. Expired entries of other
        instances are pruned in the same script.

        Raises:
            TypeError: `info` is not a `WorkerInfo`.
            ValueError: `ttl_seconds` <= 0 or the instance name is empty.
        """
        if not isinstance(info, WorkerInfo):
            raise TypeError(f"info must be a WorkerInfo, not {type(info).__name__}")
        if not ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be > 0, got {ttl_seconds}")
        _check_consumer(info.instance)
        await self._ready()
        await self._raw.run_script(
            "publish worker",
            SCRIPTS["workers"],
            (self._keys.workers,),
            ("publish", info.instance, math.ceil(ttl_seconds * 1000), _INFO_ENCODER.encode(info)),
        )

    async def remove_worker(self, instance: str) -> None:
        """Remove `instance`'s entry (at shutdown); idempotent."""
        _check_consumer(instance)
        await self._ready()
        await self._raw.call("remove worker", "HDEL", self._keys.workers, instance)

    async def live_workers(self) -> list[WorkerInfo]:
        """Entries refreshed within their TTL (server clock); expired ones are pruned.

        An entry that cannot be decoded (written by something else) is skipped.
        """
        await self._ready()
        reply = await self._raw.run_script(
            "list workers", SCRIPTS["workers"], (self._keys.workers,), ("live",)
        )
        workers = []
        for value in reply or ():
            try:
                workers.append(_REGISTRY_DECODER.decode(value).info)
            except (msgspec.DecodeError, TypeError):
                _log.warning("%r: skipping an unreadable worker registry entry", self)
        return workers
