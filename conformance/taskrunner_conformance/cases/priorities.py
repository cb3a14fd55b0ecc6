"""Priorities: higher first, kept through release, delay and retry, aged (X100-X104).

Every request of a case carries one ``partition_key``, so a backend that spreads a
queue over partitions keeps the case's messages in one partition, where its order
holds (across partitions a receive may take from any of them).
"""

from __future__ import annotations

import pytest

from taskrunner.queue import PRIORITY_MAX, AddRequest, Delivery, Flow, Scheduling

from ..scenario import ConformanceBase, Scenario, conformance
from .scheduling_calls import add_requests

__all__ = ["PriorityCases"]


async def _add(part: Scheduling, case: str, priorities: list[int], **options: object) -> list[str]:
    """One message per priority (body ``"<case>-<index>-p<priority>"``); their ids."""
    requests = [
        AddRequest(
            body=f"{case}-{i}-p{p}".encode(),
            priority=p,
            partition_key=case,
            **options,  # type: ignore[arg-type]
        )
        for i, p in enumerate(priorities)
    ]
    return [a.message_id for a in await add_requests(part, requests)]


async def _one(s: Scenario, consumer: str = "c") -> Delivery:
    (delivery,) = await s.receive_n(s.queue, s.consumer(consumer), 1)
    return delivery


class PriorityCases(ConformanceBase):
    """X100-X104."""

    @conformance("X100")
    async def test_a_receive_leases_higher_priorities_first(self, s: Scenario) -> None:
        """0 5 9 5 0 9 added: received one at a time as 9 9 5 5 0 0, each level in add order."""
        part = s.require_scheduling("priorities")
        ids = await _add(part, "x100", [0, 5, 9, 5, 0, 9])
        got = [await _one(s) for _ in ids]
        order = [ids.index(d.message_id) for d in got]
        priorities = [[0, 5, 9, 5, 0, 9][i] for i in order]
        assert priorities == [9, 9, 5, 5, 0, 0], f"received priorities {priorities} in turn"
        if s.capabilities.ordering == "fifo":
            assert order == [2, 5, 1, 3, 0, 4], f"within a level, not in add order: {order}"
        assert await s.queue.ack(got) == []

        if s.capabilities.ordering == "fifo":
            # One batch lists them in the same order.
            ids = await _add(part, "x100", [0, 5, 9, 5, 0, 9])
            batch = await s.receive_n(s.queue, s.consumer("batch"), 6, batch=6)
            order = [ids.index(d.message_id) for d in batch]
            assert order == [2, 5, 1, 3, 0, 4], f"one receive of 6 listed them as {order}"
            assert await s.queue.ack(batch) == []

    @conformance("X101")
    async def test_released_delayed_and_retried_messages_keep_their_priority(
        self, s: Scenario
    ) -> None:
        """A priority-9 message released, added with a delay, or retried beats ready 5s."""
        part = s.require_scheduling("priorities")
        high, *_ = await _add(part, "x101", [9, 5, 5, 5])
        first = await _one(s)
        assert first.message_id == high
        assert await s.queue.release([first]) == []
        again = await _one(s)
        assert (again.message_id, again.delivery_count) == (high, 2), (
            "a released priority-9 message came after ready priority-5 ones"
        )
        admin = s.queue.admin
        if admin is not None:
            assert await s.queue.dead_letter([again], reason="x101") == []
            [letter] = [
                d for d in await admin.list_dead_letters(limit=1000) if d.original_id == high
            ]
            (retried,) = await admin.retry_dead_letters([letter.message_id])
            got = await _one(s)
            assert got.message_id == retried, "a retried priority-9 dead letter lost its priority"
            assert await s.queue.ack([got]) == []
        else:
            assert await s.queue.ack([again]) == []
        if s.capabilities.delayed_add:
            delay = s.margin
            (late,) = await _add(part, "x101", [9], delay_seconds=delay)
            await s.advance(delay + s.margin)
            got = await _one(s)
            assert got.message_id == late, "a delayed priority-9 message, once due, came later"
            assert await s.queue.ack([got]) == []
        rest = await s.receive_n(s.queue, s.consumer("rest"), 3, batch=10)
        assert await s.queue.ack(rest) == []

    @conformance("X102")
    async def test_priority_zero_is_the_default_and_the_lowest(self, s: Scenario) -> None:
        """A request without a priority comes after one with priority 1."""
        part = s.require_scheduling("priorities")
        requests = [
            AddRequest(body=b"default", partition_key="x102"),
            AddRequest(body=b"one", priority=1, partition_key="x102"),
        ]
        default, one = (a.message_id for a in await add_requests(part, requests))
        got = [await _one(s), await _one(s)]
        assert [d.message_id for d in got] == [one, default]
        assert await s.queue.ack(got) == []

    @conformance("X103")
    async def test_an_old_low_priority_message_rises_one_level_per_aging_period(
        self, s: Scenario
    ) -> None:
        """Priority 0 ready 6 agings minus a margin loses to a fresh 5; plus a margin, wins."""
        part = s.require_scheduling("priorities")
        aging = s.capabilities.priority_aging_seconds
        if aging is None:
            pytest.skip("capabilities.priority_aging_seconds is None: strict priorities")
        if s.time_mode != "clock" and 6 * aging > 20:
            pytest.skip(f"an aging of {aging:g}s needs a fake clock to probe in this suite")
        (old,) = await _add(part, "x103", [0])
        start = s.now()
        await s.advance(max(0.0, 6 * aging - s.margin - (s.now() - start)))
        (fresh,) = await _add(part, "x103", [5])
        first = await _one(s)
        if s.now() - start < 6 * aging - s.precision:
            # Ranked 5 against a fresh 5: the higher level wins the tie.
            assert first.message_id == fresh, (
                f"a priority-0 message {s.now() - start:.3f}s ready beat a fresh priority 5"
            )
        await s.advance(max(0.0, start + 6 * aging + s.margin - s.now()))
        (fresher,) = await _add(part, "x103", [5])
        second = await _one(s)
        if first.message_id == fresh:
            assert second.message_id == old, (
                f"a priority-0 message ready {6 * aging:g}s and a margin did not rise above 5"
            )
        rest = await s.receive_n(s.queue, s.consumer("rest"), 1, batch=5)
        assert {d.message_id for d in [first, second, *rest]} == {old, fresh, fresher}
        assert await s.queue.ack([first, second, *rest]) == []

    @conformance("X104")
    async def test_a_priority_out_of_range_or_unclaimed_adds_nothing(self, s: Scenario) -> None:
        """-1, 10, 1.5, True, "5", a priority beside a flow: refused with the whole batch."""
        part = s.require_scheduling()
        claimed = s.capabilities.priorities
        before = await s.queue.len()
        bad: list[object] = [-1, PRIORITY_MAX + 1, 1.5, True, "5"]
        for priority in bad:
            request = AddRequest(body=b"bad", priority=priority)  # type: ignore[arg-type]
            with pytest.raises((TypeError, ValueError)):
                await part.add_requests([AddRequest(body=b"good"), request])
        if claimed and s.capabilities.flow_control:
            with pytest.raises(ValueError, match="flow"):
                await part.add_requests([AddRequest(body=b"x", priority=3, flow=Flow(key="k"))])
        if not claimed:
            with pytest.raises(ValueError, match="priorities"):
                await part.add_requests([AddRequest(body=b"x", priority=3)])
        assert await s.queue.len() == before, "a refused batch added messages"
        (zero,) = await add_requests(part, [AddRequest(body=b"zero", priority=0)])
        assert zero.added, "priority 0 must be accepted by every backend"
