"""Flow control: admission under concurrency and rate limits, fairness (X90-X99, X105).

Each case claims ``capabilities.flow_control`` except X99's refusal half, which runs on
backends that do not claim it. Keys are fresh per case, so cases share nothing.

Times are derived from the harness's lease and precision as elsewhere: the rate case
uses an interval of several margins, probes one margin before it (nothing admitted)
and one margin after it (one admitted); on real time a probe that came too late to
prove "before" is not counted, and the case says so when none was.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

from taskrunner.queue import AddRequest, Delivery, Flow, Queue, Scheduling

from ..edges import Edges, settle_task
from ..scenario import ConformanceBase, Scenario, conformance
from .scheduling_calls import add_requests

__all__ = ["FlowCases"]

# Concurrent receivers racing for the slots of one key (X91).
_RACERS = 8


async def _add_flow(
    part: Scheduling, key: str, bodies: Sequence[bytes], **limits: object
) -> list[str]:
    """Add `bodies` with ``Flow(key=key, **limits)``; their ids, in order."""
    flow = Flow(key=key, **limits)  # type: ignore[arg-type]
    added = await add_requests(part, [AddRequest(body=b, flow=flow) for b in bodies])
    assert all(a.added for a in added), f"a request with a flow added nothing: {added!r}"
    return [a.message_id for a in added]


async def _receive(queue: Queue, s: Scenario, consumer: str, n: int = 50) -> list[Delivery]:
    return await queue.receive(consumer, max_messages=n, wait_seconds=0, lease_seconds=s.lease)


def _bodies(deliveries: Sequence[Delivery]) -> list[bytes]:
    return [d.body for d in deliveries]


class FlowCases(ConformanceBase):
    """X90-X99, X105."""

    @conformance("X90")
    async def test_waiting_messages_count_as_ready_and_only_admitted_ones_are_leased(
        self, s: Scenario
    ) -> None:
        """Three messages of a key with concurrency 1: ready 3; a receive of 50 leases one."""
        part = s.require_scheduling("flow_control")
        ids = await _add_flow(part, "x90", [b"1", b"2", b"3"], concurrency=1)
        stats = await s.queue.stats()
        assert stats.ready == 3, f"3 waiting messages counted as ready {stats.ready}"
        assert await s.queue.len() == 3

        got = await _receive(s.queue, s, s.consumer("c"))
        assert [d.message_id for d in got] == ids[:1], (
            f"concurrency 1 admitted {_bodies(got)}: expected only the first message"
        )
        assert got[0].delivery_count == 1, "an admitted message's first lease must be count 1"
        stats = await s.queue.stats()
        assert (stats.ready, stats.in_flight) == (2, 1), f"ready/in flight after: {stats!r}"
        assert await s.queue.len() == 3
        assert await s.queue.ack(got) == []

    @conformance("X91")
    async def test_at_most_concurrency_messages_of_a_key_are_admitted_across_handles(
        self, s: Scenario
    ) -> None:
        """N=3 of 6; racing receivers on two handles lease 3; an ack admits exactly one."""
        part = s.require_scheduling("flow_control")
        ids = await _add_flow(part, "x91", [b"%d" % i for i in range(6)], concurrency=3)
        other = await s.open()
        handles = [s.queue, other]
        racers = await asyncio.gather(
            *(_receive(handles[i % 2], s, s.consumer(f"r{i}"), 2) for i in range(_RACERS))
        )
        held = [d for got in racers for d in got]
        assert sorted(d.message_id for d in held) == sorted(ids[:3]), (
            f"racing receivers leased {sorted(_bodies(held))} of a key with concurrency 3"
        )
        assert await _receive(other, s, s.consumer("late")) == []

        if s.capabilities.blocking_receive:
            # A receive blocked on the key's full slots wakes when one frees.
            waiter = asyncio.create_task(
                other.receive(
                    s.consumer("waiter"),
                    max_messages=5,
                    wait_seconds=s.grace,
                    lease_seconds=s.lease,
                )
            )
            await s.pause()
            assert await s.queue.ack(held[:1]) == []
            woke = await asyncio.wait_for(waiter, s.grace + 5)
            assert [d.message_id for d in woke] == [ids[3]], (
                f"after one ack the blocked receive got {_bodies(woke)}, not the 4th message"
            )
        else:
            assert await s.queue.ack(held[:1]) == []
            woke = await s.receive_n(other, s.consumer("next"), 1)
            assert [d.message_id for d in woke] == [ids[3]]
        assert await _receive(s.queue, s, s.consumer("more")) == [], "a 4th slot was granted"
        assert await s.queue.ack(held[1:]) == []
        assert await other.ack(woke) == []

    @conformance("X92")
    async def test_ack_dead_letter_release_and_purge_free_the_slot(self, s: Scenario) -> None:
        """Concurrency 1: each outcome of the admitted message lets the next one in."""
        part = s.require_scheduling("flow_control")
        for outcome in ("ack", "dead_letter", "release"):
            key = f"x92-{outcome}"
            ids = await _add_flow(part, key, [b"first", b"second"], concurrency=1)
            (first,) = await s.receive_n(s.queue, s.consumer(outcome), 1)
            assert first.message_id == ids[0]
            if outcome == "ack":
                assert await s.queue.ack([first]) == []
            elif outcome == "dead_letter":
                assert await s.queue.dead_letter([first], reason="x92") == []
            else:
                assert await s.queue.release([first]) == []
            (second,) = await s.receive_n(s.queue, s.consumer(outcome), 1)
            assert second.message_id == ids[1], (
                f"after {outcome} of the slot's holder, {second.body!r} was admitted"
            )
            assert await s.queue.ack([second]) == []
            if outcome == "release":
                (again,) = await s.receive_n(s.queue, s.consumer(outcome), 1)
                assert again.message_id == ids[0]
                assert again.delivery_count == 2
                assert await s.queue.ack([again]) == []
        admin = s.queue.admin
        if admin is not None:
            await _add_flow(part, "x92-purge", [b"held", b"waiting"], concurrency=1)
            await s.receive_n(s.queue, s.consumer("purge"), 1)
            await admin.purge()
            (fresh,) = await _add_flow(part, "x92-purge", [b"fresh"], concurrency=1)
            got = await s.receive_n(s.queue, s.consumer("purge"), 1)
            assert [d.message_id for d in got] == [fresh], "purge left the key's slot held"
            assert await s.queue.ack(got) == []

    @conformance("X93")
    async def test_an_admitted_message_keeps_its_slot_through_lapse_and_reclaim(
        self, s: Scenario
    ) -> None:
        """Lapse the holder's lease: reclaim returns it (count 2), the next stays waiting."""
        s.require_heartbeat()
        part = s.require_scheduling("flow_control")
        ids = await _add_flow(part, "x93", [b"holder", b"next"], concurrency=1)
        (held,) = await s.receive_n(s.queue, s.consumer("gone"), 1)
        other = await s.open()
        await s.lapse(s.queue, [held])
        taken_all = await s.collect(other, s.consumer("reclaimer"), {ids[0]})
        assert ids[1] not in {d.message_id for d in taken_all}, (
            "the next message was admitted while the lapsed holder kept the slot"
        )
        (taken,) = taken_all
        assert taken.message_id == ids[0]
        assert taken.delivery_count == 2
        await s.nothing_for(other, s.consumer("thief"), {ids[1]})
        assert await other.ack([taken]) == []
        got = await s.receive_n(other, s.consumer("next"), 1)
        assert [(d.message_id, d.delivery_count) for d in got] == [(ids[1], 1)], (
            f"after the reclaimed holder's ack, got {got!r}: expected the next, count 1"
        )
        assert await other.ack(got) == []

    @conformance("X94")
    async def test_a_key_admits_in_add_order_and_a_released_message_waits_behind_it(
        self, s: Scenario
    ) -> None:
        """Concurrency 1 over m1..m3: m1 released comes after m2 and m3."""
        part = s.require_scheduling("flow_control")
        ids = await _add_flow(part, "x94", [b"m1", b"m2", b"m3"], concurrency=1)
        (m1,) = await s.receive_n(s.queue, s.consumer("c"), 1)
        assert m1.message_id == ids[0]
        assert await s.queue.release([m1]) == []
        order = []
        for _ in range(3):
            (d,) = await s.receive_n(s.queue, s.consumer("c"), 1)
            order.append(d.message_id)
            assert await s.queue.ack([d]) == []
        assert order == [ids[1], ids[2], ids[0]], (
            f"admitted {order}: expected m2, m3, then the released m1 ({ids})"
        )

    @conformance("X95")
    async def test_admission_takes_turns_across_keys_least_recently_served_first(
        self, s: Scenario
    ) -> None:
        """A x5, B x2, C x1 added in that order: one receive of 8 is A B C A B A A A."""
        s.require_capability("ordering")
        part = s.require_scheduling("flow_control")
        names = {}
        for key, count in (("A", 5), ("B", 2), ("C", 1)):
            bodies = [f"{key}{i}".encode() for i in range(1, count + 1)]
            for mid, body in zip(await _add_flow(part, f"x95-{key}", bodies), bodies, strict=True):
                names[mid] = body
        got = await s.receive_n(s.queue, s.consumer("c"), 8, batch=8)
        order = [names[d.message_id].decode() for d in got]
        assert order == ["A1", "B1", "C1", "A2", "B2", "A3", "A4", "A5"], (
            f"admitted in the order {order}: expected round-robin A1 B1 C1 A2 B2 A3 A4 A5"
        )
        assert await s.queue.ack(got) == []

    @conformance("X96")
    async def test_a_key_with_a_backlog_delays_no_other_key(self, s: Scenario) -> None:
        """A x40, then B and C: one message per receive, B1 and C1 come within 6."""
        part = s.require_scheduling("flow_control")
        await _add_flow(part, "x96-A", [b"A"] * 40)
        (b,) = await _add_flow(part, "x96-B", [b"B"])
        (c,) = await _add_flow(part, "x96-C", [b"C"])
        seen: list[Delivery] = []
        for _ in range(6):
            seen += await s.receive_n(s.queue, s.consumer("c"), 1)
            if {b, c} <= {d.message_id for d in seen}:
                break
        assert {b, c} <= {d.message_id for d in seen}, (
            f"6 receives behind a backlog of 40 got {_bodies(seen)}: B and C waited"
        )
        assert await s.queue.ack(seen) == []

    @conformance("X97")
    async def test_rate_admits_the_burst_then_one_per_interval_never_earlier(
        self, s: Scenario
    ) -> None:
        """Burst 2 at once; the 3rd not before one interval, then by one interval + margin."""
        part = s.require_scheduling("flow_control")
        interval = max(4 * s.margin, 0.5)
        ids = await _add_flow(
            part, "x97", [b"%d" % i for i in range(5)], rate=1 / interval, burst=2
        )
        start = s.now()
        burst = await s.receive_n(s.queue, s.consumer("c"), 2, batch=5)
        assert [d.message_id for d in burst] == ids[:2], f"the burst was {_bodies(burst)}"
        burst_end = s.now()
        # The burst was admitted inside [start, burst_end]: an admission less than an
        # interval after `start` is early whenever it came.
        probed = 0
        for wait in (0.0, interval - s.margin - (s.now() - start)):
            await s.advance(max(0.0, wait))
            early = await _receive(s.queue, s, s.consumer("c"))
            elapsed = s.now() - start
            if elapsed < interval - s.precision:
                probed += 1
                assert early == [], (
                    f"admitted {_bodies(early)} {elapsed:.3f}s after the burst began, "
                    f"inside its interval of {interval:g}s"
                )
            if early:
                break
        else:
            early = []
        assert probed, "every probe came later than the interval: the machine is too slow"
        await s.advance(max(0.0, burst_end + interval + s.margin - s.now()))
        third = early or await s.receive_n(s.queue, s.consumer("c"), 1, batch=5)
        assert [d.message_id for d in third] == ids[2:3], (
            f"one interval after the burst, admitted {_bodies(third)}: expected the third"
        )
        third_end = s.now()
        # The fourth is due one interval after the burst's second slot, or at once if
        # the third came later than that.
        due = max(burst_end + 2 * interval, third_end) + s.margin
        early_fourth = s.now() - start < 2 * interval - s.precision
        if s.capabilities.blocking_receive:
            # A receive blocked on a rate-limited key wakes when the rate allows.
            edges = Edges(s)
            wait = 10 * s.lease + 2 * interval
            task, _ = await edges.started(
                s.queue.receive(
                    s.consumer("c"), max_messages=1, wait_seconds=wait, lease_seconds=s.lease
                )
            )
            try:
                if early_fourth and s.now() - start < 2 * interval - s.precision:
                    assert not task.done(), "a fourth came in the same interval as the third"
                await edges.wait_until(due)
                assert await edges.finished(task), (
                    "a receive blocked on a rate-limited key did not wake when its rate allowed"
                )
                fourth = task.result()
            finally:
                await settle_task(task, s.grace)
        else:
            fourth = await _receive(s.queue, s, s.consumer("c"))
            if early_fourth and s.now() - start < 2 * interval - s.precision:
                assert fourth == [], "a fourth message came in the same interval as the third"
            await s.advance(max(0.0, due - s.now()))
            fourth = fourth or await s.receive_n(s.queue, s.consumer("c"), 1, batch=5)
        assert [d.message_id for d in fourth] == ids[3:4], (
            f"one interval after the third, admitted {_bodies(fourth)}: expected the fourth"
        )
        assert await s.queue.ack(burst + third + fourth) == []

    @conformance("X98")
    async def test_a_retried_dead_letter_waits_again_under_its_flow(self, s: Scenario) -> None:
        """Concurrency 1: a dead letter retried while its key's slot is held waits."""
        part = s.require_scheduling("flow_control")
        admin = s.require_admin()
        ids = await _add_flow(part, "x98", [b"doomed", b"next"], concurrency=1)
        (doomed,) = await s.receive_n(s.queue, s.consumer("c"), 1)
        assert await s.queue.dead_letter([doomed], reason="x98") == []
        (following,) = await s.receive_n(s.queue, s.consumer("c"), 1)
        assert following.message_id == ids[1]
        letters = [d for d in await admin.list_dead_letters(limit=1000) if d.original_id == ids[0]]
        assert len(letters) == 1, f"the dead letter of {ids[0]} was listed {len(letters)} times"
        (retried,) = await admin.retry_dead_letters([letters[0].message_id])
        await s.nothing_for(s.queue, s.consumer("c"), {retried})
        assert await s.queue.ack([following]) == []
        got = await s.receive_n(s.queue, s.consumer("c"), 1)
        assert [d.message_id for d in got] == [retried], (
            "the retried dead letter was not admitted once its key's slot freed"
        )
        assert await s.queue.ack(got) == []

    @conformance("X99")
    async def test_a_malformed_flow_and_an_unclaimed_one_add_nothing(self, s: Scenario) -> None:
        """Bad keys, limits below 1, rates that are no rate: refused, nothing added."""
        part = s.require_scheduling()
        bad: list[tuple[object, type[TypeError] | type[ValueError]]] = [
            ("not a flow", TypeError),
            (Flow(key=""), ValueError),
            (Flow(key="k\x00"), ValueError),
            (Flow(key="k" * 600), ValueError),
            (Flow(key="k", concurrency=0), ValueError),
            (Flow(key="k", concurrency=-1), ValueError),
            (Flow(key="k", rate=0), ValueError),
            (Flow(key="k", rate=-1.0), ValueError),
            (Flow(key="k", rate=math.nan), ValueError),
            (Flow(key="k", rate=math.inf), ValueError),
            (Flow(key="k", rate=1.0, burst=0), ValueError),
            (Flow(key="k", burst=3), ValueError),
        ]
        before = await s.queue.len()
        claimed = s.capabilities.flow_control
        for flow, error in bad:
            # A backend without flow control may refuse any flow before checking it.
            refusal = error if claimed else (TypeError, ValueError)
            good = AddRequest(body=b"good")
            request = AddRequest(body=b"bad", flow=flow)  # type: ignore[arg-type]
            try:
                await part.add_requests([good, request])
            except refusal:
                pass
            else:
                raise AssertionError(f"a request with flow={flow!r} was accepted")
        if not claimed:
            with pytest.raises(ValueError, match="flow_control"):
                await part.add_requests([AddRequest(body=b"limited", flow=Flow(key="k"))])
        assert await s.queue.len() == before, "a refused batch added messages"

    @conformance("X105")
    async def test_waiting_message_looked_up_names_its_slot_holders_or_its_rate_s_next_time(
        self, s: Scenario
    ) -> None:
        """Concurrency 1, and a rate of one a minute: each second message says why it waits.

        The slot's waits for the first message; the rate's until a minute after the first.
        """
        part = s.require_scheduling("flow_control")
        lookup = s.require_lookup()
        interval = 60.0
        slot_ids = await _add_flow(part, "x105-slot", [b"held", b"next"], concurrency=1)
        rate_ids = await _add_flow(
            part, "x105-rate", [b"first", b"second"], rate=1 / interval, rate_key="x105-r"
        )
        start = s.wall()
        got = await s.receive_n(s.queue, s.consumer("c"), 2, batch=10)
        end = s.wall()
        assert sorted(d.message_id for d in got) == sorted([slot_ids[0], rate_ids[0]]), (
            f"admitted {_bodies(got)}: expected the first message of each key"
        )
        held, slot_waiting, _, rate_waiting = await lookup.lookup(slot_ids + rate_ids)
        assert held is not None, "the slot's holder has no state"
        assert held.state == "running", f"the slot's holder is {held!r}"
        assert slot_waiting is not None, "the slot's waiting message has no state"
        assert rate_waiting is not None, "the rate's waiting message has no state"
        for state in (slot_waiting, rate_waiting):
            assert state.state == "ready", (
                f"a waiting message looked up as {state!r}: waiting counts as ready"
            )
        if slot_waiting.waiting is None and rate_waiting.waiting is None:
            pytest.skip("backend does not say why a message waits (MessageState.waiting)")
        why = slot_waiting.waiting
        assert why is not None, "the slot's waiting message says nothing of why it waits"
        assert (why.key, why.reason, why.holders) == ("x105-slot", "slot", (slot_ids[0],)), (
            f"the message behind a held slot of concurrency 1 says {why!r}"
        )
        why = rate_waiting.waiting
        assert why is not None, "the rate's waiting message says nothing of why it waits"
        assert (why.key, why.reason, why.rate_key) == ("x105-rate", "rate", "x105-r"), (
            f"the message behind a spent rate says {why!r}"
        )
        assert why.until is not None
        slack = s.margin + s.precision
        assert start + interval - slack <= why.until <= end + interval + slack, (
            f"the rate next allows one at {why.until - start:.3f}s after the admission "
            f"began (it took {end - start:.3f}s): expected one interval, {interval:g}s"
        )
        assert await s.queue.ack(got) == []
