"""The figures of issue 17, computed from a simulated `Run`."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from taskrunner.config import TuningConfig

from .simulation import Decision, Phase, Run, simulate

__all__ = [
    "STEADY",
    "TUNING",
    "Figures",
    "best_fixed_in_band",
    "decisions_to_band",
    "in_band",
    "reversals_per_minute",
    "steady_figures",
]

# Durations average 0.5 s: 80/s needs 40 busy workers, a 5x burst 200.
TUNING = TuningConfig(
    min_workers=1,
    max_workers=500,
    desired_wait_seconds=2.0,
    wait_tolerance_seconds=0.5,
    cooldown_seconds=0,
)
STEADY = [
    Phase("warmup", 80, 120),
    Phase("steady", 80, 600),
    Phase("burst", 400, 120),
    Phase("after", 80, 240),
    Phase("idle", 0, 120),
]


def _of(run: Run, phase: str, process: int | None = 0) -> list[Decision]:
    return [
        d for d in run.decisions if d.phase == phase and (process is None or d.process == process)
    ]


def in_band(decisions: list[Decision], tuning: TuningConfig) -> float:
    """Fraction of decisions whose observed predicted wait was inside the band."""
    lower = tuning.desired_wait_seconds - tuning.wait_tolerance_seconds
    upper = tuning.desired_wait_seconds + tuning.wait_tolerance_seconds
    hits = sum(1 for d in decisions if d.predicted is not None and lower <= d.predicted <= upper)
    return hits / len(decisions)


def reversals_per_minute(decisions: list[Decision], start_size: int) -> float:
    """Changes of the pool size's direction per simulated minute."""
    direction, reversals, size = 0, 0, start_size
    for d in decisions:
        step = (d.size_after > size) - (d.size_after < size)
        if step and direction and step != direction:
            reversals += 1
        if step:
            direction = step
        size = d.size_after
    # Each decision's move is counted (the first against `start_size`), so n evenly
    # spaced decisions cover n intervals, not the n - 1 between the first and the last.
    spacing = (decisions[-1].at - decisions[0].at) / (len(decisions) - 1)
    return reversals / (spacing * len(decisions) / 60)


def decisions_to_band(run: Run, tuning: TuningConfig, phase: str = "burst") -> int:
    """Decisions from the first one that saw the wait above the band after `phase`
    started to the first that saw it at or below the upper edge again."""
    upper = tuning.desired_wait_seconds + tuning.wait_tolerance_seconds
    decisions = _of(run, phase)
    first = next(
        i for i, d in enumerate(decisions) if d.predicted is not None and d.predicted > upper
    )
    back = next(
        i
        for i, d in enumerate(decisions[first:])
        if d.predicted is not None and d.predicted <= upper
    )
    return back


@dataclass(frozen=True)
class Figures:
    seed: int
    reversals_per_minute: float
    in_band: float
    decisions_to_band: int
    mean_size: float
    min_size: int
    max_size: int


@functools.cache
def steady_figures(seed: int, tuning: TuningConfig = TUNING, load: float = 1.0) -> Figures:
    """The figures of `STEADY` with every arrival rate `load` times as high."""
    phases = [Phase(p.name, p.rate * load, p.seconds) for p in STEADY]
    run = simulate(phases, tuning, seed=seed)
    steady = _of(run, "steady")
    sizes = [d.size_after for d in steady]
    before = _of(run, "warmup")[-1].size_after
    return Figures(
        seed=seed,
        reversals_per_minute=reversals_per_minute(steady, before),
        in_band=in_band(steady, tuning),
        decisions_to_band=decisions_to_band(run, tuning),
        mean_size=sum(sizes) / len(sizes),
        min_size=min(sizes),
        max_size=max(sizes),
    )


@functools.cache
def best_fixed_in_band(seed: int, tuning: TuningConfig = TUNING) -> tuple[int, float]:
    """The constant pool size whose steady phase is most often in band, and how often."""
    phases = STEADY[:2]
    best = (0, -1.0)
    for size in range(int(STEADY[1].rate * 0.5) - 3, int(STEADY[1].rate * 0.5) + 5):
        run = simulate(phases, None, seed=seed, fixed_size=size)
        share = in_band(_of(run, "steady"), tuning)
        if share > best[1]:
            best = (size, share)
    return best
