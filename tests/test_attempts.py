"""The executor tells observers about every delivery: start, then the settled outcome."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from taskrunner import (
    App,
    Attempt,
    ConfigurationError,
    Delivery,
    Outcome,
    Producer,
    Runner,
    RunnerConfig,
    TaskFailure,
    current_task,
)
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, run_burst, running

SPAN: contextvars.ContextVar[str] = contextvars.ContextVar("span")


@dataclass
class Recorder:
    """Records each call; sets a context variable around the attempt, as a tracer does."""

    started: list[Attempt] = field(default_factory=list)
    finished: list[tuple[Attempt, object]] = field(default_factory=list)

    def attempt_started(self, attempt: Attempt) -> object:
        # A copy: the executor fills the same object in later.
        self.started.append(replace(attempt))
        return SPAN.set(f"span-{attempt.message_id}-{attempt.delivery_count}")

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        assert isinstance(token, contextvars.Token)
        SPAN.reset(token)
        self.finished.append((replace(attempt), token))

    def outcomes(self) -> list[Outcome | None]:
        return [attempt.outcome for attempt, _ in self.finished]


def _runner(queue: InMemoryQueue, app: App, clock: FakeClock, **overrides: object) -> Runner:
    recorder = overrides.pop("recorder")
    assert isinstance(recorder, Recorder)
    return Runner(queue, app, config(observers=(recorder,), **overrides), clock=clock)


async def test_a_success_is_seen_before_and_after_with_its_fields() -> None:
    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()
    seen_inside: list[str] = []

    @app.task
    async def job() -> None:
        seen_inside.append(SPAN.get())
        await clock.sleep(3)

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(job, headers={"traceparent": "00-abc-def-01"})
    await clock.advance(2)  # two seconds in the queue
    await run_burst(_runner(queue, app, clock, recorder=recorder), clock)

    [started] = recorder.started
    assert (started.message_id, started.task, started.delivery_count) == (message_id, job.name, 1)
    assert started.headers == {"traceparent": "00-abc-def-01"}
    assert started.outcome is None
    assert started.seconds is None
    assert started.latency_seconds is not None
    assert started.latency_seconds >= 2.0
    [(finished, _)] = recorder.finished
    assert finished.outcome is Outcome.SUCCEEDED
    assert finished.ran is True
    assert finished.seconds == pytest.approx(3.0, abs=0.01)
    assert finished.error is None
    assert seen_inside == [f"span-{message_id}-1"]  # the task ran inside the observer's context


async def test_a_plain_def_task_sees_the_observers_context_in_its_thread() -> None:
    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()
    seen: list[str] = []

    @app.task
    def job() -> None:
        seen.append(SPAN.get())

    message_id = await Producer(queue, app, clock=clock).dispatch(job)
    await run_burst(_runner(queue, app, clock, recorder=recorder), clock)

    assert seen == [f"span-{message_id}-1"]


async def test_retries_then_dead_letter_give_one_pair_per_delivery() -> None:
    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()

    @app.task(max_retries=2)
    async def broken() -> None:
        raise RuntimeError("disk full")

    await Producer(queue, app, clock=clock).dispatch(broken)
    await run_burst(_runner(queue, app, clock, recorder=recorder), clock)

    assert recorder.outcomes() == [Outcome.RETRIED, Outcome.RETRIED, Outcome.DEAD_LETTERED]
    assert [a.delivery_count for a, _ in recorder.finished] == [1, 2, 3]
    for attempt, _ in recorder.finished:
        assert isinstance(attempt.error, RuntimeError)
        assert attempt.description == "RuntimeError: disk full"
    assert len(recorder.started) == 3


async def test_a_handled_failure_reads_handled() -> None:
    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()
    handled: list[TaskFailure] = []

    @app.task(max_retries=0)
    async def broken() -> None:
        raise ValueError("nope")

    await Producer(queue, app, clock=clock).dispatch(broken)
    runner = _runner(queue, app, clock, recorder=recorder, failed_task_handler=handled.append)
    await run_burst(runner, clock)

    assert recorder.outcomes() == [Outcome.HANDLED]
    assert len(handled) == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\x00 not json", "malformed message"),
        (b'{"v":1,"id":"x","task":"nobody","payload":null,"enqueued_at":0}', "nobody"),
    ],
)
async def test_a_body_that_never_runs_is_seen_with_what_is_known(body: bytes, reason: str) -> None:
    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()
    [message_id] = await queue.add([body])

    await run_burst(_runner(queue, app, clock, recorder=recorder), clock)

    [(attempt, _)] = recorder.finished
    assert attempt.message_id == message_id
    assert attempt.outcome is Outcome.DEAD_LETTERED
    assert attempt.ran is False
    assert attempt.seconds is None
    assert attempt.description is not None
    assert reason in attempt.description
    if reason == "nobody":
        # The name is the wire's, unchecked: observers must bound their own labels.
        assert attempt.task == "nobody"
    else:
        assert attempt.task is None


async def test_an_observer_that_raises_is_logged_and_the_message_still_completes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        def attempt_started(self, attempt: Attempt) -> object:
            raise RuntimeError("observer bug on start")

        def attempt_finished(self, attempt: Attempt, token: object) -> None:
            raise RuntimeError("observer bug on finish")

    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()
    ran: list[int] = []

    @app.task
    async def job(n: int) -> None:
        ran.append(n)

    await Producer(queue, app, clock=clock).dispatch_many(job, [1, 2])
    runner = Runner(queue, app, config(observers=(Broken(), recorder)), clock=clock)
    await run_burst(runner, clock)

    assert sorted(ran) == [1, 2]
    assert recorder.outcomes() == [Outcome.SUCCEEDED, Outcome.SUCCEEDED]
    assert await queue.len() == 0
    logged = [r.getMessage() for r in caplog.records if "observer" in r.getMessage()]
    assert len(logged) == 4


async def test_a_task_cancelled_at_shutdown_reads_cancelled() -> None:
    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()
    started = asyncio.Event()

    @app.task
    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    await Producer(queue, app, clock=clock).dispatch(forever)
    runner = _runner(queue, app, clock, recorder=recorder)
    async with running(runner):
        await asyncio.wait_for(started.wait(), 5)
        runner.skip_drain()
        runner.stop()

    assert recorder.outcomes() == [Outcome.CANCELLED]
    assert await queue.len() == 1  # released for redelivery


class LosingQueue(InMemoryQueue):
    """Reports every ack's lease lost (another worker took the message)."""

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        return list(deliveries)


async def test_an_ack_that_finds_the_lease_lost_reads_lost() -> None:
    clock = FakeClock()
    app, queue = App("tests"), LosingQueue(clock=clock)
    recorder = Recorder()

    @app.task
    async def job() -> None: ...

    await Producer(queue, app, clock=clock).dispatch(job)
    runner = _runner(queue, app, clock, recorder=recorder)
    async with running(runner):
        for _ in range(1000):
            if recorder.finished:
                break
            await asyncio.sleep(0)

    assert recorder.outcomes()[:1] == [Outcome.LOST]


async def test_queue_latency_of_a_delayed_dispatch_counts_from_its_due_time() -> None:
    clock = FakeClock()
    app, queue = App("tests"), InMemoryQueue(clock=clock)
    recorder = Recorder()

    @app.task
    async def job() -> None:
        assert current_task().delivery_count == 1

    await Producer(queue, app, clock=clock).dispatch(job, delay=60)
    await run_burst(_runner(queue, app, clock, recorder=recorder), clock)

    [started] = recorder.started
    assert started.due_at is not None
    assert started.enqueued_at is not None
    assert started.due_at - started.enqueued_at == pytest.approx(60.0)
    assert started.latency_seconds is not None
    assert started.latency_seconds < 5.0  # not the 60 s it was delayed


def test_latency_is_never_negative_under_clock_skew() -> None:
    attempt = Attempt(
        queue="q", message_id="1-0", delivery_count=1, consumer="c", enqueued_at=110.0
    )
    attempt.started_at = 100.0
    assert attempt.latency_seconds == 0.0
    assert (
        Attempt(queue="q", message_id="1-0", delivery_count=1, consumer="c").latency_seconds is None
    )


@pytest.mark.parametrize("observers", [[Recorder()], (object(),), ("text",)])
def test_observers_must_be_a_tuple_of_observers(observers: object) -> None:
    with pytest.raises(ConfigurationError, match="observer"):
        RunnerConfig(observers=observers)  # type: ignore[arg-type]
