"""Tuning mode on Redis: the pool grows under a backlog and shrinks back when it drains."""

from __future__ import annotations

import asyncio

import pytest

from taskrunner import App, Producer, Runner, RunnerConfig, TuningConfig

from .helpers import eventually, open_queue

pytestmark = pytest.mark.redis


async def test_pool_grows_under_a_backlog_and_shrinks_to_min_when_it_drains(
    redis_url: str, redis_namespace: str
) -> None:
    app = App("q")
    done: list[int] = []

    @app.task
    async def work(n: int) -> None:
        await asyncio.sleep(0.02)
        done.append(n)

    tuning = TuningConfig(
        min_workers=1,
        max_workers=30,
        desired_wait_seconds=0.1,
        wait_tolerance_seconds=0.05,
        cooldown_seconds=0,
    )
    config = RunnerConfig(
        num_workers=1,
        batch_size=10,
        block_seconds=0.1,
        lease_seconds=10,
        monitor_interval_seconds=0.1,
        tuning=tuning,
    )
    producer_queue = open_queue(redis_url, redis_namespace)
    worker_queue = open_queue(redis_url, redis_namespace)
    runner = Runner(worker_queue, app, config)
    sizes: list[int] = []
    try:
        await Producer(producer_queue, app).dispatch_many(work, range(1500))
        run = asyncio.create_task(runner.run())

        async def size() -> int:
            sizes.append(runner.pool.capacity)
            return len(done)

        await eventually(size, lambda finished: finished == 1500, what="all tasks ran", within=60)
        await eventually(
            lambda: asyncio.sleep(0, runner.pool.capacity),
            lambda capacity: capacity == tuning.min_workers,
            what="the pool shrinks back to min_workers",
            within=30,
        )
        runner.stop()
        await run
    finally:
        await producer_queue.aclose()
        await worker_queue.aclose()

    assert max(sizes) >= 5  # it grew from 1 under the backlog
    assert sorted(done) == list(range(1500))
