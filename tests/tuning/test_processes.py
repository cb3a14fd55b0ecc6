"""Tuning mode across processes (issue 17, item 2).

Two and three simulated processes share one queue, each with its own real
`Autoscaler`, seeing the others' sizes as published after their last resize. Each aims
at an equal share when it resizes, and moves to it when in band but more than 15 %
away, so the split cannot drift (it drifted to 3 + 19 and 9 + 99 when each scaled its
current share). The monitor test checks the republication itself.
"""

from __future__ import annotations

import pytest

from taskrunner import TuningConfig
from taskrunner.monitor import Monitor
from taskrunner.pool import WorkerPool
from taskrunner.stats import StatsRecorder
from taskrunner.testing import FakeClock
from taskrunner.tuning import Autoscaler

from ..support import make
from .figures import STEADY, TUNING
from .simulation import Run, simulate

# Largest ratio of the largest to the smallest process, settled (from a minute into a
# phase): at all times, and for 95 % of the decisions. Measured over seeds 0-4, steady:
# two processes 1.16-1.20 (p95 1.06-1.11), three 1.18-1.30 (p95 1.08-1.15); three
# processes have about 13 workers each, so one worker is 8 %. Before the in-band
# convergence step three processes reached 2.11 (p95 2.00); before the one-worker step
# fell to the processes at or beyond their share, 1.75 (seed 3, 8 + 14 + 12 workers).
MAX_RATIO = 1.4
P95_RATIO = 1.2


def _ratios(run: Run, start: str, end: str) -> list[float]:
    begin = run.phase_starts[start] + 60
    stop = run.phase_starts[end]
    return sorted(max(s) / min(s) for t, s in run.sizes if begin <= t < stop)


@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("seed", range(5))
def test_processes_share_the_load_within_a_stated_ratio(processes: int, seed: int) -> None:
    run = simulate(STEADY, TUNING, seed=seed, processes=processes)

    for start, end in (("steady", "burst"), ("burst", "after")):
        ratios = _ratios(run, start, end)
        assert ratios[-1] <= MAX_RATIO, (start, ratios[-1])
        assert ratios[int(0.95 * len(ratios))] <= P95_RATIO, (start, ratios[-5:])
    totals = [sum(sizes) for _, sizes in run.sizes]
    assert max(totals) <= processes * TUNING.max_workers
    # The cluster as a whole is sized for the load, not each process for all of it.
    steady = [sum(s) for t, s in run.sizes if t >= run.phase_starts["steady"] + 60][:500]
    assert 36 <= sum(steady) / len(steady) <= 45
    assert totals[-1] == processes * TUNING.min_workers  # idle: all shrank to min


async def test_the_monitor_republishes_its_size_after_a_resize() -> None:
    clock = FakeClock()
    _, queue = make(clock)
    await queue.add([b"x"] * 1000)
    tuning = TuningConfig(min_workers=1, max_workers=100, desired_wait_seconds=1)
    pool = WorkerPool(5)
    stats = StatsRecorder()
    stats.attempt_finished("t", 0.5, ok=True)
    stats.attempt_finished("t", 0.5, ok=False)
    monitor = Monitor(
        queue,
        pool,
        stats,
        instance="me",
        clock=clock,
        interval_seconds=1,
        spawn=lambda coroutine: pytest.fail("no hook here"),
        autoscaler=Autoscaler(pool, tuning, clock=clock),
    )

    await monitor.observe()

    assert pool.capacity > 5  # 1000 waiting, 0.5 s each: it grew
    published = {info.instance: info.workers for info in await queue.live_workers()}
    assert published == {"me": pool.capacity}
    # The republished entry is the first one resized, not one with fields left out.
    [entry] = await queue.live_workers()
    assert (entry.succeeded, entry.failed, entry.busy) == (1, 1, 0)


@pytest.mark.parametrize(
    ("current", "size", "reason"),
    [
        (30, 20, "converging"),  # in band, 50 % above its equal share of 20
        (23, 23, "in_band"),  # 15 % above: within the slack, held
        (24, 20, "converging"),  # 20 % above
        (10, 20, "converging"),  # below its share: grows to it
    ],
)
def test_a_process_in_band_moves_to_its_equal_share_when_far_from_it(
    current: int, size: int, reason: str
) -> None:
    clock = FakeClock()
    pool = WorkerPool(current)
    tuning = TuningConfig(
        min_workers=1, max_workers=100, desired_wait_seconds=2, wait_tolerance_seconds=0.5
    )
    scaler = Autoscaler(pool, tuning, clock=clock)

    # 60 workers in three processes, 0.5 s tasks, 240 waiting: a 2 s wait, in band.
    decision = scaler.apply(backlog=240, workers=60, busy=60, average_seconds=0.5, processes=3)

    assert (decision.size, decision.reason, pool.capacity) == (size, reason, size)
