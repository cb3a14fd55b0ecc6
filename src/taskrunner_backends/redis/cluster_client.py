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
* a lost connection, ``CLUSTERDOWN`` or an uncovered slot marks this shard's slot map
  stale (`Topology`: ``CLUSTER SLOTS`` again before its next call) and raises
  `BackendUnavailableError`, since a command that may have run is never resent here:
  the runner's loops back off and retry, as after any outage.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import redis.exceptions as rx
from redis.asyncio.cluster import ClusterNode, RedisCluster

from taskrunner.errors import BackendError, BackendUnavailableError

from .client import Arg, RawClient
from .errors import translate_errors

__all__ = ["MAX_REDIRECTS", "MIN_REFRESH_SECONDS", "SlotClient", "Topology"]

# Shortest time between two slot-map refreshes after failures (seconds): a dead master
# makes every call of its shard fail until its replica is promoted, and each would
# otherwise ask the cluster again.
MIN_REFRESH_SECONDS = 0.25

# How many MOVED/ASK rounds one call follows before it gives up as unavailable: a slot
# moves once per failover or migration step, so more means the topology is in flux.
MAX_REDIRECTS = 5

# The node one call must use instead of the slot's master (an ASK target, or the server
# a blocked connection is on): per call, not per client, since many calls of one shard
# run at once (a receive, the acker, the heartbeats) and must not see each other's.
_TARGET: ContextVar[ClusterNode | None] = ContextVar("taskrunner_slot_target", default=None)


class Topology:
    """The slot map of one cluster client, shared by the `SlotClient` of every shard.

    The first use runs redis-py's full initialisation. A refresh after a failure reads
    only the slot map (``NodesManager.initialize``: ``CLUSTER SLOTS`` from the first
    startup node that answers, failed nodes tried last), and at most once per
    `MIN_REFRESH_SECONDS`. Not ``RedisCluster.initialize`` again: it also sends
    ``COMMAND`` to the default node, the master of slot 0, so while that one master
    was down every shard failed, not only the one it served.
    """

    def __init__(self, cluster: RedisCluster) -> None:
        self.cluster = cluster
        self._lock: asyncio.Lock | None = None
        self._refreshed_at = -math.inf

    async def ready(self) -> None:
        """Initialise the cluster client on first use."""
        if not self.cluster._initialize:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self.cluster.initialize()

    async def refresh(self) -> None:
        """Read the slot map again, unless another shard did so a moment ago."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            now = asyncio.get_running_loop().time()
            if now - self._refreshed_at < MIN_REFRESH_SECONDS:
                return
            self._refreshed_at = now
            await self.cluster.nodes_manager.initialize()

    def failed(self, node: ClusterNode) -> None:
        """`node` could not be reached: try it last when refreshing the slot map."""
        move = getattr(self.cluster.nodes_manager, "move_node_to_end_of_cached_nodes", None)
        if move is not None:
            move(node.name)


class SlotClient(RawClient):
    """A `RawClient` whose commands all go to the master of hash slot `slot` of a cluster."""

    def __init__(self, topology: Topology, slot: int) -> None:
        # Deliberately not RawClient.__init__: there is no single pool to borrow from.
        self.client = topology.cluster  # type: ignore[assignment]
        self._cluster = topology.cluster
        self._topology = topology
        self.slot = slot
        self._owners: dict[int, ClusterNode] = {}
        # This shard's node failed: refresh the slot map before its next command.
        self._stale = False
        self._last_node: ClusterNode | None = None

    def connection_kwargs(self) -> dict[str, Any]:
        """The options the cluster client makes node connections with."""
        return dict(self._cluster.nodes_manager.connection_kwargs)

    async def _node(self) -> ClusterNode:
        with translate_errors("cluster topology"):
            try:
                await self._topology.ready()
                if self._stale:
                    await self._topology.refresh()
                    self._stale = False
                node = self._cluster.nodes_manager.get_node_from_slot(self.slot)
            except rx.RedisClusterException as exc:
                raise BackendUnavailableError(f"cluster topology: {exc}") from exc
        self._last_node = node
        return node

    def _lost(self) -> None:
        """The node of this slot failed: ask the cluster where the slot is before next use."""
        self._stale = True
        if self._last_node is not None:
            self._topology.failed(self._last_node)

    async def _acquire(self) -> Any:
        node = _TARGET.get() or await self._node()
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
        token = _TARGET.set(node)
        try:
            return await RawClient.call(self, action, *args)
        finally:
            _TARGET.reset(token)

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
                self._lost()
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
            # Without an ASK the caller's target stands (`_call_beside` sends through here).
            token = None if ask is None else _TARGET.set(ask)
            try:
                got = await RawClient.pipeline(self, action, batch, read_timeout=read_timeout)
            except BackendUnavailableError:
                # The node may be gone for good (failover): ask the cluster again next time.
                self._lost()
                raise
            finally:
                if token is not None:
                    _TARGET.reset(token)
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
                        self._lost()
                    replies[i] = reply
            if not redo:
                return replies
            todo = redo
        raise BackendUnavailableError(
            f"{action}: slot {self.slot} was redirected more than {MAX_REDIRECTS} times"
        )
