"""Graceful shutdown: stop fetching, drain, release the rest; nothing is lost."""

from __future__ import annotations

import asyncio
import threading

import msgspec
import pytest

from taskrunner import Capabilities, Delivery, Producer, Runner, current_task
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import LEASE, Flaky, Link, config, eventually, make, run_burst, running


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


class _SlowReceiveQueue(InMemoryQueue):
    """A handle whose receive cannot be cancelled safely and returns only when let go."""

    gate: asyncio.Event

    @property
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(super().capabilities, cancel_safe_receive=False)

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        await self.gate.wait()
        return await super().receive(
            consumer, max_messages=max_messages, wait_seconds=0, lease_seconds=lease_seconds
        )


async def test_messages_received_after_stop_are_run_not_charged_a_delivery() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    ran: list[int] = []

    @app.task(max_retries=0)
    async def job(n: int) -> None:
        ran.append(current_task().delivery_count)

    await Producer(queue, app, clock=clock).dispatch_many(job, range(3))
    slow = _SlowReceiveQueue._on_store(queue._store)
    slow.gate = asyncio.Event()
    runner = Runner(slow, app, config(), clock=clock)
    run = asyncio.create_task(runner.run())
    await runner.wait_ready()
    runner.stop()  # a receive is in progress and cannot be cancelled
    await clock.advance(1)
    slow.gate.set()  # ... and returns three messages after shutdown began
    await clock.run_until(run.done, step=0.5, limit=30)
    await run

    assert ran == [1, 1, 1]
    assert queue.dead_letters() == []
    assert await queue.len() == 0


async def test_a_timed_async_task_cancelled_at_shutdown_does_not_outlive_the_runner() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    running_now = 0

    @app.task(timeout_seconds=300)
    async def job() -> None:
        nonlocal running_now
        running_now += 1
        try:
            await clock.sleep(100)
        finally:
            running_now -= 1

    await Producer(queue, app, clock=clock).dispatch(job)
    runner = Runner(queue, app, config(drain_timeout_seconds=1), clock=clock)
    run = asyncio.create_task(runner.run())
    await clock.run_until(lambda: running_now == 1, step=0.5, limit=5)
    runner.stop()
    await clock.run_until(run.done, step=0.5, limit=10)

    assert running_now == 0
    assert len(queue.ready_bodies()) == 1  # released, and nothing still runs it


async def test_a_hanging_long_queue_hook_does_not_keep_the_runner_from_stopping() -> None:
    clock = FakeClock()
    app, queue = make(clock)

    async def hook(predicted: float) -> None:
        await asyncio.Event().wait()

    @app.task
    async def job(n: int) -> None:
        await clock.sleep(1)

    runner = Runner(
        queue,
        app,
        config(
            num_workers=1,
            monitor_interval_seconds=1,
            long_queue_threshold_seconds=2,
            long_queue_hook=hook,
        ),
        clock=clock,
    )
    run = asyncio.create_task(runner.run())
    await Producer(queue, app, clock=clock).dispatch_many(job, range(40))
    await clock.advance(5)
    runner.stop()
    await clock.run_until(run.done, step=0.5, limit=30)

    await run


async def test_plain_def_tasks_are_waited_for_at_shutdown_and_acked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = InMemoryQueue()
    app, _ = make(FakeClock())
    started = threading.Event()
    release = threading.Event()

    @app.task(max_retries=0)
    def blocking() -> None:
        started.set()
        release.wait(10)

    await Producer(queue, app).dispatch(blocking)
    runner = Runner(queue, app, config(drain_timeout_seconds=0.05, block_seconds=0.05))
    run = asyncio.create_task(runner.run())
    await asyncio.to_thread(started.wait, 10)
    runner.stop()
    # Past the drain timeout, the thread cannot be cut short: shutdown waits for it.
    await eventually(lambda: "waiting for 1 plain-def task(s)" in caplog.text)
    assert not run.done()
    assert len(queue.in_flight()) == 1  # still leased, not released to run twice
    release.set()
    await asyncio.wait_for(run, 10)

    assert await queue.len() == 0


async def test_a_second_stop_leaves_a_running_thread_its_lease_instead_of_releasing() -> None:
    queue = InMemoryQueue()
    app, _ = make(FakeClock())
    started = threading.Event()
    release = threading.Event()

    @app.task
    def blocking() -> None:
        started.set()
        release.wait(10)

    await Producer(queue, app).dispatch(blocking)
    runner = Runner(queue, app, config(drain_timeout_seconds=0.05, block_seconds=0.05))
    run = asyncio.create_task(runner.run())
    await asyncio.to_thread(started.wait, 10)
    runner.stop()
    runner.stop()
    await asyncio.wait_for(run, 10)
    try:
        assert len(queue.in_flight()) == 1  # left to lapse, never handed out meanwhile
        assert queue.ready_bodies() == []
    finally:
        release.set()


async def test_a_finished_task_whose_ack_outlasts_the_drain_is_acked_not_run_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The backend goes away as a task finishes during a graceful stop.

    The drain timeout passes while its ack fails. The task's code is done, so there is
    nothing to cancel: the ack waits for the backend, the lease is heartbeated
    meanwhile, and once the backend is back the message is completed. (Cancelling the
    waiting worker dropped the ack: the message was redelivered after the lease and
    ran again, as the chaos soak found.)
    """
    clock = FakeClock()
    app, queue = make(clock)
    finish = asyncio.Event()
    runs: list[int] = []

    @app.task(max_retries=0)
    async def job(n: int) -> None:
        await finish.wait()
        runs.append(n)

    link = Link(clock)
    flaky = Flaky._on_store(queue._store)
    flaky.link = link
    runner = Runner(flaky, app, config(drain_timeout_seconds=2.0), clock=clock)
    await Producer(queue, app, clock=clock).dispatch(job, 7)
    run = asyncio.create_task(runner.run())
    await runner.wait_ready()
    await clock.run_until(lambda: runner.pool.busy == 1, step=0.5, limit=5)

    link.down = True
    finish.set()
    runner.stop()
    await clock.advance(2.0 + 3.0)  # past the drain timeout, well inside the lease
    assert not run.done(), "the runner stopped with an ack it never sent"
    assert "waiting for 1 ack(s), release(s) or dead-letter(s)" in caplog.text
    link.down = False
    await clock.run_until(run.done, step=0.1, limit=LEASE)
    await run

    assert runs == [7]
    assert await queue.len() == 0, "the finished message was not acked"
    await clock.advance(2 * LEASE)
    assert await queue.reclaim("other", lease_seconds=LEASE, max_messages=10) == []
    # Its lease was kept alive all along: the keeper went on heartbeating it.
    assert any(a.operation == "heartbeat" and a.size == 1 and not a.ok for a in link.attempts)
