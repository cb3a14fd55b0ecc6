"""What happens to each message: success, retries, failed handler, dead letters."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import pytest

from taskrunner import (
    Delivery,
    Producer,
    Runner,
    TaskFailure,
    current_task,
)
from taskrunner.testing import FakeClock, run_until_idle
from taskrunner_backends.memory import InMemoryQueue

from .support import config, eventually, make, run_burst, running


class Order(msgspec.Struct):
    sku: str
    quantity: int


@dataclass
class Item:
    name: str


@pytest.mark.parametrize("max_retries", [0, 1, 3])
async def test_failing_task_runs_exactly_max_retries_plus_one_times(max_retries: int) -> None:
    clock = FakeClock()
    app, queue = make(clock)
    attempts: list[int] = []
    failures: list[TaskFailure] = []

    @app.task(max_retries=max_retries)
    async def always_fails() -> None:
        attempts.append(current_task().delivery_count)
        raise RuntimeError("out of stock")

    def on_failure(failure: TaskFailure) -> None:
        failures.append(failure)

    await Producer(queue, app, clock=clock).dispatch(always_fails)
    runner = Runner(queue, app, config(failed_task_handler=on_failure), clock=clock)
    await run_burst(runner, clock)

    assert attempts == list(range(1, max_retries + 2))
    assert len(failures) == 1
    assert failures[0].delivery.delivery_count == max_retries + 1
    assert "RuntimeError: out of stock" in failures[0].reason
    assert isinstance(failures[0].error, RuntimeError)
    # The handler returned normally: the message is done, not dead-lettered.
    assert await queue.len() == 0
    assert queue.dead_letters() == []
    assert runner.stats().retried == max_retries
    assert runner.stats().handled == 1


async def test_retries_wait_an_exponential_backoff() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    times: list[float] = []

    @app.task(max_retries=3)
    async def flaky() -> None:
        times.append(clock.monotonic())
        raise RuntimeError("try later")

    await Producer(queue, app, clock=clock).dispatch(flaky)
    await run_until_idle(
        app, queue, clock=clock, fail_fast=False, config=config(retry_base_seconds=2.0)
    )

    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # Equal jitter: retry n waits between half and all of min(max, base * 2**(n-1)).
    assert [1.0 <= gaps[0] <= 2.5, 2.0 <= gaps[1] <= 4.5, 2.0 <= gaps[2] <= 4.5] == [True] * 3


async def test_last_failure_is_dead_lettered_with_the_reason_by_default() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task(max_retries=1)
    async def broken(order: Order) -> None:
        raise ValueError(f"cannot ship {order.sku}")

    await Producer(queue, app, clock=clock).dispatch(broken, Order(sku="x-1", quantity=2))
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    (dead,) = queue.dead_letters()
    assert dead.reason == "attempt 2 of 2 failed: ValueError: cannot ship x-1"
    assert dead.delivery_count == 2
    assert b'"sku":"x-1"' in dead.body


async def test_handler_that_raises_leads_to_a_dead_letter_not_a_loss() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task(max_retries=0)
    async def broken() -> None:
        raise RuntimeError("nope")

    async def bad_handler(failure: TaskFailure) -> None:
        raise OSError("pager is down")

    await Producer(queue, app, clock=clock).dispatch(broken)
    await run_until_idle(
        app, queue, clock=clock, fail_fast=False, config=config(failed_task_handler=bad_handler)
    )

    (dead,) = queue.dead_letters()
    assert dead.reason == (
        "attempt 1 of 1 failed: RuntimeError: nope; "
        "the failed-task handler raised OSError: pager is down"
    )


async def test_error_text_no_backend_can_store_is_escaped_and_dead_lettered_at_once() -> None:
    """``str()`` of an error about an undecodable file name holds a lone surrogate.

    Backends refuse such a reason (UTF-8 cannot encode it); the runner must escape it
    rather than fail to dead-letter, which left the message to come back every lease.
    """
    clock = FakeClock()
    app, queue = make(clock)
    runs: list[int] = []

    @app.task(max_retries=0)
    async def reads_a_file() -> None:
        runs.append(current_task().delivery_count)
        raise FileNotFoundError("no such file: report-\udcff.csv")

    async def raising_handler(failure: TaskFailure) -> None:
        raise OSError("pager \udc80 is down")

    await Producer(queue, app, clock=clock).dispatch(reads_a_file)
    await Producer(queue, app, clock=clock).dispatch(reads_a_file)
    runner = Runner(queue, app, config(), clock=clock)
    await run_burst(runner, clock)
    await Producer(queue, app, clock=clock).dispatch(reads_a_file)
    handled = Runner(queue, app, config(failed_task_handler=raising_handler), clock=clock)
    await run_burst(handled, clock)

    assert runs == [1, 1, 1], "a message came back after its only attempt"
    reasons = sorted(d.reason for d in queue.dead_letters())
    assert reasons == [
        "attempt 1 of 1 failed: FileNotFoundError: no such file: report-\\udcff.csv",
        "attempt 1 of 1 failed: FileNotFoundError: no such file: report-\\udcff.csv",
        "attempt 1 of 1 failed: FileNotFoundError: no such file: report-\\udcff.csv; "
        "the failed-task handler raised OSError: pager \\udc80 is down",
    ]
    assert runner.stats().dead_lettered == 2


async def test_poison_unknown_and_wrongly_typed_messages_are_dead_lettered_once() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    shipped: list[str] = []
    handled: list[str] = []

    @app.task
    async def ship(order: Order) -> None:
        shipped.append(order.sku)

    producer = Producer(queue, app, clock=clock)
    await producer.dispatch_many(ship, [Order(sku=f"a{i}", quantity=1) for i in range(5)])
    await queue.add([b"\x00not json at all"])
    await queue.add([b'{"v":1,"id":"1","task":"no.such.task","payload":null,"enqueued_at":0}'])
    await queue.add(
        [b'{"v":1,"id":"2","task":"%s","payload":{"sku":3},"enqueued_at":0}' % (ship.name.encode())]
    )
    await producer.dispatch_many(ship, [Order(sku=f"b{i}", quantity=1) for i in range(5)])

    def on_failure(failure: TaskFailure) -> None:
        handled.append(failure.reason)
        raise RuntimeError("let it be dead-lettered")

    await run_until_idle(
        app, queue, clock=clock, fail_fast=False, config=config(failed_task_handler=on_failure)
    )

    assert sorted(shipped) == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)])
    reasons = sorted(dead.reason.split(";")[0] for dead in queue.dead_letters())
    assert len(reasons) == 3
    assert reasons[0].startswith("malformed message: JSON is malformed")
    assert reasons[1].startswith(
        f"task {ship.name!r}: payload does not match Order: Expected `str`"
    )
    assert reasons[2].startswith("unknown task 'no.such.task'")
    assert len(handled) == 3
    assert all(dead.delivery_count == 1 for dead in queue.dead_letters())
    assert await queue.len() == 0


async def test_message_larger_than_the_limit_is_dead_lettered() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    app.max_message_bytes = 100

    @app.task
    async def noop() -> None:
        pass

    await queue.add([b"x" * 101])
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    (dead,) = queue.dead_letters()
    assert dead.reason == "message of 101 bytes exceeds max_message_bytes=100"


async def test_delivered_too_often_is_given_up_without_running_again() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    runs: list[int] = []

    @app.task(max_retries=1)
    async def crashy() -> None:
        runs.append(1)

    await Producer(queue, app, clock=clock).dispatch(crashy)
    # Two earlier deliveries never finished: their workers crashed.
    for consumer in ("dead-1", "dead-2"):
        await clock.advance(11)
        got = await queue.reclaim(
            consumer, lease_seconds=10, max_messages=1
        ) or await queue.receive(consumer, max_messages=1, wait_seconds=0, lease_seconds=10)
        assert len(got) == 1
    await clock.advance(11)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    assert runs == []
    (dead,) = queue.dead_letters()
    assert dead.reason.startswith("delivered 3 times but task")
    assert "allows 2 attempt(s) (max_retries=1)" in dead.reason


async def test_timeout_counts_as_a_failed_attempt() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    cancelled: list[bool] = []

    @app.task(max_retries=0, timeout_seconds=3)
    async def slow() -> None:
        try:
            await clock.sleep(100)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    await Producer(queue, app, clock=clock).dispatch(slow)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    assert cancelled == [True]
    (dead,) = queue.dead_letters()
    assert (
        dead.reason
        == f"attempt 1 of 1 failed: TaskTimeoutError: task {slow.name!r} timed out after 3s"
    )


async def test_sync_tasks_run_in_threads_and_async_tasks_on_the_loop() -> None:
    app, _ = make(FakeClock())
    queue = InMemoryQueue()  # real clock: threads finish in real time
    where: dict[str, str] = {}

    @app.task
    def blocking(item: Item) -> None:
        where[item.name] = threading.current_thread().name

    @app.task
    async def cooperative(item: Item) -> None:
        where[item.name] = threading.current_thread().name

    producer = Producer(queue, app)
    await producer.dispatch(blocking, Item("sync"))
    await producer.dispatch(cooperative, Item("async"))
    await asyncio.wait_for(Runner(queue, app, config(block_seconds=0.05)).run(burst=True), 30)

    assert where["sync"].startswith("taskrunner-worker")
    assert where["async"] == threading.current_thread().name
    assert await queue.len() == 0


async def test_sync_and_async_tasks_share_one_capacity() -> None:
    queue = InMemoryQueue()
    app, _ = make(FakeClock())
    gate = threading.Event()
    active = 0
    peak = 0
    lock = threading.Lock()
    loop = asyncio.get_running_loop()
    full = asyncio.Event()

    def track(delta: int) -> None:
        nonlocal active, peak
        with lock:
            active += delta
            peak = max(peak, active)
            if active == 3:
                loop.call_soon_threadsafe(full.set)

    @app.task
    def blocking(n: int) -> None:
        track(1)
        gate.wait(10)
        track(-1)

    @app.task
    async def cooperative(n: int) -> None:
        track(1)
        await asyncio.to_thread(gate.wait, 10)
        track(-1)

    producer = Producer(queue, app)
    await producer.dispatch_many(blocking, range(4))
    await producer.dispatch_many(cooperative, range(4))
    runner = Runner(queue, app, config(num_workers=3, block_seconds=0.05))
    run = asyncio.create_task(runner.run(burst=True))
    await asyncio.wait_for(full.wait(), 10)
    gate.set()
    await asyncio.wait_for(run, 30)

    assert peak == 3
    assert await queue.len() == 0


async def test_fetcher_never_leases_more_than_the_pool_can_start() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    finish = asyncio.Event()
    leased_counts: list[int] = []

    @app.task
    async def hold(n: int) -> None:
        await finish.wait()

    await Producer(queue, app, clock=clock).dispatch_many(hold, range(20))
    runner = Runner(queue, app, config(num_workers=3, num_fetchers=2, batch_size=10), clock=clock)
    async with running(runner):
        for _ in range(20):
            await clock.advance(0.5)
            leased_counts.append(len(queue.in_flight()))
        finish.set()
        await clock.run_until(
            lambda: not queue.in_flight() and not queue.ready_bodies(), step=0.5, limit=30
        )

    assert max(leased_counts) == 3
    assert await queue.len() == 0


async def test_a_crashing_fetcher_restarts_with_backoff() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    done: list[int] = []
    crashes = 0

    class Glitchy(InMemoryQueue):
        async def receive(
            self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
        ) -> list[Delivery]:
            nonlocal crashes
            if crashes < 3:
                crashes += 1
                raise KeyError("bug in a backend")
            return await super().receive(
                consumer,
                max_messages=max_messages,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
            )

    @app.task
    async def job(n: int) -> None:
        done.append(n)

    await Producer(queue, app, clock=clock).dispatch_many(job, range(5))
    runner = Runner(Glitchy._on_store(queue._store), app, config(), clock=clock)
    async with running(runner):
        waited = await clock.run_until(lambda: len(done) == 5, step=0.1, limit=60)

    assert crashes == 3
    assert sorted(done) == list(range(5))
    assert waited >= 0.25 + 0.5 + 1.0  # three restarts, each after a growing delay


async def test_burst_returns_when_the_queue_is_empty_and_ids_come_back() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    seen: list[str] = []

    @app.task
    async def record(n: int) -> None:
        seen.append(current_task().message_id)

    producer = Producer(queue, app, clock=clock)
    ids = await producer.dispatch_many(record, range(50))
    ids.append(await producer.dispatch(record, 50))
    await run_until_idle(app, queue, clock=clock, config=config(num_workers=7))

    assert sorted(seen) == sorted(ids)
    assert len(set(ids)) == 51


async def test_backend_outage_is_retried_and_nothing_is_lost() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    done: list[int] = []
    down = True

    class Flaky(InMemoryQueue):
        async def receive(
            self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
        ) -> list[Delivery]:
            if down:
                from taskrunner import BackendUnavailableError

                raise BackendUnavailableError("connection refused")
            return await super().receive(
                consumer,
                max_messages=max_messages,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
            )

        async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
            if down:
                from taskrunner import BackendUnavailableError

                raise BackendUnavailableError("connection refused")
            return await super().ack(deliveries)

    @app.task
    async def job(n: int) -> None:
        done.append(n)

    await Producer(queue, app, clock=clock).dispatch_many(job, range(10))
    runner = Runner(Flaky._on_store(queue._store), app, config(), clock=clock)
    async with running(runner):
        await clock.advance(30)
        assert done == []
        down = False
        await clock.run_until(lambda: len(done) == 10 and not queue.in_flight(), step=0.5, limit=30)

    assert sorted(done) == list(range(10))
    assert await queue.len() == 0


async def test_a_bug_in_the_backends_ack_does_not_bring_the_runner_down() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    runs: list[int] = []
    broken = True

    class BuggyAck(InMemoryQueue):
        async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
            if broken:
                raise KeyError("bug in a backend")
            return await super().ack(deliveries)

    @app.task(max_retries=3)
    async def job() -> None:
        runs.append(current_task().delivery_count)

    await Producer(queue, app, clock=clock).dispatch(job)
    runner = Runner(BuggyAck._on_store(queue._store), app, config(), clock=clock)
    async with running(runner) as run:
        await clock.run_until(lambda: runs == [1], step=0.5, limit=5)
        broken = False
        # Unacked, the message comes back after its lease and is acked this time.
        await clock.run_until(lambda: not queue.in_flight(), step=0.5, limit=60)
        assert not run.done()

    assert runs == [1, 2]
    assert await queue.len() == 0


async def test_a_timed_out_thread_is_not_reported_as_a_lost_lease() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    started = threading.Event()
    release = threading.Event()

    @app.task(max_retries=0, timeout_seconds=1)
    def slow() -> None:
        started.set()
        release.wait(10)

    await Producer(queue, app, clock=clock).dispatch(slow)
    runner = Runner(queue, app, config(), clock=clock)
    async with running(runner):
        await clock.run_until(started.is_set, step=0.5, limit=5)
        await clock.run_until(lambda: len(queue.dead_letters()) == 1, step=0.5, limit=5)
        # Many heartbeat ticks while the timed-out thread still holds its worker slot.
        heartbeat = runner.config.heartbeat_interval_seconds
        assert heartbeat is not None
        await clock.advance(10 * heartbeat)
        assert runner.pool.busy == 1
        release.set()
        await eventually(lambda: runner.pool.busy == 0)

    assert runner.stats().lease_lost == 0


async def test_cancelled_error_raised_by_task_code_is_a_failed_attempt() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    attempts: list[int] = []

    @app.task(max_retries=1)
    async def confused() -> None:
        attempts.append(current_task().delivery_count)
        raise asyncio.CancelledError  # not a cancellation of the worker

    await Producer(queue, app, clock=clock).dispatch(confused)
    runner = Runner(queue, app, config(), clock=clock)
    await run_burst(runner, clock)

    assert attempts == [1, 2]
    assert runner.stats().failed == 2
    (dead,) = queue.dead_letters()
    assert dead.reason.startswith("attempt 2 of 2 failed: CancelledError")
