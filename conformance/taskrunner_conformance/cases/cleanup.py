"""The optional consumer clean-up: forgetting exactly the consumers named (X27).

Idle-time edges of `ConsumerCleanup.remove_idle_consumers` are X19 (cases/boundaries.py);
the clean-up sparing a consumer that holds messages under churn is P24.
"""

from __future__ import annotations

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["CleanupCases"]


class CleanupCases(ConformanceBase):
    """X27."""

    @conformance("X27")
    async def test_remove_consumers_forgets_exactly_the_named_consumers_that_hold_no_message(
        self, s: Scenario
    ) -> None:
        """A holder is kept, an idle one forgotten once, unknown names skipped, nothing lost.

        Named in one call: a consumer holding a message, one that held a message and
        acked it, one never seen, and the idle one again. Only the idle one comes back,
        once; a second call forgets nothing more; the holder still holds its message.
        """
        cleanup = s.require_cleanup()
        await s.add([b"held", b"done"])
        holder, idle, unknown = s.consumer("holder"), s.consumer("idle"), s.consumer("unknown")
        (held,) = await s.receive_n(s.queue, holder, 1)
        (done,) = await s.receive_n(s.queue, idle, 1)
        assert await s.queue.ack([done]) == []
        tracked = {c.name for c in (await s.queue.stats()).consumers}

        removed = await cleanup.remove_consumers([holder, idle, unknown, idle])

        assert removed == [idle], (
            f"remove_consumers([holder, idle, unknown, idle]) returned {removed}; expected "
            "exactly the idle consumer, once (the holder holds a message, the third was "
            "never seen)"
        )
        assert await cleanup.remove_consumers([idle]) == [], (
            "a forgotten consumer was removed again"
        )
        assert await cleanup.remove_consumers([]) == []
        if tracked:
            names = {c.name for c in (await s.queue.stats()).consumers}
            assert holder in names, "the consumer holding a message was forgotten"
            assert idle not in names, "stats still lists the forgotten consumer"
        assert await s.queue.heartbeat([held]) == [], "the holder lost its lease"
        await s.nothing_for(await s.open(), s.consumer("thief"), {held.message_id})
        assert await s.queue.ack([held]) == []
        s.boundary(4)  # a holder, an idle consumer, an unknown name, a repeated name
