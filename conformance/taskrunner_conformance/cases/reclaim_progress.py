"""Reclaim progress: a lapsed message is reached wherever it sits, in bounded calls (X26).

The contract: "Successive calls make progress through the whole set of in-flight
messages, so lapsed messages behind many live ones are found." The suite holds
`IN_FLIGHT` messages, lets exactly one lapse (the oldest, the newest, or one in the
middle) and counts the reclaim calls of `MAX_MESSAGES` each until it comes back. The
bound, `reclaim_call_bound`, is ``2 * ceil(in_flight / max_messages) + 2`` calls: a
backend that scans at least ``max_messages`` in-flight messages per call from a kept
cursor needs one pass, ``ceil(in_flight / max_messages)`` calls, plus one more pass
when its cursor starts past the message; the rest is margin. (The Redis backend scans
up to 2000 pending entries per call, the SQLite example selects lapsed rows directly:
both need one or two calls here.) A backend that looks only at a fixed window at the
front or the back of its in-flight set, or whose cursor never starts over at the
oldest, never finds some of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from taskrunner.queue import Delivery, Queue

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["IN_FLIGHT", "MAX_MESSAGES", "ReclaimProgressCases", "reclaim_call_bound"]

# Messages held in flight; fixed (not scaled by the effort setting) so the verdict is too.
IN_FLIGHT = 120
# max_messages of each reclaim call: small, so one call cannot cover the set by itself.
MAX_MESSAGES = 4
# Messages per heartbeat call when keeping the others live.
HEARTBEAT_BATCH = 100


def reclaim_call_bound(in_flight: int, max_messages: int) -> int:
    """Reclaim calls allowed to reach one lapsed message among `in_flight`."""
    return 2 * math.ceil(in_flight / max_messages) + 2


async def _hold_in_add_order(s: Scenario) -> list[Delivery]:
    ids = await s.add([f"in flight {i}".encode() for i in range(IN_FLIGHT)])
    held = await s.receive_n(s.queue, s.consumer("busy"), IN_FLIGHT, batch=HEARTBEAT_BATCH)
    order = {message_id: index for index, message_id in enumerate(ids)}
    held.sort(key=lambda d: order[d.message_id])
    return held


async def _lapse_only(
    s: Scenario, target: Delivery, live: Sequence[tuple[Queue, Delivery]]
) -> None:
    """Let `target`'s lease lapse and keep every lease in `live` live."""
    if s.time_mode == "age":
        await s.age(s.queue, [target], s.lapse_age)
        return
    await s.lapse(s.queue, [target])  # every lease ages; heartbeat the others back
    by_handle: dict[int, tuple[Queue, list[Delivery]]] = {}
    for handle, delivery in live:
        by_handle.setdefault(id(handle), (handle, []))[1].append(delivery)
    for handle, deliveries in by_handle.values():
        for start in range(0, len(deliveries), HEARTBEAT_BATCH):
            chunk = deliveries[start : start + HEARTBEAT_BATCH]
            assert await handle.heartbeat(chunk) == [], "a live lease was lost"


async def _reach(
    s: Scenario,
    reclaimer: Queue,
    consumer: str,
    target: Delivery,
    where: str,
    *,
    max_messages: int = MAX_MESSAGES,
) -> Delivery:
    """Reclaim until `target`'s message comes back, within the bound; nothing else may."""
    in_flight = (await reclaimer.stats()).in_flight
    bound = reclaim_call_bound(in_flight, max_messages)
    for _ in range(bound):
        got = await reclaimer.reclaim(consumer, lease_seconds=s.lease, max_messages=max_messages)
        assert len(got) <= max_messages, f"reclaim(max_messages={max_messages}) returned {len(got)}"
        stolen = sorted(d.message_id for d in got if d.message_id != target.message_id)
        assert not stolen, f"reclaim took live message(s) {stolen[:5]}"
        if got:
            (taken,) = got
            assert taken.delivery_count == target.delivery_count + 1
            return taken
    raise AssertionError(
        f"{bound} reclaim calls of max_messages={max_messages} never reached the lapsed "
        f"message {where} among {in_flight} in flight "
        f"(bound: 2 * ceil({in_flight} / {max_messages}) + 2)"
    )


async def _reached_at(s: Scenario, index: int, where: str) -> None:
    s.require_heartbeat()
    held = await _hold_in_add_order(s)
    target = held[index]
    live = [(s.queue, d) for d in held if d is not target]
    await _lapse_only(s, target, live)
    reclaimer = await s.open()
    taken = await _reach(s, reclaimer, s.consumer("sweeper"), target, where)
    assert await reclaimer.ack([taken]) == []
    assert await s.queue.ack([d for _, d in live]) == []


class ReclaimProgressCases(ConformanceBase):
    """X26: reclaim reaches every position of the in-flight set within a stated bound."""

    @conformance("X26")
    async def test_reclaim_reaches_the_oldest_in_flight_message_when_only_it_lapsed(
        self, s: Scenario
    ) -> None:
        """The first of 120 in flight lapses: found within 2 * ceil(120 / 4) + 2 calls.

        Catches a reclaim that only ever looks at the newest in-flight messages.
        """
        await _reached_at(s, 0, "at the oldest position")

    @conformance("X26")
    async def test_reclaim_reaches_an_in_flight_message_in_the_middle_when_only_it_lapsed(
        self, s: Scenario
    ) -> None:
        """The 61st of 120 in flight lapses: found within 2 * ceil(120 / 4) + 2 calls.

        Catches a reclaim with a fixed window at either end of the in-flight set.
        """
        await _reached_at(s, IN_FLIGHT // 2, "in the middle")

    @conformance("X26")
    async def test_reclaim_reaches_the_newest_in_flight_message_when_only_it_lapsed(
        self, s: Scenario
    ) -> None:
        """The last of 120 in flight lapses: found within 2 * ceil(120 / 4) + 2 calls.

        Catches a reclaim that only ever looks at the oldest in-flight messages.
        """
        await _reached_at(s, IN_FLIGHT - 1, "at the newest position")

    @conformance("X26")
    async def test_reclaim_reaches_a_lapsed_message_its_cursor_has_already_passed(
        self, s: Scenario
    ) -> None:
        """One reclaimer finds the middle one, then the oldest, then the middle one's neighbour.

        Each within 2 * ceil(in_flight / 4) + 2 calls of the same handle, so a cursor
        that pages on but never starts over at the oldest fails the second search.
        """
        s.require_heartbeat()
        held = await _hold_in_add_order(s)
        reclaimer = await s.open()
        sweeper = s.consumer("sweeper")
        taken: list[Delivery] = []
        for index, where in (
            (IN_FLIGHT // 2, "in the middle"),
            (0, "at the oldest position, behind the cursor"),
            (IN_FLIGHT // 2 - 1, "just behind where the cursor first stopped"),
        ):
            target = held[index]
            moved = {d.message_id for d in taken}
            live = [(s.queue, d) for d in held if d is not target and d.message_id not in moved] + [
                (reclaimer, d) for d in taken
            ]
            await _lapse_only(s, target, live)
            taken.append(await _reach(s, reclaimer, sweeper, target, where, max_messages=1))
        moved = {d.message_id for d in taken}
        assert await reclaimer.ack(taken) == []
        assert await s.queue.ack([d for d in held if d.message_id not in moved]) == []
