"""run_until_idle: runs everything, in simulated time, and fails the test with the task's error."""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from collections.abc import Sequence

import msgspec
import pytest

from taskrunner import App, Delivery, Producer, RunnerConfig
from taskrunner.attempts import Outcome
from taskrunner.queue import Queue
from taskrunner.testing import FakeClock, IdleTimeoutError, run_until_idle
from taskrunner_backends.memory import InMemoryQueue


class Order(msgspec.Struct):
    sku: str
    quantity: int


async def fresh(app: App) -> tuple[FakeClock, Queue, Producer]:
    clock = FakeClock(autojump=True)
    queue = InMemoryQueue(clock=clock)
    return clock, queue, Producer(queue, app, clock=clock)


async def test_runs_every_dispatched_task_and_what_they_dispatch() -> None:
    app = App("kit")
    seen: list[str] = []
    clock, queue, producer = await fresh(app)

    @app.task
    async def ship(order: Order) -> None:
        seen.append(f"ship {order.sku}")

    @app.task
    async def place(order: Order) -> None:
        seen.append(f"place {order.sku}")
        await producer.dispatch(ship, order, delay=3600)

    await producer.dispatch(place, Order(sku="a", quantity=1))
    await producer.dispatch(place, Order(sku="b", quantity=2))
    record = await run_until_idle(app, queue, clock=clock)

    assert sorted(seen) == ["place a", "place b", "ship a", "ship b"]
    assert sorted(r.payload["sku"] for r in record.of(ship)) == ["a", "b"]
    assert record.of(place)[0].payload in ({"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 2})
    assert [r.task for r in record.succeeded].count(ship.name) == 2
    # The hour of delay passed in fake time only.
    assert record.fake_seconds >= 3600
    assert await queue.len() == 0


async def test_fail_fast_raises_the_tasks_own_exception_with_its_traceback() -> None:
    app = App("kit")
    clock, queue, producer = await fresh(app)
    raised: list[BaseException] = []

    @app.task(max_retries=2)
    async def broken(order: Order) -> None:
        error = LookupError(f"no such sku {order.sku}")
        raised.append(error)
        raise error

    await producer.dispatch(broken, Order(sku="zz", quantity=1))
    with pytest.raises(LookupError, match="no such sku zz") as caught:
        await run_until_idle(app, queue, clock=clock)

    # The last attempt's object (after both retries), not a copy or a wrapper.
    assert len(raised) == 3
    assert caught.value is raised[-1]
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "broken" in frames


async def test_a_task_raising_value_error_fails_the_test_with_that_value_error() -> None:
    # ValueError is also what the kit raises for a misuse (a queue without its clock):
    # the one raised here must be the task's own, from the task's frame.
    app = App("kit")
    clock, queue, producer = await fresh(app)

    @app.task
    async def parse(order: Order) -> None:
        raise ValueError(f"quantity {order.quantity} is not allowed")

    await producer.dispatch(parse, Order(sku="a", quantity=-1))
    with pytest.raises(ValueError, match="quantity -1 is not allowed") as caught:
        await run_until_idle(app, queue, clock=clock)

    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert frames[-1] == "parse"


async def test_without_fail_fast_the_record_shows_each_attempt() -> None:
    app = App("kit")
    clock, queue, producer = await fresh(app)

    @app.task(max_retries=3)
    async def flaky() -> None:
        raise RuntimeError("down")

    await producer.dispatch(flaky)
    record = await run_until_idle(
        app, queue, clock=clock, fail_fast=False, config=RunnerConfig(retry_base_seconds=60)
    )

    runs = record.of(flaky)
    assert [r.attempt for r in runs] == [1, 2, 3, 4]
    assert [r.outcome for r in runs] == [Outcome.RETRIED] * 3 + [Outcome.DEAD_LETTERED]
    assert all(isinstance(r.error, RuntimeError) for r in runs)
    assert all(r.payload is None for r in runs)
    # Equal jitter: retry n waits at least half of 60 * 2**(n-1), capped at 300.
    gaps = [b.fake_time - a.fake_time for a, b in itertools.pairwise(runs)]
    assert gaps[0] >= 30
    assert gaps[1] >= 60
    assert gaps[2] >= 120


async def test_a_retry_that_succeeds_does_not_fail_the_run() -> None:
    app = App("kit")
    clock, queue, producer = await fresh(app)
    calls: list[int] = []

    @app.task(max_retries=1)
    async def once_flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first time")

    await producer.dispatch(once_flaky)
    record = await run_until_idle(app, queue, clock=clock)

    assert [r.outcome for r in record.of(once_flaky)] == [Outcome.RETRIED, Outcome.SUCCEEDED]


async def test_stored_results_are_in_the_record() -> None:
    app = App("kit")
    clock, queue, producer = await fresh(app)

    @app.task(store_result=True)
    async def total(order: Order) -> int:
        return order.quantity * 3

    message_id = await producer.dispatch(total, Order(sku="a", quantity=7))
    record = await run_until_idle(app, queue, clock=clock)

    assert record.results == {message_id: 21}


async def test_an_empty_queue_returns_at_once_with_an_empty_record() -> None:
    app = App("kit")

    @app.task
    async def unused() -> None: ...

    record = await run_until_idle(app)

    assert record.runs == []
    assert record.fake_seconds == 0


async def test_waits_for_a_plain_def_tasks_thread_without_jumping_time() -> None:
    app = App("kit")
    clock, queue, producer = await fresh(app)
    release = threading.Event()
    clock_seen: list[float] = []

    @app.task
    def blocking() -> None:
        start = clock.monotonic()
        # Real time in a thread: while it runs, the loop is idle but time must not jump.
        release.wait(timeout=5)
        clock_seen.append(clock.monotonic() - start)

    await producer.dispatch(blocking)
    timer = threading.Timer(0.2, release.set)
    timer.start()
    try:
        record = await run_until_idle(app, queue, clock=clock)
    finally:
        timer.cancel()

    assert [r.outcome for r in record.runs] == [Outcome.SUCCEEDED]
    assert clock_seen == [0.0]


async def test_a_task_that_never_ends_times_out_in_real_time_naming_what_is_pending() -> None:
    app = App("kit")
    clock, queue, producer = await fresh(app)
    never = threading.Event()

    @app.task
    def stuck() -> None:
        never.wait(timeout=5)

    await producer.dispatch(stuck)
    started = time.monotonic()
    try:
        with pytest.raises(IdleTimeoutError, match="1 in flight") as caught:
            await run_until_idle(app, queue, clock=clock, timeout=0.3)
    finally:
        never.set()
    assert f"threads still running: {stuck.name}" in caught.value.pending
    assert time.monotonic() - started < 5


async def test_a_queue_without_its_clock_is_refused() -> None:
    app = App("kit")
    _, queue, _ = await fresh(app)
    with pytest.raises(ValueError, match="needs clock="):
        await run_until_idle(app, queue)
    with pytest.raises(ValueError, match="autojump"):
        await run_until_idle(app, queue, clock=FakeClock())


async def test_a_body_that_is_not_an_envelope_is_dead_lettered_and_recorded() -> None:
    app = App("kit")
    clock, queue, _ = await fresh(app)

    @app.task
    async def fine() -> None: ...

    await queue.add([b"\xff not an envelope"])
    record = await run_until_idle(app, queue, clock=clock, fail_fast=False)

    (run,) = record.runs
    assert (run.task, run.payload, run.outcome) == (None, None, Outcome.DEAD_LETTERED)
    assert await queue.len() == 0


async def test_fail_fast_fails_on_a_message_that_could_not_run() -> None:
    app = App("kit")
    clock, queue, _ = await fresh(app)

    @app.task
    async def fine() -> None: ...

    await queue.add([b'{"v":1,"id":"x","task":"nope","payload":null,"enqueued_at":0}'])
    with pytest.raises(AssertionError, match=r"failed without running: .*nope"):
        await run_until_idle(app, queue, clock=clock)


class _BackendBug(BaseException):
    """Not an Exception: the runner's acker lets it through and the runner ends."""


async def test_a_runner_that_ends_early_raises_its_error_at_once_not_after_the_timeout() -> None:
    app = App("kit")

    @app.task
    async def noop() -> None:
        pass

    class AckBreaks(InMemoryQueue):
        async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
            raise _BackendBug("ack broke")

    clock = FakeClock(autojump=True)
    queue = AckBreaks(clock=clock)
    await Producer(queue, app, clock=clock).dispatch(noop)
    started = time.monotonic()

    with pytest.raises(BaseExceptionGroup) as caught:
        await run_until_idle(app, queue, clock=clock, timeout=30)

    # The runner's own crash, not an IdleTimeoutError after 30 real seconds.
    assert caught.group_contains(_BackendBug, match="ack broke")
    assert time.monotonic() - started < 10
