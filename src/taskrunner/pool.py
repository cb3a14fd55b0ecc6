"""Worker capacity, shared by the fetchers and the reclaimer.

Internal module. A fetcher *reserves* free workers before it receives, and leases at
most what it reserved, so no leased message ever waits unheartbeated behind a full
pool (the Go library's hand-off starvation). Each delivery handed to a worker turns
one reservation into a busy worker; unused reservations are given back.

The capacity can change at run time (tuning mode). Shrinking never cancels a running
task: the pool is simply over capacity until enough tasks finish.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["WorkerPool"]


class WorkerPool:
    """Counts busy and reserved workers against a resizable capacity.

    Args:
        capacity: Initial number of workers (>= 1).
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._busy = 0
        self._reserved = 0
        self._closed = False
        self._waiters: deque[tuple[int, asyncio.Future[int]]] = deque()

    @property
    def capacity(self) -> int:
        """Current number of workers."""
        return self._capacity

    @property
    def busy(self) -> int:
        """Workers running a task."""
        return self._busy

    @property
    def reserved(self) -> int:
        """Workers reserved by a fetcher or the reclaimer, not yet running."""
        return self._reserved

    def free(self) -> int:
        """Workers neither busy nor reserved (never negative)."""
        return max(0, self._capacity - self._busy - self._reserved)

    def resize(self, capacity: int) -> None:
        """Set the capacity; growing wakes waiting fetchers, shrinking cancels nothing."""
        if capacity < 1:
            raise ValueError(f"pool capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._notify()

    def close(self) -> None:
        """Refuse further reservations and wake everyone waiting for one."""
        self._closed = True
        self._notify()

    async def reserve(self, up_to: int) -> int:
        """Wait for a free worker, then reserve up to `up_to` of them.

        Waiters are served first come, first served, so a fetcher that loops straight
        back into `reserve` cannot starve the reclaimer or the other fetchers.

        Returns:
            The number reserved (>= 1), or 0 once the pool is closed.
        """
        if self._closed:
            return 0
        if not self._waiters and self.free() > 0:
            count = min(self.free(), up_to)
            self._reserved += count
            return count
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append((up_to, future))
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.unreserve(future.result())
            raise

    def try_reserve(self, up_to: int) -> int:
        """Reserve up to `up_to` free workers without waiting.

        Returns:
            The number reserved: 0 when none is free, the pool is closed, or others
            are already waiting (they are served first).
        """
        if self._closed or self._waiters or up_to < 1:
            return 0
        count = min(self.free(), up_to)
        self._reserved += count
        return count

    def unreserve(self, count: int) -> None:
        """Give back `count` reservations that will not be used."""
        if count:
            self._reserved -= count
            self._notify()

    def start(self) -> None:
        """Turn one reservation into a busy worker."""
        self._reserved -= 1
        self._busy += 1

    def finish(self) -> None:
        """Mark one busy worker free again."""
        self._busy -= 1
        self._notify()

    def _notify(self) -> None:
        while self._waiters and (self._closed or self.free() > 0):
            up_to, future = self._waiters.popleft()
            if future.done():
                continue
            count = 0 if self._closed else min(self.free(), up_to)
            self._reserved += count
            future.set_result(count)
