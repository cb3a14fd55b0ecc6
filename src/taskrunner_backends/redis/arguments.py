"""Argument checks of the Redis backend that `taskrunner_backends.checks` has no copy of.

`_milliseconds` is the shared `check_seconds` plus the conversion to the milliseconds
Redis counts in; `_check_consumer` is the Redis rule for consumer names (the memory
backend accepts any name, PostgreSQL checks its own way).
"""

from __future__ import annotations

import math

from taskrunner_backends.checks import check_seconds

# Longest lease or delay the backend represents exactly (ms; Lua numbers are doubles).
_MAX_MS = 2**52


def _milliseconds(name: str, seconds: float, *, positive: bool) -> int:
    seconds = check_seconds(name, seconds, positive=positive)
    # Rounded up: a lease or delay is never shorter than asked for.
    return min(_MAX_MS, math.ceil(seconds * 1000))


def _check_consumer(consumer: str) -> None:
    if not isinstance(consumer, str):
        raise TypeError(f"consumer must be a str, not {type(consumer).__name__}")
    if not consumer:
        raise ValueError("consumer must be a non-empty string")
