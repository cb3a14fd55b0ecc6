"""A Redis restart shorter than the documented bound never runs a message twice at once.

A restarted server (``appendonly yes``, ``appendfsync always``) counts its downtime as
idle time of every pending entry: a lease's age runs from its last heartbeat that got
through. docs/redis.md ("Restarts") derives the longest safe outage:

    lease_seconds - heartbeat_interval_seconds - RETRY_MAX_SECONDS - call latency

Two runners in this process hold heartbeated tasks; the server is killed just before
one runner's next heartbeat (the worst phase: its last heartbeat is almost a whole
interval old) and comes back after an outage somewhat shorter than the bound. Every
run of every message is recorded with its start and end: no two runs of one message
may overlap, and every message must finish.

The numbers are chosen so that the code before the fix fails for certain: with
heartbeats retried only at the next tick, the first heartbeat after the return comes
after the lease ran out, and a reclaimer sweeping every 0.25 s takes the message.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis

from taskrunner import App, Producer, Runner, RunnerConfig, current_task
from taskrunner.errors import BackendUnavailableError
from taskrunner.heartbeat import RETRY_MAX_SECONDS
from taskrunner.queue import Delivery
from taskrunner_backends.redis import RedisStreamsQueue

from ..servers import RedisServer
from .helpers import eventually

pytestmark = [pytest.mark.redis, pytest.mark.slow]

LEASE = 7.0
HEARTBEAT = 2.0
# Slack the bound leaves for the calls themselves and the event loop on a loaded machine.
SLACK = 0.4
BOUND = LEASE - HEARTBEAT - RETRY_MAX_SECONDS
OUTAGE = BOUND - SLACK
# Kill this long after a runner's heartbeat got through: just before its next.
PHASE = HEARTBEAT - 0.1
TASKS = 16


@dataclass
class Run:
    """One run of one message in one worker."""

    n: int
    consumer: str
    started: float
    ended: float | None = None


class WatchedQueue(RedisStreamsQueue):
    """A handle that remembers when each of its non-empty heartbeats got through.

    While `hold` is clear, its heartbeats wait (they then reach a dead server).
    """

    def __init__(self, url: str, namespace: str) -> None:
        super().__init__(
            aioredis.Redis.from_url(url), queue_name="q", namespace=namespace, owns_client=True
        )
        self.beats: list[float] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        await self.hold.wait()
        lost = await super().heartbeat(deliveries)
        if deliveries:
            self.beats.append(time.monotonic())
        return lost


@dataclass
class Outcome:
    runs: list[Run] = field(default_factory=list)
    outage: float = 0.0
    phase: float = 0.0
    leftover: int = -1

    def overlapping(self) -> list[tuple[Run, Run]]:
        """Pairs of runs of the same message that ran at the same time."""
        pairs = []
        for first, second in itertools.combinations(self.runs, 2):
            if first.n != second.n:
                continue
            first_end = first.ended if first.ended is not None else float("inf")
            second_end = second.ended if second.ended is not None else float("inf")
            if first.started < second_end and second.started < first_end:
                pairs.append((first, second))
        return pairs


async def restart_under_load(
    server: RedisServer,
    namespace: str,
    *,
    outage: float,
    phase: float,
    lease: float = LEASE,
    heartbeat: float = HEARTBEAT,
    tasks: int = TASKS,
) -> Outcome:
    """Kill `server` `phase` s after a runner's heartbeat; start it after `outage` s."""
    app = App("q")
    outcome = Outcome()
    finish = asyncio.Event()

    @app.task(name="hold", max_retries=5)
    async def hold(n: int) -> None:
        run = Run(n, current_task().consumer, time.monotonic())
        outcome.runs.append(run)
        try:
            await finish.wait()  # the task's work: it runs until the test has seen enough
        finally:
            run.ended = time.monotonic()

    config = RunnerConfig(
        # Free workers: a full pool would not reclaim at all, hiding any lapsed lease.
        num_workers=tasks,
        lease_seconds=lease,
        heartbeat_interval_seconds=heartbeat,
        # Sweep often: a lease that lapses is taken at once, the worst case for it.
        reclaim_interval_seconds=0.25,
        block_seconds=0.5,
    )
    queues = [WatchedQueue(server.url, namespace) for _ in range(3)]
    producer_queue, a_queue, b_queue = queues
    runners = [Runner(a_queue, app, config), Runner(b_queue, app, config)]
    runs = [asyncio.create_task(r.run()) for r in runners]
    try:
        await Producer(producer_queue, app).dispatch_many(hold, range(tasks))
        await _wait(lambda: len(outcome.runs) == tasks, "every task started")
        # Time the fault against the heartbeats of whichever runner beats first (the
        # other may hold no task at all).
        before = [len(q.beats) for q in (a_queue, b_queue)]
        await _wait(lambda: [len(q.beats) for q in (a_queue, b_queue)] != before, "a heartbeat")
        watched = a_queue if len(a_queue.beats) > before[0] else b_queue
        last_beat = watched.beats[-1]
        # No heartbeat of the watched runner may slip in before the kill, even if this
        # loop runs late; a late kill then only moves time from the outage to the phase.
        watched.hold.clear()
        await asyncio.sleep(last_beat + phase - time.monotonic())  # the fault's timing
        await asyncio.to_thread(server.stop, kill=True)
        killed = time.monotonic()
        watched.hold.set()
        outcome.phase = killed - last_beat
        # Starting takes a moment too (about 50 ms); aim at the planned return.
        await asyncio.sleep(last_beat + phase + outage - 0.05 - time.monotonic())
        await asyncio.to_thread(server.start)
        outcome.outage = time.monotonic() - killed

        # Any lease the outage broke lapses within one lease of the return; a sweep
        # every 0.25 s takes it. Then the tasks finish and everything must be acked.
        await asyncio.sleep(lease + 1.0)
        finish.set()
        await _wait(lambda: all(run.ended is not None for run in outcome.runs), "every run ended")
        leftover = await eventually(
            lambda: _length(producer_queue), lambda n: n == 0, what="every message acked"
        )
        outcome.leftover = -1 if leftover is None else leftover
    finally:
        finish.set()
        for runner in runners:
            runner.stop()
        await asyncio.gather(*runs, return_exceptions=True)
        for queue in queues:
            await queue.aclose()
    return outcome


async def test_restart_shorter_than_the_bound_runs_no_message_twice_and_loses_none(
    redis_server_factory: Callable[..., RedisServer], redis_namespace: str
) -> None:
    server = redis_server_factory(appendonly=True, appendfsync="always")

    outcome = await restart_under_load(server, redis_namespace, outage=OUTAGE, phase=PHASE)

    # The fault happened as planned: the server died at least PHASE after the watched
    # runner's last heartbeat and was down for most of OUTAGE, and the leases' idle time
    # at the return stays under what the bound allows (a machine too loaded to restart
    # a server in time fails here, saying so).
    assert outcome.phase >= PHASE - 0.05, outcome
    assert outcome.outage >= OUTAGE - 0.5, outcome
    assert outcome.phase + outcome.outage < LEASE - RETRY_MAX_SECONDS - 0.1, outcome
    assert outcome.overlapping() == []
    assert sorted({run.n for run in outcome.runs}) == list(range(TASKS))
    assert all(run.ended is not None for run in outcome.runs)
    assert outcome.leftover == 0


async def _wait(condition: Callable[[], bool], what: str) -> None:
    async def check() -> bool:
        return condition()

    await eventually(check, lambda ok: ok, what=what)


async def _length(queue: RedisStreamsQueue) -> int | None:
    try:
        return await queue.len()
    except BackendUnavailableError:
        return None  # a pooled connection from before the restart fails once
