"""The boundary probes on real time, where calls take time: proven verdicts or a clear failure.

The fake-clock path is exercised by every memory run of the suite and the Redis and
SQLite harnesses use the age_lease hook, so these run the in-memory backend on the
system clock through a bare queue factory (no hooks): every edge is waited out and
bounded by measured time. A backend that is right passes, one that is 5 % early fails
with the measured bounds, and a machine too slow to place a probe inside its slack
fails asking for a larger time scale rather than passing or skipping.
"""

from __future__ import annotations

import asyncio

import pytest

from taskrunner.queue import Queue
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_conformance import ConformanceReport, QueueFactoryHarness, run
from taskrunner_conformance.settings import TIME_SCALE_ENV

from .broken_timing import _Reclaims

# Short, to keep the real waits short; long against the few-ms calls of the memory backend.
LEASE_SECONDS = 0.5

EDGES = ["X10", "X11", "X12", "X13", "X14", "X15", "X16", "X17", "X18", "X19"]


def real_time(queue_class: type[InMemoryQueue] = InMemoryQueue) -> QueueFactoryHarness:
    """The memory backend on the system clock, one store per namespace, no hooks."""
    stores: dict[str, InMemoryQueue] = {}

    async def open_queue(namespace: str) -> Queue:
        store = stores.setdefault(namespace, InMemoryQueue())
        return queue_class._on_store(store._store)

    return QueueFactoryHarness(open_queue, lease_seconds=LEASE_SECONDS)


class ReclaimsFifteenPercentEarly(_Reclaims):
    """Off by more than the real-time probes' window (p + 2 x 3 % of the lease)."""

    def _lapsed(self, idle: float, lease: float, reclaimer_lease: float) -> bool:
        return idle > 0.85 * lease


class Oversleeping(QueueFactoryHarness):
    """Real time on a machine whose sleeps overshoot by far more than the probes' slack."""

    async def advance(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) + 0.1)


def outcomes(report: ConformanceReport) -> dict[str, str]:
    return {r.definition.id: r.outcome for r in report.properties}


def test_correct_backend_on_real_time_passes_every_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIME_SCALE_ENV, "1")

    report = run(real_time, properties=EDGES, quiet=True)

    results = outcomes(report)
    assert {results[p] for p in EDGES} == {"passed"}, report.format()


def test_reclaiming_fifteen_percent_early_fails_on_real_time_with_the_measured_bounds() -> None:
    report = run(lambda: real_time(ReclaimsFifteenPercentEarly), properties=["X10"], quiet=True)

    (result,) = (r for r in report.properties if r.definition.id == "X10")
    text = report.format()
    assert result.outcome == "failed", text
    # The verdict is certain; on a machine too loaded to place the probes, the reason
    # says so instead of naming the bounds.
    assert "before its edge of" in text or "too slow or too loaded" in text, text


def test_too_slow_a_machine_fails_the_edges_asking_for_a_larger_time_scale() -> None:
    def slow() -> QueueFactoryHarness:
        fast = real_time()
        return Oversleeping(fast._factory, lease_seconds=LEASE_SECONDS)

    report = run(slow, properties=["X18"], quiet=True)

    (result,) = (r for r in report.properties if r.definition.id == "X18")
    text = report.format()
    assert result.outcome == "failed", text
    assert f"too slow or too loaded for these timings: raise {TIME_SCALE_ENV}" in text
