"""Delayed and unique adds and cancellation (`taskrunner.queue.Scheduling`) in memory."""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner.queue import Added, AddRequest

from ..checks import check_ids, check_requests
from .store import _Handle, _Message

__all__ = ["_Scheduling"]


class _Scheduling(_Handle):
    """The `Scheduling` methods of `InMemoryQueue`."""

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request with its delay and unique key, in order, atomically per request."""
        self._check_open()
        requests = check_requests(requests, flow=True, priorities=True)
        store = self._store
        now = store.clock.monotonic()
        wall = store.clock.time()
        results = []
        for request in requests:
            key = request.unique_key
            if key is not None:
                holder = self._key_holder(key, now)
                if holder is not None:
                    results.append(Added(message_id=holder, added=False))
                    continue
            message_id = str(next(store.sequence))
            message = _Message(
                message_id,
                request.body,
                now,
                unique_key=key,
                flow=request.flow,
                priority=request.priority,
            )
            store.messages[message_id] = message
            delay = request.delay_seconds if request.due_at is None else request.due_at - wall
            if delay > 0:
                message.state = "delayed"
                self._park(message_id, now + delay)
            else:
                self._make_ready(message, now)
            if key is not None:
                expiry = None if request.unique_seconds is None else now + request.unique_seconds
                store.unique[key] = (message_id, expiry)
            results.append(Added(message_id=message_id))
        if results:
            # A receive waiting for a later due time (or for nothing) recomputes its wait.
            store.notify()
        return results

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Remove ready or delayed messages; in-flight and unknown ones are left alone."""
        message_ids = check_ids(message_ids)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        self._promote_due(now)
        removed = []
        for message_id in message_ids:
            message = store.messages.get(message_id)
            if message is None or message.state == "in_flight":
                removed.append(False)
                continue
            del store.messages[message_id]
            if message.waiting:
                store.flow.unwait(message)
            elif message.state == "ready":
                store.cancelled_ready += 1
            else:
                store.cancelled_delayed += 1
            self._free_key(message)
            removed.append(True)
        return removed

    def _key_holder(self, key: str, now: float) -> str | None:
        held = self._store.unique.get(key)
        if held is None:
            return None
        holder, expiry = held
        if expiry is not None and now >= expiry:
            del self._store.unique[key]
            return None
        return holder
