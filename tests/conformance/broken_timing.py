"""Deliberately broken in-memory backends with one timing defect each (boundary properties).

Every defect here passes the older "does it lapse at all" checks, which stay a margin
away from every boundary; each must fail the X10-X19 property that names it. `BROKEN_TIMING`
is merged into `tests.conformance.broken.BROKEN`, so test_broken_backends runs them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import msgspec

from taskrunner.clock import wait_event
from taskrunner.queue import Delivery, WorkerInfo
from taskrunner_backends.checks import check_count, check_seconds as _check_seconds
from taskrunner_backends.memory import InMemoryQueue

from .harnesses import MemoryHarness, subclass_factory

__all__ = ["BROKEN_TIMING"]

# The one lease a backend that ignores lease_seconds grants: the harness's.
FIXED_LEASE = MemoryHarness.lease_seconds


class _Reclaims(InMemoryQueue):
    """Reclaim as the memory backend does, with the lapse test and granted lease swappable."""

    def _lapsed(self, idle: float, lease: float, reclaimer_lease: float) -> bool:
        return idle > lease

    def _granted(self, old_lease: float, reclaimer_lease: float) -> float:
        return reclaimer_lease

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        if not (lease_seconds > 0 and math.isfinite(lease_seconds)) or max_messages < 1:
            raise ValueError("bad arguments")
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        store.consumers_seen[consumer] = now
        lapsed = [
            m
            for m in store.in_flight.values()
            if self._lapsed(now - m.touched_at, m.lease_seconds, lease_seconds)
        ][:max_messages]
        deliveries = []
        for message in lapsed:
            del store.in_flight[message.id]
            granted = self._granted(message.lease_seconds, lease_seconds)
            deliveries.append(self._grant(message, consumer, granted, now))
        return deliveries


class ReclaimsFivePercentEarly(_Reclaims):
    """A lease is taken once idle for 95 % of its length."""

    def _lapsed(self, idle: float, lease: float, reclaimer_lease: float) -> bool:
        return idle > 0.95 * lease


class ReclaimsFivePercentLate(_Reclaims):
    """A lease is taken only once idle for 105 % of its length."""

    def _lapsed(self, idle: float, lease: float, reclaimer_lease: float) -> bool:
        return idle > 1.05 * lease


class ReclaimTakesTheExactInstant(_Reclaims):
    """A lease idle for exactly its length counts as lapsed (the contract says "exceeds")."""

    def _lapsed(self, idle: float, lease: float, reclaimer_lease: float) -> bool:
        return idle >= lease


class ReclaimJudgesByItsOwnLease(_Reclaims):
    """Reclaim takes leases idle for longer than the reclaimer's own lease_seconds."""

    def _lapsed(self, idle: float, lease: float, reclaimer_lease: float) -> bool:
        return idle > reclaimer_lease


class ReclaimGrantsTheOldLease(_Reclaims):
    """Reclaim grants the previous holder's lease length instead of its own lease_seconds."""

    def _granted(self, old_lease: float, reclaimer_lease: float) -> float:
        return old_lease


class ReceiveIgnoresLeaseSeconds(InMemoryQueue):
    """Receive grants one fixed lease (the harness's), whatever lease_seconds says."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        _check_seconds("lease_seconds", lease_seconds, positive=True)
        return await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=FIXED_LEASE,
        )


class HeartbeatRestartsTheDefaultLease(InMemoryQueue):
    """A heartbeat restarts the lease with the configured default, not the granted length."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().heartbeat(deliveries)
        for delivery in deliveries:
            if delivery not in lost:
                self._store.in_flight[delivery.message_id].lease_seconds = FIXED_LEASE
        return lost


class HeartbeatForgetsTheGrantedLease(_Reclaims):
    """After a heartbeat, a lease is judged by the reclaimer's lease_seconds."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().heartbeat(deliveries)
        for delivery in deliveries:
            if delivery not in lost:
                # NaN marks "forgotten": judged by whoever reclaims.
                self._store.in_flight[delivery.message_id].lease_seconds = math.nan
        return lost

    def _lapsed(self, idle: float, lease: float, reclaimer_lease: float) -> bool:
        return idle > (reclaimer_lease if math.isnan(lease) else lease)


class DelayTruncatedToWholeSeconds(InMemoryQueue):
    """Release delays are truncated to whole seconds (2.7 s becomes 2 s, 0.25 s none)."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        whole = float(math.floor(delay_seconds)) if math.isfinite(delay_seconds) else delay_seconds
        return await super().release(deliveries, delay_seconds=whole)


class ShortDelaysIgnored(InMemoryQueue):
    """Release delays under one second are ignored: the message is ready at once."""

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        ignored = 0.0 if 0 <= delay_seconds < 1 else delay_seconds
        return await super().release(deliveries, delay_seconds=ignored)


class BlockingReceiveReturnsEarly(InMemoryQueue):
    """A blocking receive gives up after 98 % of its wait."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        return await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=0.98 * wait_seconds if wait_seconds > 0 else wait_seconds,
            lease_seconds=lease_seconds,
        )


class ReceiveOverstaysItsWait(InMemoryQueue):
    """A receive waits up to the next whole second (0.3 s becomes 1 s)."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        rounded = float(math.ceil(wait_seconds)) if math.isfinite(wait_seconds) else wait_seconds
        return await super().receive(
            consumer, max_messages=max_messages, wait_seconds=rounded, lease_seconds=lease_seconds
        )


class WaitIgnoresDueTimes(InMemoryQueue):
    """A waiting receive wakes when something is added or released, not when a delay ends."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        check_count("max_messages", max_messages)
        _check_seconds("wait_seconds", wait_seconds)
        _check_seconds("lease_seconds", lease_seconds, positive=True)
        self._check_open()
        store = self._store
        deadline = store.clock.monotonic() + wait_seconds
        while True:
            now = store.clock.monotonic()
            self._promote_due(now)
            store.consumers_seen[consumer] = now
            if store.ready:
                return self._lease_ready(consumer, max_messages, lease_seconds, now)
            remaining = deadline - now
            if remaining <= 0:
                return []
            # The memory backend caps this wait at the next due time; this one does not.
            await wait_event(store.clock, store.arrival, remaining)
            self._check_open()


class RegistryTtlTenPercentLong(InMemoryQueue):
    """Worker entries stay listed for 110 % of their TTL."""

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        await super().publish_worker(info, ttl_seconds=1.1 * ttl_seconds)


class RegistryDropsTheCounts(InMemoryQueue):
    """Worker entries lose their attempt counts (a registry written before they existed)."""

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        dropped = msgspec.structs.replace(info, succeeded=None, failed=None)
        await super().publish_worker(dropped, ttl_seconds=ttl_seconds)


class CleanupTenPercentEager(InMemoryQueue):
    """remove_idle_consumers forgets consumers idle for 90 % of the threshold."""

    async def remove_idle_consumers(self, idle_seconds: float) -> list[str]:
        return await super().remove_idle_consumers(0.9 * idle_seconds)


class CleanupSparesTheExactInstant(InMemoryQueue):
    """A consumer idle for exactly idle_seconds is kept."""

    async def remove_idle_consumers(self, idle_seconds: float) -> list[str]:
        return await super().remove_idle_consumers(math.nextafter(idle_seconds, math.inf))


class ClosingGivesLeasesBack(InMemoryQueue):
    """aclose releases the leases taken through this handle (instead of letting them lapse)."""

    # Message ids received through this handle (handles are made without __init__).
    _taken_here: set[str] | None = None

    def _taken(self) -> set[str]:
        if self._taken_here is None:
            self._taken_here = set()
        return self._taken_here

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        got = await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
        )
        self._taken().update(d.message_id for d in got)
        return got

    async def aclose(self) -> None:
        store = self._store
        for message_id in self._taken():
            message = store.in_flight.pop(message_id, None)
            if message is not None:
                message.state = "ready"
                message.owner = ""
                store.ready.append(message_id)
        await super().aclose()


class ClosingKeepsLeasesForever(ClosingGivesLeasesBack):
    """aclose makes the leases taken through this handle never lapse."""

    async def aclose(self) -> None:
        for message_id in self._taken():
            message = self._store.in_flight.get(message_id)
            if message is not None:
                message.lease_seconds = math.inf
        await InMemoryQueue.aclose(self)


# Factory name -> (harness factory, the property that names the defect).
BROKEN_TIMING: dict[str, tuple[Callable[[], MemoryHarness], str]] = {
    "reclaims_five_percent_early": (subclass_factory(ReclaimsFivePercentEarly), "X10"),
    "reclaims_five_percent_late": (subclass_factory(ReclaimsFivePercentLate), "X10"),
    "reclaim_takes_the_exact_instant": (subclass_factory(ReclaimTakesTheExactInstant), "X10"),
    "heartbeat_restarts_the_default_lease": (
        subclass_factory(HeartbeatRestartsTheDefaultLease),
        "X11",
    ),
    "heartbeat_forgets_the_granted_lease": (
        subclass_factory(HeartbeatForgetsTheGrantedLease),
        "X11",
    ),
    "reclaim_grants_the_old_lease": (subclass_factory(ReclaimGrantsTheOldLease), "X12"),
    "receive_ignores_lease_seconds": (subclass_factory(ReceiveIgnoresLeaseSeconds), "X13"),
    "reclaim_judges_by_its_own_lease": (subclass_factory(ReclaimJudgesByItsOwnLease), "X13"),
    "closing_gives_leases_back": (subclass_factory(ClosingGivesLeasesBack), "X14"),
    "closing_keeps_leases_forever": (subclass_factory(ClosingKeepsLeasesForever), "X14"),
    "delay_truncated_to_whole_seconds": (subclass_factory(DelayTruncatedToWholeSeconds), "X15"),
    "short_delays_ignored": (subclass_factory(ShortDelaysIgnored), "X15"),
    "blocking_receive_returns_early": (subclass_factory(BlockingReceiveReturnsEarly), "X16"),
    "receive_overstays_its_wait": (subclass_factory(ReceiveOverstaysItsWait), "X16"),
    "wait_ignores_due_times": (subclass_factory(WaitIgnoresDueTimes), "X17"),
    "registry_ttl_ten_percent_long": (subclass_factory(RegistryTtlTenPercentLong), "X18"),
    "registry_drops_the_counts": (subclass_factory(RegistryDropsTheCounts), "X4"),
    "cleanup_ten_percent_eager": (subclass_factory(CleanupTenPercentEager), "X19"),
    "cleanup_spares_the_exact_instant": (subclass_factory(CleanupSparesTheExactInstant), "X19"),
}
