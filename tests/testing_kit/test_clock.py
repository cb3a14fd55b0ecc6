"""FakeClock's autojump and settle(), on public asyncio API only."""

from __future__ import annotations

import asyncio
import inspect
import re
import types

import pytest

import taskrunner.testing.clock as clock_module
import taskrunner.testing.dispatches as dispatches_module
import taskrunner.testing.idle as idle_module
from taskrunner.testing import FakeClock, settle


@pytest.mark.parametrize("module", [clock_module, idle_module, dispatches_module])
def test_no_private_event_loop_or_task_attribute_is_read(module: types.ModuleType) -> None:
    source = inspect.getsource(module)
    for private in ("_ready", "_scheduled", "_fut_waiter", "_state", "_callbacks"):
        assert not re.search(rf"\.{private}\b", source), private


async def test_autojump_wakes_sleepers_in_deadline_order_at_their_deadlines() -> None:
    clock = FakeClock(autojump=True)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.monotonic()))

    async with asyncio.TaskGroup() as tg:
        tg.create_task(sleeper("late", 3600))
        tg.create_task(sleeper("early", 0.5))
        tg.create_task(sleeper("tie", 0.5))

    assert woke == [("early", 0.5), ("tie", 0.5), ("late", 3600)]
    assert clock.jumps == 2


async def test_autojump_never_jumps_while_a_task_can_still_run() -> None:
    clock = FakeClock(autojump=True)
    steps = 0

    async def busy() -> None:
        nonlocal steps
        # Awaits on different lines each turn: the loop is busy, never idle.
        for _ in range(200):
            steps += 1
            await asyncio.sleep(0)
            steps += 1
            await asyncio.sleep(0)

    async def sleeper() -> float:
        await clock.sleep(1)
        return float(steps)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(busy())
        seen = tg.create_task(sleeper())

    assert seen.result() == 400


async def test_without_autojump_time_stays_put() -> None:
    clock = FakeClock()
    sleeping = asyncio.ensure_future(clock.sleep(1))
    await settle()
    await settle()
    assert not sleeping.done()
    assert clock.monotonic() == 0
    await clock.advance(0.999)
    assert not sleeping.done()
    await clock.advance(0.001)
    assert sleeping.done()


async def test_wait_idle_needs_autojump() -> None:
    with pytest.raises(RuntimeError, match="autojump"):
        await FakeClock().wait_idle()


async def test_advance_holds_autojump_off_so_time_ends_at_the_target() -> None:
    clock = FakeClock(autojump=True)
    far = asyncio.ensure_future(clock.sleep(100))
    await clock.advance(10)
    assert clock.monotonic() == 10
    assert not far.done()
    await far
    assert clock.monotonic() == 100


async def test_settle_lets_a_chain_of_wakeups_finish() -> None:
    events = [asyncio.Event() for _ in range(50)]
    finished: list[int] = []

    async def link(i: int) -> None:
        await events[i].wait()
        finished.append(i)
        if i + 1 < len(events):
            events[i + 1].set()

    tasks = [asyncio.create_task(link(i)) for i in range(len(events))]
    events[0].set()
    await settle()
    assert finished == list(range(50))
    await asyncio.gather(*tasks)


async def test_settle_raises_on_a_task_that_never_stops_moving() -> None:
    async def spin() -> None:
        while True:
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    spinner = asyncio.create_task(spin())
    try:
        with pytest.raises(RuntimeError, match="busy-looping"):
            await settle()
    finally:
        spinner.cancel()


def test_an_autojump_clock_works_again_on_a_second_event_loop() -> None:
    clock = FakeClock(autojump=True)

    async def left_sleeping() -> None:
        # Ends with a sleeper (and the idle check) still pending on this loop.
        asyncio.get_running_loop().create_task(clock.sleep(10))
        await asyncio.sleep(0)

    asyncio.run(left_sleeping())
    asyncio.run(asyncio.wait_for(clock.sleep(5), timeout=5))
    assert clock.monotonic() == 5


async def test_settle_sees_a_wakeup_through_one_plain_callback() -> None:
    loop = asyncio.get_running_loop()
    outer: asyncio.Future[None] = loop.create_future()
    inner: asyncio.Future[None] = loop.create_future()
    outer.add_done_callback(lambda _: inner.set_result(None))
    woken: list[bool] = []

    async def waiter() -> None:
        await inner
        woken.append(True)

    task = asyncio.create_task(waiter())
    await settle()
    assert woken == []
    outer.set_result(None)
    await settle()
    assert woken == [True]
    await task
