"""The pytest plugin: fixtures for testing code that uses taskrunner.

Registered through the ``pytest11`` entry point, so installing taskrunner makes the
fixtures available; it defines no hooks, so a test that asks for none of them runs
exactly as without it. The fixtures are plain (synchronous) fixtures: they work with
any way of running ``async def`` tests.

* ``taskrunner_clock``: a fresh `FakeClock(autojump=True)`.
* ``taskrunner_queue``: a fresh in-memory queue on that clock, recording dispatches.
* ``dispatched``: the `Dispatches` recorded on ``taskrunner_queue`` so far.

Example::

    async def test_signup(taskrunner_queue: Queue, dispatched: Dispatches) -> None:
        await signup(Producer(taskrunner_queue, app), "ada@example.com")
        dispatched.assert_dispatched("send_welcome", {"email": "ada@example.com"})
"""

from __future__ import annotations

from typing import cast

import pytest

from taskrunner.backends import private_memory_queue
from taskrunner.queue import Queue
from taskrunner.testing.clock import FakeClock
from taskrunner.testing.dispatches import Dispatches, RecordingQueue

__all__ = ["dispatched", "taskrunner_clock", "taskrunner_queue"]


@pytest.fixture
def taskrunner_clock() -> FakeClock:
    """A fresh `FakeClock` that jumps to the next deadline whenever the loop is idle."""
    return FakeClock(autojump=True)


@pytest.fixture
def taskrunner_queue(taskrunner_clock: FakeClock) -> Queue:
    """A fresh in-memory queue on ``taskrunner_clock``; every dispatch onto it is recorded.

    Pass it to `run_until_idle` to run what was dispatched (it knows its clock).
    """
    return cast(
        Queue, RecordingQueue(private_memory_queue(clock=taskrunner_clock), clock=taskrunner_clock)
    )


@pytest.fixture
def dispatched(taskrunner_queue: Queue) -> Dispatches:
    """What code under test dispatched onto ``taskrunner_queue`` (nothing runs)."""
    return cast(RecordingQueue, taskrunner_queue).dispatches
