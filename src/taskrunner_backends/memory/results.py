"""Task results with a TTL (`taskrunner.queue.ResultStore`) in memory."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence

from taskrunner.clock import wait_future
from taskrunner.queue import ResultWrite

from ..checks import check_ids, check_result_writes, check_seconds, check_text
from .store import _HEAP_SLACK, _SWEEP_PER_CALL, _Handle

__all__ = ["_Results"]


class _Results(_Handle):
    """The `ResultStore` methods of `InMemoryQueue`."""

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result for its TTL; the later of two writes of one id wins.

        The whole batch is checked first: nothing is stored when any item is invalid.
        Each write (also the second of one id in one batch) restarts the id's TTL, and
        every `wait_result` waiting on a written id, through any handle, wakes.

        Raises:
            TypeError: `results` is a single `ResultWrite`, an item is not a
                `ResultWrite`, or a body is not `bytes`, a TTL not a number or an id
                not a `str`.
            ValueError: A TTL is <= 0 or not finite, or an id is empty or holds a lone
                surrogate.
        """
        results = check_result_writes(results)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        for write in results:
            expiry = now + write.ttl_seconds
            store.results[write.message_id] = (write.body, expiry)
            heapq.heappush(store.result_expiries, (expiry, write.message_id))
        self._sweep_results(now, len(results))
        for message_id in dict.fromkeys(write.message_id for write in results):
            for future in store.result_waiters.pop(message_id, {}):
                if not future.done():
                    future.set_result(None)

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, in order; None for unknown, expired or odd ids.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`.
        """
        message_ids = check_ids(message_ids)
        self._check_open()
        now = self._store.clock.monotonic()
        self._sweep_results(now, 0)
        return [self._live_result(message_id, now) for message_id in message_ids]

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        """The result of `message_id`, waiting up to `timeout_seconds` on the store's clock.

        Returns at once when the result is stored; otherwise waits on a future that
        `put_results` of this id completes (no polling), and returns None once the
        clock has moved `timeout_seconds` with no result stored. A result that expired
        is not returned. Cancelling the call leaves nothing behind.

        Raises:
            TypeError: `message_id` is not a `str` or `timeout_seconds` not a number.
            ValueError: `timeout_seconds` < 0 or not finite, or `message_id` empty.
            QueueClosedError: This handle is closed, also while the call waits.
        """
        check_text("message_id", message_id)
        check_seconds("timeout_seconds", timeout_seconds)
        self._check_open()
        store = self._store
        deadline = store.clock.monotonic() + timeout_seconds
        while True:
            now = store.clock.monotonic()
            self._sweep_results(now, 0)
            body = self._live_result(message_id, now)
            if body is not None:
                return body
            remaining = deadline - now
            if remaining <= 0:
                return None
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            store.result_waiters.setdefault(message_id, {})[future] = self
            try:
                await wait_future(store.clock, future, remaining)
            finally:
                # put_results pops the whole set it wakes; on a timeout or a
                # cancellation this waiter removes itself, so no future is left behind.
                waiters = store.result_waiters.get(message_id)
                if waiters is not None:
                    waiters.pop(future, None)
                    if not waiters:
                        del store.result_waiters[message_id]
                future.cancel()
            self._check_open()

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        """Delete the results of `message_ids`; returns how many unexpired ones existed.

        An id named twice counts once. `QueueAdmin.delete_queue` deletes every result;
        `QueueAdmin.purge` deletes messages only and leaves results.

        Raises:
            TypeError: `message_ids` is a single string, or an id is not a `str`.
        """
        message_ids = check_ids(message_ids)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        self._sweep_results(now, 0)
        deleted = 0
        for message_id in message_ids:
            held = store.results.pop(message_id, None)
            if held is not None and now < held[1]:
                deleted += 1
        return deleted

    def _live_result(self, message_id: str, now: float) -> bytes | None:
        store = self._store
        held = store.results.get(message_id)
        if held is None:
            return None
        body, expiry = held
        if now >= expiry:
            # Its heap entry goes stale and is skipped when popped.
            del store.results[message_id]
            return None
        return body

    def _sweep_results(self, now: float, writes: int) -> None:
        # Bounded so a backlog of expiries costs no call more than a fixed number of
        # pops beyond its own writes; every call removes more than it adds, so it drains.
        store = self._store
        heap = store.result_expiries
        budget = _SWEEP_PER_CALL + writes
        while heap and budget > 0 and heap[0][0] <= now:
            expiry, message_id = heapq.heappop(heap)
            budget -= 1
            held = store.results.get(message_id)
            if held is not None and held[1] == expiry:
                del store.results[message_id]
        if len(heap) > 2 * len(store.results) + _HEAP_SLACK:
            # Overwrites leave stale entries until their old expiry; rebuilding now and
            # then keeps the heap proportional to the results, at O(1) amortized per write.
            store.result_expiries = [(held[1], key) for key, held in store.results.items()]
            heapq.heapify(store.result_expiries)
