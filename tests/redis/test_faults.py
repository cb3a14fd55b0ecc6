"""Faults: the server goes away in the middle of a run and comes back.

The server is a private one with ``appendonly yes`` and ``appendfsync always`` in a
temporary directory, killed with SIGKILL while a runner works through a backlog and
started again on the same port and data. Every loop of the runner backs off while it
is away and resumes when it is back; every task is completed exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import pytest

from taskrunner import App, Producer, Runner, RunnerConfig
from taskrunner.errors import BackendUnavailableError
from taskrunner.queue import QueueStats
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url

from ..servers import RedisServer
from .helpers import eventually

pytestmark = pytest.mark.redis

TASKS = 400

T = TypeVar("T")


async def test_server_killed_and_restarted_mid_run_loses_nothing_and_runs_nothing_twice(
    redis_server_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="taskrunner")
    server = redis_server_factory(appendonly=True, appendfsync="always")
    url = f"{server.url}?namespace=faults"
    app = App("q")
    runs: Counter[int] = Counter()

    @app.task(name="work")
    async def work(n: int) -> None:
        runs[n] += 1
        await asyncio.sleep(0.01)  # the task's own work, not a wait for anything

    producer_queue = await open_from_url(url, queue_name="q")
    worker_queue = await open_from_url(url, queue_name="q")
    # Heartbeats every 0.5 s of an 8 s lease: the outage (until a heartbeat has failed,
    # plus the restart) stays far shorter than a lease even on a loaded machine, so
    # nothing may be reclaimed while its first worker still holds it, and a second
    # run would be a bug.
    config = RunnerConfig(
        num_workers=10,
        batch_size=10,
        lease_seconds=8.0,
        heartbeat_interval_seconds=0.5,
        block_seconds=0.5,
    )
    runner = Runner(worker_queue, app, config)
    try:
        await Producer(producer_queue, app).dispatch_many(work, range(TASKS))
        run = asyncio.create_task(runner.run())
        await eventually(
            lambda: _now(len(runs)), lambda n: n >= TASKS // 4, what="a quarter of the tasks ran"
        )

        await asyncio.to_thread(server.stop, kill=True)
        # Down until the runner noticed: some loop failed and backs off. Which one is
        # up to timing: the acker when a task finished after the kill, the lease keeper
        # when a lease was still held, else the reclaimer or the monitor on their next
        # round (a fetcher whose workers all wait for acks has no capacity to receive).
        await eventually(
            lambda: _now(_failing_loops(caplog)),
            lambda loops: bool(loops),
            what="a loop of the runner fails and backs off while the server is away",
        )
        await asyncio.to_thread(server.restart)

        await eventually(
            lambda: _now(len(runs)), lambda n: n == TASKS, what="every task ran", within=30
        )
        stats = await eventually(
            lambda: _stats_or_none(producer_queue),
            lambda s: s is not None and s.ready == 0 and s.in_flight == 0,
            what="every task acked",
        )
        runner.stop()
        await run
    finally:
        runner.stop()
        await producer_queue.aclose()
        await worker_queue.aclose()

    assert sorted(runs) == list(range(TASKS))
    assert [n for n, count in runs.items() if count > 1] == []
    assert stats is not None
    assert stats.dead == 0
    assert runner.stats().succeeded == TASKS
    assert runner.stats().dead_lettered == 0


def _failing_loops(caplog: pytest.LogCaptureFixture) -> set[str]:
    return {
        record.name
        for record in caplog.records
        if record.name.startswith("taskrunner.") and record.levelno >= logging.WARNING
    }


async def _stats_or_none(queue: RedisStreamsQueue) -> QueueStats | None:
    try:
        return await queue.stats()
    except BackendUnavailableError:
        # A pooled connection from before the restart fails once; the next is fresh.
        return None


async def _now(value: T) -> T:
    return value
