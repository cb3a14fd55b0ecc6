"""The optional Scheduling part: delayed adds, unique adds, cancellation (X40-X48).

Every bullet of the `taskrunner.queue.Scheduling` docstring has a test that reads the
same. Each test needs the capability flag of what it checks (``delayed_add``,
``unique_add``, ``cancel``) and the part itself (`taskrunner.queue.scheduling_of`); a
flag not claimed skips the test with the reason, and a flag claimed without the part
fails it.

Due times and ``unique_seconds`` are probed at their edges with
`taskrunner_conformance.edges`, exactly as release delays are (X15): not before
``due - p``, and after ``due + p``. ``due_at`` is an instant on the backend's wall
clock; the suite reads the harness's fake clock, or the machine's clock on real time.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

from taskrunner.queue import Added, AddRequest, Delivery, Queue, Scheduling

from ..edges import Edges, Mark, Spec, Subject, Wording, check_edges
from ..scenario import ConformanceBase, Scenario, conformance
from .fencing import queue_state

__all__ = ["SchedulingCases", "add_requests"]

# Messages per receive or reclaim call of a probe: more than any probe has subjects.
_BATCH = 50

# Concurrent requests for one unique key (X43).
_RACERS = 50


async def add_requests(part: Scheduling, requests: Sequence[AddRequest]) -> list[Added]:
    """`part.add_requests(requests)`, checked to return one `Added` per request."""
    added = await part.add_requests(list(requests))
    assert len(added) == len(requests), (
        f"add_requests of {len(requests)} request(s) returned {len(added)} result(s)"
    )
    for result in added:
        assert isinstance(result, Added), f"add_requests returned {result!r}, not an Added"
    return added


async def _add_one(part: Scheduling, request: AddRequest) -> Added:
    (added,) = await add_requests(part, [request])
    return added


async def _added_id(part: Scheduling, request: AddRequest) -> str:
    """Add `request`, which must add a message; return its id."""
    added = await _add_one(part, request)
    assert added.added, f"{_describe(request)} added nothing (returned {added!r})"
    return added.message_id


def _describe(request: AddRequest) -> str:
    options = [
        f"{name}={getattr(request, name)!r}"
        for name in ("delay_seconds", "due_at", "unique_key", "unique_seconds")
        if getattr(request, name) not in (0.0, None)
    ]
    return f"a request with {', '.join(options)}" if options else "a plain request"


def _ids(deliveries: Sequence[Delivery]) -> list[str]:
    return [d.message_id for d in deliveries]


async def _reclaim_all(queue: Queue, consumer: str, lease: float) -> list[Delivery]:
    got: list[Delivery] = []
    empty = 0
    for _ in range(20):
        more = await queue.reclaim(consumer, lease_seconds=lease, max_messages=_BATCH)
        got.extend(more)
        empty = 0 if more else empty + 1
        if empty >= 2:
            break
    return got


async def _receive_all(queue: Queue, consumer: str, lease: float) -> list[Delivery]:
    """Receive (without waiting) until a call returns nothing."""
    got: list[Delivery] = []
    for _ in range(100):
        more = await queue.receive(
            consumer, max_messages=_BATCH, wait_seconds=0, lease_seconds=lease
        )
        if not more:
            break
        got.extend(more)
    return got


async def _held_by(part: Scheduling, key: str, holder: str, when: str) -> None:
    """A request with `key` must add nothing and name `holder`."""
    added = await _add_one(part, AddRequest(body=b"must not be added", unique_key=key))
    assert added == Added(message_id=holder, added=False), (
        f"with the key {key!r} held by message {holder} {when}, a request with it "
        f"returned {added!r}, not Added(message_id={holder!r}, added=False)"
    )


async def _free(part: Scheduling, key: str, old: str, when: str) -> str:
    """A request with `key` must add a new message; return its id."""
    added = await _add_one(part, AddRequest(body=b"takes the freed key", unique_key=key))
    assert added.added, (
        f"the key {key!r} was not freed {when}: a request with it returned {added!r}"
    )
    assert added.message_id != old, f"the new message got the old id {old}"
    return added.message_id


# -- delayed adds: the edge trial ---------------------------------------------------------


class _DueTrial:
    """Messages added with a delay (``how``: ``delay``, ``due_at``, ``past``); probed by receive.

    Reclaim must never return a delayed message; a due one comes with count 1.
    """

    wording = Wording("was delivered", "was still not delivered by receive", "time since its add")

    def __init__(self, s: Scenario, edges: Edges, adder: Queue, prober: Queue) -> None:
        self.s = s
        self.edges = edges
        self.adder = adder
        self.part = s.require_scheduling("delayed_add", queue=adder)
        self.prober = prober
        self.receiver = s.consumer("receiver")
        self.reclaimer = s.consumer("reclaimer")
        self.bodies: dict[str, bytes] = {}

    async def make(self, spec: Spec) -> Subject:
        s = self.s
        body = f"{spec.how} {spec.edge:g} #{len(self.bodies)}".encode()
        if spec.how == "delay":
            added, mark = await self.edges.timed(
                add_requests(self.part, [AddRequest(body=body, delay_seconds=spec.edge)])
            )
        else:
            # The due instant is fixed when the wall clock is read, not when add runs.
            start = s.now()
            wall = s.wall()
            mark = Mark(start, s.now())
            due = wall - 3600.0 if spec.how == "past" else wall + spec.edge
            # A delay_seconds that due_at must replace: far off, so ignoring due_at shows.
            request = AddRequest(body=body, due_at=due, delay_seconds=100 * s.lease)
            added = await add_requests(self.part, [request])
        assert added[0].added, f"a delayed add added nothing: {added!r}"
        message_id = added[0].message_id
        assert message_id not in self.bodies, f"two delayed adds got one id {message_id}"
        self.bodies[message_id] = body
        return Subject(message_id, spec, mark)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        s = self.s
        wanted = {x.key: x for x in pending}
        received = await _receive_all(self.prober, self.receiver, s.lease)
        reclaimed = await _reclaim_all(self.prober, self.reclaimer, s.lease)
        delayed = [d for d in reclaimed if d.message_id in self.bodies]
        assert not delayed, (
            f"reclaim returned delayed message(s) {_ids(delayed)}: a delayed message is "
            "delivered by receive once due, never reclaimed"
        )
        for delivery in received:
            subject = wanted.get(delivery.message_id)
            assert subject is not None or delivery.message_id not in self.bodies, (
                f"message {delivery.message_id} was delivered twice"
            )
            if subject is None:
                continue
            assert delivery.delivery_count == 1, (
                f"{subject.spec.label} was first delivered with count {delivery.delivery_count}"
            )
            assert delivery.body == self.bodies[delivery.message_id], "the body changed"
        lost = await self.prober.ack(received)
        assert lost == [], f"acking freshly received message(s) failed: {_ids(lost)}"
        return {d.message_id for d in received} & set(wanted)


class SchedulingCases(ConformanceBase):
    """X40-X48."""

    # -- X40, X41: delayed adds ----------------------------------------------------------

    @conformance("X40")
    async def test_delayed_message_is_not_delivered_before_its_due_time_and_is_ready_after_it(
        self, s: Scenario
    ) -> None:
        """delay_seconds and due_at, each probed just before and just after its due time.

        due_at replaces delay_seconds (the requests also carry a far delay); a due_at in
        the past and a delay of 0 are ready at once. On a fake clock the delays are
        0.25, 1, 2.7 s and fractions of the lease, far from time zero.
        """
        s.require_scheduling("delayed_add")
        edges = Edges(s)
        lease = s.lease
        if edges.exact:
            delays = [0.25, 1.0, 2.7, 0.37 * lease, 1.6 * lease]
            dues = [0.6 * lease, 1.3]
        else:
            delays = [0.25 * lease, 0.6 * lease]
            dues = [0.4 * lease]
        specs = [Spec(0.0, "a message added with delay_seconds=0", "delay", before=False)]
        specs.append(Spec(0.0, "a message added with due_at an hour ago", "past", before=False))
        specs += [Spec(d, f"a message added with delay_seconds={d:g}", "delay") for d in delays]
        specs += [Spec(d, f"a message added with due_at {d:g}s ahead", "due_at") for d in dues]

        async def open_trial() -> _DueTrial:
            namespace = s.other_namespace()
            return _DueTrial(s, edges, await s.open(namespace), await s.open(namespace))

        await check_edges(s, edges, open_trial, specs)

    @conformance("X40")
    async def test_due_delayed_message_is_delivered_like_any_other(self, s: Scenario) -> None:
        """Once due: count 1, its receipt heartbeats, a release redelivers it with count 2."""
        part = s.require_scheduling("delayed_add")
        delay = s.lease / 4
        message_id = await _added_id(part, AddRequest(body=b"delayed", delay_seconds=delay))
        await s.advance(delay + s.margin)
        (first,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        assert (first.message_id, first.body, first.delivery_count) == (
            message_id,
            b"delayed",
            1,
        ), f"the due message came back as {first!r}"
        assert await s.queue.heartbeat([first]) == [], "heartbeat of a due delayed message"
        assert await s.queue.release([first]) == []
        (second,) = await s.receive_n(s.queue, s.consumer("b"), 1)
        assert second.delivery_count == 2, f"redelivered with count {second.delivery_count}"
        assert await s.queue.ack([first]) == [first], "the released receipt acted"
        assert await s.queue.ack([second]) == []
        assert await s.queue.len() == 0

    @conformance("X41")
    async def test_delayed_message_counts_as_delayed_in_stats_and_in_len_until_it_is_due(
        self, s: Scenario
    ) -> None:
        """Two by delay_seconds, one by due_at, two plain: counted apart, read by another handle.

        When the shorter delay is over, its message is ready before any receive.
        """
        part = s.require_scheduling("delayed_add")
        other = await s.open()
        short, long = s.lease / 4, 10 * s.lease
        requests = [
            AddRequest(body=b"short", delay_seconds=short),
            AddRequest(body=b"plain"),
            AddRequest(body=b"long", delay_seconds=long),
            AddRequest(body=b"due", due_at=s.wall() + long),
            AddRequest(body=b"plain too", delay_seconds=0),
        ]
        added = await add_requests(part, requests)
        assert all(a.added for a in added), f"plain and delayed adds added nothing: {added}"

        stats = await other.stats()
        counts = (stats.ready, stats.delayed, stats.in_flight)
        assert counts == (2, 3, 0), (
            f"2 plain and 3 delayed messages: stats say ready, delayed, in flight = {counts}"
        )
        assert await other.len() == 5, "len counts delayed messages"

        await s.advance(short + s.margin)
        stats = await other.stats()
        counts = (stats.ready, stats.delayed, stats.in_flight)
        assert counts == (3, 2, 0), f"after the short delay: {counts}, not (3, 2, 0)"
        got = await s.receive_n(s.queue, s.consumer("a"), 3)
        assert sorted(d.body for d in got) == [b"plain", b"plain too", b"short"]
        stats = await other.stats()
        assert (stats.ready, stats.delayed, stats.in_flight) == (0, 2, 3)
        assert await other.len() == 5
        assert await s.queue.ack(got) == []
        assert await other.len() == 2, "len after acking the three due messages"

    @conformance("X41")
    async def test_delayed_and_plain_adds_draw_ids_from_one_space(self, s: Scenario) -> None:
        """Add and add_requests interleaved on two handles: every id distinct, kept by receive."""
        part = s.require_scheduling("delayed_add")
        other = await s.open()
        other_part = s.require_scheduling("delayed_add", queue=other)
        delay = s.lease / 4
        ids: dict[str, bytes] = {}
        for round_ in range(3):
            for body, message_id in zip(
                [f"plain {round_}".encode(), f"plain' {round_}".encode()],
                await s.add([f"plain {round_}".encode(), f"plain' {round_}".encode()], other),
                strict=True,
            ):
                ids.setdefault(message_id, body)
            for handle_part in (part, other_part):
                request = AddRequest(body=f"delayed {round_} {id(handle_part)}".encode())
                for r in (
                    request,
                    AddRequest(body=request.body + b" later", delay_seconds=delay),
                ):
                    message_id = await _added_id(handle_part, r)
                    assert message_id not in ids, (
                        f"id {message_id} was issued to {ids[message_id]!r} and to {r.body!r}"
                    )
                    ids[message_id] = r.body
        assert len(ids) == 18, f"18 adds gave {len(ids)} distinct ids"
        await s.advance(delay + s.margin)
        got = await s.receive_n(s.queue, s.consumer("a"), len(ids))
        assert {d.message_id: d.body for d in got} == ids, "ids and bodies came back mixed up"
        assert all(d.delivery_count == 1 for d in got)
        assert await s.queue.ack(got) == []

    # -- X42-X45: unique adds -------------------------------------------------------------

    @conformance("X42")
    async def test_request_with_a_held_unique_key_adds_nothing_and_returns_the_holder_s_message_id(
        self, s: Scenario
    ) -> None:
        """Held while queued, in flight, released (with and without delay), redelivered, reclaimed.

        Requests come through another handle; nothing they carry is ever delivered.
        """
        part = s.require_scheduling("unique_add")
        other = await s.open()
        other_part = s.require_scheduling("unique_add", queue=other)
        key = "unique-held"
        holder = await _added_id(part, AddRequest(body=b"holder", unique_key=key))
        await _held_by(other_part, key, holder, "while it is queued")
        assert await s.queue.len() == 1, "a refused unique request added a message"

        consumer = s.consumer("a")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        assert (held.message_id, held.body) == (holder, b"holder")
        await _held_by(other_part, key, holder, "while it is in flight")
        assert await s.queue.release([held]) == []
        await _held_by(other_part, key, holder, "after a release without delay")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        delay = s.lease / 4
        assert await s.queue.release([held], delay_seconds=delay) == []
        await _held_by(other_part, key, holder, "while it waits out a release delay")
        await s.advance(delay + s.margin)
        await _held_by(other_part, key, holder, "after its release delay, ready again")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        assert held.delivery_count == 3
        if s.requires_heartbeat:
            await s.lapse(s.queue, [held])
            await _held_by(other_part, key, holder, "while its lease lapsed, not reclaimed")
            (held,) = await s.reclaim_ids(other, s.consumer("b"), {holder})
            await _held_by(other_part, key, holder, "after a reclaim")
        assert await s.queue.len() == 1, "refused unique requests added messages"
        assert (await s.queue.stats()).ready == 0, "a refused unique request left a message"
        assert await other.ack([held]) == []

        if s.capabilities.delayed_add:
            delayed_key = "unique-delayed"
            delayed = await _added_id(
                part,
                AddRequest(body=b"delayed holder", unique_key=delayed_key, delay_seconds=delay),
            )
            await _held_by(other_part, delayed_key, delayed, "while it is delayed")
            await s.advance(delay + s.margin)
            await _held_by(other_part, delayed_key, delayed, "once it is due")
            (got,) = await s.receive_n(s.queue, consumer, 1)
            assert (got.message_id, got.body) == (delayed, b"delayed holder")
            assert await s.queue.ack([got]) == []
        assert await s.queue.len() == 0

    @conformance("X42")
    async def test_two_requests_with_one_unique_key_in_one_batch_add_one_message(
        self, s: Scenario
    ) -> None:
        """The second returns the first's id with added=False; keys are scoped to the queue."""
        part = s.require_scheduling("unique_add")
        requests = [
            AddRequest(body=b"first", unique_key="k"),
            AddRequest(body=b"other key", unique_key="k2"),
            AddRequest(body=b"second", unique_key="k"),
            AddRequest(body=b"no key"),
            AddRequest(body=b"third", unique_key="k"),
        ]
        added = await add_requests(part, requests)
        first, other_key, second, no_key, third = added
        assert all(a.added for a in (first, other_key, no_key)), f"got {added}"
        assert second == Added(message_id=first.message_id, added=False), f"got {second!r}"
        assert third == Added(message_id=first.message_id, added=False), f"got {third!r}"
        assert len({first.message_id, other_key.message_id, no_key.message_id}) == 3
        assert await s.queue.len() == 3, "one batch with a repeated key added too much"
        got = await s.receive_n(s.queue, s.consumer("a"), 3)
        assert sorted(d.body for d in got) == [b"first", b"no key", b"other key"]

        elsewhere = s.require_scheduling("unique_add", queue=await s.open(s.other_namespace()))
        (there,) = await add_requests(elsewhere, [AddRequest(body=b"there", unique_key="k")])
        assert there.added, "a key held in one queue was held in another queue too"
        assert await s.queue.ack(got) == []

    @conformance("X43")
    async def test_concurrent_requests_with_one_unique_key_add_exactly_one_message(
        self, s: Scenario
    ) -> None:
        """Fifty requests at once, through five handles; then batches naming two keys in turns."""
        s.require_scheduling("unique_add")
        parts = [s.require_scheduling("unique_add", queue=await s.open()) for _ in range(5)]

        results = await asyncio.gather(
            *(
                add_requests(parts[i % 5], [AddRequest(body=f"racer {i}".encode(), unique_key="k")])
                for i in range(_RACERS)
            )
        )
        flat = [r for rs in results for r in rs]
        winners = [i for i, r in enumerate(flat) if r.added]
        assert len(winners) == 1, f"{_RACERS} concurrent requests with one key added {len(winners)}"
        winner = flat[winners[0]].message_id
        assert {r.message_id for r in flat} == {winner}, (
            "refused requests named another message than the one added"
        )
        assert await s.queue.len() == 1, f"len is {await s.queue.len()} after the race"
        (got,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        assert got.body == f"racer {winners[0]}".encode(), "the body is not the winner's"

        results = await asyncio.gather(
            *(
                add_requests(
                    parts[i % 5],
                    [
                        AddRequest(body=f"{key} {i}".encode(), unique_key=key)
                        for key in (("x", "y") if i % 2 else ("y", "x"))
                    ],
                )
                for i in range(20)
            )
        )
        flat = [r for rs in results for r in rs]
        assert sum(r.added for r in flat) == 2, (
            f"20 concurrent batches over two keys added {sum(r.added for r in flat)} messages"
        )
        assert await s.queue.len() == 3
        assert await s.queue.ack([got]) == []

    @conformance("X44")
    async def test_unique_key_is_held_until_its_message_is_acked_or_dead_lettered_not_freed_by_a_release(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """Ack and dead_letter free the key; release and reclaim keep it; stale calls keep it."""
        part = s.require_scheduling("unique_add")
        consumer = s.consumer("a")
        for outcome in ("ack", "dead_letter"):
            key = f"freed-by-{outcome}"
            holder = await _added_id(part, AddRequest(body=outcome.encode(), unique_key=key))
            (held,) = await s.receive_n(s.queue, consumer, 1)
            assert await s.queue.release([held]) == []
            await _held_by(part, key, holder, "after a release")
            (stale_holder,) = [held]
            (held,) = await s.receive_n(s.queue, consumer, 1)
            # A stale receipt's ack or dead_letter completes nothing, so frees nothing.
            if outcome == "ack":
                assert await s.queue.ack([stale_holder]) == [stale_holder]
            else:
                assert await s.queue.dead_letter([stale_holder], reason="stale") == [stale_holder]
            await _held_by(part, key, holder, f"after a {outcome} with a stale receipt")
            if outcome == "ack":
                assert await s.queue.ack([held]) == []
            else:
                assert await s.queue.dead_letter([held], reason="freed") == []
            new = await _free(part, key, holder, f"by {outcome}")
            await _held_by(part, key, new, f"by the message that took it after {outcome}")
            (taken,) = await s.receive_n(s.queue, consumer, 1)
            assert taken.message_id == new
            assert await s.queue.ack([taken]) == []
        assert await s.queue.len() == 0

    @conformance("X44")
    async def test_purge_and_delete_queue_free_every_unique_key(self, s: Scenario) -> None:
        """Keys of ready, in-flight and delayed messages are freed by purge; all by delete_queue."""
        part = s.require_scheduling("unique_add")
        admin = s.require_admin()
        holders = {
            key: await _added_id(part, AddRequest(body=key.encode(), unique_key=key))
            for key in ("ready", "in-flight")
        }
        await s.receive_n(s.queue, s.consumer("a"), 1)
        if s.capabilities.delayed_add:
            holders["delayed"] = await _added_id(
                part, AddRequest(body=b"delayed", unique_key="delayed", delay_seconds=10 * s.lease)
            )
        assert await admin.purge() == len(holders)
        for key, old in holders.items():
            await _free(part, key, old, f"by purge (its message was {key})")
        await admin.delete_queue()
        reused = s.require_scheduling("unique_add", queue=await s.open())
        for key in holders:
            (added,) = await add_requests(reused, [AddRequest(body=b"reused", unique_key=key)])
            assert added.added, f"the key {key!r} was still held after delete_queue: {added!r}"

    @conformance("X44")
    async def test_completing_a_message_whose_key_expired_frees_no_key_another_message_took(
        self, s: Scenario
    ) -> None:
        """After unique_seconds another message takes the key; the old one's ack frees nothing.

        With ``cancel`` and ``delayed_add``, the same for cancelling a delayed old holder.
        """
        part = s.require_scheduling("unique_add")
        limit = s.lease / 4
        old = await _added_id(part, AddRequest(body=b"old", unique_key="k", unique_seconds=limit))
        (held,) = await s.receive_n(s.queue, s.consumer("a"), 1, lease=100 * s.lease)
        await s.advance(limit + s.margin)
        new = await _free(part, "k", old, f"after unique_seconds={limit:g}")
        assert await s.queue.ack([held]) == []
        await _held_by(part, "k", new, "by the new message, after the old one was acked")

        if s.capabilities.cancel and s.capabilities.delayed_add:
            old = await _added_id(
                part,
                AddRequest(
                    body=b"old delayed", unique_key="c", unique_seconds=limit, delay_seconds=100
                ),
            )
            await s.advance(limit + s.margin)
            new = await _free(part, "c", old, f"after unique_seconds={limit:g}")
            assert await part.cancel([old]) == [True], "cancel of a delayed message"
            await _held_by(part, "c", new, "by the new message, after the old one was cancelled")

    @conformance("X45")
    async def test_unique_key_is_freed_after_unique_seconds_never_before(self, s: Scenario) -> None:
        """Keys with several unique_seconds, probed at each edge; None holds a key for good.

        The holders are never received, so only time can free their keys.
        """
        s.require_scheduling("unique_add")
        edges = Edges(s)
        lease = s.lease
        limits = (
            [0.3 * lease, lease, 2.7, 1.6 * lease] if edges.exact else [0.3 * lease, 0.7 * lease]
        )
        specs = [Spec(u, f"a unique key with unique_seconds={u:g}") for u in limits]
        forever: list[tuple[Scheduling, str]] = []

        async def open_trial() -> _UniqueTrial:
            queue = await s.open(s.other_namespace())
            part = s.require_scheduling("unique_add", queue=queue)
            holder = await _added_id(part, AddRequest(body=b"held for good", unique_key="forever"))
            forever.append((part, holder))
            return _UniqueTrial(s, edges, part)

        await check_edges(s, edges, open_trial, specs)
        part, holder = forever[-1]
        if edges.exact:
            await s.advance(100 * lease)
        await _held_by(part, "forever", holder, "with unique_seconds=None, long after")

    # -- X46, X47: cancel ------------------------------------------------------------------

    @conformance("X46")
    async def test_cancelled_message_is_never_delivered_and_its_unique_key_is_freed(
        self, s: Scenario
    ) -> None:
        """Ready, released-with-delay and (with delayed_add) delayed messages, cancelled together.

        Through another handle. None of them comes back by receive after every due time,
        nor by reclaim; a second cancel returns False; the key of a cancelled message is
        free at once; a message not named is untouched.
        """
        s.require_scheduling("cancel")
        other_part = s.require_scheduling("cancel", queue=await s.open())
        part = s.require_scheduling()
        delay = s.lease / 4
        kept, retried = await s.add([b"kept", b"retried"])
        consumer = s.consumer("a")
        held = {d.message_id: d for d in await s.receive_n(s.queue, consumer, 2)}
        (ready,) = await s.add([b"ready"])
        assert await s.queue.release([held[retried]], delay_seconds=delay) == []
        cancelled = {ready: "a ready message", retried: "a message released with a delay"}
        if s.capabilities.delayed_add:
            delayed = await _added_id(part, AddRequest(body=b"delayed", delay_seconds=delay))
            cancelled[delayed] = "a delayed message"
            due = await _added_id(part, AddRequest(body=b"due", due_at=s.wall() + delay))
            cancelled[due] = "a message delayed with due_at"
        if s.capabilities.unique_add:
            keyed = await _added_id(part, AddRequest(body=b"keyed", unique_key="cancel-me"))
            cancelled[keyed] = "a ready message with a unique key"
        ids = list(cancelled)

        flags = await other_part.cancel(ids)

        assert flags == [True] * len(ids), "cancel of " + ", ".join(
            f"{cancelled[i]} -> {f}" for i, f in zip(ids, flags, strict=False)
        )
        assert await other_part.cancel(ids) == [False] * len(ids), "a second cancel returned True"
        stats = await s.queue.stats()
        assert (stats.ready, stats.delayed, stats.in_flight) == (0, 0, 1), (
            f"after cancelling, ready/delayed/in flight = "
            f"{(stats.ready, stats.delayed, stats.in_flight)}, not (0, 0, 1)"
        )
        assert await s.queue.len() == 1, "len counts cancelled messages"
        if s.capabilities.unique_add:
            await _free(part, "cancel-me", keyed, "by cancel")
            (fresh,) = await s.receive_n(s.queue, s.consumer("b"), 1)
            assert fresh.body == b"takes the freed key"
            assert await s.queue.ack([fresh]) == []
        await s.advance(delay + s.margin)
        await s.nothing_for(s.queue, s.consumer("b"), set(ids))
        if s.requires_heartbeat:
            await s.advance(s.lapse_age)
            reclaimed = await _reclaim_all(s.queue, s.consumer("c"), s.lease)
            assert [d.message_id for d in reclaimed] == [kept], (
                f"reclaim after the lease returned {_ids(reclaimed)}, not only {kept}"
            )
            held[kept] = reclaimed[0]
        await s.nothing_for(s.queue, s.consumer("d"), set(ids))
        assert await s.queue.ack([held[kept]]) == [], "the untouched message was lost"
        assert await s.queue.len() == 0

    @conformance("X46")
    async def test_cancel_racing_receive_cancels_or_delivers_each_message_exactly_once(
        self, s: Scenario
    ) -> None:
        """Twenty cancels of one message each, interleaved with twenty one-message receives."""
        s.require_scheduling("cancel")
        canceller = s.require_scheduling("cancel", queue=await s.open())
        receiver = await s.open()
        count = 20
        ids = await s.add([f"raced {i}".encode() for i in range(count)])
        consumer = s.consumer("racer")

        async def take() -> list[Delivery]:
            return await receiver.receive(
                consumer, max_messages=1, wait_seconds=0, lease_seconds=s.lease
            )

        async def cancel(message_id: str) -> list[Delivery]:
            (flag,) = await canceller.cancel([message_id])
            flags[message_id] = flag
            return []

        flags: dict[str, bool] = {}
        # Newest first, so receives (oldest first on FIFO backends) and cancels meet.
        outcomes = await asyncio.gather(
            *(call for i in range(count) for call in (cancel(ids[-1 - i]), take()))
        )
        delivered = [d for batch in outcomes for d in batch]
        delivered += await _receive_all(s.queue, s.consumer("rest"), s.lease)
        got = _ids(delivered)
        assert len(got) == len(set(got)), f"a message was delivered twice: {sorted(got)}"
        for message_id in ids:
            flag = flags[message_id]
            assert flag != (message_id in got), (
                f"message {message_id}: cancel returned {flag} and it was "
                f"{'' if message_id in got else 'not '}delivered; exactly one must happen"
            )
        assert await receiver.ack(delivered) == []
        assert await s.queue.len() == 0

    @conformance("X47")
    async def test_cancelling_an_in_flight_completed_or_unknown_message_returns_false_and_changes_nothing(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """In flight (live and lapsed), acked, dead-lettered, never issued: all False, state kept.

        The in-flight holder heartbeats and acks on; nobody else gets its message; the
        lapsed one is reclaimed with count 2.
        """
        part = s.require_scheduling("cancel")
        live, lapsed, acked, dead = await s.add([b"live", b"lapsed", b"acked", b"dead"])
        got = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), 4)}
        assert await s.queue.ack([got[acked]]) == []
        assert await s.queue.dead_letter([got[dead]], reason="dead") == []
        if s.requires_heartbeat:
            await s.lapse(s.queue, [got[lapsed]])
            assert await s.queue.heartbeat([got[live]]) == []
        # Issued by another queue after every id here, so never issued by this one.
        elsewhere = await s.open(s.other_namespace())
        unknown = (await s.add([b"x"] * 8, elsewhere))[-1]
        names = {
            live: "an in-flight message",
            lapsed: "an in-flight message whose lease lapsed",
            acked: "an acked message",
            dead: "a dead-lettered message",
            unknown: "an id this queue never issued",
        }
        if unknown in got:
            del names[unknown]
        ids = list(names)
        before = await queue_state(s.queue)

        flags = await part.cancel(ids)

        wrong = [names[i] for i, f in zip(ids, flags, strict=False) if f is not False]
        assert len(flags) == len(ids), f"cancel of {len(ids)} ids returned {flags}"
        assert not wrong, f"cancel returned {flags}; wrong for {wrong}"
        assert await queue_state(s.queue) == before, "a refused cancel changed the queue"
        if s.requires_heartbeat:
            (again,) = await s.reclaim_ids(s.queue, s.consumer("c"), {lapsed})
            assert again.delivery_count == 2, f"reclaimed with count {again.delivery_count}"
            got[lapsed] = again
        await s.nothing_for(s.queue, s.consumer("b"), {live})
        assert await s.queue.heartbeat([got[live]]) == [], "cancel took the lease away"
        assert await s.queue.ack([got[live]]) == [], "the in-flight message could not be acked"
        assert await s.queue.ack([got[lapsed]]) == []
        assert await s.queue.len() == 0

    # -- X48: arguments ---------------------------------------------------------------------

    @conformance("X48")
    async def test_invalid_add_requests_raise_and_add_nothing(self, s: Scenario) -> None:
        """Each bad request last in a batch after a good one: refused, nothing added.

        Not an AddRequest, a body that is not bytes (TypeError); a negative, NaN or
        infinite delay, a NaN or infinite due_at, an empty unique key, a negative or NaN
        unique_seconds (ValueError, whether or not the option is claimed).
        """
        part = s.require_scheduling()
        good = AddRequest(body=b"good")
        nan, inf = math.nan, math.inf
        type_errors: dict[str, object] = {
            "a bytes object instead of an AddRequest": b"body",
            "a str body": AddRequest(body="text"),  # type: ignore[arg-type]
            "a None body": AddRequest(body=None),  # type: ignore[arg-type]
        }
        value_errors: dict[str, AddRequest] = {
            "delay_seconds=-1": AddRequest(body=b"x", delay_seconds=-1.0),
            "delay_seconds=nan": AddRequest(body=b"x", delay_seconds=nan),
            "delay_seconds=inf": AddRequest(body=b"x", delay_seconds=inf),
            "due_at=nan": AddRequest(body=b"x", due_at=nan),
            "due_at=inf": AddRequest(body=b"x", due_at=inf),
            "unique_key=''": AddRequest(body=b"x", unique_key=""),
            "unique_seconds=-1": AddRequest(body=b"x", unique_key="k", unique_seconds=-1.0),
            "unique_seconds=nan": AddRequest(body=b"x", unique_key="k", unique_seconds=nan),
        }
        before = await queue_state(s.queue)
        wrong = []
        for label, bad in [*type_errors.items(), *value_errors.items()]:
            expected = TypeError if label in type_errors else ValueError
            try:
                result = await part.add_requests([good, bad])  # type: ignore[list-item]
            except expected:
                pass
            except Exception as exc:
                wrong.append(f"{label} raised {exc!r}, not {expected.__name__}")
            else:
                wrong.append(f"{label} returned {result!r}")
            if await queue_state(s.queue) != before:
                wrong.append(f"{label} changed the queue")
                before = await queue_state(s.queue)
        assert not wrong, "; ".join(wrong)
        s.boundary(len(type_errors) + len(value_errors))
        assert await part.add_requests([]) == [], "add_requests([])"
        (plain,) = await add_requests(part, [AddRequest(body=b"", delay_seconds=0)])
        assert plain.added, "a plain request with delay 0 added nothing"
        (got,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        assert (got.message_id, got.body, got.delivery_count) == (plain.message_id, b"", 1)
        assert await s.queue.ack([got]) == []

    @conformance("X48")
    async def test_valid_edge_requests_are_accepted(self, s: Scenario) -> None:
        """Zero is a valid duration outside leases; a due_at before 1970 is only in the past.

        delay_seconds=0, due_at of 0 and of -5 (with delayed_add), unique_seconds=0
        (with unique_add): each adds a message that is ready at once.
        """
        part = s.require_scheduling()
        caps = s.queue.capabilities
        requests = {"delay_seconds=0": AddRequest(body=b"delay 0", delay_seconds=0)}
        if caps.delayed_add:
            requests["due_at=0"] = AddRequest(body=b"due 0", due_at=0.0)
            requests["due_at=-5"] = AddRequest(body=b"due -5", due_at=-5.0)
        if caps.unique_add:
            requests["unique_seconds=0"] = AddRequest(
                body=b"unique 0", unique_key="zero", unique_seconds=0.0
            )
        wrong = []
        ids: dict[str, bytes] = {}
        for label, request in requests.items():
            try:
                (added,) = await add_requests(part, [request])
            except (TypeError, ValueError) as exc:
                wrong.append(f"{label} was refused: {exc!r}")
                continue
            if not added.added:
                wrong.append(f"{label} added nothing: {added!r}")
            ids[added.message_id] = request.body
        assert not wrong, "; ".join(wrong)
        s.boundary(len(requests))
        got = await s.receive_n(s.queue, s.consumer("a"), len(ids))
        assert {d.message_id: d.body for d in got} == ids, "an accepted request was not ready"
        assert await s.queue.ack(got) == []

    @conformance("X48")
    async def test_options_the_backend_does_not_claim_raise_value_error_and_add_nothing(
        self, s: Scenario
    ) -> None:
        """delay_seconds > 0 or due_at without delayed_add, unique_key without unique_add.

        Read from the queue's own claims (a harness override narrows what the suite
        tests, not what the backend refuses).
        """
        part = s.require_scheduling()
        caps = s.queue.capabilities
        unclaimed: dict[str, AddRequest] = {}
        if not caps.delayed_add:
            unclaimed["delay_seconds=1"] = AddRequest(body=b"x", delay_seconds=1.0)
            unclaimed["due_at"] = AddRequest(body=b"x", due_at=s.wall() + 1)
        if not caps.unique_add:
            unclaimed["unique_key='k'"] = AddRequest(body=b"x", unique_key="k")
        if not unclaimed:
            pytest.skip("the backend claims delayed_add and unique_add: no option is unclaimed")
        before = await queue_state(s.queue)
        for label, request in unclaimed.items():
            try:
                result = await part.add_requests([AddRequest(body=b"good"), request])
            except ValueError:
                pass
            else:
                raise AssertionError(f"{label}, not claimed, was accepted: {result!r}")
            assert await queue_state(s.queue) == before, f"the refused {label} added something"
        s.boundary(len(unclaimed))


class _UniqueTrial:
    """Keys added with ``unique_seconds=edge``; probed by a request with the same key.

    A probe that finds the key free adds a message holding it for good, so each key
    is freed at most once.
    """

    wording = Wording("was freed", "was still held", "time since its add")

    def __init__(self, s: Scenario, edges: Edges, part: Scheduling) -> None:
        self.s = s
        self.edges = edges
        self.part = part
        self.holders: dict[str, str] = {}

    async def make(self, spec: Spec) -> Subject:
        key = f"key-{len(self.holders)}"
        request = AddRequest(body=key.encode(), unique_key=key, unique_seconds=spec.edge)
        added, mark = await self.edges.timed(add_requests(self.part, [request]))
        assert added[0].added, f"a request with a fresh key added nothing: {added!r}"
        self.holders[key] = added[0].message_id
        return Subject(key, spec, mark)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        requests = [AddRequest(body=b"probe", unique_key=x.key) for x in pending]
        added = await add_requests(self.part, requests)
        freed = set()
        for subject, result in zip(pending, added, strict=True):
            if result.added:
                assert result.message_id != self.holders[subject.key], "an id was reused"
                freed.add(subject.key)
            else:
                assert result.message_id == self.holders[subject.key], (
                    f"{subject.spec.label} named message {result.message_id}, not its "
                    f"holder {self.holders[subject.key]}"
                )
        return freed
