"""Prometheus metrics of a runner, served over HTTP (extra ``taskrunner-queue[prometheus]``).

Example::

    runner = taskrunner.Runner(queue, app, config)
    server = start_metrics_server(runner, port=9464)   # inside the running event loop
    try:
        await runner.run()
    finally:
        server.close()

Every scrape takes a fresh `Runner.stats` snapshot on the runner's event loop (never
from the HTTP thread, so no counter is read while it changes). Metric names, all with
a ``queue`` label:

=============================================  =======  ====================================
name                                           type     meaning
=============================================  =======  ====================================
``taskrunner_received_total``                  counter  deliveries leased by the fetchers
``taskrunner_reclaimed_total``                 counter  deliveries taken over by the reclaimer
``taskrunner_task_succeeded_total{task}``      counter  attempts that returned normally
``taskrunner_task_failed_total{task}``         counter  attempts that raised or timed out
``taskrunner_task_retried_total{task}``        counter  failed attempts released for a retry
``taskrunner_task_dead_lettered_total{task}``  counter  messages moved to the dead letters
``taskrunner_failures_handled_total``          counter  terminal failures a handler took
``taskrunner_lease_lost_total``                counter  leases found lost while held
``taskrunner_ack_uncertain_total``             counter  resent acks that found the lease gone
``taskrunner_leases_adopted_total``            counter  running messages handed back, adopted
``taskrunner_task_duration_seconds{task}``     gauge    moving average of attempt durations
``taskrunner_in_flight``                       gauge    deliveries held by this process
``taskrunner_workers``                         gauge    pool size of this process
``taskrunner_busy_workers``                    gauge    workers running a task
``taskrunner_backlog``                         gauge    ready messages in the backend
``taskrunner_cluster_workers``                 gauge    workers across live processes
``taskrunner_predicted_wait_seconds``          gauge    duration x backlog / cluster workers
=============================================  =======  ====================================
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskrunner.errors import ConfigurationError

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
            async def snapshot() -> RunnerStats:
                return runner.stats()

            stats = asyncio.run_coroutine_threadsafe(snapshot(), loop).result(
                _SNAPSHOT_TIMEOUT_SECONDS
            )

            def counter(name: str, doc: str, value: float) -> Any:
                family = CounterMetricFamily(name, doc, labels=["queue"])
                family.add_metric([queue], value)
                return family

            def gauge(name: str, doc: str, value: float | None) -> Any:
                family = GaugeMetricFamily(name, doc, labels=["queue"])
                if value is not None:
                    family.add_metric([queue], value)
                return family

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
                "Moving average of attempt durations.",
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
