"""``taskrunner demo``: a producer and a worker on one backend, with live progress.

Internal module behind the CLI. It dispatches a few thousand tasks of varied
duration (async and sync, some failing transiently and retried, a few failing for
good and dead-lettered), runs a worker in burst mode until the queue is empty, and
prints a live progress line and a final summary.

It works on any backend: ``taskrunner demo --url redis://127.0.0.1:6379/0``. Each run
uses a queue of its own (``demo-`` plus a random suffix), so two demos on one server
never mix, and deletes that queue (messages, dead letters, consumers, worker entries:
every key) when it ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import msgspec

from taskrunner.app import App
from taskrunner.backends import DEFAULT_URL, open_queue
from taskrunner.config import RunnerConfig
from taskrunner.context import current_task
from taskrunner.errors import BackendError
from taskrunner.producer import Producer
from taskrunner.queue import Queue
from taskrunner.redaction import mask_url
from taskrunner.runner import Runner
from taskrunner.stats import RunnerStats

__all__ = ["DemoSummary", "run_demo"]


class Image(msgspec.Struct, frozen=True):
    """Payload of the demo's async task."""

    name: str
    width: int


class Email(msgspec.Struct, frozen=True):
    """Payload of the demo's sync task."""

    to: str
    # The first `fail_attempts` attempts raise, to show retries (3+ is never delivered).
    fail_attempts: int = 0


def build_app(queue: str = "demo") -> App:
    """The demo's tasks: one async (simulated I/O), one sync (runs in a thread)."""
    app = App(queue)

    @app.task(name="demo.resize_image", max_retries=2)
    async def resize_image(image: Image) -> None:
        await asyncio.sleep(random.uniform(0.01, 0.1))

    @app.task(name="demo.send_email", max_retries=2)
    def send_email(email: Email) -> None:
        time.sleep(random.uniform(0.002, 0.02))
        if current_task().delivery_count <= email.fail_attempts:
            raise ConnectionError(f"SMTP server refused {email.to} (simulated)")

    return app


@dataclass(frozen=True)
class DemoSummary:
    """What the demo did.

    Attributes:
        dispatched: Tasks dispatched.
        seconds: Wall time from the first dispatch to the empty queue.
        stats: The worker's final statistics.
    """

    dispatched: int
    seconds: float
    stats: RunnerStats

    @property
    def per_second(self) -> float:
        """Messages finished (succeeded or dead-lettered) per second."""
        finished = self.stats.succeeded + self.stats.dead_lettered
        return finished / self.seconds if self.seconds > 0 else 0.0


async def run_demo(
    *,
    url: str = DEFAULT_URL,
    tasks: int = 3000,
    num_workers: int = 64,
    retry_base_seconds: float = 0.05,
    out: TextIO | None = None,
    on_runner: Callable[[Runner], None] | None = None,
) -> DemoSummary:
    """Dispatch `tasks` tasks to `url`, process them with a burst worker, report progress.

    Args:
        url: Backend URL.
        tasks: How many tasks to dispatch (half async, half sync).
        num_workers: Worker pool size.
        retry_base_seconds: Backoff before the first retry (short, so the demo is quick).
        out: Where progress and the summary go.
        on_runner: Called with the runner once it exists (the CLI uses it to stop
            the runner on a signal).
    """
    out = sys.stdout if out is None else out
    app = build_app(f"demo-{secrets.token_hex(4)}")
    images = [Image(name=f"img-{i}.png", width=640 + i % 7) for i in range(tasks // 2)]
    emails = [
        # 1 in 10 fails once (retried), 1 in 100 always fails (dead-lettered).
        Email(to=f"user{i}@example.com", fail_attempts=3 if i % 100 == 7 else int(i % 10 == 3))
        for i in range(tasks - len(images))
    ]
    config = RunnerConfig(
        num_fetchers=2,
        num_workers=num_workers,
        batch_size=num_workers,
        block_seconds=0.2,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_base_seconds * 4,
        lease_seconds=30,
        reclaim_interval_seconds=0.5,
    )
    async with open_queue(url, app.queue) as queue:
        try:
            started = time.perf_counter()
            producer = Producer(queue, app)
            await producer.dispatch_many("demo.resize_image", images)
            await producer.dispatch_many("demo.send_email", emails)
            print(f"dispatched {tasks} tasks to {app.queue!r} on {mask_url(url)}", file=out)
            runner = Runner(queue, app, config)
            if on_runner is not None:
                on_runner(runner)
            work = asyncio.create_task(runner.run(burst=True))
            live = out.isatty()
            while not work.done():
                await asyncio.wait({work}, timeout=0.2 if live else 1.0)
                _progress(runner.stats(), tasks, time.perf_counter() - started, out, live=live)
            await work
            summary = DemoSummary(tasks, time.perf_counter() - started, runner.stats())
        finally:
            await _clean_up(queue)
    if live:
        print(file=out)
    _report(summary, out)
    return summary


async def _clean_up(queue: Queue) -> None:
    """Leave nothing of this run behind on a shared backend.

    No message, no dead letter, and no empty stream, consumer group or worker entry
    either: `QueueAdmin.delete_queue` removes every key of the queue.
    """
    admin = queue.admin
    if admin is None:
        return
    # The demo's own result matters more; an unreachable server keeps its keys.
    with contextlib.suppress(BackendError):
        await admin.delete_queue()


def _progress(stats: RunnerStats, total: int, seconds: float, out: TextIO, *, live: bool) -> None:
    done = stats.succeeded + stats.dead_lettered
    line = (
        f"{done:>6}/{total} done  {stats.busy:>3} running  {stats.retried:>4} retried  "
        f"{stats.dead_lettered:>3} dead-lettered  {done / max(seconds, 1e-9):>8.0f}/s"
    )
    print(f"\r{line}" if live else line, end="" if live else "\n", file=out, flush=True)


def _report(summary: DemoSummary, out: TextIO) -> None:
    stats = summary.stats
    print(
        "\n".join(
            [
                "summary",
                f"  dispatched     {summary.dispatched}",
                f"  processed      {stats.succeeded + stats.dead_lettered}",
                f"  succeeded      {stats.succeeded}",
                f"  failed         {stats.failed} attempt(s)",
                f"  retried        {stats.retried}",
                f"  dead-lettered  {stats.dead_lettered}",
                f"  wall time      {summary.seconds:.2f}s",
                f"  throughput     {summary.per_second:.0f} tasks/s",
            ]
        ),
        file=out,
    )
