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
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.tuning.figures import (  # noqa: E402
    STEADY,
    TUNING,
    best_fixed_in_band,
    steady_figures,
)
from tests.tuning.simulation import Run, simulate  # noqa: E402


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
    args = parser.parse_args()
    started = time.perf_counter()
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
