"""Delivery basics: bodies, empty queues, blocking, batches, `len`, purge, order (P1-P8, P35)."""

from __future__ import annotations

import asyncio
import time

from taskrunner.queue import Delivery

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["DeliveryCases"]

# Bodies a backend must carry unchanged: empty, every byte value (not UTF-8), 64 KiB.
ODD_BODIES = (
    b"",
    bytes(range(256)),
    b"\xff\xfe\x00\x80" * 16,
    bytes(i % 251 for i in range(65536)),
)


def _ids(deliveries: list[Delivery]) -> list[str]:
    return [d.message_id for d in deliveries]


class DeliveryCases(ConformanceBase):
    """P1-P8 and P35."""

    @conformance("P1")
    async def test_delivery_carries_the_added_body_unchanged_with_count_one_and_the_added_id(
        self, s: Scenario
    ) -> None:
        """Bodies round-trip byte for byte; the id is the one add returned, on every delivery."""
        ids = await s.add(ODD_BODIES)
        assert len(set(ids)) == len(ids), f"add returned duplicate ids {ids}"
        consumer = s.consumer("a")

        first = await s.receive_n(s.queue, consumer, len(ODD_BODIES))
        assert sorted(_ids(first)) == sorted(ids), "deliveries do not carry the added ids"
        bodies = dict(zip(ids, ODD_BODIES, strict=True))
        for delivery in first:
            assert isinstance(delivery.body, bytes), f"body is {type(delivery.body).__name__}"
            assert delivery.body == bodies[delivery.message_id], (
                f"{delivery.message_id}: body changed ({len(delivery.body)} bytes came back, "
                f"{len(bodies[delivery.message_id])} added)"
            )
            assert delivery.delivery_count == 1, f"first delivery_count {delivery.delivery_count}"
            assert delivery.receipt.consumer == consumer
            assert delivery.receipt.delivery_count == 1
        assert await s.queue.release(first) == []

        again = await s.collect(s.queue, consumer, set(ids))
        for delivery in again:
            assert delivery.body == bodies[delivery.message_id], "body changed on redelivery"
            assert delivery.delivery_count == 2
        assert await s.queue.ack(again) == []

    @conformance("P2")
    async def test_receive_without_wait_returns_empty_at_once_on_an_empty_queue(
        self, s: Scenario
    ) -> None:
        """``wait_seconds=0`` on an empty queue returns ``[]`` without error or delay."""
        started = time.monotonic()

        got = await s.queue.receive(
            s.consumer("a"), max_messages=10, wait_seconds=0, lease_seconds=s.lease
        )

        assert got == []
        assert time.monotonic() - started < s.grace, (
            "receive(wait_seconds=0) did not return at once"
        )

    @conformance("P3")
    async def test_blocking_receive_returns_empty_only_after_its_wait(self, s: Scenario) -> None:
        """With nothing to deliver, a blocking receive waits its whole wait, then returns ``[]``."""
        s.require_capability("blocking_receive")
        wait = s.lease
        finished: list[float] = []
        started = s.now()
        task = asyncio.create_task(
            s.queue.receive(
                s.consumer("a"), max_messages=1, wait_seconds=wait, lease_seconds=s.lease
            )
        )
        task.add_done_callback(lambda _: finished.append(s.now()))

        await s.advance(wait / 2)
        returned_early = task.done()
        done = await s.finishes_within(task, wait / 2 + s.margin)

        if not done:
            task.cancel()
        assert done, f"receive(wait_seconds={wait}) was still waiting after {wait + s.margin}s"
        assert task.result() == []
        assert not returned_early, "blocking receive returned [] before half its wait"
        tolerance = s.precision + 0.05 * wait
        assert finished[0] - started >= wait - tolerance, (
            f"blocking receive returned after {finished[0] - started:.3f}s of a {wait}s wait"
        )

    @conformance("P4")
    async def test_blocking_receive_wakes_when_a_message_arrives(self, s: Scenario) -> None:
        """A receive waiting ten leases returns within one lease of a message being added."""
        s.require_capability("blocking_receive")
        consumer_handle = await s.open()
        task = asyncio.create_task(
            consumer_handle.receive(
                s.consumer("a"), max_messages=1, wait_seconds=10 * s.lease, lease_seconds=s.lease
            )
        )
        await s.advance(0.1 * s.lease)
        assert not task.done(), "blocking receive returned before anything was added"

        ids = await s.add([b"wake up"])
        done = await s.finishes_within(task, s.lease)

        if not done:
            task.cancel()
        assert done, "blocking receive did not wake within a lease of the add"
        got = task.result()
        assert _ids(got) == ids
        assert await consumer_handle.ack(got) == []

    @conformance("P5")
    async def test_receive_returns_at_most_max_messages_deliveries_and_empty_when_none_arrive_in_time(  # noqa: E501 - reads as the contract sentence
        self, s: Scenario
    ) -> None:
        """Batches of 1..max_messages while messages are ready, each message once, then ``[]``."""
        ids = await s.add([f"m{i}".encode() for i in range(10)])
        consumer = s.consumer("a")

        seen: list[Delivery] = []
        for _ in range(20):
            if len(seen) == len(ids):
                break
            got = await s.queue.receive(
                consumer, max_messages=3, wait_seconds=0, lease_seconds=s.lease
            )
            assert 1 <= len(got) <= 3, (
                f"receive(max_messages=3) returned {len(got)} with {len(ids) - len(seen)} ready"
            )
            seen.extend(got)
        after = await s.queue.receive(
            consumer, max_messages=3, wait_seconds=0, lease_seconds=s.lease
        )

        assert sorted(_ids(seen)) == sorted(ids), "not every message was delivered exactly once"
        assert after == [], "receive returned in-flight messages again"
        assert await s.queue.ack(seen) == []

        limit = s.capabilities.max_batch
        if limit is not None:
            await s.add([b"x"] * (limit + 2))
            got = await s.queue.receive(
                consumer, max_messages=limit + 2, wait_seconds=0, lease_seconds=s.lease
            )
            assert 1 <= len(got) <= limit, (
                f"receive(max_messages={limit + 2}) returned {len(got)}; max_batch is {limit}"
            )

    @conformance("P6")
    async def test_messages_added_before_any_consumer_exists_are_delivered(
        self, s: Scenario
    ) -> None:
        """A handle opened after the adds, with a consumer never seen before, gets them all."""
        producer = await s.open()
        ids = await s.add([f"early {i}".encode() for i in range(5)], producer)

        late = await s.open()
        got = await s.receive_n(late, s.consumer("late"), len(ids))

        assert sorted(_ids(got)) == sorted(ids)
        assert await late.ack(got) == []

    @conformance("P7")
    async def test_len_counts_ready_delayed_and_in_flight_messages_dead_letters_are_not_counted(
        self, s: Scenario
    ) -> None:
        """Len follows add, receive, ack, dead-letter and a delayed release (5, 5, 3, 2, 2)."""
        other = await s.open()
        consumer = s.consumer("a")

        await s.add([f"m{i}".encode() for i in range(5)])
        assert await s.queue.len() == 5, "after adding 5"
        two = await s.receive_n(s.queue, consumer, 2)
        assert await s.queue.len() == 5, "after receiving 2 of 5"
        assert await other.len() == 5, "another handle disagrees"
        assert await s.queue.ack(two) == []
        assert await s.queue.len() == 3, "after acking 2 of 5"
        one = await s.receive_n(s.queue, consumer, 1)
        assert await s.queue.dead_letter(one, reason="test") == []
        assert await s.queue.len() == 2, "after dead-lettering 1 of the 3 left"

        stats = await other.stats()
        assert (stats.ready, stats.delayed, stats.in_flight) == (2, 0, 0), (
            f"stats disagree with len: {stats}"
        )
        assert stats.dead == 1, f"stats.dead is {stats.dead}, one message was dead-lettered"

        held = await s.receive_n(s.queue, consumer, 2)
        assert await s.queue.release(held[:1], delay_seconds=10 * s.lease) == []
        assert await s.queue.len() == 2, "after releasing 1 of 2 in flight with a long delay"
        stats = await other.stats()
        assert (stats.ready, stats.delayed, stats.in_flight) == (0, 1, 1), (
            f"stats do not classify a delayed and an in-flight message: {stats}"
        )

    @conformance("P8")
    async def test_purge_deletes_ready_and_in_flight_messages_and_their_receipts_report_lost(
        self, s: Scenario
    ) -> None:
        """QueueAdmin.purge (the contract's delete) empties the queue; old receipts report lost."""
        admin = s.require_admin()
        consumer = s.consumer("a")
        await s.add([b"one", b"two", b"three"])
        leased = await s.receive_n(s.queue, consumer, 1)

        purged = await admin.purge()

        assert purged == 3, f"purge() returned {purged}; 2 ready + 1 in flight were purged"
        assert await s.queue.len() == 0
        assert (
            await s.queue.receive(consumer, max_messages=10, wait_seconds=0, lease_seconds=s.lease)
            == []
        )
        assert await s.queue.heartbeat(leased) == leased, "heartbeat of a purged message"
        assert await s.queue.ack(leased) == leased, "ack of a purged message"
        ids = await s.add([b"after purge"])
        got = await s.receive_n(s.queue, consumer, 1)
        assert _ids(got) == ids

    @conformance("P35")
    async def test_single_consumer_receives_messages_in_add_order_when_fifo_is_claimed(
        self, s: Scenario
    ) -> None:
        """With ``ordering="fifo"``, one consumer sees messages in the order they were added."""
        s.require_capability("ordering")
        ids: list[str] = []
        for batch in range(4):
            ids += await s.add([f"b{batch}m{i}".encode() for i in range(5)])
        consumer = s.consumer("a")

        got: list[Delivery] = []
        for size in (1, 3, 1, 5, 10):
            got += await s.queue.receive(
                consumer, max_messages=size, wait_seconds=0, lease_seconds=s.lease
            )
        got += await s.receive_n(s.queue, consumer, len(ids) - len(got))

        assert _ids(got) == ids, "messages were not received in the order they were added"

    @conformance("X8")
    async def test_message_ids_are_unique_within_the_queue_and_never_reused(
        self, s: Scenario
    ) -> None:
        """Ids of acked, dead-lettered, purged and retried messages never come back."""
        consumer = s.consumer("a")
        seen = await s.add([f"first {i}".encode() for i in range(4)])
        assert len(set(seen)) == 4, f"one add returned duplicate ids {seen}"
        held = await s.receive_n(s.queue, consumer, 4)
        by_id = {d.message_id: d for d in held}
        acked, dead, *rest = (by_id[i] for i in seen)
        assert await s.queue.ack([acked]) == []
        assert await s.queue.dead_letter([dead], reason="for the test") == []
        admin = s.queue.admin
        if admin is not None:
            (letter,) = await admin.list_dead_letters()
            seen += await admin.retry_dead_letters([letter.message_id])
            await admin.purge()
        else:
            assert await s.queue.ack(rest) == []
        later = await s.add([f"later {i}".encode() for i in range(4)])
        reused = set(later) & set(seen)
        assert not reused, f"id(s) {sorted(reused)} were issued again"
        assert len(set(seen)) == len(seen), f"retry reused an id: {seen}"
