"""`run_until_idle` takes the clock of the ``taskrunner_queue`` fixture's queue itself."""

from __future__ import annotations

import pytest

from taskrunner import App, Producer
from taskrunner.queue import Queue
from taskrunner.testing import FakeClock, run_until_idle
from taskrunner_backends.memory import InMemoryQueue

app = App("fixture-clock")
ran: list[int] = []


@app.task(name="fixture_clock.later")
async def later(n: int) -> None:
    ran.append(n)


async def test_the_fixture_queue_runs_without_naming_its_clock(
    taskrunner_queue: Queue, taskrunner_clock: FakeClock
) -> None:
    ran.clear()
    started = taskrunner_clock.time()
    await Producer(taskrunner_queue, app).dispatch("fixture_clock.later", 7, delay=3600)

    record = await run_until_idle(app, taskrunner_queue)

    assert ran == [7]
    assert [r.task for r in record.succeeded] == ["fixture_clock.later"]
    # The delay passed on the fixture's clock, not on a fresh one.
    assert taskrunner_clock.time() - started >= 3600


async def test_a_queue_that_does_not_say_its_clock_still_needs_one() -> None:
    queue = InMemoryQueue(clock=FakeClock(autojump=True))

    with pytest.raises(ValueError, match="needs clock="):
        await run_until_idle(app, queue)
