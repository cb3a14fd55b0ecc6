"""Tuning mode under Poisson noise: the figures of issue 17 per seed, and the plot.

Run: ``python bench/tuning_sim.py`` (or ``nox -s tuning-sim``). Options: ``--seeds``
(default 5), ``--svg`` (default ``docs/images/tuning-noise.svg``; ``-`` for none).

It drives the simulation of ``tests/tuning/simulation.py`` (the real `Autoscaler` on
simulated time; Poisson arrivals at 80/s, durations uniform on 0.25-0.75 s, band
2 ± 0.5 s, cooldown 0, phases warm-up 120 s, steady 600 s, 5x burst 120 s, steady
240 s, idle 120 s) and prints per seed: reversals of the pool's direction per minute
and the share of decisions in band over the steady phase, decisions from the first
out-of-band one after the 5x step until the band, the best fixed pool's size and
in-band share on the same arrivals, and for two and three processes the largest and
95th-percentile ratio of the largest to the smallest process. The last line is one
JSON object with every figure. The SVG (written here, no plotting library) shows seed
0's pool size and predicted wait over the whole run.

``--bound`` (about 30 s for the default five seeds and three mu) answers whether any
controller could do better on this load: it computes, by dynamic programming, the
policy that minimises reversals + mu x decisions out of band on a model of the steady
phase (the backlog a random walk with the simulation's drift and variance, one
decision a second, sizes 35-46, at most two workers per step, the duration average's
noise in the predicted wait), knowing the arrival rate exactly, and runs that policy
through the same simulation and seeds (the real Autoscaler outside the model's range:
warm-up, burst). For each mu it prints the model's expectation and the figures over the seeds.
With ``--bound-window W ...`` it also runs the same policy knowing only an estimate of
the arrival rate, as a real controller would: conservation arrivals smoothed over W
seconds, times the smoothed duration, give the neutral size, and the table is shifted
by the whole workers it differs from the model's (a shift changes only when the
estimate leaves it by more than one worker).

``--dwell SECONDS ...`` (with ``--load K``, ``--dwell-far F``) measures a rule tried for
issue 17 and not adopted: a minimum dwell between direction reversals. After the pool
changes direction, a change back is refused for that many seconds unless the predicted
wait is above F x the band's upper edge or below its lower edge / F, or the queue is
empty (the shrink path); moves in the same direction stay free. It wraps the real
Autoscaler (its resizes pass through the dwell), runs the phases with every arrival
rate K times the default (``max_workers`` 500 x K), and prints per dwell (0: the law as
committed) reversals per minute and the in-band share over the steady phase, and the
decisions to the band after the 5x step, per seed.

``--estimator busy|flow`` (with ``--arrival-waits W``, ``--load K``) measures one more
change tried for issue 17 and not adopted, with a copy of the law's
``Autoscaler.apply`` (`_VariantAutoscaler`; ``busy`` is the law as committed, figure
for figure): ``flow`` measures the arrival rate by conservation, (change of the ready
backlog + change of the tasks in flight + completions) / elapsed, from the signals the
simulation provides (`simulate(flow_scaler=...)`), smoothed over W desired waits. It
prints reversals per minute and the in-band share over the steady phase and the
decisions to the band after the 5x step.

``--relay WINDOW ...`` (with ``--relay-return D ...``) measures a third structure tried
for issue 17 and not adopted, shaped after the optimal policy of ``--bound``: a relay
around the neutral size n = arrivals x duration, the arrival rate by conservation
smoothed over WINDOW seconds (60-120 s, so n is known to about half a worker). Above
the band a pool at or below n goes one worker past it (two when the wait is more than
0.5 s above the band), below the band one at or above n goes one short of it; inside
the band a pool past n returns to it once the wait is at most the centre + D seconds,
one short of n once it is at least the centre - D. The real Autoscaler runs the
warm-up and any wait above twice the upper edge. It prints reversals per minute and
the in-band share over the steady phase, per WINDOW and D.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from taskrunner.clock import Clock
from taskrunner.config import TuningConfig
from taskrunner.pool import WorkerPool
from taskrunner.tuning import (
    _FAR_FACTOR,
    _REVERSAL_DECISIONS,
    _REVERSAL_MIN_STEP,
    _SHARE_SLACK,
    _SMOOTHING_WAITS,
    Autoscaler,
    Decision,
    Signals,
    _round_half_away,
    decide_pool_size,
    predicted_wait,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.tuning.figures import (  # noqa: E402
    STEADY,
    TUNING,
    best_fixed_in_band,
    steady_figures,
)
from tests.tuning.simulation import (  # noqa: E402
    EWMA_WEIGHT,
    MAX_SECONDS,
    MIN_SECONDS,
    TICK,
    Phase,
    Run,
    simulate,
)

# The model of --bound: backlog in bins of this many messages, up to _B_MAX.
_B_STEP, _B_MAX = 4, 400
_SIZES = range(35, 47)
_MAX_STEP = 2

Policy = dict[tuple[int, int, int], int]  # (backlog bin, size, last direction) -> size


def optimal_policy(mu: float, tuning: TuningConfig = TUNING) -> tuple[Policy, float, float]:
    """The policy minimising reversals + mu x out-of-band decisions, per decision.

    Average-cost value iteration on (backlog, size, direction of the last resize).
    Returns the policy and its expected reversals per minute and in-band share (from
    the model's stationary distribution).
    """
    rate = STEADY[1].rate
    mean = (MIN_SECONDS + MAX_SECONDS) / 2
    var = (MAX_SECONDS - MIN_SECONDS) ** 2 / 12
    # A worker is freed on the first tick after its task ends: half a tick more each.
    neutral = rate * (mean + TICK / 2)
    # Per second: Poisson arrivals plus the renewal noise of ~neutral busy workers.
    variance = rate + neutral * var / mean**3
    average_sd = math.sqrt(EWMA_WEIGHT / (2 - EWMA_WEIGHT) * var)
    lower = tuning.desired_wait_seconds - tuning.wait_tolerance_seconds
    upper = tuning.desired_wait_seconds + tuning.wait_tolerance_seconds
    bins = range(_B_MAX // _B_STEP + 1)
    sizes = list(_SIZES)

    def cdf(x: float) -> float:
        return 0.5 * (1 + math.erf((x - mean) / (average_sd * math.sqrt(2))))

    def in_band(b: int, w: int) -> float:
        backlog = b * _B_STEP
        return cdf(upper * w / backlog) - cdf(lower * w / backlog) if backlog else 0.0

    band = {(b, w): in_band(b, w) for b in bins for w in sizes}
    spread = math.sqrt(variance) / _B_STEP
    moves: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for w in sizes:
        drift = (neutral - w) / mean / _B_STEP
        for b in bins:
            weights = [
                (j, math.exp(-(((j - b - drift) / spread) ** 2) / 2))
                for j in range(max(0, int(b + drift - 4 * spread)), int(b + drift + 4 * spread) + 2)
                if j in bins
            ]
            total = sum(p for _, p in weights)
            moves[b, w] = [(j, p / total) for j, p in weights]
    states = [(b, w, d) for b in bins for w in sizes for d in (-1, 1)]
    value = dict.fromkeys(states, 0.0)
    policy: Policy = {}
    for _ in range(2000):
        expected = {
            (b, w, d): sum(p * value[j, w, d] for j, p in moves[b, w])
            for b in bins
            for w in sizes
            for d in (-1, 1)
        }
        new: dict[tuple[int, int, int], float] = {}
        for b, w, d in states:
            best, choice = math.inf, w
            for to in range(max(sizes[0], w - _MAX_STEP), min(sizes[-1], w + _MAX_STEP) + 1):
                step = (to > w) - (to < w)
                cost = (1.0 if step == -d else 0.0) + expected[b, to, step or d]
                if cost < best:
                    best, choice = cost, to
            new[b, w, d] = mu * (1 - band[b, w]) + best
            policy[b, w, d] = choice
        gain = new[40, 40, -1]
        change = max(abs(new[s] - gain - value[s]) for s in states)
        value = {s: new[s] - gain for s in states}
        if change < 1e-6:
            break
    # The stationary distribution under the policy, by iteration from uniform.
    weight = dict.fromkeys(states, 1 / len(states))
    for _ in range(3000):
        after = dict.fromkeys(states, 0.0)
        for (b, w, d), p in weight.items():
            to = policy[b, w, d]
            step = (to > w) - (to < w)
            for j, q in moves[b, to]:
                after[j, to, step or d] += p * q
        weight = after
    reversals = sum(
        p
        for (b, w, d), p in weight.items()
        if (policy[b, w, d] > w and d == -1) or (policy[b, w, d] < w and d == 1)
    )
    held = sum(p * band[b, w] for (b, w, _), p in weight.items())
    return policy, reversals * 60, held


class _PolicyScaler:
    """Applies an `optimal_policy` table inside the model's range, the Autoscaler outside."""

    def __init__(self, pool: WorkerPool, clock: Clock, *, policy: Policy) -> None:
        self._pool = pool
        self._policy = policy
        self._fallback = Autoscaler(pool, TUNING, clock=clock)
        self._direction = -1

    def apply(
        self,
        *,
        backlog: int,
        workers: int,
        busy: int,
        average_seconds: float | None,
        processes: int | None = None,
    ) -> None:
        self._shifted(backlog, workers, busy, average_seconds, 0)

    def _shifted(
        self, backlog: int, workers: int, busy: int, average_seconds: float | None, shift: int
    ) -> None:
        """The table's decision for a neutral size `shift` workers from the model's."""
        before = self._pool.capacity
        key = (round(backlog / _B_STEP), before - shift, self._direction)
        if key in self._policy:
            self._pool.resize(self._policy[key] + shift)
        else:
            self._fallback.apply(
                backlog=backlog, workers=workers, busy=busy, average_seconds=average_seconds
            )
        after = self._pool.capacity
        if after != before:
            self._direction = 1 if after > before else -1


class _FlowEstimate:
    """Arrivals by conservation (change of the ready backlog + change of the tasks in
    flight + completions) smoothed over `window` seconds, and the duration over the
    law's smoothing time (`_SMOOTHING_WAITS` desired waits of 2 s)."""

    def __init__(self, window: float) -> None:
        self._window = window
        self._previous: tuple[float, int, int, int] | None = None
        self.arrivals: float | None = None
        self.duration: float | None = None

    def observe(
        self,
        now: float,
        backlog: int,
        in_flight: int | None,
        completed: int | None,
        average_seconds: float | None,
    ) -> None:
        assert in_flight is not None
        assert completed is not None
        if self._previous is not None and average_seconds is not None:
            at, ready, running, done = self._previous
            elapsed = now - at
            flow = (backlog - ready + in_flight - running + completed - done) / elapsed
            self.arrivals = _ewma(self.arrivals, flow, elapsed / self._window)
            self.duration = _ewma(
                self.duration, average_seconds, elapsed / (_SMOOTHING_WAITS * 2.0)
            )
        self._previous = (now, backlog, in_flight, completed)


class _EstimatedPolicyScaler(_PolicyScaler):
    """`_PolicyScaler` shifted to the neutral size a conservation estimate gives."""

    def __init__(self, pool: WorkerPool, clock: Clock, *, policy: Policy, window: float) -> None:
        super().__init__(pool, clock, policy=policy)
        self._clock = clock
        self._estimate = _FlowEstimate(window)
        self._shift = 0

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
    ) -> None:
        estimate = self._estimate
        estimate.observe(self._clock.monotonic(), backlog, in_flight, completed, average_seconds)
        if estimate.arrivals is not None and estimate.duration is not None:
            offset = estimate.arrivals * (estimate.duration + TICK / 2) - _model_neutral()
            if abs(offset - self._shift) > 1.0:
                self._shift = round(offset)
        self._shifted(backlog, workers, busy, average_seconds, self._shift)


def _ewma(old: float | None, new: float, fraction: float) -> float:
    """`old` moved toward `new` for `fraction` of the smoothing's time constant."""
    return new if old is None else old + (1 - math.exp(-fraction)) * (new - old)


def _model_neutral() -> float:
    return STEADY[1].rate * ((MIN_SECONDS + MAX_SECONDS) / 2 + TICK / 2)


def bound(seeds: int, mus: list[float], windows: list[float]) -> list[dict[str, float]]:
    """For each mu: the optimal policy's expected figures, and measured over the seeds
    (knowing the arrival rate exactly, then estimating it over each of `windows`)."""
    from tests.tuning.figures import _of, in_band, reversals_per_minute

    rows = []
    policies = {mu: optimal_policy(mu) for mu in mus}
    for mu, window in itertools.product(mus, [None, *windows]):
        policy, model_reversals, model_in_band = policies[mu]
        reversals, shares = [], []
        for seed in range(seeds):
            if window is None:
                run = simulate(
                    STEADY[:2],
                    TUNING,
                    seed=seed,
                    scaler=functools.partial(_PolicyScaler, policy=policy),
                )
            else:
                estimated = functools.partial(_EstimatedPolicyScaler, policy=policy, window=window)
                run = simulate(STEADY[:2], TUNING, seed=seed, flow_scaler=estimated)
            steady = _of(run, "steady")
            reversals.append(reversals_per_minute(steady, _of(run, "warmup")[-1].size_after))
            shares.append(in_band(steady, TUNING))
        row = {
            "mu": mu,
            "window": window or 0.0,
            "model_reversals_per_minute": round(model_reversals, 2),
            "model_in_band": round(model_in_band, 3),
            "reversals_min": round(min(reversals), 2),
            "reversals_mean": round(sum(reversals) / seeds, 2),
            "reversals_max": round(max(reversals), 2),
            "in_band_min": round(min(shares), 3),
            "in_band_mean": round(sum(shares) / seeds, 3),
            "in_band_max": round(max(shares), 3),
        }
        print(
            f"mu {mu:5.3f}  {f'window {window:g} s' if window else 'exact rate'}  model: "
            f"{model_reversals:4.2f} rev/min, {model_in_band:5.1%} in band;"
            f"  seeds: {min(reversals):.1f}-{max(reversals):.1f} rev/min (mean "
            f"{row['reversals_mean']:.2f}), {min(shares):.0%}-{max(shares):.0%} in band (mean "
            f"{row['in_band_mean']:.1%})",
            flush=True,
        )
        rows.append(row)
    return rows


class _DwellPool(WorkerPool):
    """The pool as the wrapped Autoscaler sees it: its resizes go through `gate`."""

    def __init__(self, pool: WorkerPool, gate: Callable[[int], None]) -> None:
        super().__init__(pool.capacity)
        self._real = pool
        self._gate = gate

    @property
    def capacity(self) -> int:
        return self._real.capacity

    def resize(self, capacity: int) -> None:
        self._gate(capacity)


class _DwellScaler:
    """The real Autoscaler, with a reversal refused within `dwell` s of the previous one.

    Urgent (the reversal goes through): the predicted wait above `far` x the band's
    upper edge or below its lower edge / `far`, or the Autoscaler's reason
    ``queue_empty``. The Autoscaler is not told of a refusal (it believes it resized),
    which differs from a dwell inside the law only in its one-worker hysteresis.
    """

    def __init__(
        self, pool: WorkerPool, clock: Clock, *, tuning: TuningConfig, dwell: float, far: float
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._tuning = tuning
        self._dwell = dwell
        self._far = far
        self._scaler = Autoscaler(_DwellPool(pool, self._resize), tuning, clock=clock)
        self._direction = 0
        self._since: float | None = None  # when the current direction began
        self._urgent = False

    def _resize(self, capacity: int) -> None:
        current = self._pool.capacity
        direction = (capacity > current) - (capacity < current)
        if direction == 0:
            return
        now = self._clock.monotonic()
        decision = self._scaler.last_decision
        urgent = self._urgent or (decision is not None and decision.reason == "queue_empty")
        recent = self._since is not None and now - self._since < self._dwell
        if direction == -self._direction and recent and not urgent:
            return
        if direction != self._direction:
            self._since = now
        self._direction = direction
        self._pool.resize(capacity)

    def apply(
        self,
        *,
        backlog: int,
        workers: int,
        busy: int,
        average_seconds: float | None,
        processes: int | None = None,
    ) -> None:
        wait = predicted_wait(average_seconds, backlog, workers)
        lower = self._tuning.desired_wait_seconds - self._tuning.wait_tolerance_seconds
        upper = self._tuning.desired_wait_seconds + self._tuning.wait_tolerance_seconds
        self._urgent = wait is not None and (wait > self._far * upper or wait < lower / self._far)
        self._scaler.apply(
            backlog=backlog,
            workers=workers,
            busy=busy,
            average_seconds=average_seconds,
            processes=processes,
        )


def dwell(seeds: int, dwells: list[float], load: float, far: float) -> list[dict[str, object]]:
    """Per dwell (0: the law as committed): the figures of each seed at `load` x the rates."""
    from tests.tuning.figures import _of, decisions_to_band, in_band, reversals_per_minute

    phases = [Phase(p.name, p.rate * load, p.seconds) for p in STEADY]
    tuning = dataclasses.replace(TUNING, max_workers=round(TUNING.max_workers * load))
    rows: list[dict[str, object]] = []
    for seconds in dwells:
        reversals, shares, to_band = [], [], []
        for seed in range(seeds):
            scaler = (
                functools.partial(_DwellScaler, tuning=tuning, dwell=seconds, far=far)
                if seconds > 0
                else None
            )
            run = simulate(phases, tuning, seed=seed, scaler=scaler)
            steady = _of(run, "steady")
            reversals.append(
                round(reversals_per_minute(steady, _of(run, "warmup")[-1].size_after), 2)
            )
            shares.append(round(in_band(steady, tuning), 3))
            to_band.append(decisions_to_band(run, tuning))
        print(
            f"load {load:g}x  dwell {seconds:4.0f} s  rev/min {min(reversals):.1f}-"
            f"{max(reversals):.1f}  in band {min(shares):.0%}-{max(shares):.0%}  "
            f"to band {min(to_band)}-{max(to_band)}",
            flush=True,
        )
        rows.append(
            {
                "load": load,
                "dwell": seconds,
                "far": far,
                "reversals_per_minute": reversals,
                "in_band": shares,
                "decisions_to_band": to_band,
            }
        )
    return rows


class _VariantAutoscaler(Autoscaler):
    """`Autoscaler.apply` as committed, with a change tried for issue 17 (not adopted).

    A copy of the law's `apply` (keep it in step when the law changes), so the changes
    can be measured without living in the library. `flow`: the arrival rate measured
    by conservation, (change of the ready backlog + change of the tasks in flight +
    completions) / elapsed, instead of busy / duration + trend (which it falls back to
    when the counts are missing or the completions went down), smoothed with a time
    constant of `arrival_waits` desired waits. (The other change measured here,
    ``--surge``, is in the law now: a wait above the band that rose by more than the
    band's width since the previous observation is far.)
    """

    def __init__(
        self,
        pool: WorkerPool,
        clock: Clock,
        *,
        tuning: TuningConfig,
        flow: bool,
        arrival_waits: float,
    ) -> None:
        super().__init__(pool, tuning, clock=clock)
        self._use_flow = flow
        self._arrival_waits = arrival_waits
        self._counts: tuple[int, int] | None = None  # (in flight, completed) at _previous

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
    ) -> Decision:
        tuning = self._tuning
        now = self._clock.monotonic()
        raw_trend = None
        raw_flow = None
        weight = arrival_weight = 1.0
        counts = (in_flight, completed) if in_flight is not None and completed is not None else None
        elapsed = 0.0
        if self._previous is not None and now > self._previous[0]:
            elapsed = now - self._previous[0]
            raw_trend = (backlog - self._previous[1]) / elapsed
            weight = 1 - math.exp(-elapsed / (_SMOOTHING_WAITS * tuning.desired_wait_seconds))
            arrival_weight = 1 - math.exp(
                -elapsed / (self._arrival_waits * tuning.desired_wait_seconds)
            )
            old = self._counts
            if self._use_flow and counts is not None and old is not None and counts[1] >= old[1]:
                moved = counts[0] - old[0] + counts[1] - old[1]
                raw_flow = (backlog - self._previous[1] + moved) / elapsed
        self._previous = (now, backlog)
        self._counts = counts
        upper = tuning.desired_wait_seconds + tuning.wait_tolerance_seconds
        raw_wait = predicted_wait(average_seconds, backlog, workers)
        far = raw_wait is not None and raw_wait > _FAR_FACTOR * upper
        if not far and raw_wait is not None and raw_wait > upper and raw_trend is not None:
            far = self._surged(raw_trend * elapsed, elapsed, workers, average_seconds)
        if far or backlog == 0:
            weight = arrival_weight = 1.0
        if average_seconds is not None:
            self._duration = self._smooth(self._duration, average_seconds, weight)
        if raw_trend is not None:
            self._trend = self._smooth(self._trend, raw_trend, weight)
        duration = self._duration
        arrivals = None
        if duration is not None and duration > 0:
            if raw_flow is not None:
                raw_arrivals, smoothing = raw_flow, arrival_weight
            else:
                raw_arrivals, smoothing = busy / duration + (raw_trend or 0.0), weight
            self._arrivals = self._smooth(self._arrivals, max(0.0, raw_arrivals), smoothing)
            arrivals = self._arrivals
        signals = Signals(
            backlog=backlog,
            trend_per_second=self._trend if raw_trend is not None else None,
            workers=workers,
            busy=busy,
            average_seconds=duration,
            arrivals_per_second=arrivals,
            processes=processes,
        )
        current = self._pool.capacity
        decision = decide_pool_size(current, signals, tuning)
        if decision.reason == "in_band" and processes is not None and processes > 1:
            share = workers / processes
            if abs(current - share) > max(1.0, _SHARE_SLACK * share):
                size = max(tuning.min_workers, min(tuning.max_workers, _round_half_away(share)))
                decision = Decision(size, "converging")
        self.last_decision = decision
        direction = (decision.size > current) - (decision.size < current)
        if direction == 0:
            self._wanted = 0
            self._wanted_direction = 0
            return decision
        self._wanted = self._wanted + 1 if direction == self._wanted_direction else 1
        self._wanted_direction = direction
        reversal = direction == -self._direction and decision.reason != "queue_empty"
        if (
            reversal
            and not far
            and abs(decision.size - current) < _REVERSAL_MIN_STEP
            and self._wanted < _REVERSAL_DECISIONS
        ):
            return Decision(current, "hysteresis")
        cooldown = tuning.cooldown_seconds
        if cooldown > 0 and self._last_change is not None and now - self._last_change < cooldown:
            return decision
        self._pool.resize(decision.size)
        self._last_change = now
        self._direction = direction
        return decision


def estimator(seeds: int, load: float, flow: bool, arrival_waits: float) -> dict[str, object]:
    """The figures of each seed at `load` x the rates with `_VariantAutoscaler`."""
    from tests.tuning.figures import _of, decisions_to_band, in_band, reversals_per_minute

    phases = [Phase(p.name, p.rate * load, p.seconds) for p in STEADY]
    tuning = dataclasses.replace(TUNING, max_workers=round(TUNING.max_workers * load))
    make = functools.partial(
        _VariantAutoscaler, tuning=tuning, flow=flow, arrival_waits=arrival_waits
    )
    reversals, shares, to_band = [], [], []
    for seed in range(seeds):
        run = simulate(phases, tuning, seed=seed, flow_scaler=make)
        steady = _of(run, "steady")
        reversals.append(round(reversals_per_minute(steady, _of(run, "warmup")[-1].size_after), 2))
        shares.append(round(in_band(steady, tuning), 3))
        to_band.append(decisions_to_band(run, tuning))
    print(
        f"load {load:g}x  flow {flow}  rev/min {min(reversals):.1f}-"
        f"{max(reversals):.1f} (mean {sum(reversals) / seeds:.2f})  in band "
        f"{min(shares):.1%}-{max(shares):.1%} (mean {sum(shares) / seeds:.1%})  "
        f"to band {to_band[:5]} (max {max(to_band)})",
        flush=True,
    )
    return {
        "load": load,
        "flow": flow,
        "arrival_waits": arrival_waits,
        "reversals_per_minute": reversals,
        "in_band": shares,
        "decisions_to_band": to_band,
    }


class _RelayScaler:
    """The relay of ``--relay``: around n = conservation arrivals x duration."""

    def __init__(self, pool: WorkerPool, clock: Clock, *, window: float, back: float) -> None:
        self._pool = pool
        self._clock = clock
        self._back = back
        self._fallback = Autoscaler(pool, TUNING, clock=clock)
        self._estimate = _FlowEstimate(window)

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
    ) -> None:
        now = self._clock.monotonic()
        self._estimate.observe(now, backlog, in_flight, completed, average_seconds)
        arrivals, duration = self._estimate.arrivals, self._estimate.duration
        lower = TUNING.desired_wait_seconds - TUNING.wait_tolerance_seconds
        upper = TUNING.desired_wait_seconds + TUNING.wait_tolerance_seconds
        current = self._pool.capacity
        wait = predicted_wait(duration, backlog, current)
        if (
            arrivals is None
            or duration is None
            or wait is None
            or now < STEADY[0].seconds
            or wait > _FAR_FACTOR * upper
        ):
            self._fallback.apply(
                backlog=backlog, workers=workers, busy=busy, average_seconds=average_seconds
            )
            return
        neutral = arrivals * duration
        short, past = math.floor(neutral), math.floor(neutral) + 1
        size = current
        if wait > upper and current <= short:
            size = past + (wait > upper + 0.5)
        elif wait > upper and current == past and wait > upper + 0.25:
            size = past + 1
        elif wait < lower and current >= past:
            size = short - (wait < lower - 0.5)
        elif wait < lower and current == short and wait < lower - 0.25:
            size = short - 1
        elif lower <= wait <= upper and current > past:
            size = past if wait <= TUNING.desired_wait_seconds + self._back else current
        elif lower <= wait <= upper and current < short:
            size = short if wait >= TUNING.desired_wait_seconds - self._back else current
        self._pool.resize(max(1, size))


def relay(seeds: int, windows: list[float], backs: list[float]) -> list[dict[str, float]]:
    """The steady-phase figures of `_RelayScaler` per window and return point."""
    from tests.tuning.figures import _of, in_band, reversals_per_minute

    rows = []
    for window in windows:
        for back in backs:
            make = functools.partial(_RelayScaler, window=window, back=back)
            reversals, shares = [], []
            for seed in range(seeds):
                run = simulate(STEADY[:2], TUNING, seed=seed, flow_scaler=make)
                steady = _of(run, "steady")
                start = _of(run, "warmup")[-1].size_after
                reversals.append(reversals_per_minute(steady, start))
                shares.append(in_band(steady, TUNING))
            row = {
                "window": window,
                "return": back,
                "reversals_mean": round(sum(reversals) / seeds, 2),
                "reversals_min": round(min(reversals), 2),
                "reversals_max": round(max(reversals), 2),
                "in_band_mean": round(sum(shares) / seeds, 3),
                "in_band_min": round(min(shares), 3),
                "in_band_max": round(max(shares), 3),
            }
            print(
                f"window {window:g} s  return {back:+g} s  rev/min {min(reversals):.1f}-"
                f"{max(reversals):.1f} (mean {row['reversals_mean']:.2f})  in band "
                f"{min(shares):.1%}-{max(shares):.1%} (mean {row['in_band_mean']:.1%})",
                flush=True,
            )
            rows.append(row)
    return rows


def _share_ratios(seed: int, processes: int) -> tuple[float, float]:
    run = simulate(STEADY, TUNING, seed=seed, processes=processes)
    begin = run.phase_starts["steady"] + 60
    stop = run.phase_starts["burst"]
    ratios = sorted(max(s) / min(s) for t, s in run.sizes if begin <= t < stop)
    return ratios[-1], ratios[int(0.95 * len(ratios))]


def _polyline(points: list[tuple[float, float]], colour: str, dash: str = "") -> str:
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.2"{extra} points="{path}"/>'


def write_svg(run: Run, path: Path) -> None:
    """Pool size (top) and predicted wait (bottom) against simulated time."""
    width, height, left, panel, gap = 900, 460, 60, 180, 40
    end = max(d.at for d in run.decisions)
    decisions = [d for d in run.decisions if d.process == 0]

    def x(t: float) -> float:
        return left + (width - left - 20) * t / end

    max_size = max(d.size_after for d in decisions) * 1.1
    max_wait = 6.0
    top, bottom = 20, 20 + panel + gap

    def y_size(size: float) -> float:
        return top + panel * (1 - size / max_size)

    def y_wait(wait: float) -> float:
        return bottom + panel * (1 - min(wait, max_wait) / max_wait)

    lower = TUNING.desired_wait_seconds - TUNING.wait_tolerance_seconds
    upper = TUNING.desired_wait_seconds + TUNING.wait_tolerance_seconds
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<rect x="{left}" y="{y_wait(upper):.1f}" width="{width - left - 20}" '
        f'height="{y_wait(lower) - y_wait(upper):.1f}" fill="#dfe"/>',
    ]
    for phase in STEADY:
        start = run.phase_starts[phase.name]
        parts.append(
            f'<line x1="{x(start):.1f}" x2="{x(start):.1f}" y1="{top}" '
            f'y2="{bottom + panel}" stroke="#ccc"/>'
        )
        parts.append(f'<text x="{x(start) + 3:.1f}" y="{top + 10}">{phase.name}</text>')
        ideal = phase.rate * 0.5
        parts.append(
            _polyline(
                [(x(start), y_size(ideal)), (x(start + phase.seconds), y_size(ideal))],
                "#888",
                "4 3",
            )
        )
    parts.append(_polyline([(x(d.at), y_size(d.size_after)) for d in decisions], "#1f5fbf"))
    parts.append(
        _polyline(
            [(x(d.at), y_wait(d.predicted)) for d in decisions if d.predicted is not None],
            "#c0392b",
        )
    )
    for value in (0, 50, 100, 150, 200):
        if value <= max_size:
            parts.append(
                f'<text x="{left - 5}" y="{y_size(value) + 4:.1f}" text-anchor="end">{value}</text>'
            )
    for value in (0, 2, 4, 6):
        parts.append(
            f'<text x="{left - 5}" y="{y_wait(value) + 4:.1f}" text-anchor="end">{value} s</text>'
        )
    for t in range(0, int(end) + 1, 120):
        parts.append(
            f'<text x="{x(t):.1f}" y="{bottom + panel + 14}" text-anchor="middle">{t} s</text>'
        )
    parts.append(
        f'<text x="{left}" y="{top + panel + 14}">pool size (blue; dashed: arrivals x mean '
        "duration)</text>"
    )
    parts.append(
        f'<text x="{left}" y="{bottom - 6}">predicted wait at each decision (red; green: '
        f"band {lower:g}-{upper:g} s, clipped at {max_wait:g} s)</text>"
    )
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--svg", default=str(ROOT / "docs/images/tuning-noise.svg"))
    parser.add_argument(
        "--bound",
        action="store_true",
        help="instead: the optimal policy of a model of the steady phase, per mu",
    )
    parser.add_argument("--mu", type=float, nargs="+", default=[0.07, 0.1, 0.14])
    parser.add_argument(
        "--bound-window",
        type=float,
        nargs="*",
        default=[],
        help="with --bound: also with the arrival rate estimated over these seconds",
    )
    parser.add_argument(
        "--dwell",
        type=float,
        nargs="+",
        help="instead: a minimum dwell (s) between direction reversals, per value",
    )
    parser.add_argument("--load", type=float, default=1.0, help="with --dwell: rate factor")
    parser.add_argument("--dwell-far", type=float, default=2.0, help="with --dwell: urgency")
    parser.add_argument(
        "--estimator",
        choices=["busy", "flow"],
        help="instead: the law with this arrival estimate, at --load",
    )
    parser.add_argument(
        "--arrival-waits", type=float, default=4.0, help="with --estimator flow: smoothing"
    )
    parser.add_argument(
        "--relay",
        type=float,
        nargs="+",
        help="instead: a relay around the neutral size, per arrival window (s)",
    )
    parser.add_argument(
        "--relay-return", type=float, nargs="+", default=[-0.25, 0.0], help="with --relay"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    variants: list[tuple[str, object, Callable[[], object]]] = [
        ("relay", args.relay, lambda: relay(args.seeds, args.relay, args.relay_return)),
        (
            "estimator",
            args.estimator,
            lambda: estimator(args.seeds, args.load, args.estimator == "flow", args.arrival_waits),
        ),
        ("dwell", args.dwell, lambda: dwell(args.seeds, args.dwell, args.load, args.dwell_far)),
        ("bound", args.bound, lambda: bound(args.seeds, args.mu, args.bound_window)),
    ]
    for name, wanted, measure in variants:
        if wanted:
            result = measure()
            print(f"{time.perf_counter() - started:.1f} s of wall time", file=sys.stderr)
            print(json.dumps({name: result}))
            return
    rows = []
    print("seed  rev/min  in-band  to-band  fixed(size, in-band)  2p max/p95  3p max/p95")
    for seed in range(args.seeds):
        figures = steady_figures(seed)
        size, fixed = best_fixed_in_band(seed)
        two = _share_ratios(seed, 2)
        three = _share_ratios(seed, 3)
        rows.append(
            {
                "seed": seed,
                "reversals_per_minute": round(figures.reversals_per_minute, 2),
                "in_band": round(figures.in_band, 3),
                "decisions_to_band": figures.decisions_to_band,
                "fixed_size": size,
                "fixed_in_band": round(fixed, 3),
                "two_ratio_max": round(two[0], 2),
                "two_ratio_p95": round(two[1], 2),
                "three_ratio_max": round(three[0], 2),
                "three_ratio_p95": round(three[1], 2),
            }
        )
        print(
            f"{seed:4d}  {figures.reversals_per_minute:7.2f}  {figures.in_band:7.1%}  "
            f"{figures.decisions_to_band:7d}  {size:10d} {fixed:8.1%}  "
            f"{two[0]:5.2f}/{two[1]:4.2f}  {three[0]:5.2f}/{three[1]:4.2f}",
            flush=True,
        )
    if args.svg != "-":
        write_svg(simulate(STEADY, TUNING, seed=0), Path(args.svg))
    print(f"{time.perf_counter() - started:.1f} s of wall time", file=sys.stderr)
    print(json.dumps({"seeds": rows}))


if __name__ == "__main__":
    main()
