"""Crashes, idle consumers, release, close and cancellation (P23-P25, X1, X3)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from taskrunner.errors import QueueClosedError
from taskrunner.queue import Delivery

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["LifecycleCases"]


class LifecycleCases(ConformanceBase):
    """P23-P25, X1 and X3."""

    @conformance("P23")
    async def test_messages_of_a_consumer_that_vanishes_are_reclaimed_after_their_lease(
        self, s: Scenario
    ) -> None:
        """A consumer that stops without acking or closing loses nothing: others reclaim all."""
        s.require_heartbeat()
        ids = await s.add([f"job {i}".encode() for i in range(10)])
        vanishing = await s.open()
        abandoned = await s.receive_n(vanishing, s.consumer("crashed"), len(ids))
        # From here on the crashed consumer's handle is never used again.

        await s.lapse(s.queue, abandoned)
        survivor = await s.open()
        taken = await s.reclaim_ids(survivor, s.consumer("survivor"), set(ids))

        assert sorted(d.message_id for d in taken) == sorted(ids), "a message was reclaimed twice"
        assert {d.delivery_count for d in taken} == {2}
        assert await survivor.len() == len(ids)
        assert await survivor.ack(taken) == []
        assert await survivor.len() == 0

    @conformance("P24")
    async def test_idle_consumer_with_pending_messages_keeps_them_reclaimable(
        self, s: Scenario
    ) -> None:
        """Leases outlive a long-idle owner while other consumers come and go around it."""
        s.require_heartbeat()
        ids = await s.add([b"p1", b"p2", b"p3"])
        idle_handle = await s.open()
        idle_name = s.consumer("idle")
        pending = await s.receive_n(idle_handle, idle_name, 3)
        churn = await s.open()

        await s.lapse(s.queue, pending)
        churners = [s.consumer(f"churn{round_number}") for round_number in range(5)]
        for round_number, churner in enumerate(churners):
            # Receive only: reclaiming here would take the idle consumer's messages early.
            await s.add([f"churn {round_number}".encode()], churn)
            got = await s.receive_n(churn, churner, 1)
            assert await churn.ack(got) == []
            if s.time_mode == "clock":
                await s.advance(s.lease)

        stats = await s.queue.stats()
        listed = {c.name: c.pending for c in stats.consumers}
        if idle_name in listed:
            assert listed[idle_name] == 3, (
                f"stats lists the idle consumer with {listed[idle_name]} pending, not 3"
            )
        cleanup = s.queue.consumer_cleanup
        if cleanup is not None:
            # The backend's consumer clean-up, at its most eager, must spare the holder.
            removed = await cleanup.remove_idle_consumers(0)
            assert idle_name not in removed, "clean-up removed a consumer holding messages"
            assert churners[0] in removed, "clean-up kept an idle consumer holding none"
        taken = await s.reclaim_ids(s.queue, s.consumer("rescuer"), set(ids))
        assert {d.message_id for d in taken} >= set(ids)
        assert await s.queue.ack(taken) == []

    @conformance("P25")
    async def test_released_message_is_delivered_again_by_receive_after_its_delay_with_its_delivery_count_plus_1(  # noqa: E501 - reads as the contract sentence
        self, s: Scenario
    ) -> None:
        """Released with no delay it comes back at once; with a delay, not before the delay."""
        now_id, later_id = await s.add([b"retry now", b"retry later"])
        first = await s.receive_n(s.queue, s.consumer("a"), 2)
        now = next(d for d in first if d.message_id == now_id)
        later = next(d for d in first if d.message_id == later_id)
        other = await s.open()
        taker = s.consumer("b")

        assert await s.queue.release([now]) == []
        (again,) = await s.receive_n(other, taker, 1)
        assert again.message_id == now_id
        assert again.delivery_count == 2, f"redelivered with count {again.delivery_count}"
        assert again.body == b"retry now"
        assert await s.queue.release([now]) == [now], "a redelivered message's old receipt worked"

        delay = s.lease / 2
        assert await s.queue.release([later], delay_seconds=delay) == []
        await s.nothing_for(other, s.consumer("early"), {later_id})
        await s.advance(delay + s.margin)
        (late,) = await s.receive_n(other, taker, 1)
        assert late.message_id == later_id
        assert late.delivery_count == 2
        assert await other.ack([again, late]) == []
        assert await other.len() == 0

    @conformance("X1")
    async def test_aclose_is_idempotent_every_other_method_called_after_it_raises_queue_closed_error(  # noqa: E501 - reads as the contract sentence
        self, s: Scenario
    ) -> None:
        """A closed handle refuses every call; other handles and the leases it took live on."""
        closing = await s.open()
        await s.add([b"outlives its handle"])
        (held,) = await s.receive_n(closing, s.consumer("a"), 1)

        await closing.aclose()
        await closing.aclose()

        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "add": lambda: closing.add([b"x"]),
            "receive": lambda: closing.receive(
                "a", max_messages=1, wait_seconds=0, lease_seconds=s.lease
            ),
            "heartbeat": lambda: closing.heartbeat([held]),
            "ack": lambda: closing.ack([held]),
            "release": lambda: closing.release([held]),
            "reclaim": lambda: closing.reclaim("a", lease_seconds=s.lease, max_messages=1),
            "dead_letter": lambda: closing.dead_letter([held], reason="closed"),
            "stats": closing.stats,
            "len": closing.len,
        }
        for name, call in calls.items():
            try:
                await call()
            except QueueClosedError:
                continue
            raise AssertionError(f"{name}() on a closed handle did not raise QueueClosedError")
        assert await s.queue.len() == 1, "calls on the closed handle changed the queue"
        assert await s.queue.ack([held]) == [], "closing a handle released its leases"

    @conformance("X3")
    async def test_cancelled_receive_never_leaves_a_message_leased_unseen(
        self, s: Scenario
    ) -> None:
        """Cancel a waiting receive as a message arrives: the message stays deliverable."""
        s.require_capability("cancel_safe_receive")
        waiting = await s.open()
        task = asyncio.create_task(
            waiting.receive(
                s.consumer("cancelled"),
                max_messages=1,
                wait_seconds=10 * s.lease,
                lease_seconds=s.lease,
            )
        )
        await s.advance(0.1 * s.lease)

        ids = await s.add([b"arrives during cancel"])
        task.cancel()
        seen: list[Delivery] = []
        with contextlib.suppress(asyncio.CancelledError):
            seen = await task

        if seen:
            # The receive won the race and returned the message: the caller has it.
            assert [d.message_id for d in seen] == ids
            assert await waiting.ack(seen) == []
        else:
            got = await s.receive_n(s.queue, s.consumer("next"), 1)
            assert [d.message_id for d in got] == ids
            assert await s.queue.ack(got) == []

    @conformance("X7")
    async def test_released_delivery_s_receipt_is_stale_from_the_release_on_even_before_redelivery(
        self, s: Scenario
    ) -> None:
        """Every lease operation with a released receipt reports lost, before and after."""
        (message_id,) = await s.add([b"released"])
        consumer = s.consumer("same")
        (released,) = await s.receive_n(s.queue, consumer, 1)
        delay = 2 * s.lease
        assert await s.queue.release([released], delay_seconds=delay) == []

        async def all_report_lost(when: str) -> None:
            assert await s.queue.heartbeat([released]) == [released], f"heartbeat {when}"
            assert await s.queue.release([released]) == [released], f"release {when}"
            assert await s.queue.dead_letter([released], reason="stale") == [released], (
                f"dead_letter {when}"
            )
            assert await s.queue.ack([released]) == [released], f"ack {when}"

        await all_report_lost("before redelivery")
        stats = await s.queue.stats()
        assert (stats.delayed, stats.in_flight, stats.dead) == (1, 0, 0), (
            f"a stale receipt changed the released message: {stats}"
        )
        await s.advance(delay + s.margin)
        (again,) = await s.receive_n(s.queue, consumer, 1)
        assert again.message_id == message_id
        assert again.delivery_count == 2
        await all_report_lost("after redelivery to the same consumer")
        assert await s.queue.heartbeat([again]) == [], "stale calls took the new lease"
        assert await s.queue.ack([again]) == []
