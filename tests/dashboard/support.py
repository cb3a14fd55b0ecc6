"""Helpers of the dashboard tests: memory queues, a counting wrapper, an ASGI client."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from taskrunner.dashboard import Dashboard, Guard, QueueSet, create_app
from taskrunner.queue import Queue, QueueStats
from taskrunner_backends.memory import open_from_url

TOKEN = "a-test-token-of-enough-length"


def memory_url() -> str:
    """A memory:// store of its own (handles of one NAME share their messages)."""
    return f"memory://dash-{uuid.uuid4().hex[:12]}"


class CountingQueue:
    """Forwards to a queue and counts `stats` calls (the cost rule's witness)."""

    def __init__(self, inner: Queue, counts: dict[str, int], name: str) -> None:
        self._inner = inner
        self._counts = counts
        self._name = name

    async def stats(self) -> QueueStats:
        self._counts[self._name] = self._counts.get(self._name, 0) + 1
        return await self._inner.stats()

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)


def dashboard(
    url: str,
    names: Sequence[str],
    *,
    guard: Guard | None = None,
    counts: dict[str, int] | None = None,
) -> Dashboard:
    """A dashboard over memory queues `names` of store `url`."""

    async def opener(name: str) -> Queue:
        queue = await open_from_url(url, queue_name=name)
        if counts is None:
            return queue
        wrapped: Queue = CountingQueue(queue, counts, name)
        return wrapped

    return Dashboard(queues=QueueSet(names, opener), url="memory://", guard=guard)


def client(board: Dashboard) -> httpx.AsyncClient:
    """An HTTP client on the app, in the test's event loop (no lifespan: close queues)."""
    transport = httpx.ASGITransport(app=create_app(board))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")
