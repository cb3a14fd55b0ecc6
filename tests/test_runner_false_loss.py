"""No false "lease lost": a finished task's own ack, release or dead-letter is not a loss.

A heartbeat batch is a snapshot of the lease table. When it reaches the backend after
the ack of one of its leases, the backend rightly reports that lease lost; the worker
must not count it (its own ack completed the message, and the ack's fenced reply is
what decides). Likewise an ack whose reply was lost and that the acker sends again:
the retry finds the lease gone because the first send completed it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from taskrunner import BackendUnavailableError, Delivery, Producer, Runner, current_task
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, make, run_burst

# Fake seconds a heartbeat request travels before the backend applies it, and that the
# reply of a settling call (ack, release, dead-letter) travels back after it applied.
# With the heartbeat slower than the round trip of a settle, every heartbeat tick
# carries leases whose settle lands first and whose reply comes back later.
HEARTBEAT_TRANSIT = 0.2
SETTLE_REPLY_TRANSIT = 0.3


class SlowLink(InMemoryQueue):
    """Heartbeats arrive late at the backend; replies of settling calls return late."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        await self._store.clock.sleep(HEARTBEAT_TRANSIT)
        return await super().heartbeat(deliveries)

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().ack(deliveries)
        await self._store.clock.sleep(SETTLE_REPLY_TRANSIT)
        return lost

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        lost = await super().release(deliveries, delay_seconds=delay_seconds)
        await self._store.clock.sleep(SETTLE_REPLY_TRANSIT)
        return lost

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        lost = await super().dead_letter(deliveries, reason=reason)
        await self._store.clock.sleep(SETTLE_REPLY_TRANSIT)
        return lost


async def test_twenty_thousand_noop_tasks_without_a_fault_lose_no_lease() -> None:
    clock = FakeClock()
    app, queue = make(clock)

    @app.task
    async def noop(n: int) -> None:
        pass

    await Producer(queue, app, clock=clock).dispatch_many(noop, range(20_000))
    runner = Runner(
        SlowLink._on_store(queue._store),
        app,
        config(num_workers=200, batch_size=200),
        clock=clock,
    )
    await run_burst(runner, clock, limit=3600)

    stats = runner.stats()
    assert stats.succeeded == 20_000
    assert stats.lease_lost == 0
    assert stats.ack_uncertain == 0
    assert await queue.len() == 0


@pytest.mark.parametrize("max_retries", [1, 0], ids=["release", "dead_letter"])
async def test_a_failed_attempts_own_release_or_dead_letter_is_not_a_lost_lease(
    max_retries: int,
) -> None:
    clock = FakeClock()
    app, queue = make(clock)
    attempts: list[int] = []

    @app.task(max_retries=max_retries)
    async def fails(n: int) -> None:
        attempts.append(current_task().delivery_count)
        # Varied durations spread the settles over time, so every heartbeat tick meets some.
        await clock.sleep((n % 7) * 0.05)
        raise RuntimeError("no")

    await Producer(queue, app, clock=clock).dispatch_many(fails, range(2_000))
    runner = Runner(
        SlowLink._on_store(queue._store),
        app,
        config(num_workers=200, batch_size=200, retry_base_seconds=0.5, retry_max_seconds=0.5),
        clock=clock,
    )
    await run_burst(runner, clock, limit=3600)

    stats = runner.stats()
    assert stats.failed == 2_000 * (max_retries + 1)
    assert stats.lease_lost == 0
    assert len(queue.dead_letters()) == 2_000
    assert await queue.len() == 0


class LostAckReply(InMemoryQueue):
    """The first ack is applied by the backend, then the connection fails before the reply."""

    failures = 0

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = await super().ack(deliveries)
        if LostAckReply.failures == 0:
            LostAckReply.failures += 1
            raise BackendUnavailableError("connection reset while reading the reply")
        return lost


async def test_ack_retried_after_its_reply_was_lost_is_uncertain_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskrunner")
    clock = FakeClock()
    app, queue = make(clock)
    runs: list[int] = []

    @app.task
    async def job() -> None:
        runs.append(current_task().delivery_count)

    await Producer(queue, app, clock=clock).dispatch(job)
    LostAckReply.failures = 0
    runner = Runner(LostAckReply._on_store(queue._store), app, config(), clock=clock)
    await run_burst(runner, clock)

    assert LostAckReply.failures == 1
    assert runs == [1]
    stats = runner.stats()
    assert stats.succeeded == 1
    assert stats.lease_lost == 0
    assert stats.ack_uncertain == 1
    assert await queue.len() == 0
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for m in messages if "lease lost" in m or "reported the lease lost" in m] == []
    assert any(m.startswith("ack uncertain") for m in messages), messages
