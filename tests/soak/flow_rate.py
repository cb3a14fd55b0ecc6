"""Rate-limit accuracy on Redis (``nox -s soak-flow-rate``; about 2.5 minutes on 2 cores).

``python -m tests.soak.flow_rate`` runs, for each burst (default: the default burst,
1, then ``rate_burst=10``), a task declared with ``rate_limit="100/s"``:

1. a private ``redis-server`` (no persistence; one for all runs, a fresh namespace
   per run) gets a backlog of ``1.25 x rate x seconds + 500`` no-op messages, enough
   that the limit binds for the whole window;
2. 4 worker processes (this module with ``--worker``; 32 concurrent tasks each) run
   them; each task appends its start and completion times (``CLOCK_MONOTONIC``, one
   clock for every process of the machine) to its process's file, one ``O_APPEND``
   write per task;
3. after ``seconds`` (default 60) past the last worker's start, every worker is
   SIGTERMed, and the window ``[first completion, first completion + seconds)`` is
   judged:

   * completions per second over the window: the goal is within 5 % of the rate;
   * the most completions in any 1-second window (and, for information, the most
     starts): the goal is at most ``rate + burst``, the GCRA bound for 1 s;
   * the backlog must not have run out inside the window (else the figures say
     nothing about the limit).

The figures are printed either way; the exit status is 1 when a goal is missed. Options:
``--seconds`` (shorter runs: the rate goal stays 5 %, which the burst's share of a short
window may blur), ``--bursts 1,10`` (0 stands for the default), ``--rate``,
``--workers``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import taskrunner
from taskrunner.errors import BackendError
from taskrunner_backends.redis.queue import open_from_url
from tests.servers import RedisServer, find_server_binary

from .driver import say

__all__ = ["RateFigures", "main", "make_app", "max_in_window", "rate_figures"]

REPO = Path(__file__).resolve().parents[2]
QUEUE = "soakrate"
START_SECONDS = 90.0
STOP_SECONDS = 30.0
TOLERANCE = 0.05


def make_app(rate: float, burst: int | None) -> tuple[taskrunner.App, taskrunner.Task[int]]:
    """The app of one run: one no-op task with the run's rate limit."""
    app = taskrunner.App(QUEUE)

    @app.task(name="tick", rate_limit=f"{rate:g}/s", rate_burst=burst)
    async def tick(n: int) -> None:
        started = time.monotonic()
        _Out.write(started)

    return app, tick


class _Out:
    fd = -1

    @classmethod
    def write(cls, started: float) -> None:
        # One write per line: a killed worker loses nothing that was written.
        os.write(cls.fd, f"{started:.6f} {time.monotonic():.6f}\n".encode())


async def worker_main(args: argparse.Namespace) -> None:
    """One worker process until SIGTERM."""
    _Out.fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    app, _ = make_app(args.rate, args.burst or None)
    queue = await open_from_url(f"{args.url}?namespace={args.namespace}", queue_name=app.queue)
    config = taskrunner.RunnerConfig(
        num_fetchers=1, num_workers=32, batch_size=10, block_seconds=1.0, lease_seconds=30.0
    )
    runner = taskrunner.Runner(queue, app, config)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, runner.stop)
    try:
        run = asyncio.create_task(runner.run())
        await runner.wait_ready()
        sys.stdout.buffer.write(b"ready\n")
        sys.stdout.buffer.flush()
        await run
    finally:
        await queue.aclose()
        os.close(_Out.fd)


def max_in_window(times: Sequence[float], window: float = 1.0) -> int:
    """The most of the sorted `times` in any half-open interval ``[t, t + window)``."""
    best = 0
    for i, t in enumerate(times):
        best = max(best, bisect.bisect_left(times, t + window, lo=i) - i)
    return best


@dataclass(frozen=True)
class RateFigures:
    """One run's figures and goals."""

    rate: float
    burst: int
    seconds: float
    completions: int
    max_completions_1s: int
    max_starts_1s: int
    backlog_left: int
    gap_median_ms: float = 0.0
    gap_p90_ms: float = 0.0

    @property
    def per_second(self) -> float:
        """Completions per second over the window."""
        return self.completions / self.seconds

    @property
    def misses(self) -> list[str]:
        """The goals missed, in words."""
        missed = []
        if abs(self.per_second - self.rate) > TOLERANCE * self.rate:
            missed.append(
                f"{self.per_second:.1f}/s is not within {TOLERANCE:.0%} of {self.rate:g}/s"
            )
        if self.max_completions_1s > self.rate + self.burst:
            missed.append(
                f"{self.max_completions_1s} completions in 1 s > {self.rate:g} + {self.burst}"
            )
        if self.backlog_left <= 0:
            missed.append("the backlog ran out: the limit did not bind throughout")
        return missed

    def describe(self) -> str:
        """One block of figures for people."""
        verdict = "ok" if not self.misses else "MISSED: " + "; ".join(self.misses)
        return "\n".join(
            [
                f"rate_limit={self.rate:g}/s, rate_burst={self.burst}: {self.seconds:g} s window",
                f"  completions/s            {self.per_second:.1f} (goal {self.rate:g} "
                f"+- {TOLERANCE:.0%}; {self.completions} completions)",
                f"  max in a 1 s window      {self.max_completions_1s} completions, "
                f"{self.max_starts_1s} starts (goal <= {self.rate + self.burst:g})",
                f"  gaps between starts      median {self.gap_median_ms:.1f} ms, p90 "
                f"{self.gap_p90_ms:.1f} ms (the rate's interval: {1000 / self.rate:g} ms)",
                f"  backlog left             {self.backlog_left}",
                f"  verdict                  {verdict}",
            ]
        )


def rate_figures(
    lines: Sequence[tuple[float, float]],
    *,
    rate: float,
    burst: int,
    seconds: float,
    backlog_left: int,
) -> RateFigures:
    """Judge the (start, completion) times of every task of one run."""
    completions = sorted(end for _, end in lines)
    starts = sorted(start for start, _ in lines)
    first = completions[0] if completions else 0.0
    window = [t for t in completions if first <= t < first + seconds]
    # With burst 1 an admission late by d pushes every later one by d: the gaps say how late.
    gaps = [1000 * (b - a) for a, b in itertools.pairwise(starts)]
    deciles = statistics.quantiles(gaps, n=10) if len(gaps) >= 2 else [0.0] * 9
    return RateFigures(
        rate=rate,
        burst=burst,
        seconds=seconds,
        completions=len(window),
        max_completions_1s=max_in_window(completions),
        max_starts_1s=max_in_window(starts),
        backlog_left=backlog_left,
        gap_median_ms=statistics.median(gaps) if gaps else 0.0,
        gap_p90_ms=deciles[8],
    )


def _read(directory: Path) -> list[tuple[float, float]]:
    lines = []
    for path in sorted(directory.glob("*.times")):
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) == 2:  # a line cut short by a crash is skipped
                lines.append((float(fields[0]), float(fields[1])))
    return lines


async def one_run(
    url: str, directory: Path, *, rate: float, burst: int | None, seconds: float, workers: int
) -> RateFigures:
    """Fill a fresh queue, run `workers` worker processes for `seconds`, judge them."""
    namespace = f"soakrate-{uuid.uuid4().hex[:8]}"
    app, tick = make_app(rate, burst)
    backlog = round(1.25 * rate * seconds) + 500
    queue = await open_from_url(f"{url}?namespace={namespace}", queue_name=app.queue)
    processes: list[asyncio.subprocess.Process] = []
    try:
        producer = taskrunner.Producer(queue, app)
        for first in range(0, backlog, 2000):
            await producer.dispatch_many(tick, range(first, min(backlog, first + 2000)))
        run_dir = directory / namespace
        run_dir.mkdir()
        for w in range(workers):
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.soak.flow_rate",
                "--worker",
                "--url",
                url,
                "--namespace",
                namespace,
                "--rate",
                f"{rate:g}",
                "--burst",
                str(burst or 0),
                "--out",
                str(run_dir / f"worker-{w}.times"),
                cwd=REPO,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            processes.append(process)
        for process in processes:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), START_SECONDS)
            if line != b"ready\n":
                raise RuntimeError(f"a worker did not start (said {line!r})")
        # A timed run, not a wait for concurrency: the window is this long.
        await asyncio.sleep(seconds + 1.0)
        try:
            left = await queue.len()
        except BackendError:
            left = -1
        for process in processes:
            os.kill(process.pid, signal.SIGTERM)
        for process in processes:
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
    finally:
        for process in processes:
            if process.returncode is None:
                os.kill(process.pid, signal.SIGKILL)
                await process.wait()
        admin = queue.admin
        if admin is not None:
            await admin.delete_queue()
        await queue.aclose()
    return rate_figures(
        _read(run_dir), rate=rate, burst=burst or 1, seconds=seconds, backlog_left=left
    )


async def run_all(args: argparse.Namespace) -> list[RateFigures]:
    bursts = [int(b) for b in args.bursts.split(",")]
    with tempfile.TemporaryDirectory(prefix="taskrunner-soak-rate-") as tmp:
        directory = Path(tmp)
        server = RedisServer(find_server_binary("auto"), directory=directory / "redis")
        (directory / "redis").mkdir()
        await asyncio.to_thread(server.start)
        try:
            results = []
            for burst in bursts:
                figures = await one_run(
                    server.url,
                    directory,
                    rate=args.rate,
                    burst=burst or None,
                    seconds=args.seconds,
                    workers=args.workers,
                )
                say(figures.describe())
                results.append(figures)
            return results
        finally:
            await asyncio.to_thread(server.stop)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak.flow_rate", description="Rate-limit accuracy on Redis."
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="the window of each run")
    parser.add_argument("--bursts", default="0,10", help="comma-separated; 0 = the default")
    parser.add_argument("--rate", type=float, default=100.0, help="the limit, per second")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    # The worker's command line.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--burst", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rate checks (or, with ``--worker``, one worker); returns the exit status."""
    args = _parser().parse_args(argv)
    if args.worker:
        asyncio.run(worker_main(args))
        return 0
    say(
        f"soak-flow-rate: {args.workers} workers, rate_limit={args.rate:g}/s, "
        f"bursts {args.bursts}, {args.seconds:g} s each"
    )
    results = asyncio.run(run_all(args))
    missed = [r for r in results if r.misses]
    say("soak-flow-rate: " + ("ok" if not missed else f"MISSED in {len(missed)} run(s)"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
