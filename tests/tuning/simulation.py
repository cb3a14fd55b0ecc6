"""A seeded, stochastic queue simulation driving the real `Autoscaler` on simulated time.

Why a harness of its own rather than the real `Runner` on ``memory://``: a run of the
Runner costs an event-loop turn per task and fake-clock step, and the figures need tens
of thousands of tasks per seed over five seeds; the harness runs one seed in well under
a second. What is under test is real: `taskrunner.tuning.Autoscaler` (with
`decide_pool_size`) resizes a real `WorkerPool`, one per simulated process, from the
signals the monitor would give it (ready backlog, workers and busy summed over the
processes' published sizes, the duration's moving average with the weight
`StatsRecorder` uses).

The model: Poisson arrivals (exponential gaps, rate per phase), task durations uniform
on [0.25, 0.75] s (mean 0.5), one shared FIFO backlog, each process starting tasks as
soon as it has a free worker, and a monitor per process every `interval` seconds
(offset so processes do not observe in the same instant). Time advances in ticks of
`TICK` seconds, finer than any task.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from taskrunner.clock import Clock
from taskrunner.config import TuningConfig
from taskrunner.pool import WorkerPool
from taskrunner.tuning import Autoscaler, predicted_wait

__all__ = [
    "EWMA_WEIGHT",
    "FlowScaler",
    "MAX_SECONDS",
    "MIN_SECONDS",
    "TICK",
    "Decision",
    "Phase",
    "Run",
    "Scaler",
    "simulate",
]

TICK = 0.02
EWMA_WEIGHT = 0.1  # as taskrunner.stats
MIN_SECONDS, MAX_SECONDS = 0.25, 0.75


class Scaler(Protocol):
    """What the harness calls once per observation: `Autoscaler.apply`'s signature."""

    def apply(
        self,
        *,
        backlog: int,
        workers: int,
        busy: int,
        average_seconds: float | None,
        processes: int | None = None,
    ) -> object: ...


class FlowScaler(Protocol):
    """A scaler also given the flow signals (bench/tuning_sim.py ``--estimator flow``).

    `in_flight` is the tasks running across processes at the observation (what the
    backend's statistics report); `completed` the tasks finished so far, summed over
    the processes' last published counts (what the monitor reads from the registry).
    """

    def apply(
        self,
        *,
        backlog: int,
        workers: int,
        busy: int,
        average_seconds: float | None,
        processes: int | None = None,
        in_flight: int | None = None,
        completed: int | None = None,
    ) -> object: ...


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:  # pragma: no cover - never awaited
        raise NotImplementedError


@dataclass(frozen=True)
class Phase:
    """Arrivals at `rate` per second for `seconds`."""

    name: str
    rate: float
    seconds: float


@dataclass(frozen=True)
class Decision:
    """One observation of one process and what its pool had afterwards."""

    at: float
    process: int
    phase: str
    backlog: int
    workers: int
    predicted: float | None
    size_after: int


@dataclass
class _Process:
    pool: WorkerPool
    scaler: Scaler | None
    flow: FlowScaler | None = None
    running: list[float] = field(default_factory=list)  # finish times (a heap)
    published: int = 0
    published_busy: int = 0
    completed: int = 0  # tasks finished so far
    published_completed: int = 0
    average: float | None = None
    next_observe: float = 0.0


@dataclass
class Run:
    """The decisions of every process, in time order, and the phases' start times."""

    decisions: list[Decision]
    phase_starts: dict[str, float]
    interval: float
    sizes: list[tuple[float, list[int]]]  # (time, every process's size) at each decision


def simulate(
    phases: list[Phase],
    tuning: TuningConfig | None,
    *,
    seed: int,
    processes: int = 1,
    interval: float = 1.0,
    start_size: int | None = None,
    fixed_size: int | None = None,
    publish_after_resize: bool = True,
    scaler: Callable[[WorkerPool, Clock], Scaler] | None = None,
    flow_scaler: Callable[[WorkerPool, Clock], FlowScaler] | None = None,
) -> Run:
    """Run the phases once; `tuning` None with `fixed_size` is a fixed pool per process.

    `publish_after_resize` False reproduces the old monitor: peers see the size a
    process had before its last resize. `scaler`, given, makes each process's scaler
    from its pool and the simulated clock instead of the real `Autoscaler`
    (bench/tuning_sim.py runs the optimal policy of a model through the same arrivals
    with it). `flow_scaler`, given, is used the same way and is also given the tasks in
    flight and the completions (each process's count as last published).
    """
    rng = random.Random(seed)
    clock = _Clock()
    procs: list[_Process] = []
    for index in range(processes):
        size = fixed_size if tuning is None else (start_size or tuning.min_workers)
        assert size is not None
        pool = WorkerPool(size)
        made: Scaler | None = None
        flow: FlowScaler | None = None
        if flow_scaler is not None:
            flow = flow_scaler(pool, clock)
        elif scaler is not None:
            made = scaler(pool, clock)
        elif tuning is not None:
            made = Autoscaler(pool, tuning, clock=clock)
        procs.append(
            _Process(
                pool,
                made,
                flow,
                published=size,
                next_observe=interval * (index + 1) / processes,
            )
        )
    backlog = 0
    decisions: list[Decision] = []
    sizes: list[tuple[float, list[int]]] = []
    starts: dict[str, float] = {}
    t = 0.0
    for phase in phases:
        starts[phase.name] = t
        end = t + phase.seconds
        next_arrival = t + (rng.expovariate(phase.rate) if phase.rate > 0 else phase.seconds)
        while t < end:
            t = round(t + TICK, 9)
            clock.now = t
            while next_arrival <= t and next_arrival < end:
                backlog += 1
                next_arrival += rng.expovariate(phase.rate) if phase.rate > 0 else phase.seconds
            order = list(range(processes))
            rng.shuffle(order)
            for index in order:
                proc = procs[index]
                while proc.running and proc.running[0] <= t:
                    finished = heapq.heappop(proc.running)
                    del finished
                    proc.pool.finish()
                    proc.completed += 1
                while backlog and proc.pool.free() > 0:
                    duration = rng.uniform(MIN_SECONDS, MAX_SECONDS)
                    assert proc.pool.try_reserve(1) == 1
                    proc.pool.start()
                    heapq.heappush(proc.running, t + duration)
                    proc.average = (
                        duration
                        if proc.average is None
                        else proc.average + EWMA_WEIGHT * (duration - proc.average)
                    )
                    backlog -= 1
            for index, proc in enumerate(procs):
                if t + 1e-9 < proc.next_observe:
                    continue
                proc.next_observe += interval
                proc.published = proc.pool.capacity
                proc.published_busy = proc.pool.busy
                proc.published_completed = proc.completed
                workers = sum(p.published for p in procs)
                busy = sum(p.published_busy for p in procs)
                timed = [p for p in procs if p.average is not None]
                weight = sum(p.published for p in timed)
                average = (
                    sum(p.average * p.published for p in timed if p.average is not None) / weight
                    if weight
                    else None
                )
                if proc.flow is not None:
                    proc.flow.apply(
                        backlog=backlog,
                        workers=workers,
                        busy=busy,
                        average_seconds=average,
                        processes=processes,
                        in_flight=sum(p.pool.busy for p in procs),
                        completed=sum(p.published_completed for p in procs),
                    )
                elif proc.scaler is not None:
                    proc.scaler.apply(
                        backlog=backlog,
                        workers=workers,
                        busy=busy,
                        average_seconds=average,
                        processes=processes,
                    )
                if publish_after_resize and (proc.flow is not None or proc.scaler is not None):
                    proc.published = proc.pool.capacity
                decisions.append(
                    Decision(
                        at=t,
                        process=index,
                        phase=phase.name,
                        backlog=backlog,
                        workers=workers,
                        predicted=predicted_wait(average, backlog, workers),
                        size_after=proc.pool.capacity,
                    )
                )
                sizes.append((t, [p.pool.capacity for p in procs]))
    return Run(decisions, starts, interval, sizes)
