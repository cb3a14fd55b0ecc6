"""Time, injected.

Every loop of the runner and the in-memory backend reads time and sleeps through a
`Clock`, so tests drive them with `taskrunner.testing.FakeClock` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

__all__ = ["Clock", "SystemClock", "wait_event", "wait_future"]


class Clock(Protocol):
    """A source of time and a way to wait for it to pass."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences mean anything."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the Unix epoch (used for timestamps in messages)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until `seconds` have passed on this clock; cancellable."""
        ...


class SystemClock:
    """The real clock: `time.monotonic`, `time.time` and `asyncio.sleep`."""

    def monotonic(self) -> float:
        """Seconds of `time.monotonic`."""
        return time.monotonic()

    def time(self) -> float:
        """Seconds of `time.time`."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep` for `seconds` (negative counts as zero)."""
        await asyncio.sleep(max(0.0, seconds))


async def wait_event(clock: Clock, event: asyncio.Event, seconds: float) -> bool:
    """Wait until `event` is set or `seconds` pass on `clock`.

    Returns:
        True when the event was set, False on timeout.
    """
    if event.is_set():
        return True
    if seconds <= 0:
        return False
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        sleeper.cancel()
    return event.is_set()


async def wait_future(clock: Clock, future: asyncio.Future[Any], seconds: float) -> bool:
    """Wait until `future` is done or `seconds` pass on `clock`; never cancels `future`.

    Returns:
        True when the future finished in time, False on timeout.
    """
    if future.done():
        return True
    sleeper: asyncio.Future[Any] = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({future, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
    return future.done()
