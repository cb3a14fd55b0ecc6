"""Counts, dead letters, unreadable entries, vanished payloads, bad arguments (P26-P30, X2)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from taskrunner.queue import Delivery

from ..harness import InjectsRaw, RemovesPayloads
from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["PoisonCases"]


class PoisonCases(ConformanceBase):
    """P26-P30 and X2."""

    @conformance("P26")
    async def test_dead_lettered_message_is_never_delivered_again_and_keeps_its_body_and_reason(
        self, s: Scenario
    ) -> None:
        """Dead-lettered at its third delivery (a runner's cap of 3): body, reason, count kept.

        The contract leaves the delivery cap to the runner, so this checks what the
        runner relies on: exact counts up to the cap and a dead letter that keeps
        everything.
        """
        body = b"poison \xff\x00"
        (message_id,) = await s.add([body])
        consumer = s.consumer("a")
        (delivery,) = await s.receive_n(s.queue, consumer, 1)
        for expected in (2, 3):
            assert await s.queue.release([delivery]) == []
            (delivery,) = [
                d
                for d in await s.collect(s.queue, consumer, {message_id})
                if d.message_id == message_id
            ]
            assert delivery.delivery_count == expected

        reason = "too many deliveries (3)"
        assert await s.queue.dead_letter([delivery], reason=reason) == []

        assert await s.queue.len() == 0
        assert (await s.queue.stats()).dead == 1
        await s.lapse(s.queue, [delivery])
        await s.nothing_for(s.queue, s.consumer("b"), {message_id})
        assert await s.queue.ack([delivery]) == [delivery], "a dead-lettered message was acked"
        if s.queue.admin is not None:
            (dead,) = await s.queue.admin.list_dead_letters()
            assert dead.original_id == message_id
            assert dead.body == body, "the dead letter lost its body"
            assert dead.reason == reason, "the dead letter lost its reason"
            assert dead.delivery_count == 3, f"dead letter count {dead.delivery_count}"

    @conformance("P27")
    async def test_delivery_count_is_one_first_and_rises_by_one_on_each_reclaim_or_release(
        self, s: Scenario
    ) -> None:
        """Counts 1, 2, 3, 4 through release, reclaim and a delayed release."""
        (message_id,) = await s.add([b"counted"])
        consumer = s.consumer("a")
        (delivery,) = await s.receive_n(s.queue, consumer, 1)
        counts = [delivery.delivery_count]

        assert await s.queue.release([delivery]) == []
        (delivery,) = await s.collect(s.queue, consumer, {message_id})
        counts.append(delivery.delivery_count)
        if s.requires_heartbeat:
            await s.lapse(s.queue, [delivery])
            (delivery,) = await s.reclaim_ids(s.queue, s.consumer("b"), {message_id})
            counts.append(delivery.delivery_count)
        assert await s.queue.release([delivery], delay_seconds=s.lease / 4) == []
        await s.advance(s.lease / 4 + s.margin)
        (delivery,) = await s.collect(s.queue, consumer, {message_id})
        counts.append(delivery.delivery_count)

        assert counts == list(range(1, len(counts) + 1)), f"delivery counts went {counts}"
        assert await s.queue.ack([delivery]) == []

    @conformance("P28")
    async def test_unreadable_entry_never_breaks_receive_and_is_delivered_or_dead_lettered(
        self, s: Scenario
    ) -> None:
        """An entry injected behind add's back is skipped or dead-lettered; neighbours flow."""
        s.require_hook(InjectsRaw, "inject_raw")
        assert isinstance(s.harness, InjectsRaw)
        valid: dict[str, bytes] = {}
        valid.update(zip(await s.add([b"before"]), [b"before"], strict=True))
        await s.harness.inject_raw(s.queue)
        valid.update(zip(await s.add([b"after"]), [b"after"], strict=True))
        consumer = s.consumer("a")

        seen: set[str] = set()
        strangers: list[Delivery] = []
        waited = False
        deadline = time.monotonic() + 5 * s.grace
        while not (valid.keys() <= seen and await s.queue.len() == 0):
            assert time.monotonic() < deadline, (
                f"valid delivered: {sorted(seen & valid.keys())}, len {await s.queue.len()}"
            )
            got = await s.queue.receive(
                consumer, max_messages=10, wait_seconds=0, lease_seconds=s.lease
            )
            if s.requires_heartbeat:
                got += await s.queue.reclaim(consumer, lease_seconds=s.lease, max_messages=10)
            for delivery in got:
                assert isinstance(delivery.body, bytes), "a delivery without a bytes body"
                if delivery.message_id in valid:
                    assert delivery.body == valid[delivery.message_id]
                    seen.add(delivery.message_id)
                else:
                    strangers.append(delivery)
            if got:
                assert await s.queue.ack(got) == []
            elif s.requires_heartbeat and not waited:
                # The entry may sit leased to nobody readable; let any lease on it lapse.
                await s.advance(s.lapse_age)
                waited = True
            else:
                await s.pause()

        dead = (await s.queue.stats()).dead
        assert len(strangers) + dead == 1, (
            f"the unreadable entry was delivered {len(strangers)} time(s) and dead-lettered "
            f"{dead} time(s); expected exactly one of the two"
        )
        if dead and s.queue.admin is not None:
            (letter,) = await s.queue.admin.list_dead_letters()
            assert letter.reason, "the unreadable entry was dead-lettered without a reason"

    @conformance("P29")
    async def test_message_whose_payload_vanished_is_reported_lost_and_dead_lettered_never_redelivered(  # noqa: E501 - reads as the property
        self, s: Scenario
    ) -> None:
        """Heartbeats report it; it is never delivered again; it ends as a dead letter.

        An ack with a current receipt may either complete such a message (nothing is
        left to redo) or report it: the contract leaves that open. Otherwise it is
        dead-lettered with a reason (by the heartbeat that found it gone, or by a later
        reclaim), and `len` stops counting it (whether at once or only once it is a dead
        letter is the backend's choice; being dead-lettered is not).
        """
        s.require_hook(RemovesPayloads, "remove_payload")
        assert isinstance(s.harness, RemovesPayloads)
        ids = await s.add([b"keep", b"gone: heartbeat", b"gone: ack", b"gone: reclaim"])
        held = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), 4)}
        keep, beaten, acked, lapsed = (held[i] for i in ids)
        gone_ids = set(ids[1:])
        # Age before removing: a backend may need the payload to move the lease.
        await s.lapse(s.queue, [lapsed])
        for delivery in (beaten, acked, lapsed):
            await s.harness.remove_payload(s.queue, delivery)

        assert await s.queue.heartbeat([keep, beaten]) == [beaten], (
            "a heartbeat of a message whose payload is gone was not reported"
        )
        ack_result = await s.queue.ack([acked])
        assert ack_result in ([], [acked]), f"ack of a vanished message returned {ack_result}"
        assert await s.queue.ack([keep]) == []

        # Drive receive and reclaim until the vanished messages are dead letters. Not
        # "until len is 0": a backend whose len stops counting them at once has still
        # to dead-letter them, and the failure must say which of the two is missing.
        expected_dead = len(gone_ids) - (1 if ack_result == [] else 0)
        reclaimer = s.consumer("b")
        waited = False
        calls = 0
        deadline = time.monotonic() + 5 * s.grace
        while True:
            dead = (await s.queue.stats()).dead
            counted = await s.queue.len()
            if dead >= expected_dead and counted == 0:
                break
            assert time.monotonic() < deadline, (
                f"after {calls} rounds of receive and reclaim (and one lapse): {dead} of "
                f"{expected_dead} vanished message(s) are dead letters, and len counts "
                f"{counted} (it should count none: the one with a payload was acked)"
            )
            got = await s.queue.receive(
                reclaimer, max_messages=10, wait_seconds=0, lease_seconds=s.lease
            )
            if s.requires_heartbeat:
                got += await s.queue.reclaim(reclaimer, lease_seconds=s.lease, max_messages=10)
            returned = {d.message_id for d in got} & gone_ids
            assert not returned, f"message(s) {sorted(returned)} came back without a payload"
            calls += 1
            if calls >= 20 and not waited:
                await s.advance(s.lapse_age)
                waited = True
            else:
                await s.pause()

        stats = await s.queue.stats()
        assert stats.dead == expected_dead, (
            f"stats.dead is {stats.dead}; exactly {expected_dead} vanished message(s) should "
            "be dead letters"
        )
        if s.queue.admin is not None:
            letters = await s.queue.admin.list_dead_letters()
            assert {d.original_id for d in letters} <= gone_ids
            assert all(d.reason for d in letters), "dead-lettered without a reason"

    @conformance("P30")
    async def test_invalid_arguments_raise_value_error_or_type_error_before_anything_changes(
        self, s: Scenario
    ) -> None:
        """Non-bytes bodies, batch sizes below 1, NaN, infinite and negative durations."""
        queue = s.queue
        consumer = s.consumer("a")

        for bad in ("text", bytearray(b"mutable"), None):
            try:
                await queue.add([b"valid", bad])  # type: ignore[list-item]
            except TypeError:
                pass
            else:
                raise AssertionError(f"add accepted a {type(bad).__name__} body")
        assert await queue.len() == 0, "a rejected add added the valid bodies before it"

        await s.add([b"only"])

        def receive(**bad: float) -> Callable[[], Awaitable[object]]:
            arguments = {"max_messages": 1, "wait_seconds": 0.0, "lease_seconds": s.lease, **bad}
            return lambda: queue.receive(consumer, **arguments)  # type: ignore[arg-type]

        def reclaim(**bad: float) -> Callable[[], Awaitable[object]]:
            arguments = {"max_messages": 1, "lease_seconds": s.lease, **bad}
            return lambda: queue.reclaim(consumer, **arguments)  # type: ignore[arg-type]

        nan, inf = float("nan"), float("inf")
        rejected: dict[str, Callable[[], Awaitable[object]]] = {
            "receive(max_messages=0)": receive(max_messages=0),
            "reclaim(max_messages=0)": reclaim(max_messages=0),
        }
        for value in (-1.0, nan, inf, -inf):
            rejected[f"receive(wait_seconds={value})"] = receive(wait_seconds=value)
        for value in (0.0, -1.0, nan, inf, -inf):
            rejected[f"receive(lease_seconds={value})"] = receive(lease_seconds=value)
            rejected[f"reclaim(lease_seconds={value})"] = reclaim(lease_seconds=value)
        for name, call in rejected.items():
            try:
                await call()
            except ValueError:
                continue
            raise AssertionError(f"{name} did not raise ValueError")
        assert (await queue.stats()).in_flight == 0, "a rejected receive leased the message"
        (held,) = await s.receive_n(queue, consumer, 1)
        for value in (-1.0, -0.001, nan, inf, -inf):
            try:
                await queue.release([held], delay_seconds=value)
            except ValueError:
                pass
            else:
                raise AssertionError(f"release(delay_seconds={value}) did not raise ValueError")
        assert await queue.heartbeat([held]) == [], "a rejected release gave the message back"
        assert await queue.len() == 1
        assert await queue.ack([held]) == []

    @conformance("X2")
    async def test_dead_letters_are_listed_oldest_first_and_retried_or_purged_exactly_once(
        self, s: Scenario
    ) -> None:
        """list_dead_letters, retry_dead_letters and purge_dead_letters of QueueAdmin."""
        admin = s.require_admin()
        bodies = [b"d0", b"d1", b"d2"]
        ids = await s.add(bodies)
        held = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), 3)}
        for index, message_id in enumerate(ids):
            assert await s.queue.dead_letter([held[message_id]], reason=f"r{index}") == []

        letters = await admin.list_dead_letters(limit=10)
        assert [d.original_id for d in letters] == ids, "dead letters not oldest first"
        assert [d.reason for d in letters] == ["r0", "r1", "r2"]
        assert [d.body for d in letters] == bodies
        assert [d.original_id for d in await admin.list_dead_letters(limit=2)] == ids[:2]

        (new_id,) = await admin.retry_dead_letters([letters[0].message_id])
        assert await admin.retry_dead_letters([letters[0].message_id]) == [], "retried twice"
        assert (await s.queue.stats()).dead == 2
        (again,) = await s.receive_n(s.queue, s.consumer("b"), 1)
        assert (again.message_id, again.body, again.delivery_count) == (new_id, b"d0", 1)
        assert await admin.purge_dead_letters([letters[1].message_id]) == 1
        assert await admin.purge_dead_letters([letters[1].message_id]) == 0
        assert len(await admin.retry_dead_letters()) == 1
        assert await admin.purge_dead_letters() == 0
        assert (await s.queue.stats()).dead == 0
        assert await s.queue.len() == 2
