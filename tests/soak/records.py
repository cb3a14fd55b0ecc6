"""The soak's completion log: what every process did, written outside the queue under test.

Each process (the driver and every worker incarnation) appends JSON lines to its own
file in the run directory. A record is written with one ``write`` on a file opened
with ``O_APPEND``, so it is in the kernel's page cache the moment the call returns:
a SIGKILL of the writer cannot lose it (only a machine crash could, which the soak
does not inject; pass ``fsync=True`` to `LogWriter` to survive that as well). A line
cut short by a crash in the middle of a write is skipped by `read_records` and
counted.

Times are ``time.monotonic()`` readings. On Linux that is ``CLOCK_MONOTONIC``, one
clock for every process of the machine, so records of different processes compare
directly, and wall-clock steps cannot reorder them.

Record kinds (the ``e`` field):

* worker side: `Start` and `End` of every task attempt, `Grant` for every delivery a
  receive or reclaim returned (with the call's invocation and reply times),
  `GrantError` for a receive or reclaim that raised (it may have leased messages
  nobody saw), `Beat` for every heartbeat call, `LeaseLost` for every lease loss the
  runner logged (and so counted), `Stall` for event-loop pauses, `Stats` with the
  runner's final counters at a graceful exit;
* driver side: `Dispatched` and `DispatchError`, `WorkerUp`, `WorkerKilled`,
  `WorkerExited`, `RedisDown`, `RedisUp`, `Phase`, `DeadLettered`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "Beat",
    "DeadLettered",
    "Dispatched",
    "DispatchError",
    "End",
    "Grant",
    "GrantError",
    "LeaseLost",
    "LogWriter",
    "Phase",
    "Record",
    "RecordFile",
    "RedisDown",
    "RedisUp",
    "Stall",
    "Start",
    "Stats",
    "WorkerExited",
    "WorkerKilled",
    "WorkerUp",
    "read_records",
]


class Start(msgspec.Struct, frozen=True, tag_field="e", tag="start"):
    """A task attempt began (written by the task itself, before its work)."""

    w: int  # worker incarnation
    job: int
    msg: str
    dc: int  # delivery count
    consumer: str
    t: float


class End(msgspec.Struct, frozen=True, tag_field="e", tag="end"):
    """A task attempt's code stopped running: ``ok``, ``error`` or ``cancelled``."""

    w: int
    job: int
    msg: str
    dc: int
    consumer: str
    t: float
    outcome: str


class Grant(msgspec.Struct, frozen=True, tag_field="e", tag="grant"):
    """A receive (``via="receive"``) or reclaim returned this delivery.

    `t0` is when the call was invoked, `t1` when it returned: the server granted the
    lease somewhere in between.
    """

    w: int
    msg: str
    dc: int
    consumer: str
    via: str
    t0: float
    t1: float


class GrantError(msgspec.Struct, frozen=True, tag_field="e", tag="grant_error"):
    """A receive or reclaim raised; it may have leased messages that nobody saw."""

    w: int
    consumer: str
    via: str
    t0: float
    t1: float
    error: str


class Beat(msgspec.Struct, frozen=True, tag_field="e", tag="beat"):
    """One heartbeat call of `n` leases, invoked at `t0`, returned (or raised) at `t1`."""

    w: int
    t0: float
    t1: float
    n: int
    lost: int
    error: str | None = None


class LeaseLost(msgspec.Struct, frozen=True, tag_field="e", tag="lease_lost"):
    """The runner logged (and counted) the loss of this delivery's lease."""

    w: int
    msg: str
    dc: int
    consumer: str
    t: float
    source: str  # the logger: taskrunner.heartbeat or taskrunner.executor
    text: str


class Stall(msgspec.Struct, frozen=True, tag_field="e", tag="stall"):
    """The worker's event loop did not run from `t0` to `t1` (a pause longer than usual)."""

    w: int
    t0: float
    t1: float


class Stats(msgspec.Struct, frozen=True, tag_field="e", tag="stats"):
    """The runner's final counters, written at a graceful exit."""

    w: int
    t: float
    stats: dict[str, Any]


class Dispatched(msgspec.Struct, frozen=True, tag_field="e", tag="dispatched"):
    """The producer's add of these jobs returned these message ids (same order)."""

    jobs: list[int]
    msgs: list[str]
    t0: float
    t1: float


class DispatchError(msgspec.Struct, frozen=True, tag_field="e", tag="dispatch_error"):
    """An add of these jobs raised: they may or may not have been added (retried)."""

    jobs: list[int]
    t0: float
    t1: float
    error: str


class WorkerUp(msgspec.Struct, frozen=True, tag_field="e", tag="worker_up"):
    """Worker incarnation `w` (process `pid`) said it was ready."""

    w: int
    pid: int
    t: float


class WorkerKilled(msgspec.Struct, frozen=True, tag_field="e", tag="worker_killed"):
    """Worker `w` was SIGKILLed; `t` is after it was reaped (it ran no code after `t`)."""

    w: int
    t: float


class WorkerExited(msgspec.Struct, frozen=True, tag_field="e", tag="worker_exited"):
    """Worker `w` exited on its own or after SIGTERM (`t_signal`), with `code`."""

    w: int
    t_signal: float | None
    t: float
    code: int


class RedisDown(msgspec.Struct, frozen=True, tag_field="e", tag="redis_down"):
    """The server was SIGKILLed; `t` is after it was reaped."""

    t: float


class RedisUp(msgspec.Struct, frozen=True, tag_field="e", tag="redis_up"):
    """The restarted server answered PING (its AOF loaded)."""

    t: float


class Phase(msgspec.Struct, frozen=True, tag_field="e", tag="phase"):
    """The driver entered a phase (``faults``, ``drain``, ``stop``, ``end``), with settings."""

    name: str
    t: float
    settings: dict[str, Any] = {}


class DeadLettered(msgspec.Struct, frozen=True, tag_field="e", tag="dead_lettered"):
    """A dead letter found after the drain (soak jobs are never meant to die)."""

    job: int | None
    msg: str
    reason: str


Record = (
    Start
    | End
    | Grant
    | GrantError
    | Beat
    | LeaseLost
    | Stall
    | Stats
    | Dispatched
    | DispatchError
    | WorkerUp
    | WorkerKilled
    | WorkerExited
    | RedisDown
    | RedisUp
    | Phase
    | DeadLettered
)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Record] = msgspec.json.Decoder(Record)


class LogWriter:
    """Appends records to one file; safe against SIGKILL of the writer (see module doc).

    Each record is one ``os.write`` of one line, so threads may share a writer.
    """

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        self.path = path
        self._fsync = fsync
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: Record) -> None:
        """Append `record` (durable against a crash of this process when this returns)."""
        line = _encoder.encode(record) + b"\n"
        written = os.write(self._fd, line)
        if written != len(line):
            raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class RecordFile:
    """What `read_records` found in one file."""

    path: Path
    records: list[Record]
    torn_lines: int


def read_records(directory: Path) -> Iterator[RecordFile]:
    """Every ``*.jsonl`` file of `directory`, in name order, decoded.

    A line that does not decode (a write cut short by a crash) is counted in
    ``torn_lines``, never guessed at.
    """
    for path in sorted(directory.glob("*.jsonl")):
        records: list[Record] = []
        torn = 0
        with path.open("rb") as file:
            for line in file:
                try:
                    records.append(_decoder.decode(line))
                except msgspec.DecodeError:
                    torn += 1
        yield RecordFile(path, records, torn)
