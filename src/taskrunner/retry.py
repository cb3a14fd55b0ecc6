"""Backoff policies as pure functions of the attempt number.

Internal module. `retry_delay` spaces task retries; `Backoff` spaces the runner's own
attempts to reach a backend that is down.
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["Backoff", "retry_delay"]

# 2**60 seconds is far beyond any cap; bounding the exponent avoids float overflow.
_MAX_EXPONENT = 60


def retry_delay(
    attempt: int,
    *,
    base_seconds: float,
    max_seconds: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retrying after failed attempt number `attempt` (1-based).

    Exponential with "equal jitter": the ceiling doubles per attempt up to
    `max_seconds`, and the delay lies uniformly in [ceiling/2, ceiling], so retries of
    many messages that failed together spread out but never come back early.
    """
    exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
    ceiling = min(max_seconds, base_seconds * 2.0**exponent)
    return ceiling / 2 + rand() * ceiling / 2


class Backoff:
    """Growing delays between attempts to reach an unavailable backend.

    Args:
        base_seconds: First delay.
        max_seconds: Largest delay.
    """

    def __init__(self, *, base_seconds: float = 0.05, max_seconds: float = 5.0) -> None:
        self._base = base_seconds
        self._max = max_seconds
        self._failures = 0

    def next_delay(self) -> float:
        """The delay after one more consecutive failure."""
        self._failures += 1
        return retry_delay(self._failures, base_seconds=self._base, max_seconds=self._max)

    def reset(self) -> None:
        """Forget past failures (call after a success)."""
        self._failures = 0
