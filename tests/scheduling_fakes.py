"""Small fakes of the Scheduling and Leadership parts, on the fake clock.

The engine's delayed/unique dispatch, leader election and scheduler are tested against
these, independently of any backend's implementation: `RecordingScheduling` keeps the
requests it was given (and honours unique keys), `FakeLeadership` follows the contract
of `taskrunner.queue.Leadership` with the times of a `FakeClock`, and `ScheduledQueue`
is the in-memory backend with both parts attached. Switches let a test make a call
fail (`fail_next`) or hang (`hang`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import msgspec

from taskrunner.clock import Clock
from taskrunner.errors import BackendUnavailableError
from taskrunner.queue import Added, AddRequest, Capabilities, FireRecord, LeaderLease
from taskrunner_backends.memory import InMemoryQueue


class RecordingScheduling:
    """Adds each request's body at once (delays are recorded, not applied)."""

    def __init__(self, queue: InMemoryQueue) -> None:
        self._queue = queue
        self.requests: list[AddRequest] = []
        self.cancelled: list[str] = []
        self.keys: dict[str, str] = {}
        self.cancellable: set[str] = set()

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        out: list[Added] = []
        for request in requests:
            self.requests.append(request)
            key = request.unique_key
            if key is not None and key in self.keys:
                out.append(Added(message_id=self.keys[key], added=False))
                continue
            (message_id,) = await self._queue.add([request.body])
            if key is not None:
                self.keys[key] = message_id
            self.cancellable.add(message_id)
            out.append(Added(message_id=message_id))
        return out

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        self.cancelled.extend(message_ids)
        flags = [m in self.cancellable for m in message_ids]
        self.cancellable -= set(message_ids)
        return flags


class FakeLeadership:
    """The `Leadership` contract on a clock; `fired` lists every (schedule, instant)."""

    def __init__(self, queue: InMemoryQueue, clock: Clock) -> None:
        self._queue = queue
        self._clock = clock
        # name -> (holder, token, expires at on the monotonic clock)
        self._leases: dict[str, tuple[str, int, float]] = {}
        self._tokens: dict[str, int] = {}
        self._records: dict[str, FireRecord] = {}
        self.fired: list[tuple[str, float]] = []
        self.calls: list[str] = []
        self.fail_next = 0
        # Fires that take effect and then raise, as when the reply is lost.
        self.fail_after_fire = 0
        self.hang: asyncio.Event | None = None

    async def _enter(self, what: str) -> None:
        self.calls.append(what)
        if self.hang is not None:
            await self.hang.wait()
        if self.fail_next:
            self.fail_next -= 1
            raise BackendUnavailableError(f"fake outage in {what}")

    def _live(self, name: str) -> tuple[str, int, float] | None:
        lease = self._leases.get(name)
        if lease is None or lease[2] <= self._clock.monotonic():
            return None
        return lease

    def _lease(self, name: str) -> LeaderLease:
        holder, token, expires = self._leases[name]
        return LeaderLease(
            name=name,
            holder=holder,
            token=token,
            remaining_seconds=expires - self._clock.monotonic(),
        )

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        await self._enter("acquire")
        assert ttl_seconds > 0
        assert math.isfinite(ttl_seconds)
        live = self._live(name)
        now = self._clock.monotonic()
        if live is not None and live[0] != holder:
            return None
        if live is not None:
            self._leases[name] = (holder, live[1], now + ttl_seconds)
        else:
            token = self._tokens.get(name, 0) + 1
            self._tokens[name] = token
            self._leases[name] = (holder, token, now + ttl_seconds)
        return self._lease(name)

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        await self._enter("renew")
        lease = self._leases.get(name)
        if lease is None or lease[0] != holder or lease[1] != token:
            return None
        self._leases[name] = (holder, token, self._clock.monotonic() + ttl_seconds)
        return self._lease(name)

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        await self._enter("resign")
        lease = self._leases.get(name)
        if lease is None or lease[0] != holder or lease[1] != token:
            return False
        del self._leases[name]
        return True

    async def current_leader(self, name: str) -> LeaderLease | None:
        await self._enter("current_leader")
        return None if self._live(name) is None else self._lease(name)

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        await self._enter("fire")
        if token != self._tokens.get(election):
            return None
        record = self._records.get(schedule)
        if record is not None and instant <= record.instant:
            return None
        (message_id,) = await self._queue.add([body])
        self._records[schedule] = FireRecord(
            schedule=schedule, instant=instant, message_id=message_id
        )
        self.fired.append((schedule, instant))
        if self.fail_after_fire:
            self.fail_after_fire -= 1
            raise BackendUnavailableError("fake: the fire landed, its reply was lost")
        return message_id

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        await self._enter("fire_records")
        return {s: self._records[s] for s in schedules if s in self._records}

    def expire(self, name: str) -> None:
        """Let the lease of `name` lapse now (as if its holder died long ago)."""
        holder, token, _ = self._leases[name]
        self._leases[name] = (holder, token, self._clock.monotonic())


class ScheduledQueue(InMemoryQueue):
    """The in-memory backend with the fakes attached as its optional parts."""

    def __init__(self, *, clock: Clock, requires_heartbeat: bool = True) -> None:
        super().__init__(clock=clock, requires_heartbeat=requires_heartbeat)
        self.fake_scheduling = RecordingScheduling(self)
        self.fake_leadership = FakeLeadership(self, clock)
        self.claims = Capabilities(delayed_add=True, unique_add=True, cancel=True, leadership=True)

    @property
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            super().capabilities,
            delayed_add=self.claims.delayed_add,
            unique_add=self.claims.unique_add,
            cancel=self.claims.cancel,
            leadership=self.claims.leadership,
        )

    # The ignores: the memory backend may define these parts itself (with its own
    # types); these fakes replace them.
    @property
    def scheduling(self) -> RecordingScheduling:  # type: ignore[override,unused-ignore]
        return self.fake_scheduling

    @property
    def leadership(self) -> FakeLeadership:  # type: ignore[override,unused-ignore]
        return self.fake_leadership
