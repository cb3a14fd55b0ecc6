"""Leases and heartbeats: exclusivity, lapse, fencing, racing reclaimers (P13-P22)."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter

from taskrunner.queue import Delivery

from ..scenario import ConformanceBase, Scenario, conformance
from ..settings import scaled_count

__all__ = ["LeaseCases"]


class LeaseCases(ConformanceBase):
    """P13-P22."""

    @conformance("P13")
    async def test_delivered_message_is_not_delivered_to_another_consumer_while_its_lease_is_live(
        self, s: Scenario
    ) -> None:
        """Most of a lease after receive, other consumers get none of the leased messages."""
        ids = await s.add([b"a", b"b", b"c"])
        held = await s.receive_n(s.queue, s.consumer("owner"), 3)
        # Opened before ageing: the leases keep ageing in real time until the probe, and
        # opening (on a cluster, a connection per master) must not eat the margin left.
        other = await s.open()

        await s.age(s.queue, held, s.live_age)
        await s.nothing_for(other, s.consumer("thief"), set(ids))
        assert await s.queue.heartbeat(held) == []
        assert await s.queue.ack(held) == []

    @conformance("P14")
    async def test_message_whose_lease_lapsed_is_returned_by_reclaim_with_its_delivery_count_plus_1(
        self, s: Scenario
    ) -> None:
        """Same id and body, count 2, a receipt naming the reclaimer."""
        s.require_heartbeat()
        ids = await s.add([b"abandoned"])
        (first,) = await s.receive_n(s.queue, s.consumer("gone"), 1)

        await s.lapse(s.queue, [first])
        other = await s.open()
        reclaimer = s.consumer("reclaimer")
        (second,) = await s.reclaim_ids(other, reclaimer, set(ids))

        assert second.message_id == first.message_id
        assert second.body == b"abandoned"
        assert second.delivery_count == 2, f"reclaimed with count {second.delivery_count}"
        assert second.receipt.consumer == reclaimer
        assert second.receipt.delivery_count == 2
        assert await other.len() == 1
        assert await other.ack([second]) == []

    @conformance("P15")
    async def test_heartbeat_with_a_current_receipt_keeps_the_lease_live(self, s: Scenario) -> None:
        """An owner heartbeating inside every lease keeps its message for three leases."""
        s.require_heartbeat()
        ids = await s.add([b"long task"])
        (held,) = await s.receive_n(s.queue, s.consumer("worker"), 1)
        other = await s.open()
        thief = s.consumer("thief")

        rounds = max(3, math.ceil(3 * s.lease / s.live_age))
        for _ in range(rounds):
            await s.age(s.queue, [held], s.live_age)
            await s.nothing_for(other, thief, set(ids))
            assert await s.queue.heartbeat([held]) == [], "heartbeat lost a live lease"

        assert await s.queue.ack([held]) == [], "the heartbeating owner could not ack"

    @conformance("P16")
    async def test_heartbeat_with_a_stale_receipt_reports_the_delivery_lost_and_never_takes_the_message_back(  # noqa: E501 - reads as the contract sentence
        self, s: Scenario
    ) -> None:
        """After a reclaim, the old owner's heartbeat is reported and the new owner keeps it."""
        s.require_heartbeat()
        ids = await s.add([b"contested"])
        (old,) = await s.receive_n(s.queue, s.consumer("old"), 1)
        await s.lapse(s.queue, [old])
        other = await s.open()
        (new,) = await s.reclaim_ids(other, s.consumer("new"), set(ids))

        assert await s.queue.heartbeat([old]) == [old], "a stale heartbeat was not reported"

        assert await other.heartbeat([new]) == [], "a stale heartbeat took the message back"
        await s.nothing_for(s.queue, s.consumer("third"), set(ids))
        assert await s.queue.heartbeat([old]) == [old]
        assert await s.queue.ack([old]) == [old]
        assert await other.ack([new]) == []

    @conformance("P17")
    async def test_receipt_from_an_earlier_lease_of_the_same_consumer_is_stale(
        self, s: Scenario
    ) -> None:
        """The delivery count fences the lease even when the owner's name is unchanged."""
        s.require_heartbeat()
        ids = await s.add([b"twice mine"])
        consumer = s.consumer("same")
        (earlier,) = await s.receive_n(s.queue, consumer, 1)
        await s.lapse(s.queue, [earlier])
        (later,) = await s.reclaim_ids(s.queue, consumer, set(ids))
        assert later.delivery_count == earlier.delivery_count + 1

        assert await s.queue.heartbeat([earlier]) == [earlier], "an earlier receipt heartbeated"
        assert await s.queue.ack([earlier]) == [earlier], "an earlier receipt acked"
        assert await s.queue.heartbeat([later]) == []
        assert await s.queue.ack([later]) == []

    @conformance("P18")
    async def test_heartbeat_restarts_the_lease_from_the_time_it_is_made(self, s: Scenario) -> None:
        """Even a lapsed-but-unclaimed lease restarts; it lapses one lease after the heartbeat."""
        s.require_heartbeat()
        ids = await s.add([b"revived"])
        (held,) = await s.receive_n(s.queue, s.consumer("owner"), 1)
        other = await s.open()
        thief = s.consumer("thief")

        await s.age(s.queue, [held], 2 * s.lease)
        assert await s.queue.heartbeat([held]) == [], "the receipt is current: heartbeat must work"
        await s.nothing_for(other, thief, set(ids))
        await s.age(s.queue, [held], s.live_age)
        await s.nothing_for(other, thief, set(ids))
        await s.age(s.queue, [held], s.lapse_age)

        (taken,) = await s.reclaim_ids(other, thief, set(ids))
        assert taken.delivery_count == 2
        assert await other.ack([taken]) == []

    @conformance("P19")
    async def test_heartbeat_after_ack_reports_the_delivery_lost_and_never_resurrects_it(
        self, s: Scenario
    ) -> None:
        """Heartbeat, release and dead-letter of an acked delivery are reported and do nothing."""
        ids = await s.add([b"done"])
        (done,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        assert await s.queue.ack([done]) == []

        assert await s.queue.heartbeat([done]) == [done]
        assert await s.queue.release([done]) == [done]
        assert await s.queue.dead_letter([done], reason="late") == [done]

        assert await s.queue.len() == 0
        assert (await s.queue.stats()).dead == 0
        await s.lapse(s.queue, [done])
        await s.nothing_for(s.queue, s.consumer("b"), set(ids))

    @conformance("P20")
    async def test_racing_reclaimers_each_lapsed_message_goes_to_exactly_one(
        self, s: Scenario
    ) -> None:
        """Eight reclaimers on eight handles race; every message is taken once, count 2."""
        s.require_heartbeat()
        count = scaled_count(100, minimum=20)
        ids = await s.add([f"r{i}".encode() for i in range(count)])
        held = await s.receive_n(s.queue, s.consumer("dead"), count, batch=50)
        await s.lapse(s.queue, held)
        handles = [await s.open() for _ in range(8)]
        names = [s.consumer(f"r{i}") for i in range(8)]

        taken: list[Delivery] = []
        rounds_left = 2 * (count // 7 + 2)
        deadline = time.monotonic() + s.grace * 5
        while len({d.message_id for d in taken}) < count:
            assert not s.gave_up(rounds_left, deadline), (
                f"reclaimers found {len(taken)} of {count} lapsed messages"
            )
            rounds_left -= 1
            rounds = await asyncio.gather(
                *(
                    h.reclaim(n, lease_seconds=s.lease, max_messages=7)
                    for h, n in zip(handles, names, strict=True)
                )
            )
            for name, got in zip(names, rounds, strict=True):
                assert all(d.receipt.consumer == name for d in got)
                taken.extend(got)

        twice = [i for i, n in Counter(d.message_id for d in taken).items() if n > 1]
        assert not twice, f"{len(twice)} message(s) went to more than one reclaimer: {twice[:5]}"
        assert sorted(d.message_id for d in taken) == sorted(ids)
        assert {d.delivery_count for d in taken} == {2}, "counts must rise by exactly one"
        again = await asyncio.gather(
            *(
                h.reclaim(n, lease_seconds=s.lease, max_messages=50)
                for h, n in zip(handles, names, strict=True)
            )
        )
        assert not any(again), "freshly reclaimed messages were reclaimed again"
        by_owner: dict[str, list[Delivery]] = {}
        for delivery in taken:
            by_owner.setdefault(delivery.receipt.consumer, []).append(delivery)
        for handle, name in zip(handles, names, strict=True):
            assert await handle.ack(by_owner.get(name, [])) == []

    @conformance("P21")
    async def test_successive_reclaims_reach_lapsed_messages_behind_many_live_ones(
        self, s: Scenario
    ) -> None:
        """Five lapsed messages added after many live ones are all found, in bounded calls."""
        s.require_heartbeat()
        live_count = scaled_count(500, minimum=50)
        ids = await s.add([f"m{i}".encode() for i in range(live_count + 5)])
        held = await s.receive_n(s.queue, s.consumer("busy"), len(ids), batch=100)
        order = {message_id: index for index, message_id in enumerate(ids)}
        held.sort(key=lambda d: order[d.message_id])
        live, lapsed = held[:live_count], held[live_count:]
        if s.time_mode == "age":
            await s.age(s.queue, lapsed, s.lapse_age)
        else:
            await s.lapse(s.queue, held)
            for start in range(0, live_count, 100):
                assert await s.queue.heartbeat(live[start : start + 100]) == []

        other = await s.open()
        wanted = {d.message_id for d in lapsed}
        found: set[str] = set()
        calls = 0
        bound = 2 * (len(held) // 5) + 10
        while not wanted <= found:
            calls += 1
            assert calls <= bound, (
                f"{bound} reclaim calls found only {len(found & wanted)} of 5 lapsed messages "
                f"behind {live_count} live ones"
            )
            got = await other.reclaim(s.consumer("sweeper"), lease_seconds=s.lease, max_messages=5)
            stolen = {d.message_id for d in got} - wanted
            assert not stolen, f"reclaim took {len(stolen)} live message(s)"
            found.update(d.message_id for d in got)

    @conformance("P22")
    async def test_heartbeat_never_changes_the_delivery_count(self, s: Scenario) -> None:
        """Twenty heartbeats later the count is unchanged, and the next delivery is count 2."""
        ids = await s.add([b"steady"])
        (held,) = await s.receive_n(s.queue, s.consumer("a"), 1)

        for _ in range(20):
            assert await s.queue.heartbeat([held]) == []

        if s.requires_heartbeat:
            await s.lapse(s.queue, [held])
            (again,) = await s.reclaim_ids(s.queue, s.consumer("b"), set(ids))
        else:
            assert await s.queue.release([held]) == []
            (again,) = await s.collect(s.queue, s.consumer("b"), set(ids))
        assert again.delivery_count == 2, f"count {again.delivery_count} after 20 heartbeats"
        assert await s.queue.ack([again]) == []

    @conformance("X5")
    async def test_lease_lasts_the_lease_seconds_its_holder_was_granted_whatever_the_reclaimer_s_own_lease(  # noqa: E501 - reads as the contract sentence
        self, s: Scenario
    ) -> None:
        """A long lease outlives short-lease reclaimers; a short one lapses for long-lease ones.

        Catches a backend that judges leases by the reclaimer's ``lease_seconds``, or
        by one fixed setting, instead of by what each holder was granted.
        """
        s.require_heartbeat()
        long_lease = 3 * s.lease
        long_id, short_id = await s.add([b"granted a long lease", b"granted a short lease"])
        (long,) = await s.receive_n(s.queue, s.consumer("patient"), 1, lease=long_lease)
        (short,) = await s.receive_n(s.queue, s.consumer("hasty"), 1)
        assert (long.message_id, short.message_id) == (long_id, short_id)

        # Past the short lease, well inside the long one.
        await s.age(s.queue, [long, short], s.lapse_age)
        other = await s.open()
        taken = await s.reclaim_ids(
            other, s.consumer("long-reclaimer"), {short_id}, lease=long_lease
        )
        assert long_id not in {d.message_id for d in taken}, (
            f"a lease of {long_lease:g}s was reclaimed after {s.lapse_age:g}s idle"
        )
        await s.nothing_for(other, s.consumer("short-reclaimer"), {long_id})
        assert await other.ack(taken) == []

        assert await s.queue.heartbeat([long]) == [], "the long lease was lost"
        await s.age(s.queue, [long], long_lease - s.margin)
        await s.nothing_for(other, s.consumer("short-reclaimer"), {long_id})
        await s.age(s.queue, [long], long_lease + s.margin)
        (again,) = await s.reclaim_ids(other, s.consumer("short-reclaimer"), {long_id})
        assert again.delivery_count == 2
        assert await s.queue.heartbeat([long]) == [long], "the reclaimed lease still heartbeats"
        assert await other.ack([again]) == []

    @conformance("X6")
    async def test_receive_never_returns_a_message_whose_lease_lapsed_only_reclaim_does(
        self, s: Scenario
    ) -> None:
        """A lapsed, unclaimed lease stays out of receive (any handle) until reclaimed."""
        s.require_heartbeat()
        (message_id,) = await s.add([b"lapsed"])
        held = await s.receive_n(s.queue, s.consumer("gone"), 1)
        await s.lapse(s.queue, held)
        other = await s.open()
        receiver = s.consumer("receiver")
        for handle in (s.queue, other):
            got = await handle.receive(
                receiver, max_messages=10, wait_seconds=0, lease_seconds=s.lease
            )
            assert not got, f"receive returned lapsed message(s) {[d.message_id for d in got]}"
        (taken,) = await s.reclaim_ids(other, s.consumer("reclaimer"), {message_id})
        assert taken.delivery_count == 2
        assert await other.ack([taken]) == []
