"""The monitor: what the queue looks like from here, every few seconds.

Internal module. Every ``monitor_interval_seconds`` it publishes this process in the
backend's worker registry (when the backend has one), reads the ready backlog from
the backend's stats (ready messages, not a length that counts processed entries) and
the live processes from the registry, and computes the predicted wait. Then it lets the
autoscaler react (tuning mode), publishing again when the pool was resized so that peers
never size their share from this process's old size, and checks the long-queue
threshold. Every
``_CLEANUP_INTERVAL_SECONDS`` it also asks the backend to forget consumers idle for
`consumer_idle_seconds` that hold no message (names are unique per process, so dead
processes would otherwise leave their consumers behind forever).

The backend's whole `QueueStats` snapshot is kept with the time it was read
(`Monitor.queue_stats`), so metrics can serve the ready, delayed, in-flight and dead
counts without a backend call per scrape: a scrape answers from the last read even
while the backend is down, and says how old that read is (`Monitor.queue_stats_age`).

The long-queue hook fires once per episode: when the predicted wait rises above the
threshold, and again only after it fell below 80 % of it. The hook runs in its own
task (a plain function in a thread), so a slow hook never stalls the workers; while one
call is still running, the next episode's call is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from taskrunner.callbacks import call_callback
from taskrunner.clock import Clock
from taskrunner.config import LongQueueHook
from taskrunner.errors import BackendError
from taskrunner.pool import WorkerPool
from taskrunner.queue import Queue, QueueStats, WorkerInfo
from taskrunner.stats import StatsRecorder
from taskrunner.tuning import Autoscaler, predicted_wait

__all__ = ["Monitor", "Observation", "QueueReading"]

_log = logging.getLogger("taskrunner.monitor")

# The hook re-arms once the predicted wait falls below this fraction of the threshold.
_REARM_FRACTION = 0.8

# Registry entries outlive this many missed publications before they expire.
_TTL_INTERVALS = 3

# How often idle consumers are cleaned up, in seconds.
_CLEANUP_INTERVAL_SECONDS = 600.0

Spawn = Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One look at the queue.

    Attributes:
        backlog: Ready messages in the backend.
        workers: Workers serving the queue across processes (this one alone when the
            backend has no registry).
        busy: Of those, running a task.
        processes: Live worker processes counted in `workers`.
        average_seconds: Worker-weighted average task duration, None before any.
        predicted_wait_seconds: average x backlog / workers; None when unknown.
    """

    backlog: int
    workers: int
    busy: int
    processes: int
    average_seconds: float | None
    predicted_wait_seconds: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueReading:
    """The backend's statistics as last read, and when.

    Attributes:
        stats: What `Queue.stats` returned.
        read_at: Wall-clock time (Unix seconds) the read returned.
        read_monotonic: The monitor clock's monotonic reading at that moment (for ages
            that a wall-clock step cannot make negative).
    """

    stats: QueueStats
    read_at: float
    read_monotonic: float


class Monitor:
    """Observes the queue periodically and reacts to what it sees.

    Args:
        queue: The backend.
        pool: This process's worker pool.
        stats: This process's counters (for its average duration).
        instance: This process's unique name in the registry.
        clock: Paces the observations.
        interval_seconds: Time between two observations.
        spawn: Starts a task in the runner's task group (for hook calls).
        autoscaler: Resizes the pool after each observation, in tuning mode.
        threshold_seconds: Predicted wait above which `hook` fires.
        hook: The long-queue hook.
        consumer_idle_seconds: Idle time after which a consumer holding no message is
            forgotten (when the backend supports it).
    """

    def __init__(
        self,
        queue: Queue,
        pool: WorkerPool,
        stats: StatsRecorder,
        *,
        instance: str,
        clock: Clock,
        interval_seconds: float,
        spawn: Spawn,
        autoscaler: Autoscaler | None = None,
        threshold_seconds: float | None = None,
        hook: LongQueueHook | None = None,
        consumer_idle_seconds: float = 3600.0,
    ) -> None:
        self._queue = queue
        self._pool = pool
        self._stats = stats
        self._instance = instance
        self._clock = clock
        self._interval = interval_seconds
        self._spawn = spawn
        self._autoscaler = autoscaler
        self._threshold = threshold_seconds
        self._hook = hook
        self._armed = True
        self._hook_task: asyncio.Task[None] | None = None
        self._registry = queue.worker_registry
        self._cleanup = queue.consumer_cleanup
        self._consumer_idle = consumer_idle_seconds
        self._last_cleanup: float | None = None
        self.latest: Observation | None = None
        self.queue_stats: QueueReading | None = None
        """The last successful read of the backend's statistics, None before the first."""

    async def run(self) -> None:
        """Observe every interval until cancelled, then leave the registry."""
        try:
            while True:
                try:
                    await self.observe()
                except BackendError as exc:
                    _log.warning("could not read the queue's statistics: %s", exc)
                except Exception:
                    # A bug must not end monitoring for the life of the process.
                    _log.exception("monitor crashed")
                await self._clock.sleep(self._interval)
        finally:
            if self._hook_task is not None:
                # A hook still running must not keep the runner from stopping.
                self._hook_task.cancel()
            if self._registry is not None:
                # Best effort: an entry left behind expires on its own after its TTL.
                with contextlib.suppress(BackendError, asyncio.CancelledError):
                    await asyncio.shield(self._registry.remove_worker(self._instance))

    async def observe(self) -> Observation:
        """Publish, read, compute, react; returns the new observation."""
        succeeded, failed = self._stats.attempt_totals()
        me = WorkerInfo(
            instance=self._instance,
            workers=self._pool.capacity,
            busy=self._pool.busy,
            average_seconds=self._stats.average_seconds,
            seen_at=self._clock.time(),
            succeeded=succeeded,
            failed=failed,
        )
        peers: dict[str, WorkerInfo] = {}
        if self._registry is not None:
            await self._registry.publish_worker(me, ttl_seconds=_TTL_INTERVALS * self._interval)
            peers = {info.instance: info for info in await self._registry.live_workers()}
        peers[me.instance] = me
        queue_stats = await self._queue.stats()
        self.queue_stats = QueueReading(
            stats=queue_stats, read_at=self._clock.time(), read_monotonic=self._clock.monotonic()
        )
        backlog = queue_stats.ready
        workers = sum(info.workers for info in peers.values())
        busy = sum(info.busy for info in peers.values())
        timed = [info for info in peers.values() if info.average_seconds is not None]
        weight = sum(info.workers for info in timed)
        average = (
            sum(cast(float, info.average_seconds) * info.workers for info in timed) / weight
            if weight
            else None
        )
        observation = Observation(
            backlog=backlog,
            workers=workers,
            busy=busy,
            processes=len(peers),
            average_seconds=average,
            predicted_wait_seconds=predicted_wait(average, backlog, workers),
        )
        self.latest = observation
        if self._autoscaler is not None:
            self._autoscaler.apply(
                backlog=backlog,
                workers=workers,
                busy=busy,
                average_seconds=average,
                processes=len(peers),
            )
            if self._registry is not None and self._pool.capacity != me.workers:
                # Peers divide the cluster's target by what they read here: a size
                # one interval old made them over-grow (issue 17).
                resized = msgspec.structs.replace(me, workers=self._pool.capacity)
                await self._registry.publish_worker(
                    resized, ttl_seconds=_TTL_INTERVALS * self._interval
                )
        self._check_long_queue(observation.predicted_wait_seconds)
        await self._clean_up_consumers()
        return observation

    def queue_stats_age(self) -> float | None:
        """Seconds since `queue_stats` was read (monitor clock), None before the first read."""
        reading = self.queue_stats
        if reading is None:
            return None
        return max(0.0, self._clock.monotonic() - reading.read_monotonic)

    async def _clean_up_consumers(self) -> None:
        now = self._clock.monotonic()
        if self._cleanup is None or (
            self._last_cleanup is not None and now - self._last_cleanup < _CLEANUP_INTERVAL_SECONDS
        ):
            return
        self._last_cleanup = now
        removed = await self._cleanup.remove_idle_consumers(self._consumer_idle)
        if removed:
            _log.info("forgot %d idle consumer(s) holding no message", len(removed))

    def _check_long_queue(self, predicted: float | None) -> None:
        if self._threshold is None or self._hook is None or predicted is None:
            return
        if not self._armed:
            if predicted < _REARM_FRACTION * self._threshold:
                self._armed = True
            return
        if predicted <= self._threshold:
            return
        self._armed = False
        if self._hook_task is not None and not self._hook_task.done():
            _log.warning("long-queue hook still running from the last episode; skipped")
            return
        _log.warning(
            "predicted wait %.1fs exceeds the long-queue threshold %.1fs",
            predicted,
            self._threshold,
        )
        self._hook_task = self._spawn(_call_hook(self._hook, predicted))


async def _call_hook(hook: LongQueueHook, predicted: float) -> None:
    try:
        await call_callback(hook, predicted)
    except Exception:
        _log.exception("long-queue hook raised")
