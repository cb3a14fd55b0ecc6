"""Public helpers for testing code that uses taskrunner (docs/testing.md).

* `run_until_idle`: run an app's tasks on a memory queue until nothing is left, on a
  fake clock that jumps by itself; re-raise the first task failure.
* `FakeClock`: time that moves only when told, or by itself (``autojump=True``).
* `settle`: let every task that can progress without time passing run.
* `RecordingQueue` / `Dispatches`: what code dispatched, without running it.
* The pytest plugin (`taskrunner.testing.pytest_plugin`, registered through the
  ``pytest11`` entry point): fixtures ``taskrunner_clock``, ``taskrunner_queue``
  and ``dispatched``; inert in tests that do not ask for them.

Example::

    async def test_signup_sends_a_welcome_email() -> None:
        clock = FakeClock(autojump=True)
        queue = InMemoryQueue(clock=clock)  # taskrunner_backends.memory
        await signup(queue, "ada@example.com")
        record = await run_until_idle(app, queue, clock=clock)
        assert [run.task for run in record.succeeded] == ["send_welcome"]
"""

from __future__ import annotations

from taskrunner.testing.clock import FakeClock, settle
from taskrunner.testing.dispatches import Dispatches, DispatchRecord, RecordingQueue
from taskrunner.testing.idle import IdleTimeoutError, RunRecord, TaskRun, run_until_idle

__all__ = [
    "DispatchRecord",
    "Dispatches",
    "FakeClock",
    "IdleTimeoutError",
    "RecordingQueue",
    "RunRecord",
    "TaskRun",
    "run_until_idle",
    "settle",
]
