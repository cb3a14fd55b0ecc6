"""The pytest plugin's fixtures, used as a user's test would use them."""

from __future__ import annotations

from importlib.metadata import entry_points

import msgspec
import pytest

from taskrunner import App, Producer
from taskrunner.backends import open_queue, private_memory_queue
from taskrunner.queue import Queue
from taskrunner.testing import Dispatches, FakeClock, run_until_idle

app = App("plugin")


class Signup(msgspec.Struct):
    email: str


@app.task
async def send_welcome(signup: Signup) -> None: ...


@app.task(unique_for=600)
async def refresh_report() -> None: ...


async def sign_up(queue: Queue, email: str) -> None:
    """The code under test: dispatches, runs nothing."""
    producer = Producer(queue, app)
    await producer.dispatch(send_welcome, Signup(email=email), delay=30)
    await producer.dispatch(refresh_report)
    await producer.dispatch(refresh_report)


def test_the_plugin_is_registered_through_the_pytest11_entry_point() -> None:
    (plugin,) = [e for e in entry_points(group="pytest11") if e.name == "taskrunner"]
    assert plugin.value == "taskrunner.testing.pytest_plugin"


def test_the_clock_jumps_by_itself(taskrunner_clock: FakeClock) -> None:
    assert taskrunner_clock.autojump


async def test_dispatched_records_task_payload_delay_and_unique_key_without_running(
    taskrunner_queue: Queue, dispatched: Dispatches
) -> None:
    await sign_up(taskrunner_queue, "ada@example.com")

    welcome = dispatched.assert_dispatched(
        send_welcome, {"email": "ada@example.com"}, delay_seconds=30
    )
    assert welcome.delay_seconds == 30
    assert welcome.unique_key is None
    first, second = dispatched.of(refresh_report)
    assert first.unique_key is not None
    assert (first.added, second.added) == (True, False)
    assert second.message_id == first.message_id
    # Nothing ran: both messages are still there (one delayed, one ready).
    assert await taskrunner_queue.len() == 2


async def test_assert_dispatched_names_what_was_dispatched_when_nothing_matches(
    taskrunner_queue: Queue, dispatched: Dispatches
) -> None:
    await sign_up(taskrunner_queue, "ada@example.com")

    with pytest.raises(AssertionError, match=r"(?s)found 0;.*ada@example\.com"):
        dispatched.assert_dispatched(send_welcome, {"email": "bob@example.com"})
    with pytest.raises(AssertionError, match="found 0"):
        dispatched.assert_dispatched(send_welcome, delay_seconds=29.9)
    with pytest.raises(AssertionError, match="found 2"):
        dispatched.assert_dispatched(refresh_report)


async def test_what_was_dispatched_runs_with_run_until_idle(
    taskrunner_queue: Queue, taskrunner_clock: FakeClock, dispatched: Dispatches
) -> None:
    await sign_up(taskrunner_queue, "ada@example.com")
    record = await run_until_idle(app, taskrunner_queue, clock=taskrunner_clock)

    assert sorted(r.task or "" for r in record.succeeded) == sorted(
        [refresh_report.name, send_welcome.name]
    )
    assert len(dispatched) == 3


async def test_each_fixture_queue_is_a_store_of_its_own_shared_with_no_url(
    taskrunner_queue: Queue, taskrunner_clock: FakeClock
) -> None:
    """The kit opens its queues through the backends table, on private stores.

    A kit that opened ``memory://NAME`` would share the store with every later test
    (and with the app's own ``memory://`` queues) for the rest of the process.
    """
    other = private_memory_queue(clock=taskrunner_clock)
    await sign_up(taskrunner_queue, "ada@example.com")
    async with open_queue("memory://", "default") as named:
        assert await named.len() == 0
    assert await other.len() == 0
    assert await taskrunner_queue.len() == 2
