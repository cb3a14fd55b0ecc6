"""`current_task().fence`: a zombie attempt's guarded write is refused.

The scenario the fence exists for: attempt 1 keeps running after its heartbeats stopped
reaching the backend, its lease lapses, attempt 2 (reclaimed by another worker) writes,
and then attempt 1 writes too. The external store is SQLite (the recipe in
docs/fencing.md, in `examples/fencing/guarded.py`), so the test reads what a user's
database would hold.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence

import pytest
from examples.fencing.guarded import GuardedStore

from taskrunner import BackendUnavailableError, Delivery, Producer, Runner, current_task
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import LEASE, config, make, running


class _PartitionedQueue(InMemoryQueue):
    """A handle whose heartbeats never reach the backend, as behind a network partition."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        raise BackendUnavailableError("partitioned (test)")


async def test_a_zombie_attempts_guarded_write_is_refused_after_a_newer_attempt_wrote() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    store = GuardedStore(sqlite3.connect(":memory:"))
    store.create("order-1")
    zombie_may_write = asyncio.Event()
    fences: list[int] = []
    accepted: list[bool] = []

    @app.task(max_retries=3)
    async def ship(order: str) -> None:
        fence = current_task().fence
        fences.append(fence)
        if len(fences) == 1:
            await zombie_may_write.wait()
        accepted.append(store.set_state(order, f"shipped by attempt {fence}", fence=fence))

    zombie = Runner(_PartitionedQueue._on_store(queue._store), app, config(), clock=clock)
    healthy = Runner(queue.open_handle(), app, config(), clock=clock)
    async with running(zombie):
        await Producer(queue, app, clock=clock).dispatch(ship, "order-1")
        await clock.run_until(lambda: len(fences) == 1, step=0.5, limit=5)
        async with running(healthy):
            await clock.run_until(lambda: len(accepted) == 1, step=0.5, limit=4 * LEASE)
            zombie_may_write.set()
            await clock.run_until(lambda: len(accepted) == 2, step=0.5, limit=4 * LEASE)
    assert fences == [1, 2]
    assert accepted == [True, False]
    assert store.state("order-1") == ("shipped by attempt 2", 2)


def test_the_guard_accepts_a_larger_fence_and_refuses_equal_and_smaller_ones() -> None:
    store = GuardedStore(sqlite3.connect(":memory:"))
    store.create("o")
    assert store.set_state("o", "a", fence=3)
    assert not store.set_state("o", "b", fence=3)
    assert not store.set_state("o", "c", fence=2)
    assert store.set_state("o", "d", fence=4)
    assert store.state("o") == ("d", 4)


def test_fence_is_the_delivery_count_of_the_running_attempt() -> None:
    from taskrunner.context import TaskContext

    context = TaskContext(
        task_name="t", task_id="i", message_id="m", delivery_count=7, max_attempts=9, consumer="c"
    )
    assert context.fence == 7


@pytest.mark.parametrize("fence", [0, -1])
def test_the_guard_refuses_fences_below_one(fence: int) -> None:
    store = GuardedStore(sqlite3.connect(":memory:"))
    store.create("o")
    with pytest.raises(ValueError, match="fence"):
        store.set_state("o", "x", fence=fence)
