"""Prometheus metrics: names, labels and values from a running runner."""

from __future__ import annotations

import asyncio
import urllib.request

from taskrunner import App, Producer, Runner, RunnerConfig
from taskrunner.metrics import start_metrics_server
from taskrunner_backends.memory import InMemoryQueue

from .support import running


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


async def test_metrics_endpoint_reports_counters_per_task_and_gauges() -> None:
    app = App("tests")
    queue = InMemoryQueue()

    @app.task(name="ok")
    async def ok(n: int) -> None:
        pass

    @app.task(name="bad", max_retries=0)
    async def bad(n: int) -> None:
        raise RuntimeError("no")

    producer = Producer(queue, app)
    await producer.dispatch_many(ok, range(5))
    await producer.dispatch(bad, 1)
    runner = Runner(queue, app, RunnerConfig(block_seconds=0.05, monitor_interval_seconds=0.05))
    await asyncio.wait_for(runner.run(burst=True), 30)
    server = start_metrics_server(runner, 0)
    try:
        text = await asyncio.to_thread(_scrape, server.port)
    finally:
        server.close()

    assert 'taskrunner_task_succeeded_total{queue="tests",task="ok"} 5.0' in text
    assert 'taskrunner_task_failed_total{queue="tests",task="bad"} 1.0' in text
    assert 'taskrunner_task_dead_lettered_total{queue="tests",task="bad"} 1.0' in text
    assert 'taskrunner_received_total{queue="tests"} 6.0' in text
    assert 'taskrunner_lease_lost_total{queue="tests"} 0.0' in text
    assert 'taskrunner_ack_uncertain_total{queue="tests"} 0.0' in text
    assert 'taskrunner_leases_adopted_total{queue="tests"} 0.0' in text
    assert 'taskrunner_workers{queue="tests"} 10.0' in text
    assert 'taskrunner_backlog{queue="tests"} 0.0' in text
    assert 'taskrunner_task_duration_seconds{queue="tests",task="ok"}' in text


async def test_metrics_are_read_while_the_runner_runs() -> None:
    app = App("tests")
    queue = InMemoryQueue()
    gate = asyncio.Event()
    full = asyncio.Event()
    started: list[int] = []

    @app.task(name="wait")
    async def wait(n: int) -> None:
        started.append(n)
        if len(started) == 3:
            full.set()
        await gate.wait()

    runner = Runner(queue, app, RunnerConfig(num_workers=3, block_seconds=0.05))
    async with running(runner):
        await Producer(queue, app).dispatch_many(wait, range(3))
        await asyncio.wait_for(full.wait(), 10)
        server = start_metrics_server(runner, 0)
        try:
            text = await asyncio.to_thread(_scrape, server.port)
        finally:
            server.close()
        gate.set()

    assert 'taskrunner_busy_workers{queue="tests"} 3.0' in text
    assert 'taskrunner_in_flight{queue="tests"} 3.0' in text
