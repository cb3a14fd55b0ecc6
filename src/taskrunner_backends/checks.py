"""Argument checks every backend makes the same way, with the same messages.

The contract (`taskrunner.queue.Queue`) says which bad arguments raise `TypeError` or
`ValueError` before anything changes; these are the checks the built-in backends share.
"""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner.queue import Delivery

__all__ = ["check_count", "check_deliveries", "check_text", "encode_reason"]


def check_count(name: str, value: int) -> None:
    """Refuse a count that is no int (bools included) or below 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def check_deliveries(deliveries: Sequence[Delivery]) -> None:
    """Refuse a batch holding anything but `Delivery` objects (checked whole, before use)."""
    for delivery in deliveries:
        if not isinstance(delivery, Delivery):
            raise TypeError(f"expected a Delivery, got {type(delivery).__name__}")


def check_text(name: str, value: str, *, nul: bool = True) -> str:
    """`value` if it is a non-empty str UTF-8 can encode (and, unless `nul`, without NUL)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must be a non-empty string")
    if not nul and "\x00" in value:
        raise ValueError(f"{name} holds NUL at position {value.index(chr(0))}: not storable text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} holds a lone surrogate at position {exc.start}: not storable text"
        ) from None
    return value


def encode_reason(reason: str) -> bytes:
    """A dead letter's reason in UTF-8; refuses no str, or one with a lone surrogate."""
    if not isinstance(reason, str):
        raise TypeError(f"reason must be a str, not {type(reason).__name__}")
    try:
        return reason.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"reason holds a lone surrogate at position {exc.start}: not storable text"
        ) from None
