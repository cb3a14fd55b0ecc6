"""taskrunner.leader: election, renewal, the local deadline, resign, hand-over."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from taskrunner.leader import LeaderElector
from taskrunner.testing import FakeClock, settle

from .scheduling_fakes import FakeLeadership, ScheduledQueue

TTL = 9.0


def leads(elector: LeaderElector) -> bool:
    # A call, not the property: mypy would narrow the property across awaits.
    return elector.is_leader


def token_of(elector: LeaderElector) -> int | None:
    return elector.token


def leadership(clock: FakeClock) -> FakeLeadership:
    return ScheduledQueue(clock=clock).fake_leadership


@asynccontextmanager
async def campaigning(elector: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.run())
    await settle()
    try:
        yield task
    finally:
        elector.stop()
        await asyncio.gather(task, return_exceptions=True)


def elector(part: FakeLeadership, clock: FakeClock, holder: str, **kw: float) -> LeaderElector:
    return LeaderElector(part, "jobs", holder, ttl_seconds=TTL, clock=clock, **kw)


async def test_one_of_two_campaigners_leads_and_the_other_waits() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a, b = elector(part, clock, "a"), elector(part, clock, "b")

    async with campaigning(a), campaigning(b):
        assert await a.wait_elected() == 1
        assert leads(a)
        assert token_of(a) == 1
        await clock.advance(3 * TTL)
        assert leads(a)
        assert not leads(b)
        assert token_of(b) is None


async def test_the_lease_is_renewed_every_third_of_the_ttl() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a = elector(part, clock, "a")

    async with campaigning(a):
        await clock.advance(TTL / 3 - 0.01)
        assert part.calls == ["acquire"]
        await clock.advance(0.02)
        assert part.calls == ["acquire", "renew"]
        await clock.advance(TTL)
        assert part.calls.count("renew") == 4


async def test_a_refused_renew_deposes_at_once() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a = elector(part, clock, "a")

    async with campaigning(a):
        await a.wait_elected()
        part.expire("jobs")
        assert await part.acquire_leadership("jobs", "intruder", ttl_seconds=TTL) is not None
        await clock.advance(TTL / 3)
        assert not leads(a)
        assert token_of(a) is None


async def test_failing_renews_keep_leading_until_the_deadline_and_not_after() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a = elector(part, clock, "a", precision_seconds=0.5)

    async with campaigning(a):
        await a.wait_elected()
        # Acquired at 0: the local deadline is 0 + TTL - 0.5, whatever happens next.
        part.fail_next = 1000
        await clock.advance(TTL - 0.5 - 0.01)
        assert leads(a)
        assert part.calls.count("renew") >= 3  # retried, not given up
        await clock.advance(0.02)
        assert not leads(a)
        await asyncio.wait_for(a.wait_deposed(), 0.1)


async def test_the_deadline_is_measured_from_before_the_renew_was_sent() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a = elector(part, clock, "a")

    async with campaigning(a):
        await a.wait_elected()
        await clock.advance(TTL / 3)  # first renew at t=3, answered at once
        part.hang = asyncio.Event()
        await clock.advance(TTL / 3)  # the renew sent at t=6 hangs...
        await clock.advance(2.0)
        part.hang.set()  # ...and is answered at t=8
        part.hang = None
        await settle()
        assert leads(a)
        # Renewed by the call sent at 6: the lease is surely live only until 6 + TTL.
        part.fail_next = 1000
        await clock.advance(6 + TTL - clock.monotonic() - 0.01)
        assert leads(a)
        await clock.advance(0.02)
        assert not leads(a)


async def test_a_renew_that_hangs_past_the_deadline_deposes_while_it_hangs() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a = elector(part, clock, "a")

    async with campaigning(a):
        await a.wait_elected()
        part.hang = asyncio.Event()
        await clock.advance(TTL - 0.01)
        assert leads(a)
        await clock.advance(0.02)
        await asyncio.wait_for(a.wait_deposed(), 0.1)
        assert not leads(a)
        part.hang.set()


async def test_stop_resigns_so_the_other_campaigner_takes_over_without_waiting() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a, b = elector(part, clock, "a"), elector(part, clock, "b")

    async with campaigning(b):
        task = asyncio.create_task(a.run())
        await clock.advance(0)
        assert leads(a) or leads(b)
        leader, other = (a, b) if leads(a) else (b, a)
        leader.stop()
        await settle()
        assert "resign" in part.calls
        assert not leads(leader)
        await clock.advance(TTL / 3)  # the next attempt, well inside the old lease
        assert leads(other)
        assert token_of(other) == 2
        a.stop()
        await task


async def test_a_dead_leader_is_replaced_after_its_lease_with_a_larger_token() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a, b = elector(part, clock, "a"), elector(part, clock, "b")
    task_a = asyncio.create_task(a.run())
    await settle()
    assert leads(a)

    async with campaigning(b):
        task_a.cancel()  # a crash: no resign
        with pytest.raises(asyncio.CancelledError):
            await task_a
        assert "resign" not in part.calls
        await clock.advance(TTL - 0.01)
        assert not leads(b)
        await clock.advance(TTL / 3 + 0.02)
        assert leads(b)
        assert token_of(b) == 2


async def test_cancelling_run_is_not_swallowed() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a = elector(part, clock, "a")
    task = asyncio.create_task(a.run())
    await settle()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert not leads(a)


async def test_backend_outage_while_following_retries_with_backoff_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    part = leadership(clock)
    part.fail_next = 3
    a = elector(part, clock, "a")

    with caplog.at_level(logging.WARNING, logger="taskrunner.leader"):
        async with campaigning(a):
            await clock.run_until(lambda: leads(a), step=0.25, limit=60)
    assert part.calls.count("acquire") == 4
    assert sum("backend error" in r.getMessage() for r in caplog.records) == 3


async def test_step_down_with_the_current_token_campaigns_again() -> None:
    clock = FakeClock()
    part = leadership(clock)
    a = elector(part, clock, "a")

    async with campaigning(a):
        token = await a.wait_elected()
        a.step_down(token + 1)  # stale: nothing changes
        assert leads(a)
        a.step_down(token)
        assert not leads(a)
        await settle()
        # The backend still records a live lease of "a": acquire renews it, same token.
        assert token_of(a) == token
