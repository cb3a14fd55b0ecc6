"""Closed handles refuse every call, empty batches too; other handles stay open (X1).

"`aclose` is idempotent; every other method called after it raises
`QueueClosedError`" covers calls that have nothing to do: ``ack([])`` on a closed
handle must raise as ``ack([d])`` does, or a worker that closed its queue would go on
"succeeding" with empty batches. The optional parts reached through a handle
(`Queue.admin`, `Queue.worker_registry`, `Queue.consumer_cleanup`, and the
``scheduling`` and ``leadership`` parts) are closed with it.
Closing one handle never closes another handle on the same queue, whichever handle
was opened first, and never gives its leases back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import AddRequest, Queue, WorkerInfo, leadership_of, scheduling_of

from ..scenario import ConformanceBase, Scenario, conformance
from .fencing import queue_state

__all__ = ["ClosedHandleCases"]

Calls = dict[str, Callable[[], Awaitable[object]]]


async def _all_refused(calls: Calls) -> None:
    """Run every call; fail naming each one that did not raise QueueClosedError."""
    wrong = []
    for name, call in calls.items():
        try:
            result = await call()
        except QueueClosedError:
            continue
        except Exception as exc:
            wrong.append(f"{name} raised {exc!r}")
        else:
            wrong.append(f"{name} returned {result!r}")
    assert not wrong, "on a closed handle, " + "; ".join(wrong)


class ClosedHandleCases(ConformanceBase):
    """X1: closed handles, empty batches, optional parts, other handles."""

    @conformance("X1")
    async def test_every_method_of_a_closed_handle_raises_queue_closed_error_even_with_empty_batches(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """add([]), heartbeat([]), ack([]), release([]), dead_letter([]) too; nothing changes."""
        closing = await s.open()
        (message_id,) = await s.add([b"held through the closed handle"])
        (held,) = await s.receive_n(closing, s.consumer("a"), 1)
        before = await queue_state(s.queue)

        await closing.aclose()
        await closing.aclose()

        lease = s.lease
        await _all_refused(
            {
                "add([])": lambda: closing.add([]),
                "add([body])": lambda: closing.add([b"x"]),
                "receive()": lambda: closing.receive(
                    "a", max_messages=1, wait_seconds=0, lease_seconds=lease
                ),
                "heartbeat([])": lambda: closing.heartbeat([]),
                "heartbeat([held])": lambda: closing.heartbeat([held]),
                "ack([])": lambda: closing.ack([]),
                "ack([held])": lambda: closing.ack([held]),
                "release([])": lambda: closing.release([]),
                "release([], delay_seconds=lease)": lambda: closing.release(
                    [], delay_seconds=lease
                ),
                "release([held])": lambda: closing.release([held]),
                "reclaim()": lambda: closing.reclaim("a", lease_seconds=lease, max_messages=1),
                "dead_letter([])": lambda: closing.dead_letter([], reason="closed"),
                "dead_letter([held])": lambda: closing.dead_letter([held], reason="closed"),
                "stats()": closing.stats,
                "len()": closing.len,
            }
        )
        await closing.aclose()
        after = await queue_state(s.queue)
        assert after == before, f"calls on the closed handle changed the queue: {after}"
        await s.nothing_for(s.queue, s.consumer("b"), {message_id})
        assert await s.queue.heartbeat([held]) == [], "closing a handle gave its lease back"
        assert await s.queue.ack([held]) == []

    @conformance("X1")
    async def test_optional_parts_of_a_closed_handle_raise_queue_closed_error(
        self, s: Scenario
    ) -> None:
        """QueueAdmin, WorkerRegistry and ConsumerCleanup calls, empty selections too."""
        closing = await s.open()
        admin, registry, cleanup = (
            closing.admin,
            closing.worker_registry,
            closing.consumer_cleanup,
        )
        if admin is None and registry is None and cleanup is None:
            pytest.skip("the backend offers no admin, worker_registry or consumer_cleanup")
        (message_id, dead_id) = await s.add([b"stays", b"dead"])
        got = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), 2)}
        assert await s.queue.dead_letter([got[dead_id]], reason="kept") == []
        assert await s.queue.release([got[message_id]]) == []
        instance = s.consumer("worker")
        info = WorkerInfo(instance=instance, workers=1, busy=0, average_seconds=None, seen_at=0.0)
        open_registry = s.queue.worker_registry
        if open_registry is not None:
            # Long enough that it cannot expire during the test on any time scale.
            await open_registry.publish_worker(info, ttl_seconds=100 * s.lease)
        before = await queue_state(s.queue)

        await closing.aclose()

        calls: Calls = {}
        if admin is not None:
            calls.update(
                {
                    "admin.list_dead_letters()": admin.list_dead_letters,
                    "admin.retry_dead_letters()": admin.retry_dead_letters,
                    "admin.retry_dead_letters([])": lambda: admin.retry_dead_letters([]),
                    "admin.purge_dead_letters()": admin.purge_dead_letters,
                    "admin.purge_dead_letters([])": lambda: admin.purge_dead_letters([]),
                    "admin.purge()": admin.purge,
                    "admin.delete_queue()": admin.delete_queue,
                }
            )
        if registry is not None:
            calls.update(
                {
                    "worker_registry.publish_worker()": lambda: registry.publish_worker(
                        info, ttl_seconds=s.lease
                    ),
                    "worker_registry.remove_worker()": lambda: registry.remove_worker(instance),
                    "worker_registry.live_workers()": registry.live_workers,
                }
            )
        if cleanup is not None:
            calls.update(
                {
                    "consumer_cleanup.remove_idle_consumers(0)": lambda: (
                        cleanup.remove_idle_consumers(0)
                    ),
                    "consumer_cleanup.remove_consumers([])": lambda: cleanup.remove_consumers([]),
                    "consumer_cleanup.remove_consumers([name])": lambda: cleanup.remove_consumers(
                        [instance]
                    ),
                }
            )
        await _all_refused(calls)

        after = await queue_state(s.queue)
        assert after == before, f"calls on the closed handle's parts changed the queue: {after}"
        if open_registry is not None:
            listed = {w.instance for w in await open_registry.live_workers()}
            assert instance in listed, "a closed handle's registry removed a worker entry"

    @conformance("X1")
    async def test_scheduling_and_leadership_of_a_closed_handle_raise_queue_closed_error(
        self, s: Scenario
    ) -> None:
        """Every Scheduling and Leadership method, empty batches too, the queue unchanged."""
        closing = await s.open()
        scheduling, leadership = scheduling_of(closing), leadership_of(closing)
        if scheduling is None and leadership is None:
            pytest.skip("scheduling_of and leadership_of are None: the backend offers neither part")
        (message_id,) = await s.add([b"stays"])
        token = 0
        open_leadership = leadership_of(s.queue)
        if open_leadership is not None:
            lease = await open_leadership.acquire_leadership("held", "a", ttl_seconds=100 * s.lease)
            assert lease is not None, "a free election could not be acquired"
            token = lease.token
        before = await queue_state(s.queue)

        await closing.aclose()

        calls: Calls = {}
        if scheduling is not None:
            calls.update(
                {
                    "scheduling.add_requests([])": lambda: scheduling.add_requests([]),
                    "scheduling.add_requests([plain])": lambda: scheduling.add_requests(
                        [AddRequest(body=b"x")]
                    ),
                    "scheduling.cancel([])": lambda: scheduling.cancel([]),
                    "scheduling.cancel([id])": lambda: scheduling.cancel([message_id]),
                }
            )
        if leadership is not None:
            calls.update(
                {
                    "leadership.acquire_leadership()": lambda: leadership.acquire_leadership(
                        "free", "b", ttl_seconds=s.lease
                    ),
                    "leadership.renew_leadership()": lambda: leadership.renew_leadership(
                        "held", "a", token, ttl_seconds=s.lease
                    ),
                    "leadership.resign_leadership()": lambda: leadership.resign_leadership(
                        "held", "a", token
                    ),
                    "leadership.current_leader()": lambda: leadership.current_leader("held"),
                    "leadership.fire()": lambda: leadership.fire(
                        election="held", token=token, schedule="s", instant=1.0, body=b"x"
                    ),
                    "leadership.fire_records([])": lambda: leadership.fire_records([]),
                    "leadership.fire_records([s])": lambda: leadership.fire_records(["s"]),
                }
            )
        await _all_refused(calls)

        assert await queue_state(s.queue) == before, "calls on the closed handle changed the queue"
        if scheduling_of(s.queue) is not None and s.capabilities.cancel:
            part = scheduling_of(s.queue)
            assert part is not None
            assert await part.cancel([message_id]) == [True], "the message was touched"
        if open_leadership is not None:
            lease = await open_leadership.current_leader("held")
            assert lease is not None, "the closed handle resigned"
            assert lease.token == token, "the closed handle changed the token"
            assert await open_leadership.fire_records(["s"]) == {}, "the closed handle fired"

    @conformance("X1")
    async def test_closing_one_handle_leaves_every_other_handle_on_the_queue_open(
        self, s: Scenario
    ) -> None:
        """The first handle opened closes; handles opened before and after it work on.

        The first handle is the one a harness is most likely to have built the queue
        with (an in-memory store, a client pool); closing it must close nothing else.
        """
        earlier = await s.open()
        ids = await s.add([b"first", b"second", b"third"])
        (first,) = await s.receive_n(s.queue, s.consumer("first"), 1)

        await s.queue.aclose()
        later = await s.open()

        for handle, label in (
            (earlier, "a handle opened before"),
            (later, "a handle opened after"),
        ):
            await _works(s, handle, label)
        assert await later.heartbeat([first]) == [], "closing a handle gave its lease back"
        assert await later.ack([first]) == []
        remaining = set(ids) - {first.message_id}
        got = await s.collect(later, s.consumer("rest"), remaining)
        assert await later.ack(got) == []
        assert await earlier.len() == 0


async def _works(s: Scenario, handle: Queue, label: str) -> None:
    """Add, receive, heartbeat, release, ack, stats and len through `handle`."""
    try:
        (message_id,) = await s.add([label.encode()], handle)
        consumer = s.consumer("worker")
        got = await s.collect(handle, consumer, {message_id})
        (mine,) = [d for d in got if d.message_id == message_id]
        others = [d for d in got if d.message_id != message_id]
        assert await handle.release(others) == []
        assert await handle.heartbeat([mine]) == []
        assert await handle.ack([mine]) == []
        await handle.stats()
        await handle.len()
    except QueueClosedError as exc:
        raise AssertionError(f"closing the first handle closed {label}: {exc!r}") from exc
