"""wait_result of the ResultStore part: its wake-up and its timeout (X63, X64, and X1).

`ResultStore.wait_result` is timed like a blocking receive: its timeout from both
sides (X64), and its wake-up by a put (X63) within ``p`` plus the probe slack of the
put when the backend claims ``result_notify``, else within its 50 ms polling interval
more.
"""

from __future__ import annotations

import asyncio
import random

from taskrunner.errors import QueueClosedError
from taskrunner.queue import ResultWrite

from ..edges import Edges, conclusively, settle_task
from ..scenario import ConformanceBase, Scenario, conformance
from .result_calls import (
    at_once_bound,
    check_returned,
    outcome_of,
    put_results,
    show_body,
    wake_bound,
)

__all__ = ["ClosedWhileWaitingCases", "ResultWaitCases"]

# Waits raced by the put of their id (X63), 0-3 event-loop turns after each starts.
_RACES = 24


class ResultWaitCases(ConformanceBase):
    """X63, X64."""

    # -- X63: waking -------------------------------------------------------------------------

    @conformance("X63")
    async def test_wait_result_returns_a_result_stored_while_it_waits_well_before_its_timeout(
        self, s: Scenario
    ) -> None:
        """A wait of a hundred leases, woken by another handle's put soon after the put.

        Puts of look-alike ids (a prefix, other case, a suffix) do not end it. With
        ``result_notify`` it returns within ``p`` of the put (plus the probe slack on
        real time); without, within the 50 ms polling interval more.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        timeout = 100 * s.lease
        bound = wake_bound(s, edges)
        body = random.Random(63).randbytes(1024)
        target = "awaited-Id"
        decoys = ["awaited-I", "awaited-id", "AWAITED-ID", "awaited-Id-2", " awaited-Id"]
        round_ = 0

        async def attempt() -> float | None:
            nonlocal round_
            round_ += 1
            message_id = f"{target}-{round_}"
            task, _ = await edges.started(waiter.wait_result(message_id, timeout_seconds=timeout))
            try:
                await s.advance(0.1 * s.lease)
                await asyncio.sleep(0)
                assert not task.done(), (
                    f"wait_result(timeout_seconds={timeout:g}) {outcome_of(task)} "
                    f"{0.1 * s.lease:g}s in, with nothing stored"
                )
                await put_results(
                    writer,
                    [
                        ResultWrite(message_id=f"{d}-{round_}", body=d.encode(), ttl_seconds=ttl)
                        for d in decoys
                    ],
                )
                await s.advance(bound)
                await asyncio.sleep(0)
                assert not task.done(), (
                    f"wait_result({message_id!r}) {outcome_of(task)} after puts of other ids"
                )
                _, put = await edges.timed(
                    put_results(
                        writer, [ResultWrite(message_id=message_id, body=body, ttl_seconds=ttl)]
                    )
                )
                if edges.exact:
                    if bound > 0:
                        await s.advance(bound)
                    await asyncio.wait({task}, timeout=s.grace)
                    in_time = task.done()
                else:
                    await asyncio.wait({task}, timeout=max(0.0, put.end + bound - s.now()))
                    in_time = task.done()
                    if not in_time:
                        await asyncio.wait({task}, timeout=s.grace)
                late = s.now() - put.end
                assert task.done(), (
                    f"wait_result(timeout_seconds={timeout:g}) was still waiting "
                    f"{late:.3f}s after its result was stored (the wake-up bound is "
                    f"{bound:.3f}s): it does not wake on a put"
                )
                check_returned(task, f"wait_result {outcome_of(task)} when its result was stored")
                got = task.result()
                assert got == body, f"the woken wait_result returned {show_body(got)}"
                return None if in_time else late - bound
            finally:
                await settle_task(task, s.grace)

        await conclusively(edges, "a wait_result woken by a put", attempt)

    @conformance("X63")
    async def test_wait_result_of_a_stored_result_returns_at_once(self, s: Scenario) -> None:
        """A long wait of a stored result returns it without time passing; so does timeout 0.

        Two waits of one id, through two handles, are both woken by one put.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        bound = at_once_bound(s, edges)
        await put_results(writer, [ResultWrite(message_id="done", body=b"ready", ttl_seconds=ttl)])

        async def attempt() -> float | None:
            for timeout in (100 * s.lease, 0.0, 1):
                task, mark = await edges.started(
                    waiter.wait_result("done", timeout_seconds=timeout)
                )
                try:
                    await asyncio.wait({task}, timeout=s.grace)
                    assert task.done(), (
                        f"wait_result(timeout_seconds={timeout:g}) of a stored result "
                        f"was still waiting {s.grace:g}s of real time later"
                    )
                    elapsed = s.now() - mark.end
                    check_returned(task, f"wait_result of a stored result {outcome_of(task)}")
                    assert task.result() == b"ready", (
                        f"wait_result(timeout_seconds={timeout:g}) of a stored result "
                        f"returned {show_body(task.result())}"
                    )
                    if not edges.exact and elapsed > bound:
                        return elapsed - bound
                finally:
                    await settle_task(task, s.grace)
            return None

        await conclusively(edges, "wait_result of a stored result", attempt)

        other = s.require_results(await s.open())
        tasks = [
            asyncio.create_task(part.wait_result("twice", timeout_seconds=100 * s.lease))
            for part in (waiter, other)
        ]
        try:
            await asyncio.sleep(0)
            await put_results(
                writer, [ResultWrite(message_id="twice", body=b"for both", ttl_seconds=ttl)]
            )
            await s.advance(wake_bound(s, edges))
            await asyncio.wait(set(tasks), timeout=s.grace)
            for task in tasks:
                assert task.done(), "one put woke only one of two waits of its id"
                assert task.result() == b"for both", f"a woken wait {outcome_of(task)}"
        finally:
            for task in tasks:
                await settle_task(task, s.grace)

    @conformance("X63")
    async def test_put_racing_the_start_of_a_wait_result_is_never_missed(self, s: Scenario) -> None:
        """Twenty-four waits, each raced by the put of its id 0-3 event-loop turns after it starts.

        A wait that looks, finds nothing and only then subscribes misses a put landing in
        between and sleeps out its timeout of a hundred leases: every wait must return
        its body within the wake-up bound (plus grace) of the last put.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        tasks: list[asyncio.Task[bytes | None]] = []
        try:
            for i in range(_RACES):
                tasks.append(
                    asyncio.create_task(waiter.wait_result(f"race-{i}", timeout_seconds=ttl))
                )
                for _ in range(i % 4):
                    await asyncio.sleep(0)
                await put_results(
                    writer,
                    [ResultWrite(message_id=f"race-{i}", body=f"{i}".encode(), ttl_seconds=ttl)],
                )
            bound = wake_bound(s, edges)
            if edges.exact and bound > 0:
                await s.advance(bound)
            await asyncio.wait(set(tasks), timeout=bound + s.grace)
            missed = [f"race-{i}" for i, task in enumerate(tasks) if not task.done()]
            assert not missed, (
                f"wait_result missed the put that raced its start: {missed} still waiting "
                f"{s.grace:g}s after their results were stored"
            )
            for i, task in enumerate(tasks):
                check_returned(task, f"wait_result(race-{i}) {outcome_of(task)}")
                assert task.result() == f"{i}".encode(), (
                    f"wait_result(race-{i}) returned {show_body(task.result())}"
                )
        finally:
            for task in tasks:
                await settle_task(task, s.grace)
        s.boundary(4)

    @conformance("X63")
    async def test_cancelled_wait_result_ends_cancelled_and_later_waits_still_wake(
        self, s: Scenario
    ) -> None:
        """Cancelling a waiting call raises CancelledError in it (never swallowed as None).

        The id's later waits, through the same handle, are woken by a put as before.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        task, _ = await edges.started(waiter.wait_result("cancelled", timeout_seconds=ttl))
        await s.advance(0.1 * s.lease)
        assert not task.done(), f"wait_result with nothing stored {outcome_of(task)}"
        task.cancel()
        await asyncio.wait({task}, timeout=s.grace)
        assert task.done(), f"a cancelled wait_result was still running {s.grace:g}s later"
        assert task.cancelled(), (
            f"a cancelled wait_result {outcome_of(task)} instead of raising CancelledError"
        )
        again, _ = await edges.started(waiter.wait_result("cancelled", timeout_seconds=ttl))
        try:
            await put_results(
                writer, [ResultWrite(message_id="cancelled", body=b"later", ttl_seconds=ttl)]
            )
            bound = wake_bound(s, edges)
            if edges.exact and bound > 0:
                await s.advance(bound)
            await asyncio.wait({again}, timeout=bound + s.grace)
            assert again.done(), "after a cancelled wait, a new wait of its id was not woken"
            assert again.result() == b"later", f"the new wait {outcome_of(again)}"
        finally:
            await settle_task(again, s.grace)
        s.boundary(2)

    # -- X64: timeouts -------------------------------------------------------------------------

    @conformance("X64")
    async def test_wait_result_returns_none_when_no_result_is_stored_within_its_timeout_not_before(
        self, s: Scenario
    ) -> None:
        """Still waiting just before ``timeout - p``; returned None by ``timeout + p``.

        A fraction of the lease, and on a fake clock also 0.7 s; a result of another id
        stored meanwhile changes nothing.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        timeouts = [0.43 * s.lease, 0.7] if edges.exact else [0.43 * s.lease]
        rounds = 0
        for timeout in timeouts:
            before = edges.before(timeout)
            assert before is not None, "the precision leaves no room below the timeout"

            async def attempt(timeout: float = timeout, before: float = before) -> float | None:  # noqa: ASYNC109 - the wait's own timeout
                nonlocal rounds
                rounds += 1
                message_id = f"never-stored-{rounds}"
                task, mark = await edges.started(
                    waiter.wait_result(message_id, timeout_seconds=timeout)
                )
                try:
                    await put_results(
                        writer,
                        [
                            ResultWrite(
                                message_id=f"{message_id}-other",
                                body=b"not this one",
                                ttl_seconds=100 * s.lease,
                            )
                        ],
                    )
                    await edges.wait_until(mark.start + before)
                    low = s.now() - mark.end
                    returned = task.done()
                    high = s.now() - mark.start
                    if not edges.certainly_before(timeout, high):
                        return edges.before_miss(timeout, low, high)
                    assert not returned, (
                        f"wait_result(timeout_seconds={timeout:g}) {outcome_of(task)} within "
                        f"{high:.4f}s, before its timeout minus the precision {s.precision:g}s"
                    )
                    await edges.wait_until(mark.end + edges.after(timeout))
                    assert await edges.finished(task), (
                        f"wait_result(timeout_seconds={timeout:g}) was still waiting "
                        f"{edges.after(timeout):.4f}s plus {s.grace:g}s of grace later"
                    )
                    check_returned(task, f"wait_result at its timeout {outcome_of(task)}")
                    assert task.result() is None, (
                        f"wait_result with nothing stored returned {show_body(task.result())}"
                    )
                    return edges.before_miss(timeout, low, high)
                finally:
                    await settle_task(task, s.grace)

            await conclusively(edges, f"wait_result(timeout_seconds={timeout:g})", attempt)

    @conformance("X64")
    async def test_wait_result_with_timeout_0_and_nothing_stored_returns_none_at_once(
        self, s: Scenario
    ) -> None:
        """No time needs to pass: on a fake clock the clock stays put while it returns."""
        part = s.require_results()
        edges = Edges(s)
        await edges.head_start()
        bound = at_once_bound(s, edges)

        async def attempt() -> float | None:
            task, mark = await edges.started(part.wait_result("nothing", timeout_seconds=0))
            try:
                await asyncio.wait({task}, timeout=s.grace)
                assert task.done(), (
                    f"wait_result(timeout_seconds=0) was still waiting {s.grace:g}s later"
                )
                elapsed = s.now() - mark.end
                check_returned(task, f"wait_result(timeout_seconds=0) {outcome_of(task)}")
                assert task.result() is None, f"it returned {show_body(task.result())}"
                return None if edges.exact or elapsed <= bound else elapsed - bound
            finally:
                await settle_task(task, s.grace)

        await conclusively(edges, "wait_result(timeout_seconds=0)", attempt)


class ClosedWhileWaitingCases(ConformanceBase):
    """X1 for a wait in progress (part of `ResultCases`)."""

    @conformance("X1")
    async def test_wait_result_raises_queue_closed_error_when_its_handle_is_closed_while_it_waits(
        self, s: Scenario
    ) -> None:
        """Closed by another task mid-wait: QueueClosedError soon, not None at the timeout.

        Another handle's wait of the same id is not ended and is woken by a put.
        """
        closing = await s.open()
        waiter = s.require_results(closing)
        other = s.require_results()
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        task, _ = await edges.started(waiter.wait_result("closing", timeout_seconds=ttl))
        survivor, _ = await edges.started(other.wait_result("closing", timeout_seconds=ttl))
        try:
            await s.advance(0.1 * s.lease)
            assert not task.done(), f"wait_result with nothing stored {outcome_of(task)}"
            await closing.aclose()
            await asyncio.wait({task}, timeout=s.grace)
            assert task.done(), (
                f"a wait_result whose handle was closed was still waiting {s.grace:g}s later"
            )
            assert not task.cancelled(), "a wait_result whose handle was closed was cancelled"
            error = task.exception()
            assert isinstance(error, QueueClosedError), (
                f"a wait_result whose handle was closed {outcome_of(task)}, not QueueClosedError"
            )
            assert not survivor.done(), (
                f"closing one handle ended another handle's wait: it {outcome_of(survivor)}"
            )
            await put_results(
                other, [ResultWrite(message_id="closing", body=b"after", ttl_seconds=ttl)]
            )
            bound = wake_bound(s, edges)
            if edges.exact and bound > 0:
                await s.advance(bound)
            await asyncio.wait({survivor}, timeout=bound + s.grace)
            assert survivor.done(), "the other handle's wait was not woken by a put"
            assert survivor.result() == b"after", f"the other wait {outcome_of(survivor)}"
        finally:
            await settle_task(task, s.grace)
            await settle_task(survivor, s.grace)
        s.boundary(2)
