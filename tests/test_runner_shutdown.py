"""Graceful shutdown: stop fetching, drain, release the rest; nothing is lost."""

from __future__ import annotations

import asyncio

import pytest

from taskrunner import Producer, Runner, current_task
from taskrunner.testing import FakeClock

from .support import config, make, run_burst, running


async def test_shutdown_during_long_tasks_loses_nothing() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    finished: list[int] = []
    first_attempts: set[int] = set()

    # An attempt cut short at shutdown counts as a delivery (the backend cannot tell
    # it from a crash), so the task needs one retry to spare.
    @app.task(max_retries=1)
    async def long_job(n: int) -> None:
        if current_task().delivery_count == 1:
            first_attempts.add(n)
            # Outlives the drain timeout: cancelled at shutdown, released, redone later.
            await clock.sleep(60 if n % 2 else 2)
        finished.append(n)

    await Producer(queue, app, clock=clock).dispatch_many(long_job, range(20))
    runner = Runner(queue, app, config(num_workers=6, drain_timeout_seconds=5), clock=clock)
    run = asyncio.create_task(runner.run())
    await runner.wait_ready()
    await clock.run_until(lambda: runner.pool.busy == 6, step=0.5, limit=5)
    runner.stop()
    await clock.run_until(run.done, step=0.5, limit=30)
    await run
    assert queue.in_flight() == {}  # everything running was acked or released

    await run_burst(Runner(queue.open_handle(), app, config(num_workers=6), clock=clock), clock)

    assert sorted(finished) == list(range(20))
    assert queue.dead_letters() == []  # cancelled attempts gave their message back unharmed
    assert await queue.len() == 0


async def test_tasks_that_finish_within_the_drain_timeout_are_acked() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    finished: list[int] = []

    @app.task
    async def job(n: int) -> None:
        await clock.sleep(3)
        finished.append(n)

    await Producer(queue, app, clock=clock).dispatch_many(job, range(10))
    runner = Runner(queue, app, config(num_workers=4, drain_timeout_seconds=5), clock=clock)
    run = asyncio.create_task(runner.run())
    await clock.run_until(lambda: runner.pool.busy == 4, step=0.5, limit=5)
    runner.stop()
    await clock.run_until(run.done, step=0.5, limit=30)

    assert len(finished) == 4  # the four running ones finished; nothing new started
    assert await queue.len() == 6
    assert len(queue.ready_bodies()) == 6


async def test_second_stop_skips_the_drain() -> None:
    clock = FakeClock()
    app, queue = make(clock)

    @app.task
    async def job() -> None:
        await clock.sleep(1000)

    await Producer(queue, app, clock=clock).dispatch(job)
    runner = Runner(queue, app, config(drain_timeout_seconds=500), clock=clock)
    run = asyncio.create_task(runner.run())
    await clock.run_until(lambda: runner.pool.busy == 1, step=0.5, limit=5)
    runner.stop()
    await clock.advance(1)
    assert not run.done()
    runner.stop()
    await clock.run_until(run.done, step=0.5, limit=5)

    assert len(queue.ready_bodies()) == 1


async def test_run_twice_is_refused() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    runner = Runner(queue, app, config(), clock=clock)
    async with running(runner):
        pass

    with pytest.raises(RuntimeError, match="runs once"):
        await runner.run()


async def test_cancelling_run_releases_running_messages() -> None:
    clock = FakeClock()
    app, queue = make(clock)

    @app.task
    async def job(n: int) -> None:
        await clock.sleep(1000)

    await Producer(queue, app, clock=clock).dispatch_many(job, range(3))
    runner = Runner(queue, app, config(), clock=clock)
    run = asyncio.create_task(runner.run())
    await clock.run_until(lambda: runner.pool.busy == 3, step=0.5, limit=5)
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)

    assert queue.in_flight() == {}
    assert len(queue.ready_bodies()) == 3
