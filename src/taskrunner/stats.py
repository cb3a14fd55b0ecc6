"""Counters and timings of one runner, and the snapshots users read.

Internal module; `RunnerStats` and `TaskStats` are public through `taskrunner`.
Durations are float seconds (sub-millisecond tasks are not rounded to zero) and
averaged with an exponentially weighted moving average, so the average follows
changes in task duration within a few dozen executions instead of a day.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["RunnerStats", "StatsRecorder", "TaskStats"]

# The task name counted for a dead letter whose body named no task, or an unregistered
# one (a name from the wire must never become a key: hostile input would grow the
# counters, and the metrics' label set, without bound).
MALFORMED_TASK = "<malformed>"

# Weight of the newest sample in the moving average of durations.
_EWMA_WEIGHT = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStats:
    """Per-task counts since the runner started.

    Attributes:
        succeeded: Attempts that returned normally.
        failed: Attempts that raised or timed out.
        retried: Failed attempts released for a retry.
        dead_lettered: Messages of this task moved to the dead-letter store.
        average_seconds: Moving average of attempt durations; None before the first.
    """

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    average_seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerStats:
    """A snapshot of one runner's statistics.

    Attributes:
        received: Deliveries leased by the fetchers.
        reclaimed: Deliveries taken over by the reclaimer.
        succeeded: Attempts that returned normally (and were acked or found lost).
        failed: Attempts that raised or timed out.
        retried: Failed attempts released for a later retry.
        dead_lettered: Messages moved to the dead-letter store by this runner.
        handled: Terminal failures a custom failed-task handler dealt with.
        lease_lost: Deliveries whose lease was found lost while this runner held them.
        ack_uncertain: Acks resent after a failed send that found the lease gone: most
            likely the first send completed the message, but its reply was lost.
        leases_adopted: Messages this runner was still running when a receive or
            reclaim handed them to it again (their lease had lapsed); the running copy
            took over the new delivery instead of a second copy starting.
        in_flight: Deliveries leased and not yet finished.
        workers: Current pool size.
        busy: Workers running a task now.
        average_seconds: Moving average of attempt durations over all tasks.
        backlog: Ready messages in the backend at the last observation.
        cluster_workers: Workers serving the queue across live processes.
        processes: Live worker processes (1 when the backend has no registry).
        predicted_wait_seconds: average duration x backlog / cluster workers, at the
            last observation; None when unknown.
        tasks: Per-task statistics by task name.
    """

    received: int = 0
    reclaimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    handled: int = 0
    lease_lost: int = 0
    ack_uncertain: int = 0
    leases_adopted: int = 0
    in_flight: int = 0
    workers: int = 0
    busy: int = 0
    average_seconds: float | None = None
    backlog: int | None = None
    cluster_workers: int | None = None
    processes: int | None = None
    predicted_wait_seconds: float | None = None
    tasks: dict[str, TaskStats] = field(default_factory=dict)


@dataclass(slots=True)
class _TaskCounters:
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    average_seconds: float | None = None


def _blend(average: float | None, sample: float) -> float:
    return sample if average is None else average + _EWMA_WEIGHT * (sample - average)


class StatsRecorder:
    """Mutable counters the runner's loops update; read through `snapshot`.

    Args:
        known_task: Tells whether a task name is registered on the app; dead letters
            of other names are counted under ``<malformed>``. None trusts every name
            (the caller passes only registered names then).
    """

    def __init__(self, *, known_task: Callable[[str], bool] | None = None) -> None:
        self._known_task = known_task
        self.received = 0
        self.reclaimed = 0
        self.handled = 0
        self.lease_lost = 0
        self.ack_uncertain = 0
        self.leases_adopted = 0
        self.average_seconds: float | None = None
        self._tasks: dict[str, _TaskCounters] = {}

    def _task(self, name: str) -> _TaskCounters:
        counters = self._tasks.get(name)
        if counters is None:
            counters = self._tasks[name] = _TaskCounters()
        return counters

    def attempt_finished(self, task: str, seconds: float, *, ok: bool) -> None:
        """Record one attempt of `task` that took `seconds`."""
        # `_task` and `_blend` written out: this runs for every message.
        counters = self._tasks.get(task)
        if counters is None:
            counters = self._tasks[task] = _TaskCounters()
        if ok:
            counters.succeeded += 1
        else:
            counters.failed += 1
        average = counters.average_seconds
        counters.average_seconds = (
            seconds if average is None else average + _EWMA_WEIGHT * (seconds - average)
        )
        average = self.average_seconds
        self.average_seconds = (
            seconds if average is None else average + _EWMA_WEIGHT * (seconds - average)
        )

    def retried(self, task: str) -> None:
        """Record a failed attempt released for a retry."""
        self._task(task).retried += 1

    def dead_lettered(self, task: str | None) -> None:
        """Record a message dead-lettered (task None: the body named no task)."""
        if not task or (self._known_task is not None and not self._known_task(task)):
            task = MALFORMED_TASK
        self._task(task).dead_lettered += 1

    def attempt_totals(self) -> tuple[int, int]:
        """Succeeded and failed attempts over every task so far (what the registry publishes)."""
        tasks = self._tasks.values()
        return sum(c.succeeded for c in tasks), sum(c.failed for c in tasks)

    def snapshot(
        self,
        *,
        in_flight: int,
        workers: int,
        busy: int,
        backlog: int | None = None,
        cluster_workers: int | None = None,
        processes: int | None = None,
        predicted_wait_seconds: float | None = None,
    ) -> RunnerStats:
        """Freeze the counters, with the pool and queue figures the caller supplies."""
        tasks = {
            name: TaskStats(
                succeeded=c.succeeded,
                failed=c.failed,
                retried=c.retried,
                dead_lettered=c.dead_lettered,
                average_seconds=c.average_seconds,
            )
            for name, c in self._tasks.items()
        }
        return RunnerStats(
            received=self.received,
            reclaimed=self.reclaimed,
            succeeded=sum(t.succeeded for t in tasks.values()),
            failed=sum(t.failed for t in tasks.values()),
            retried=sum(t.retried for t in tasks.values()),
            dead_lettered=sum(t.dead_lettered for t in tasks.values()),
            handled=self.handled,
            lease_lost=self.lease_lost,
            ack_uncertain=self.ack_uncertain,
            leases_adopted=self.leases_adopted,
            in_flight=in_flight,
            workers=workers,
            busy=busy,
            average_seconds=self.average_seconds,
            backlog=backlog,
            cluster_workers=cluster_workers,
            processes=processes,
            predicted_wait_seconds=predicted_wait_seconds,
            tasks=tasks,
        )
