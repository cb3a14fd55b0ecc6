"""The dashboard's data layer: paging, the throughput sampler, dead-letter decoding."""

from __future__ import annotations

import msgspec
import pytest

from taskrunner.dashboard.data import (
    SAMPLE_WINDOW_SECONDS,
    QueueRow,
    Sampler,
    WorkerRow,
    dead_letter_view,
    page_bounds,
)
from taskrunner.queue import DeadLetter
from taskrunner.testing import FakeClock


@pytest.mark.parametrize(
    ("total", "page", "size", "expected"),
    [
        (0, 1, 50, (0, 0, 1)),  # no queues: one empty page
        (50, 1, 50, (0, 50, 1)),  # exactly one page
        (51, 2, 50, (50, 51, 2)),  # one past a page boundary
        (1000, 20, 50, (950, 1000, 20)),
        (1000, 21, 50, (950, 1000, 20)),  # past the end: the last page
        (1000, 10**9, 50, (950, 1000, 20)),
    ],
)
def test_page_bounds(total: int, page: int, size: int, expected: tuple[int, int, int]) -> None:
    assert page_bounds(total, page, size) == expected


def _rows(**dead: int) -> list[QueueRow]:
    return [QueueRow(name=name, dead=count) for name, count in dead.items()]


async def test_dead_per_second_is_the_change_of_dead_counts_over_the_elapsed_time() -> None:
    clock = FakeClock()
    sampler = Sampler(clock=clock)
    sampler.record(_rows(a=5, b=0))
    await clock.advance(2)
    # b's count went down (a purge): that is no negative rate, and a's +4 counts.
    sampler.record(_rows(a=9, b=0, c=100))
    [point] = sampler.series()

    assert point["dead_per_second"] == pytest.approx(2.0)  # 4 in 2 s; c is new, not counted
    assert point["completed_per_second"] is None  # no in-process runner


async def test_completed_per_second_comes_from_the_source() -> None:
    clock = FakeClock()
    completed = [10]
    sampler = Sampler(clock=clock, completed_source=lambda: completed[0])
    sampler.record([])
    await clock.advance(4)
    completed[0] = 30
    sampler.record([])

    assert sampler.series()[0]["completed_per_second"] == pytest.approx(5.0)


def _worker(
    instance: str, succeeded: int | None, failed: int | None, queue: str = "q"
) -> WorkerRow:
    return WorkerRow(
        queue=queue,
        instance=instance,
        workers=4,
        busy=0,
        average_seconds=None,
        seen_seconds_ago=0.0,
        succeeded=succeeded,
        failed=failed,
    )


async def test_completed_and_failed_per_second_come_from_the_workers_published_counts() -> None:
    clock = FakeClock()
    sampler = Sampler(clock=clock)
    sampler.record([], [_worker("a", 100, 7), _worker("b", 50, 0), _worker("a", 5, 5, queue="r")])
    await clock.advance(2)
    sampler.record(
        [],
        [
            _worker("a", 120, 9),  # +20, +2
            _worker("b", 10, 0),  # went down: a new base, not a negative rate
            _worker("a", 9, 5, queue="r"),  # the same instance on another queue: +4
            _worker("c", 1000, 1000),  # first sight: the base only
        ],
    )
    await clock.advance(2)
    sampler.record([], [_worker("b", 16, 1), _worker("c", 1000, 1003)])  # a stopped

    first, second = sampler.series()
    assert first["completed_per_second"] == pytest.approx(24 / 2)
    assert first["failed_per_second"] == pytest.approx(2 / 2)
    assert second["completed_per_second"] == pytest.approx(6 / 2)
    assert second["failed_per_second"] == pytest.approx(4 / 2)


async def test_rates_are_unknown_when_no_worker_publishes_counts_and_zero_when_idle() -> None:
    clock = FakeClock()
    sampler = Sampler(clock=clock)
    sampler.record([], [_worker("old", None, None)])
    await clock.advance(1)
    sampler.record([], [_worker("old", None, None)])
    await clock.advance(1)
    sampler.record([], [_worker("old", None, None), _worker("new", 3, 0)])
    await clock.advance(1)
    sampler.record([], [_worker("old", None, None), _worker("new", 3, 0)])

    rates = [(p["completed_per_second"], p["failed_per_second"]) for p in sampler.series()]
    assert rates == [(None, None), (0.0, 0.0), (0.0, 0.0)]


async def test_the_in_process_source_overrides_the_completed_rate_only() -> None:
    clock = FakeClock()
    completed = [0]
    sampler = Sampler(clock=clock, completed_source=lambda: completed[0])
    sampler.record([], [_worker("a", 0, 0)])
    await clock.advance(1)
    completed[0] = 7
    sampler.record([], [_worker("a", 3, 2)])

    [point] = sampler.series()
    assert (point["completed_per_second"], point["failed_per_second"]) == (7.0, 2.0)


async def test_samples_closer_than_half_a_second_are_one() -> None:
    clock = FakeClock()
    sampler = Sampler(clock=clock)
    sampler.record(_rows(a=0))
    await clock.advance(0.49)
    sampler.record(_rows(a=10))
    assert sampler.series() == []
    await clock.advance(0.02)
    sampler.record(_rows(a=10))
    assert sampler.series()[0]["dead_per_second"] == pytest.approx(10 / 0.51)


async def test_samples_older_than_15_minutes_are_dropped() -> None:
    clock = FakeClock()
    sampler = Sampler(clock=clock)
    sampler.record([])
    await clock.advance(1)
    sampler.record([])  # the first point, at t=1
    await clock.advance(SAMPLE_WINDOW_SECONDS)
    sampler.record([])  # t=901: the first point is exactly 900 s old, kept
    assert len(sampler.series()) == 2
    await clock.advance(0.6)
    sampler.record([])  # t=901.6: now it is older than the window
    assert [round(p["seconds_ago"], 1) for p in sampler.series()] == [0.6, 0.0]


def test_a_dead_letter_with_an_envelope_is_decoded() -> None:
    from taskrunner.codec import encode_envelope
    from taskrunner.messages import Envelope

    body = encode_envelope(
        Envelope(
            id="t1", task="emails.send", payload=msgspec.Raw(b'{"to":"<x>"}'), enqueued_at=5.0
        ),
        max_bytes=10_000,
    )
    letter = DeadLetter(
        message_id="d1", original_id="m1", body=body, reason="r", delivery_count=3, dead_at=7.0
    )
    view = dead_letter_view(letter)

    assert (view.task, view.task_id, view.enqueued_at) == ("emails.send", "t1", 5.0)
    assert view.payload == '{"to":"<x>"}'
    assert view.delivery_count == 3
