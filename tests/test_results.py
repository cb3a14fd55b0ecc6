"""Task results through the engine: stored before the ack, read by Producer.result."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from taskrunner import (
    App,
    ConfigurationError,
    Delivery,
    PayloadValidationError,
    Producer,
    ResultStore,
    ResultWrite,
    TaskFailedError,
    TaskFailure,
    UnsupportedFeatureError,
)
from taskrunner.testing import FakeClock, run_until_idle
from taskrunner_backends.memory import InMemoryQueue

from .support import config


class Order(msgspec.Struct):
    sku: str
    quantity: int


class Receipt(msgspec.Struct):
    order: str
    total_cents: int


class RecordingQueue(InMemoryQueue):
    """Records each put_results and ack batch, and what was stored when each ack arrived."""

    def __init__(self, *, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.calls: list[tuple[str, int]] = []
        self.stored_at_ack: list[bool] = []

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        self.calls.append(("put_results", len(results)))
        await super().put_results(results)

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self.calls.append(("ack", len(deliveries)))
        ids = [d.message_id for d in deliveries]
        stored = await super().get_results(ids)
        self.stored_at_ack.extend(body is not None for body in stored)
        return await super().ack(deliveries)


class NoResults(InMemoryQueue):
    """A backend without a result store or lookup (as one written before issue 12)."""

    @property
    def results(self) -> ResultStore | None:  # type: ignore[override]
        return None

    @property
    def capabilities(self) -> Any:
        return msgspec.structs.replace(super().capabilities, results=False, lookup=False)


def _setup(clock: FakeClock, **app_options: Any) -> tuple[App, RecordingQueue]:
    return App("tests", **app_options), RecordingQueue(clock=clock)


async def test_result_returns_the_value_decoded_against_the_return_annotation() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True)
    async def checkout(order: Order) -> Receipt:
        return Receipt(order=order.sku, total_cents=order.quantity * 250)

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(checkout, Order(sku="tea", quantity=4))
    await run_until_idle(app, queue, clock=clock, config=config())

    assert await producer.result(message_id, timeout=0) == Receipt(order="tea", total_cents=1000)


async def test_every_acked_message_had_its_result_stored_before_the_ack() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True)
    async def double(n: int) -> int:
        return 2 * n

    producer = Producer(queue, app, clock=clock)
    ids = await producer.dispatch_many(double, list(range(50)))
    await run_until_idle(app, queue, clock=clock, config=config(num_workers=50, batch_size=50))

    assert queue.stored_at_ack == [True] * 50
    assert [await producer.result(i, timeout=0) for i in ids] == [2 * n for n in range(50)]


async def test_results_cost_one_put_per_acked_batch_and_nothing_when_off() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True)
    async def kept(n: int) -> int:
        return n

    @app.task
    async def discarded(n: int) -> int:
        return n

    producer = Producer(queue, app, clock=clock)
    await producer.dispatch_many(kept, list(range(20)))
    await producer.dispatch_many(discarded, list(range(20)))
    await run_until_idle(app, queue, clock=clock, config=config(num_workers=40, batch_size=40))

    acks = [n for call, n in queue.calls if call == "ack"]
    puts = [n for call, n in queue.calls if call == "put_results"]
    assert sum(acks) == 40
    assert sum(puts) == 20  # only the storing task's results
    assert len(puts) <= len(acks)
    # Each put immediately precedes an ack of at least as many messages.
    for index, (call, n) in enumerate(queue.calls):
        if call == "put_results":
            assert queue.calls[index + 1][0] == "ack"
            assert queue.calls[index + 1][1] >= n


async def test_a_task_without_store_result_writes_nothing_and_result_times_out() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task
    async def quiet() -> int:
        return 1

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(quiet)
    await run_until_idle(app, queue, clock=clock, config=config())

    assert not [call for call, _ in queue.calls if call == "put_results"]
    with pytest.raises(TimeoutError, match=message_id):
        await producer.result(message_id, timeout=0)
    status = await producer.status(message_id)
    assert status.state == "unknown"


async def test_app_default_applies_and_a_task_can_opt_out() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock, store_results=True, result_ttl=timedelta(minutes=5))

    @app.task
    async def kept() -> str:
        return "kept"

    @app.task(store_result=False)
    async def dropped() -> str:
        return "dropped"

    assert (kept.store_result, kept.result_ttl) == (True, 300.0)
    assert dropped.store_result is False
    producer = Producer(queue, app, clock=clock)
    first = await producer.dispatch(kept)
    second = await producer.dispatch(dropped)
    await run_until_idle(app, queue, clock=clock, config=config())

    assert await producer.result(first, timeout=0) == "kept"
    with pytest.raises(TimeoutError):
        await producer.result(second, timeout=0)


async def test_result_waits_for_a_result_stored_later() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True)
    async def answer() -> int:
        return 42

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(answer)
    waiting = asyncio.create_task(producer.result(message_id, timeout=60))
    await asyncio.sleep(0)
    assert not waiting.done()
    await run_until_idle(app, queue, clock=clock, config=config())

    assert await asyncio.wait_for(waiting, 5) == 42


async def test_result_times_out_at_its_timeout_not_before() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)
    producer = Producer(queue, app, clock=clock)
    waiting = asyncio.create_task(producer.result("1-0", timeout=10))
    await clock.advance(9.9)
    assert not waiting.done()
    await clock.advance(0.2)
    with pytest.raises(TimeoutError, match="within 10s"):
        await asyncio.wait_for(waiting, 5)


async def test_a_result_expires_after_its_ttl() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True, result_ttl=60)
    async def brief() -> str:
        return "soon gone"

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(brief)
    await run_until_idle(app, queue, clock=clock, config=config())
    finished = clock.monotonic()

    await clock.advance(max(0.0, 59.0 - (clock.monotonic() - finished)))
    assert await producer.result(message_id, timeout=0) == "soon gone"
    await clock.advance(61.0)
    with pytest.raises(TimeoutError):
        await producer.result(message_id, timeout=0)


async def test_a_terminal_failure_raises_task_failed_error_with_the_stored_error() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True, max_retries=1)
    async def broken() -> int:
        raise KeyError("no such account")

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(broken)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    with pytest.raises(TaskFailedError) as caught:
        await producer.result(message_id, timeout=0)
    error = caught.value
    assert (error.message_id, error.task, error.error_type) == (message_id, broken.name, "KeyError")
    assert "no such account" in error.error_message
    assert "attempt 2 of 2 failed" in error.error_message
    assert error.delivery_count == 2
    status = await producer.status(message_id)
    assert status.state == "dead"
    assert status.last_error is not None
    assert "no such account" in status.last_error


async def test_terminal_failures_results_are_stored_in_batches_like_successes() -> None:
    """Failed attempts' results go through the acker: many failing at once share a put.

    Written by the executor one put_results each (as before), 20 failures cost 20
    calls of one result.
    """
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True, max_retries=0)
    async def broken(n: int) -> int:
        raise ValueError(f"bad input {n}")

    producer = Producer(queue, app, clock=clock)
    ids = await producer.dispatch_many(broken, list(range(20)))
    await run_until_idle(
        app, queue, clock=clock, fail_fast=False, config=config(num_workers=20, batch_size=20)
    )

    puts = [n for call, n in queue.calls if call == "put_results"]
    assert sum(puts) == 20
    assert len(puts) < 20
    for n, message_id in enumerate(ids):
        with pytest.raises(TaskFailedError, match=f"bad input {n}$"):
            await producer.result(message_id, timeout=0)
    assert len(queue.dead_letters()) == 20


async def test_a_failure_taken_by_the_handler_reads_failed() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)
    handled: list[TaskFailure] = []

    @app.task(store_result=True, max_retries=0)
    async def broken() -> int:
        raise ValueError("bad input")

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(broken)
    await run_until_idle(
        app, queue, clock=clock, fail_fast=False, config=config(failed_task_handler=handled.append)
    )

    assert len(handled) == 1
    status = await producer.status(message_id)
    assert status.state == "failed"
    assert status.last_error is not None
    assert status.last_error.startswith("ValueError: ")
    assert status.delivery_count == 1
    assert status.finished_at is not None
    with pytest.raises(TaskFailedError, match="bad input"):
        await producer.result(message_id, timeout=0)


async def test_too_many_deliveries_is_stored_as_a_failure_of_its_own_kind() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True, max_retries=0)
    async def crashy() -> None:
        return None

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(crashy)
    # A worker that died holding it: its lease lapses and the reclaimer takes it again.
    [lost] = await queue.receive("dead-worker", max_messages=1, wait_seconds=0, lease_seconds=1)
    await clock.advance(2)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    with pytest.raises(TaskFailedError) as caught:
        await producer.result(message_id, timeout=0)
    assert caught.value.error_type == "TooManyDeliveries"
    assert lost.message_id == message_id


async def test_a_return_value_that_breaks_its_annotation_fails_the_attempt() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True, max_retries=0)
    async def liar() -> int:
        return "not an int"  # type: ignore[return-value]

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(liar)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    with pytest.raises(TaskFailedError) as caught:
        await producer.result(message_id, timeout=0)
    assert caught.value.error_type == "PayloadValidationError"
    assert "result does not match int" in caught.value.error_message


async def test_none_and_plain_json_results_round_trip() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock, store_results=True)

    @app.task
    async def nothing() -> None:
        return None

    @app.task
    def untyped(n: int):  # type: ignore[no-untyped-def]
        return {"n": n, "items": [1.5, None, "x"]}

    producer = Producer(queue, app, clock=clock)
    first = await producer.dispatch(nothing)
    second = await producer.dispatch(untyped, 3)
    await run_until_idle(app, queue, clock=clock, config=config())

    assert await producer.result(first, timeout=0) is None
    assert await producer.result(second, timeout=0) == {"n": 3, "items": [1.5, None, "x"]}


async def test_a_producer_that_does_not_know_the_task_gets_plain_json() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(store_result=True)
    async def checkout(order: Order) -> Receipt:
        return Receipt(order=order.sku, total_cents=1)

    message_id = await Producer(queue, app, clock=clock).dispatch(checkout, Order("a", 1))
    await run_until_idle(app, queue, clock=clock, config=config())

    stranger = Producer(queue, App("tests"), clock=clock)
    assert await stranger.result(message_id, timeout=0) == {"order": "a", "total_cents": 1}


async def test_a_stored_value_that_the_producer_type_refuses_raises_validation_error() -> None:
    clock = FakeClock(autojump=True)
    worker_app, queue = _setup(clock)

    @worker_app.task(name="shared", store_result=True)
    async def returns_text() -> str:
        return "text"

    message_id = await Producer(queue, worker_app, clock=clock).dispatch(returns_text)
    await run_until_idle(worker_app, queue, clock=clock, config=config())

    producer_app = App("tests")

    @producer_app.task(name="shared", store_result=True)
    async def expects_int() -> int:
        return 0

    with pytest.raises(PayloadValidationError, match="result does not match int"):
        await Producer(queue, producer_app, clock=clock).result(message_id, timeout=0)


@pytest.mark.parametrize("seconds", [-1, math.nan, math.inf])
async def test_result_refuses_a_bad_timeout(seconds: float) -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)
    with pytest.raises(ValueError, match="timeout"):
        await Producer(queue, app, clock=clock).result("1-0", timeout=seconds)


@pytest.mark.parametrize("message_id", ["", 17, None])
async def test_result_and_status_refuse_a_bad_id(message_id: Any) -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)
    producer = Producer(queue, app, clock=clock)
    with pytest.raises((TypeError, ValueError)):
        await producer.result(message_id, timeout=0)
    with pytest.raises((TypeError, ValueError)):
        await producer.status(message_id)


async def test_a_backend_without_a_result_store_is_refused_clearly() -> None:
    clock = FakeClock(autojump=True)
    app = App("tests")
    queue = NoResults(clock=clock)
    producer = Producer(queue, app, clock=clock)
    with pytest.raises(UnsupportedFeatureError, match="'results' capability"):
        await producer.result("1-0", timeout=0)
    with pytest.raises(UnsupportedFeatureError, match="'lookup' or 'results'"):
        await producer.status("1-0")


async def test_a_storing_task_on_a_backend_without_a_store_still_runs_and_acks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(autojump=True)
    app = App("tests")
    queue = NoResults(clock=clock)
    ran: list[int] = []

    @app.task(store_result=True)
    async def work(n: int) -> int:
        ran.append(n)
        return n

    await Producer(queue, app, clock=clock).dispatch_many(work, [1, 2])
    await run_until_idle(app, queue, clock=clock, config=config())

    assert sorted(ran) == [1, 2]
    assert await queue.len() == 0
    warnings = [r for r in caplog.records if "no result store" in r.getMessage()]
    assert len(warnings) == 1  # once per task, not per message


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, True, "60", timedelta(0)])
def test_a_bad_result_ttl_is_a_configuration_error(ttl: Any) -> None:
    with pytest.raises(ConfigurationError, match="result_ttl"):
        App("tests", result_ttl=ttl)
    app = App("tests")
    with pytest.raises(ConfigurationError, match="result_ttl"):

        @app.task(result_ttl=ttl)
        async def task() -> None: ...


@pytest.mark.parametrize("flag", ["yes", 1, None])
def test_store_result_must_be_a_bool(flag: Any) -> None:
    if flag is not None:
        with pytest.raises(ConfigurationError, match="store_results"):
            App("tests", store_results=flag)
    app = App("tests")
    if flag is None:
        # None means "the app's default".
        @app.task(store_result=flag)
        async def task() -> None: ...

        assert task.store_result is False
        return
    with pytest.raises(ConfigurationError, match="store_result"):

        @app.task(store_result=flag)
        async def other() -> None: ...


class Opaque:
    """A class msgspec cannot encode (module level, so annotations resolve)."""


async def test_a_return_value_json_cannot_hold_fails_only_a_task_that_stores_it() -> None:
    clock = FakeClock(autojump=True)
    app, queue = _setup(clock)

    @app.task(max_retries=0)
    async def fine() -> Opaque:
        return Opaque()

    @app.task(store_result=True, max_retries=0)
    async def refused() -> Opaque:
        return Opaque()

    producer = Producer(queue, app, clock=clock)
    first = await producer.dispatch(fine)
    second = await producer.dispatch(refused)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    assert (await producer.status(first)).state == "unknown"  # acked, nothing stored
    with pytest.raises(TaskFailedError, match="result cannot be encoded as JSON"):
        await producer.result(second, timeout=0)


async def test_a_result_larger_than_the_message_limit_fails_the_attempt() -> None:
    clock = FakeClock(autojump=True)
    app = App("tests", max_message_bytes=1000)
    queue = RecordingQueue(clock=clock)

    @app.task(store_result=True, max_retries=0)
    async def big(size: int) -> str:
        return "x" * size

    producer = Producer(queue, app, clock=clock)
    # The stored body is the value plus about 150 bytes of envelope.
    small = await producer.dispatch(big, 700)
    large = await producer.dispatch(big, 1000)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    assert await producer.result(small, timeout=0) == "x" * 700
    with pytest.raises(TaskFailedError) as caught:
        await producer.result(large, timeout=0)
    assert caught.value.error_type == "PayloadTooLargeError"
    assert "larger than the limit of 1000 bytes" in caught.value.error_message
