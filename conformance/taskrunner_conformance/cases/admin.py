"""The admin protocol, `QueueAdmin`, at its edges (X35-X38).

Purge with messages in every state, retry and purge of dead letters with unknown ids
mixed in, the listing's order, limits and fields, and delete_queue followed by reuse.
Each case goes through a second handle where it can, as an operator's tool would.
"""

from __future__ import annotations

from taskrunner.queue import Delivery, QueueStats, WorkerInfo

from ..scenario import ConformanceBase, Scenario, conformance
from .dead_letters import (
    LIST_ALL,
    require_dead_letter_reader,
    wall_time,
    wall_tolerance,
)

__all__ = ["AdminCases"]


def _counts(stats: QueueStats) -> tuple[int, int, int, int]:
    return (stats.ready, stats.delayed, stats.in_flight, stats.dead)


async def _redeliver(s: Scenario, delivery: Delivery) -> Delivery:
    """Release `delivery` and receive its message again (count + 1), as the same consumer."""
    assert await s.queue.release([delivery]) == []
    consumer = delivery.receipt.consumer
    got = await s.collect(s.queue, consumer, {delivery.message_id})
    (again,) = [d for d in got if d.message_id == delivery.message_id]
    return again


class AdminCases(ConformanceBase):
    """X35-X38."""

    @conformance("X35")
    async def test_purge_deletes_ready_delayed_and_in_flight_messages_and_keeps_dead_letters(
        self, s: Scenario
    ) -> None:
        """Purge counts and deletes every live message; their receipts report lost for good.

        Two ready, two delayed (one due soon), one live and one lapsed lease, one dead
        letter: purge through another handle returns 6, the dead letter stays, no receipt
        of a purged lease acts on anything, and the delayed messages never come back.
        """
        admin = s.require_admin()
        other = await s.open()
        other_admin = s.require_admin(other)
        assert await admin.purge() == 0, "purge of an empty queue did not return 0"
        ids = await s.add([f"m{i}".encode() for i in range(7)])
        held = await s.receive_n(s.queue, s.consumer("a"), 5)
        dead, soon, later, live, lapsed = held
        assert await s.queue.dead_letter([dead], reason="stays dead") == []
        if s.requires_heartbeat:
            await s.lapse(s.queue, [lapsed])
            # On a fake clock every lease aged: make this one live again.
            assert await s.queue.heartbeat([live]) == []
        short = s.lease / 4
        assert await s.queue.release([soon], delay_seconds=short) == []
        assert await s.queue.release([later], delay_seconds=10 * s.lease) == []
        assert await other.len() == 6, "len before the purge"

        purged = await other_admin.purge()

        assert purged == 6, (
            f"purge() returned {purged}; 2 ready, 2 delayed and 2 in-flight messages were purged"
        )
        assert await s.queue.len() == 0, "len after purge"
        assert _counts(await s.queue.stats()) == (0, 0, 0, 1), "after purge"
        letters = await admin.list_dead_letters()
        assert [(d.original_id, d.reason) for d in letters] == [(dead.message_id, "stays dead")], (
            "purge touched the dead letters"
        )
        purged_leases = [live, lapsed]
        assert await s.queue.heartbeat(purged_leases) == purged_leases, "heartbeat after purge"
        assert await s.queue.release(purged_leases) == purged_leases, "release after purge"
        assert await s.queue.dead_letter(purged_leases, reason="late") == purged_leases, (
            "dead_letter after purge"
        )
        assert await s.queue.ack(purged_leases) == purged_leases, "ack after purge"
        assert _counts(await other.stats()) == (0, 0, 0, 1), "a purged receipt acted"

        fresh = s.consumer("b")
        await s.nothing_for(other, fresh, set(ids))
        await s.advance(short + s.margin)
        await s.nothing_for(other, fresh, set(ids))
        if s.time_mode == "clock":
            await s.advance(10 * s.lease)
            await s.nothing_for(other, fresh, set(ids))
        assert _counts(await other.stats()) == (0, 0, 0, 1), "a purged delayed message came back"
        assert await other_admin.purge() == 0, "a second purge found messages"

        new = await s.add([b"after purge"], other)
        (got,) = await s.receive_n(s.queue, fresh, 1)
        assert (got.message_id, got.body, got.delivery_count) == (new[0], b"after purge", 1)
        assert got.message_id not in ids, "purge let an old id be issued again"
        assert await s.queue.ack([got]) == []

    @conformance("X36")
    async def test_retried_dead_letters_return_as_new_messages_and_unknown_ids_are_skipped(
        self, s: Scenario
    ) -> None:
        """A retry adds each dead letter back with a new id, count 1 and its body, once.

        Retry and purge of unknown ids (never issued, or already purged) skip them; a
        receipt from before the message died never fits its retried copy, even held by
        the same consumer; retry of everything moves only what is left.
        """
        admin = s.require_admin()
        other_admin = s.require_admin(await s.open())
        bodies = [b"retry me \x00\xff", b"", b"stays dead", b"retried with all", b"purged"]
        ids = await s.add(bodies)
        issued = set(ids)
        consumer = s.consumer("a")
        held = {d.message_id: d for d in await s.receive_n(s.queue, consumer, len(ids))}
        first_of_empty = held[ids[1]]
        # Dead at its second delivery, so count 1 after the retry is a reset.
        held[ids[0]] = await _redeliver(s, held[ids[0]])
        for index, message_id in enumerate(ids):
            assert await s.queue.dead_letter([held[message_id]], reason=f"reason {index}") == []
        by_original = {d.original_id: d for d in await admin.list_dead_letters(limit=LIST_ALL)}
        assert set(by_original) == issued, "not every dead-lettered message is listed"
        letter = [by_original[i].message_id for i in ids]
        assert await admin.purge_dead_letters([letter[4]]) == 1, "purge of one dead letter"

        new = await other_admin.retry_dead_letters(
            [letter[0], "no-such-dead-letter", letter[4], letter[1]]
        )

        assert len(new) == 2, (
            f"retry of 2 dead letters and 2 unknown ids returned {len(new)} new id(s)"
        )
        assert not set(new) & issued, f"retried messages got old id(s) {sorted(set(new) & issued)}"
        assert len(set(new)) == 2, f"retry gave two messages one id: {new}"
        issued |= set(new)
        assert (await s.queue.stats()).dead == 2
        assert await s.queue.len() == 2, "len after retrying 2 dead letters"
        left = [d.original_id for d in await admin.list_dead_letters()]
        assert left == [ids[2], ids[3]], "retried dead letters stayed in the store"

        retried = await s.receive_n(s.queue, consumer, 2)
        assert sorted(d.message_id for d in retried) == sorted(new), (
            "the retried messages were not delivered under their new ids"
        )
        assert {d.body for d in retried} == {bodies[0], bodies[1]}, "retry changed a body"
        for delivery in retried:
            assert (delivery.delivery_count, delivery.receipt.delivery_count) == (1, 1), (
                f"a retried message came back with delivery count {delivery.delivery_count}"
            )
        assert await s.queue.ack([first_of_empty]) == [first_of_empty], (
            "the receipt of a message's first delivery completed its retried copy"
        )
        assert await s.queue.heartbeat(retried) == [], "the retried messages lost their leases"

        assert await admin.retry_dead_letters([letter[0], letter[1]]) == [], "retried twice"
        assert await admin.purge_dead_letters([letter[0], "no-such-dead-letter"]) == 0
        everything = await other_admin.retry_dead_letters()
        assert len(everything) == 2, f"retry of all 2 dead letters returned {everything}"
        assert not set(everything) & issued, "retry of all reused an id"
        assert (await s.queue.stats()).dead == 0
        assert await admin.list_dead_letters() == [], "retry of all left dead letters"
        assert await admin.purge_dead_letters() == 0, "purge of an empty dead-letter store"

        last = await s.receive_n(s.queue, s.consumer("b"), 2)
        assert sorted(d.message_id for d in last) == sorted(everything), (
            "retry of all: the messages were not delivered under their new ids"
        )
        assert {d.body for d in last} == {bodies[2], bodies[3]}
        assert all(d.delivery_count == 1 for d in last), "retry of all: delivery count not 1"
        assert await s.queue.ack(retried + last) == []
        assert await s.queue.len() == 0, "len after acking every retried message"

    @conformance("X37")
    async def test_dead_letters_are_listed_oldest_first_with_every_field_as_it_was(
        self, s: Scenario
    ) -> None:
        """Order of death (not of adding), bodies, reasons, counts, times and the limits.

        Three messages die in the order third, first, second, at their first, second
        and third delivery. With `QueueAdmin`, the limit cuts the oldest, and the default
        limit is 100: the 101st dead letter is left out of the default listing.
        """
        read = require_dead_letter_reader(s, await s.open())
        bodies = [b"added first \x00", b"added second \xff", b"added third"]
        first, second, third = ids = await s.add(bodies)
        consumer = s.consumer("a")
        held = {d.message_id: d for d in await s.receive_n(s.queue, consumer, 3)}
        expected: list[tuple[str, bytes, str, int, float, float]] = []

        async def bury(delivery: Delivery, reason: str) -> None:
            before = wall_time(s)
            assert await s.queue.dead_letter([delivery], reason=reason) == []
            after = wall_time(s)
            body = bodies[ids.index(delivery.message_id)]
            expected.append(
                (delivery.message_id, body, reason, delivery.delivery_count, before, after)
            )

        await bury(held[third], "third added, first to die, at delivery 1")
        again = await _redeliver(s, held[first])
        twice = await _redeliver(s, await _redeliver(s, held[second]))
        # Time passes between the deaths, so a dead_at taken when listing shows.
        await s.advance(s.live_age / 4)
        await bury(again, "first added, second to die, at delivery 2")
        await s.advance(s.live_age / 4)
        await bury(twice, "second added, last to die, at delivery 3")

        letters = await read()

        assert [d.original_id for d in letters] == [third, first, second], (
            "dead letters are not listed oldest first"
        )
        tolerance = wall_tolerance(s)
        for letter, (original, body, reason, count, before, after) in zip(
            letters, expected, strict=True
        ):
            assert letter.body == body, f"the dead letter of {original} lost its body"
            assert letter.reason == reason, f"the dead letter of {original} lost its reason"
            assert letter.delivery_count == count, (
                f"the dead letter of {original} has delivery count {letter.delivery_count}; "
                f"it died at delivery {count}"
            )
            assert before - tolerance <= letter.dead_at <= after + tolerance, (
                f"dead_at {letter.dead_at} is not the wall-clock time it died "
                f"(between {before} and {after})"
            )
        stamps = [d.dead_at for d in letters]
        assert stamps == sorted(stamps), f"dead_at goes backwards: {stamps}"
        handles = [d.message_id for d in letters]
        assert all(handles), f"a dead letter without an id: {handles}"
        assert len(set(handles)) == 3, f"dead letters share ids: {handles}"

        admin = s.queue.admin
        if admin is None:
            return  # Limits are QueueAdmin's; the hook lists everything.
        assert await admin.list_dead_letters(limit=1) == letters[:1], "limit=1"
        assert await admin.list_dead_letters(limit=2) == letters[:2], "limit=2"
        bulk = await s.add([f"bulk {i}".encode() for i in range(97)])
        buried = await s.receive_n(s.queue, consumer, len(bulk), batch=100)
        assert await s.queue.dead_letter(buried, reason="bulk") == []
        (newest_id,) = await s.add([b"the 101st"])
        newest = await s.receive_n(s.queue, consumer, 1)
        assert await s.queue.dead_letter(newest, reason="the 101st") == []

        default = await admin.list_dead_letters()

        assert len(default) == 100, f"list_dead_letters() returned {len(default)} of 101"
        assert default[:3] == letters, "the default listing does not start with the oldest"
        assert newest_id not in {d.original_id for d in default}, (
            "the default listing holds the newest dead letter: not the oldest 100"
        )
        everything = await admin.list_dead_letters(limit=101)
        assert everything[:100] == default, "limit=101 and the default listing disagree"
        assert [d.original_id for d in everything[100:]] == [newest_id], (
            "limit=101 does not end with the newest dead letter"
        )

    @conformance("X38")
    async def test_delete_queue_removes_everything_and_a_reused_queue_starts_empty(
        self, s: Scenario
    ) -> None:
        """Messages in every state, dead letters, consumers and workers go; reuse is clean.

        Deleting twice is fine; afterwards another handle sees an empty queue, receipts
        report lost (also once the same consumer leases a message of the new queue), a
        delayed message never comes back, and new messages flow.
        """
        admin = s.require_admin()
        other = await s.open()
        other_admin = s.require_admin(other)
        ids = await s.add([f"m{i}".encode() for i in range(5)])
        consumer = s.consumer("a")
        dead, delayed, held = await s.receive_n(s.queue, consumer, 3)
        assert await s.queue.dead_letter([dead], reason="deleted with the queue") == []
        short = s.lease / 4
        assert await s.queue.release([delayed], delay_seconds=short) == []
        registry = s.queue.worker_registry
        if registry is not None:
            info = WorkerInfo(instance="w1", workers=1, busy=0, average_seconds=None, seen_at=0.0)
            await registry.publish_worker(info, ttl_seconds=10 * s.lease)

        await admin.delete_queue()
        await admin.delete_queue()

        assert await other.len() == 0, "len after delete_queue"
        stats = await other.stats()
        assert _counts(stats) == (0, 0, 0, 0), f"after delete_queue: {stats}"
        assert stats.consumers == (), f"consumers survived delete_queue: {stats.consumers}"
        assert await other_admin.list_dead_letters() == [], "dead letters survived delete_queue"
        other_registry = other.worker_registry
        if other_registry is not None:
            assert await other_registry.live_workers() == [], "workers survived delete_queue"
        assert await s.queue.heartbeat([held]) == [held], "heartbeat after delete_queue"
        fresh = s.consumer("b")
        await s.advance(short + s.margin)
        await s.nothing_for(other, fresh, set(ids))

        new = await s.add([b"after delete"], other)
        (got,) = await s.receive_n(other, consumer, 1)
        assert (got.message_id, got.body, got.delivery_count) == (new[0], b"after delete", 1)
        assert await s.queue.ack([held]) == [held], (
            "a receipt from before delete_queue completed a message of the new queue"
        )
        assert await other.heartbeat([got]) == [], "the new message lost its lease"
        assert await other.ack([got]) == []
        assert await other.len() == 0, "len of the reused queue after its one ack"
        assert await other_admin.purge() == 0, "purge of the reused, empty queue"
