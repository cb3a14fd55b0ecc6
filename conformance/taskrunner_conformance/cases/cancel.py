"""Cancellation of the Scheduling part: what cancel removes and what it refuses (X46, X47)."""

from __future__ import annotations

import asyncio

from taskrunner.queue import AddRequest, Delivery

from ..scenario import ConformanceBase, Scenario, conformance
from .fencing import queue_state
from .scheduling_calls import (
    added_id,
    held_by,
    ids_of,
    receive_all,
    reclaim_all,
    take_freed_key,
)

__all__ = ["CancelCases"]


class CancelCases(ConformanceBase):
    """X46, X47."""

    @conformance("X46")
    async def test_cancelled_message_is_never_delivered_and_its_unique_key_is_freed(
        self, s: Scenario
    ) -> None:
        """Ready, released-with-delay and (with delayed_add) delayed messages, cancelled together.

        Through another handle. None of them comes back by receive after every due time,
        nor by reclaim; a second cancel returns False; the key of a cancelled message is
        free at once; a message not named is untouched. The counts stay exact once
        receives have passed over cancelled entries, and with one cancelled behind a
        live message; a blocking receive passes over one cancelled ahead of a live one.
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
            delayed = await added_id(part, AddRequest(body=b"delayed", delay_seconds=delay))
            cancelled[delayed] = "a delayed message"
            due = await added_id(part, AddRequest(body=b"due", due_at=s.wall() + delay))
            cancelled[due] = "a message delayed with due_at"
        if s.capabilities.unique_add:
            keyed = await added_id(part, AddRequest(body=b"keyed", unique_key="cancel-me"))
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
            await take_freed_key(part, "cancel-me", keyed, "by cancel")
            (fresh,) = await s.receive_n(s.queue, s.consumer("b"), 1)
            assert fresh.body == b"takes the freed key"
            assert await s.queue.ack([fresh]) == []
        await s.advance(delay + s.margin)
        await s.nothing_for(s.queue, s.consumer("b"), set(ids))
        if s.requires_heartbeat:
            await s.advance(s.lapse_age)
            reclaimed = await reclaim_all(s.queue, s.consumer("c"), s.lease)
            assert [d.message_id for d in reclaimed] == [kept], (
                f"reclaim after the lease returned {ids_of(reclaimed)}, not only {kept}"
            )
            held[kept] = reclaimed[0]
        await s.nothing_for(s.queue, s.consumer("d"), set(ids))
        assert await s.queue.ack([held[kept]]) == [], "the untouched message was lost"
        assert await s.queue.len() == 0
        # Receives have passed over every cancelled entry by now. A blocking receive
        # passes over one cancelled ahead of a live message to return that one; with one
        # cancelled behind a live message, the counts stay exact.
        if s.capabilities.blocking_receive:
            ahead, next_one = await s.add([b"ahead", b"next"])
            assert await other_part.cancel([ahead]) == [True]
            got = await s.queue.receive(
                s.consumer("e"), max_messages=2, wait_seconds=s.margin, lease_seconds=s.lease
            )
            assert ids_of(got) == [next_one], (
                f"with the message ahead of it cancelled, receive returned {ids_of(got)}, "
                f"not {next_one}"
            )
            assert await s.queue.ack(got) == []
        later, behind = await s.add([b"later", b"behind"])
        assert await other_part.cancel([behind]) == [True]
        await _expect_counts(s, (1, 0, 0), "with one of two new messages cancelled")
        got = await s.queue.receive(
            s.consumer("e"), max_messages=2, wait_seconds=s.margin, lease_seconds=s.lease
        )
        assert ids_of(got) == [later], f"receive returned {ids_of(got)}, not only {later}"
        await _expect_counts(s, (0, 0, 1), "once the live one was received")
        assert await s.queue.ack(got) == []
        await _expect_counts(s, (0, 0, 0), "once it was acked")

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
        delivered += await receive_all(s.queue, s.consumer("rest"), s.lease)
        got = ids_of(delivered)
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

    @conformance("X47")
    async def test_refused_cancel_of_an_in_flight_message_keeps_its_unique_key_held(
        self, s: Scenario
    ) -> None:
        """A keyed message in flight (and, with lapsing leases, one lapsed) is not cancelled.

        Cancel returns False for both, through another handle, and each key still names
        its holder afterwards (also after the lapsed one is reclaimed); only the acks
        free the keys.
        """
        part = s.require_scheduling("cancel", "unique_add")
        other = s.require_scheduling("cancel", queue=await s.open())
        keys = ["in-flight"] + (["lapsed"] if s.requires_heartbeat else [])
        holders = {
            key: await added_id(part, AddRequest(body=key.encode(), unique_key=key)) for key in keys
        }
        got = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), len(keys))}
        if s.requires_heartbeat:
            await s.lapse(s.queue, [got[holders["lapsed"]]])
            assert await s.queue.heartbeat([got[holders["in-flight"]]]) == []

        flags = await other.cancel([holders[key] for key in keys])

        assert flags == [False] * len(keys), f"cancel of in-flight keyed messages returned {flags}"
        for key, holder in holders.items():
            await held_by(part, key, holder, f"after a refused cancel of its {key} message")
        if s.requires_heartbeat:
            lapsed = holders["lapsed"]
            (again,) = await s.reclaim_ids(s.queue, s.consumer("b"), {lapsed})
            got[lapsed] = again
            await held_by(part, "lapsed", lapsed, "after its reclaim, the cancel refused")
        assert await s.queue.ack(list(got.values())) == [], "a refused cancel cost a lease"
        for key, holder in holders.items():
            await take_freed_key(part, key, holder, "by the ack after a refused cancel")
        s.boundary(len(keys))


async def _expect_counts(s: Scenario, expected: tuple[int, int, int], when: str) -> None:
    stats = await s.queue.stats()
    got = (stats.ready, stats.delayed, stats.in_flight)
    assert got == expected, f"{when}, ready/delayed/in flight = {got}, not {expected}"
