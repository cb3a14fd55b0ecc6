"""Leases under the runner: heartbeats keep long tasks, lapsed leases get reclaimed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from taskrunner import Delivery, Producer, Runner
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import LEASE, BlockingHeartbeatQueue, config, make, running


class _NoHeartbeatQueue(InMemoryQueue):
    """A handle whose heartbeats pretend to succeed but extend nothing."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        return []


class _RestartedWithoutPersistenceQueue(InMemoryQueue):
    """A handle whose backend forgot every lease, as Redis does restarted without persistence."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        return list(deliveries)


async def _ten_lease_task(*, keeper_works: bool) -> tuple[list[str], InMemoryQueue]:
    clock = FakeClock()
    app, queue = make(clock)
    finish = asyncio.Event()
    runs: list[str] = []

    @app.task(max_retries=5)
    async def long_job() -> None:
        from taskrunner import current_task

        runs.append(current_task().consumer)
        await finish.wait()

    handle_a = queue.open_handle()
    if not keeper_works:
        handle_a = _NoHeartbeatQueue._on_store(queue._store)
    runner_a = Runner(handle_a, app, config(), clock=clock)
    runner_b = Runner(queue.open_handle(), app, config(), clock=clock)
    async with running(runner_a):
        await Producer(queue, app, clock=clock).dispatch(long_job)
        await clock.run_until(lambda: len(runs) == 1, step=0.5, limit=5)
        async with running(runner_b):
            for _ in range(int(10 * LEASE)):
                await clock.advance(1.0)
            finish.set()
            await clock.run_until(lambda: not queue.in_flight(), step=0.5, limit=20)
    return runs, queue


async def test_task_running_ten_leases_while_heartbeating_is_never_delivered_twice() -> None:
    runs, queue = await _ten_lease_task(keeper_works=True)

    assert len(runs) == 1
    assert await queue.len() == 0
    assert queue.dead_letters() == []


async def test_without_working_heartbeats_the_same_task_is_stolen() -> None:
    # The control case: proves the test above can fail.
    runs, _ = await _ten_lease_task(keeper_works=False)

    assert len(runs) > 1


async def test_message_of_a_vanished_worker_is_completed_by_another_after_the_lease() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    started = asyncio.Event()
    completed: list[int] = []

    @app.task(max_retries=1)
    async def job() -> None:
        from taskrunner import current_task

        count = current_task().delivery_count
        if count == 1:
            started.set()
            await asyncio.Event().wait()  # hangs until its worker vanishes
        completed.append(count)

    doomed_handle = queue.open_handle()
    doomed = Runner(doomed_handle, app, config(), clock=clock)
    doomed_task = asyncio.create_task(doomed.run())
    await doomed.wait_ready()
    await Producer(queue, app, clock=clock).dispatch(job)
    await clock.run_until(started.is_set, step=0.5, limit=5)

    # The worker vanishes: its connection is gone and its tasks die with it.
    await doomed_handle.aclose()
    doomed_task.cancel()
    await asyncio.gather(doomed_task, return_exceptions=True)
    assert len(queue.in_flight()) == 1

    survivor = Runner(queue.open_handle(), app, config(), clock=clock)
    async with running(survivor):
        elapsed = await clock.run_until(lambda: completed == [2], step=0.5, limit=3 * LEASE)

    assert elapsed > LEASE
    assert await queue.len() == 0
    assert survivor.stats().reclaimed == 1


async def test_lease_reported_lost_is_not_acked_and_is_counted() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    stalled = BlockingHeartbeatQueue(queue)
    started = asyncio.Event()
    finish = asyncio.Event()
    owners: list[str] = []

    @app.task(max_retries=3)
    async def job() -> None:
        from taskrunner import current_task

        owners.append(current_task().consumer)
        started.set()
        await finish.wait()

    slow = Runner(stalled, app, config(), clock=clock)
    async with running(slow):
        await Producer(queue, app, clock=clock).dispatch(job)
        await clock.run_until(started.is_set, step=0.5, limit=5)
        stalled.gate.clear()  # the slow worker's heartbeats stop getting through
        other = Runner(queue.open_handle(), app, config(), clock=clock)
        async with running(other):
            await clock.run_until(lambda: len(owners) == 2, step=0.5, limit=3 * LEASE)
            new_owner = queue.in_flight()
            stalled.gate.set()  # the stalled heartbeat now reaches the backend
            await clock.run_until(lambda: slow.stats().lease_lost == 1, step=0.5, limit=LEASE)
            finish.set()
            await clock.run_until(lambda: not queue.in_flight(), step=0.5, limit=LEASE)
            assert other.stats().succeeded == 1

    assert next(iter(new_owner.values()))[0] == owners[1]
    assert slow.stats().lease_lost == 1
    assert slow.stats().succeeded == 1  # it ran to the end ...
    assert await queue.len() == 0  # ... but only the new owner's ack completed the message
    assert queue.dead_letters() == []


async def test_lease_lost_warning_names_the_task(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="taskrunner.heartbeat")
    clock = FakeClock()
    app, queue = make(clock)
    started = asyncio.Event()
    finish = asyncio.Event()

    @app.task
    async def send_invoice() -> None:
        started.set()
        await finish.wait()

    runner = Runner(
        _RestartedWithoutPersistenceQueue._on_store(queue._store), app, config(), clock=clock
    )
    async with running(runner):
        await Producer(queue, app, clock=clock).dispatch(send_invoice)
        await clock.run_until(started.is_set, step=0.5, limit=5)
        await clock.run_until(lambda: runner.stats().lease_lost == 1, step=0.5, limit=LEASE)
        finish.set()

    [record] = [r for r in caplog.records if r.getMessage().startswith("lease lost")]
    assert record.__dict__["task"] == send_invoice.name


async def test_one_heartbeat_call_per_tick_covers_every_lease() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    calls: list[int] = []

    class Counting(InMemoryQueue):
        async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
            calls.append(len(deliveries))
            return await super().heartbeat(deliveries)

    finish = asyncio.Event()

    @app.task
    async def job(n: int) -> None:
        await finish.wait()

    runner = Runner(Counting._on_store(queue._store), app, config(num_workers=8), clock=clock)
    async with running(runner):
        await Producer(queue, app, clock=clock).dispatch_many(job, range(8))
        await clock.run_until(lambda: runner.pool.busy == 8, step=0.5, limit=5)
        calls.clear()
        heartbeat = runner.config.heartbeat_interval_seconds
        assert heartbeat is not None
        await clock.advance(heartbeat * 3)
        finish.set()

    assert calls == [8, 8, 8]


async def test_no_lease_keeper_when_the_queue_needs_no_heartbeats() -> None:
    clock = FakeClock()
    app, queue = make(clock, requires_heartbeat=False)
    calls: list[int] = []

    class Counting(InMemoryQueue):
        async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
            calls.append(len(deliveries))
            return []

    finish = asyncio.Event()

    @app.task
    async def job() -> None:
        await finish.wait()

    runner = Runner(Counting._on_store(queue._store), app, config(), clock=clock)
    async with running(runner):
        await Producer(queue, app, clock=clock).dispatch(job)
        await clock.advance(5 * LEASE)
        finish.set()
        await clock.run_until(lambda: not queue.in_flight(), step=0.5, limit=5)

    assert calls == []
    assert await queue.len() == 0


async def test_short_lease_runner_never_takes_a_task_heartbeated_by_a_long_lease_runner() -> None:
    # Runner A grants itself 9 s leases and heartbeats every 3 s; runner B on the same
    # queue uses 1 s leases and reclaims every half second. B must judge A's message by
    # A's lease, so the task runs once over thirty seconds.
    clock = FakeClock()
    app, queue = make(clock)
    finish = asyncio.Event()
    runs: list[str] = []

    @app.task(max_retries=5)
    async def long_job() -> None:
        from taskrunner import current_task

        runs.append(current_task().consumer)
        await finish.wait()

    runner_a = Runner(
        queue.open_handle(),
        app,
        config(lease_seconds=9.0, heartbeat_interval_seconds=3.0, reclaim_interval_seconds=3.0),
        clock=clock,
    )
    runner_b = Runner(
        queue.open_handle(),
        app,
        config(lease_seconds=1.0, heartbeat_interval_seconds=0.25, reclaim_interval_seconds=0.5),
        clock=clock,
    )
    async with running(runner_a):
        await Producer(queue, app, clock=clock).dispatch(long_job)
        await clock.run_until(lambda: len(runs) == 1, step=0.5, limit=5)
        async with running(runner_b):
            for _ in range(60):
                await clock.advance(0.5)
            finish.set()
            await clock.run_until(lambda: not queue.in_flight(), step=0.5, limit=20)
        assert runner_b.stats().reclaimed == 0

    assert len(runs) == 1, f"ran {len(runs)} times: {runs}"
    assert runner_a.stats().lease_lost == 0
    assert await queue.len() == 0
