"""Order and identity across independent handles (X32, X8).

Several worker processes add to one queue; each has its own handle. FIFO, when
claimed, is the order in which their adds completed, not each handle's own order;
message ids are unique across all of them and never come back, whatever happened to
the message that had one.
"""

from __future__ import annotations

from taskrunner.queue import Delivery, Queue

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["OrderingCases"]


def _ids(deliveries: list[Delivery]) -> list[str]:
    return [d.message_id for d in deliveries]


class OrderingCases(ConformanceBase):
    """X32, and X8 across handles."""

    @conformance("X32")
    async def test_fifo_order_is_the_order_adds_completed_across_independent_handles(
        self, s: Scenario
    ) -> None:
        """Adds alternate between two handles; a third receives them in that order.

        Single adds and batches alternate, a few received messages are acked midway and
        more adds follow: the one consumer still sees exactly the order of completion.
        """
        s.require_capability("ordering")
        left, right, reader = await s.open(), await s.open(), await s.open()
        order: list[str] = []

        async def alternate(rounds: int, tag: str) -> None:
            for i in range(rounds):
                order.extend(await s.add([f"{tag} left {i}".encode()], left))
                bodies = [f"{tag} right {i}{part}".encode() for part in "ab"]
                order.extend(await s.add(bodies, right))

        await alternate(4, "before")
        consumer = s.consumer("reader")
        got: list[Delivery] = []
        for size in (1, 2, 3):
            got += await reader.receive(
                consumer, max_messages=size, wait_seconds=0, lease_seconds=s.lease
            )
        assert _ids(got) == order[: len(got)], "not received in the order the adds completed"
        assert await reader.ack([got[0], got[2]]) == []

        await alternate(3, "after")
        got += await s.receive_n(reader, consumer, len(order) - len(got))

        assert _ids(got) == order, (
            "messages added through two handles were not received in the order the adds completed"
        )
        assert await reader.ack([d for i, d in enumerate(got) if i not in (0, 2)]) == []

    @conformance("X8")
    async def test_ids_are_never_issued_twice_across_handles_whatever_became_of_the_message(
        self, s: Scenario
    ) -> None:
        """Two handles add after acks, dead letters, a purge and retries: every id is new.

        Retried dead letters get ids that differ from their old ones and from every id
        issued before, twice over (a retried message dead-lettered and retried again).
        """
        one, two = s.queue, await s.open()
        issued: list[str] = []

        async def add(handle: Queue, tag: str, count: int) -> list[str]:
            ids = await s.add([f"{tag} {i}".encode() for i in range(count)], handle)
            reused = set(ids) & set(issued)
            assert not reused, f"{tag}: id(s) {sorted(reused)} were issued before"
            assert len(set(ids)) == count, f"{tag}: one add returned duplicate ids {ids}"
            issued.extend(ids)
            return ids

        await add(one, "first on one", 3)
        await add(two, "first on two", 3)
        consumer = s.consumer("a")
        held = await s.receive_n(one, consumer, 6)
        assert await one.ack(held[:2]) == []
        assert await two.dead_letter(held[2:4], reason="for the test") == []
        assert await one.release(held[4:5], delay_seconds=10 * s.lease) == []
        await add(two, "after ack and dead letter", 2)

        admin = two.admin
        if admin is None:
            assert await one.ack(held[5:]) == []
            await add(one, "after acking the rest", 2)
            return
        await admin.purge()
        await add(one, "after purge on one", 2)
        await add(two, "after purge on two", 2)

        letters = await admin.list_dead_letters()
        assert len(letters) == 2, f"2 messages were dead-lettered, {len(letters)} listed"
        retried = await admin.retry_dead_letters([d.message_id for d in letters])
        reused = set(retried) & set(issued)
        assert not reused, f"retried dead letters were given old id(s) {sorted(reused)}"
        issued.extend(retried)
        assert len(set(issued)) == len(issued), f"retry issued an id twice: {retried}"

        again = [d for d in await s.receive_n(two, consumer, 6) if d.message_id in set(retried)]
        assert len(again) == 2, "the retried dead letters were not delivered"
        assert await two.dead_letter(again, reason="again") == []
        letters = await admin.list_dead_letters()
        retried_twice = await admin.retry_dead_letters([d.message_id for d in letters])
        reused = set(retried_twice) & set(issued)
        assert not reused, f"a second retry gave old id(s) {sorted(reused)}"
        issued.extend(retried_twice)
        await add(one, "after the second retry", 2)
