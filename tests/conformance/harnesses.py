"""Harness factories for our own backends, used exactly as a third party would use them.

``python -m taskrunner_conformance tests.conformance.harnesses:memory_harness`` runs the
suite on the in-memory backend (fake clock); ``...:redis_harness`` on Redis.
"""

from __future__ import annotations

from taskrunner.clock import Clock
from taskrunner.queue import Queue
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

__all__ = ["MemoryHarness", "memory_harness", "memory_without_heartbeat_harness"]


class MemoryHarness:
    """The in-memory backend on a fake clock: one store per namespace, time moves instantly."""

    # Long enough that nothing lapses by accident; free, because time is simulated.
    lease_seconds = 30.0

    def __init__(self, *, requires_heartbeat: bool = True) -> None:
        self.fake_clock = FakeClock()
        self.clock: Clock = self.fake_clock
        self.requires_heartbeat = requires_heartbeat
        self._stores: dict[str, InMemoryQueue] = {}

    async def open_queue(self, namespace: str) -> Queue:
        store = self._stores.get(namespace)
        if store is None:
            store = InMemoryQueue(clock=self.clock, requires_heartbeat=self.requires_heartbeat)
            self._stores[namespace] = store
        return store.open_handle()

    async def advance(self, seconds: float) -> None:
        await self.fake_clock.advance(seconds)

    async def cleanup(self, namespace: str) -> None:
        self._stores.pop(namespace, None)

    async def storage_size(self, queue: Queue) -> int:
        assert isinstance(queue, InMemoryQueue)
        store = queue._store
        return (
            len(store.messages)
            + len(store.ready)
            + len(store.delayed)
            + len(store.in_flight)
            + len(store.dead)
        )


def memory_harness() -> MemoryHarness:
    """The in-memory backend with leases (the default configuration)."""
    return MemoryHarness()


def memory_without_heartbeat_harness() -> MemoryHarness:
    """The in-memory backend with ``requires_heartbeat=False``: leases never lapse."""
    return MemoryHarness(requires_heartbeat=False)
