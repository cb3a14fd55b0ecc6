"""Tuning mode: the control law, a simulated load, and the runner resizing itself."""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import dataclass

import pytest

from taskrunner import Producer, Runner, RunnerConfig, TuningConfig
from taskrunner.fetcher import Fetcher
from taskrunner.pool import WorkerPool
from taskrunner.testing import FakeClock
from taskrunner.tuning import Autoscaler, Signals, decide_pool_size, predicted_wait

from .support import make, running

BAND = TuningConfig(
    min_workers=1,
    max_workers=50,
    desired_wait_seconds=2.0,
    wait_tolerance_seconds=0.5,
    cooldown_seconds=5,
)


def signals(
    backlog: int,
    *,
    trend: float | None = 0.0,
    workers: int = 10,
    busy: int | None = None,
    average: float | None = 0.2,
) -> Signals:
    return Signals(
        backlog=backlog,
        trend_per_second=trend,
        workers=workers,
        busy=workers if busy is None else busy,
        average_seconds=average,
    )


@pytest.mark.parametrize(
    ("current", "seen", "tuning", "size", "reason"),
    [
        # predicted 4.0s > 2.5s: serve 50/s and bring the backlog to the band's edge.
        (10, signals(200), BAND, 12, "above_band"),
        # same, but the backlog already falls 20/s fast enough: hold.
        (10, signals(200, trend=-20), BAND, 10, "draining"),
        # predicted 1.0s < 1.5s: shrink, at most 10 % per decision.
        (10, signals(50), BAND, 9, "below_band"),
        (10, signals(100), BAND, 10, "in_band"),
        (10, signals(125), BAND, 10, "in_band"),
        (10, signals(0), BAND, 9, "queue_empty"),
        (5, signals(0), BAND, 4, "queue_empty"),
        (1, signals(0), BAND, 1, "queue_empty"),
        (10, signals(10, average=None), BAND, 10, "no_estimate"),
        (10, signals(10_000), BAND, 50, "above_band"),
        # one process of four: its share of the cluster-wide target (52.5 x 10/40).
        (10, signals(1000, workers=40), BAND, 13, "above_band"),
        # rounding would stay at 10 outside a narrow band: step by one toward it.
        (
            10,
            signals(80),
            TuningConfig(
                min_workers=1, max_workers=50, desired_wait_seconds=2, wait_tolerance_seconds=0.1
            ),
            9,
            "below_band",
        ),
        (
            10,
            signals(80, trend=3),
            TuningConfig(
                min_workers=1, max_workers=50, desired_wait_seconds=2, wait_tolerance_seconds=0.1
            ),
            10,
            "filling",
        ),
        (
            3,
            signals(0),
            TuningConfig(min_workers=3, max_workers=8, desired_wait_seconds=1),
            3,
            "queue_empty",
        ),
    ],
)
def test_control_law_golden_values(
    current: int, seen: Signals, tuning: TuningConfig, size: int, reason: str
) -> None:
    decision = decide_pool_size(current, seen, tuning)

    assert (decision.size, decision.reason) == (size, reason)


@pytest.mark.parametrize(
    ("backlog", "current", "size"),
    [
        # 1.4 s, below the band: the cluster target is 29.6, 9.9 of it this process's.
        (84, 11, 10),  # above its share: to the share, as ever
        (84, 10, 9),  # at its share, rounding leaves it there: one step down
        (84, 9, 9),  # short of its share already: the step is its peers', it holds
        # 2.6 s, above the band: the cluster target is 30.4, 10.1 of it this process's.
        (156, 9, 10),
        (156, 10, 11),
        (156, 11, 11),  # past its share already: it holds
    ],
)
def test_the_one_worker_step_falls_to_the_processes_at_or_beyond_their_share(
    backlog: int, current: int, size: int
) -> None:
    # Three processes, 30 workers in all (10 each, equal), 0.5 s tasks, 60/s arrivals.
    # A process that took the step while short of its share took every step alone when
    # its peers' hysteresis held them: in the simulation three processes drifted to
    # 8 + 14 + 12 workers.
    seen = Signals(
        backlog=backlog,
        trend_per_second=0.0,
        workers=30,
        busy=30,
        average_seconds=0.5,
        arrivals_per_second=60.0,
        processes=3,
    )

    decision = decide_pool_size(current, seen, BAND)

    assert decision.size == size
    assert decision.reason == ("below_band" if backlog < 90 else "above_band")


def test_predicted_wait_is_duration_times_backlog_over_workers() -> None:
    assert predicted_wait(0.0004, 1000, 8) == pytest.approx(0.05)  # sub-millisecond kept
    assert predicted_wait(None, 0, 8) == 0.0
    assert predicted_wait(None, 5, 8) is None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:  # pragma: no cover - not used here
        raise NotImplementedError


@dataclass
class _Phase:
    arrivals_per_second: float
    duration: float
    seconds: int

    @property
    def ideal_workers(self) -> float:
        return self.arrivals_per_second * self.duration


def _simulate(phases: list[_Phase], tuning: TuningConfig) -> list[list[tuple[float, int, float]]]:
    """A fluid queue served by the pool, observed once a second by the real Autoscaler."""
    clock = _Clock()
    pool = WorkerPool(tuning.min_workers)
    scaler = Autoscaler(pool, tuning, clock=clock)
    backlog = 0.0
    trace: list[list[tuple[float, int, float]]] = []
    for phase in phases:
        rows = []
        for _ in range(phase.seconds):
            backlog += phase.arrivals_per_second
            served = min(backlog, pool.capacity / phase.duration)
            backlog -= served
            wait = phase.duration * backlog / pool.capacity
            rows.append((clock.now, pool.capacity, wait))
            scaler.apply(
                backlog=int(backlog),
                workers=pool.capacity,
                busy=round(served * phase.duration),
                average_seconds=phase.duration,
            )
            clock.now += 1
        trace.append(rows)
    return trace


def _settled(
    *, workers: int, backlog: int, tolerance: float = 0.5
) -> tuple[Autoscaler, WorkerPool]:
    """An Autoscaler (band 2 s +- `tolerance`, no cooldown) after 30 one-second
    observations of `backlog` ready and `workers` busy 0.5 s tasks, which it held."""
    tuning = TuningConfig(
        min_workers=1,
        max_workers=500,
        desired_wait_seconds=2.0,
        wait_tolerance_seconds=tolerance,
        cooldown_seconds=0,
    )
    clock = _Clock()
    pool = WorkerPool(workers)
    scaler = Autoscaler(pool, tuning, clock=clock)
    for _ in range(30):
        seen = scaler.apply(backlog=backlog, workers=workers, busy=workers, average_seconds=0.5)
        assert seen.size == workers
        clock.now += 1
    return scaler, pool


@pytest.mark.parametrize(
    ("tolerance", "backlog", "size"),
    [(0.5, 240, 46), (0.5, 241, 70), (0.0, 240, 49), (0.0, 241, 75)],
)
def test_a_wait_that_jumps_by_more_than_the_band_is_met_from_the_raw_reading(
    tolerance: float, backlog: int, size: int
) -> None:
    # Settled at 40 workers, 0.5 s tasks, 160 ready (a 2 s wait). One second later the
    # backlog has grown by 80 (the wait by 1.0 s) or 81 (1.0125 s): above the band but
    # below twice its upper edge. A rise of more than the band's width (1 s; for a band
    # of zero width, half the desired wait) is a step in the arrivals, and the raw
    # reading (busy / duration + trend: 161/s) sizes the pool; one of 1 s or less goes
    # through the smoothed estimates (about 89/s after one second). The size aims at the
    # band's upper edge: 2.5 s, or 2 s for the band of zero width.
    scaler, pool = _settled(workers=40, backlog=160, tolerance=tolerance)

    decision = scaler.apply(backlog=backlog, workers=40, busy=40, average_seconds=0.5)

    assert (decision.reason, pool.capacity) == ("above_band", decision.size)
    assert decision.size == size


@pytest.mark.parametrize(("backlog", "size"), [(13, 3), (19, 3), (20, 7)])
def test_a_small_pools_rise_is_a_surge_only_when_it_stands_out_of_the_noise(
    backlog: int, size: int
) -> None:
    # Settled at 2 workers, 0.5 s tasks, 4 arrivals/s, 8 ready (a 2 s wait). The band's
    # width is 4 messages here, while the backlog's one-second noise has a standard
    # deviation of about 2.8 (arrivals and completions): a rise to 13 or 19 (5 or 11)
    # is within 4 of them (11.3), and goes through the smoothed estimates (a step of
    # one); a rise to 20 (12, a 5 s wait, just not far) is a surge, sized from the raw
    # reading (16/s).
    scaler, pool = _settled(workers=2, backlog=8)

    decision = scaler.apply(backlog=backlog, workers=2, busy=2, average_seconds=0.5)

    assert (decision.reason, decision.size, pool.capacity) == ("above_band", size, size)


@pytest.mark.parametrize("cooldown", [0.0, 5.0, 10.0])
def test_simulated_load_enters_the_band_and_stays_without_oscillating(cooldown: float) -> None:
    tuning = TuningConfig(
        min_workers=1,
        max_workers=200,
        desired_wait_seconds=2.0,
        wait_tolerance_seconds=0.5,
        cooldown_seconds=cooldown,
    )
    phases = [
        _Phase(50, 0.2, 600),  # needs 10 workers
        _Phase(200, 0.2, 600),  # arrivals x4: 40
        _Phase(200, 0.5, 600),  # tasks slow down: 100
        _Phase(333, 0.03, 600),  # many short tasks: 10
    ]
    trace = _simulate(phases, tuning)

    lower, upper = 1.5, 2.5
    decision = max(cooldown, 1.0)
    previous_size = tuning.min_workers
    for phase, rows in zip(phases, trace, strict=True):
        # Bounded in decisions: the 10 % steps a shrink needs, plus a few to correct,
        # plus time for the backlog itself to build up to the band.
        shrinks = math.ceil(math.log(previous_size / phase.ideal_workers) / -math.log(0.9))
        bound = (max(0, shrinks) + 8) * decision + 30
        start = rows[0][0]
        entered = next(t for t, _, wait in rows if lower <= wait <= upper)
        assert entered - start <= bound, (phase, entered - start, bound)
        settled = [(size, wait) for t, size, wait in rows if t >= entered + 8 * decision + 30]
        sizes = [size for size, _ in settled]
        # No oscillation: once settled the size holds within one worker of the ideal
        # and the wait stays in the band.
        assert len(sizes) > 100, phase
        assert max(sizes) - min(sizes) <= 1, (phase, sorted(set(sizes)))
        assert abs(sizes[-1] - phase.ideal_workers) <= 1, (phase, sizes[-1])
        assert all(lower - 0.1 <= wait <= upper + 0.1 for _, wait in settled), phase
        previous_size = rows[-1][1]


def test_an_empty_queue_shrinks_the_pool_gradually_to_min() -> None:
    clock = _Clock()
    pool = WorkerPool(40)
    scaler = Autoscaler(pool, BAND, clock=clock)
    sizes = [pool.capacity]
    for _ in range(300):
        scaler.apply(backlog=0, workers=pool.capacity, busy=0, average_seconds=0.1)
        sizes.append(pool.capacity)
        clock.now += 1

    steps = [before - after for before, after in itertools.pairwise(sizes)]
    assert sizes[-1] == BAND.min_workers
    assert all(step >= 0 for step in steps)
    assert all(step <= math.ceil(before * 0.1) for step, before in zip(steps, sizes, strict=False))
    assert sum(1 for step in steps if step) > 10  # gradual, not one jump


def test_cooldown_limits_changes_and_zero_means_none() -> None:
    for cooldown, expected_changes in ((5.0, 2), (0.0, 10)):
        clock = _Clock()
        pool = WorkerPool(40)
        tuning = TuningConfig(
            min_workers=1, max_workers=50, desired_wait_seconds=2, cooldown_seconds=cooldown
        )
        scaler = Autoscaler(pool, tuning, clock=clock)
        changes = 0
        for _ in range(10):
            before = pool.capacity
            scaler.apply(backlog=0, workers=pool.capacity, busy=0, average_seconds=0.1)
            changes += pool.capacity != before
            clock.now += 1
        assert changes == expected_changes, cooldown


def _batch_follower(pool: WorkerPool, clock: FakeClock, *, cooldown_seconds: float) -> Fetcher:
    """A fetcher with a configured batch of 10, for its batch rule alone (no queue)."""
    return Fetcher(
        None,  # type: ignore[arg-type]
        pool,
        consumer="c",
        hand_over=lambda deliveries, reserved: None,
        batch_size=10,
        wait_seconds=1,
        lease_seconds=30,
        clock=clock,
        stopping=asyncio.Event(),
        cooldown_seconds=cooldown_seconds,
    )


def test_batch_size_follows_free_capacity_as_the_pool_grows_and_shrinks() -> None:
    clock = FakeClock()
    pool = WorkerPool(10)
    fetcher = _batch_follower(pool, clock, cooldown_seconds=3)

    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 10  # free 10 is within 10 ± 10

    pool.resize(200)
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 200  # outside 200 ± 10: follow

    pool.resize(30)
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 200  # cooldown: not yet

    clock._now += 3
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 30

    pool.resize(35)
    clock._now += 3
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 30  # inside 35 ± 10: leave it


@pytest.mark.parametrize("busy", [190, 195, 199, 200])
def test_batch_size_never_drops_below_the_configured_size_when_few_workers_are_free(
    busy: int,
) -> None:
    clock = FakeClock()
    pool = WorkerPool(200)
    fetcher = _batch_follower(pool, clock, cooldown_seconds=0)
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 200  # a grown pool, all free: follow it up

    assert pool.try_reserve(busy) == busy  # a burst takes all but 200 - busy workers
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 200  # at most 10 free: the batch is left alone

    pool.unreserve(busy)
    pool.resize(15)
    assert pool.try_reserve(4) == 4  # 11 free, one more than the configured size
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 11  # 200 is outside 11 ± 10: down to free, not below 10
    pool.unreserve(4)
    pool.resize(12)
    fetcher.follow_free_capacity()
    assert fetcher.batch_size == 11  # 12 free: 11 is inside 12 ± 10


async def test_runner_grows_under_load_and_shrinks_when_the_queue_drains() -> None:
    clock = FakeClock()
    app, queue = make(clock)

    @app.task
    async def work(n: int) -> None:
        await clock.sleep(0.5)

    tuning = TuningConfig(
        min_workers=2,
        max_workers=40,
        desired_wait_seconds=2.0,
        wait_tolerance_seconds=0.5,
        cooldown_seconds=2,
    )
    config = RunnerConfig(
        num_workers=2,
        batch_size=5,
        lease_seconds=30,
        block_seconds=1,
        monitor_interval_seconds=1,
        tuning=tuning,
    )
    runner = Runner(queue, app, config, clock=clock)
    producer = Producer(queue, app, clock=clock)
    sizes: list[int] = []
    waits: list[float | None] = []
    async with running(runner):
        # 20 tasks/s of 0.5 s each need about 10 workers.
        for second in range(120):
            await producer.dispatch_many(work, range(second * 20, second * 20 + 20))
            await clock.advance(1)
            sizes.append(runner.pool.capacity)
            waits.append(runner.stats().predicted_wait_seconds)
        peak = max(sizes)
        for _ in range(120):
            await clock.advance(1)
            sizes.append(runner.pool.capacity)

    assert 9 <= sizes[119] <= 12
    assert all(w is not None and 1.4 <= w <= 2.6 for w in waits[90:120])
    assert peak <= 14  # no wild overshoot
    assert sizes[-1] == tuning.min_workers
    assert await queue.len() == 0


async def test_shrinking_never_cancels_a_running_task() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    finished: list[int] = []

    @app.task
    async def long_job(n: int) -> None:
        await clock.sleep(30)
        finished.append(n)

    tuning = TuningConfig(min_workers=1, max_workers=8, desired_wait_seconds=1, cooldown_seconds=0)
    config = RunnerConfig(
        num_workers=8, lease_seconds=60, monitor_interval_seconds=1, tuning=tuning
    )
    runner = Runner(queue, app, config, clock=clock)
    await Producer(queue, app, clock=clock).dispatch_many(long_job, range(8))
    async with running(runner):
        await clock.run_until(lambda: runner.pool.busy == 8, step=0.5, limit=5)
        await clock.run_until(lambda: runner.pool.capacity == 1, step=1, limit=25)
        assert runner.pool.busy == 8  # over capacity, nothing cancelled
        await clock.run_until(lambda: len(finished) == 8, step=1, limit=40)

    assert sorted(finished) == list(range(8))
    assert await queue.len() == 0


async def test_long_queue_hook_fires_once_per_episode_without_stalling_workers() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    calls: list[float] = []
    hook_release = asyncio.Event()
    done: list[int] = []

    async def hook(predicted: float) -> None:
        calls.append(predicted)
        await hook_release.wait()  # a slow hook must not hold up the workers

    @app.task
    async def work(n: int) -> None:
        await clock.sleep(1)
        done.append(n)

    config = RunnerConfig(
        num_workers=2,
        lease_seconds=30,
        monitor_interval_seconds=1,
        long_queue_threshold_seconds=5,
        long_queue_hook=hook,
    )
    runner = Runner(queue, app, config, clock=clock)
    producer = Producer(queue, app, clock=clock)
    async with running(runner):
        await producer.dispatch_many(work, range(4))
        await clock.run_until(lambda: len(done) == 4, step=0.5, limit=10)
        assert calls == []  # the first tasks teach the runner their duration

        # Episode 1: 40 tasks of 1 s on 2 workers, ~20 s predicted, for a while.
        await producer.dispatch_many(work, range(40))
        for _ in range(10):
            await clock.advance(1)
        assert len(calls) == 1
        assert calls[0] > 5
        assert len(done) > 4  # workers kept going while the hook hung
        hook_release.set()
        await clock.run_until(lambda: len(done) == 44, step=1, limit=60)
        await clock.advance(3)

        # Episode 2 after the wait fell back under the threshold.
        await producer.dispatch_many(work, range(40))
        await clock.run_until(lambda: len(calls) == 2, step=1, limit=10)
        await clock.run_until(lambda: len(done) == 84, step=1, limit=60)

    assert len(calls) == 2


async def test_sync_long_queue_hook_runs_off_the_event_loop() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    import threading

    threads: list[str] = []
    fired = asyncio.Event()
    loop = asyncio.get_running_loop()

    def hook(predicted: float) -> None:
        threads.append(threading.current_thread().name)
        loop.call_soon_threadsafe(fired.set)

    @app.task
    async def work(n: int) -> None:
        await clock.sleep(1)

    config = RunnerConfig(
        num_workers=1,
        lease_seconds=30,
        monitor_interval_seconds=1,
        long_queue_threshold_seconds=2,
        long_queue_hook=hook,
    )
    runner = Runner(queue, app, config, clock=clock)
    async with running(runner):
        await Producer(queue, app, clock=clock).dispatch_many(work, range(30))
        await clock.advance(3)
        await asyncio.wait_for(fired.wait(), 10)

    assert threads
    assert threads[0] != threading.current_thread().name


async def test_worker_registry_counts_every_process_serving_the_queue() -> None:
    clock = FakeClock()
    app, queue = make(clock)

    @app.task
    async def work(n: int) -> None:
        await clock.sleep(1)

    first = Runner(queue.open_handle(), app, RunnerConfig(num_workers=3), clock=clock)
    second = Runner(queue.open_handle(), app, RunnerConfig(num_workers=5), clock=clock)
    async with running(first), running(second):
        await Producer(queue, app, clock=clock).dispatch_many(work, range(100))
        await clock.advance(5)
        stats = first.stats()
        assert (stats.processes, stats.cluster_workers) == (2, 8)
        assert stats.backlog is not None
        assert stats.backlog > 0
        assert stats.predicted_wait_seconds == pytest.approx(1.0 * stats.backlog / 8, rel=0.01)
    async with running(Runner(queue.open_handle(), app, RunnerConfig(), clock=clock)):
        await clock.advance(1)
        assert len(await queue.live_workers()) == 1  # the stopped ones left the registry


async def test_monitor_forgets_idle_consumers_that_hold_no_message() -> None:
    clock = FakeClock()
    app, queue = make(clock)
    await queue.add([b"held"])
    await queue.receive("crashed-holder", max_messages=1, wait_seconds=0, lease_seconds=60)
    assert (
        await queue.receive("crashed-idle", max_messages=1, wait_seconds=0, lease_seconds=60) == []
    )

    runner = Runner(
        queue.open_handle(),
        app,
        RunnerConfig(lease_seconds=3600, monitor_interval_seconds=60),
        clock=clock,
    )
    async with running(runner):
        await clock.advance(2000)
        early = {consumer.name for consumer in (await queue.stats()).consumers}
        # Past ten leases of idleness (the holder's message was reclaimed after one).
        await clock.advance(36_000)
        late = {consumer.name for consumer in (await queue.stats()).consumers}

    assert {"crashed-idle", "crashed-holder"} <= early
    assert not {"crashed-idle", "crashed-holder"} & late
    assert runner.consumer_names[0] in late  # a live fetcher is never idle that long
    assert len(queue.dead_letters()) == 1  # the held message was reclaimed, not lost
