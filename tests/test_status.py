"""Producer.status: where a message is, from the backend's records and its stored result."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from taskrunner import App, Producer, ResultWrite, Runner, TaskState, TaskStatus, current_task
from taskrunner.testing import FakeClock, run_until_idle
from taskrunner_backends.memory import InMemoryQueue

from .support import config, run_burst, running


def _setup() -> tuple[FakeClock, App, InMemoryQueue, Producer]:
    clock = FakeClock()
    app = App("tests")
    queue = InMemoryQueue(clock=clock)
    return clock, app, queue, Producer(queue, app, clock=clock)


async def test_a_queued_message_is_ready_with_no_deliveries_and_its_task() -> None:
    clock, app, _queue, producer = _setup()

    @app.task
    async def job() -> None: ...

    message_id = await producer.dispatch(job)
    status = await producer.status(message_id)

    assert status.state is TaskState.READY
    assert (status.task, status.delivery_count) == (job.name, 0)
    assert status.enqueued_at == datetime.fromtimestamp(clock.time(), UTC)
    assert status.task_id is not None
    assert (status.consumer, status.last_error, status.finished_at) == (None, None, None)


async def test_a_delayed_message_is_delayed_until_due_then_ready() -> None:
    clock, app, _queue, producer = _setup()

    @app.task
    async def job() -> None: ...

    message_id = await producer.dispatch(job, delay=30)
    due = clock.time() + 30
    status = await producer.status(message_id)
    assert status.state is TaskState.DELAYED
    assert status.due_at is not None
    assert abs(status.due_at.timestamp() - due) < 1e-3

    await clock.advance(29.9)
    assert (await producer.status(message_id)).state is TaskState.DELAYED
    await clock.advance(0.2)
    after = await producer.status(message_id)
    assert after.state is TaskState.READY
    assert after.due_at is None


async def test_a_running_message_is_running_with_its_consumer_and_delivery_count() -> None:
    clock, app, queue, producer = _setup()
    seen: list[TaskStatus] = []
    release = asyncio.Event()

    @app.task
    async def job() -> None:
        seen.append(await producer.status(current_task().message_id))
        await release.wait()

    message_id = await producer.dispatch(job)
    runner = Runner(queue, app, config(), clock=clock)
    async with running(runner):
        for _ in range(1000):
            if seen:
                break
            await asyncio.sleep(0)
        assert seen, "the task did not start"
        release.set()

    [status] = seen
    assert status.state is TaskState.RUNNING
    assert status.delivery_count == 1
    assert status.consumer in runner.consumer_names
    assert status.idle_seconds is not None
    assert status.idle_seconds >= 0
    assert (await producer.status(message_id)).state is TaskState.UNKNOWN


async def test_a_retrying_message_is_delayed_with_its_delivery_count() -> None:
    _clock, app, queue, producer = _setup()

    @app.task(max_retries=5)
    async def flaky() -> None:
        raise RuntimeError("not yet")

    message_id = await producer.dispatch(flaky)
    [delivery] = await queue.receive("w", max_messages=1, wait_seconds=0, lease_seconds=10)
    await queue.release([delivery], delay_seconds=20)

    status = await producer.status(message_id)
    assert status.state is TaskState.DELAYED
    assert status.delivery_count == 1
    assert status.task == flaky.name


async def test_a_dead_letter_is_dead_with_its_reason_and_time() -> None:
    clock, app, queue, producer = _setup()

    @app.task(max_retries=0)
    async def broken() -> None:
        raise LookupError("gone")

    message_id = await producer.dispatch(broken)
    await run_burst(Runner(queue, app, config(), clock=clock), clock)

    status = await producer.status(message_id)
    assert status.state is TaskState.DEAD
    assert status.last_error is not None
    assert "LookupError: gone" in status.last_error
    assert status.delivery_count == 1
    assert status.finished_at is not None
    assert status.task == broken.name


async def test_a_succeeded_message_with_a_result_reads_succeeded_with_its_finish_time() -> None:
    clock, app, queue, producer = _setup()

    @app.task(store_result=True)
    async def job() -> int:
        return 1

    message_id = await producer.dispatch(job)
    await run_burst(Runner(queue, app, config(), clock=clock), clock)

    status = await producer.status(message_id)
    assert status.state is TaskState.SUCCEEDED
    assert (status.task, status.delivery_count, status.last_error) == (job.name, 1, None)
    assert status.finished_at is not None


async def test_unknown_and_malformed_ids_are_unknown() -> None:
    _clock, _app, _queue, producer = _setup()
    for message_id in ["999-0", "not-an-id", "x" * 10_000, "{tag}"]:
        status = await producer.status(message_id)
        assert status == TaskStatus(message_id=message_id, state=TaskState.UNKNOWN)


async def test_status_many_answers_in_order_with_duplicates() -> None:
    _clock, app, _queue, producer = _setup()

    @app.task
    async def job() -> None: ...

    first = await producer.dispatch(job)
    second = await producer.dispatch(job, delay=60)
    got = await producer.status_many([second, "nope", first, second])
    assert [s.state for s in got] == ["delayed", "unknown", "ready", "delayed"]
    assert [s.message_id for s in got] == [second, "nope", first, second]
    assert await producer.status_many([]) == []
    with pytest.raises(TypeError):
        await producer.status_many(first)


class ResultsOnly(InMemoryQueue):
    """A backend with a result store but no lookup."""

    @property
    def lookup(self) -> Any:
        return None

    @property
    def capabilities(self) -> Any:
        return msgspec.structs.replace(super().capabilities, lookup=False)


async def test_without_lookup_a_stored_result_still_gives_the_final_state() -> None:
    clock = FakeClock(autojump=True)
    app = App("tests")
    queue = ResultsOnly(clock=clock)
    producer = Producer(queue, app, clock=clock)

    @app.task(store_result=True)
    async def job() -> int:
        return 1

    message_id = await producer.dispatch(job)
    assert (await producer.status(message_id)).state is TaskState.UNKNOWN
    await run_until_idle(app, queue, clock=clock, config=config())
    assert (await producer.status(message_id)).state is TaskState.SUCCEEDED


async def test_a_poison_body_still_reports_where_it_is() -> None:
    _clock, _app, queue, producer = _setup()
    [message_id] = await queue.add([b"\xff not json"])
    status = await producer.status(message_id)
    assert status.state is TaskState.READY
    assert status.task is None


async def test_while_the_backend_holds_a_message_its_record_wins_over_a_stored_result() -> None:
    _clock, app, queue, producer = _setup()

    @app.task(store_result=True)
    async def job() -> int:
        return 1

    message_id = await producer.dispatch(job)
    # A result already stored while the message is queued again (an earlier run wrote
    # it before its lease lapsed): not final while the message is still there.
    body = b'{"v":1,"task":"x","task_id":"y","outcome":"succeeded","value":1}'
    await queue.put_results([ResultWrite(message_id=message_id, body=body, ttl_seconds=60)])

    status = await producer.status(message_id)
    assert status.state is TaskState.READY
    assert status.task == job.name
