"""Duration and queue-latency histograms and outcome counters, per queue and task.

Internal module. `Histograms` is the `taskrunner.AttemptObserver` the runner installs
first; `taskrunner.metrics` turns its counts into Prometheus histograms and counters
at scrape time (see docs/metrics.md). Recording an attempt costs a dictionary lookup,
one or two bisections and a few integer and float additions on the event loop: no
lock (every call comes from the event loop) and no import of prometheus-client (an
optional extra).

Label cardinality is bounded whatever arrives on the wire: an attempt is recorded
under its task's name only when that name is registered on the app (or, without a
way to ask the app, when the task's code ran, which proves it is); every other
attempt - an unknown task name, an undecodable or oversized body - is recorded under
the one label `UNKNOWN_TASK`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import accumulate

from taskrunner.attempts import Attempt, Outcome

__all__ = ["BUCKETS", "UNKNOWN_TASK", "Histograms", "SeriesSnapshot"]

BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)
"""Upper bounds (``le``, inclusive) of both histograms' buckets, in seconds.

From 1 ms to 1 h, about three per decade up to 10 s, then the minutes background
jobs and backlogs are measured in; anything longer falls in ``+Inf`` only.
"""

UNKNOWN_TASK = "<unknown>"
"""The task label of attempts whose task name is not registered on the app."""

_INF = float("inf")
_SUCCEEDED = Outcome.SUCCEEDED
_CANCELLED = Outcome.CANCELLED


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesSnapshot:
    """The counts of one task at one instant (what a scrape exports).

    Attributes:
        task: The task label (a registered name, or `UNKNOWN_TASK`).
        duration_buckets: Cumulative counts of attempt durations per bound of
            `BUCKETS` (a duration equal to a bound counts in that bound's bucket);
            the ``+Inf`` bucket is `duration_count`.
        duration_sum: Sum of the durations, in seconds.
        duration_count: Number of durations observed.
        latency_buckets: As `duration_buckets`, for queue latencies.
        latency_sum: Sum of the queue latencies, in seconds.
        latency_count: Number of queue latencies observed (first deliveries).
        outcomes: Finished attempts by outcome, every `Outcome` present (0 if none).
    """

    task: str
    duration_buckets: tuple[int, ...]
    duration_sum: float
    duration_count: int
    latency_buckets: tuple[int, ...]
    latency_sum: float
    latency_count: int
    outcomes: Mapping[Outcome, int]


class _Series:
    """Mutable counts of one task; per-bucket (not cumulative) so a record is one add."""

    __slots__ = (
        "duration",
        "duration_sum",
        "latency",
        "latency_sum",
        "outcomes",
        "succeeded",
    )

    def __init__(self) -> None:
        # One slot per bound, then one for values above the last (``+Inf`` only).
        self.duration = [0] * (len(BUCKETS) + 1)
        self.duration_sum = 0.0
        self.latency = [0] * (len(BUCKETS) + 1)
        self.latency_sum = 0.0
        # The common outcome has its own attribute: hashing an enum member is a
        # Python-level call, too slow to pay on every success.
        self.succeeded = 0
        self.outcomes: dict[Outcome, int] = {}

    def snapshot(self, task: str) -> SeriesSnapshot:
        duration = tuple(accumulate(self.duration))
        latency = tuple(accumulate(self.latency))
        outcomes = {outcome: self.outcomes.get(outcome, 0) for outcome in Outcome}
        outcomes[_SUCCEEDED] = self.succeeded
        return SeriesSnapshot(
            task=task,
            duration_buckets=duration[:-1],
            duration_sum=self.duration_sum,
            duration_count=duration[-1],
            latency_buckets=latency[:-1],
            latency_sum=self.latency_sum,
            latency_count=latency[-1],
            outcomes=outcomes,
        )


class Histograms:
    """An `AttemptObserver` that records every finished attempt of one queue.

    Per task: a histogram of attempt durations (`Attempt.seconds`, when the task's
    code ran and was not cancelled by a shutdown, which cuts it short), a histogram of
    queue latencies (`Attempt.latency_seconds`, on the first delivery only: later
    ones include the retry backoff; a latency that is not a finite number, from a
    hostile or broken producer, is left out), and a count of attempts per `Outcome`.

    Args:
        queue: The queue's name (the ``queue`` label).
        known_task: Tells whether a task name is registered on the app (e.g.
            ``app.tasks.__contains__``). Without it, a name counts as known once a task
            of that name ran; attempts of a registered task that failed before running
            (an undecodable payload, too many deliveries) are then recorded under
            `UNKNOWN_TASK` until one of its attempts ran.
    """

    def __init__(self, queue: str, *, known_task: Callable[[str], bool] | None = None) -> None:
        self.queue = queue
        self._known_task = known_task
        # Only names found to be registered are keys, so hostile names never grow it.
        self._series: dict[str | None, _Series] = {}
        self._unknown = _Series()

    def attempt_started(self, attempt: Attempt) -> object:
        """Nothing to do when an attempt starts."""
        return None

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        """Record the attempt's duration, first-delivery latency and outcome."""
        # Written for speed, since it runs for every message: locals, no property
        # calls, the common outcome tested by identity.
        series = self._series.get(attempt.task)
        if series is None:
            series = self._series_of(attempt)
        outcome = attempt.outcome
        if outcome is _SUCCEEDED:
            series.succeeded += 1
        elif outcome is not None:
            series.outcomes[outcome] = series.outcomes.get(outcome, 0) + 1
        seconds = attempt.seconds
        if seconds is not None and outcome is not _CANCELLED:
            series.duration[bisect_left(BUCKETS, seconds)] += 1
            series.duration_sum += seconds
        if attempt.delivery_count == 1:
            # Attempt.latency_seconds, inlined.
            since = attempt.due_at
            if since is None:
                since = attempt.enqueued_at
            if since is not None:
                latency = attempt.started_at - since
                if latency < 0.0:
                    latency = 0.0  # producer's clock ahead of this worker's
                # NaN fails the comparison too; infinities would poison the sum for good.
                if latency < _INF:
                    series.latency[bisect_left(BUCKETS, latency)] += 1
                    series.latency_sum += latency

    def _series_of(self, attempt: Attempt) -> _Series:
        """The series of a task name not seen yet: a new one if it is registered."""
        name = attempt.task
        if name is None:
            return self._unknown
        known = self._known_task
        if (attempt.ran if known is None else known(name)) and name != UNKNOWN_TASK:
            series = self._series[name] = _Series()
            return series
        return self._unknown

    def snapshot(self) -> list[SeriesSnapshot]:
        """The counts of every task seen so far (call from the event loop).

        Registered tasks in the order they were first seen, then `UNKNOWN_TASK` if any
        attempt was recorded under it. Counts only grow, as Prometheus counters must.
        """
        result = [
            series.snapshot(name) for name, series in self._series.items() if name is not None
        ]
        unknown = self._unknown
        if unknown.succeeded or unknown.outcomes or any(unknown.latency) or any(unknown.duration):
            result.append(unknown.snapshot(UNKNOWN_TASK))
        return result
