"""Broken in-memory backends for the optional Scheduling and Leadership parts (X40-X55).

Each class has one defect of delayed adds, unique keys, cancellation or leader leases;
the property whose name names the defect must fail it on every run. The defects sit
in shims around the memory backend's own parts (`SchedulingShim`, `LeadershipShim`),
which the broken queue returns from its ``scheduling`` and ``leadership`` properties,
so they hold whatever way the memory backend arranges its parts internally.
`BROKEN_SCHEDULING` maps a factory name to the harness factory and the property;
tests/conformance/broken.py merges it into its `BROKEN`, so test_broken_backends and
catch_rate run them all. Run one with
``python -m taskrunner_conformance tests.conformance.broken_scheduling:cancel_keeps_the_key``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from taskrunner.queue import (
    Added,
    AddRequest,
    Delivery,
    FireRecord,
    LeaderLease,
    Leadership,
    QueueStats,
    Scheduling,
)
from taskrunner_backends.memory import InMemoryQueue

from .harnesses import SubclassHarness, subclass_factory

__all__ = ["BROKEN_SCHEDULING", "LeadershipShim", "SchedulingShim"]

# State a defect keeps per store, shared by every handle on it. Keyed by the store's
# id, with the store kept alive, so no later store can inherit the id and the state.
_STATE: dict[int, tuple[object, dict[str, Any]]] = {}


def _state(queue: InMemoryQueue) -> dict[str, Any]:
    store = queue._store
    entry = _STATE.get(id(store))
    if entry is None or entry[0] is not store:
        entry = (store, {"keys": {}, "zombies": {}, "freed": set()})
        _STATE[id(store)] = entry
    return entry[1]


def _valid_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _plausible(request: object) -> bool:
    """Whether `request` is one the backend accepts (the shim then acts on it itself)."""
    if not isinstance(request, AddRequest) or not isinstance(request.body, bytes):
        return False
    durations = [request.delay_seconds]
    if request.unique_seconds is not None:
        durations.append(request.unique_seconds)
    if not all(_valid_number(d) and d >= 0 for d in durations):
        return False
    if request.due_at is not None and not _valid_number(request.due_at):
        return False
    return request.unique_key is None or (request.unique_key != "")


class SchedulingShim:
    """Passes every call to the memory backend's `Scheduling` part; defects override."""

    def __init__(self, queue: InMemoryQueue, inner: Scheduling) -> None:
        self.queue = queue
        self.inner = inner

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        return await self.inner.add_requests(requests)

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        return await self.inner.cancel(message_ids)


class LeadershipShim:
    """Passes every call to the memory backend's `Leadership` part; defects override."""

    def __init__(self, queue: InMemoryQueue, inner: Leadership) -> None:
        self.queue = queue
        self.inner = inner

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        return await self.inner.acquire_leadership(name, holder, ttl_seconds=ttl_seconds)

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        return await self.inner.renew_leadership(name, holder, token, ttl_seconds=ttl_seconds)

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        return await self.inner.resign_leadership(name, holder, token)

    async def current_leader(self, name: str) -> LeaderLease | None:
        return await self.inner.current_leader(name)

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        return await self.inner.fire(
            election=election, token=token, schedule=schedule, instant=instant, body=body
        )

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        return await self.inner.fire_records(schedules)


class _Shimmed(InMemoryQueue):
    """`InMemoryQueue` whose parts are wrapped in the shims a defect names."""

    scheduling_shim: type[SchedulingShim] = SchedulingShim
    leadership_shim: type[LeadershipShim] = LeadershipShim

    @property
    def scheduling(self) -> Scheduling:
        inner = super().scheduling
        return self.scheduling_shim(self, inner)

    @property
    def leadership(self) -> Leadership:
        inner = super().leadership
        return self.leadership_shim(self, inner)


def _rewritten(requests: Sequence[object], change: Callable[[AddRequest], AddRequest]) -> list[Any]:
    # Requests the backend must refuse go through untouched, for it to refuse.
    return [change(r) if isinstance(r, AddRequest) else r for r in requests]


# -- delayed adds --------------------------------------------------------------------------


class _EarlyDelays(SchedulingShim):
    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        now = self.queue._store.clock.time()

        def early(r: AddRequest) -> AddRequest:
            delay = r.delay_seconds
            if _valid_number(delay) and delay > 0:
                r = msgspec.structs.replace(r, delay_seconds=0.95 * delay)
            due = r.due_at
            if due is not None and _valid_number(due) and due > now:
                r = msgspec.structs.replace(r, due_at=now + 0.95 * (due - now))
            return r

        return await self.inner.add_requests(_rewritten(requests, early))


class DelayedDeliveredEarly(_Shimmed):
    """Delayed adds are due 5 % early, by delay_seconds and by due_at."""

    scheduling_shim = _EarlyDelays


class _NoDueAt(SchedulingShim):
    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        def drop(r: AddRequest) -> AddRequest:
            if r.due_at is not None and _valid_number(r.due_at):
                return msgspec.structs.replace(r, due_at=None)
            return r

        return await self.inner.add_requests(_rewritten(requests, drop))


class DueAtIgnored(_Shimmed):
    """due_at is ignored: a request is delayed by its delay_seconds only."""

    scheduling_shim = _NoDueAt


class DelayedCountedAsReady(_Shimmed):
    """stats counts delayed messages as ready."""

    async def stats(self) -> QueueStats:
        stats = await super().stats()
        return msgspec.structs.replace(stats, ready=stats.ready + stats.delayed, delayed=0)


# -- unique keys -----------------------------------------------------------------------------


class _KeyRecorder(SchedulingShim):
    """Records which message holds each key; keys marked zombie stay held by their dead holder.

    Subclasses mark keys freed (the next request with the key adds, unchecked) or zombie
    (requests with the key are refused in the dead holder's name).
    """

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        state = _state(self.queue)
        zombies: dict[str, str] = state["zombies"]
        freed: set[str] = state["freed"]
        results: list[Added | None] = []
        passed: list[Any] = []
        items: Sequence[object] = requests
        for request in items:
            key = request.unique_key if isinstance(request, AddRequest) else None
            if isinstance(key, str) and key in zombies:
                results.append(Added(message_id=zombies[key], added=False))
                continue
            if isinstance(request, AddRequest) and isinstance(key, str) and key in freed:
                freed.discard(key)
                request = msgspec.structs.replace(request, unique_key=None, unique_seconds=None)
            results.append(None)
            passed.append(request)
        added = iter(await self.inner.add_requests(passed))
        merged = [r if r is not None else next(added) for r in results]
        for request, result in zip(items, merged, strict=True):
            if isinstance(request, AddRequest) and request.unique_key and result.added:
                state["keys"][request.unique_key] = result.message_id
        return merged


def _keys_held_by(queue: InMemoryQueue, message_ids: set[str]) -> list[str]:
    keys: dict[str, str] = _state(queue)["keys"]
    return [key for key, holder in keys.items() if holder in message_ids]


class UniqueKeyFreedOnRelease(_Shimmed):
    """A release frees its message's unique key."""

    scheduling_shim = _KeyRecorder

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        lost = await super().release(deliveries, delay_seconds=delay_seconds)
        released = {d.message_id for d in deliveries if d not in lost}
        _state(self).setdefault("freed", set()).update(_keys_held_by(self, released))
        return lost


class _ShortUniqueSeconds(SchedulingShim):
    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        def shorter(r: AddRequest) -> AddRequest:
            limit = r.unique_seconds
            if limit is not None and _valid_number(limit) and limit > 0:
                return msgspec.structs.replace(r, unique_seconds=0.9 * limit)
            return r

        return await self.inner.add_requests(_rewritten(requests, shorter))


class UniqueKeyFreedEarly(_Shimmed):
    """A key with unique_seconds is freed after 90 % of them."""

    scheduling_shim = _ShortUniqueSeconds


class UniqueKeyNeverFreedByAck(_Shimmed):
    """An acked message keeps its unique key held for good."""

    scheduling_shim = _KeyRecorder

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().ack(deliveries)
        acked = {d.message_id for d in deliveries if d not in lost}
        zombies: dict[str, str] = _state(self)["zombies"]
        for key in _keys_held_by(self, acked):
            zombies[key] = _state(self)["keys"][key]
        return lost


class _UnatomicUnique(SchedulingShim):
    """Unique keys checked here, then an await, then the add: racing requests all pass."""

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        self.queue._check_open()
        if not all(_plausible(r) for r in requests):
            # The backend refuses the batch before anything is added.
            return await self.inner.add_requests(requests)
        store = self.queue._store
        keys: dict[str, tuple[str, float | None]] = _state(self.queue)["keys"]
        results = []
        for request in requests:
            key = request.unique_key
            if key is None:
                results += await self.inner.add_requests([request])
                continue
            now = store.clock.monotonic()
            holder = keys.get(key)
            held = (
                holder is not None
                and holder[0] in store.messages
                and (holder[1] is None or now < holder[1])
            )
            await asyncio.sleep(0)
            if held and holder is not None:
                results.append(Added(message_id=holder[0], added=False))
                continue
            bare = msgspec.structs.replace(request, unique_key=None, unique_seconds=None)
            (added,) = await self.inner.add_requests([bare])
            limit = request.unique_seconds
            keys[key] = (added.message_id, None if limit is None else now + limit)
            results.append(added)
        return results


class CheckAndAddNotAtomic(_Shimmed):
    """The unique-key check and the add are split by an await."""

    scheduling_shim = _UnatomicUnique


# -- cancel --------------------------------------------------------------------------------


class _CancelLeavesMessages(SchedulingShim):
    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        self.queue._check_open()
        messages = self.queue._store.messages
        said: set[str] = _state(self.queue).setdefault("cancelled", set())
        flags = []
        for message_id in message_ids:
            message = messages.get(message_id)
            flag = message is not None and message.state != "in_flight" and message_id not in said
            said.add(message_id)
            flags.append(flag)
        return flags


class CancelledMessageStillDelivered(_Shimmed):
    """cancel reports True for queued and delayed messages but leaves them queued."""

    scheduling_shim = _CancelLeavesMessages


class _CancelTakesInFlight(SchedulingShim):
    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        store = self.queue._store
        taken = {}
        for message_id in message_ids:
            message = store.in_flight.get(message_id)
            if message is not None:
                self.queue._forget(message)
                taken[message_id] = True
        rest = [i for i in message_ids if i not in taken]
        flags = iter(await self.inner.cancel(rest))
        return [True if i in taken else next(flags) for i in message_ids]


class CancelRemovesInFlight(_Shimmed):
    """cancel removes in-flight messages too, and returns True for them."""

    scheduling_shim = _CancelTakesInFlight


class _CancelKeepsKey(_KeyRecorder):
    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        flags = await self.inner.cancel(message_ids)
        state = _state(self.queue)
        cancelled = {i for i, flag in zip(message_ids, flags, strict=True) if flag}
        for key in _keys_held_by(self.queue, cancelled):
            state["zombies"][key] = state["keys"][key]
        return flags


class CancelKeepsTheKey(_Shimmed):
    """A cancelled message keeps its unique key held."""

    scheduling_shim = _CancelKeepsKey


# -- leadership ----------------------------------------------------------------------------


class _ReusedTokens(LeadershipShim):
    """A retake of a lapsed lease hands out the lapsed lease's token again.

    The real token stays behind it: calls with the reused token act with the real one.
    """

    def _tokens(self, name: str) -> dict[str, Any]:
        tokens: dict[str, dict[str, Any]] = _state(self.queue).setdefault("tokens", {})
        return tokens.setdefault(name, {"shown": None, "alias": {}, "resigned": False})

    def _real(self, name: str, token: int) -> int:
        real: int = self._tokens(name)["alias"].get(token, token)
        return real

    def _shown(self, lease: LeaderLease | None) -> LeaderLease | None:
        if lease is None:
            return None
        shown = {real: fake for fake, real in self._tokens(lease.name)["alias"].items()}
        return msgspec.structs.replace(lease, token=shown.get(lease.token, lease.token))

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        record = self._tokens(name)
        lapsed = await self.inner.current_leader(name) is None if name else False
        lease = await self.inner.acquire_leadership(name, holder, ttl_seconds=ttl_seconds)
        if lease is None:
            return None
        previous = record["shown"]
        known = lease.token in record["alias"].values() or lease.token == previous
        if previous is not None and lapsed and not record["resigned"] and not known:
            record["alias"] = {previous: lease.token}
            lease = msgspec.structs.replace(lease, token=previous)
        else:
            lease = self._shown(lease) or lease
        record["shown"], record["resigned"] = lease.token, False
        return lease

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        lease = await self.inner.renew_leadership(
            name, holder, self._real(name, token), ttl_seconds=ttl_seconds
        )
        return self._shown(lease)

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        done = await self.inner.resign_leadership(name, holder, self._real(name, token))
        if done:
            self._tokens(name)["resigned"] = True
        return done

    async def current_leader(self, name: str) -> LeaderLease | None:
        return self._shown(await self.inner.current_leader(name))

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        return await self.inner.fire(
            election=election,
            token=self._real(election, token),
            schedule=schedule,
            instant=instant,
            body=body,
        )


class LeaderTokenReusedAfterLapse(_Shimmed):
    """Retaking a lapsed lease returns its old token instead of a larger one."""

    leadership_shim = _ReusedTokens


class _RenewIgnoresToken(LeadershipShim):
    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        current = await self.inner.current_leader(name) if name else None
        if current is not None and current.holder == holder:
            token = current.token
        return await self.inner.renew_leadership(name, holder, token, ttl_seconds=ttl_seconds)


class RenewAcceptsAStaleToken(_Shimmed):
    """renew by the live lease's holder succeeds whatever token it names."""

    leadership_shim = _RenewIgnoresToken


class _AcquireTakesLiveLeases(LeadershipShim):
    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        current = await self.inner.current_leader(name) if name and holder else None
        if current is not None and current.holder != holder:
            await self.inner.resign_leadership(name, current.holder, current.token)
        return await self.inner.acquire_leadership(name, holder, ttl_seconds=ttl_seconds)


class AcquireIgnoresALiveLease(_Shimmed):
    """acquire takes the lease from another holder whose lease is live."""

    leadership_shim = _AcquireTakesLiveLeases


class _RefiresAnInstant(LeadershipShim):
    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        fired = await self.inner.fire(
            election=election, token=token, schedule=schedule, instant=instant, body=body
        )
        if fired is None:
            record = (await self.inner.fire_records([schedule])).get(schedule)
            if record is not None and record.instant == instant:
                (fired,) = await self.queue.add([body])
        return fired


class FireTwiceForOneInstant(_Shimmed):
    """fire of the instant last fired adds its message again (the check is >=, not >)."""

    leadership_shim = _RefiresAnInstant


class _FiresUnderAnyToken(LeadershipShim):
    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        current = await self.inner.current_leader(election) if election else None
        if current is not None:
            token = current.token
        return await self.inner.fire(
            election=election, token=token, schedule=schedule, instant=instant, body=body
        )


class FireUnderAStaleToken(_Shimmed):
    """fire checks no token while somebody leads: a deposed leader fires."""

    leadership_shim = _FiresUnderAnyToken


# Factory name -> (harness factory, the property that names the defect).
BROKEN_SCHEDULING: dict[str, tuple[Callable[[], SubclassHarness], str]] = {
    "delayed_delivered_early": (subclass_factory(DelayedDeliveredEarly), "X40"),
    "due_at_ignored": (subclass_factory(DueAtIgnored), "X40"),
    "delayed_counted_as_ready": (subclass_factory(DelayedCountedAsReady), "X41"),
    "unique_key_freed_on_release": (subclass_factory(UniqueKeyFreedOnRelease), "X44"),
    "unique_key_freed_early": (subclass_factory(UniqueKeyFreedEarly), "X45"),
    "unique_key_never_freed_by_ack": (subclass_factory(UniqueKeyNeverFreedByAck), "X44"),
    "check_and_add_not_atomic": (subclass_factory(CheckAndAddNotAtomic), "X43"),
    "cancelled_message_still_delivered": (
        subclass_factory(CancelledMessageStillDelivered),
        "X46",
    ),
    "cancel_removes_in_flight": (subclass_factory(CancelRemovesInFlight), "X47"),
    "cancel_keeps_the_key": (subclass_factory(CancelKeepsTheKey), "X46"),
    "leader_token_reused_after_lapse": (subclass_factory(LeaderTokenReusedAfterLapse), "X52"),
    "renew_accepts_a_stale_token": (subclass_factory(RenewAcceptsAStaleToken), "X53"),
    "acquire_ignores_a_live_lease": (subclass_factory(AcquireIgnoresALiveLease), "X50"),
    "fire_twice_for_one_instant": (subclass_factory(FireTwiceForOneInstant), "X54"),
    "fire_under_a_stale_token": (subclass_factory(FireUnderAStaleToken), "X54"),
}

cancel_keeps_the_key = BROKEN_SCHEDULING["cancel_keeps_the_key"][0]
