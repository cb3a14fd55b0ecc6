"""The flow soaks' judges on synthetic times, and the driver's dispatch record.

Each check has a control one fact away (an end at the very instant of the next start,
a count at the bound), so a judge that flags everything or nothing fails one of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import taskrunner

from .app import Job, app, work
from .checker import Attempt, Outcome
from .driver import Settings, Soak
from .flow import KeyFigures, flow_figures
from .flow_rate import max_in_window, rate_figures
from .records import Dispatched, read_records


def _attempt(
    job: int, msg: str, start: float, end: float, outcome: Outcome = "ok", dc: int = 1
) -> Attempt:
    return Attempt(1, job, msg, dc, "c", start, end, outcome)


def test_running_counts_overlaps_and_an_end_frees_the_slot_at_once() -> None:
    attempts = [
        _attempt(0, "m0", 0.0, 2.0),
        _attempt(1, "m1", 1.0, 3.0),
        _attempt(2, "m2", 2.0, 4.0),  # starts the instant m0 ends
    ]
    figures = flow_figures(attempts, {0: "k", 1: "k", 2: "k"})
    assert figures["k"].max_running == 2
    assert figures["k"].starts_to_limit == 2


def test_a_third_overlapping_attempt_is_seen() -> None:
    attempts = [
        _attempt(0, "m0", 0.0, 2.0),
        _attempt(1, "m1", 1.0, 3.0),
        _attempt(2, "m2", 1.999, 4.0),
    ]
    assert flow_figures(attempts, {0: "k", 1: "k", 2: "k"})["k"].max_running == 3


def test_keys_are_counted_apart() -> None:
    attempts = [_attempt(n, f"m{n}", 0.0, 1.0) for n in range(4)]
    figures = flow_figures(attempts, {0: "a", 1: "a", 2: "b", 3: "b"})
    assert {k: f.max_running for k, f in figures.items()} == {"a": 2, "b": 2}


def test_a_killed_attempt_stops_running_at_the_kill_but_holds_until_its_message_runs() -> None:
    attempts = [
        _attempt(0, "m0", 0.0, 2.0, "killed"),
        _attempt(0, "m0", 5.0, 6.0, dc=2),  # the reclaimed redelivery
        _attempt(1, "m1", 1.0, 4.0),
        _attempt(2, "m2", 3.0, 4.5),  # the slot m0's message still held
    ]
    figures = flow_figures(attempts, {0: "k", 1: "k", 2: "k"})["k"]
    assert figures.max_running == 2
    assert figures.max_held == 3


def test_a_slot_taken_after_the_redelivery_started_is_not_held_twice() -> None:
    attempts = [
        _attempt(0, "m0", 0.0, 2.0, "killed"),
        _attempt(0, "m0", 5.0, 6.0, dc=2),
        _attempt(1, "m1", 1.0, 7.0),
        _attempt(2, "m2", 6.0, 8.0),  # m0's redelivery ended at 6: its slot is free
    ]
    assert flow_figures(attempts, {0: "k", 1: "k", 2: "k"})["k"].max_held == 2


def test_no_attempts_no_keys() -> None:
    assert flow_figures([], {}) == {}
    assert KeyFigures().max_running == 0


def test_window_is_half_open() -> None:
    assert max_in_window([0.0, 0.5, 0.999, 1.0]) == 3
    assert max_in_window([0.0, 0.5, 0.9999, 1.0, 1.2]) == 4  # [0.5, 1.5)
    assert max_in_window([]) == 0


def _even(per_second: int, seconds: int) -> list[tuple[float, float]]:
    # A hair slower than per_second, so rounding never puts per_second + 1 in [t, t + 1).
    step = (1.0 + 1e-9) / per_second
    return [(i * step, i * step) for i in range(per_second * seconds)]


def test_rate_on_the_mark_passes() -> None:
    figures = rate_figures(_even(100, 10), rate=100.0, burst=1, seconds=10.0, backlog_left=5)
    assert figures.per_second == pytest.approx(100.0)
    assert figures.max_completions_1s == 100
    assert figures.misses == []


@pytest.mark.parametrize(("per_second", "missed"), [(95, False), (94, True), (105, False)])
def test_rate_tolerance_edges(per_second: int, missed: bool) -> None:
    figures = rate_figures(
        _even(per_second, 10), rate=100.0, burst=10, seconds=10.0, backlog_left=5
    )
    assert bool(figures.misses) is missed


def test_a_burst_above_the_bound_is_missed_and_one_at_it_is_not() -> None:
    lines = _even(100, 10)
    at_bound = [*lines, *[(0.0005, 0.0005)] * 10]  # 110 in the first second
    above = [*at_bound, (0.0006, 0.0006)]
    ok = rate_figures(at_bound, rate=100.0, burst=10, seconds=10.0, backlog_left=5)
    assert ok.max_completions_1s == 110
    assert not any("in 1 s" in m for m in ok.misses)
    bad = rate_figures(above, rate=100.0, burst=10, seconds=10.0, backlog_left=5)
    assert any("in 1 s" in m for m in bad.misses)


def test_a_drained_backlog_is_a_miss() -> None:
    figures = rate_figures(_even(100, 10), rate=100.0, burst=1, seconds=10.0, backlog_left=0)
    assert figures.misses == ["the backlog ran out: the limit did not bind throughout"]


async def test_the_driver_records_dispatched_ids_it_can_encode(tmp_path: Path) -> None:
    # dispatch_many returns `Dispatched` ids, a str subclass msgspec refuses to encode.
    soak = Soak(Settings(), tmp_path)
    async with taskrunner.open_queue("memory://soak-dispatch", app.queue) as queue:
        await soak._send(taskrunner.Producer(queue, app), work, [Job(0, 0.1), Job(1, 0.1)])
    soak._log.close()
    [file] = read_records(tmp_path)
    [record] = file.records
    assert isinstance(record, Dispatched)
    assert record.jobs == [0, 1]
    assert len(record.msgs) == 2
    assert all(type(m) is str for m in record.msgs)
