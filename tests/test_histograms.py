"""Duration and queue-latency histograms and outcome counters (taskrunner.histograms)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from taskrunner import App, Producer, Runner
from taskrunner.attempts import Attempt, Outcome
from taskrunner.histograms import BUCKETS, UNKNOWN_TASK, Histograms, SeriesSnapshot
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, run_burst

WALL = 1_767_225_600.0


def _attempt(**fields: Any) -> Attempt:
    defaults: dict[str, Any] = {
        "queue": "q",
        "message_id": "1-0",
        "delivery_count": 1,
        "consumer": "c",
        "task": "known",
        "ran": True,
        "seconds": 0.0,
        "outcome": Outcome.SUCCEEDED,
        "enqueued_at": WALL,
        "started_at": WALL,
    }
    return Attempt(**{**defaults, **fields})


def _histograms() -> Histograms:
    return Histograms("q", known_task={"known", "other"}.__contains__)


def _only(histograms: Histograms, task: str = "known") -> SeriesSnapshot:
    [series] = [s for s in histograms.snapshot() if s.task == task]
    return series


def _finish(histograms: Histograms, attempt: Attempt) -> None:
    histograms.attempt_finished(attempt, histograms.attempt_started(attempt))


def test_buckets_rise_from_a_millisecond_to_an_hour() -> None:
    assert BUCKETS[0] == 0.001
    assert BUCKETS[-1] == 3600.0
    assert list(BUCKETS) == sorted(set(BUCKETS))


@pytest.mark.parametrize("index", range(len(BUCKETS)))
def test_a_duration_exactly_on_a_bound_counts_in_that_bucket(index: int) -> None:
    histograms = _histograms()
    bound = BUCKETS[index]

    _finish(histograms, _attempt(seconds=bound))
    _finish(histograms, _attempt(seconds=math.nextafter(bound, math.inf)))

    series = _only(histograms)
    below = series.duration_buckets[index - 1] if index else 0
    assert below == 0
    # le is inclusive: the value on the bound is in it, the one just above is not.
    assert series.duration_buckets[index] == 1
    expected_above = 2 if index + 1 < len(BUCKETS) else None
    if expected_above is not None:
        assert series.duration_buckets[index + 1] == 2
    assert series.duration_count == 2


def test_buckets_are_cumulative_with_sum_and_count() -> None:
    histograms = _histograms()
    for seconds in (0.0, 0.0004, 0.003, 0.003, 0.7, 42.0, 7200.0):
        _finish(histograms, _attempt(seconds=seconds))

    series = _only(histograms)
    by_bound = dict(zip(BUCKETS, series.duration_buckets, strict=True))
    assert by_bound[0.001] == 2
    assert by_bound[0.0025] == 2
    assert by_bound[0.005] == 4
    assert by_bound[0.5] == 4
    assert by_bound[1.0] == 5
    assert by_bound[30.0] == 5
    assert by_bound[60.0] == 6
    # 2 h is above the last bound: only the +Inf bucket (the count) has it.
    assert by_bound[3600.0] == 6
    assert series.duration_count == 7
    assert series.duration_sum == pytest.approx(0.0004 + 0.006 + 0.7 + 42.0 + 7200.0)
    assert list(series.duration_buckets) == sorted(series.duration_buckets)


def test_no_duration_when_the_task_did_not_run_or_was_cut_short_by_shutdown() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(ran=False, seconds=None, outcome=Outcome.DEAD_LETTERED))
    _finish(histograms, _attempt(seconds=12.0, outcome=Outcome.CANCELLED))

    series = _only(histograms)
    assert series.duration_count == 0
    assert series.duration_sum == 0.0
    assert series.outcomes[Outcome.DEAD_LETTERED] == 1
    assert series.outcomes[Outcome.CANCELLED] == 1


def test_failed_and_lost_attempts_that_ran_have_their_duration_recorded() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(seconds=0.2, outcome=Outcome.RETRIED))
    _finish(histograms, _attempt(seconds=0.3, outcome=Outcome.LOST))

    series = _only(histograms)
    assert series.duration_count == 2
    assert series.duration_sum == pytest.approx(0.5)


def test_latency_is_recorded_on_the_first_delivery_only() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(delivery_count=1, started_at=WALL + 0.25))
    # A redelivery's wait includes the retry backoff: not queue latency.
    _finish(histograms, _attempt(delivery_count=2, started_at=WALL + 100.0))

    series = _only(histograms)
    assert series.latency_count == 1
    assert series.latency_sum == 0.25
    assert series.latency_buckets[BUCKETS.index(0.25)] == 1
    assert series.latency_buckets[BUCKETS.index(0.25) - 1] == 0
    assert series.duration_count == 2


def test_latency_of_a_delayed_dispatch_counts_from_when_it_became_due() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(enqueued_at=WALL, due_at=WALL + 600.0, started_at=WALL + 601.0))

    assert _only(histograms).latency_sum == 1.0


def test_latency_from_a_producer_clock_ahead_counts_as_zero() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(enqueued_at=WALL + 5.0, started_at=WALL))

    series = _only(histograms)
    assert (series.latency_count, series.latency_sum) == (1, 0.0)
    assert series.latency_buckets[0] == 1


# -1e400 on the wire decodes to -inf; NaN only from a non-JSON producer.
@pytest.mark.parametrize("enqueued_at", [-math.inf, math.nan, None])
def test_a_latency_that_is_no_finite_number_is_left_out(enqueued_at: float | None) -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(enqueued_at=enqueued_at))

    series = _only(histograms)
    assert (series.latency_count, series.latency_sum) == (0, 0.0)
    assert series.outcomes[Outcome.SUCCEEDED] == 1


def test_every_outcome_is_counted_and_every_one_is_exported() -> None:
    histograms = _histograms()
    for times, outcome in enumerate(Outcome, start=1):
        for _ in range(times):
            _finish(histograms, _attempt(outcome=outcome))

    outcomes = _only(histograms).outcomes
    assert set(outcomes) == set(Outcome)
    for times, outcome in enumerate(Outcome, start=1):
        assert outcomes[outcome] == times


def test_a_task_seen_once_exports_zero_for_the_other_outcomes() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt())

    outcomes = _only(histograms).outcomes
    assert outcomes[Outcome.SUCCEEDED] == 1
    assert sum(outcomes.values()) == 1


def test_unknown_and_unreadable_task_names_share_one_label() -> None:
    histograms = _histograms()
    for i in range(1000):
        _finish(
            histograms,
            _attempt(task=f"hostile-{i}", ran=False, seconds=None, outcome=Outcome.DEAD_LETTERED),
        )
    _finish(histograms, _attempt(task=None, ran=False, seconds=None, outcome=Outcome.HANDLED))
    _finish(histograms, _attempt(task="x" * 100_000, ran=False, seconds=None))
    _finish(histograms, _attempt(task="known"))

    snapshot = histograms.snapshot()
    assert [s.task for s in snapshot] == ["known", UNKNOWN_TASK]
    unknown = _only(histograms, UNKNOWN_TASK)
    assert unknown.outcomes[Outcome.DEAD_LETTERED] == 1000
    assert unknown.outcomes[Outcome.HANDLED] == 1
    assert unknown.latency_count == 1002
    # Nothing of the hostile names is kept.
    assert len(histograms._series) == 1


def test_a_registered_task_that_failed_before_running_keeps_its_name() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(task="other", ran=False, seconds=None, outcome=Outcome.HANDLED))

    assert _only(histograms, "other").outcomes[Outcome.HANDLED] == 1


def test_a_task_literally_named_like_the_unknown_label_cannot_fake_it_apart() -> None:
    histograms = Histograms("q", known_task=lambda name: True)
    _finish(histograms, _attempt(task=UNKNOWN_TASK))

    assert [s.task for s in histograms.snapshot()] == [UNKNOWN_TASK]


def test_without_the_app_a_name_is_trusted_once_its_task_ran() -> None:
    histograms = Histograms("q")
    _finish(histograms, _attempt(task="t", ran=False, seconds=None, outcome=Outcome.DEAD_LETTERED))
    _finish(histograms, _attempt(task="t", ran=True))
    _finish(histograms, _attempt(task="t", ran=False, seconds=None, outcome=Outcome.DEAD_LETTERED))

    assert _only(histograms, UNKNOWN_TASK).outcomes[Outcome.DEAD_LETTERED] == 1
    known = _only(histograms, "t").outcomes
    assert (known[Outcome.SUCCEEDED], known[Outcome.DEAD_LETTERED]) == (1, 1)


def test_nothing_is_exported_before_the_first_attempt() -> None:
    assert _histograms().snapshot() == []


def test_a_snapshot_does_not_change_when_recording_goes_on() -> None:
    histograms = _histograms()
    _finish(histograms, _attempt(seconds=1.0))
    before = _only(histograms)
    _finish(histograms, _attempt(seconds=1.0))

    assert before.duration_count == 1
    assert before.outcomes[Outcome.SUCCEEDED] == 1
    assert _only(histograms).duration_count == 2


async def test_a_runner_records_durations_and_latencies_on_the_fake_clock() -> None:
    clock = FakeClock(wall_start=WALL)
    app = App("tests")
    queue = InMemoryQueue(clock=clock)

    @app.task(name="slow")
    async def slow() -> None:
        await clock.sleep(2.5)

    @app.task(name="flaky", max_retries=1)
    async def flaky() -> None:
        raise RuntimeError("no")

    producer = Producer(queue, app, clock=clock)
    await producer.dispatch(slow)
    await producer.dispatch(slow, delay=30)
    await producer.dispatch(flaky)
    runner = Runner(queue, app, config(retry_base_seconds=1.0), clock=clock)
    await run_burst(runner, clock)

    slow_series = _only(runner.histograms, "slow")
    # Fake time: exactly 2.5 s each, on the bound, so in the 2.5 bucket.
    assert slow_series.duration_count == 2
    assert slow_series.duration_sum == 5.0
    assert slow_series.duration_buckets[BUCKETS.index(2.5)] == 2
    assert slow_series.duration_buckets[BUCKETS.index(1.0)] == 0
    assert slow_series.outcomes[Outcome.SUCCEEDED] == 2
    # Started as soon as it was due (the delayed one: within one clock step).
    assert slow_series.latency_count == 2
    assert slow_series.latency_sum <= 1.0
    flaky_series = _only(runner.histograms, "flaky")
    assert flaky_series.outcomes[Outcome.RETRIED] == 1
    assert flaky_series.outcomes[Outcome.DEAD_LETTERED] == 1
    assert flaky_series.latency_count == 1
    assert flaky_series.duration_count == 2


async def test_a_runner_counts_a_message_of_an_unknown_task_under_the_fixed_label() -> None:
    clock = FakeClock(wall_start=WALL)
    app = App("tests")
    queue = InMemoryQueue(clock=clock)

    @app.task(name="known")
    async def known() -> None:
        pass

    body = b'{"v":1,"id":"1","task":"%s","payload":null,"enqueued_at":%f}'
    await queue.add([body % (b"evil-" * 20, WALL), b"not json at all"])
    await Producer(queue, app, clock=clock).dispatch(known)
    runner = Runner(queue, app, config(), clock=clock)
    await run_burst(runner, clock)

    assert {s.task for s in runner.histograms.snapshot()} == {"known", UNKNOWN_TASK}
    assert _only(runner.histograms, UNKNOWN_TASK).outcomes[Outcome.DEAD_LETTERED] == 2
