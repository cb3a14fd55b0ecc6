"""Serving a `Dashboard` with uvicorn inside the caller's event loop.

The CLI, ``taskrunner demo --dashboard`` and the browser test share this: the
server is one task of the caller's TaskGroup, and `Server.stop` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterator

import uvicorn

from taskrunner.dashboard.web import Dashboard, create_app

__all__ = ["BindError", "Server", "check_bind_address"]


class BindError(Exception):
    """The dashboard cannot listen on its address (in use, not this machine's, not allowed).

    Its message is one line naming the address and the system's reason.
    """


def check_bind_address(addr: str, *, allow_remote: bool) -> str:
    """`addr` when it is a loopback address, or any address with `allow_remote`.

    Raises:
        ValueError: `addr` is not an IP address, or not a loopback one without
            `allow_remote` (the dashboard shows message payloads).
    """
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise ValueError(f"--addr must be an IP address, got {addr!r}") from None
    if not ip.is_loopback and not allow_remote:
        raise ValueError(
            f"--addr {addr} is reachable from other machines and the dashboard shows "
            "message payloads; add --allow-remote to bind it anyway"
        )
    return addr


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to the caller.

    The CLI stops the demo's worker and the server on one signal; uvicorn's own
    handlers would take the signal away from it.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Server:
    """The dashboard's HTTP server on `host`:`port` (0: a free port, read `port` after start).

    `bind` takes the address first (``run`` does when it was not called), so a busy
    port is a `BindError` the caller can report in one line, before anything is served.
    """

    def __init__(self, dashboard: Dashboard, *, host: str = "127.0.0.1", port: int = 8181) -> None:
        self._host = host
        self._port = port
        self._socket: socket.socket | None = None
        config = uvicorn.Config(
            create_app(dashboard),
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            access_log=False,
            # No handlers of uvicorn's own: its records (a failing request's traceback,
            # which may quote the backend URL) reach the caller's, which mask secrets.
            log_config=None,
        )
        self._server = _QuietServer(config)

    def bind(self) -> int:
        """Listen on the address now; returns the port (the one chosen for port 0).

        Raises:
            BindError: The address cannot be taken (another process listens on the
                port, the address is not this machine's, a port below 1024 unprivileged).
        """
        if self._socket is None:
            family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                # As uvicorn does: a restarted dashboard is not refused for its old
                # connections in TIME_WAIT (a live listener still refuses it, on Linux).
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((self._host, self._port))
                # Listening here, not in uvicorn: two sockets with SO_REUSEADDR can both
                # bind one port, and only listen then fails.
                sock.listen(2048)
            except OSError as exc:
                sock.close()
                host = f"[{self._host}]" if ":" in self._host else self._host
                reason = exc.strerror or str(exc)
                raise BindError(f"cannot listen on {host}:{self._port}: {reason}") from None
            sock.setblocking(False)
            self._socket = sock
        port: int = self._socket.getsockname()[1]
        return port

    async def run(self) -> None:
        """Serve until `stop`, binding first unless `bind` was called; closes the queues.

        Raises:
            BindError: See `bind`.
        """
        self.bind()
        assert self._socket is not None
        try:
            await self._server.serve(sockets=[self._socket])
        finally:
            self._socket.close()

    async def started(self, timeout_seconds: float = 10.0) -> int:
        """Wait (bounded) until the socket listens; returns the port.

        Raises:
            TimeoutError: It did not start within `timeout_seconds`.
        """
        async with asyncio.timeout(timeout_seconds):
            while not self._server.started:
                if self._server.should_exit:
                    raise RuntimeError("the dashboard server stopped before it started")
                await asyncio.sleep(0.01)
        port: int = self._server.servers[0].sockets[0].getsockname()[1]
        return port

    def stop(self) -> None:
        """Ask the server to finish its requests and stop."""
        self._server.should_exit = True
