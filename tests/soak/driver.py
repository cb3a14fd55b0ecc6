"""The chaos soak: real worker processes and a real Redis with AOF, both killed over and over.

``python -m tests.soak`` (or ``nox -s soak``) runs it; ``--help`` lists the knobs. A
run, in order:

1. starts a private ``redis-server`` (``--appendonly yes --appendfsync always``) on a
   free loopback port in the run directory, and `workers` worker processes
   (`tests.soak.worker`: a real `taskrunner.Runner`, `lease` s lease, `heartbeat` s
   heartbeats);
2. **faults phase**: dispatches `jobs` jobs at `rate` per second (`tests.soak.app`:
   varied durations, some a few leases long, a tenth plain ``def``, a few failing
   their first attempt) while it
   * SIGKILLs a random worker every 2-6 s (a fifth of the time SIGTERMs it instead, a
     graceful stop) and starts a new one in its place;
   * SIGKILLs Redis every 8-16 s and restarts it from its AOF after an outage: most
     outages are short (below the documented safe bound ``lease - heartbeat``), a
     quarter long (1.5-2.5 leases, beyond it);
3. **drain**: no more faults; waits until the queue is empty (nothing ready, nothing
   in flight);
4. **stop**: SIGTERMs every worker (their final stats are recorded), lists the dead
   letters, stops Redis;
5. **check**: reads the completion log of every process and prints the verdict of
   `tests.soak.checker` (lost, concurrent double runs and re-runs after success,
   explained or not, false lease-lost). Exit status 0 when nothing was violated, 1
   when something was, 3 when the run could not be judged.

Everything it starts is stopped by pid. The run directory is kept when the verdict is
not a pass (or with ``--keep``); ``python -m tests.soak --check DIR`` judges a kept
run again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import taskrunner
from taskrunner.errors import BackendError
from taskrunner.queue import QueueStats
from taskrunner_backends.redis.queue import RedisStreamsQueue, open_from_url
from tests.servers import RedisServer, ServerKind, find_server_binary, free_port

from .app import Job, app, work, work_sync
from .checker import Report, build_history, check
from .records import (
    DeadLettered,
    Dispatched,
    DispatchError,
    LogWriter,
    Phase,
    Record,
    RedisDown,
    RedisUp,
    WorkerExited,
    WorkerKilled,
    WorkerUp,
    read_records,
)
from .worker import NAMESPACE

__all__ = ["Settings", "main", "run_soak"]

REPO = Path(__file__).resolve().parents[2]

# A worker gets this long to say "ready" (fresh interpreter on a loaded machine, and
# it keeps trying while the server is down), and this long to exit after SIGTERM.
START_SECONDS = 90.0
STOP_SECONDS = 60.0


@dataclass(frozen=True)
class Settings:
    """One soak run's knobs (defaults: about 7 minutes on a 2-core machine)."""

    jobs: int = 20_000
    rate: float = 60.0
    workers: int = 4
    slots: int = 32
    lease: float = 4.0
    heartbeat: float = 1.0
    drain_timeout: float = 3.0
    worker_fault_min: float = 2.0
    worker_fault_max: float = 6.0
    graceful_fraction: float = 0.2
    redis_fault_min: float = 8.0
    redis_fault_max: float = 16.0
    long_outage_fraction: float = 0.25
    short_outage_max: float = 0.98
    sync_fraction: float = 0.1
    fail_first_fraction: float = 0.03
    settle_timeout: float = 300.0
    seed: int = 0
    server: ServerKind = "auto"

    @property
    def safe_outage(self) -> float:
        """The documented bound: outages shorter than this never cause a double run."""
        return self.lease - self.heartbeat

    def short_outage(self, rng: random.Random) -> float:
        """An outage inside the bound, up to its edge (the measured time decides)."""
        return rng.uniform(0.5, self.short_outage_max * self.safe_outage)

    def long_outage(self, rng: random.Random) -> float:
        """An outage beyond the bound (whole leases lapse)."""
        return rng.uniform(1.5 * self.lease, 2.5 * self.lease)

    def job_seconds(self, rng: random.Random) -> float:
        """A job duration: mostly short, some a few leases long (mean about 1.2 s)."""
        r = rng.random()
        if r < 0.70:
            return rng.uniform(0.02, 0.5)
        if r < 0.90:
            return rng.uniform(0.5, 3.0)
        if r < 0.98:
            return rng.uniform(3.0, 2 * self.lease)
        return rng.uniform(2 * self.lease, 4 * self.lease)


def say(text: str) -> None:
    """Progress for the person watching."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Slot:
    """Keeps one worker process running; kills or stops it when the fault loop asks."""

    def __init__(self, index: int, soak: Soak) -> None:
        self.index = index
        self._soak = soak
        self._fault: asyncio.Queue[str] = asyncio.Queue()
        self._stopping = False
        self.process: asyncio.subprocess.Process | None = None

    def request(self, fault: str) -> None:
        """Ask for ``kill`` (SIGKILL), ``term`` (SIGTERM) or ``stop`` (SIGTERM, no restart)."""
        self._stopping = self._stopping or fault == "stop"
        self._fault.put_nowait(fault)

    async def run(self) -> None:
        """Start a worker, wait for a fault or its exit, record it, start the next one."""
        while True:
            started = await self._start()
            if started is None:
                if self._stopping:
                    return
                await asyncio.sleep(1.0)
                continue
            w, process = started
            exited = asyncio.ensure_future(process.wait())
            fault = asyncio.ensure_future(self._fault.get())
            await asyncio.wait({exited, fault}, return_when=asyncio.FIRST_COMPLETED)
            if exited.done():
                fault.cancel()
                self._soak.record(WorkerExited(w, None, time.monotonic(), process.returncode or 0))
                say(f"  worker w{w} exited by itself with {process.returncode}: {self._tail(w)}")
                if self._stopping:
                    return
                continue
            exited.cancel()
            request = fault.result()
            if request == "kill":
                await self._kill(w, process)
            else:
                await self._terminate(w, process)
                if request == "stop":
                    return
            await asyncio.sleep(self._soak.rng.uniform(0.0, 1.0))

    async def _start(self) -> tuple[int, asyncio.subprocess.Process] | None:
        soak = self._soak
        w = soak.next_incarnation()
        with (soak.directory / f"worker-{w:05d}.stderr").open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                soak.worker_module,
                "--url",
                soak.server.url,
                "--dir",
                str(soak.directory),
                "--worker",
                str(w),
                "--workers",
                str(soak.settings.slots),
                "--lease",
                str(soak.settings.lease),
                "--heartbeat",
                str(soak.settings.heartbeat),
                "--drain",
                str(soak.settings.drain_timeout),
                cwd=REPO,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )
        self.process = process
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), START_SECONDS)
        except TimeoutError:
            line = b""
        if line != b"ready\n":
            await self._kill(w, process)
            say(f"  worker w{w} did not start: {self._tail(w)}")
            return None
        soak.record(WorkerUp(w, process.pid, time.monotonic()))
        return w, process

    async def _kill(self, w: int, process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        await process.wait()
        self._soak.record(WorkerKilled(w, time.monotonic()))

    async def _terminate(self, w: int, process: asyncio.subprocess.Process) -> None:
        signalled = time.monotonic()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
        except TimeoutError:
            say(f"  worker w{w} did not stop within {STOP_SECONDS:g}s; killing it")
            await self._kill(w, process)
            return
        self._soak.record(WorkerExited(w, signalled, time.monotonic(), process.returncode or 0))
        if process.returncode:
            say(f"  worker w{w} exited with {process.returncode}: {self._tail(w)}")

    def _tail(self, w: int) -> str:
        path = self._soak.directory / f"worker-{w:05d}.stderr"
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-3:]) or "(empty log)"


class Soak:
    """One run: the server, the worker slots, the producer, the faults and the log.

    A variant (`tests.soak.flow`) subclasses it with its own queue, worker module and
    `_dispatch`.
    """

    queue_name = app.queue
    worker_module = "tests.soak.worker"

    def __init__(self, settings: Settings, directory: Path) -> None:
        self.settings = settings
        self.directory = directory
        self.rng = random.Random(settings.seed)
        binary = find_server_binary(settings.server)
        self.server = RedisServer(
            binary,
            port=free_port(),
            appendonly=True,
            appendfsync="always",
            directory=directory / "redis",
        )
        self._log = LogWriter(directory / "driver.jsonl")
        self._incarnations = 0
        self._stop_faults = asyncio.Event()
        self.slots = [Slot(i, self) for i in range(settings.workers)]
        self.faults = {"worker_kill": 0, "worker_term": 0, "redis_short": 0, "redis_long": 0}

    def record(self, record: Record) -> None:
        """Append to the driver's log."""
        self._log.write(record)

    def next_incarnation(self) -> int:
        """A new worker incarnation number."""
        self._incarnations += 1
        return self._incarnations

    async def run(self) -> None:
        """Phases 1-4 (see the module docstring)."""
        (self.directory / "redis").mkdir()
        await asyncio.to_thread(self.server.start)
        s = self.settings
        say(
            f"soak: {s.jobs} jobs at {s.rate:g}/s, {s.workers} workers x {s.slots} slots, "
            f"lease {s.lease:g}s, heartbeat {s.heartbeat:g}s, safe outage < {s.safe_outage:g}s, "
            f"{self.server.binary.name} on port {self.server.port}, run dir {self.directory}"
        )
        queue = await open_from_url(
            f"{self.server.url}?namespace={NAMESPACE}", queue_name=self.queue_name
        )
        try:
            async with asyncio.TaskGroup() as tg:
                slots = [tg.create_task(slot.run()) for slot in self.slots]
                settings = {**asdict(s), "safe_outage": s.safe_outage}
                self.record(Phase("faults", time.monotonic(), settings))
                faults = [
                    tg.create_task(self._worker_faults()),
                    tg.create_task(self._redis_faults()),
                ]
                progress = tg.create_task(self._progress(queue))
                await self._dispatch(queue)
                self._stop_faults.set()
                await asyncio.gather(*faults)
                say("drain: faults stopped, waiting for the queue to empty")
                self.record(Phase("drain", time.monotonic()))
                await self._settle(queue)
                self.record(Phase("stop", time.monotonic()))
                progress.cancel()
                for slot in self.slots:
                    slot.request("stop")
                await asyncio.gather(*slots)
            await self._record_dead_letters(queue)
        finally:
            await queue.aclose()
            for slot in self.slots:
                process = slot.process
                if process is not None and process.returncode is None:
                    os.kill(process.pid, signal.SIGKILL)
                    await process.wait()
            await asyncio.to_thread(self.server.stop)
            self.record(Phase("end", time.monotonic()))
            self._log.close()

    async def _dispatch(self, queue: RedisStreamsQueue) -> None:
        s = self.settings
        producer = taskrunner.Producer(queue, app)
        rng = random.Random(s.seed + 1)
        jobs = [
            Job(n, s.job_seconds(rng), rng.random() < s.fail_first_fraction) for n in range(s.jobs)
        ]
        sync = {n for n in range(s.jobs) if rng.random() < s.sync_fraction}
        tick = 0.5
        per_tick = max(1, round(s.rate * tick))
        began = time.monotonic()
        for i, first in enumerate(range(0, s.jobs, per_tick)):
            due = began + i * tick
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            batch = jobs[first : first + per_tick]
            await self._send(producer, work, [j for j in batch if j.n not in sync])
            await self._send(producer, work_sync, [j for j in batch if j.n in sync])

    async def _send(
        self, producer: taskrunner.Producer, task: taskrunner.Task[Any], jobs: Sequence[Any]
    ) -> None:
        if not jobs:
            return
        numbers: list[int] = [j.n for j in jobs]
        while True:
            t0 = time.monotonic()
            try:
                ids = await producer.dispatch_many(task, jobs)
            except BackendError as exc:
                # Some may have been added: the checker counts those as recovered.
                self.record(DispatchError(numbers, t0, time.monotonic(), repr(exc)))
                await asyncio.sleep(0.2)
                continue
            # The ids are `Dispatched` (a str subclass msgspec does not encode): plain str.
            self.record(Dispatched(numbers, [str(i) for i in ids], t0, time.monotonic()))
            return

    async def _pause(self, low: float, high: float) -> bool:
        """Wait a random time in [low, high]; False when the faults phase ended."""
        delay = self.rng.uniform(low, high)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_faults.wait(), delay)
        return not self._stop_faults.is_set()

    async def _worker_faults(self) -> None:
        s = self.settings
        while await self._pause(s.worker_fault_min, s.worker_fault_max):
            slot = self.rng.choice(self.slots)
            if self.rng.random() < s.graceful_fraction:
                self.faults["worker_term"] += 1
                slot.request("term")
            else:
                self.faults["worker_kill"] += 1
                slot.request("kill")

    async def _redis_faults(self) -> None:
        s = self.settings
        while await self._pause(s.redis_fault_min, s.redis_fault_max):
            long = self.rng.random() < s.long_outage_fraction
            outage = s.long_outage(self.rng) if long else s.short_outage(self.rng)
            self.faults["redis_long" if long else "redis_short"] += 1
            await asyncio.to_thread(self.server.stop, kill=True)
            down = time.monotonic()
            self.record(RedisDown(down))
            # Always restart, even when the faults phase ends meanwhile.
            await asyncio.sleep(outage)
            await asyncio.to_thread(self.server.start)
            up = time.monotonic()
            self.record(RedisUp(up))
            say(f"  redis outage {up - down:.2f}s ({'long' if long else 'short'})")

    async def _stats(self, queue: RedisStreamsQueue) -> QueueStats | None:
        try:
            return await queue.stats()
        except BackendError:
            return None

    async def _progress(self, queue: RedisStreamsQueue) -> None:
        began = time.monotonic()
        while True:
            await asyncio.sleep(15.0)
            stats = await self._stats(queue)
            figures = (
                "server down"
                if stats is None
                else f"ready {stats.ready}, in flight {stats.in_flight}"
            )
            faults = ", ".join(f"{k} {v}" for k, v in self.faults.items())
            say(f"  {time.monotonic() - began:5.0f}s: {figures}; faults: {faults}")

    async def _settle(self, queue: RedisStreamsQueue) -> None:
        deadline = time.monotonic() + self.settings.settle_timeout
        empty_polls = 0
        while time.monotonic() < deadline:
            stats = await self._stats(queue)
            empty = stats is not None and stats.ready == 0 and stats.in_flight == 0
            empty_polls = empty_polls + 1 if empty else 0
            if empty_polls >= 2:
                return
            await asyncio.sleep(1.0)
        say(f"  the queue did not empty within {self.settings.settle_timeout:g}s")

    async def _record_dead_letters(self, queue: RedisStreamsQueue) -> None:
        job_of: dict[str, int] = {}
        for file in read_records(self.directory):
            for record in file.records:
                if isinstance(record, Dispatched):
                    job_of.update(zip(record.msgs, record.jobs, strict=True))
        for letter in await queue.list_dead_letters(limit=10_000):
            self.record(
                DeadLettered(job_of.get(letter.original_id), letter.original_id, letter.reason)
            )


def judge(directory: Path) -> Report:
    """Read a run directory and check it."""
    records: list[Record] = []
    torn = 0
    for file in read_records(directory):
        records += file.records
        torn += file.torn_lines
    history = build_history(records, torn_lines=torn)
    lease = float(history.settings.get("lease", Settings.lease))
    safe = float(history.settings.get("safe_outage", lease - Settings.heartbeat))
    return check(history, lease_seconds=lease, safe_outage_seconds=safe)


async def run_soak(settings: Settings, directory: Path) -> Report:
    """Run the soak in `directory` (which must exist and be empty) and judge it."""
    soak = Soak(settings, directory)
    await soak.run()
    return judge(directory)


def _parser() -> argparse.ArgumentParser:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak",
        description="Chaos soak of the Redis backend: kills workers and Redis, checks the log.",
    )
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument(
        "--rate", type=float, default=defaults.rate, help="jobs dispatched per second"
    )
    parser.add_argument("--workers", type=int, default=defaults.workers, help="worker processes")
    parser.add_argument("--slots", type=int, default=defaults.slots, help="tasks per worker")
    parser.add_argument("--lease", type=float, default=defaults.lease)
    parser.add_argument("--heartbeat", type=float, default=defaults.heartbeat)
    parser.add_argument(
        "--worker-faults",
        type=float,
        nargs=2,
        metavar=("MIN", "MAX"),
        default=(defaults.worker_fault_min, defaults.worker_fault_max),
        help="seconds between two worker faults",
    )
    parser.add_argument(
        "--redis-faults",
        type=float,
        nargs=2,
        metavar=("MIN", "MAX"),
        default=(defaults.redis_fault_min, defaults.redis_fault_max),
        help="seconds between two Redis outages",
    )
    parser.add_argument(
        "--long-outages",
        type=float,
        default=defaults.long_outage_fraction,
        help="fraction of Redis outages beyond the safe bound",
    )
    parser.add_argument(
        "--short-outage-max",
        type=float,
        default=defaults.short_outage_max,
        help="longest short outage, as a fraction of the safe bound",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--server", choices=["auto", "redis", "valkey"], default=defaults.server)
    parser.add_argument("--dir", type=Path, help="run directory (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    parser.add_argument("--check", type=Path, metavar="DIR", help="only judge a kept run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or with ``--check``, only judge) a soak; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.check is not None:
        report = judge(args.check)
        say(report.describe())
        return report.exit_status
    settings = Settings(
        jobs=args.jobs,
        rate=args.rate,
        workers=args.workers,
        slots=args.slots,
        lease=args.lease,
        heartbeat=args.heartbeat,
        worker_fault_min=args.worker_faults[0],
        worker_fault_max=args.worker_faults[1],
        redis_fault_min=args.redis_faults[0],
        redis_fault_max=args.redis_faults[1],
        long_outage_fraction=args.long_outages,
        short_outage_max=args.short_outage_max,
        seed=args.seed,
        server=args.server,
    )
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=False)
        directory = args.dir
    else:
        directory = Path(tempfile.mkdtemp(prefix="taskrunner-soak-"))
    began = time.monotonic()
    try:
        report = asyncio.run(run_soak(settings, directory))
    except Exception as exc:
        say(f"soak aborted: {exc!r}; run directory kept: {directory}")
        return 3
    say(report.describe())
    say(f"  wall time                {time.monotonic() - began:.0f}s")
    if args.keep or report.exit_status != 0:
        say(f"  run directory kept: {directory} (python -m tests.soak --check {directory})")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    return report.exit_status


if __name__ == "__main__":
    sys.exit(main())
