"""How a `LocalCluster` judges its nodes: CLUSTER NODES, CLUSTER INFO, CLUSTER SLOTS.

The health `LocalCluster.start` and `LocalCluster.wait_until_healthy` promise (see
`local_cluster`) is checked here: every running node reports ``cluster_state:ok``
with every slot, knows every node with no failure flag, agrees on the topology, has
its replication link up, and lists every replica in CLUSTER SLOTS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .local_nodes import LocalClusterNode, Role, _Connection, _ReplyError

__all__ = ["TOTAL_SLOTS", "ClusterProbe"]

#: Hash slots of a Redis Cluster.
TOTAL_SLOTS = 16384

_COMMAND_TIMEOUT_SECONDS = 5.0

# Flags in CLUSTER NODES that mean the line's node is not (yet) a sound member.
_BAD_FLAGS = frozenset({"fail", "fail?", "handshake", "noaddr"})


@dataclass(frozen=True)
class _Line:
    """One line of CLUSTER NODES."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str
    connected: bool
    slots: tuple[tuple[int, int], ...]

    @property
    def role(self) -> Role:
        return "master" if "master" in self.flags else "replica"


def _parse_nodes(text: str) -> list[_Line]:
    lines = []
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) < 8:
            continue
        address = parts[1].split("@", 1)[0].split(",", 1)[0]
        port_text = address.rsplit(":", 1)[-1]
        slots: list[tuple[int, int]] = []
        for item in parts[8:]:
            if item.startswith("["):  # a slot being imported or migrated
                continue
            first, _, last = item.partition("-")
            slots.append((int(first), int(last or first)))
        lines.append(
            _Line(
                node_id=parts[0],
                port=int(port_text) if port_text.isdigit() else 0,
                flags=frozenset(parts[2].split(",")),
                master_id="" if parts[3] == "-" else parts[3],
                connected=parts[7] == "connected",
                slots=tuple(sorted(slots)),
            )
        )
    return lines


def _parse_info(text: str) -> dict[str, str]:
    fields = {}
    for raw in text.splitlines():
        key, sep, value = raw.partition(":")
        if sep and not key.startswith("#"):
            fields[key.strip()] = value.strip()
    return fields


def _slot_ranges(masters: int) -> list[tuple[int, int]]:
    """Contiguous, even ranges: redis-cli's split (its lround, not banker's rounding)."""
    per_node = TOTAL_SLOTS / masters
    ranges = []
    first = 0
    cursor = 0.0
    for index in range(masters):
        last = math.floor(cursor + per_node - 1 + 0.5)
        if last > TOTAL_SLOTS - 1 or index == masters - 1:
            last = TOTAL_SLOTS - 1
        last = max(last, first)
        ranges.append((first, last))
        first = last + 1
        cursor += per_node
    return ranges


class ClusterProbe:
    """What a `LocalCluster` asks its nodes, and what it makes of their answers.

    `LocalCluster` sets the state below; the checks return problems (empty: healthy)
    instead of raising, so the waits can poll them until a deadline.
    """

    _nodes: list[LocalClusterNode]
    _connections: dict[int, _Connection]

    def _running(self) -> list[LocalClusterNode]:
        return [node for node in self._nodes if node.running]

    def _by_id(self, node_id: str) -> LocalClusterNode | None:
        for node in self._nodes:
            if node_id and node.node_id == node_id:
                return node
        return None

    def _command(self, node: LocalClusterNode, *args: str | int) -> Any:
        connection = self._connections.get(node.port)
        if connection is None:
            connection = _Connection(node.host, node.port, _COMMAND_TIMEOUT_SECONDS)
            self._connections[node.port] = connection
        try:
            return connection.command(*args)
        except OSError:
            self._drop_connection(node)
            raise

    def _drop_connection(self, node: LocalClusterNode) -> None:
        connection = self._connections.pop(node.port, None)
        if connection is not None:
            connection.close()

    def _membership_problems(self) -> list[str]:
        problems = []
        ids = {node.node_id for node in self._nodes}
        for node in self._nodes:
            try:
                view = _parse_nodes(self._command(node, "CLUSTER", "NODES"))
            except (OSError, _ReplyError) as exc:
                self._drop_connection(node)
                problems.append(f"{node.address}: {exc}")
                continue
            sound = {line.node_id for line in view if not line.flags & _BAD_FLAGS}
            if not ids <= sound:
                problems.append(f"{node.address} knows {len(sound)} of {len(ids)} nodes")
        return problems

    def _health(self, *, listed: bool = True) -> tuple[list[str], list[_Line]]:
        problems: list[str] = []
        running = self._running()
        running_ports = {node.port for node in running}
        agreed: dict[int, tuple[Role, str, tuple[tuple[int, int], ...]]] | None = None
        first_view: list[_Line] = []
        if not running:
            return ["no node is running"], []
        for node in running:
            try:
                info = _parse_info(self._command(node, "CLUSTER", "INFO"))
                view = _parse_nodes(self._command(node, "CLUSTER", "NODES"))
                replication = _parse_info(self._command(node, "INFO", "replication"))
                slots = self._command(node, "CLUSTER", "SLOTS") if listed else []
            except (OSError, _ReplyError) as exc:
                self._drop_connection(node)
                problems.append(f"{node.address}: {exc}")
                continue
            problems += self._listing_problems(node, view, slots, running_ports)
            if info.get("cluster_state") != "ok":
                problems.append(f"{node.address}: cluster_state {info.get('cluster_state')}")
            for key in ("cluster_slots_assigned", "cluster_slots_ok"):
                if info.get(key) != str(TOTAL_SLOTS):
                    problems.append(f"{node.address}: {key} {info.get(key)}")
            if info.get("cluster_known_nodes") != str(len(self._nodes)):
                problems.append(
                    f"{node.address}: knows {info.get('cluster_known_nodes')} nodes, "
                    f"not {len(self._nodes)}"
                )
            signature = {}
            for line in view:
                if line.port not in running_ports:
                    continue
                if line.flags & _BAD_FLAGS or not (line.connected or "myself" in line.flags):
                    problems.append(
                        f"{node.address} sees {line.port} as {','.join(sorted(line.flags))}"
                    )
                signature[line.port] = (line.role, line.master_id, line.slots)
            if set(signature) != running_ports:
                problems.append(f"{node.address} does not list every running node")
            if agreed is None:
                agreed, first_view = signature, view
            elif signature != agreed:
                problems.append(f"{node.address} disagrees about the topology")
            mine = [line for line in view if "myself" in line.flags]
            if mine and mine[0].role == "replica":
                status = replication.get("master_link_status")
                if status != "up" or replication.get("master_sync_in_progress", "0") != "0":
                    problems.append(f"{node.address}: master_link_status {status}")
        return problems, first_view

    @staticmethod
    def _listing_problems(
        node: LocalClusterNode, view: list[_Line], slots: list[Any], running_ports: set[int]
    ) -> list[str]:
        """What `node`'s CLUSTER SLOTS leaves out: a client discovers the cluster there."""
        problems = []
        ports = {line.node_id: line.port for line in view}
        for entry in slots:
            listed = {int(item[1]) for item in entry[2:]}
            master_id = str(entry[2][2])
            expected = {ports[master_id]} if master_id in ports else set()
            expected |= {
                line.port
                for line in view
                if line.master_id == master_id and line.port in running_ports
            }
            if expected - listed:
                missing = ",".join(str(port) for port in sorted(expected - listed))
                problems.append(f"{node.address}: CLUSTER SLOTS does not list {missing}")
        return problems

    def _failover_state(
        self, old_master: LocalClusterNode, wanted: list[tuple[int, int]]
    ) -> tuple[str, LocalClusterNode | None, list[_Line]]:
        others = [node for node in self._running() if node is not old_master]
        if not others:
            return "no other node is running", None, []
        owner_ids: set[str] = set()
        first_view: list[_Line] = []
        for node in others:
            try:
                info = _parse_info(self._command(node, "CLUSTER", "INFO"))
                view = _parse_nodes(self._command(node, "CLUSTER", "NODES"))
            except (OSError, _ReplyError) as exc:
                self._drop_connection(node)
                return f"{node.address}: {exc}", None, []
            if info.get("cluster_state") != "ok":
                return f"{node.address}: cluster_state {info.get('cluster_state')}", None, []
            first_view = first_view or view
            for first, last in wanted:
                owners = {
                    line.node_id
                    for line in view
                    if "master" in line.flags
                    and any(a <= first and last <= b for a, b in line.slots)
                }
                if len(owners) != 1:
                    return f"{node.address}: slots {first}-{last} not served by one node", None, []
                owner_ids |= owners
        if len(owner_ids) != 1:
            return "nodes disagree on the new master", None, []
        owner_id = owner_ids.pop()
        if owner_id == old_master.node_id:
            return f"{old_master.address} still serves its slots", None, []
        new_master = self._by_id(owner_id)
        if new_master is None or not new_master.running:
            return f"slots served by unknown or stopped node {owner_id}", None, []
        try:
            replication = _parse_info(self._command(new_master, "INFO", "replication"))
        except (OSError, _ReplyError) as exc:
            return f"{new_master.address}: {exc}", None, []
        if replication.get("role") != "master":
            return f"{new_master.address} reports role {replication.get('role')}", None, []
        return "", new_master, first_view
