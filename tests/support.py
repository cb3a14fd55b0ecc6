"""Helpers for runner tests on the in-memory backend with a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from taskrunner import App, BackendUnavailableError, Delivery, Runner, RunnerConfig
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

# Short, round numbers: a lease of 10 fake seconds, heartbeats and reclaims every 2.5.
LEASE = 10.0
FAST = {
    "lease_seconds": LEASE,
    "block_seconds": 1.0,
    "retry_base_seconds": 1.0,
    "retry_max_seconds": 4.0,
    "drain_timeout_seconds": 5.0,
}


def config(**overrides: Any) -> RunnerConfig:
    return RunnerConfig(**{**FAST, **overrides})


@asynccontextmanager
async def running(runner: Runner, *, burst: bool = False) -> AsyncIterator[asyncio.Task[None]]:
    """Run `runner` in the background; stop it and wait for it on exit."""
    task = asyncio.create_task(runner.run(burst=burst))
    await runner.wait_ready()
    try:
        yield task
    finally:
        if not task.done():
            runner.stop()
            runner.stop()
        await asyncio.gather(task, return_exceptions=True)


async def run_burst(runner: Runner, clock: FakeClock, *, limit: float = 600.0) -> None:
    """Run `runner` in burst mode, advancing the fake clock until it returns."""
    task = asyncio.create_task(runner.run(burst=True))
    await clock.run_until(task.done, step=0.5, limit=limit)
    await task


class BlockingHeartbeatQueue(InMemoryQueue):
    """A handle whose heartbeats and reclaims hang while `gate` is clear.

    Models a worker whose link to the backend stalls (a network partition, a long GC).
    """

    def __init__(self, base: InMemoryQueue) -> None:
        self._store = base._store
        self._closed = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        await self.gate.wait()
        return await super().heartbeat(deliveries)

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        await self.gate.wait()
        return await super().reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )


def make(clock: FakeClock, *, requires_heartbeat: bool = True) -> tuple[App, InMemoryQueue]:
    return App("tests"), InMemoryQueue(clock=clock, requires_heartbeat=requires_heartbeat)


async def eventually(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    """Wait in real time until `condition()` holds; fail after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    for _ in range(1_000_000):
        if condition():
            return
        if loop.time() > deadline:
            break
        await asyncio.sleep(0.01)
    raise AssertionError(f"condition still false after {within}s")


@dataclass(frozen=True)
class Attempt:
    operation: str
    started: float
    ended: float
    size: int
    ok: bool


@dataclass
class Link:
    """The connection to the backend: up or down, and every call made over it."""

    clock: FakeClock
    down: bool = False
    attempts: list[Attempt] = field(default_factory=list)

    def record(self, operation: str, started: float, size: int) -> None:
        ok = not self.down
        self.attempts.append(Attempt(operation, started, self.clock.monotonic(), size, ok))
        if not ok:
            raise BackendUnavailableError("connection refused")


class Flaky(InMemoryQueue):
    """A handle whose calls fail while its link is down (checked when each returns)."""

    link: Link

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        started = self.link.clock.monotonic()
        if self.link.down:
            self.link.record("receive", started, 0)
        got = await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
        )
        # Down meanwhile: the blocking read fails (anything leased comes back after a lease).
        self.link.record("receive", started, len(got))
        return got

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        started = self.link.clock.monotonic()
        self.link.record("reclaim", started, 0)
        return await super().reclaim(
            consumer, lease_seconds=lease_seconds, max_messages=max_messages
        )

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self.link.record("heartbeat", self.link.clock.monotonic(), len(deliveries))
        return await super().heartbeat(deliveries)

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self.link.record("ack", self.link.clock.monotonic(), len(deliveries))
        return await super().ack(deliveries)
