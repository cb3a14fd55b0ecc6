"""Server processes a test left running: ``snapshot FILE`` before, ``check FILE`` after.

A redis-server, valkey-server or PostgreSQL postmaster that is alive at ``check`` and
was not at ``snapshot`` was started by the tests in between and never stopped. ``check``
lists each (pid, age, command line), stops it by pid (SIGTERM, then SIGKILL) so the
next stage starts clean, and exits 1. The machine's own servers are in the snapshot
and are never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

NAMES = ("redis-server", "valkey-server", "postgres")
GRACE_SECONDS = 10.0


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    # The command name in parentheses may hold spaces: fields start after its ')'.
    return int(stat.rsplit(")", 1)[1].split()[1])


def servers() -> dict[int, str]:
    """Top-level server processes (a postmaster's own children are left out), by pid."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if argv and Path(argv[0].split()[0]).name in NAMES:
            found[int(entry.name)] = " ".join(argv)
    return {pid: line for pid, line in found.items() if _parent(pid) not in found}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    """``snapshot FILE`` or ``check FILE``; see the module docstring."""
    if len(argv) != 3 or argv[1] not in ("snapshot", "check"):
        print(f"usage: {argv[0]} snapshot|check FILE", file=sys.stderr)
        return 2
    state = Path(argv[2])
    if argv[1] == "snapshot":
        state.write_text("".join(f"{pid}\n" for pid in servers()))
        return 0
    before = {int(line) for line in state.read_text().split()}
    left = {pid: line for pid, line in servers().items() if pid not in before}
    if not left:
        print("no server left running")
        return 0
    print(f"{len(left)} server process(es) left running by the tests:", file=sys.stderr)
    for pid, line in sorted(left.items()):
        print(f"  pid {pid}: {line}", file=sys.stderr)
    _stop(sorted(left))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
