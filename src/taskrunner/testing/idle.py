"""Run an app's tasks on a memory queue until nothing is left to do.

`run_until_idle` is the one call a unit test of task code needs: it runs a real
`Runner` (retries, backoff, delays, results: the same code paths as production) on a
fake clock that jumps by itself, and with ``fail_fast`` turns the first task failure
into the test's own exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import msgspec

from taskrunner.app import App, Task
from taskrunner.attempts import Attempt, Outcome
from taskrunner.backends import private_memory_queue
from taskrunner.codec import decode_envelope
from taskrunner.config import RunnerConfig
from taskrunner.errors import DecodeError
from taskrunner.queue import Delivery, Queue, results_of
from taskrunner.results import decode_result, result_value
from taskrunner.runner import Runner
from taskrunner.testing.clock import FakeClock

__all__ = ["IdleTimeoutError", "RunRecord", "TaskRun", "run_until_idle"]

# Long fake intervals for the runner's own loops: every timer the runner sets is a
# point autojump stops at, so fewer ticks make simulated hours cost less real time.
# Lease, drain and heartbeat are irrelevant on one in-process worker.
_DEFAULTS: dict[str, Any] = {
    "num_workers": 10,
    "block_seconds": 3600.0,
    "lease_seconds": 3600.0,
    "monitor_interval_seconds": 3600.0,
    "drain_timeout_seconds": 0.0,
}

# Outcomes after which the message will not run again.
_FINAL_FAILURES = frozenset({Outcome.DEAD_LETTERED, Outcome.HANDLED})


class IdleTimeoutError(AssertionError):
    """`run_until_idle` did not reach idle within its (real-time) timeout.

    Attributes:
        pending: What was still to do, one line per kind (ready, delayed, running).
    """

    def __init__(self, message: str, *, pending: Sequence[str]) -> None:
        super().__init__(message)
        self.pending = list(pending)


@dataclass(frozen=True)
class TaskRun:
    """One attempt of one task, as the run saw it.

    Attributes:
        task: The task name (None for a body that was not a readable envelope).
        message_id: The backend's message id (the same for every attempt of it).
        payload: The payload as decoded JSON (a struct or dataclass arrives as a dict;
            None for a task without one or a body that was not a readable envelope).
        attempt: 1 for the first delivery, 2 for the first retry, and so on.
        outcome: How the attempt ended (``succeeded``, ``retried``, ``dead_lettered``...).
        error: The attempt's exception, None on success.
        fake_time: The clock's `monotonic` reading when the attempt ended.
    """

    task: str | None
    message_id: str
    payload: Any
    attempt: int
    outcome: Outcome | None
    error: BaseException | None
    fake_time: float


@dataclass
class RunRecord:
    """What `run_until_idle` ran, in the order attempts finished.

    Attributes:
        runs: Every attempt.
        results: Stored results by message id (for tasks with ``store_result``).
        fake_seconds: Fake time that passed during the run.
    """

    runs: list[TaskRun] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    fake_seconds: float = 0.0

    def of(self, task: Task[Any] | str) -> list[TaskRun]:
        """The attempts of `task` (a task, or its registered name)."""
        name = task if isinstance(task, str) else task.name
        return [run for run in self.runs if run.task == name]

    @property
    def succeeded(self) -> list[TaskRun]:
        """The attempts that succeeded."""
        return [run for run in self.runs if run.outcome is Outcome.SUCCEEDED]


class _Recorder:
    """An attempt observer that keeps every attempt and the first final failure."""

    def __init__(self, clock: FakeClock, record: RunRecord, *, fail_fast: bool) -> None:
        self._clock = clock
        self._record = record
        self._fail_fast = fail_fast
        self.failure: BaseException | None = None
        self.failed = asyncio.Event()
        # Filled by _Tap as messages are received, before their attempts start.
        self.payloads: dict[str, Any] = {}

    def attempt_started(self, attempt: Attempt) -> object:
        return None

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        self._record.runs.append(
            TaskRun(
                task=attempt.task,
                message_id=attempt.message_id,
                payload=self.payloads.get(attempt.message_id),
                attempt=attempt.delivery_count,
                outcome=attempt.outcome,
                error=attempt.error,
                fake_time=self._clock.monotonic(),
            )
        )
        final = attempt.outcome in _FINAL_FAILURES
        if self._fail_fast and final and self.failure is None:
            # No exception when the task never ran (a malformed body, an unknown task):
            # the test still fails, with the reason the runner gave.
            self.failure = attempt.error or AssertionError(
                f"message {attempt.message_id} ({attempt.task or 'no readable task'}) "
                f"failed without running: {attempt.description or attempt.outcome}"
            )
            self.failed.set()


class _Tap:
    """Forwards everything to the queue; keeps each received message's payload.

    The attempt observer is told the message id but not the body: the payload for the
    record is read here, once per delivery, as the runner receives it.
    """

    def __init__(self, inner: Queue, payloads: dict[str, Any]) -> None:
        self._inner = inner
        self._payloads = payloads

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        deliveries = await self._inner.receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
        )
        self._keep(deliveries)
        return deliveries

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        deliveries = await self._inner.reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )
        self._keep(deliveries)
        return deliveries

    def _keep(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            try:
                payload = msgspec.json.decode(bytes(decode_envelope(delivery.body).payload))
            except (DecodeError, msgspec.DecodeError):
                payload = None  # the runner dead-letters it; the record says task None
            self._payloads[delivery.message_id] = payload

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def run_until_idle(
    app: App,
    queue: Queue | None = None,
    *,
    clock: FakeClock | None = None,
    fail_fast: bool = True,
    timeout: float = 10.0,  # noqa: ASYNC109 - real time, by design: see Raises
    config: RunnerConfig | None = None,
) -> RunRecord:
    """Run `app`'s tasks from `queue` until nothing is ready, delayed, in flight or running.

    The runner's own errors (not the tasks') are raised as they are.

    Time is simulated: the clock jumps to each next timer whenever the event loop is
    idle, so retries with backoff and delayed messages run at once in real time (a
    delay of a fake hour costs a few hundred timer jumps). Each call runs one fresh
    `Runner` and stops it before returning.

    Guarantees:

    * Returns only when the queue has no ready, delayed or in-flight message and no
      task (coroutine or a plain ``def`` task's thread) is running.
    * With `fail_fast`, the first message whose last attempt failed (dead-lettered or
      handed to the failed-task handler) stops the run and its exception is raised:
      the task's own exception object, with the task's frames in its traceback. A
      message that failed without running (malformed, unknown task) raises an
      `AssertionError` with the runner's reason.
      Attempts that are retried do not stop the run.
    * Never hangs: `timeout` is real (wall) seconds; past it, `IdleTimeoutError` says
      what was still pending.

    Args:
        app: The tasks to run.
        queue: The queue your code dispatched onto; its clock must be `clock`. None:
            a fresh, empty memory queue on a fresh clock.
        clock: The queue's `FakeClock`; it must have ``autojump=True``. None: the
            queue's own, when it has a ``clock`` attribute holding a `FakeClock` (the
            ``taskrunner_queue`` fixture's does), else a new one (only valid with
            ``queue=None``).
        fail_fast: Raise the first final task failure.
        timeout: Real seconds before giving up.
        config: Runner settings, used as given. None: long receive, lease and
            monitor intervals (an hour each), since every timer is a stop for the
            clock; a config of your own with short ones makes long runs slower.

    Returns:
        The attempts that ran, results stored for them, and the fake time taken.

    Raises:
        BaseException: With `fail_fast`, the failing task's exception.
        IdleTimeoutError: Not idle within `timeout` real seconds.
        ValueError: A queue without its clock, or a clock without autojump.
    """
    if clock is None and queue is not None:
        # A queue that says which clock it runs on (the taskrunner_queue fixture's).
        known = getattr(queue, "clock", None)
        if not isinstance(known, FakeClock):
            raise ValueError("run_until_idle(queue=...) needs clock=: the FakeClock of that queue")
        clock = known
    if clock is None:
        clock = FakeClock(autojump=True)
    if not clock.autojump:
        raise ValueError("run_until_idle needs a FakeClock(autojump=True)")
    if queue is None:
        queue = private_memory_queue(clock=clock)
    record = RunRecord()
    recorder = _Recorder(clock, record, fail_fast=fail_fast)
    base = config if config is not None else RunnerConfig(**_DEFAULTS)
    tapped = cast(Queue, _Tap(queue, recorder.payloads))
    observing = replace(base, observers=(*base.observers, recorder))
    runner = Runner(tapped, app, observing, clock=clock)
    release = clock.hold_while(lambda: bool(runner.threads_running))
    started = clock.monotonic()
    run = asyncio.create_task(runner.run(), name="taskrunner:run_until_idle")
    try:
        try:
            async with asyncio.timeout(timeout):
                await runner.wait_ready()
                await _wait_until_done(app, record, queue, runner, clock, recorder, run)
                # Before the stop: shutting down waits out the fetcher's receive.
                record.fake_seconds = clock.monotonic() - started
        except TimeoutError:
            pending = await _pending(queue, runner)
            raise IdleTimeoutError(
                f"not idle after {timeout:g} real seconds ({clock.monotonic() - started:g} "
                f"fake): {'; '.join(pending) or 'nothing visible pending'}",
                pending=pending,
            ) from None
    finally:
        release()
        if not run.done():
            runner.stop()
            runner.stop()
        # Not gather(return_exceptions=True): a runner crash must reach the test.
        await run
    await _collect_results(app, queue, record)
    if recorder.failure is not None:
        raise recorder.failure
    return record


async def _wait_until_done(
    app: App,
    record: RunRecord,
    queue: Queue,
    runner: Runner,
    clock: FakeClock,
    recorder: _Recorder,
    run: asyncio.Task[None],
) -> None:
    while not recorder.failed.is_set() and not run.done():
        # The runner's own end too: a crashed runner sleeps on nothing, so the loop
        # would never turn idle-with-sleepers and the crash would wait for the timeout.
        idle = asyncio.ensure_future(clock.wait_idle())
        try:
            await asyncio.wait({idle, run}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
        if run.done():
            return
        # Now, not at the end: a result may expire in the fake time still to pass.
        await _collect_results(app, queue, record)
        if runner.threads_running or runner.stats().in_flight:
            continue
        stats = await queue.stats()
        if stats.ready == 0 and stats.in_flight == 0 and stats.delayed == 0:
            return


async def _pending(queue: Queue, runner: Runner) -> list[str]:
    stats = await queue.stats()
    lines = [
        f"{count} {what}"
        for count, what in (
            (stats.ready, "ready"),
            (stats.delayed, "delayed"),
            (stats.in_flight, "in flight"),
        )
        if count
    ]
    threads = runner.threads_running
    if threads:
        lines.append(f"threads still running: {', '.join(threads)}")
    return lines


async def _collect_results(app: App, queue: Queue, record: RunRecord) -> None:
    store = results_of(queue)
    ids = sorted({run.message_id for run in record.succeeded} - set(record.results))
    if store is None or not ids:
        return
    for message_id, body in zip(ids, await store.get_results(ids), strict=True):
        if body is not None:
            record.results[message_id] = result_value(message_id, decode_result(body), app.tasks)
