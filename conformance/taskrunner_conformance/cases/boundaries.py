"""Timing edges: leases, delays, waits, TTLs and idle thresholds at their boundaries (X10-X19).

The other cases check that a lease lapses, a delay ends, an entry expires; these check
*where*. Each subject is probed just before its edge (minus the backend's precision)
and just after it (plus the precision) with `taskrunner_conformance.edges`, which makes
the probes exact on a fake clock and provably on the right side of the edge on real
time. A backend that reclaims 5 % early, ignores a ``lease_seconds`` argument, or
rounds a delay to whole seconds fails here.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from taskrunner.queue import ConsumerCleanup, Delivery, Queue, WorkerInfo, WorkerRegistry

from ..edges import Edges, Mark, Spec, Subject, Wording, check_edges, conclusively, settle_task
from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["BoundaryCases"]

# Messages per reclaim or receive call of a probe: more than any probe has subjects.
_BATCH = 50


async def _reclaim_all(queue: Queue, consumer: str, lease: float, in_flight: int) -> list[Delivery]:
    """Reclaim until two calls in a row return nothing (a reclaim cursor may wrap between)."""
    got: list[Delivery] = []
    empty = 0
    calls_left = 2 * (in_flight // _BATCH + 2) + 2
    while empty < 2 and calls_left > 0:
        calls_left -= 1
        more = await queue.reclaim(consumer, lease_seconds=lease, max_messages=_BATCH)
        got.extend(more)
        empty = 0 if more else empty + 1
    return got


def _ids(deliveries: Sequence[Delivery]) -> list[str]:
    return [d.message_id for d in deliveries]


def _outcome(task: asyncio.Task[list[Delivery]]) -> str:
    """How a finished receive ended, for failure messages."""
    if task.cancelled():
        return "was cancelled"
    error = task.exception()
    if error is not None:
        return f"raised {error!r}"
    return f"returned {_ids(task.result())}"


def _exactly_after(start: float, seconds: float, *, at_most: bool) -> float:
    """The float instant `seconds` after `start`, rounded so the gap is <= (or >=) `seconds`.

    Floating-point addition may land a hair past (or short of) the sum; an exact probe
    on the instant itself must not be off by that hair in the direction that matters.
    """
    instant = start + seconds
    if at_most:
        while instant - start > seconds:
            instant = math.nextafter(instant, -math.inf)
    else:
        while instant - start < seconds:
            instant = math.nextafter(instant, math.inf)
    return instant


# -- leases ----------------------------------------------------------------------------


@dataclass(eq=False)
class _Space:
    """One namespace of a lease trial: a handle for the holders and one for the probes."""

    namespace: str
    holder: Queue
    prober: Queue
    keys: set[str] = field(default_factory=set)


class _LeaseTrial:
    """Leases granted, heartbeated, reclaimed or left behind by a closed handle; probed by reclaim.

    Each probe runs two reclaimers, one with a lease far shorter than any subject's and
    one with a lease far longer, so a backend that judges leases by the reclaimer's
    ``lease_seconds`` takes a live lease or misses a lapsed one. A receive by a third
    consumer must return none of the leased messages, live or lapsed.

    Spec ``how``: ``receive`` (lease ``edge``), ``heartbeat`` (granted ``edge``, idle for
    ``lead``, then heartbeated), ``reclaim`` (granted ``lead`` by receive, lapsed, then
    reclaimed with ``edge``), ``closed`` (granted ``edge`` through a handle then closed).
    With ``apart``, every subject gets a queue of its own (reclaims made while making
    one subject then cannot touch another).
    """

    wording = Wording("was reclaimed", "was still not reclaimable", "idle time")

    def __init__(self, s: Scenario, edges: Edges, specs: Sequence[Spec], *, apart: bool) -> None:
        self.s = s
        self.edges = edges
        self.apart = apart
        self.short = min(spec.edge for spec in specs) / 4
        self.long = 4 * max(spec.edge for spec in specs)
        self.short_reclaimer = s.consumer("short-reclaimer")
        self.long_reclaimer = s.consumer("long-reclaimer")
        self.receiver = s.consumer("receiver")
        self.spaces: list[_Space] = []
        self.bodies: dict[str, bytes] = {}

    async def _space(self) -> _Space:
        if self.spaces and not self.apart:
            return self.spaces[0]
        namespace = self.s.other_namespace()
        space = _Space(namespace, await self.s.open(namespace), await self.s.open(namespace))
        self.spaces.append(space)
        return space

    async def make(self, spec: Spec) -> Subject:
        s, edges = self.s, self.edges
        space = await self._space()
        body = f"{spec.how} {spec.edge:g}".encode()
        (message_id,) = await s.add([body], space.holder)
        # Message ids are unique per queue only: key subjects by namespace too.
        key = f"{space.namespace}/{message_id}"
        self.bodies[key] = body
        space.keys.add(message_id)

        if spec.how == "closed":
            closing = await s.open(space.namespace)
            held, mark = await edges.timed(
                s.receive_n(closing, s.consumer("closed"), 1, lease=spec.edge)
            )
            await closing.aclose()
            return Subject(key, spec, mark, held[0], space.holder, count=1)

        first_lease = spec.lead if spec.how == "reclaim" else spec.edge
        held, mark = await edges.timed(
            s.receive_n(space.holder, s.consumer("holder"), 1, lease=first_lease)
        )
        (delivery,) = held
        assert delivery.message_id == message_id, "receive returned another message"
        if spec.how == "receive":
            return Subject(key, spec, mark, delivery, space.holder, count=1)

        if spec.how == "heartbeat":
            # Part of the way through the lease; then a heartbeat restarts it.
            await self._let_idle(space.holder, delivery, mark, spec.lead)
            lost, mark = await edges.timed(space.holder.heartbeat([delivery]))
            assert lost == [], "heartbeat lost a live lease"
            return Subject(key, spec, mark, delivery, space.holder, count=1)

        assert spec.how == "reclaim", f"internal: unknown lease subject {spec.how!r}"
        await self._let_idle(space.holder, delivery, mark, edges.after(spec.lead))
        taken, mark = await edges.timed(
            s.reclaim_ids(space.prober, s.consumer("reclaimer"), {message_id}, lease=spec.edge)
        )
        mine = [d for d in taken if d.message_id == message_id]
        others = [d for d in taken if d.message_id != message_id]
        # With the hook, subjects whose probes are over may have lapsed meanwhile; they
        # are done with. On a fake clock nothing else can have lapsed yet.
        assert not (others and edges.exact), f"reclaim took unlapsed lease(s) {_ids(others)}"
        assert await space.prober.ack(others) == []
        assert len(mine) == 1, f"reclaim returned {_ids(taken)}"
        assert mine[0].delivery_count == 2, f"reclaimed with count {mine[0].delivery_count}"
        return Subject(key, spec, mark, mine[0], space.prober, count=2)

    async def _let_idle(self, queue: Queue, delivery: Delivery, mark: Mark, seconds: float) -> None:
        """Make `delivery` idle for at least `seconds` since `mark`: by the hook, or by time."""
        if self.s.time_mode == "age":
            await self.s.age(queue, [delivery], seconds)
        else:
            await self.edges.wait_until(mark.end + seconds)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        wanted = {x.key: x for x in pending}
        changed: set[str] = set()
        for space in self.spaces:
            if not any(f"{space.namespace}/{i}" in wanted for i in space.keys):
                continue
            taken: list[tuple[str, Delivery]] = []
            for name, lease in (
                (self.short_reclaimer, self.short),
                (self.long_reclaimer, self.long),
            ):
                got = await _reclaim_all(space.prober, name, lease, len(space.keys))
                taken.extend((name, d) for d in got)
            received = await space.prober.receive(
                self.receiver, max_messages=_BATCH, wait_seconds=0, lease_seconds=self.s.lease
            )
            assert not received, (
                f"receive handed out leased message(s) {_ids(received)}: a leased message "
                "goes to nobody else, and a lapsed one comes back only through reclaim"
            )
            for name, delivery in taken:
                key = f"{space.namespace}/{delivery.message_id}"
                subject = wanted.get(key)
                if subject is None:
                    continue
                assert delivery.delivery_count == subject.count + 1, (
                    f"{subject.spec.label} was reclaimed with delivery count "
                    f"{delivery.delivery_count}, not {subject.count + 1}"
                )
                assert delivery.receipt.consumer == name, "a reclaim receipt names someone else"
                assert delivery.body == self.bodies[key], "the body changed"
                changed.add(key)
            # The reclaimers own these now; complete them so they never lapse again.
            lost = await space.prober.ack([d for _, d in taken])
            assert lost == [], f"acking freshly reclaimed message(s) failed: {_ids(lost)}"
        return changed


async def _check_leases(s: Scenario, specs: Sequence[Spec], *, apart: bool = False) -> None:
    edges = Edges(s)

    async def open_trial() -> _LeaseTrial:
        return _LeaseTrial(s, edges, specs, apart=apart)

    await check_edges(s, edges, open_trial, specs, ageable=True)


# -- release delays ----------------------------------------------------------------------


class _DelayTrial:
    """Messages released with ``edge`` seconds of delay; probed by receive and reclaim.

    Reclaim must never return a released message, before or after its delay.
    """

    wording = Wording(
        "was delivered again", "was still not delivered by receive", "time since its release"
    )

    def __init__(self, s: Scenario, edges: Edges, releaser: Queue, prober: Queue) -> None:
        self.s = s
        self.edges = edges
        self.releaser = releaser
        self.prober = prober
        self.receiver = s.consumer("receiver")
        self.reclaimer = s.consumer("reclaimer")
        self.bodies: dict[str, bytes] = {}
        self.held: list[Delivery] = []
        self.released: set[str] = set()

    async def hold(self, count: int) -> None:
        """Add and receive `count` messages, so releasing one never lets another out early."""
        s = self.s
        bodies = [f"released {i}".encode() for i in range(count)]
        ids = await s.add(bodies, self.releaser)
        self.bodies = dict(zip(ids, bodies, strict=True))
        # Leased for long: on a retry some are never released, and must not lapse.
        self.held = await s.receive_n(
            self.releaser, s.consumer("first"), count, lease=1000 * s.lease
        )
        assert sorted(_ids(self.held)) == sorted(ids), "receive returned other messages"

    async def make(self, spec: Spec) -> Subject:
        held = self.held.pop()
        lost, mark = await self.edges.timed(self.releaser.release([held], delay_seconds=spec.edge))
        assert lost == [], "release of a current delivery reported it lost"
        self.released.add(held.message_id)
        return Subject(held.message_id, spec, mark, held, count=1)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        s = self.s
        wanted = {x.key: x for x in pending}
        received: list[Delivery] = []
        for _ in range(len(pending) + 2):
            more = await self.prober.receive(
                self.receiver, max_messages=_BATCH, wait_seconds=0, lease_seconds=s.lease
            )
            received.extend(more)
            if not more:
                break
        reclaimed = await _reclaim_all(self.prober, self.reclaimer, s.lease, len(self.bodies))
        released = [d for d in reclaimed if d.message_id in self.released]
        assert not released, (
            f"reclaim returned released message(s) {_ids(released)}: a released message "
            "comes back only through receive, after its delay"
        )
        for delivery in received:
            subject = wanted.get(delivery.message_id)
            if subject is None:
                continue
            assert delivery.delivery_count == 2, (
                f"{subject.spec.label} came back with delivery count {delivery.delivery_count}"
            )
            assert delivery.body == self.bodies[delivery.message_id], "the body changed"
        lost = await self.prober.ack(received + reclaimed)
        assert lost == [], f"acking freshly received message(s) failed: {_ids(lost)}"
        return {d.message_id for d in received} & set(wanted)


# -- worker registry -----------------------------------------------------------------------


class _RegistryTrial:
    """Worker entries published with a TTL of ``edge``; probed by listing from another handle."""

    wording = Wording("was no longer listed", "was still listed", "time since it was published")

    def __init__(
        self, s: Scenario, edges: Edges, publisher: WorkerRegistry, reader: WorkerRegistry
    ) -> None:
        self.s = s
        self.edges = edges
        self.publisher = publisher
        self.reader = reader
        self.workers: dict[str, int] = {}

    async def make(self, spec: Spec) -> Subject:
        instance = f"edge-{len(self.workers) + 1}"
        workers = 2 + len(self.workers)
        self.workers[instance] = workers
        info = WorkerInfo(
            instance=instance, workers=workers, busy=1, average_seconds=None, seen_at=0.0
        )
        _, mark = await self.edges.timed(self.publisher.publish_worker(info, ttl_seconds=spec.edge))
        return Subject(instance, spec, mark)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        listed = {info.instance: info for info in await self.reader.live_workers()}
        for instance, info in listed.items():
            if instance in self.workers:
                assert info.workers == self.workers[instance], f"{instance}'s entry changed"
        return {x.key for x in pending if x.key not in listed}


# -- consumer clean-up ---------------------------------------------------------------------


class _CleanupTrial:
    """Consumers last active at their mark; probed by `remove_idle_consumers(edge)`.

    A holder consumer keeps a message leased the whole time and must never be removed.
    Spec ``lead``: seconds to let pass before the consumer's activity.
    """

    wording = Wording("was removed", "was still kept", "idle time")

    def __init__(self, s: Scenario, edges: Edges, queue: Queue, cleanup: ConsumerCleanup) -> None:
        self.s = s
        self.edges = edges
        self.queue = queue
        self.cleanup = cleanup
        self.holder = ""
        self.held: Delivery | None = None
        self.holder_mark = Mark(0.0, 0.0)
        self.threshold: float | None = None

    async def hold(self) -> None:
        """The holder takes the only message, with a lease that outlasts the test."""
        s = self.s
        await s.add([b"held"], self.queue)
        self.holder = s.consumer("holder")
        held, self.holder_mark = await self.edges.timed(
            s.receive_n(self.queue, self.holder, 1, lease=1000 * s.lease)
        )
        self.held = held[0]

    async def make(self, spec: Spec) -> Subject:
        s = self.s
        assert self.threshold in (None, spec.edge), "internal: one threshold per trial"
        self.threshold = spec.edge
        if spec.lead:
            await s.advance(spec.lead)
        name = s.consumer("idle")
        mark = await self.active(name)
        return Subject(name, spec, mark)

    async def active(self, name: str) -> Mark:
        """Have consumer `name` receive and ack a message; the mark spans both.

        A consumer that only ever polled an empty queue may not be recorded at all
        (Redis creates group consumers when they read something), so every consumer
        under test has held a message and holds none now.
        """
        s = self.s
        await s.add([name.encode()], self.queue)
        start = s.now()
        got = await s.receive_n(self.queue, name, 1)
        assert await self.queue.ack(got) == [], "ack of a current delivery failed"
        return Mark(start, s.now())

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        assert self.threshold is not None
        removed = await self.cleanup.remove_idle_consumers(self.threshold)
        assert self.holder not in removed, (
            "remove_idle_consumers removed a consumer holding a message"
        )
        return set(removed)


# -- the cases -------------------------------------------------------------------------------


class BoundaryCases(ConformanceBase):
    """X10-X19."""

    @conformance("X10")
    async def test_lease_granted_by_receive_is_live_just_before_its_length_and_lapsed_just_after_it(
        self, s: Scenario
    ) -> None:
        """Leases of the harness's length and of 0.37 of it, each probed at its own edge.

        Catches a backend that reclaims a few percent early or late, or that grants
        one fixed lease whatever receive asked for.
        """
        s.require_heartbeat()
        await _check_leases(
            s,
            [
                Spec(s.lease, f"a lease of {s.lease:g}s granted by receive", "receive"),
                Spec(
                    0.37 * s.lease, f"a lease of {0.37 * s.lease:g}s granted by receive", "receive"
                ),
            ],
        )

    @conformance("X10")
    async def test_reclaim_takes_a_lease_only_once_its_idle_time_exceeds_it(
        self, s: Scenario
    ) -> None:
        """On an exact clock with no precision: idle for exactly the lease is still live.

        The reclaim contract takes a message "only when its idle time exceeds the
        lease"; only a fake clock and ``lease_precision_seconds`` 0 can sit on the
        instant itself.
        """
        s.require_heartbeat()
        if s.time_mode != "clock" or s.precision > 0:
            pytest.skip("needs a fake clock and lease_precision_seconds 0 to probe the instant")
        edges = Edges(s)
        await edges.head_start()
        lease = s.lease
        ids = await s.add([b"exactly as old as its lease"])
        (held,) = await s.receive_n(s.queue, s.consumer("holder"), 1, lease=lease)
        granted = s.now()
        other = await s.open()
        await edges.wait_until(_exactly_after(granted, lease, at_most=True))
        eager = s.consumer("eager")
        early = await _reclaim_all(other, eager, lease, 1)
        early += await other.receive(eager, max_messages=1, wait_seconds=0, lease_seconds=lease)
        assert not early, (
            f"a lease idle for exactly its {lease:g}s was handed over; reclaim may take it "
            "only once its idle time exceeds the lease"
        )
        await edges.wait_until(granted + edges.after(lease))
        (taken,) = await s.reclaim_ids(other, s.consumer("reclaimer"), set(ids))
        assert taken.delivery_count == 2
        assert await other.ack([taken]) == []
        assert await s.queue.ack([held]) == [held]

    @conformance("X11")
    async def test_heartbeat_restarts_the_lease_with_the_length_it_was_granted_with(
        self, s: Scenario
    ) -> None:
        """Leases of 1.5 and 0.5 harness leases, heartbeated 40 % in, lapse at their own length.

        Not the harness's lease, not a reclaimer's, and counted from the heartbeat.
        """
        s.require_heartbeat()
        long, short = 1.5 * s.lease, 0.5 * s.lease
        await _check_leases(
            s,
            [
                Spec(long, f"a lease of {long:g}s restarted by heartbeat", "heartbeat", 0.4 * long),
                Spec(
                    short, f"a lease of {short:g}s restarted by heartbeat", "heartbeat", 0.4 * short
                ),
            ],
        )

    @conformance("X12")
    async def test_lease_granted_by_reclaim_lasts_the_reclaimer_s_lease_seconds(
        self, s: Scenario
    ) -> None:
        """Half-lease leases reclaimed with 1.3 and 0.3 harness leases last what reclaim granted."""
        s.require_heartbeat()
        first = 0.5 * s.lease
        longer, shorter = 1.3 * s.lease, 0.3 * s.lease
        await _check_leases(
            s,
            [
                Spec(
                    longer,
                    f"a lease of {longer:g}s granted by reclaim (after {first:g}s)",
                    "reclaim",
                    first,
                ),
                Spec(
                    shorter,
                    f"a lease of {shorter:g}s granted by reclaim (after {first:g}s)",
                    "reclaim",
                    first,
                ),
            ],
            apart=True,
        )

    @conformance("X13")
    async def test_leases_of_different_lengths_on_one_queue_each_lapse_at_their_own_length(
        self, s: Scenario
    ) -> None:
        """Leases of L and 3L by receive, 2L by reclaim: at each edge only the shorter ones lapse.

        Catches a backend that ignores the ``lease_seconds`` argument (one fixed lease),
        or uses the last granted, or the reclaimer's.
        """
        s.require_heartbeat()
        lease = s.lease
        await _check_leases(
            s,
            [
                # First: making it lets time pass, which must not eat into the others.
                Spec(
                    2 * lease, f"a lease of {2 * lease:g}s granted by reclaim", "reclaim", lease / 4
                ),
                Spec(lease, f"a lease of {lease:g}s granted by receive", "receive"),
                Spec(3 * lease, f"a lease of {3 * lease:g}s granted by receive", "receive"),
                Spec(lease, f"a second lease of {lease:g}s granted by receive", "receive"),
                Spec(3 * lease, f"a second lease of {3 * lease:g}s granted by receive", "receive"),
            ],
        )

    @conformance("X14")
    async def test_leases_of_a_closed_handle_stay_live_until_their_length_and_then_lapse(
        self, s: Scenario
    ) -> None:
        """Closing a handle neither gives its leases back nor keeps them forever."""
        s.require_heartbeat()
        long, short = s.lease, 0.4 * s.lease
        await _check_leases(
            s,
            [
                Spec(long, f"a lease of {long:g}s taken through a handle closed since", "closed"),
                Spec(short, f"a lease of {short:g}s taken through a handle closed since", "closed"),
            ],
        )

    @conformance("X15")
    async def test_released_message_is_not_delivered_before_its_delay_and_is_ready_just_after_it(
        self, s: Scenario
    ) -> None:
        """Delays of 0, 1 s and fractions, released together: each edge from both sides.

        Not delivered before ``delay - p`` through receive or reclaim; delivered by
        receive after ``delay + p``. On a fake clock the delays are 0, 0.25, 1, 2.7,
        0.37 and 1.6 leases, far from time zero; on real time 0, 0.25 and 0.6 leases and
        1 s, all waited out at once.
        """
        edges = Edges(s)
        lease = s.lease
        if edges.exact:
            delays = [0.0, 0.25, 1.0, 2.7, 0.37 * lease, 1.6 * lease]
        else:
            delays = [0.0, 0.25 * lease, 0.6 * lease, 1.0]
        # A delay within the precision of zero can only be checked from after.
        specs = [
            Spec(
                d,
                f"a message released with a delay of {d:g}s",
                before=d > 0 and edges.before(d) is not None,
            )
            for d in delays
        ]

        async def open_trial() -> _DelayTrial:
            namespace = s.other_namespace()
            trial = _DelayTrial(s, edges, await s.open(namespace), await s.open(namespace))
            await trial.hold(len(specs))
            return trial

        await check_edges(s, edges, open_trial, specs)

    @conformance("X16")
    async def test_receive_waits_at_most_wait_seconds(self, s: Scenario) -> None:
        """An empty receive with a fractional wait returns ``[]`` by the wait plus precision."""
        edges = Edges(s)
        await edges.head_start()
        wait = 0.43 * s.lease
        task, mark = await edges.started(
            s.queue.receive(
                s.consumer("waiting"), max_messages=1, wait_seconds=wait, lease_seconds=s.lease
            )
        )
        try:
            await edges.wait_until(mark.end + edges.after(wait))
            assert await edges.finished(task), (
                f"receive(wait_seconds={wait:g}) on an empty queue was still waiting "
                f"{edges.after(wait):.4f}s plus {s.grace:g}s of grace later"
            )
            assert task.result() == []
        finally:
            await settle_task(task, s.grace)

    @conformance("X16")
    async def test_blocking_receive_returns_empty_not_before_its_wait_and_soon_after_it(
        self, s: Scenario
    ) -> None:
        """Still waiting just before ``wait - p``; returned ``[]`` within grace of ``wait + p``.

        A fraction of the lease, and on a fake clock also 0.7 s: an implementation that
        gives up a second early returns a sub-second wait at once.
        """
        s.require_capability("blocking_receive")
        edges = Edges(s)
        await edges.head_start()
        waits = [0.43 * s.lease, 0.7] if edges.exact else [0.43 * s.lease]
        for wait in waits:
            before = edges.before(wait)
            assert before is not None, "the precision leaves no room below the wait"

            async def attempt(wait: float = wait, before: float = before) -> float | None:
                task, mark = await edges.started(
                    s.queue.receive(
                        s.consumer("waiting"),
                        max_messages=1,
                        wait_seconds=wait,
                        lease_seconds=s.lease,
                    )
                )
                try:
                    await edges.wait_until(mark.start + before)
                    low = s.now() - mark.end
                    returned = task.done()
                    high = s.now() - mark.start
                    if not edges.certainly_before(wait, high):
                        return edges.before_miss(wait, low, high)
                    assert not returned, (
                        f"blocking receive(wait_seconds={wait:g}) {_outcome(task)} within "
                        f"{high:.4f}s, before its wait minus the precision {s.precision:g}s"
                    )
                    await edges.wait_until(mark.end + edges.after(wait))
                    assert await edges.finished(task), (
                        f"blocking receive(wait_seconds={wait:g}) was still waiting "
                        f"{edges.after(wait):.4f}s plus {s.grace:g}s of grace later"
                    )
                    assert task.result() == []
                    # Still waiting, but maybe only because the probe came too early.
                    return edges.before_miss(wait, low, high)
                finally:
                    await settle_task(task, s.grace)

            await conclusively(edges, f"blocking receive(wait_seconds={wait:g})", attempt)

    @conformance("X17")
    async def test_blocking_receive_wakes_when_a_released_message_s_delay_ends(
        self, s: Scenario
    ) -> None:
        """A receive waiting ten leases returns a released message soon after its delay, not before.

        Both when the message was released before the receive started and while it
        was already waiting.
        """
        s.require_capability("blocking_receive")
        edges = Edges(s)
        await edges.head_start()
        delay = 0.3 * s.lease
        before = edges.before(delay)
        assert before is not None, "the precision leaves no room below the delay"
        for when in ("before the receive started", "while the receive waited"):

            async def attempt(when: str = when) -> float | None:
                namespace = s.other_namespace()
                releaser, waiter = await s.open(namespace), await s.open(namespace)
                ids = await s.add([b"released with a delay"], releaser)
                (held,) = await s.receive_n(releaser, s.consumer("first"), 1)

                def wait_for_it() -> Coroutine[Any, Any, list[Delivery]]:
                    return waiter.receive(
                        s.consumer("waiting"),
                        max_messages=1,
                        wait_seconds=10 * s.lease,
                        lease_seconds=s.lease,
                    )

                if when.startswith("before"):
                    lost, mark = await edges.timed(releaser.release([held], delay_seconds=delay))
                    task, _ = await edges.started(wait_for_it())
                else:
                    task, _ = await edges.started(wait_for_it())
                    await s.advance(0.1 * s.lease)
                    lost, mark = await edges.timed(releaser.release([held], delay_seconds=delay))
                try:
                    assert lost == [], "release of a current delivery reported it lost"
                    await edges.wait_until(mark.start + before)
                    low = s.now() - mark.end
                    returned = task.done()
                    high = s.now() - mark.start
                    if not edges.certainly_before(delay, high):
                        return edges.before_miss(delay, low, high)
                    assert not returned, (
                        f"a receive waiting for a message released {when} with a delay of "
                        f"{delay:g}s {_outcome(task)} within {high:.4f}s of the release"
                    )
                    await edges.wait_until(mark.end + edges.after(delay))
                    assert await edges.finished(task), (
                        f"a blocking receive did not wake within {s.grace:g}s of the end of a "
                        f"{delay:g}s delay of a message released {when}"
                    )
                    got = task.result()
                    assert _ids(got) == ids, f"the woken receive returned {_ids(got)}, not {ids}"
                    assert got[0].delivery_count == 2
                    assert await waiter.ack(got) == []
                    return edges.before_miss(delay, low, high)
                finally:
                    await settle_task(task, s.grace)

            await conclusively(edges, f"a receive woken by a delay released {when}", attempt)

    @conformance("X18")
    async def test_worker_entry_is_listed_just_before_its_ttl_and_gone_just_after_it(
        self, s: Scenario
    ) -> None:
        """Entries with TTLs of 0.37 and 0.71 leases, published together, read by another handle."""
        s.require_registry()
        edges = Edges(s)
        ttls = [0.37 * s.lease, 0.71 * s.lease]
        specs = [Spec(ttl, f"a worker entry with a TTL of {ttl:g}s") for ttl in ttls]

        async def open_trial() -> _RegistryTrial:
            namespace = s.other_namespace()
            publisher = s.require_registry(await s.open(namespace))
            reader = s.require_registry(await s.open(namespace))
            return _RegistryTrial(s, edges, publisher, reader)

        await check_edges(s, edges, open_trial, specs)

    @conformance("X19")
    async def test_remove_idle_consumers_keeps_a_consumer_just_below_the_threshold_and_removes_it_just_above(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """Two consumers active half a threshold apart; one holding a message is never removed.

        On an exact clock with no precision, a consumer idle for exactly the threshold
        is removed too: it has been idle "for idle_seconds".
        """
        s.require_cleanup()
        edges = Edges(s)
        threshold = 0.3 * s.lease
        specs = [
            Spec(threshold, f"an idle consumer (threshold {threshold:g}s)"),
            Spec(
                threshold,
                f"a consumer active {threshold / 2:g}s later (threshold {threshold:g}s)",
                lead=threshold / 2,
            ),
        ]
        trials: list[_CleanupTrial] = []

        async def open_trial() -> _CleanupTrial:
            queue = await s.open(s.other_namespace())
            trial = _CleanupTrial(s, edges, queue, s.require_cleanup(queue))
            await trial.hold()
            trials.append(trial)
            return trial

        await check_edges(s, edges, open_trial, specs)

        trial = trials[-1]
        start = s.now()
        removed = await trial.cleanup.remove_idle_consumers(threshold)
        assert trial.holder not in removed, (
            "remove_idle_consumers removed a consumer holding a message"
        )
        assert edges.certainly_after(threshold, start - trial.holder_mark.end), (
            "internal: the holder was not idle past the threshold"
        )
        assert trial.held is not None
        assert await trial.queue.ack([trial.held]) == [], "the holder lost its message"

        if s.time_mode == "clock" and s.precision == 0:
            name = s.consumer("exact")
            active = await trial.active(name)
            await edges.wait_until(_exactly_after(active.end, threshold, at_most=False))
            removed = await trial.cleanup.remove_idle_consumers(threshold)
            assert name in removed, (
                f"a consumer idle for exactly idle_seconds={threshold:g} was kept"
            )
