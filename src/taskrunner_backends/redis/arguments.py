"""Argument checks of the Redis backend that `taskrunner_backends.checks` has no copy of."""

from __future__ import annotations

import math

# Longest lease or delay the backend represents exactly (ms; Lua numbers are doubles).
_MAX_MS = 2**52


def _milliseconds(name: str, seconds: float, *, positive: bool) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {seconds}")
    # Rounded up: a lease or delay is never shorter than asked for.
    return min(_MAX_MS, math.ceil(seconds * 1000))


def _check_consumer(consumer: str) -> None:
    if not isinstance(consumer, str):
        raise TypeError(f"consumer must be a str, not {type(consumer).__name__}")
    if not consumer:
        raise ValueError("consumer must be a non-empty string")
