"""Tuning mode: the control law that sizes the pool, and the object that applies it.

Internal module. The *predicted wait* is how long a newly enqueued message would wait
before a worker starts it: average task duration x ready backlog / workers serving the
queue (across every process, from the backend's worker registry). The controller keeps
it inside ``desired_wait_seconds ± wait_tolerance_seconds``:

* inside the band nothing changes (but see `Autoscaler`: a process far from its equal
  share moves to it);
* outside it, the pool moves toward the band. The target is the size that serves the
  arrival rate and brings the backlog to the near edge of the band within a horizon of
  four desired waits: ``d x λ + d x (backlog - edge x λ) / horizon``, where ``d`` is the
  average duration and ``λ`` the arrival rate, estimated as busy workers / d plus the
  backlog's trend. Growth goes straight to the target; shrinking goes at most 10 % per
  decision. When rounding leaves the size where it is, it moves by one worker, unless
  the backlog is already moving toward the band or, with peers, this process is
  already short of its equal share (for a step down) or past it (for a step up);
* an empty queue shrinks the pool by 10 % per decision, down to ``min_workers``;
* the size is clamped to [min_workers, max_workers] and changes at most once per
  ``cooldown_seconds`` (0: no cooldown at all).

Why not the Go library's law (size x predicted / target)? On a queue the backlog
integrates the difference between arrivals and service, and a law that looks only at
the predicted wait keeps overshooting: in simulation it swung between 3 and 200
workers under a steady load. Aiming at the flow that keeps the backlog still, and at
the band's edge rather than its centre, settles within a few cooldowns and then holds.

Each process aims at an equal share (1 / live processes) of the cluster-wide target,
given the sizes its peers published after their last resize. Scaling its current share
instead left nothing pulling the shares together: two runners drifted to 3 + 19 and
9 + 99 workers (issue 17). With equal bounds, settled processes stay within a few
workers of each other (tests/tuning/test_processes.py states the ratio); a process held
at its own ``max_workers`` leaves the others at their share, so give processes the same
bounds. Shrinking never cancels a running task: the pool is over capacity until enough
tasks finish.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from taskrunner.clock import Clock
from taskrunner.config import TuningConfig
from taskrunner.pool import WorkerPool

__all__ = ["Autoscaler", "Decision", "Signals", "decide_pool_size", "predicted_wait"]

_log = logging.getLogger("taskrunner.tuning")

# An empty queue, or a wait below the band, shrinks the pool to this fraction at most.
_SHRINK_STEP = 0.9

# The backlog error is corrected over this many desired waits.
_HORIZON_WAITS = 4.0

# Time constant of the smoothed estimates, in desired waits.
_SMOOTHING_WAITS = 4.0

# A predicted wait above this multiple of the band's upper edge bypasses smoothing and
# hysteresis (a burst).
_FAR_FACTOR = 2.0

# A wait above the band that rose since the previous observation by more than the band's
# width (and at least this many desired waits, for a band of zero width) is far too.
_SURGE_WAITS = 0.5

# ... and by more than this many standard deviations of the backlog's Poisson noise.
_SURGE_SIGMAS = 4.0

# In band, a process further than this fraction of its equal share from it moves to it.
_SHARE_SLACK = 0.15

# A resize opposite to the previous one must move at least this many workers.
_REVERSAL_MIN_STEP = 2

# ... unless the controller wanted it on this many decisions in a row.
_REVERSAL_DECISIONS = 2


@dataclass(frozen=True, slots=True)
class Decision:
    """A pool size and the reason for it.

    Attributes:
        size: The pool size to have.
        reason: One of ``no_estimate``, ``queue_empty``, ``in_band``, ``above_band``,
            ``draining`` (above, but the backlog already falls), ``below_band``,
            ``filling`` (below, but the backlog already grows), ``hysteresis`` (a
            one-worker step back held by the `Autoscaler`), ``converging`` (in band,
            but more than 15 % away from an equal share: moved to it).
    """

    size: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Signals:
    """What the controller knows about the queue.

    Attributes:
        backlog: Ready messages.
        trend_per_second: Change of the backlog per second since the previous
            observation (None on the first).
        workers: Workers serving the queue across processes.
        busy: Of those, running a task.
        average_seconds: Average task duration (None before any finished).
        arrivals_per_second: The arrival rate as estimated by the caller (smoothed);
            None: busy / average + trend, from this observation alone.
        processes: Live processes sharing the queue. Given, each process aims at an
            equal share of the cluster-wide size (so shares converge); None: at its
            current share (its size / workers).
    """

    backlog: int
    trend_per_second: float | None
    workers: int
    busy: int
    average_seconds: float | None
    arrivals_per_second: float | None = None
    processes: int | None = None


def predicted_wait(average_seconds: float | None, backlog: int, workers: int) -> float | None:
    """Average duration x backlog / workers; 0 for an empty backlog, None when unknown."""
    if backlog <= 0:
        return 0.0
    if average_seconds is None or workers <= 0:
        return None
    return average_seconds * backlog / workers


def _round_half_away(value: float) -> int:
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


def _shrunk(current: int) -> int:
    return min(math.floor(current * _SHRINK_STEP), current - 1)


def decide_pool_size(current: int, signals: Signals, tuning: TuningConfig) -> Decision:
    """The pool size the control law wants for this process, given `signals`.

    A pure function; tests/test_tuning.py pins it down with golden values and a
    simulated load.
    """
    low, high = tuning.min_workers, tuning.max_workers

    def clamp(size: int, reason: str) -> Decision:
        return Decision(max(low, min(high, max(1, size))), reason)

    trend = signals.trend_per_second or 0.0
    duration = signals.average_seconds
    if signals.backlog <= 0 and trend <= 0:
        return clamp(_shrunk(current), "queue_empty")
    predicted = predicted_wait(duration, signals.backlog, signals.workers)
    if predicted is None or duration is None or duration <= 0:
        return clamp(current, "no_estimate")
    lower = max(0.0, tuning.desired_wait_seconds - tuning.wait_tolerance_seconds)
    upper = tuning.desired_wait_seconds + tuning.wait_tolerance_seconds
    if lower <= predicted <= upper:
        return clamp(current, "in_band")
    arrivals = (
        signals.arrivals_per_second
        if signals.arrivals_per_second is not None
        else signals.busy / duration + trend
    )
    arrivals = max(0.0, arrivals)
    edge = upper if predicted > upper else lower
    horizon = _HORIZON_WAITS * tuning.desired_wait_seconds
    cluster_target = duration * arrivals + duration * (signals.backlog - edge * arrivals) / horizon
    share = (
        1 / signals.processes
        if signals.processes is not None and signals.processes > 0
        else current / max(signals.workers, 1)
    )
    target = _round_half_away(cluster_target * share)
    # The one-worker step left to a process when rounding leaves it at its size falls
    # to those at or beyond their equal share: one short of it stepping down (or past
    # it stepping up) while its peers' hysteresis holds them took every step alone,
    # and three processes drifted to 8 + 14 + 12 workers.
    fair = signals.workers / signals.processes if signals.processes else None
    if predicted > upper:
        if target > current:
            return clamp(target, "above_band")
        if trend < 0:
            return clamp(current, "draining")
        return clamp(current if fair is not None and current > fair else current + 1, "above_band")
    if target < current:
        return clamp(max(target, _shrunk(current)), "below_band")
    if trend > 0:
        return clamp(current, "filling")
    return clamp(current if fair is not None and current < fair else current - 1, "below_band")


class Autoscaler:
    """Applies `decide_pool_size` to the pool after every observation.

    Noise handling (issue 17): one observation's backlog trend is mostly the queue's own
    Poisson noise, and acting on it made the pool dither. So the arrival rate,
    the trend and the duration are smoothed (exponentially, time constant
    `_SMOOTHING_WAITS` desired waits), except when the predicted wait is far outside
    the band (above twice its upper edge; or above the band after rising since the
    previous observation by more than the band's width, at least half the desired
    wait, and more than `_SURGE_SIGMAS` standard deviations of the backlog's own
    noise; or the queue just emptied or filled from empty), where the raw reading
    replaces the smoothed one so a burst is met at once.
    And a resize opposite to the previous one (a direction reversal) of fewer than
    `_REVERSAL_MIN_STEP` workers is not made (reason ``hysteresis``), unless the wait
    is far outside the band or the queue is empty.

    Args:
        pool: The pool to resize.
        tuning: The band, bounds and cooldown.
        clock: Measures the cooldown and the smoothing.
    """

    def __init__(self, pool: WorkerPool, tuning: TuningConfig, *, clock: Clock) -> None:
        self._pool = pool
        self._tuning = tuning
        self._clock = clock
        self._last_change: float | None = None
        self._previous: tuple[float, int] | None = None
        self._trend: float | None = None
        self._arrivals: float | None = None
        self._duration: float | None = None
        self._direction = 0
        self._wanted = 0
        self._wanted_direction = 0
        self.last_decision: Decision | None = None

    def _smooth(self, old: float | None, new: float, weight: float) -> float:
        return new if old is None else old + weight * (new - old)

    def _surged(
        self, rise: float, elapsed: float, workers: int, average_seconds: float | None
    ) -> bool:
        # A step in the arrival rate that lands just under the far threshold would
        # otherwise be met through the smoothed estimates, many decisions late: at 2x
        # this project's simulated load one seed took 26 decisions to reach the band.
        # The rise must also stand out of the backlog's own noise, or a small pool
        # (where a few messages are the band's width) would treat noise as a surge:
        # at 4 arrivals/s, 2 workers, the band held 24 % of decisions instead of 32 %.
        if average_seconds is None or workers <= 0 or self._arrivals is None:
            return False
        tuning = self._tuning
        width = max(2 * tuning.wait_tolerance_seconds, _SURGE_WAITS * tuning.desired_wait_seconds)
        # Arrivals and completions each add about the arrival rate's variance per second.
        noise = _SURGE_SIGMAS * math.sqrt(2 * self._arrivals * elapsed)
        return rise > max(width * workers / average_seconds, noise)

    def apply(
        self,
        *,
        backlog: int,
        workers: int,
        busy: int,
        average_seconds: float | None,
        processes: int | None = None,
    ) -> Decision:
        """Decide from one observation and resize unless the cooldown or hysteresis forbids.

        Args:
            backlog: Ready messages.
            workers: Workers serving the queue across processes, as published after
                each process's last resize.
            busy: Of those, running a task.
            average_seconds: Average task duration, None before any finished.
            processes: Live processes; given, this process aims at an equal share.

        Returns:
            The decision (what the pool has afterwards, or wanted to have when the
            cooldown or the hysteresis held it back).
        """
        tuning = self._tuning
        now = self._clock.monotonic()
        raw_trend = None
        weight = 1.0
        elapsed = 0.0
        if self._previous is not None and now > self._previous[0]:
            elapsed = now - self._previous[0]
            raw_trend = (backlog - self._previous[1]) / elapsed
            weight = 1 - math.exp(-elapsed / (_SMOOTHING_WAITS * tuning.desired_wait_seconds))
        self._previous = (now, backlog)
        upper = tuning.desired_wait_seconds + tuning.wait_tolerance_seconds
        raw_wait = predicted_wait(average_seconds, backlog, workers)
        far = raw_wait is not None and raw_wait > _FAR_FACTOR * upper
        if not far and raw_wait is not None and raw_wait > upper and raw_trend is not None:
            far = self._surged(raw_trend * elapsed, elapsed, workers, average_seconds)
        if far or backlog == 0:
            weight = 1.0  # far from the band or idle: the raw reading, not the history
        if average_seconds is not None:
            self._duration = self._smooth(self._duration, average_seconds, weight)
        if raw_trend is not None:
            self._trend = self._smooth(self._trend, raw_trend, weight)
        # StatsRecorder's average weighs the last ten tasks or so: too noisy alone.
        duration = self._duration
        arrivals = None
        if duration is not None and duration > 0:
            raw_arrivals = busy / duration + (raw_trend or 0.0)
            self._arrivals = self._smooth(self._arrivals, max(0.0, raw_arrivals), weight)
            arrivals = self._arrivals
        signals = Signals(
            backlog=backlog,
            trend_per_second=self._trend if raw_trend is not None else None,
            workers=workers,
            busy=busy,
            average_seconds=duration,
            arrivals_per_second=arrivals,
            processes=processes,
        )
        current = self._pool.capacity
        decision = decide_pool_size(current, signals, tuning)
        if decision.reason == "in_band" and processes is not None and processes > 1:
            # In band nothing else would pull the shares together: a split that
            # drifted apart during a transient would be held for good.
            share = workers / processes
            if abs(current - share) > max(1.0, _SHARE_SLACK * share):
                size = max(tuning.min_workers, min(tuning.max_workers, _round_half_away(share)))
                decision = Decision(size, "converging")
        self.last_decision = decision
        direction = (decision.size > current) - (decision.size < current)
        if direction == 0:
            self._wanted = 0
            self._wanted_direction = 0
            return decision
        self._wanted = self._wanted + 1 if direction == self._wanted_direction else 1
        self._wanted_direction = direction
        reversal = direction == -self._direction and decision.reason != "queue_empty"
        if (
            reversal
            and not far
            and abs(decision.size - current) < _REVERSAL_MIN_STEP
            and self._wanted < _REVERSAL_DECISIONS
        ):
            # A small step back, not wanted for long, is mostly the queue's noise: hold.
            return Decision(current, "hysteresis")
        cooldown = tuning.cooldown_seconds
        if cooldown > 0 and self._last_change is not None and now - self._last_change < cooldown:
            return decision
        self._pool.resize(decision.size)
        self._last_change = now
        self._direction = direction
        _log.info(
            "pool resized from %d to %d workers (%s; backlog %d, %d workers in all)",
            current,
            decision.size,
            decision.reason,
            backlog,
            workers,
        )
        return decision
