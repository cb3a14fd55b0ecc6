"""Restarts, crashes and outages of the backend's server (P37-P39)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from taskrunner.errors import BackendError
from taskrunner.queue import Delivery, Queue

from ..harness import CrashesBackend, RestartsBackend, StopsBackend
from ..scenario import ConformanceBase, Scenario, conformance
from ..settings import time_scale

__all__ = ["OutageCases"]

# Real seconds, times the time scale, one call may take while the server is down
# before the suite calls it hung.
OUTAGE_CALL_SECONDS = 10.0


async def _until_reachable(s: Scenario, queue: Queue) -> list[str]:
    """Add one message through `queue`, retrying while the backend is still coming back."""
    deadline = time.monotonic() + 10 * s.grace
    while True:
        try:
            return await queue.add([b"after the outage"])
        except BackendError:
            assert time.monotonic() < deadline, "the handle never recovered after the outage"
            await asyncio.sleep(0.05 * time_scale())


class OutageCases(ConformanceBase):
    """P37-P39."""

    @conformance("P37")
    async def test_unacked_messages_survive_a_restart_and_acked_ones_stay_gone(
        self, s: Scenario
    ) -> None:
        """Ten added, four leased, two acked; after a restart six wait and two are reclaimable."""
        s.require_capability("persistent")
        s.require_hook(RestartsBackend, "restart_backend")
        assert isinstance(s.harness, RestartsBackend)
        ids = await s.add([f"durable {i}".encode() for i in range(10)])
        leased = await s.receive_n(s.queue, s.consumer("before"), 4)
        assert await s.queue.ack(leased[:2]) == []
        acked = {d.message_id for d in leased[:2]}
        in_flight = leased[2:]

        await s.harness.restart_backend()

        after = await s.open()
        assert await after.len() == 8, "len after the restart"
        ready = await s.receive_n(after, s.consumer("after"), 6)
        assert {d.message_id for d in ready} == set(ids) - acked - {d.message_id for d in in_flight}
        await s.lapse(after, in_flight)
        reclaimed = await s.reclaim_ids(
            after, s.consumer("after"), {d.message_id for d in in_flight}
        )
        assert not acked & {d.message_id for d in ready + reclaimed}, "acked messages came back"
        assert await after.ack(ready + reclaimed) == []

    @conformance("P38")
    async def test_added_message_survives_a_crash_right_after_add_when_enqueue_is_durable(
        self, s: Scenario
    ) -> None:
        """With durable_enqueue, add returning means the message outlives a ``kill -9``."""
        s.require_capability("durable_enqueue")
        s.require_hook(CrashesBackend, "crash_backend")
        assert isinstance(s.harness, CrashesBackend)
        ids = await s.add([f"must survive {i}".encode() for i in range(5)])

        await s.harness.crash_backend()

        after = await s.open()
        got = await s.receive_n(after, s.consumer("after"), 5)
        assert sorted(d.message_id for d in got) == sorted(ids)

    @conformance("P39")
    async def test_client_library_exceptions_never_escape_failures_raise_backend_error_subclasses(
        self, s: Scenario
    ) -> None:
        """During an outage every call raises a BackendError subclass or reports its deliveries.

        Never another exception, never a silent success; afterwards the same handle
        works again.
        """
        s.require_hook(StopsBackend, "stop_backend/start_backend")
        assert isinstance(s.harness, StopsBackend)
        queue = s.queue
        consumer = s.consumer("a")
        await s.add([b"before the outage"])
        (held,) = await s.receive_n(queue, consumer, 1)
        reports_lost: dict[str, Callable[[], Awaitable[list[Delivery]]]] = {
            "heartbeat": lambda: queue.heartbeat([held]),
            "ack": lambda: queue.ack([held]),
            "release": lambda: queue.release([held]),
            "dead_letter": lambda: queue.dead_letter([held], reason="outage"),
        }
        must_raise: dict[str, Callable[[], Awaitable[object]]] = {
            "add": lambda: queue.add([b"during the outage"]),
            "receive": lambda: queue.receive(
                consumer, max_messages=1, wait_seconds=0, lease_seconds=s.lease
            ),
            "reclaim": lambda: queue.reclaim(consumer, lease_seconds=s.lease, max_messages=1),
            "len": queue.len,
            "stats": queue.stats,
        }

        await s.harness.stop_backend()
        problems: list[str] = []
        try:
            for name, call in {**must_raise, **reports_lost}.items():
                try:
                    async with asyncio.timeout(OUTAGE_CALL_SECONDS * time_scale()):
                        result = await call()
                except BackendError:
                    continue
                except TimeoutError:
                    problems.append(f"{name} hung for {OUTAGE_CALL_SECONDS}s during the outage")
                    continue
                except Exception as exc:
                    problems.append(f"{name} let {type(exc).__module__}.{exc!r} escape")
                    continue
                if name in reports_lost and result == [held]:
                    continue
                problems.append(f"{name} returned {result!r} while the server was down")
        finally:
            await s.harness.start_backend()

        assert not problems, "; ".join(problems)
        ids = await _until_reachable(s, queue)
        got = await s.collect(queue, s.consumer("b"), set(ids))
        assert await queue.ack(got) == []
