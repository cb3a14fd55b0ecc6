"""A "third-party" backend for the entry-point tests: the memory backend under fake://."""

from __future__ import annotations

from taskrunner.clock import Clock
from taskrunner_backends.memory import InMemoryQueue

OPENED: list[str] = []


async def open_from_url(url: str, *, queue_name: str, clock: Clock | None = None) -> InMemoryQueue:
    OPENED.append(url)
    return InMemoryQueue(clock=clock)


not_callable = "nope"
