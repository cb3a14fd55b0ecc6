"""`SlotClient`: the raw command layer bound to one hash slot of a Redis Cluster (internal).

Every key of one shard of a partitioned queue shares a hash tag, so every command the
shard sends (keyless ones included: INFO, SCRIPT LOAD, CLIENT ID) belongs on the master
serving that one slot. This client asks redis-py's cluster client which node that is
(its slots cache), borrows a connection of that node, and otherwise sends and reads
exactly like `RawClient` (raw replies, per-call read timeouts, no hidden retries).

Topology changes are redis-py's: its nodes manager keeps the slots cache.

* ``MOVED`` (the slot has a new master: failover or resharding) updates the cache
  through ``NodesManager.move_slot`` and resends the commands that were refused (a
  refused command did not run, so resending it is safe, fenced or not);
* ``ASK`` (the slot is being migrated and this key is already on the target) resends
  the refused command to the target, preceded by ``ASKING`` on the same connection;
* a lost connection, ``CLUSTERDOWN`` or an uncovered slot marks the cluster client for
  re-initialisation (``CLUSTER SLOTS`` again on the next call) and raises
  `BackendUnavailableError`, since a command that may have run is never resent here:
  the runner's loops back off and retry, as after any outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis.exceptions as rx
from redis.asyncio.cluster import ClusterNode, RedisCluster

from taskrunner.errors import BackendError, BackendUnavailableError

from .client import Arg, RawClient
from .errors import translate_errors

__all__ = ["MAX_REDIRECTS", "SlotClient"]

# How many MOVED/ASK rounds one call follows before it gives up as unavailable: a slot
# moves once per failover or migration step, so more means the topology is in flux.
MAX_REDIRECTS = 5


class SlotClient(RawClient):
    """A `RawClient` whose commands all go to the master of hash slot `slot` of `cluster`."""

    def __init__(self, cluster: RedisCluster, slot: int) -> None:
        # Deliberately not RawClient.__init__: there is no single pool to borrow from.
        self.client = cluster  # type: ignore[assignment]
        self._cluster = cluster
        self.slot = slot
        self._owners: dict[int, ClusterNode] = {}
        self._asking: ClusterNode | None = None

    def connection_kwargs(self) -> dict[str, Any]:
        """The options the cluster client makes node connections with."""
        return dict(self._cluster.nodes_manager.connection_kwargs)

    async def _node(self) -> ClusterNode:
        with translate_errors("cluster topology"):
            try:
                await self._cluster.initialize()
                return self._cluster.nodes_manager.get_node_from_slot(self.slot)
            except rx.RedisClusterException as exc:
                self._cluster._initialize = True
                raise BackendUnavailableError(f"cluster topology: {exc}") from exc

    async def _acquire(self) -> Any:
        node = self._asking if self._asking is not None else await self._node()
        with translate_errors("connect"):
            connection = node.acquire_connection()
        self._owners[id(connection)] = node
        return connection

    async def _release(self, connection: Any) -> None:
        node = self._owners.pop(id(connection), None)
        if node is not None:
            node.release(connection)

    async def _call_beside(self, connection: Any, action: str, *args: Arg) -> Any:
        node = self._owners.get(id(connection))
        if node is None:
            return None
        previous, self._asking = self._asking, node
        try:
            return await RawClient.call(self, action, *args)
        finally:
            self._asking = previous

    async def call_unblocked_after(
        self,
        action: str,
        args: Sequence[Arg],
        *,
        read_timeout: float,
        unblock_after: float | None,
        stop: asyncio.Event | None = None,
    ) -> Any:
        """Like `RawClient.call_unblocked_after`, following MOVED (a blocked read ran nowhere)."""
        for _ in range(MAX_REDIRECTS + 1):
            try:
                return await RawClient.call_unblocked_after(
                    self,
                    action,
                    args,
                    read_timeout=read_timeout,
                    unblock_after=unblock_after,
                    stop=stop,
                )
            except BackendUnavailableError:
                self._cluster._initialize = True
                raise
            except BackendError as exc:
                cause = exc.__cause__
                if isinstance(cause, rx.MovedError):
                    await self._cluster.nodes_manager.move_slot(cause)
                    continue
                if isinstance(cause, rx.AskError):
                    # Mid-migration: the next receive, a plain pipeline, follows the ASK.
                    raise BackendUnavailableError(
                        f"{action}: slot {self.slot} is migrating"
                    ) from exc
                raise
        raise BackendUnavailableError(
            f"{action}: slot {self.slot} was redirected more than {MAX_REDIRECTS} times"
        )

    async def pipeline(
        self, action: str, commands: Sequence[Sequence[Arg]], *, read_timeout: float | None = None
    ) -> list[Any]:
        """Like `RawClient.pipeline`, following MOVED and ASK for the refused commands."""
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        ask: ClusterNode | None = None
        for _ in range(MAX_REDIRECTS + 1):
            batch: list[Sequence[Arg]] = []
            for i in todo:
                if ask is not None:
                    batch.append(("ASKING",))
                batch.append(commands[i])
            self._asking = ask
            try:
                got = await RawClient.pipeline(self, action, batch, read_timeout=read_timeout)
            except BackendUnavailableError:
                # The node may be gone for good (failover): ask the cluster again next time.
                self._cluster._initialize = True
                raise
            finally:
                self._asking = None
            if ask is not None:
                got = got[1::2]  # the OK of each ASKING
            redo: list[int] = []
            ask = None
            for i, reply in zip(todo, got, strict=True):
                if isinstance(reply, rx.MovedError):
                    await self._cluster.nodes_manager.move_slot(reply)
                    redo.append(i)
                elif isinstance(reply, rx.AskError):
                    ask = self._cluster.nodes_manager.get_node(host=reply.host, port=reply.port)
                    if ask is None:
                        ask = ClusterNode(
                            reply.host, reply.port, **self._cluster.nodes_manager.connection_kwargs
                        )
                    redo.append(i)
                else:
                    if isinstance(reply, rx.ClusterDownError):
                        self._cluster._initialize = True
                    replies[i] = reply
            if not redo:
                return replies
            todo = redo
        raise BackendUnavailableError(
            f"{action}: slot {self.slot} was redirected more than {MAX_REDIRECTS} times"
        )
