"""Duration and queue-latency histograms and outcome counters, per queue and task.

Internal module (stub: filled in by the observability work of issue 12).
"""

from __future__ import annotations

from taskrunner.attempts import Attempt

__all__ = ["Histograms"]


class Histograms:
    """An `AttemptObserver` that records every finished attempt (stub)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    def attempt_started(self, attempt: Attempt) -> object:
        """Nothing to do when an attempt starts."""
        return None

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        """Record the attempt (stub)."""
