"""Stream entries as messages, and receipts as the entry and lease they name.

Leases travel with the holder. The group consumer that holds a lease is named
``<consumer>~<lease ms>``: the caller's consumer name plus the lease it was granted.
`reclaim` scans the PEL and claims an entry only when its idle time exceeds the lease
in its holder's name, so runners with different lease settings never take each
other's heartbeated messages, at no cost per message. Receipts carry the lease in
their token, so the fenced scripts address the right group consumer.

A receipt's token says which stream entry holds the message now and how many
deliveries it had before that entry (a released or delayed message is a new entry
under its old message id); see `_locate`. An entry that is not a taskrunner message
parses as `_Malformed`, which receive and reclaim dead-letter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import NamedTuple

import msgspec

from taskrunner.queue import Delivery

from .replies import _STREAM_ID_TEXT, _text

_GONE_REASON = "payload removed from the stream while pending"

_STREAM_ID = re.compile(rb"[0-9]{1,20}-[0-9]{1,20}")
_LEASE_SUFFIX = re.compile(r"~[0-9]+$")


@dataclass(frozen=True, slots=True)
class _Message:
    entry_id: str
    body: bytes
    message_id: str
    base_count: int
    unique: bool = False
    # Admitted by flow control (field f): its ack, dead letter and release free a slot.
    flow: bool = False
    # Its priority (field p): the stream it is on, ``stream:<level>`` above 0.
    level: int = 0


@dataclass(frozen=True, slots=True)
class _Malformed:
    entry_id: str
    reason: str
    evidence: bytes
    # The priority of the stream it is on: its dead letter is written from there.
    level: int = 0


def _evidence(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return msgspec.json.encode({"fields": [[_text(n), _text(v)] for n, v in pairs]})


@dataclass(frozen=True, slots=True)
class _Leveled:
    """The fields of an entry read from the stream of priority `level` (above 0)."""

    fields: object
    level: int


def _parse_entry(entry_id: str, fields: object, level: int = 0) -> _Message | _Malformed:
    """Read one stream entry's fields; anything that is not our message is `_Malformed`.

    `level` (or `_Leveled` fields) is the priority of the stream the entry was read
    from, which is where its receipt's operations act (its field p only has to be well
    formed).
    """
    if (
        not level
        and type(fields) is list
        and len(fields) == 2
        and fields[0] == b"b"
        and type(fields[1]) is bytes
    ):
        # Fast path: what `add` writes, the case for every message not yet released.
        return _Message(entry_id=entry_id, body=fields[1], message_id=entry_id, base_count=0)
    if isinstance(fields, _Leveled):
        level = fields.level
        fields = fields.fields
    if level:
        return replace(_parse(entry_id, fields), level=level)
    return _parse(entry_id, fields)


def _parse(entry_id: str, fields: object) -> _Message | _Malformed:
    if type(fields) is list and len(fields) == 2 and fields[0] == b"b" and type(fields[1]) is bytes:
        # Fast path: what `add` writes, the case for every message not yet released.
        return _Message(entry_id=entry_id, body=fields[1], message_id=entry_id, base_count=0)
    if fields is None or fields is False:
        return _Malformed(entry_id, _GONE_REASON, b"")
    if (
        not isinstance(fields, list)
        or len(fields) % 2
        or not all(isinstance(f, bytes) for f in fields)
    ):
        return _Malformed(entry_id, "malformed stream entry: unreadable field list", b"")
    pairs = list(zip(fields[0::2], fields[1::2], strict=True))
    seen: dict[bytes, bytes] = {}
    for name, value in pairs:
        if name in seen and name in (b"b", b"i", b"n", b"u", b"p"):
            return _Malformed(
                entry_id, f"malformed message: field {_text(name)!r} repeated", _evidence(pairs)
            )
        seen[name] = value
    if b"b" not in seen:
        names = ", ".join(sorted({repr(_text(n)) for n, _ in pairs})) or "none"
        return _Malformed(
            entry_id,
            f"not a taskrunner message: no body field 'b' (fields: {names})",
            _evidence(pairs),
        )
    message_id = entry_id
    if b"i" in seen:
        if not _STREAM_ID.fullmatch(seen[b"i"]):
            return _Malformed(
                entry_id, "malformed message: field 'i' is not a stream id", _evidence(pairs)
            )
        message_id = seen[b"i"].decode("ascii")
    base = 0
    if b"n" in seen:
        raw_base = seen[b"n"]
        if not raw_base.isdigit() or len(raw_base) > 18:
            return _Malformed(
                entry_id, "malformed message: field 'n' is not a delivery count", _evidence(pairs)
            )
        base = int(raw_base)
    if b"p" in seen:
        raw_level = seen[b"p"]
        if len(raw_level) != 1 or raw_level not in b"123456789":
            return _Malformed(
                entry_id, "malformed message: field 'p' is not a priority 1-9", _evidence(pairs)
            )
    return _Message(
        entry_id=entry_id,
        body=seen[b"b"],
        message_id=message_id,
        base_count=base,
        unique=b"u" in seen,
        flow=b"f" in seen,
    )


def _token(message: _Message | _Malformed, base: int, lease_ms: int) -> str:
    unique = isinstance(message, _Message) and message.unique
    flow = isinstance(message, _Message) and message.flow
    level = message.level
    if (
        isinstance(message, _Message)
        and message.entry_id == message.message_id
        and base == 0
        and not unique
        and not flow
        and not level
    ):
        return str(lease_ms)
    # "u": the message holds a unique key, which its ack must read and free; "f": it
    # holds a flow-control slot, which its ack, dead letter and release give back;
    # "@<level>": its entry is on the stream of that priority.
    token = f"{lease_ms}:{message.entry_id}/{base}{'u' if unique else ''}{'f' if flow else ''}"
    return f"{token}@{level}" if level else token


class _Located(NamedTuple):
    entry_id: str
    base: int
    lease_ms: int
    unique: bool
    flow: bool = False
    level: int = 0


def _locate(delivery: Delivery) -> _Located | None:
    """The stream entry, base delivery count and lease a receipt refers to, if well formed.

    Receipt tokens are ``LEASE_MS`` when the entry is the message's first one and it
    holds no unique key, else ``LEASE_MS:ENTRY_ID/BASE`` (BASE: deliveries before the
    entry was re-added), with ``u`` appended when the message holds a unique key, then
    ``f`` when flow control admitted it, then ``@<level>`` when its priority is above 0.
    """
    raw_lease, _, rest = delivery.receipt.token.partition(":")
    if not raw_lease.isdigit() or len(raw_lease) > 16:
        return None
    unique = flow = False
    level = 0
    rest, at, raw_level = rest.partition("@")
    if at:
        if len(raw_level) != 1 or raw_level not in "123456789":
            return None
        level = int(raw_level)
    if not rest:
        if at:
            return None
        entry_id, base = delivery.message_id, 0
    else:
        entry_id, _, raw_base = rest.partition("/")
        if raw_base.endswith("f"):
            flow, raw_base = True, raw_base[:-1]
        if raw_base.endswith("u"):
            unique, raw_base = True, raw_base[:-1]
        if not raw_base.isdigit() or len(raw_base) > 18:
            return None
        base = int(raw_base)
    if not _STREAM_ID_TEXT.fullmatch(entry_id):
        return None
    return _Located(entry_id, base, int(raw_lease), unique, flow, level)


def _holder(consumer: str, lease_ms: int) -> str:
    """The Redis consumer name for `consumer` holding leases of `lease_ms`.

    The lease travels in the name, so the reclaim script judges every pending entry
    by its own holder's lease, and it costs nothing per message or per round trip.
    """
    return f"{consumer}~{lease_ms}"


def _caller_name(holder: str) -> str:
    """The consumer name as callers know it: the holder name without its lease suffix."""
    return _LEASE_SUFFIX.sub("", holder)
