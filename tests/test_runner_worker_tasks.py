"""No worker task outlives `Runner.run`, and a worker's fatal error ends it.

The task group that owns every worker task gives this; these tests pin it: a worker's
non-`Exception` error ends `run` with that error, and when `run` ends with an error,
the workers still running are cancelled (their messages released) before `run`
returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from taskrunner import Delivery, Producer, Runner
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, make


class _Fatal(BaseException):
    """Not an Exception: the executor does not treat it as a task failure."""


def _others() -> set[asyncio.Task[object]]:
    current = asyncio.current_task()
    return {task for task in asyncio.all_tasks() if task is not current}


async def test_a_worker_raising_a_base_exception_ends_run_with_it_and_nothing_outlives() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    started: list[int] = []

    @app.task
    async def job(n: int) -> None:
        started.append(n)
        if n == 0:
            # Let the sleepers start first, so there is something left to cancel.
            await clock.sleep(1)
            raise _Fatal("boom")
        await clock.sleep(1000)

    await Producer(queue, app, clock=clock).dispatch_many(job, range(4))
    before = _others()
    runner = Runner(queue, app, config(num_workers=4), clock=clock)
    run = asyncio.create_task(runner.run())
    await clock.run_until(lambda: len(started) == 4, step=0.1, limit=5)
    await clock.run_until(run.done, step=0.5, limit=10)

    with pytest.raises(BaseExceptionGroup) as caught:
        await run
    assert caught.group_contains(_Fatal, match="boom")
    assert _others() == before  # no worker (nor any loop) left running
    # The three sleepers were cancelled and gave their messages back; the one that
    # raised left its message leased (its outcome was never settled).
    assert len(queue.ready_bodies()) == 3
    assert len(queue.in_flight()) == 1


async def test_workers_waiting_for_a_crashed_acker_are_cancelled_not_left_hanging() -> None:
    clock = FakeClock()
    app, store = make(clock)
    finished: list[int] = []

    class AckBreaks(InMemoryQueue):
        async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
            raise _Fatal("ack broke")

    queue = AckBreaks._on_store(store._store)

    @app.task
    async def job(n: int) -> None:
        if n:
            await clock.sleep(1000)  # still running when the acker crashes
        finished.append(n)

    await Producer(queue, app, clock=clock).dispatch_many(job, range(3))
    before = _others()
    runner = Runner(queue, app, config(num_workers=3), clock=clock)
    run = asyncio.create_task(runner.run())
    await clock.run_until(run.done, step=0.5, limit=10)

    with pytest.raises(BaseExceptionGroup) as caught:
        await run
    assert caught.group_contains(_Fatal, match="ack broke")
    assert finished == [0]
    assert _others() == before
    # The sleepers were cancelled and released; the finished one's ack never applied.
    assert len(queue.ready_bodies()) == 2
    assert len(queue.in_flight()) == 1
