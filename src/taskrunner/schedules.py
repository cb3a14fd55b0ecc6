"""Periodic schedules: when each one is due, and which missed instants to fire.

Internal module; `App.schedule` builds a `Schedule` and `taskrunner.scheduler` fires it.

An instant is a Unix time (seconds). A cron schedule's instants are the times its
expression matches in its time zone (computed with cronsim: 5 fields, or 6 with a
leading seconds field; daylight-saving changes follow Debian cron: a daily job whose
local time is skipped runs at the first valid time after it, and one whose local time
repeats runs once; jobs of an hour or finer granularity run at every matching UTC
instant). An ``every`` schedule's instants are the multiples of its period counted from
the Unix epoch, so ``every=timedelta(hours=1)`` fires on the hour (UTC).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from taskrunner.errors import ConfigurationError

__all__ = ["CATCH_UP_LIMIT", "CatchUp", "Schedule", "Timing"]

CatchUp = Literal["latest", "all", "none"]

#: With ``catch_up="all"``, at most this many missed instants of one schedule are fired
#: after a gap (the latest ones); older ones are skipped with a warning. A per-second
#: schedule down for a day would otherwise enqueue 86,400 messages at once.
CATCH_UP_LIMIT = 1000

# Smallest period of an ``every`` schedule: instants are compared as floats, and a
# finer period would enqueue faster than one leader can fire.
_MIN_EVERY_SECONDS = 1.0
# Forward steps through one gap before jumping close to its end.
_JUMP_AFTER_STEPS = 4 * CATCH_UP_LIMIT
_CATCH_UPS = ("latest", "all", "none")


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule fires: a cron expression in a zone, or a fixed period.

    Attributes:
        cron: The cron expression, or None for an ``every`` schedule.
        every_seconds: The period, or None for a cron schedule.
        timezone: IANA zone name the cron expression is read in.
    """

    cron: str | None
    every_seconds: float | None
    timezone: str

    @classmethod
    def build(
        cls, name: str, *, cron: str | None, every: timedelta | float | None, timezone: str
    ) -> Timing:
        """Validate the options of `App.schedule` (exactly one of cron and every).

        Raises:
            ConfigurationError: Both or neither given, a bad expression, an unknown
                zone, or a period below one second.
        """
        if (cron is None) == (every is None):
            raise ConfigurationError(
                f"schedule {name!r}: give exactly one of cron= and every=", setting="cron"
            )
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"schedule {name!r}: unknown time zone {timezone!r}", setting="timezone"
            ) from exc
        if cron is not None:
            if not isinstance(cron, str):
                raise ConfigurationError(
                    f"schedule {name!r}: cron must be a string", setting="cron"
                )
            try:
                CronSim(cron, datetime(2026, 1, 1, tzinfo=zone))
            except (CronSimError, ValueError) as exc:
                raise ConfigurationError(
                    f"schedule {name!r}: bad cron expression {cron!r} ({exc}); use 5 fields, "
                    "or 6 with seconds first",
                    setting="cron",
                ) from exc
            return cls(cron=cron, every_seconds=None, timezone=timezone)
        # Any: the annotation does not stop a caller passing another type.
        seconds: Any = every.total_seconds() if isinstance(every, timedelta) else every
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < _MIN_EVERY_SECONDS
        ):
            raise ConfigurationError(
                f"schedule {name!r}: every={every!r} must be a timedelta or a number of "
                f"seconds, at least {_MIN_EVERY_SECONDS:g}",
                setting="every",
            )
        return cls(cron=None, every_seconds=float(seconds), timezone=timezone)

    def next_after(self, instant: float) -> float:
        """The first instant strictly after `instant` (math.inf when there is none)."""
        if self.every_seconds is not None:
            period = self.every_seconds
            return (math.floor(instant / period) + 1) * period
        try:
            return next(self._cron(instant)).timestamp()
        except StopIteration:  # an expression that matches nothing for 50 years
            return math.inf

    def between(self, after: float, until: float, *, limit: int) -> tuple[list[float], int]:
        """The latest `limit` instants in (`after`, `until`], in order, and a count.

        The count is how many earlier instants of that range are left out (for a cron
        schedule after a very long gap, a lower bound).
        """
        if until <= after:
            return [], 0
        if self.every_seconds is not None:
            period = self.every_seconds
            first = math.floor(after / period) + 1
            last = math.floor(until / period)
            count = max(0, last - first + 1)
            start = max(first, last - limit + 1)
            return [k * period for k in range(start, last + 1)], max(0, count - limit)
        window: deque[float] = deque(maxlen=limit)
        seen = 0
        # Forward iteration is the reference (cron's DST rules differ going backwards),
        # but a long gap would take millions of steps: past a budget, jump to a point
        # about `limit` instants before `until` (found backwards) and go on from there.
        iterator = self._cron(after)
        jumped = False
        while True:
            try:
                instant = next(iterator).timestamp()
            except StopIteration:
                break
            if instant > until:
                break
            window.append(instant)
            seen += 1
            if not jumped and seen >= _JUMP_AFTER_STEPS:
                jumped = True
                point = self._back_from(until, limit)
                if point is not None and point > instant:
                    iterator = self._cron(point)
                    seen += 1  # at least one instant lies between; the count is a floor
        return list(window), seen - len(window)

    def _back_from(self, until: float, steps: int) -> float | None:
        # A point from which forward iteration meets about `steps` instants up to until.
        assert self.cron is not None
        start = datetime.fromtimestamp(until, ZoneInfo(self.timezone)) + timedelta(microseconds=1)
        iterator = CronSim(self.cron, start, reverse=True)
        point: float | None = None
        for _ in range(steps + 1):
            try:
                point = next(iterator).timestamp()
            except StopIteration:
                break
        return None if point is None else point - 1.0

    def _cron(self, instant: float) -> CronSim:
        assert self.cron is not None
        return CronSim(self.cron, datetime.fromtimestamp(instant, ZoneInfo(self.timezone)))

    def describe(self) -> str:
        """``cron "..." (zone)`` or ``every Ns``, for listings."""
        if self.cron is not None:
            return f"cron {self.cron!r} ({self.timezone})"
        return f"every {self.every_seconds:g}s"


@dataclass(frozen=True, slots=True)
class Schedule:
    """One periodic schedule of an `App`: a task and its payload, fired at each instant.

    Attributes:
        name: Unique within the app; the fire records are keyed by it.
        task_name: The task dispatched at each instant.
        payload: The payload as JSON, validated against the task's type at definition.
        timing: When it fires.
        catch_up: What a leader does with instants missed while no leader ran:
            ``"latest"`` fires only the most recent one, ``"all"`` fires each in order
            (at most `CATCH_UP_LIMIT`, the latest), ``"none"`` fires none of them.
    """

    name: str
    task_name: str
    payload: bytes
    timing: Timing
    catch_up: CatchUp

    def due(self, cursor: float, now: float, *, missed_until: float) -> tuple[list[float], int]:
        """The instants to fire now, in order, and how many due ones the policy skips.

        `cursor` is the schedule's last fired instant, or the time a leader first saw
        it. Instants up to `missed_until` (when the current leader took office) were
        missed: nobody fired them while they were due, and `catch_up` decides. Later
        ones are the current leader's own and always fire.
        """
        on_time, _ = self.timing.between(max(cursor, missed_until), now, limit=CATCH_UP_LIMIT)
        limit = CATCH_UP_LIMIT if self.catch_up == "all" else 1
        missed, older = self.timing.between(cursor, min(now, missed_until), limit=limit)
        if self.catch_up == "all":
            room = max(0, CATCH_UP_LIMIT - len(on_time))
            keep = missed[max(0, len(missed) - room) :]
            return keep + on_time, older + len(missed) - len(keep)
        if self.catch_up == "latest" or not missed:
            return missed + on_time, older
        return on_time, older + len(missed)


def check_catch_up(name: str, catch_up: object) -> CatchUp:
    """`catch_up`, checked against the three policies."""
    if catch_up == "latest":
        return "latest"
    if catch_up == "all":
        return "all"
    if catch_up == "none":
        return "none"
    raise ConfigurationError(
        f"schedule {name!r}: catch_up={catch_up!r} must be one of {', '.join(_CATCH_UPS)}",
        setting="catch_up",
    )


def utc(instant: float) -> datetime:
    """`instant` as an aware UTC datetime."""
    return datetime.fromtimestamp(instant, UTC)
