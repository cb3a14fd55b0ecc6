"""Chaos check of per-key concurrency limits (``nox -s soak-flow``; about 100 s on 2 cores).

``python -m tests.soak.flow`` runs the soak driver (`tests.soak.driver`) on a task
declared with ``concurrency_limit=2, concurrency_key=lambda job: job.key``:

1. a private ``redis-server`` (``--appendonly yes --appendfsync always``, so a restart
   loses nothing) and 4 worker processes (this module with ``--worker``: a real
   `taskrunner.Runner`, lease 3 s, heartbeat 0.75 s);
2. 3,000 jobs dispatched at 50/s over 20 keys, a quarter of them on 4 hot keys whose
   2 slots they keep full (so the limit binds); durations mostly 20-300 ms, some up
   to 2 leases; a few fail their first attempt (a release gives the slot back);
   meanwhile a random worker is SIGKILLed (a fifth of the time SIGTERMed) every
   2-5 s and Redis is SIGKILLed and restarted from its AOF every 10-20 s, each
   outage shorter than the safe bound ``lease - heartbeat``;
3. the drain, the stop, then the flow state left on the server: admitted messages
   still holding a slot, waiting messages;
4. the check. Every attempt writes a `Start` before its work and an `End` after it
   (`tests.soak.records`: one ``O_APPEND`` write each, kept through a SIGKILL). An
   attempt of a SIGKILLed worker has no End: it ran until the worker was reaped (the
   process is dead after that, whatever its lease says). Per key:

   * **running**: the most attempts whose ``[start, end]`` overlap (must be <= 2);
   * **held**: the same, with an attempt whose process died counted until the next
     attempt of its message starts (its message keeps the slot until the lease lapses
     and the reclaimer hands it on), so a slot given away while its message was
     still leased would show (must be <= 2);

   plus the soak checker's verdict on the whole run (nothing lost, no message run
   twice at once, no false lease-lost, no unexplained re-run after success; a dead
   letter is listed with its reason and fails the run, since no soak job is meant to
   die), and no slot or waiting message left once the queue is empty.

Exit status 0 when every goal holds, 1 when one is missed, 3 when the run could not be
judged. Options: ``--jobs``, ``--rate``, ``--keys``, ``--seed``, ``--keep``, ``--check DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import redis.asyncio as aioredis

import taskrunner
from taskrunner.errors import BackendUnavailableError
from taskrunner_backends.redis.queue import (
    DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
    DEFAULT_SOCKET_TIMEOUT_SECONDS,
    RedisStreamsQueue,
)

from .checker import Attempt, Report, build_history, check
from .driver import Settings, Soak, say
from .records import End, LogWriter, Phase, Record, Start, Stats, read_records
from .worker import NAMESPACE, OPEN_TIMEOUT_SECONDS, LeaseLossRecorder, RecordingQueue

__all__ = ["LIMIT", "FlowJob", "FlowReport", "flow_app", "flow_work", "judge_flow", "main"]

LIMIT = 2
MAX_RETRIES = 1000

flow_app = taskrunner.App("soakflow")


class FlowJob(msgspec.Struct, frozen=True):
    """One job: number `n` (unique in a run), concurrency key `key`, `seconds` of work."""

    n: int
    key: str
    seconds: float
    fail_first: bool = False


class DeliberateError(Exception):
    """Raised by a ``fail_first`` job on its first delivery."""


class _Log:
    writer: LogWriter | None = None
    worker = -1


def _record(job: FlowJob, outcome: str | None) -> None:
    writer = _Log.writer
    assert writer is not None, "the flow worker did not set up its log"
    ctx = taskrunner.current_task()
    fields = (_Log.worker, job.n, ctx.message_id, ctx.delivery_count, ctx.consumer)
    now = time.monotonic()
    writer.write(Start(*fields, now) if outcome is None else End(*fields, now, outcome))


@flow_app.task(
    name="flow_work",
    max_retries=MAX_RETRIES,
    concurrency_limit=LIMIT,
    concurrency_key=lambda job: job.key,
)
async def flow_work(job: FlowJob) -> None:
    """Sleep `job.seconds`, recording the attempt's start and end."""
    _record(job, None)
    outcome = "error"
    try:
        await asyncio.sleep(job.seconds)
        if job.fail_first and taskrunner.current_task().delivery_count == 1:
            raise DeliberateError(f"job {job.n} fails its first delivery")
        outcome = "ok"
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        _record(job, outcome)


# -- the worker process ------------------------------------------------------------------


async def _open(args: argparse.Namespace, writer: LogWriter) -> RecordingQueue:
    deadline = time.monotonic() + OPEN_TIMEOUT_SECONDS
    while True:
        client = aioredis.Redis.from_url(
            args.url,
            socket_timeout=DEFAULT_SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
        )
        queue = RecordingQueue(
            client,
            writer=writer,
            worker=args.worker,
            queue_name=flow_app.queue,
            namespace=NAMESPACE,
            owns_client=True,
        )
        try:
            await queue.initialize()
        except BackendUnavailableError:
            # The driver may have started us while the server is down.
            await queue.aclose()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
            continue
        return queue


async def worker_main(args: argparse.Namespace) -> None:
    """One worker (the driver's ``--worker`` command line) until SIGTERM."""
    writer = LogWriter(args.dir / f"worker-{args.worker:05d}.jsonl")
    _Log.writer, _Log.worker = writer, args.worker
    logging.getLogger().addHandler(LeaseLossRecorder(writer, args.worker))
    queue = await _open(args, writer)
    config = taskrunner.RunnerConfig(
        num_fetchers=1,
        num_workers=args.workers,
        batch_size=min(args.workers, 10),
        block_seconds=1.0,
        lease_seconds=args.lease,
        heartbeat_interval_seconds=args.heartbeat,
        retry_base_seconds=0.2,
        retry_max_seconds=1.0,
        drain_timeout_seconds=args.drain,
        monitor_interval_seconds=1.0,
    )
    runner = taskrunner.Runner(queue, flow_app, config)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, runner.stop)
    try:
        run = asyncio.create_task(runner.run())
        await runner.wait_ready()
        sys.stdout.buffer.write(b"ready\n")
        sys.stdout.buffer.flush()
        await run
        writer.write(Stats(args.worker, time.monotonic(), msgspec.to_builtins(runner.stats())))
    finally:
        await queue.aclose()
        writer.close()


# -- the driver --------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowSettings:
    """The flow run's own knobs (the faults are `Settings`)."""

    keys: int = 20
    hot_keys: int = 4
    hot_fraction: float = 0.25

    def key(self, rng: random.Random) -> str:
        """A job's key: a `hot_fraction` share on the first `hot_keys` keys."""
        if rng.random() < self.hot_fraction:
            return f"k{rng.randrange(self.hot_keys)}"
        return f"k{rng.randrange(self.keys)}"


def job_seconds(rng: random.Random, lease: float) -> float:
    """Mostly short (the limit binds on count, not on time), some longer than a lease."""
    r = rng.random()
    if r < 0.85:
        return rng.uniform(0.02, 0.3)
    if r < 0.97:
        return rng.uniform(0.3, 1.5)
    return rng.uniform(lease, 2 * lease)


class FlowSoak(Soak):
    """The soak driver, dispatching `flow_work` and reading the flow state at the end."""

    queue_name = flow_app.queue
    worker_module = "tests.soak.flow"

    def __init__(self, settings: Settings, flow: FlowSettings, directory: Path) -> None:
        super().__init__(settings, directory)
        self.flow = flow

    async def _dispatch(self, queue: RedisStreamsQueue) -> None:
        s = self.settings
        producer = taskrunner.Producer(queue, flow_app)
        rng = random.Random(s.seed + 1)
        jobs = [
            FlowJob(
                n,
                self.flow.key(rng),
                job_seconds(rng, s.lease),
                rng.random() < s.fail_first_fraction,
            )
            for n in range(s.jobs)
        ]
        # The check needs each job's key; Start records carry only the job's number.
        self.record(Phase("flow_keys", time.monotonic(), {"keys": [j.key for j in jobs]}))
        tick = 0.5
        per_tick = max(1, round(s.rate * tick))
        began = time.monotonic()
        for i, first in enumerate(range(0, s.jobs, per_tick)):
            await asyncio.sleep(max(0.0, began + i * tick - time.monotonic()))
            await self._send(producer, flow_work, jobs[first : first + per_tick])

    async def _record_dead_letters(self, queue: RedisStreamsQueue) -> None:
        await super()._record_dead_letters(queue)
        # Once the queue is empty, no message may still hold a slot or wait.
        client = aioredis.Redis.from_url(self.server.url)
        try:
            prefix = queue.keys.flow_prefix
            holders = 0
            async for key in client.scan_iter(match=f"{prefix}h:*", count=1000):
                holders += int(await client.hlen(key))
            state = {
                "admitted": int(await client.hlen(f"{prefix}adm")),
                "holders": holders,
                "waiting": int(await client.zcard(f"{prefix}waiting")),
                "stream": int(await client.xlen(queue.keys.stream)),
            }
        finally:
            await client.aclose()
        self.record(Phase("flow_state", time.monotonic(), state))


# -- the check ---------------------------------------------------------------------------


@dataclass
class KeyFigures:
    """What one key saw."""

    attempts: int = 0
    max_running: int = 0
    max_held: int = 0
    starts_to_limit: int = 0
    seconds_at_limit: float = 0.0


@dataclass
class FlowReport:
    """The soak checker's report plus the per-key concurrency figures."""

    soak: Report
    keys: dict[str, KeyFigures]
    state: dict[str, Any] | None
    attempts_by_outcome: dict[str, int] = field(default_factory=dict)
    acks: dict[int, int] = field(default_factory=dict)

    @property
    def max_running(self) -> int:
        """The most attempts of one key seen running at once."""
        return max((k.max_running for k in self.keys.values()), default=0)

    @property
    def max_held(self) -> int:
        """The same, counting a dead worker's attempt until its message runs again."""
        return max((k.max_held for k in self.keys.values()), default=0)

    @property
    def misses(self) -> list[str]:
        """Every goal missed, in words."""
        missed = []
        if self.max_running > LIMIT:
            missed.append(f"{self.max_running} attempts of one key ran at once (limit {LIMIT})")
        if self.max_held > LIMIT:
            missed.append(f"{self.max_held} slots of one key held at once (limit {LIMIT})")
        if self.soak.violations:
            missed.append(f"{self.soak.violations} soak violations (see above)")
        if self.state is None:
            missed.append("the flow state after the drain was not recorded")
        elif any(self.state.values()):
            missed.append(f"flow state left after the drain: {self.state}")
        if not self.keys:
            missed.append("no attempt was recorded")
        return missed

    @property
    def exit_status(self) -> int:
        """0 every goal held, 1 one was missed, 3 the run could not be judged."""
        if self.misses:
            return 1
        return self.soak.exit_status

    def describe(self) -> str:
        """The figures, for people."""
        hot = sorted(self.keys.items(), key=lambda kv: -kv[1].attempts)
        more_than_once = sum(1 for count in self.acks.values() if count > 1)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.attempts_by_outcome.items()))
        lines = [
            self.soak.describe(),
            "",
            f"flow report (concurrency_limit={LIMIT} per key, {len(self.keys)} keys)",
            f"  attempts                 {sum(self.attempts_by_outcome.values())}: {outcomes}",
            f"  max running per key      {self.max_running} (goal <= {LIMIT})",
            f"  max held per key         {self.max_held} (goal <= {LIMIT}; a dead worker's "
            "attempt counted until its message runs again)",
            f"  starts reaching the limit {sum(k.starts_to_limit for k in self.keys.values())}",
            f"  messages ok once         {sum(1 for c in self.acks.values() if c == 1)}, "
            f"ok more than once {more_than_once} (re-runs, judged above)",
            f"  flow state after drain   {self.state}",
            "  busiest keys             "
            + "; ".join(
                f"{key}: {k.attempts} attempts, {k.seconds_at_limit:.0f}s at the limit"
                for key, k in hot[:4]
            ),
        ]
        lines.append(
            "  verdict                  "
            + ("ok" if not self.misses else "MISSED: " + "; ".join(self.misses))
        )
        return "\n".join(lines)


def _sweep(intervals: Iterable[tuple[float, float]]) -> tuple[int, int, float]:
    """The most intervals open at once, how many starts reached `LIMIT`, time at it.

    At equal times an end goes before a start: the slot is free when the next begins.
    """
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = to_limit = 0
    at_limit = 0.0
    since = 0.0
    for t, delta in events:
        if running >= LIMIT:
            at_limit += t - since
        running += delta
        since = t
        peak = max(peak, running)
        if delta > 0 and running == LIMIT:
            to_limit += 1
    return peak, to_limit, at_limit


def flow_figures(attempts: Sequence[Attempt], key_of_job: dict[int, str]) -> dict[str, KeyFigures]:
    """Per key: attempts, max running, max held (see the module docstring)."""
    by_message: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        by_message[attempt.message_id].append(attempt)
    running: dict[str, list[tuple[float, float]]] = defaultdict(list)
    held: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for message_attempts in by_message.values():
        message_attempts.sort(key=lambda a: a.start)
        for i, attempt in enumerate(message_attempts):
            key = key_of_job.get(attempt.job, f"job-{attempt.job}")
            running[key].append((attempt.start, attempt.end))
            end = attempt.end
            if attempt.outcome in ("killed", "exited", "unfinished"):
                later = [a.start for a in message_attempts[i + 1 :] if a.start >= attempt.start]
                end = max(end, later[0]) if later else end
            held[key].append((attempt.start, end))
    figures = {}
    for key, intervals in running.items():
        peak, to_limit, at_limit = _sweep(intervals)
        held_peak, _, _ = _sweep(held[key])
        figures[key] = KeyFigures(len(intervals), peak, held_peak, to_limit, at_limit)
    return figures


def judge_flow(directory: Path) -> FlowReport:
    """Read a run directory and check it."""
    records: list[Record] = []
    torn = 0
    for file in read_records(directory):
        records += file.records
        torn += file.torn_lines
    history = build_history(records, torn_lines=torn)
    lease = float(history.settings.get("lease", 3.0))
    safe = float(history.settings.get("safe_outage", lease - 0.75))
    report = check(history, lease_seconds=lease, safe_outage_seconds=safe)
    key_of_job: dict[int, str] = {}
    state = None
    for record in records:
        if isinstance(record, Phase) and record.name == "flow_keys":
            key_of_job = dict(enumerate(record.settings["keys"]))
        elif isinstance(record, Phase) and record.name == "flow_state":
            state = record.settings
    outcomes: dict[str, int] = defaultdict(int)
    acks: dict[int, int] = defaultdict(int)
    for attempt in history.attempts:
        outcomes[attempt.outcome] += 1
        if attempt.outcome == "ok":
            acks[attempt.job] += 1
    return FlowReport(
        report,
        flow_figures(history.attempts, key_of_job),
        state,
        dict(outcomes),
        dict(acks),
    )


async def _run(settings: Settings, flow: FlowSettings, directory: Path) -> FlowReport:
    await FlowSoak(settings, flow, directory).run()
    return judge_flow(directory)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak.flow",
        description="Chaos check of per-key concurrency limits on Redis.",
    )
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=50.0, help="jobs dispatched per second")
    parser.add_argument("--keys", type=int, default=FlowSettings.keys)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, help="run directory (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    parser.add_argument("--check", type=Path, metavar="DIR", help="only judge a kept run")
    # The worker's command line, as `tests.soak.driver.Slot` starts it.
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--lease", type=float, default=3.0, help=argparse.SUPPRESS)
    parser.add_argument("--heartbeat", type=float, default=0.75, help=argparse.SUPPRESS)
    parser.add_argument("--drain", type=float, default=2.0, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or judge) a flow soak; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.worker is not None:
        logging.basicConfig(
            level=logging.WARNING,
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        asyncio.run(worker_main(args))
        return 0
    if args.check is not None:
        report = judge_flow(args.check)
        say(report.describe())
        return report.exit_status
    settings = Settings(
        jobs=args.jobs,
        rate=args.rate,
        workers=4,
        slots=args.workers,
        lease=args.lease,
        heartbeat=args.heartbeat,
        drain_timeout=args.drain,
        worker_fault_min=2.0,
        worker_fault_max=5.0,
        redis_fault_min=10.0,
        redis_fault_max=20.0,
        # Past the safe bound a live attempt's lease may lapse and its slot pass on:
        # the limit is promised only inside it.
        long_outage_fraction=0.0,
        short_outage_max=0.8,
        settle_timeout=120.0,
        seed=args.seed,
    )
    flow = FlowSettings(keys=args.keys, hot_keys=min(4, args.keys))
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=False)
        directory = args.dir
    else:
        directory = Path(tempfile.mkdtemp(prefix="taskrunner-soak-flow-"))
    began = time.monotonic()
    try:
        report = asyncio.run(_run(settings, flow, directory))
    except Exception as exc:
        say(f"soak-flow aborted: {exc!r}; run directory kept: {directory}")
        return 3
    say(report.describe())
    say(f"  wall time                {time.monotonic() - began:.0f}s")
    if args.keep or report.exit_status != 0:
        say(f"  run directory kept: {directory} (python -m tests.soak.flow --check {directory})")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    return report.exit_status


if __name__ == "__main__":
    sys.exit(main())
