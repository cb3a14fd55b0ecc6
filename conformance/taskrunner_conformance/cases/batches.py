"""Batch limits and concurrent wake-ups: nothing leased that nobody saw (X33, X34).

A message leased but not returned is invisible until its lease lapses: a batch clamped
after the leasing, or a woken receiver that takes more than it hands back, delays
work by a whole lease. The cases count ``stats.in_flight`` against what was returned.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from taskrunner.queue import Delivery

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["BatchCases"]

# Receivers blocked at once in X34, and messages the second add brings (fewer).
WAITERS = 8
SECOND_ADD = 3


def _ids(deliveries: list[Delivery]) -> set[str]:
    return {d.message_id for d in deliveries}


async def _until_done(
    s: Scenario, tasks: list[asyncio.Task[Any]], count: int, seconds: float
) -> int:
    """Wait until `count` of `tasks` finished, for up to `seconds` (+ grace); return how many.

    Woken receives need no simulated time, so on a fake clock only real time passes.
    """
    deadline = time.monotonic() + (0.0 if s.time_mode == "clock" else seconds) + s.grace
    while True:
        done = sum(task.done() for task in tasks)
        if done >= count or time.monotonic() >= deadline:
            return done
        await asyncio.wait(
            [t for t in tasks if not t.done()],
            timeout=max(0.0, deadline - time.monotonic()),
            return_when=asyncio.FIRST_COMPLETED,
        )


def _stamp(
    finished: dict[int, float], index: int, s: Scenario
) -> Callable[[asyncio.Task[list[Delivery]]], None]:
    """A done callback noting when receiver `index` returned, on the suite's clock."""

    def note(_: asyncio.Task[list[Delivery]]) -> None:
        finished.setdefault(index, s.now())

    return note


class BatchCases(ConformanceBase):
    """X33 and X34."""

    @conformance("X33")
    async def test_requests_above_max_batch_return_at_most_max_batch_and_lease_no_more(
        self, s: Scenario
    ) -> None:
        """Receive and reclaim asked for more than max_batch are clamped before leasing.

        Whatever a clamped call did not return is still ready (another consumer on
        another handle receives it at once) or still with its holder (its receipt is
        current), and ``stats.in_flight`` counts exactly what was handed out.
        """
        limit = s.capabilities.max_batch
        if limit is None:
            pytest.skip("backend does not claim capabilities.max_batch")
        total = 2 * limit + 3
        ids = await s.add([f"m{i}".encode() for i in range(total)])

        got = await s.queue.receive(
            s.consumer("a"), max_messages=total + 5, wait_seconds=0, lease_seconds=s.lease
        )
        assert 1 <= len(got) <= limit, (
            f"receive(max_messages={total + 5}) returned {len(got)}; max_batch is {limit}"
        )
        stats = await s.queue.stats()
        assert (stats.in_flight, stats.ready) == (len(got), total - len(got)), (
            f"receive returned {len(got)} of {total} but stats say {stats.in_flight} in flight "
            f"and {stats.ready} ready: messages were leased beyond max_batch"
        )

        other = await s.open()
        rest: list[Delivery] = []
        for _ in range(total):
            if len(got) + len(rest) == total:
                break
            more = await other.receive(
                s.consumer("b"), max_messages=total + 5, wait_seconds=0, lease_seconds=s.lease
            )
            assert 1 <= len(more) <= limit, (
                f"with {total - len(got) - len(rest)} ready, receive(max_messages={total + 5}) "
                f"returned {len(more)}; max_batch is {limit}"
            )
            rest += more
        held = got + rest
        assert len(held) == total, f"{len(held)} deliveries of {total} messages"
        assert sorted(_ids(held)) == sorted(ids), (
            "the messages a clamped receive did not return were not all receivable at once"
        )
        if not s.requires_heartbeat:
            assert await s.queue.ack(held) == []
            return

        await s.lapse(s.queue, held)
        reclaimer = s.consumer("c")
        taken = await s.queue.reclaim(reclaimer, lease_seconds=s.lease, max_messages=total + 5)
        assert len(taken) <= limit, (
            f"reclaim(max_messages={total + 5}) returned {len(taken)}; max_batch is {limit}"
        )
        assert (await s.queue.stats()).in_flight == total
        moved = _ids(taken)
        untouched = [d for d in held if d.message_id not in moved]
        assert await s.queue.heartbeat(untouched) == [], (
            "reclaim took lapsed leases it did not return (their holders' receipts are stale)"
        )
        assert await s.queue.ack(untouched + taken) == []

    @conformance("X34")
    async def test_one_add_wakes_as_many_waiting_receivers_as_it_brings_messages(
        self, s: Scenario
    ) -> None:
        """Eight receivers wait on eight handles: an add of one wakes one, an add of three three.

        No message goes to two receivers, every message added is taken while receivers
        wait, ``stats.in_flight`` always equals what the receivers returned (nothing is
        leased unseen), and the receivers left over return ``[]`` at the end of their
        wait, not before.
        """
        s.require_capability("blocking_receive")
        handles = [await s.open() for _ in range(WAITERS)]
        wait = 3 * s.lease
        finished: dict[int, float] = {}
        tasks: list[asyncio.Task[list[Delivery]]] = []
        started = s.now()
        for index, handle in enumerate(handles):
            task = asyncio.create_task(
                handle.receive(
                    s.consumer(f"waiter{index}"),
                    max_messages=1,
                    wait_seconds=wait,
                    lease_seconds=s.lease,
                )
            )
            task.add_done_callback(_stamp(finished, index, s))
            tasks.append(task)
        try:
            await s.advance(0.1 * s.lease)
            assert not any(t.done() for t in tasks), "a receive returned before anything was added"

            async def check(added: list[str], stage: str) -> None:
                done = await _until_done(s, tasks, len(added), s.lease)
                returned: list[Delivery] = []
                for task in tasks:
                    if task.done():
                        returned += task.result()
                stats = await s.queue.stats()
                assert stats.in_flight == len(returned), (
                    f"{stage}: the receivers returned {len(returned)} message(s) but "
                    f"{stats.in_flight} are in flight: leased without being returned"
                )
                assert done == len(added), (
                    f"{stage}: {done} of {WAITERS} waiting receivers returned; "
                    f"expected {len(added)}, one per message added"
                )
                assert sorted(d.message_id for d in returned) == sorted(added), (
                    f"{stage}: receivers returned {sorted(_ids(returned))}, added {added}"
                )
                assert stats.ready == 0, f"{stage}: {stats.ready} added message(s) still ready"

            first = await s.add([b"one for eight"])
            await check(first, "one message added")
            second = await s.add([f"three for seven: {i}".encode() for i in range(SECOND_ADD)])
            await check(first + second, f"then {SECOND_ADD} more added in one add")

            waiting = [i for i, t in enumerate(tasks) if not t.done()]
            elapsed = s.now() - started
            if s.time_mode == "clock":
                await s.advance(wait - elapsed + s.margin)
                await asyncio.wait(tasks, timeout=s.grace)
            else:
                await asyncio.wait(tasks, timeout=wait - elapsed + s.margin + s.grace)
            assert all(t.done() for t in tasks), f"receivers still waiting after {wait}s"
        finally:
            for task in tasks:
                task.cancel()
        tolerance = s.precision + 0.05 * wait
        for index in waiting:
            assert tasks[index].result() == [], "a receiver left over got a message"
            assert finished[index] - started >= wait - tolerance, (
                f"a receiver left over returned after {finished[index] - started:.3f}s of "
                f"its {wait}s wait"
            )
        in_flight = (await s.queue.stats()).in_flight
        assert in_flight == 1 + SECOND_ADD, (
            f"{in_flight} in flight once every wait ended; the receivers hold {1 + SECOND_ADD}"
        )
        for handle, task in zip(handles, tasks, strict=True):
            assert await handle.ack(task.result()) == []
