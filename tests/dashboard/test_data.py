"""The dashboard's data layer: paging, the throughput sampler, dead-letter decoding."""

from __future__ import annotations

import msgspec
import pytest

from taskrunner.dashboard.data import (
    SAMPLE_WINDOW_SECONDS,
    QueueRow,
    Sampler,
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
