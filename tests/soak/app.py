"""The soak's tasks: sleep for the job's duration and record the attempt's start and end.

Every attempt writes a `Start` record before its work and an `End` record when its
code stops (``ok``, ``error`` for the deliberate first-attempt failure, ``cancelled``
when a graceful stop cancels it), into the worker's completion log. The End is written
before the runner acks, so ``[start, end]`` is exactly when the task's code ran.

`work` is ``async def`` (runs on the loop); `work_sync` is a plain ``def`` (runs in a
worker thread, cannot be cancelled). `configure` must be called by the worker first.
"""

from __future__ import annotations

import asyncio
import time

import msgspec

import taskrunner

from .records import End, LogWriter, Start

__all__ = ["MAX_RETRIES", "DeliberateError", "Job", "app", "configure", "work", "work_sync"]

app = taskrunner.App("soak")

# Crashes and graceful stops cost deliveries; a long job may be cut short many times
# in a run, and must never be dead-lettered for it.
MAX_RETRIES = 1000


class Job(msgspec.Struct, frozen=True):
    """One soak job.

    Attributes:
        n: The job's number (unique in a run).
        seconds: How long its work takes.
        fail_first: Raise on the first delivery (exercises release and retry).
    """

    n: int
    seconds: float
    fail_first: bool = False


class DeliberateError(Exception):
    """Raised by a ``fail_first`` job on its first delivery."""


class _Log:
    writer: LogWriter | None = None
    worker = -1


def configure(writer: LogWriter, worker: int) -> None:
    """Record attempts into `writer` as worker incarnation `worker`."""
    _Log.writer = writer
    _Log.worker = worker


def _record(job: Job, outcome: str | None) -> None:
    writer = _Log.writer
    assert writer is not None, "tests.soak.app.configure() was not called"
    ctx = taskrunner.current_task()
    now = time.monotonic()
    fields = (_Log.worker, job.n, ctx.message_id, ctx.delivery_count, ctx.consumer, now)
    writer.write(Start(*fields) if outcome is None else End(*fields, outcome=outcome))


def _fails(job: Job) -> bool:
    return job.fail_first and taskrunner.current_task().delivery_count == 1


@app.task(name="work", max_retries=MAX_RETRIES)
async def work(job: Job) -> None:
    """Sleep `job.seconds` on the loop."""
    _record(job, None)
    outcome = "error"
    try:
        await asyncio.sleep(job.seconds)
        if _fails(job):
            raise DeliberateError(f"job {job.n} fails its first delivery")
        outcome = "ok"
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        _record(job, outcome)


@app.task(name="work_sync", max_retries=MAX_RETRIES)
def work_sync(job: Job) -> None:
    """Sleep `job.seconds` in a worker thread."""
    _record(job, None)
    outcome = "error"
    try:
        time.sleep(job.seconds)
        if _fails(job):
            raise DeliberateError(f"job {job.n} fails its first delivery")
        outcome = "ok"
    finally:
        _record(job, outcome)
