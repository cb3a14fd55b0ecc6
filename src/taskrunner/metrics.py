"""Prometheus metrics of a runner, served over HTTP (extra ``taskrunner-queue[prometheus]``).

Example::

    runner = taskrunner.Runner(queue, app, config)
    server = start_metrics_server(runner, port=9464)   # inside the running event loop
    try:
        await runner.run()
    finally:
        server.close()

Every scrape copies its figures on the runner's event loop (never from the HTTP
thread, so no counter is read while it changes) and makes no backend call: the queue
gauges come from the monitor's last read of the backend's `QueueStats` (every
``monitor_interval_seconds``), so a scrape answers while the backend is down, and
``taskrunner_queue_stats_age_seconds`` says how old that read is. Histogram buckets
(``le``, seconds): 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
10, 30, 60, 120, 300, 600, 1800, 3600, +Inf (`taskrunner.histograms.BUCKETS`). The
``task`` label is a registered task's name or ``<unknown>`` (a name from the wire
never becomes a label). Details and example queries: docs/metrics.md. Metric names,
all with a ``queue`` label:

=====================================================  =========  ==============================
name                                                   type       meaning
=====================================================  =========  ==============================
``taskrunner_attempt_duration_seconds{task}``          histogram  run time of task code
``taskrunner_queue_latency_seconds{task}``             histogram  dispatch (or due) to start,
                                                                  first deliveries only
``taskrunner_attempts_total{task,outcome}``            counter    finished attempts by outcome
``taskrunner_queue_messages{state}``                   gauge      ready, delayed, in_flight,
                                                                  dead messages in the backend
``taskrunner_queue_oldest_ready_age_seconds``          gauge      age of the oldest ready one
``taskrunner_queue_stats_timestamp_seconds``           gauge      Unix time of the last read
``taskrunner_queue_stats_age_seconds``                 gauge      seconds since that read
``taskrunner_received_total``                          counter    deliveries leased by fetchers
``taskrunner_reclaimed_total``                         counter    deliveries taken by reclaimer
``taskrunner_task_succeeded_total{task}``              counter    attempts that returned
``taskrunner_task_failed_total{task}``                 counter    attempts that raised/timed out
``taskrunner_task_retried_total{task}``                counter    failed attempts retried
``taskrunner_task_dead_lettered_total{task}``          counter    messages dead-lettered
``taskrunner_failures_handled_total``                  counter    terminal failures handled
``taskrunner_lease_lost_total``                        counter    leases found lost while held
``taskrunner_ack_uncertain_total``                     counter    resent acks, lease gone
``taskrunner_leases_adopted_total``                    counter    running messages adopted
``taskrunner_task_duration_seconds{task}``             gauge      moving average of durations
                                                                  (deprecated: the histogram)
``taskrunner_in_flight``                               gauge      deliveries held here
``taskrunner_workers``                                 gauge      pool size of this process
``taskrunner_busy_workers``                            gauge      workers running a task
``taskrunner_backlog``                                 gauge      ready messages (last read)
``taskrunner_cluster_workers``                         gauge      workers across processes
``taskrunner_predicted_wait_seconds``                  gauge      duration x backlog / workers
=====================================================  =========  ==============================
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskrunner.errors import ConfigurationError
from taskrunner.histograms import BUCKETS, SeriesSnapshot
from taskrunner.monitor import QueueReading

if TYPE_CHECKING:
    from taskrunner.runner import Runner
    from taskrunner.stats import RunnerStats

__all__ = ["MetricsServer", "start_metrics_server"]

# A scrape waits at most this long for the event loop to produce a snapshot.
_SNAPSHOT_TIMEOUT_SECONDS = 5.0


@dataclass
class MetricsServer:
    """A running metrics endpoint; `close` stops it.

    Attributes:
        port: The port it listens on (useful when 0 was asked for).
    """

    port: int
    _server: Any

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def start_metrics_server(runner: Runner, port: int, *, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve `runner`'s metrics at ``http://addr:port/metrics``; call from the event loop.

    Args:
        runner: The runner to report on.
        port: TCP port (0 picks a free one).
        addr: Interface to bind; loopback by default, so nothing is exposed by accident.

    Raises:
        ConfigurationError: prometheus-client is not installed (``pip install
            'taskrunner-queue[prometheus]'``).
        RuntimeError: Called outside a running event loop.
    """
    try:
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    except ImportError as exc:
        raise ConfigurationError(
            "metrics need prometheus-client: pip install 'taskrunner-queue[prometheus]'",
            setting="metrics_port",
        ) from exc
    loop = asyncio.get_running_loop()
    queue = runner.queue_name

    class _Collector:
        def collect(self) -> Iterator[Any]:
            async def snapshot() -> _Scrape:
                monitor = runner.monitor
                return _Scrape(
                    stats=runner.stats(),
                    series=runner.histograms.snapshot(),
                    reading=monitor.queue_stats,
                    reading_age=monitor.queue_stats_age(),
                )

            scrape = asyncio.run_coroutine_threadsafe(snapshot(), loop).result(
                _SNAPSHOT_TIMEOUT_SECONDS
            )
            stats = scrape.stats

            def counter(name: str, doc: str, value: float) -> Any:
                family = CounterMetricFamily(name, doc, labels=["queue"])
                family.add_metric([queue], value)
                return family

            def gauge(name: str, doc: str, value: float | None) -> Any:
                family = GaugeMetricFamily(name, doc, labels=["queue"])
                if value is not None:
                    family.add_metric([queue], value)
                return family

            yield from _attempt_families(queue, scrape.series)
            yield from _queue_families(queue, scrape.reading, scrape.reading_age)
            yield counter("taskrunner_received", "Deliveries leased by fetchers.", stats.received)
            yield counter(
                "taskrunner_reclaimed", "Deliveries taken over by the reclaimer.", stats.reclaimed
            )
            yield counter(
                "taskrunner_failures_handled",
                "Terminal failures a failed-task handler took.",
                stats.handled,
            )
            yield counter(
                "taskrunner_lease_lost", "Leases found lost while held.", stats.lease_lost
            )
            yield counter(
                "taskrunner_ack_uncertain",
                "Acks resent after a failed send that found the lease gone.",
                stats.ack_uncertain,
            )
            yield counter(
                "taskrunner_leases_adopted",
                "Running messages handed back by a receive or reclaim and adopted.",
                stats.leases_adopted,
            )
            per_task = {
                "taskrunner_task_succeeded": ("Attempts that returned normally.", "succeeded"),
                "taskrunner_task_failed": ("Attempts that raised or timed out.", "failed"),
                "taskrunner_task_retried": ("Failed attempts released for a retry.", "retried"),
                "taskrunner_task_dead_lettered": (
                    "Messages moved to the dead-letter store.",
                    "dead_lettered",
                ),
            }
            for name, (doc, attribute) in per_task.items():
                family = CounterMetricFamily(name, doc, labels=["queue", "task"])
                for task, task_stats in stats.tasks.items():
                    family.add_metric([queue, task], getattr(task_stats, attribute))
                yield family
            durations = GaugeMetricFamily(
                "taskrunner_task_duration_seconds",
                "Moving average of attempt durations (deprecated: use the histogram "
                "taskrunner_attempt_duration_seconds).",
                labels=["queue", "task"],
            )
            for task, task_stats in stats.tasks.items():
                if task_stats.average_seconds is not None:
                    durations.add_metric([queue, task], task_stats.average_seconds)
            yield durations
            yield gauge("taskrunner_in_flight", "Deliveries held by this process.", stats.in_flight)
            yield gauge("taskrunner_workers", "Pool size of this process.", stats.workers)
            yield gauge("taskrunner_busy_workers", "Workers running a task.", stats.busy)
            yield gauge("taskrunner_backlog", "Ready messages in the backend.", stats.backlog)
            yield gauge(
                "taskrunner_cluster_workers",
                "Workers serving the queue across live processes.",
                stats.cluster_workers,
            )
            yield gauge(
                "taskrunner_predicted_wait_seconds",
                "Average duration x backlog / cluster workers.",
                stats.predicted_wait_seconds,
            )

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    server, _ = start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(port=server.server_port, _server=server)


@dataclass(frozen=True, slots=True)
class _Scrape:
    """Everything one scrape reports, copied on the event loop in one go."""

    stats: RunnerStats
    series: list[SeriesSnapshot]
    reading: QueueReading | None
    reading_age: float | None


# The ``le`` label of each bucket, spelled as the official client spells it.
_LE = tuple(f"{bound:.1f}" if bound == int(bound) else repr(bound) for bound in BUCKETS)


def _attempt_families(queue: str, series: list[SeriesSnapshot]) -> Iterator[Any]:
    """The duration and latency histograms and the outcome counter, per task."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    labels = ["queue", "task"]
    duration = HistogramMetricFamily(
        "taskrunner_attempt_duration_seconds",
        "How long task code ran per attempt (not cut short by shutdown).",
        labels=labels,
    )
    latency = HistogramMetricFamily(
        "taskrunner_queue_latency_seconds",
        "Dispatch (or becoming due) to start of the first delivery.",
        labels=labels,
    )
    attempts = CounterMetricFamily(
        "taskrunner_attempts",
        "Finished attempts by outcome.",
        labels=["queue", "task", "outcome"],
    )
    for one in series:
        duration.add_metric(
            [queue, one.task],
            _buckets(one.duration_buckets, one.duration_count),
            one.duration_sum,
        )
        latency.add_metric(
            [queue, one.task], _buckets(one.latency_buckets, one.latency_count), one.latency_sum
        )
        for outcome, count in one.outcomes.items():
            attempts.add_metric([queue, one.task, outcome.value], count)
    yield duration
    yield latency
    yield attempts


def _buckets(cumulative: tuple[int, ...], count: int) -> list[tuple[str, float]]:
    return [*zip(_LE, cumulative, strict=True), ("+Inf", count)]


def _queue_families(queue: str, reading: QueueReading | None, age: float | None) -> Iterator[Any]:
    """The backend's counts from the monitor's last read, and how old that read is."""
    from prometheus_client.core import GaugeMetricFamily

    messages = GaugeMetricFamily(
        "taskrunner_queue_messages",
        "Messages in the backend by state, at the monitor's last read.",
        labels=["queue", "state"],
    )
    oldest = GaugeMetricFamily(
        "taskrunner_queue_oldest_ready_age_seconds",
        "Age of the oldest ready message, at the monitor's last read.",
        labels=["queue"],
    )
    read_at = GaugeMetricFamily(
        "taskrunner_queue_stats_timestamp_seconds",
        "Unix time of the monitor's last successful read of the backend's counts.",
        labels=["queue"],
    )
    read_age = GaugeMetricFamily(
        "taskrunner_queue_stats_age_seconds",
        "Seconds since the monitor's last successful read of the backend's counts.",
        labels=["queue"],
    )
    if reading is not None:
        counts = reading.stats
        for state, value in (
            ("ready", counts.ready),
            ("delayed", counts.delayed),
            ("in_flight", counts.in_flight),
            ("dead", counts.dead),
        ):
            messages.add_metric([queue, state], value)
        if counts.oldest_ready_age_seconds is not None:
            oldest.add_metric([queue], counts.oldest_ready_age_seconds)
        read_at.add_metric([queue], reading.read_at)
    if age is not None:
        read_age.add_metric([queue], age)
    yield messages
    yield oldest
    yield read_at
    yield read_age
