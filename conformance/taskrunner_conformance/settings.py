"""Environment knobs of the suite: time scale and effort.

Both are read when a test starts, so a CI job sets them once for the whole run:

``TASKRUNNER_CONFORMANCE_TIME_SCALE`` (float, default 1)
    Multiplies every real-time duration the suite derives on its own: the default
    lease of `taskrunner_conformance.BaseHarness`, the grace period granted for
    things that should happen at once, per-test time budgets. Raise it on a slow or
    loaded machine; a harness that chooses its own lease should multiply it too.
``TASKRUNNER_CONFORMANCE_EFFORT`` (float, default 1)
    Multiplies workload sizes: message counts of the concurrency tests and the
    number of hypothesis examples of the model-based test. Use 0.2 for a quick
    smoke run, 5 for a soak.
``TASKRUNNER_CONFORMANCE_SHRINK`` (``1`` or ``0``, default 1)
    Whether hypothesis shrinks a failing model-based example to a minimal one. Turn
    it off when you only need to know *that* a backend fails (shrinking a broken
    backend's failure can take a minute).
``TASKRUNNER_CONFORMANCE_SEED`` (integer, default unset)
    The seed of the model-based test (P40), the one randomised test of the suite: set
    it to replay a failing run (hypothesis prints the seed it used when P40 fails), or
    to pin P40's operations in CI. Every other test is fixed and needs no seed; the
    concurrency workloads use fixed seeds of their own.
``TASKRUNNER_CONFORMANCE_HARNESS`` (``package.module:factory``)
    The harness or queue factory the command-line path tests; see
    `taskrunner_conformance.runner`.
"""

from __future__ import annotations

import math
import os

__all__ = [
    "EFFORT_ENV",
    "HARNESS_ENV",
    "SEED_ENV",
    "SHRINK_ENV",
    "TIME_SCALE_ENV",
    "effort",
    "scaled_count",
    "seed",
    "shrink",
    "time_scale",
]

TIME_SCALE_ENV = "TASKRUNNER_CONFORMANCE_TIME_SCALE"
EFFORT_ENV = "TASKRUNNER_CONFORMANCE_EFFORT"
SHRINK_ENV = "TASKRUNNER_CONFORMANCE_SHRINK"
HARNESS_ENV = "TASKRUNNER_CONFORMANCE_HARNESS"
SEED_ENV = "TASKRUNNER_CONFORMANCE_SEED"


def _positive_float(name: str) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {text!r}")
    return value


def time_scale() -> float:
    """The multiplier for real-time durations (``TASKRUNNER_CONFORMANCE_TIME_SCALE``)."""
    return _positive_float(TIME_SCALE_ENV)


def effort() -> float:
    """The multiplier for workload sizes (``TASKRUNNER_CONFORMANCE_EFFORT``)."""
    return _positive_float(EFFORT_ENV)


def scaled_count(base: int, *, minimum: int = 1) -> int:
    """`base` times the effort setting, rounded, and never below `minimum`."""
    return max(minimum, round(base * effort()))


def shrink() -> bool:
    """Whether failing hypothesis examples are shrunk (``TASKRUNNER_CONFORMANCE_SHRINK``)."""
    return os.environ.get(SHRINK_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def seed() -> int | None:
    """The model-based test's seed (``TASKRUNNER_CONFORMANCE_SEED``), None when unset."""
    text = os.environ.get(SEED_ENV, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{SEED_ENV} must be an integer, got {text!r}") from None
