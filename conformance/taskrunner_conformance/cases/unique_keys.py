"""Unique adds of the Scheduling part: keys held, raced, freed, timed out (X42-X45).

``unique_seconds`` is probed at its edges with `taskrunner_conformance.edges`: a key is
held below ``unique_seconds - p`` and free above ``unique_seconds + p``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from taskrunner.queue import Added, AddRequest, Scheduling

from ..edges import Edges, Spec, Subject, Wording, check_edges
from ..scenario import ConformanceBase, Scenario, conformance
from .scheduling_calls import add_requests, added_id, held_by, take_freed_key

__all__ = ["UniqueKeyCases"]

# Concurrent requests for one unique key (X43).
_RACERS = 50


# The unique_seconds a refused request carries (X42), by the trial's ``how``, from the
# holder's own: each would move the holder's expiry, were a refusal to change it.
_REFUSED_SECONDS: dict[str, Callable[[float], float | None]] = {
    "refused carrying None": lambda edge: None,
    "refused carrying 100 times them": lambda edge: 100 * edge,
    "refused carrying a hundredth of them": lambda edge: edge / 100,
}


class _UniqueTrial:
    """Keys added with ``unique_seconds=edge``; probed by a request with the same key.

    With a ``how`` of `_REFUSED_SECONDS`, ``lead`` after the add a request with the key
    and other unique_seconds is refused; the edge stays the holder's own. A probe that
    finds the key free adds a message holding it for good, so each key is freed at
    most once.
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
        holder = self.holders[key] = added[0].message_id
        if spec.how:
            await self.edges.wait_until(mark.end + spec.lead)
            other = _REFUSED_SECONDS[spec.how](spec.edge)
            refused = AddRequest(body=b"refused", unique_key=key, unique_seconds=other)
            (result,) = await add_requests(self.part, [refused])
            assert result == Added(message_id=holder, added=False), (
                f"{spec.label}: the request with unique_seconds={other!r} {spec.lead:g}s after "
                f"the add returned {result!r}, not the holder {holder}"
            )
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


class UniqueKeyCases(ConformanceBase):
    """X42-X45."""

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
        holder = await added_id(part, AddRequest(body=b"holder", unique_key=key))
        await held_by(other_part, key, holder, "while it is queued")
        assert await s.queue.len() == 1, "a refused unique request added a message"

        consumer = s.consumer("a")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        assert (held.message_id, held.body) == (holder, b"holder")
        await held_by(other_part, key, holder, "while it is in flight")
        assert await s.queue.release([held]) == []
        await held_by(other_part, key, holder, "after a release without delay")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        delay = s.lease / 4
        assert await s.queue.release([held], delay_seconds=delay) == []
        await held_by(other_part, key, holder, "while it waits out a release delay")
        await s.advance(delay + s.margin)
        await held_by(other_part, key, holder, "after its release delay, ready again")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        assert held.delivery_count == 3
        if s.requires_heartbeat:
            await s.lapse(s.queue, [held])
            await held_by(other_part, key, holder, "while its lease lapsed, not reclaimed")
            (held,) = await s.reclaim_ids(other, s.consumer("b"), {holder})
            await held_by(other_part, key, holder, "after a reclaim")
        assert await s.queue.len() == 1, "refused unique requests added messages"
        assert (await s.queue.stats()).ready == 0, "a refused unique request left a message"
        assert await other.ack([held]) == []

        if s.capabilities.delayed_add:
            delayed_key = "unique-delayed"
            delayed = await added_id(
                part,
                AddRequest(body=b"delayed holder", unique_key=delayed_key, delay_seconds=delay),
            )
            await held_by(other_part, delayed_key, delayed, "while it is delayed")
            await s.advance(delay + s.margin)
            await held_by(other_part, delayed_key, delayed, "once it is due")
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

    @conformance("X42")
    async def test_refused_unique_request_changes_nothing_not_even_the_holder_s_key_expiry(
        self, s: Scenario
    ) -> None:
        """Refused a fifth into the holder's unique_seconds, carrying None, 100x or 1/100 of them.

        The key stays held below the holder's own unique_seconds - p and is free above
        them + p: a refusal that restarts the expiry with the request's unique_seconds
        (a "refresh" on refusal) frees it early or holds it late.
        """
        s.require_scheduling("unique_add")
        edges = Edges(s)
        limit = 0.6 * s.lease
        specs = [
            Spec(limit, f"a key with unique_seconds={limit:g} {how}", how, 0.2 * limit)
            for how in _REFUSED_SECONDS
        ]

        async def open_trial() -> _UniqueTrial:
            queue = await s.open(s.other_namespace())
            return _UniqueTrial(s, edges, s.require_scheduling("unique_add", queue=queue))

        await check_edges(s, edges, open_trial, specs)

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
            holder = await added_id(part, AddRequest(body=outcome.encode(), unique_key=key))
            (held,) = await s.receive_n(s.queue, consumer, 1)
            assert await s.queue.release([held]) == []
            await held_by(part, key, holder, "after a release")
            (stale_holder,) = [held]
            (held,) = await s.receive_n(s.queue, consumer, 1)
            # A stale receipt's ack or dead_letter completes nothing, so frees nothing.
            if outcome == "ack":
                assert await s.queue.ack([stale_holder]) == [stale_holder]
            else:
                assert await s.queue.dead_letter([stale_holder], reason="stale") == [stale_holder]
            await held_by(part, key, holder, f"after a {outcome} with a stale receipt")
            if outcome == "ack":
                assert await s.queue.ack([held]) == []
            else:
                assert await s.queue.dead_letter([held], reason="freed") == []
            new = await take_freed_key(part, key, holder, f"by {outcome}")
            await held_by(part, key, new, f"by the message that took it after {outcome}")
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
            key: await added_id(part, AddRequest(body=key.encode(), unique_key=key))
            for key in ("ready", "in-flight")
        }
        await s.receive_n(s.queue, s.consumer("a"), 1)
        if s.capabilities.delayed_add:
            holders["delayed"] = await added_id(
                part, AddRequest(body=b"delayed", unique_key="delayed", delay_seconds=10 * s.lease)
            )
        assert await admin.purge() == len(holders)
        for key, old in holders.items():
            await take_freed_key(part, key, old, f"by purge (its message was {key})")
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
        old = await added_id(part, AddRequest(body=b"old", unique_key="k", unique_seconds=limit))
        (held,) = await s.receive_n(s.queue, s.consumer("a"), 1, lease=100 * s.lease)
        await s.advance(limit + s.margin)
        new = await take_freed_key(part, "k", old, f"after unique_seconds={limit:g}")
        assert await s.queue.ack([held]) == []
        await held_by(part, "k", new, "by the new message, after the old one was acked")

        if s.capabilities.cancel and s.capabilities.delayed_add:
            old = await added_id(
                part,
                AddRequest(
                    body=b"old delayed", unique_key="c", unique_seconds=limit, delay_seconds=100
                ),
            )
            await s.advance(limit + s.margin)
            new = await take_freed_key(part, "c", old, f"after unique_seconds={limit:g}")
            assert await part.cancel([old]) == [True], "cancel of a delayed message"
            await held_by(part, "c", new, "by the new message, after the old one was cancelled")

    @conformance("X45")
    async def test_unique_key_is_freed_after_unique_seconds_never_before(self, s: Scenario) -> None:
        """Keys with several unique_seconds, probed at each edge; 0 frees it, None never does.

        The holders are never received, so only time can free their keys; a key with
        unique_seconds=0 is free by ``p`` after its add.
        """
        s.require_scheduling("unique_add")
        edges = Edges(s)
        lease = s.lease
        limits = (
            [0.3 * lease, lease, 2.7, 1.6 * lease] if edges.exact else [0.3 * lease, 0.7 * lease]
        )
        specs = [Spec(u, f"a unique key with unique_seconds={u:g}") for u in limits]
        # Zero is valid: the key is freed at once (after p), the message stays queued.
        specs.append(Spec(0.0, "a unique key with unique_seconds=0", before=False))
        forever: list[tuple[Scheduling, str]] = []

        async def open_trial() -> _UniqueTrial:
            queue = await s.open(s.other_namespace())
            part = s.require_scheduling("unique_add", queue=queue)
            holder = await added_id(part, AddRequest(body=b"held for good", unique_key="forever"))
            forever.append((part, holder))
            return _UniqueTrial(s, edges, part)

        await check_edges(s, edges, open_trial, specs)
        part, holder = forever[-1]
        if edges.exact:
            await s.advance(100 * lease)
        await held_by(part, "forever", holder, "with unique_seconds=None, long after")
