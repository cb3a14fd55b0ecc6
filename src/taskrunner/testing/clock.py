"""A fake clock for tests, and a way to let the event loop settle.

`FakeClock` moves only when told (`advance`, `run_until`) or, with ``autojump=True``,
by itself whenever the event loop is idle and some coroutine sleeps on it: time then
jumps to the earliest deadline, as trio's ``MockClock(autojump_threshold=0)`` does.

What "idle" means here, using only public asyncio API: for two consecutive event loop
iterations, no task started, finished or moved to another ``await`` (the frames and
instruction offsets of every task's stack, as ``Task.get_stack`` sees them, are
unchanged) and the clock saw no sleep or wake-up. Limits, stated plainly:

* Real I/O, threads and subprocesses in flight are not waited on: a task awaiting a
  socket or ``run_in_executor`` looks idle. (`taskrunner.testing.run_until_idle` waits
  for the runner's own threads of plain ``def`` tasks.)
* A task polling with ``await asyncio.sleep(0)`` in a loop (stack unchanged each turn)
  looks idle too; poll through the clock (``clock.sleep``) instead.
* A wake-up that passes through two or more plain callbacks (not tasks) before the
  woken task's own step is not seen: the check sees one such hop (a future's done
  callback, as asyncio.wait uses) and every task that starts, steps or ends.
* A task that loops at one ``await`` (same frame, same offset) fed by another doing the
  same looks idle between two of their turns: a ping-pong through the loop alone.

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
import types
from collections.abc import Callable
from typing import Any

__all__ = ["FakeClock", "settle"]

# Upper bound on event-loop iterations one settle() may take; a loop that is still
# busy after this many is livelocked and the test should fail rather than hang.
_MAX_SETTLE_ITERATIONS = 100_000

# Consecutive unchanged loop iterations that count as idle. One is not enough: a future
# resolved in one iteration wakes its task in the next (one call_soon hop). Two is what
# the earlier ready-queue check used, and each round costs a walk over every task.
_QUIET_ROUNDS = 2

# How often the autojump re-checks while something outside the loop (a task's thread)
# holds time still. Real time: the thread runs in real time.
_BUSY_RECHECK_SECONDS = 0.001


_COROUTINE = types.CoroutineType
_GENERATOR = types.GeneratorType


def _loop_signature(exclude: asyncio.Task[object] | None) -> list[int]:
    """Where every task of the running loop is suspended, as a comparable value.

    For each task: its id, and the id and instruction offset of every coroutine frame
    down its ``await`` chain (what `Task.get_stack` reads, without building frame
    lists). A flat list: the order of `asyncio.all_tasks` may change when the set of
    tasks does, which then reads as "something moved", the safe side.
    """
    marks: list[int] = []
    append = marks.append
    for task in asyncio.all_tasks():
        if task is exclude:
            continue
        append(id(task))
        coro: Any = task.get_coro()
        while coro is not None:
            kind = type(coro)
            if kind is _COROUTINE:
                frame, coro = coro.cr_frame, coro.cr_await
            elif kind is _GENERATOR:  # a generator-based awaitable (asyncio.sleep(0))
                frame, coro = coro.gi_frame, coro.gi_yieldfrom
            else:  # a future's iterator: the end of the chain
                break
            if frame is None:
                break
            # The frame's id too: a loop awaiting a fresh helper coroutine each turn
            # stops at the same offsets, usually in a new frame.
            append(id(frame))
            append(frame.f_lasti)
        append(-1)
    return marks


async def settle() -> None:
    """Yield to the event loop until every other task is blocked.

    Guarantees: when this returns, for several consecutive loop iterations no other
    task started, ended or moved, so every task that could progress without time
    passing has run. Not waited on: real I/O, threads and subprocesses in flight (see
    the module docstring for the exact definition and its limits).

    Raises:
        RuntimeError: The loop never went quiet within 100,000 iterations (some task
            is busy-looping).
    """
    current = asyncio.current_task()
    previous = _loop_signature(current)
    quiet = 0
    for _ in range(_MAX_SETTLE_ITERATIONS):
        await asyncio.sleep(0)
        signature = _loop_signature(current)
        quiet = quiet + 1 if signature == previous else 0
        previous = signature
        if quiet >= _QUIET_ROUNDS:
            return
    raise RuntimeError("event loop did not settle: some task is busy-looping")


class FakeClock:
    """A `taskrunner.clock.Clock` whose time moves only when a test (or autojump) says.

    Guarantees: `monotonic` never goes backwards; sleepers wake in deadline order (ties
    in the order they slept), never before their deadline; with ``autojump=True``,
    time moves only while the loop is idle (module docstring), straight to the earliest
    deadline, and never while `advance` or `run_until` is moving it.

    Args:
        start: Initial monotonic reading in seconds.
        wall_start: Wall-clock time (Unix seconds) at monotonic zero.
        autojump: Jump to the next deadline by itself whenever the loop is idle.
    """

    def __init__(
        self,
        start: float = 0.0,
        *,
        wall_start: float = 1_767_225_600.0,
        autojump: bool = False,
    ) -> None:
        self._now = start
        self._wall_offset = wall_start
        self._sequence = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self.autojump = autojump
        self._advancing = 0
        # Bumped on every sleep and wake-up: part of what "nothing changed" compares.
        self._activity = 0
        self._check: asyncio.Handle | None = None
        self._check_loop: asyncio.AbstractEventLoop | None = None
        self._quiet = 0
        self._last: tuple[list[int], int] | None = None
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._notified = False
        self._busy_checks: list[Callable[[], bool]] = []
        self.jumps = 0

    def monotonic(self) -> float:
        """The fake monotonic time."""
        return self._now

    def time(self) -> float:
        """The fake wall-clock time."""
        return self._wall_offset + self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has moved by `seconds` (0 or less just yields)."""
        if seconds <= 0:
            self._activity += 1
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._sequence), future))
        self._activity += 1
        self._watch()
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

        Raises:
            ValueError: `seconds` is negative.
        """
        if seconds < 0:
            raise ValueError(f"cannot advance by a negative duration ({seconds})")
        self._advancing += 1
        try:
            target = self._now + seconds
            await settle()
            while (deadline := self.next_deadline()) is not None and deadline <= target:
                self._wake_until(deadline)
                await settle()
            # No settle after this: moving time without waking a sleeper changes nothing
            # the loop could react to, and the last wake-up (or the first settle) has
            # already been settled.
            self._now = max(self._now, target)
        finally:
            self._advancing -= 1

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

    async def wait_idle(self) -> None:
        """Wait until the loop is idle (autojump clocks only), before the next jump.

        One call resolves at most once per idle spell: a caller that checks some state
        and calls again is woken next after time has jumped (or the loop was busy).

        Raises:
            RuntimeError: The clock was made without ``autojump=True``.
        """
        if not self.autojump:
            raise RuntimeError("wait_idle needs FakeClock(autojump=True)")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(future)
        self._watch()
        try:
            await future
        finally:
            if future in self._idle_waiters:
                self._idle_waiters.remove(future)

    def hold_while(self, busy: Callable[[], bool]) -> Callable[[], None]:
        """Keep autojump (and `wait_idle`) from firing while `busy()` is true.

        For work the loop cannot see, such as a task's thread. Returns a function that
        removes the check.
        """
        self._busy_checks.append(busy)

        def remove() -> None:
            if busy in self._busy_checks:
                self._busy_checks.remove(busy)

        return remove

    def _wake_until(self, deadline: float) -> None:
        self._now = max(self._now, deadline)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
        self._activity += 1

    def _watch(self) -> None:
        """Start the idle check (a chain of loop callbacks, not a task) if needed."""
        if not self.autojump:
            return
        loop = asyncio.get_running_loop()
        # A check left pending on a loop that has since closed (a clock reused across
        # asyncio.run calls) will never run: start one on this loop.
        if self._check is None or self._check_loop is not loop:
            self._quiet = 0
            self._last = None
            self._check_loop = loop
            self._check = loop.call_soon(self._on_round)

    def _on_round(self) -> None:
        self._check = None
        loop = asyncio.get_running_loop()
        mark = (_loop_signature(None), self._activity)
        self._quiet = self._quiet + 1 if mark == self._last else 0
        self._last = mark
        if self._quiet < _QUIET_ROUNDS or self._advancing:
            self._check = loop.call_soon(self._on_round)
            return
        if any(busy() for busy in self._busy_checks):
            self._check = loop.call_later(_BUSY_RECHECK_SECONDS, self._on_round)
            return
        waiters = [w for w in self._idle_waiters if not w.done()]
        if waiters and not self._notified:
            self._notified = True
            for waiter in waiters:
                waiter.set_result(None)
            self._idle_waiters.clear()
            self._check = loop.call_soon(self._on_round)
            return
        deadline = self.next_deadline()
        if deadline is None:
            # Nothing sleeps on this clock: the next sleep (or wait_idle) restarts the
            # check. Waiters stay pending; the caller's own timeout ends them.
            self._notified = False
            return
        self._notified = False
        self.jumps += 1
        self._wake_until(deadline)
        self._check = loop.call_soon(self._on_round)
