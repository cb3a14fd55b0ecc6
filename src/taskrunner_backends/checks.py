"""Argument checks every backend makes the same way, with the same messages.

The contract (`taskrunner.queue.Queue` and its optional parts) says which bad arguments
raise `TypeError` or `ValueError` before anything changes; these are the checks the
built-in backends share, so one bad argument reads the same whichever backend refused
it. What differs by storage stays a parameter: whether text may hold NUL (``nul``) and
how large a fencing token fits (``bits``). Each check returns the value it accepted
(a list for a batch, so a one-shot iterable is checked and then used whole).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

from taskrunner.queue import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    AddRequest,
    Delivery,
    ResultWrite,
    WorkerInfo,
)
from taskrunner.queue_flow import check_flow

__all__ = [
    "check_bodies",
    "check_body",
    "check_count",
    "check_deliveries",
    "check_ids",
    "check_instant",
    "check_lookup_ids",
    "check_names",
    "check_request",
    "check_requests",
    "check_result_writes",
    "check_seconds",
    "check_text",
    "check_token",
    "check_worker",
    "encode_reason",
]


_T = TypeVar("_T")


def _batch(name: str, values: Iterable[_T], single: type | tuple[type, ...], what: str) -> list[_T]:
    if isinstance(values, single):
        raise TypeError(f"{name} must be a sequence of {what}, not a single one")
    return list(values)


def check_count(name: str, value: int) -> None:
    """Refuse a count that is no int (bools included) or below 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def check_seconds(name: str, value: float, *, positive: bool = False) -> float:
    """`value` as a float if it is a finite number of seconds >= 0 (> 0 when `positive`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value}")
    return float(value)


def check_instant(name: str, value: float) -> float:
    """`value` as a float if it is a finite number (Unix seconds; any sign)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


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


def check_token(token: int, *, bits: int) -> int:
    """`token` if it is an int (bools refused) from 0 to below ``2**bits``."""
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int, not {type(token).__name__}")
    if not 0 <= token < 2**bits:
        raise ValueError(f"token must be >= 0 and < 2**{bits}, got {token}")
    return token


def check_body(body: bytes) -> bytes:
    """`body` if it is `bytes` (a message body; never decoded)."""
    if not isinstance(body, bytes):
        raise TypeError(f"message body must be bytes, not {type(body).__name__}")
    return body


def check_bodies(bodies: Sequence[bytes]) -> list[bytes]:
    """The bodies of an add, as a list, if each one is `bytes` (checked whole, before use)."""
    checked = _batch("bodies", bodies, bytes, "bytes")
    for body in checked:
        check_body(body)
    return checked


def check_ids(message_ids: Sequence[str], *, name: str = "message_ids") -> list[str]:
    """The ids, as a list, if `message_ids` is a sequence of `str` (not one str).

    Only the type is checked: an id in a format the backend never issues is its to
    answer (unknown, False, None), not an error.
    """
    ids = _batch(name, message_ids, (str, bytes), "ids")
    for message_id in ids:
        if not isinstance(message_id, str):
            raise TypeError(f"a message id must be a str, not {type(message_id).__name__}")
    return ids


def check_lookup_ids(message_ids: Sequence[str]) -> list[str | None]:
    """The ids of a `MessageLookup.lookup`, as a list, if `message_ids` is no single str.

    An id that is not a `str` is None in the list: the contract answers an id the
    backend never issues with None, "never an error", whatever its type (unlike
    `check_ids`, which refuses it where the contract says so).
    """
    ids: list[object] = _batch("message_ids", message_ids, (str, bytes), "ids")
    return [message_id if isinstance(message_id, str) else None for message_id in ids]


def check_names(name: str, values: Sequence[str], *, item: str, nul: bool = True) -> list[str]:
    """The names, as a list, if `values` is a sequence of names `check_text` accepts.

    `name` is the argument (``schedules``), `item` what each one is (``schedule``).
    """
    names = _batch(name, values, (str, bytes), "names")
    for value in names:
        check_text(item, value, nul=nul)
    return names


def check_deliveries(deliveries: Sequence[Delivery]) -> None:
    """Refuse a batch holding anything but `Delivery` objects (checked whole, before use)."""
    for delivery in deliveries:
        if not isinstance(delivery, Delivery):
            raise TypeError(f"expected a Delivery, got {type(delivery).__name__}")


def check_request(request: AddRequest, *, nul: bool = True) -> AddRequest:
    """`request` if it is an `AddRequest` whose every field holds a usable value."""
    if not isinstance(request, AddRequest):
        raise TypeError(f"expected an AddRequest, got {type(request).__name__}")
    check_body(request.body)
    check_seconds("delay_seconds", request.delay_seconds)
    if request.due_at is not None:
        check_instant("due_at", request.due_at)
    if request.unique_key is not None:
        check_text("unique_key", request.unique_key, nul=nul)
    if request.unique_seconds is not None:
        check_seconds("unique_seconds", request.unique_seconds)
    if request.flow is not None:
        check_flow(request.flow)
    priority: object = request.priority
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be {PRIORITY_MIN} to {PRIORITY_MAX}, got {priority}")
    if priority != PRIORITY_MIN and request.flow is not None:
        raise ValueError(
            "a request with a flow takes no priority: admission orders it (by key turns)"
        )
    return request


def check_requests(
    requests: Sequence[AddRequest],
    *,
    nul: bool = True,
    flow: bool = False,
    priorities: bool = False,
) -> list[AddRequest]:
    """The requests of `Scheduling.add_requests`, as a list, each one checked (whole, first).

    `flow` and `priorities` say whether the backend claims ``flow_control`` and
    ``priorities``; without, a request with a flow or a priority other than 0 is
    refused (nothing is added) rather than added without them.
    """
    checked = _batch("requests", requests, AddRequest, "AddRequest")
    for request in checked:
        check_request(request, nul=nul)
        if request.flow is not None and not flow:
            raise ValueError(
                "AddRequest.flow needs flow control, and this backend does not claim"
                " capabilities.flow_control: nothing was added"
            )
        if request.priority != PRIORITY_MIN and not priorities:
            raise ValueError(
                "AddRequest.priority needs priorities, and this backend does not claim"
                " capabilities.priorities: nothing was added"
            )
    return checked


def check_result_writes(results: Sequence[ResultWrite], *, nul: bool = True) -> list[ResultWrite]:
    """The writes of `ResultStore.put_results`, as a list, each one checked (whole, first)."""
    writes = _batch("results", results, ResultWrite, "ResultWrite")
    for write in writes:
        if not isinstance(write, ResultWrite):
            raise TypeError(f"expected a ResultWrite, got {type(write).__name__}")
        check_text("message_id", write.message_id, nul=nul)
        if not isinstance(write.body, bytes):
            raise TypeError(f"result body must be bytes, not {type(write.body).__name__}")
        check_seconds("ttl_seconds", write.ttl_seconds, positive=True)
    return writes


def check_worker(info: WorkerInfo, ttl_seconds: float, *, nul: bool = True) -> float:
    """The TTL of `WorkerRegistry.publish_worker`, if `info` and `ttl_seconds` are usable."""
    if not isinstance(info, WorkerInfo):
        raise TypeError(f"info must be a WorkerInfo, not {type(info).__name__}")
    check_text("instance", info.instance, nul=nul)
    return check_seconds("ttl_seconds", ttl_seconds, positive=True)


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
