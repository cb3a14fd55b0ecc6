"""Reading Redis replies: integers and texts, stream entries, stream ids.

Shared by every part of the queue and by the result listener; imports nothing of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from taskrunner.errors import BackendError

_STREAM_ID_TEXT = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")

_MAX_ID_PART = 2**64 - 1


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _as_int(value: object) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, bytes):
        return int(value)
    raise BackendError(f"unexpected reply element {value!r}")


def _as_str(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, str):
        return value
    raise BackendError(f"unexpected reply element {value!r}")


def _stream_entries(reply: object, bell: bytes = b"") -> tuple[list[tuple[str, object]], list[str]]:
    """(id, fields) pairs of an XREADGROUP reply in RESP2 (list) or RESP3 (map) form.

    Entries of the stream named `bell` (the doorbell) are returned apart, as ids.
    """
    if not reply:
        return [], []
    if isinstance(reply, dict):
        streams: Iterable[tuple[object, object]] = reply.items()
    elif isinstance(reply, list):
        streams = ((item[0], item[1]) for item in reply)
    else:
        raise BackendError(f"unexpected XREADGROUP reply {reply!r:.100}")
    entries = []
    rings = []
    for name, stream_entries in streams:
        for entry in stream_entries or ():  # type: ignore[attr-defined]
            if name == bell:
                rings.append(_as_str(entry[0]))
            else:
                entries.append((_as_str(entry[0]), entry[1]))
    return entries, rings


def _is_stream_id(value: object) -> bool:
    """Whether `value` is a stream id in the server's own spelling (both parts < 2**64).

    Only the canonical spelling: the server reads ``01-1`` as ``1-1``, so a
    leading zero would make another text alias the message.
    """
    if not isinstance(value, str) or not _STREAM_ID_TEXT.fullmatch(value):
        return False
    ms, _, seq = value.partition("-")
    return (
        int(ms) <= _MAX_ID_PART
        and int(seq) <= _MAX_ID_PART
        and str(int(ms)) == ms
        and str(int(seq)) == seq
    )
