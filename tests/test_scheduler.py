"""The scheduler in every Runner: one leader fires each instant once; hand-over on
stop and on a crash; catch-up after a gap; scheduled_for in the task.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from taskrunner import App, Runner, current_task
from taskrunner.queue import leadership_of
from taskrunner.testing import FakeClock, settle
from taskrunner_backends.memory import InMemoryQueue

from .scheduling_fakes import ScheduledQueue
from .support import config, running

TTL = 3.0


def make_app(catch_up: str = "all") -> tuple[App, list[datetime | None]]:
    app = App("ticks")
    seen: list[datetime | None] = []

    @app.task(name="tick")
    async def tick() -> None:
        seen.append(current_task().scheduled_for)

    app.schedule("every-second", tick, every=1, catch_up=catch_up)  # type: ignore[arg-type]
    return app, seen


def runner(queue: InMemoryQueue, app: App, clock: FakeClock, name: str) -> Runner:
    return Runner(queue, app, config(leader_ttl_seconds=TTL, consumer_prefix=name), clock=clock)


def leader_of(*runners: Runner) -> Runner:
    leading = [r for r in runners if r.scheduler is not None and r.scheduler.elector.is_leader]
    assert len(leading) == 1, leading
    return leading[0]


def instants(queue: ScheduledQueue) -> list[float]:
    return [instant for _, instant in queue.fake_leadership.fired]


def assert_consecutive(fired: list[float]) -> None:
    assert fired == [fired[0] + i for i in range(len(fired))], fired


async def test_two_runners_fire_each_second_once_and_the_task_sees_its_instant() -> None:
    clock = FakeClock()
    queue = ScheduledQueue(clock=clock)
    app, seen = make_app()
    start = clock.time()
    a, b = runner(queue, app, clock, "a"), runner(queue, app, clock, "b")

    async with running(a), running(b):
        await clock.advance(20.0)
        leader_of(a, b)
        await clock.run_until(lambda: len(seen) >= 20, step=0.1, limit=30)

    fired = instants(queue)
    assert_consecutive(fired)
    # The first instant is the first after the leader first saw the schedule.
    assert fired[0] == start + 1
    assert len(fired) >= 20
    assert sorted(s.timestamp() for s in seen if s is not None) == fired[: len(seen)]
    assert all(s is not None and s.tzinfo is UTC for s in seen)


async def test_a_stopped_leader_resigns_and_hands_over_without_a_gap_or_a_double() -> None:
    clock = FakeClock()
    queue = ScheduledQueue(clock=clock)
    app, _ = make_app(catch_up="all")
    a, b = runner(queue, app, clock, "a"), runner(queue, app, clock, "b")
    tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
    await a.wait_ready()
    await b.wait_ready()

    await clock.advance(5.0)
    leader = leader_of(a, b)
    other = b if leader is a else a
    leader.stop()
    await clock.run_until(tasks[leader].done, step=0.1, limit=60)
    await tasks[leader]
    assert "resign" in queue.fake_leadership.calls
    # The follower polls every ttl/3, well before the resigned lease would have run out.
    await clock.advance(TTL / 3 + 0.01)
    assert leader_of(other) is other
    await clock.advance(5.0)
    other.stop()
    await clock.run_until(tasks[other].done, step=0.1, limit=60)
    await tasks[other]

    assert_consecutive(instants(queue))
    assert len(instants(queue)) >= 10


@pytest.mark.parametrize("catch_up", ["all", "latest", "none"])
async def test_after_a_leader_crash_missed_instants_follow_catch_up(catch_up: str) -> None:
    clock = FakeClock()
    queue = ScheduledQueue(clock=clock)
    app, _ = make_app(catch_up)
    a, b = runner(queue, app, clock, "a"), runner(queue, app, clock, "b")
    task_a = asyncio.create_task(a.run())
    await a.wait_ready()
    await clock.advance(0.5)

    async with running(b):
        await clock.advance(4.6)
        assert leader_of(a, b) is a
        before = list(instants(queue))
        task_a.cancel()  # a crash: no resign, the lease runs out
        with pytest.raises(asyncio.CancelledError):
            await task_a
        await clock.run_until(lambda: leader_of_or_none(b), step=0.1, limit=10)
        b_took_office = [clock.time()]
        await clock.advance(3.0)

    fired = instants(queue)
    assert len(set(fired)) == len(fired)
    assert fired == sorted(fired)
    after = fired[len(before) :]
    skipped = list(range(int(before[-1]) + 1, int(after[0])))
    assert_consecutive(after)
    if catch_up == "all":
        assert skipped == []  # every missed instant, in order
        assert after[0] < b_took_office[0] - 2  # fired late, after the lease (3 s) lapsed
    elif catch_up == "latest":
        # All missed instants but the latest were skipped; the latest, already past, fired.
        assert 2 <= len(skipped) <= 5
        assert b_took_office[0] - 1 < after[0] <= b_took_office[0]
    else:
        assert 3 <= len(skipped) <= 6
        assert after[0] > b_took_office[0]  # nothing from before b's term


def leader_of_or_none(r: Runner) -> bool:
    return r.scheduler is not None and r.scheduler.elector.is_leader


async def test_a_runner_on_a_backend_without_leadership_warns_and_fires_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    queue = ScheduledQueue(clock=clock)
    queue.claims = queue.claims.__class__(leadership=False)
    app, seen = make_app()

    with caplog.at_level(logging.WARNING, logger="taskrunner.runner"):
        r = runner(queue, app, clock, "a")
    async with running(r):
        await clock.advance(5.0)
    assert r.scheduler is None
    assert instants(queue) == []
    assert seen == []
    assert any("offers no leadership" in rec.getMessage() for rec in caplog.records)


async def test_a_fire_refused_for_a_stale_token_steps_down() -> None:
    clock = FakeClock()
    queue = ScheduledQueue(clock=clock)
    app, _ = make_app()
    a = runner(queue, app, clock, "a")

    async with running(a):
        await clock.advance(2.5)
        assert a.scheduler is not None
        old = a.scheduler.elector.token
        # Someone else took the election (the lease was lost without a's knowledge).
        queue.fake_leadership.expire("scheduler")
        assert await queue.fake_leadership.acquire_leadership("scheduler", "x", ttl_seconds=0.5)
        count = len(instants(queue))
        await clock.advance(0.6)  # the next instant: the fire is refused
        assert len(instants(queue)) == count
        await clock.advance(TTL)
        await settle()
        assert a.scheduler.elector.token not in (None, old)
        await clock.advance(3.0)
    assert_consecutive(instants(queue))


# --- on the in-memory backend's own Scheduling and Leadership -----------------------


def memory_parts_or_skip(queue: InMemoryQueue) -> None:
    if not queue.capabilities.leadership or getattr(queue, "leadership", None) is None:
        pytest.skip("the in-memory backend offers no leadership yet")


async def test_two_runners_on_the_memory_backend_fire_once_and_hand_over_on_a_crash() -> None:
    clock = FakeClock()
    store = InMemoryQueue(clock=clock)
    memory_parts_or_skip(store)
    app, seen = make_app("all")
    a = runner(store, app, clock, "a")
    b = runner(store.open_handle(), app, clock, "b")
    tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
    await a.wait_ready()
    await b.wait_ready()

    await clock.advance(5.2)
    leader = leader_of(a, b)
    other = b if leader is a else a
    tasks[leader].cancel()  # a crash: no resign
    with pytest.raises(asyncio.CancelledError):
        await tasks[leader]
    await clock.run_until(lambda: leader_of_or_none(other), step=0.1, limit=10)
    await clock.advance(4.0)
    await clock.run_until(lambda: len(seen) >= 9, step=0.1, limit=10)
    other.stop()
    await clock.run_until(tasks[other].done, step=0.1, limit=60)
    await tasks[other]

    instants_seen = [s.timestamp() for s in seen if s is not None]
    assert_consecutive(sorted(set(instants_seen)))
    assert len(set(instants_seen)) >= 9
    leadership = leadership_of(store)
    assert leadership is not None
    records = await leadership.fire_records(["every-second"])
    assert records["every-second"].instant == max(instants_seen)


async def test_a_fire_whose_reply_was_lost_is_not_repeated_and_keeps_the_term() -> None:
    clock = FakeClock()
    queue = ScheduledQueue(clock=clock)
    app, seen = make_app()
    a = runner(queue, app, clock, "a")

    async with running(a):
        await clock.advance(2.5)
        assert a.scheduler is not None
        token = a.scheduler.elector.token
        queue.fake_leadership.fail_after_fire = 2
        queue.fake_leadership.fail_next = 1  # and one plain outage on the next call
        await clock.advance(6.0)
        # No step-down (which would campaign again): the fire record explained the None.
        assert a.scheduler.elector.token == token
        assert queue.fake_leadership.calls.count("acquire") == 1
        await clock.run_until(lambda: len(seen) >= 8, step=0.1, limit=10)

    fired = instants(queue)
    assert_consecutive(fired)
    assert sorted(s.timestamp() for s in seen if s is not None) == fired[: len(seen)]
