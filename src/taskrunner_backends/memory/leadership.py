"""Leader leases with fencing tokens and fire-once records (`Leadership`) in memory."""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner.queue import FireRecord, LeaderLease

from ..checks import check_body, check_instant, check_names, check_seconds, check_text, check_token
from .store import _TOKEN_BITS, _Election, _Handle

__all__ = ["_Leadership"]


class _Leadership(_Handle):
    """The `Leadership` methods of `InMemoryQueue`."""

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Take or renew the lease of `name` for `holder`; None when another holds it."""
        check_text("name", name)
        check_text("holder", holder)
        check_seconds("ttl_seconds", ttl_seconds, positive=True)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        election = store.elections.get(name)
        if election is not None and now < election.expiry:
            if election.holder != holder:
                return None
            election.expiry = now + ttl_seconds
            return _lease(name, election, now)
        token = store.tokens.get(name, 0) + 1
        store.tokens[name] = token
        election = _Election(holder=holder, token=token, expiry=now + ttl_seconds)
        store.elections[name] = election
        return _lease(name, election, now)

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Extend the lease if `holder` still holds it under `token`, lapsed or not."""
        check_text("name", name)
        check_text("holder", holder)
        check_token(token, bits=_TOKEN_BITS)
        check_seconds("ttl_seconds", ttl_seconds, positive=True)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        election = store.elections.get(name)
        if election is None or election.holder != holder or election.token != token:
            return None
        election.expiry = now + ttl_seconds
        return _lease(name, election, now)

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        """End the lease now if `holder` holds it under `token`."""
        check_text("name", name)
        check_text("holder", holder)
        check_token(token, bits=_TOKEN_BITS)
        self._check_open()
        election = self._store.elections.get(name)
        if election is None or election.holder != holder or election.token != token:
            return False
        del self._store.elections[name]
        return True

    async def current_leader(self, name: str) -> LeaderLease | None:
        """The live lease of `name`, if any."""
        check_text("name", name)
        self._check_open()
        now = self._store.clock.monotonic()
        election = self._store.elections.get(name)
        if election is None or now >= election.expiry:
            return None
        return _lease(name, election, now)

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        """Add `body` and record `instant` fired, under the latest token, once per instant."""
        check_text("election", election)
        check_text("schedule", schedule)
        check_token(token, bits=_TOKEN_BITS)
        instant = check_instant("instant", instant)
        check_body(body)
        self._check_open()
        store = self._store
        last = store.fired.get(schedule)
        if store.tokens.get(election) != token or (last is not None and instant <= last.instant):
            return None
        (message_id,) = await self.add([body])
        store.fired[schedule] = FireRecord(
            schedule=schedule, instant=float(instant), message_id=message_id
        )
        return message_id

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        """The latest fire record of each named schedule that has one."""
        schedules = check_names("schedules", schedules, item="schedule")
        self._check_open()
        fired = self._store.fired
        return {name: fired[name] for name in schedules if name in fired}


def _lease(name: str, election: _Election, now: float) -> LeaderLease:
    return LeaderLease(
        name=name,
        holder=election.holder,
        token=election.token,
        remaining_seconds=max(0.0, election.expiry - now),
    )
