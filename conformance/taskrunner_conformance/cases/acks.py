"""Acks: final, idempotent, fenced against forged and stale receipts (P9-P12)."""

from __future__ import annotations

from taskrunner.queue import Delivery, Receipt

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["AckCases", "forge"]


def forge(delivery: Delivery, *, consumer: str | None = None, count: int | None = None) -> Delivery:
    """A copy of `delivery` whose receipt names another consumer or delivery count."""
    receipt = delivery.receipt
    return Delivery(
        message_id=delivery.message_id,
        body=delivery.body,
        delivery_count=delivery.delivery_count,
        receipt=Receipt(
            consumer=receipt.consumer if consumer is None else consumer,
            delivery_count=receipt.delivery_count if count is None else count,
            token=receipt.token,
        ),
    )


class AckCases(ConformanceBase):
    """P9-P12."""

    @conformance("P9")
    async def test_ack_with_a_current_receipt_completes_the_message_it_is_never_delivered_again(
        self, s: Scenario
    ) -> None:
        """After an ack, neither receive nor reclaim (even after a lease) returns the message."""
        ids = await s.add([b"acked", b"kept"])
        consumer = s.consumer("a")
        got = await s.receive_n(s.queue, consumer, 2)
        acked = next(d for d in got if d.message_id == ids[0])

        assert await s.queue.ack([acked]) == []
        await s.lapse(s.queue, got)

        other = await s.open()
        for label in ("b", "c"):
            await s.nothing_for(other, s.consumer(label), {ids[0]})
        assert await s.queue.len() == 1, "the acked message is still counted by len"

    @conformance("P10")
    async def test_acking_an_already_completed_delivery_reports_it_and_changes_nothing_else(
        self, s: Scenario
    ) -> None:
        """A second ack reports the delivery; a batch with a duplicate completes it once."""
        await s.add([b"one", b"two"])
        first, second = await s.receive_n(s.queue, s.consumer("a"), 2)

        assert await s.queue.ack([first]) == []
        assert await s.queue.ack([first]) == [first], "a second ack was not reported"
        assert await s.queue.len() == 1, "a repeated ack changed len"
        assert await s.queue.heartbeat([second]) == [], "a repeated ack disturbed another lease"

        reported = await s.queue.ack([second, second])
        # Whether the copy in the same batch counts as "already completed" is the
        # backend's choice; completing it twice or reporting both copies is not.
        assert reported in ([], [second]), f"ack([d, d]) reported {reported}"
        assert await s.queue.len() == 0
        assert await s.queue.ack([second]) == [second]
        assert (await s.queue.stats()).dead == 0, "a repeated ack dead-lettered something"

    @conformance("P11")
    async def test_forged_or_foreign_deliveries_are_reported_lost_and_change_nothing(
        self, s: Scenario
    ) -> None:
        """Receipts naming another consumer, a future count, or another queue never act."""
        await s.add([b"mine"])
        owner = s.consumer("owner")
        (mine,) = await s.receive_n(s.queue, owner, 1)
        foreign_namespace = s.other_namespace()
        foreign_queue = await s.open(foreign_namespace)
        await s.add([b"theirs"], foreign_queue)
        (foreign,) = await s.receive_n(foreign_queue, s.consumer("foreigner"), 1)
        forged = [
            forge(mine, consumer=s.consumer("intruder")),
            forge(mine, count=mine.delivery_count + 1),
            forge(foreign, consumer=s.consumer("intruder")),
        ]

        for delivery in forged:
            assert await s.queue.heartbeat([delivery]) == [delivery], f"heartbeat {delivery}"
            assert await s.queue.release([delivery]) == [delivery], f"release {delivery}"
            assert await s.queue.ack([delivery]) == [delivery], f"ack {delivery}"
            reported = await s.queue.dead_letter([delivery], reason="forged")
            assert reported == [delivery], f"dead_letter {delivery}"

        assert await s.queue.len() == 1
        assert (await s.queue.stats()).dead == 0
        assert await s.queue.heartbeat([mine]) == [], "the owner lost its lease to a forgery"
        assert await s.queue.ack([mine]) == []
        assert await foreign_queue.ack([foreign]) == [], "another queue's message was touched"

    @conformance("P11")
    async def test_delivery_with_a_malformed_message_id_is_reported_or_rejected(
        self, s: Scenario
    ) -> None:
        """An id the backend never issued is reported lost, or rejected (ValueError/TypeError)."""
        await s.add([b"real"])
        (real,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        bogus = Delivery(
            message_id="no such message \u2603",
            body=b"",
            delivery_count=1,
            receipt=Receipt(consumer=real.receipt.consumer, delivery_count=1),
        )

        for operation in (s.queue.heartbeat, s.queue.ack):
            try:
                reported = await operation([bogus])
            except (ValueError, TypeError):
                continue
            assert reported == [bogus], f"{operation.__name__} of a bogus id: {reported}"

        assert await s.queue.ack([real]) == []

    @conformance("P11")
    async def test_id_written_with_other_unicode_digits_is_not_the_message(
        self, s: Scenario
    ) -> None:
        """A copy of a current delivery whose id's digits are look-alikes is foreign.

        Full-width and Arabic-Indic digits are the same number to ``int()``, so a
        backend that parses ids with it could take ``"\uff11"`` for message ``"1"``.
        No such id was ever issued: every operation reports the copy lost (or refuses
        the call) and the real delivery is untouched.
        """
        await s.add([b"real"])
        (real,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        forged_ids = {
            real.message_id.translate({ord("0") + d: base + d for d in range(10)})
            for base in (0xFF10, 0x0660)
        } - {real.message_id}
        for forged_id in sorted(forged_ids):
            forged = Delivery(
                message_id=forged_id,
                body=real.body,
                delivery_count=real.delivery_count,
                receipt=real.receipt,
            )
            for name, operation in (
                ("heartbeat", s.queue.heartbeat),
                ("ack", s.queue.ack),
                ("release", s.queue.release),
            ):
                try:
                    reported = await operation([forged])
                except (ValueError, TypeError):
                    continue
                assert reported == [forged], (
                    f"{name} of a delivery with id {forged_id!r} (the real one is "
                    f"{real.message_id!r}) returned {reported}: it acted on the message"
                )
            try:
                dead = await s.queue.dead_letter([forged], reason="forged")
            except (ValueError, TypeError):
                dead = [forged]
            assert dead == [forged], f"dead_letter of id {forged_id!r} acted on the message"
            s.boundary()
        assert await s.queue.heartbeat([real]) == [], "the real delivery lost its lease"
        assert await s.queue.ack([real]) == []

    @conformance("P12")
    async def test_ack_with_a_stale_receipt_reports_the_delivery_lost_and_does_not_complete_the_message(  # noqa: E501 - reads as the contract sentence
        self, s: Scenario
    ) -> None:
        """A late ack after a reclaim is reported; the new owner still holds and completes it."""
        s.require_heartbeat()
        ids = await s.add([b"slow work"])
        (late,) = await s.receive_n(s.queue, s.consumer("slow"), 1)
        await s.lapse(s.queue, [late])
        other = await s.open()
        (taken,) = await s.reclaim_ids(other, s.consumer("fast"), set(ids))

        assert await s.queue.ack([late]) == [late], "a late ack was not reported"

        assert await s.queue.len() == 1, "the late ack completed the message"
        assert await other.heartbeat([taken]) == [], "the late ack took the lease from its owner"
        await s.nothing_for(s.queue, s.consumer("third"), set(ids))
        assert await other.ack([taken]) == []
        assert await s.queue.len() == 0
