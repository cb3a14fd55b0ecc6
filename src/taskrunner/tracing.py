"""OpenTelemetry tracing of dispatches and attempts (extra ``taskrunner-queue[otel]``).

Stub: filled in by the tracing work of issue 12.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from taskrunner.attempts import AttemptObserver

__all__ = ["dispatching", "tracing_observer"]


@contextmanager
def dispatching(queue: str, task: str, count: int) -> Iterator[dict[str, str]]:
    """A producer span around one dispatch of `count` messages of `task`.

    Yields the trace-context headers to carry in each message (empty without
    OpenTelemetry); the producer adds those its caller did not set itself.
    """
    yield {}


def tracing_observer(queue: str) -> AttemptObserver | None:
    """An observer that opens a consumer span per attempt, or None without OpenTelemetry."""
    return None
