"""``taskrunner inspect``: ready, in flight, dead, consumers and predicted wait per queue.

With ``--id ID`` (repeatable) it shows where those messages are instead: their state
(delayed, ready, running, succeeded, failed, dead, unknown), delivery count, last
error and times, as `taskrunner.Producer.status` reports them. It exits 1 when any
id is unknown, so a script can tell.
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from taskrunner.app import App
from taskrunner.backends import open_queue
from taskrunner.cli.app import load_app
from taskrunner.cli.common import (
    DEFAULT_QUEUE,
    EXIT_BACKEND,
    EXIT_OK,
    Parser,
    UsageError,
    app_options,
    note_default_queue,
)
from taskrunner.cli.output import Output, seconds
from taskrunner.producer import Producer
from taskrunner.queue import Queue, WorkerInfo
from taskrunner.redaction import mask_url
from taskrunner.results import TaskState, TaskStatus
from taskrunner.settings import Settings
from taskrunner.tuning import predicted_wait

__all__ = ["INSPECT_CONSUMERS_SHOWN", "add_parser", "run_inspect"]

# Consumers listed per queue in table form (JSON lists them all).
INSPECT_CONSUMERS_SHOWN = 50


def add_parser(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``inspect`` command."""
    inspect_ = commands.add_parser(
        "inspect",
        parents=[common],
        help="show queues: ready, in flight, dead, consumers, predicted wait",
    )
    app_options(inspect_)
    inspect_.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help="queue to show (repeatable; default: the App's queue, else 'default')",
    )
    inspect_.add_argument(
        "--id",
        action="extend",
        nargs="+",
        dest="message_ids",
        metavar="ID",
        help="show where these messages are (one queue; several ids after one --id, or "
        "--id repeated): their state, delivery count, last error and times",
    )


class _WorkerSummary(msgspec.Struct, kw_only=True):
    processes: int
    workers: int
    busy: int
    average_seconds: float | None


class _QueueReport(msgspec.Struct, kw_only=True):
    queue: str
    url: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_age_seconds: float | None
    oldest_in_flight_age_seconds: float | None
    consumers: list[dict[str, Any]]
    workers: _WorkerSummary | None
    predicted_wait_seconds: float | None


def _average_seconds(workers: list[WorkerInfo]) -> float | None:
    """Average task duration over live processes, weighted by their pool sizes."""
    timed = [(w.average_seconds, w.workers) for w in workers if w.average_seconds is not None]
    weight = sum(n for _, n in timed)
    return sum(s * n for s, n in timed) / weight if weight else None


async def _report(queue: Queue, name: str, url: str) -> _QueueReport:
    stats = await queue.stats()
    workers: list[WorkerInfo] | None = None
    registry = queue.worker_registry
    if registry is not None:
        workers = await registry.live_workers()
    summary = None
    wait = None
    if workers is not None:
        summary = _WorkerSummary(
            processes=len(workers),
            workers=sum(w.workers for w in workers),
            busy=sum(w.busy for w in workers),
            average_seconds=_average_seconds(workers),
        )
        wait = predicted_wait(summary.average_seconds, stats.ready, summary.workers)
    return _QueueReport(
        queue=name,
        url=mask_url(url),
        ready=stats.ready,
        delayed=stats.delayed,
        in_flight=stats.in_flight,
        dead=stats.dead,
        oldest_ready_age_seconds=stats.oldest_ready_age_seconds,
        oldest_in_flight_age_seconds=stats.oldest_in_flight_age_seconds,
        consumers=[
            {"name": c.name, "pending": c.pending, "idle_seconds": c.idle_seconds}
            for c in stats.consumers
        ],
        workers=summary,
        predicted_wait_seconds=wait,
    )


async def run_inspect(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Print one report per queue."""
    app = None if settings.app is None else load_app(settings.app, where=settings.source_of("app"))
    names: list[str] = args.queue or [app.queue if app is not None else DEFAULT_QUEUE]
    if not args.queue and app is None:
        note_default_queue()
    if args.message_ids:
        if len(set(names)) > 1:
            raise UsageError("inspect --id: give one --queue (message ids are per queue)")
        return await _inspect_ids(app, names[0], args.message_ids, settings.url, out)
    reports = []
    for name in dict.fromkeys(names):
        async with open_queue(settings.url, name) as queue:
            reports.append(await _report(queue, name, settings.url))
    if out.json:
        out.document({"queues": reports})
        return EXIT_OK
    for index, report in enumerate(reports):
        if index:
            out.line()
        _print_report(report, out)
    return EXIT_OK


def _print_report(report: _QueueReport, out: Output) -> None:
    out.line(f"queue {report.queue!r} on {report.url}")
    workers = report.workers
    if workers is None:
        worker_text = "- (this backend keeps no worker registry)"
    else:
        worker_text = (
            f"{workers.workers} in {workers.processes} process(es), {workers.busy} busy, "
            f"average task {seconds(workers.average_seconds)}"
        )
    rows = [
        ("ready", f"{report.ready}  (oldest waiting {seconds(report.oldest_ready_age_seconds)})"),
        ("delayed", str(report.delayed)),
        (
            "in flight",
            f"{report.in_flight}  (longest idle {seconds(report.oldest_in_flight_age_seconds)})",
        ),
        ("dead-lettered", str(report.dead)),
        ("workers", worker_text),
        ("predicted wait", seconds(report.predicted_wait_seconds)),
    ]
    for label, value in rows:
        out.line(f"  {label:<15} {value}")
    consumers = report.consumers
    if not consumers:
        out.line("  consumers: none")
        return
    out.line(f"  consumers ({len(consumers)}):")
    shown = consumers[:INSPECT_CONSUMERS_SHOWN]
    out.table(
        ("NAME", "PENDING", "IDLE"),
        [(c["name"], str(c["pending"]), seconds(c["idle_seconds"])) for c in shown],
        indent="    ",
    )
    if len(consumers) > len(shown):
        out.line(f"    ... {len(consumers) - len(shown)} more (--json lists all)")


async def _inspect_ids(
    app: App | None, name: str, message_ids: list[str], url: str, out: Output
) -> int:
    async with open_queue(url, name) as queue:
        producer = Producer(queue, app if app is not None else App(name))
        found = await producer.status_many(message_ids)
    if out.json:
        out.document({"queue": name, "messages": [_status_document(s) for s in found]})
    else:
        for index, status in enumerate(found):
            if index:
                out.line()
            _print_status(status, out)
    unknown = any(status.state is TaskState.UNKNOWN for status in found)
    return EXIT_BACKEND if unknown else EXIT_OK


def _status_document(status: TaskStatus) -> dict[str, Any]:
    document: dict[str, Any] = msgspec.to_builtins(status)
    return document


def _print_status(status: TaskStatus, out: Output) -> None:
    out.line(f"message {status.message_id}  {status.state}")
    rows = [
        ("task", status.task),
        ("task id", status.task_id),
        ("deliveries", None if status.delivery_count is None else str(status.delivery_count)),
        ("enqueued at", _iso(status.enqueued_at)),
        ("due at", _iso(status.due_at)),
        ("consumer", status.consumer),
        ("idle", None if status.idle_seconds is None else seconds(status.idle_seconds)),
        ("finished at", _iso(status.finished_at)),
        ("last error", status.last_error),
        ("waiting for", status.waiting_for),
    ]
    for label, value in rows:
        if value is not None:
            out.line(f"  {label:<12} {value}")


def _iso(moment: Any) -> str | None:
    return None if moment is None else str(moment.isoformat(timespec="milliseconds"))
