"""Results and status through the engine on a real Redis: Producer.result, Producer.status."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from taskrunner import App, Producer, Runner, RunnerConfig, TaskFailedError, TaskState
from taskrunner_backends.redis import RedisStreamsQueue

from .helpers import count_round_trips

pytestmark = pytest.mark.redis


class Sum(msgspec.Struct):
    total: int
    count: int


async def test_results_ride_one_put_per_acked_batch_and_read_back_typed(
    redis_queue: RedisStreamsQueue,
) -> None:
    app = App("q", store_results=True)

    @app.task(name="add")
    async def add(numbers: list[int]) -> Sum:
        return Sum(total=sum(numbers), count=len(numbers))

    await redis_queue.initialize()
    producer = Producer(redis_queue, app)
    ids = await producer.dispatch_many(add, [[n, n] for n in range(1000)])
    trips = count_round_trips(redis_queue)
    runner = Runner(redis_queue, app, RunnerConfig(num_workers=100, batch_size=100))

    await runner.run(burst=True)

    assert runner.stats().succeeded == 1000
    assert trips["put results"] >= 1
    assert trips["put results"] <= trips["ack"]
    values = await asyncio.gather(*(producer.result(i, timeout=0) for i in ids[:50]))
    assert values == [Sum(total=2 * n, count=2) for n in range(50)]
    statuses = await producer.status_many(ids[-3:])
    assert [s.state for s in statuses] == [TaskState.SUCCEEDED] * 3
    assert all(s.delivery_count == 1 for s in statuses)


async def test_a_waiting_result_is_woken_by_the_worker(redis_queue: RedisStreamsQueue) -> None:
    app = App("q")
    release = asyncio.Event()

    @app.task(name="slow", store_result=True)
    async def slow() -> str:
        await release.wait()
        return "done"

    await redis_queue.initialize()
    producer = Producer(redis_queue, app)
    message_id = await producer.dispatch(slow)
    waiter = asyncio.create_task(producer.result(message_id, timeout=30))
    runner = Runner(redis_queue, app, RunnerConfig(num_workers=2))
    run = asyncio.create_task(runner.run(burst=True))
    try:
        for _ in range(2000):
            if (await producer.status(message_id)).state is TaskState.RUNNING:
                break
            await asyncio.sleep(0.005)
        status = await producer.status(message_id)
        assert status.state is TaskState.RUNNING
        assert status.consumer in runner.consumer_names
        assert not waiter.done()
        release.set()
        assert await asyncio.wait_for(waiter, 10) == "done"
    finally:
        release.set()
        await run


async def test_a_terminal_failure_is_stored_and_the_message_reads_dead(
    redis_queue: RedisStreamsQueue,
) -> None:
    app = App("q")

    @app.task(name="broken", store_result=True, max_retries=0)
    async def broken() -> None:
        raise PermissionError("read-only volume")

    await redis_queue.initialize()
    producer = Producer(redis_queue, app)
    message_id = await producer.dispatch(broken)
    await Runner(redis_queue, app, RunnerConfig(num_workers=1)).run(burst=True)

    with pytest.raises(TaskFailedError) as caught:
        await producer.result(message_id, timeout=0)
    assert caught.value.error_type == "PermissionError"
    status = await producer.status(message_id)
    assert status.state is TaskState.DEAD
    assert status.last_error is not None
    assert "PermissionError: read-only volume" in status.last_error
    assert status.task == "broken"
