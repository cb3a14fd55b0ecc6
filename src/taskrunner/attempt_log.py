"""One structured log line per finished attempt.

Internal module (stub: filled in by the observability work of issue 12).
"""

from __future__ import annotations

from taskrunner.attempts import Attempt

__all__ = ["AttemptLogger"]


class AttemptLogger:
    """An `AttemptObserver` that logs each finished attempt (stub)."""

    def attempt_started(self, attempt: Attempt) -> object:
        """Nothing to do when an attempt starts."""
        return None

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        """Log the attempt (stub)."""
