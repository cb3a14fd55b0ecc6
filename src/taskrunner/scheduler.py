"""The scheduler loop every worker runs: elect one leader, fire each due instant once.

Internal module; `taskrunner.Runner` runs one `Scheduler` in its task group when its
app has schedules and its backend offers ``leadership``.

Every worker campaigns in the election ``"scheduler"`` of the app's queue (through
`taskrunner.leader.LeaderElector`). The leader reads each schedule's last fired instant
(`Leadership.fire_records`), sleeps until the next instant on its own wall clock, and
fires it with `Leadership.fire`, which adds the message and records the instant in one
atomic step, only under the current fencing token and only for an instant later than
the one recorded. So an instant is fired at most once whoever fires it, and a deposed
leader fires nothing; a leader that dies is replaced within about ``ttl * 4/3`` and
the new one fires what was missed as the schedule's ``catch_up`` says.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import msgspec

from taskrunner.app import App
from taskrunner.clock import Clock, SystemClock
from taskrunner.codec import encode_envelope
from taskrunner.errors import BackendError
from taskrunner.leader import LeaderElector
from taskrunner.messages import Envelope
from taskrunner.queue import FireRecord, LeaderLease, Leadership, Queue, leadership_of
from taskrunner.schedules import Schedule, utc

__all__ = ["ELECTION", "ScheduleOverview", "Scheduler", "schedule_overview"]

_log = logging.getLogger("taskrunner.scheduler")

T = TypeVar("T")

#: The election every worker of a queue campaigns in.
ELECTION = "scheduler"

# Longest sleep while nothing is due (an expression that never matches again).
_IDLE_SECONDS = 3600.0
# Waking this long after an instant, so the wall clock has surely reached it.
_AFTER_INSTANT_SECONDS = 0.001


class Scheduler:
    """Fires the schedules of `app` on `queue` while this process leads.

    Args:
        queue: The backend; it must offer `Leadership`.
        app: Its schedules are fired.
        holder: This process's name in the election (unique per process run).
        ttl_seconds: The leader lease; a dead leader is replaced within ttl * 4/3.
        clock: Time source: instants are computed on its wall clock.

    Raises:
        ValueError: The backend offers no `Leadership`.
    """

    def __init__(
        self,
        queue: Queue,
        app: App,
        *,
        holder: str,
        ttl_seconds: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        leadership = leadership_of(queue)
        if leadership is None or not queue.capabilities.leadership:
            raise ValueError(f"{type(queue).__name__} offers no leadership")
        self._leadership: Leadership = leadership
        self._app = app
        self._clock = clock or SystemClock()
        self.elector = LeaderElector(
            leadership,
            ELECTION,
            holder,
            ttl_seconds=ttl_seconds,
            clock=self._clock,
            precision_seconds=queue.capabilities.lease_precision_seconds,
        )
        self._stopping = asyncio.Event()
        # When this process first saw each never-fired schedule as leader: its first
        # instant is the first one after that.
        self._first_seen: dict[str, float] = {}
        self.fired = 0

    def stop(self) -> None:
        """Stop firing and resign the leadership; `run` returns soon after."""
        self._stopping.set()
        self.elector.stop()

    async def run(self) -> None:
        """Campaign, and fire the schedules during every term this process leads."""
        async with asyncio.TaskGroup() as tg:
            campaign = tg.create_task(self.elector.run(), name="taskrunner:leader")
            stopping = asyncio.ensure_future(self._stopping.wait())
            try:
                while not self._stopping.is_set():
                    elected = asyncio.ensure_future(self.elector.wait_elected())
                    await asyncio.wait(
                        {elected, stopping, campaign}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if not elected.done():
                        elected.cancel()
                        break
                    token = elected.result()
                    leading = tg.create_task(self._lead(token), name="taskrunner:scheduler")
                    deposed = asyncio.ensure_future(self.elector.wait_deposed())
                    try:
                        await asyncio.wait(
                            {deposed, stopping, leading}, return_when=asyncio.FIRST_COMPLETED
                        )
                    finally:
                        deposed.cancel()
                        leading.cancel()
                    await asyncio.wait({leading})
            finally:
                stopping.cancel()
                self.elector.stop()

    async def _lead(self, token: int) -> None:
        schedules = list(self._app.schedules.values())
        records = await self._retrying(functools.partial(self._records, schedules))
        # Instants up to now were due before this term: missed, unless fired already.
        took_office = now = self._clock.time()
        cursors: dict[str, float] = {}
        for schedule in schedules:
            record = records.get(schedule.name)
            if record is not None:
                cursors[schedule.name] = record.instant
            else:
                cursors[schedule.name] = self._first_seen.setdefault(schedule.name, now)
        while True:
            now = self._clock.time()
            for schedule in schedules:
                cursor = await self._retrying(
                    functools.partial(
                        self._fire_due, schedule, cursors[schedule.name], now, took_office, token
                    )
                )
                if cursor is None:  # the token was refused: this term is over
                    self.elector.step_down(token)
                    return
                cursors[schedule.name] = cursor
            upcoming = min(
                (s.timing.next_after(cursors[s.name]) for s in schedules), default=math.inf
            )
            wait = min(_IDLE_SECONDS, upcoming - self._clock.time() + _AFTER_INSTANT_SECONDS)
            await self._clock.sleep(max(0.0, wait))

    async def _fire_due(
        self, schedule: Schedule, cursor: float, now: float, took_office: float, token: int
    ) -> float | None:
        """Fire what is due; returns the new cursor, or None when the token is stale."""
        due, skipped = schedule.due(cursor, now, missed_until=took_office)
        if skipped:
            _log.warning(
                "schedule %r: %d missed instant(s) not fired (catch_up=%r)",
                schedule.name,
                skipped,
                schedule.catch_up,
            )
        for instant in due:
            message_id = await self._leadership.fire(
                election=ELECTION,
                token=token,
                schedule=schedule.name,
                instant=instant,
                body=self._body(schedule, instant),
            )
            if message_id is None:
                record = (await self._records([schedule])).get(schedule.name)
                if record is None or record.instant < instant:
                    return None
                # Already fired: an earlier call that errored had landed.
                cursor = record.instant
                continue
            self.fired += 1
            _log.info(
                "schedule %r fired for %s: message %s",
                schedule.name,
                utc(instant).isoformat(),
                message_id,
            )
            cursor = instant
        # Every instant up to `now` is fired or skipped by the policy.
        return max(cursor, now)

    async def _records(self, schedules: list[Schedule]) -> dict[str, FireRecord]:
        if not schedules:
            return {}
        return await self._leadership.fire_records([s.name for s in schedules])

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        backoff = min(1.0, self.elector.ttl_seconds / 12)
        while True:
            try:
                return await call()
            except BackendError as exc:
                _log.warning("scheduler: backend error (%s); retrying in %.2fs", exc, backoff)
                await self._clock.sleep(backoff)
                backoff = min(backoff * 2, self.elector.ttl_seconds)

    def _body(self, schedule: Schedule, instant: float) -> bytes:
        envelope = Envelope(
            id=uuid.uuid4().hex,
            task=schedule.task_name,
            payload=msgspec.Raw(schedule.payload),
            enqueued_at=self._clock.time(),
            scheduled_for=instant,
        )
        return encode_envelope(envelope, max_bytes=self._app.max_message_bytes)


class ScheduleOverview(NamedTuple):
    """What `schedule_overview` read: one row per schedule, and who leads.

    Attributes:
        rows: Per schedule: ``name``, ``task``, ``timing`` (described), ``catch_up``,
            ``last_fired`` (instant, or None), ``last_message_id`` (or None) and
            ``next`` (the next instant after now and the last fire, None when none).
        leadership: Whether the backend offers leadership (else no worker fires them).
        leader: The current leader lease of the scheduler election, if any.
    """

    rows: list[dict[str, Any]]
    leadership: bool
    leader: LeaderLease | None


async def schedule_overview(
    queue: Queue, schedules: Sequence[Schedule], *, now: float
) -> ScheduleOverview:
    """The schedules' last and next fires and the current leader, read from `queue`.

    Two backend calls when it offers leadership (`Leadership.fire_records` of every
    schedule, `Leadership.current_leader`), none otherwise. Shared by
    ``taskrunner schedules`` and the dashboard's schedules page.
    """
    leadership = leadership_of(queue) if queue.capabilities.leadership else None
    records = (
        {} if leadership is None else await leadership.fire_records([s.name for s in schedules])
    )
    leader = None if leadership is None else await leadership.current_leader(ELECTION)
    rows: list[dict[str, Any]] = []
    for schedule in schedules:
        record = records.get(schedule.name)
        last = None if record is None else record.instant
        upcoming = schedule.timing.next_after(max(now, last or now))
        rows.append(
            {
                "name": schedule.name,
                "task": schedule.task_name,
                "timing": schedule.timing.describe(),
                "catch_up": schedule.catch_up,
                "last_fired": last,
                "last_message_id": None if record is None else record.message_id,
                "next": upcoming if upcoming != float("inf") else None,
            }
        )
    return ScheduleOverview(rows=rows, leadership=leadership is not None, leader=leader)
