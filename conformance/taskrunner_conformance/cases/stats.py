"""`QueueStats` classifies every message and dates the oldest ones (X39).

Operators size workers and raise alerts from these numbers, so a message counted in
the wrong field misleads as much as a lost one. The cases build a queue with messages
in every state at once, with different counts per state so that two swapped fields
cannot pass, and move time to the edges that change a message's class: a release
without delay, a delay running out, a lease lapsing without a reclaim.
"""

from __future__ import annotations

from taskrunner.queue import QueueStats

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["StatsCases"]


def _counts(stats: QueueStats) -> dict[str, int]:
    return {
        "ready": stats.ready,
        "delayed": stats.delayed,
        "in_flight": stats.in_flight,
        "dead": stats.dead,
    }


class StatsCases(ConformanceBase):
    """X39."""

    @conformance("X39")
    async def test_stats_tell_ready_delayed_in_flight_and_dead_messages_apart(
        self, s: Scenario
    ) -> None:
        """All four states at once, in different numbers, read through another handle.

        A message released without delay is ready; one whose delay ran out is ready
        before any receive touched it; a lapsed lease nobody reclaimed is in flight.
        """
        other = await s.open()
        await s.add([f"m{i}".encode() for i in range(12)])
        consumer = s.consumer("a")
        held = await s.receive_n(s.queue, consumer, 8)
        assert await s.queue.dead_letter(held[:1], reason="dead") == []
        assert await s.queue.release(held[1:2]) == []
        assert await s.queue.release(held[2:4], delay_seconds=10 * s.lease) == []
        leased = held[4:]
        if s.requires_heartbeat:
            await s.lapse(s.queue, leased[:1])

        stats = await other.stats()

        assert _counts(stats) == {"ready": 5, "delayed": 2, "in_flight": 4, "dead": 1}, (
            "4 never delivered + 1 released without delay are ready, 2 released with a long "
            "delay are delayed, 4 are leased (one of them lapsed, not reclaimed), 1 is dead; "
            f"stats say {_counts(stats)}"
        )
        assert await other.len() == 11, "len: ready, delayed and in flight"

        short = s.lease / 4
        assert await s.queue.release(leased[1:2], delay_seconds=short) == []
        await s.advance(short + s.margin)
        stats = await other.stats()
        assert _counts(stats) == {"ready": 6, "delayed": 2, "in_flight": 3, "dead": 1}, (
            "a released message whose delay is over is ready, even before a receive: "
            f"stats say {_counts(stats)}"
        )
        await s.receive_n(other, s.consumer("b"), 6)
        stats = await s.queue.stats()
        assert _counts(stats) == {"ready": 0, "delayed": 2, "in_flight": 9, "dead": 1}, (
            f"after receiving every ready message: {_counts(stats)}"
        )

    @conformance("X39")
    async def test_stats_ages_are_none_without_messages_and_follow_the_oldest_ones(
        self, s: Scenario
    ) -> None:
        """oldest_ready_age_seconds and oldest_in_flight_age_seconds against the test's clock.

        None when no message is in that state; otherwise within the window the test
        measured around the add, delivery or heartbeat that started the age, and around
        the stats call. A delivered message no longer counts as ready; a heartbeat
        restarts the idle time; a lapsed lease shows its full idle time.
        """
        other = await s.open()
        tolerance = s.precision + (1e-9 if s.time_mode == "clock" else 0.002)

        def within(value: float | None, low: float, high: float, what: str) -> None:
            assert value is not None, f"{what} is None"
            assert low - tolerance <= value <= high + tolerance, (
                f"{what} is {value:.3f}s; the test measured {low:.3f}s to {high:.3f}s"
            )

        empty = await other.stats()
        assert empty.oldest_ready_age_seconds is None, "oldest_ready_age_seconds of an empty queue"
        assert empty.oldest_in_flight_age_seconds is None, (
            "oldest_in_flight_age_seconds of an empty queue"
        )
        step = s.live_age / 2

        added = s.now()
        await s.add([b"first"])
        added_end = s.now()
        await s.advance(step)
        asked = s.now()
        stats = await other.stats()
        answered = s.now()
        within(
            stats.oldest_ready_age_seconds,
            asked - added_end,
            answered - added,
            "oldest_ready_age_seconds of the one message",
        )
        assert stats.oldest_in_flight_age_seconds is None, (
            f"oldest_in_flight_age_seconds is {stats.oldest_in_flight_age_seconds} "
            "with nothing in flight"
        )

        leased = s.now()
        (held,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        leased_end = s.now()
        second = s.now()
        await s.add([b"second"])
        second_end = s.now()
        await s.advance(step)
        asked = s.now()
        stats = await other.stats()
        answered = s.now()
        within(
            stats.oldest_ready_age_seconds,
            asked - second_end,
            answered - second,
            "oldest_ready_age_seconds once the older message is in flight",
        )
        within(
            stats.oldest_in_flight_age_seconds,
            asked - leased_end,
            answered - leased,
            "oldest_in_flight_age_seconds of a message idle since its delivery",
        )

        beat = s.now()
        assert await s.queue.heartbeat([held]) == []
        beat_end = s.now()
        asked = s.now()
        stats = await other.stats()
        answered = s.now()
        within(
            stats.oldest_in_flight_age_seconds,
            asked - beat_end,
            answered - beat,
            "oldest_in_flight_age_seconds right after a heartbeat",
        )
        within(
            stats.oldest_ready_age_seconds,
            asked - second_end,
            answered - second,
            "oldest_ready_age_seconds after a heartbeat of another message",
        )

        if s.requires_heartbeat:
            await s.lapse(s.queue, [held])
            stats = await other.stats()
            assert (stats.ready, stats.in_flight) == (1, 1), (
                f"a lapsed lease nobody reclaimed: ready {stats.ready}, in flight {stats.in_flight}"
            )
            idle = stats.oldest_in_flight_age_seconds
            assert idle is not None, "oldest_in_flight_age_seconds of a lapsed lease is None"
            assert idle >= s.lapse_age - tolerance, (
                f"oldest_in_flight_age_seconds is {idle} for a lease idle for {s.lapse_age}s"
            )

        rest = await s.receive_n(s.queue, s.consumer("c"), 1)
        assert await s.queue.ack([held, *rest]) == []
        stats = await other.stats()
        assert (stats.oldest_ready_age_seconds, stats.oldest_in_flight_age_seconds) == (
            None,
            None,
        ), "ages of a queue whose messages were all completed"

    @conformance("X39")
    async def test_stats_list_each_consumer_by_name_with_its_pending_count_and_idle_time(
        self, s: Scenario
    ) -> None:
        """When the backend tracks consumers: names as callers gave them, exact pending counts.

        Two consumers hold two and one messages; ``idle_seconds``, when reported, lies
        within the window since their receives. A backend that lists no consumers at all
        (``consumers == ()``) does not track them, and the case stops there.
        """
        tolerance = s.precision + (1e-9 if s.time_mode == "clock" else 0.002)
        # Off the fake clock's zero, where an idle time of now + t equals now - t.
        await s.advance(s.live_age / 2)
        await s.add([f"m{i}".encode() for i in range(4)])
        holders = {s.consumer("two"): 2, s.consumer("one"): 1}
        windows: dict[str, tuple[float, float]] = {}
        held = []
        for name, count in holders.items():
            start = s.now()
            held += await s.receive_n(s.queue, name, count)
            windows[name] = (start, s.now())
        await s.advance(s.live_age / 2)
        asked = s.now()
        stats = await (await s.open()).stats()
        answered = s.now()
        if not stats.consumers:
            assert await s.queue.ack(held) == []
            return  # The backend does not track consumers.

        listed = {c.name: c for c in stats.consumers}
        for name, count in holders.items():
            assert name in listed, f"consumer {name!r} holds {count} but is not listed: {listed}"
            consumer = listed[name]
            assert consumer.pending == count, (
                f"consumer {name!r} holds {count}, stats say pending {consumer.pending}"
            )
            if consumer.idle_seconds is not None:
                start, end = windows[name]
                low, high = asked - end - tolerance, answered - start + tolerance
                assert low <= consumer.idle_seconds <= high, (
                    f"consumer {name!r} idle_seconds is {consumer.idle_seconds:.3f}; its last "
                    f"receive was {low:.3f}s to {high:.3f}s before"
                )
        others = {c.name: c.pending for c in stats.consumers if c.name not in holders}
        assert not any(others.values()), f"consumers holding nothing have pending {others}"
        assert await s.queue.ack(held) == []
