"""bench/tuning_sim.py's copy of `Autoscaler.apply` still is the law.

The bench measures a rejected variant of the law (``--estimator flow``) on a
copy of `Autoscaler.apply`, so the variant need not live in the library. A copy
drifts silently when the law changes: with the variant off it must make exactly
the decisions the real Autoscaler makes on the same arrivals.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from .figures import STEADY, TUNING
from .simulation import simulate

BENCH = Path(__file__).resolve().parents[2] / "bench" / "tuning_sim.py"


@functools.cache
def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tuning_sim_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(5))
def test_the_bench_copy_with_the_variant_off_decides_as_the_law(seed: int) -> None:
    variant = functools.partial(
        _bench()._VariantAutoscaler, tuning=TUNING, flow=False, arrival_waits=4.0
    )

    law = simulate(STEADY, TUNING, seed=seed)
    copy = simulate(STEADY, TUNING, seed=seed, flow_scaler=variant)

    assert copy.decisions == law.decisions
