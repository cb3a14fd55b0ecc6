"""Concurrent producers and consumers with injected faults, recorded into a `History`.

The workload runs in rounds. In each round every producer adds a small batch and
every consumer, concurrently, heartbeats what it holds, acks what it finished,
maybe releases one, maybe stalls on one (stops heartbeating it, like a long GC
pause), maybe crashes (drops everything and comes back as a new incarnation), then
receives up to its capacity and sometimes reclaims. Between rounds a quarter of a
lease passes (on simulated or real time); with an ``age_lease`` hook and real time
no time is spent and stalled or abandoned leases are aged through the hook instead.

Every handle is wrapped in `History.wrap`, so the run can be judged afterwards by
`taskrunner_conformance.history.check_history`. A final drain by one consumer takes
whatever is left so that "unfinished" means lost.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field

from taskrunner.queue import Delivery

from .history import History, RecordingQueue
from .scenario import IDLE_POLLS, Scenario

__all__ = ["Faults", "run_workload"]

# Deliveries one consumer holds at most.
CAPACITY = 4


@dataclass(frozen=True, slots=True)
class Faults:
    """Which faults the workload injects.

    Attributes:
        stalls: Consumers stop heartbeating a message for longer than a lease.
        crashes: Consumers drop everything they hold and restart under a new name.
        releases: Consumers release finished messages for a retry instead of acking.
    """

    stalls: bool = False
    crashes: bool = False
    releases: bool = False


@dataclass(slots=True)
class _Held:
    delivery: Delivery
    work_left: int
    stalled: int = 0


@dataclass(slots=True)
class _Consumer:
    label: str
    name: str
    queue: RecordingQueue
    held: dict[str, _Held] = field(default_factory=dict)


async def run_workload(
    s: Scenario,
    history: History,
    *,
    messages: int,
    consumers: int = 8,
    producers: int = 2,
    faults: Faults = Faults(),
    seed: int = 0,
) -> None:
    """Add `messages` messages and process them all, then drain the queue.

    Raises:
        AssertionError: The queue did not drain within the round and time limits.
    """
    rng = random.Random(seed)
    tick = 0.0 if s.time_mode == "age" else s.lease / 4
    stall_rounds = math.ceil(s.lapse_age / tick) + 1 if tick else 2
    producer_queues = [history.wrap(await s.open(), f"producer{i}") for i in range(producers)]
    crew = []
    for index in range(consumers):
        name = s.consumer(f"c{index}")
        crew.append(_Consumer(f"c{index}", name, history.wrap(await s.open(), name)))
    abandoned: list[tuple[RecordingQueue, Delivery]] = []
    added = 0

    async def produce(queue: RecordingQueue) -> None:
        nonlocal added
        if added >= messages:
            return
        batch = min(messages - added, rng.randint(1, 8))
        start = added
        added += batch
        await queue.add([f"msg {i} {seed}".encode() for i in range(start, start + batch)])

    async def step(c: _Consumer) -> None:
        if faults.crashes and c.held and rng.random() < 0.03:
            abandoned.extend((c.queue, h.delivery) for h in c.held.values())
            if s.time_mode == "age":
                for held in c.held.values():
                    await _age(s, history, c.queue, held.delivery)
            c.held.clear()
            c.name = s.consumer(c.label)
            return
        active = [h.delivery for h in c.held.values() if not h.stalled]
        if active:
            for lost in await c.queue.heartbeat(active):
                c.held.pop(lost.message_id, None)
        finished = [h.delivery for h in c.held.values() if not h.stalled and h.work_left <= 0]
        if finished:
            if faults.releases and rng.random() < 0.2:
                retry, finished = finished[:1], finished[1:]
                await c.queue.release(retry)
                c.held.pop(retry[0].message_id, None)
            if finished:
                await c.queue.ack(finished)
                for delivery in finished:
                    c.held.pop(delivery.message_id, None)
        for held in c.held.values():
            if held.stalled:
                held.stalled -= 1
            else:
                held.work_left -= 1
        if faults.stalls and rng.random() < 0.08:
            candidates = [h for h in c.held.values() if not h.stalled]
            if candidates:
                victim = rng.choice(candidates)
                victim.stalled = stall_rounds
                if s.time_mode == "age":
                    await _age(s, history, c.queue, victim.delivery)
        room = CAPACITY - len(c.held)
        got: list[Delivery] = []
        if room > 0:
            got += await c.queue.receive(
                c.name, max_messages=room, wait_seconds=0, lease_seconds=s.lease
            )
        if rng.random() < 0.3:
            got += await c.queue.reclaim(c.name, lease_seconds=s.lease, max_messages=2)
        for delivery in got:
            c.held[delivery.message_id] = _Held(delivery, work_left=rng.randint(0, 2))

    max_rounds = 40 + 4 * math.ceil(messages / (consumers * CAPACITY)) * (3 if faults.stalls else 1)
    for _ in range(max_rounds):
        jobs = [produce(q) for q in producer_queues] + [step(c) for c in crew]
        rng.shuffle(jobs)
        await asyncio.gather(*jobs)
        if tick:
            await s.advance(tick)
        if added >= messages and not any(c.held for c in crew) and await s.queue.len() == 0:
            break

    # Whatever is still held is abandoned to the drain, like a shutdown without release.
    for c in crew:
        abandoned.extend((c.queue, h.delivery) for h in c.held.values())
    await _drain(s, history, abandoned)


async def _age(s: Scenario, history: History, queue: RecordingQueue, delivery: Delivery) -> None:
    await s.age(queue.inner, [delivery], s.lapse_age)
    history.record_age(delivery, s.lapse_age)


async def _drain(
    s: Scenario, history: History, abandoned: list[tuple[RecordingQueue, Delivery]]
) -> None:
    name = s.consumer("drain")
    queue = history.wrap(await s.open(), name)
    if s.time_mode == "age":
        for owner, delivery in abandoned:
            await _age(s, history, owner, delivery)
    else:
        await s.advance(s.lapse_age)
    deadline = time.monotonic() + 5 * s.grace
    idle_rounds_left = IDLE_POLLS
    # Each productive round completes up to 100 messages, so this many always suffice.
    for _ in range(await queue.len() // 50 + IDLE_POLLS + 10):
        left = await queue.len()
        if left == 0:
            return
        got = await queue.receive(name, max_messages=50, wait_seconds=0, lease_seconds=s.lease)
        if s.requires_heartbeat:
            got += await queue.reclaim(name, lease_seconds=s.lease, max_messages=50)
        if got:
            await queue.ack(got)
            continue
        idle_rounds_left -= 1
        assert not s.gave_up(idle_rounds_left, deadline), (
            f"drain: {left} message(s) left that neither receive nor reclaim returns"
        )
        if s.time_mode == "clock":
            await s.advance(s.lapse_age)
        else:
            await s.pause()
    raise AssertionError(f"drain: {await queue.len()} message(s) left; acked ones came back?")
