"""Public helpers for testing code that uses taskrunner: a fake clock and settling.

`FakeClock` moves only when told. `FakeClock.advance` fires due sleepers in deadline
order and lets the event loop settle after each one, so chains of timers (a lease
keeper ticking while a task sleeps) unfold deterministically without real sleeps.

Example::

    clock = FakeClock()
    queue = InMemoryQueue(clock=clock)
    ...
    await clock.advance(60)          # a whole lease passes, instantly
    await clock.run_until(lambda: done.is_set(), step=1, limit=600)
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

__all__ = ["FakeClock", "settle"]

# Upper bound on event-loop iterations one settle() may take; a loop that is still
# busy after this many is livelocked and the test should fail rather than hang.
_MAX_SETTLE_ITERATIONS = 100_000


async def settle() -> None:
    """Yield to the event loop until no callback is ready to run.

    Every task that can make progress without time passing (or without I/O or a
    thread finishing) has run when this returns.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    if ready is None:  # pragma: no cover - event loops without a visible ready queue
        for _ in range(1000):
            await asyncio.sleep(0)
        return
    quiet = 0
    for _ in range(_MAX_SETTLE_ITERATIONS):
        await asyncio.sleep(0)
        # Two quiet iterations in a row: nothing woke anything else.
        quiet = quiet + 1 if not ready else 0
        if quiet >= 2:
            return
    raise RuntimeError("event loop did not settle: some task is busy-looping")


class FakeClock:
    """A `taskrunner.clock.Clock` whose time moves only through `advance`.

    Args:
        start: Initial monotonic reading in seconds.
        wall_start: Wall-clock time (Unix seconds) at monotonic zero.
    """

    def __init__(self, start: float = 0.0, *, wall_start: float = 1_767_225_600.0) -> None:
        self._now = start
        self._wall_offset = wall_start
        self._sequence = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        """The fake monotonic time."""
        return self._now

    def time(self) -> float:
        """The fake wall-clock time."""
        return self._wall_offset + self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been advanced by `seconds` (0 just yields)."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._sequence), future))
        await future

    def next_deadline(self) -> float | None:
        """The earliest time a sleeper is waiting for, or None when nobody sleeps."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking sleepers in deadline order.

        After each wake-up the event loop settles, so sleepers created by the woken
        code fire too if they fall inside the advanced span.
        """
        if seconds < 0:
            raise ValueError(f"cannot advance by a negative duration ({seconds})")
        target = self._now + seconds
        await settle()
        while (deadline := self.next_deadline()) is not None and deadline <= target:
            self._now = max(self._now, deadline)
            while self._sleepers and self._sleepers[0][0] <= self._now:
                _, _, future = heapq.heappop(self._sleepers)
                if not future.done():
                    future.set_result(None)
            await settle()
        self._now = target
        await settle()

    async def run_until(self, condition: Callable[[], bool], *, step: float, limit: float) -> float:
        """Advance in `step`s until `condition()` holds; fail after `limit` seconds.

        Returns:
            The fake seconds that passed.

        Raises:
            AssertionError: The condition still did not hold after `limit` seconds.
        """
        start = self._now
        await settle()
        while not condition():
            if self._now - start >= limit:
                raise AssertionError(f"condition still false after {limit} fake seconds")
            await self.advance(step)
        return self._now - start
