"""Prometheus metrics: names, labels and values from a running runner."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from taskrunner import App, BackendUnavailableError, Producer, QueueStats, Runner, RunnerConfig
from taskrunner.metrics import start_metrics_server
from taskrunner.stats import StatsRecorder
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, run_burst, running


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
    assert 'taskrunner_workers{queue="tests"} 50.0' in text
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


def _samples(text: str) -> dict[str, float]:
    """Sample lines of an exposition as {name{labels}: value}."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


async def test_histograms_and_outcome_counters_are_scraped_with_cumulative_buckets() -> None:
    clock = FakeClock()
    app = App("tests")
    queue = InMemoryQueue(clock=clock)

    @app.task(name="slow")
    async def slow() -> None:
        await clock.sleep(0.25)

    @app.task(name="bad", max_retries=1)
    async def bad() -> None:
        raise RuntimeError("no")

    producer = Producer(queue, app, clock=clock)
    await producer.dispatch(slow)
    await producer.dispatch(slow)
    await producer.dispatch(bad)
    await queue.add([b"not an envelope"])
    runner = Runner(queue, app, config(), clock=clock)
    await run_burst(runner, clock)
    server = start_metrics_server(runner, 0)
    try:
        text = await asyncio.to_thread(_scrape, server.port)
    finally:
        server.close()
    samples = _samples(text)

    def duration(le: str, task: str = "slow") -> float:
        return samples[
            f'taskrunner_attempt_duration_seconds_bucket{{le="{le}",queue="tests",task="{task}"}}'
        ]

    assert "# TYPE taskrunner_attempt_duration_seconds histogram" in text
    assert "# TYPE taskrunner_queue_latency_seconds histogram" in text
    # 0.25 fake seconds exactly: in le="0.25" (inclusive), not in le="0.1".
    assert duration("0.1") == 0.0
    assert duration("0.25") == 2.0
    assert duration("3600.0") == 2.0
    assert duration("+Inf") == 2.0
    assert samples['taskrunner_attempt_duration_seconds_sum{queue="tests",task="slow"}'] == 0.5
    assert samples['taskrunner_attempt_duration_seconds_count{queue="tests",task="slow"}'] == 2.0
    assert duration("0.001", "bad") == 2.0
    latency = 'taskrunner_queue_latency_seconds_count{queue="tests",task="bad"}'
    assert samples[latency] == 1.0  # the retry's wait is not queue latency
    assert 'taskrunner_queue_latency_seconds_bucket{le="0.001",queue="tests",task="slow"}' in text

    def attempts(task: str, outcome: str) -> float:
        return samples[
            f'taskrunner_attempts_total{{outcome="{outcome}",queue="tests",task="{task}"}}'
        ]

    assert attempts("slow", "succeeded") == 2.0
    assert attempts("slow", "retried") == 0.0
    assert attempts("bad", "retried") == 1.0
    assert attempts("bad", "dead_lettered") == 1.0
    assert attempts("<unknown>", "dead_lettered") == 1.0
    tasks = set(re.findall(r'^taskrunner_attempts_total\{.*task="([^"]*)"', text, re.M))
    assert tasks == {"slow", "bad", "<unknown>"}


class _FlakyStats(InMemoryQueue):
    """A handle whose `stats` fails while `down` is set (the backend is unreachable)."""

    down = False

    async def stats(self) -> QueueStats:
        if self.down:
            raise BackendUnavailableError("connection refused")
        return await super().stats()


async def test_queue_gauges_come_from_the_last_read_and_survive_a_backend_outage() -> None:
    clock = FakeClock()
    app = App("tests")
    queue = _FlakyStats(clock=clock)

    @app.task(name="t")
    async def t() -> None:
        pass

    producer = Producer(queue, app, clock=clock)
    await producer.dispatch_many(t, [None] * 3)
    await producer.dispatch(t, delay=60)
    await queue.receive("someone", max_messages=1, wait_seconds=0, lease_seconds=30)
    runner = Runner(queue, app, config(), clock=clock)
    server = start_metrics_server(runner, 0)
    try:
        before = await asyncio.to_thread(_scrape, server.port)
        await runner.monitor.observe()
        read_at = clock.time()
        await clock.advance(7)
        queue.down = True
        with pytest.raises(BackendUnavailableError):
            await runner.monitor.observe()
        await producer.dispatch(t)  # not seen: no read since
        during = _samples(await asyncio.to_thread(_scrape, server.port))
    finally:
        server.close()

    assert "taskrunner_queue_messages{" not in before
    assert "taskrunner_queue_stats_age_seconds{" not in before
    assert during['taskrunner_queue_messages{queue="tests",state="ready"}'] == 2.0
    assert during['taskrunner_queue_messages{queue="tests",state="in_flight"}'] == 1.0
    assert during['taskrunner_queue_messages{queue="tests",state="delayed"}'] == 1.0
    assert during['taskrunner_queue_messages{queue="tests",state="dead"}'] == 0.0
    assert during['taskrunner_queue_stats_age_seconds{queue="tests"}'] == 7.0
    assert during['taskrunner_queue_stats_timestamp_seconds{queue="tests"}'] == read_at
    # Read at the instant of dispatch: the oldest ready message was 0 s old then.
    assert during['taskrunner_queue_oldest_ready_age_seconds{queue="tests"}'] == 0.0
    assert during['taskrunner_workers{queue="tests"}'] == 50.0
    assert during['taskrunner_busy_workers{queue="tests"}'] == 0.0


def _dashboard() -> dict[str, Any]:
    path = Path(__file__).parent.parent / "docs" / "grafana-dashboard.json"
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _exported_names(text: str) -> set[str]:
    """Every sample name a scrape can hold, from its ``# TYPE`` lines."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            # Client versions differ in whether a counter's TYPE line has the suffix.
            name = name.removesuffix("_total") if kind == "counter" else name
            names.update(name + suffix for suffix in suffixes[kind])
    return names


async def test_the_grafana_dashboard_queries_only_metrics_the_collector_exports() -> None:
    runner = Runner(InMemoryQueue(), App("tests"), RunnerConfig())
    server = start_metrics_server(runner, 0)
    try:
        exported = _exported_names(await asyncio.to_thread(_scrape, server.port))
    finally:
        server.close()
    dashboard = _dashboard()
    exprs = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ] + [variable["definition"] for variable in dashboard["templating"]["list"]]
    used = {name for expr in exprs for name in re.findall(r"\btaskrunner_[a-z_]+\b", expr)}

    assert exprs
    assert used <= exported, used - exported
    assert {
        "taskrunner_attempts_total",
        "taskrunner_attempt_duration_seconds_bucket",
        "taskrunner_queue_latency_seconds_bucket",
        "taskrunner_queue_messages",
        "taskrunner_workers",
        "taskrunner_busy_workers",
    } <= used


def test_the_grafana_dashboard_is_an_importable_dashboard() -> None:
    dashboard = _dashboard()

    assert 36 <= dashboard["schemaVersion"] <= 41
    [source] = dashboard["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == (
        "DS_PROMETHEUS",
        "datasource",
        "prometheus",
    )
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"
            assert target["refId"]


def test_dead_letters_of_unregistered_task_names_are_counted_under_one_name() -> None:
    recorder = StatsRecorder(known_task={"known"}.__contains__)
    for i in range(100):
        recorder.dead_lettered(f"hostile-{i}")
    recorder.dead_lettered(None)
    recorder.dead_lettered("known")

    tasks = recorder.snapshot(in_flight=0, workers=1, busy=0).tasks
    assert set(tasks) == {"known", "<malformed>"}
    assert tasks["<malformed>"].dead_lettered == 101
    assert tasks["known"].dead_lettered == 1
