"""Runner.skip_drain: async tasks cancelled at once, plain def tasks still waited for."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from taskrunner import Producer, Runner
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, eventually, make


async def test_skip_drain_cancels_async_tasks_and_waits_for_threads_with_their_leases(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskrunner")
    queue = InMemoryQueue()
    app, _ = make(FakeClock())
    thread_started = threading.Event()
    release = threading.Event()
    async_started = asyncio.Event()

    @app.task(name="t.blocking", max_retries=0)
    def blocking() -> None:
        thread_started.set()
        release.wait(10)

    @app.task(name="t.sleeping", max_retries=0)
    async def sleeping() -> None:
        async_started.set()
        await asyncio.sleep(3600)

    producer = Producer(queue, app)
    await producer.dispatch(blocking)
    await producer.dispatch(sleeping)
    runner = Runner(queue, app, config(drain_timeout_seconds=3600, block_seconds=0.05))
    run = asyncio.create_task(runner.run())
    await asyncio.to_thread(thread_started.wait, 10)
    await asyncio.wait_for(async_started.wait(), 10)
    assert runner.threads_running == ["t.blocking"]

    runner.stop()
    await eventually(lambda: "draining 2 running task(s)" in caplog.text)
    runner.skip_drain()
    await eventually(lambda: "waiting for 1 plain-def task(s)" in caplog.text)

    # The async task was cancelled and released; the thread's message stays leased.
    assert "cancelling 1 async task(s) still running" in caplog.text
    assert "to return: t.blocking; their leases are kept" in caplog.text
    assert not run.done()
    assert len(queue.in_flight()) == 1
    assert len(queue.ready_bodies()) == 1
    release.set()
    await asyncio.wait_for(run, 10)

    assert runner.threads_running == []
    assert len(queue.in_flight()) == 0  # acked
    assert len(queue.ready_bodies()) == 1  # the released async one


async def test_stop_after_skip_drain_leaves_the_thread_and_names_it() -> None:
    queue = InMemoryQueue()
    app, _ = make(FakeClock())
    started = threading.Event()
    release = threading.Event()

    @app.task(name="t.blocking")
    def blocking() -> None:
        started.set()
        release.wait(10)

    await Producer(queue, app).dispatch(blocking)
    runner = Runner(queue, app, config(drain_timeout_seconds=3600, block_seconds=0.05))
    run = asyncio.create_task(runner.run())
    await asyncio.to_thread(started.wait, 10)
    runner.stop()
    runner.skip_drain()
    runner.stop()
    await asyncio.wait_for(run, 10)
    try:
        assert runner.threads_running == ["t.blocking"]
        assert len(queue.in_flight()) == 1  # left to lapse, never handed out meanwhile
    finally:
        release.set()
    await eventually(lambda: runner.threads_running == [])


async def test_only_async_tasks_are_counted_as_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = InMemoryQueue()
    app, _ = make(FakeClock())
    started = threading.Event()
    release = threading.Event()

    @app.task(name="t.blocking", max_retries=0)
    def blocking() -> None:
        started.set()
        release.wait(10)

    await Producer(queue, app).dispatch(blocking)
    runner = Runner(queue, app, config(drain_timeout_seconds=0.05, block_seconds=0.05))
    run = asyncio.create_task(runner.run())
    await asyncio.to_thread(started.wait, 10)
    runner.stop()
    await eventually(lambda: "waiting for 1 plain-def task(s)" in caplog.text)
    release.set()
    await asyncio.wait_for(run, 10)

    assert "async task(s) still running" not in caplog.text
