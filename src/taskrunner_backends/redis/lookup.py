"""Message lookup by id (the ``lookup`` part): read where a message is, write nothing.

`lookup_messages` reads where a message is from the stream, the PEL, ``moved`` and
the parked set, and finds dead letters through ``dead_ids`` (original id ->
dead-letter id), which only the dead-letter paths write (one HSET) and retry/purge
of dead letters clear. A message waiting for flow control's admission is ready, with
`taskrunner.queue.FlowWait` saying why it waits: its key's slots are held (by the ids
in ``f:h:<key>``), its rate key's GCRA allows the next one later, or its turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskrunner.errors import BackendError
from taskrunner.queue import FlowWait, MessageState
from taskrunner_backends.checks import check_lookup_ids

from .base import QueueBase
from .receipts import _caller_name
from .replies import _as_int, _as_str, _is_stream_id

__all__ = ["LOOKUP_BATCH", "LookupMixin"]

# Ids per lookup script call (count); one round trip carries them all.
LOOKUP_BATCH = 500

# Values per id in ``lua/lookup.lua``'s reply.
_ROW = 13


class LookupMixin(QueueBase):
    """`lookup_messages`: where a message is, by id, read without writing."""

    async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, in order, read in one script per `LOOKUP_BATCH` ids.

        All scripts go in one round trip. Nothing is written. A message is found where
        the backend keeps it anyway: its stream entry (``running`` while it is in the
        group's PEL, with the holder, idle time and delivery count from XPENDING;
        ``ready`` otherwise), or, after a release or a delayed add, the entry the
        ``moved`` map names (``delayed`` until its due time, with ``due_at``;
        ``ready`` once due), or, after dead-lettering, the dead letter that the
        ``dead_ids`` index names for its original id (``dead``, with reason, time,
        body and delivery count). ``added_at`` is the time in the message id (the
        server's clock when it was added; for a delayed add, when it was requested).
        The body is returned in every state. Acked, cancelled, purged, retried (it has
        a new id) and unknown messages are None, and so is every id that is not a
        stream id.

        Raises:
            TypeError: `message_ids` is a single string
                (`taskrunner_backends.checks.check_lookup_ids`, as on every backend).
        """
        ids = check_lookup_ids(message_ids)
        await self._ready()
        states: list[MessageState | None] = [None] * len(ids)
        valid = [(index, i) for index, i in enumerate(ids) if i is not None and _is_stream_id(i)]
        if not valid:
            return states
        keys = self._keys
        script_keys = [
            keys.stream,
            keys.dead,
            keys.delayed,
            keys.parked,
            keys.moved,
            keys.dead_ids,
        ]
        chunks = [
            valid[start : start + LOOKUP_BATCH] for start in range(0, len(valid), LOOKUP_BATCH)
        ]
        calls = [
            (script_keys, [keys.group, keys.flow_prefix, *(i for _, i in chunk)])
            for chunk in chunks
        ]
        replies = await self._batched("lookup", "lookup", calls)
        for chunk, reply in zip(chunks, replies, strict=True):
            for n, (index, message_id) in enumerate(chunk):
                row = reply[_ROW * n : _ROW * n + _ROW]
                states[index] = _message_state(message_id, row)
        return states


def _message_state(message_id: str, row: Sequence[Any]) -> MessageState | None:
    """One row of ``lua/lookup.lua``'s reply as a `MessageState`."""
    state, count, body, consumer, idle_ms, due_ms, reason, dead_ms = row[:8]
    if state is None:
        return None
    name = _as_str(state)
    added_at = int(message_id.partition("-")[0]) / 1000
    common: dict[str, Any] = {
        "message_id": message_id,
        "delivery_count": _as_int(count),
        "body": body if isinstance(body, bytes) else None,
        "added_at": added_at,
    }
    if name == "running":
        return MessageState(
            state="running",
            consumer=_caller_name(_as_str(consumer)),
            idle_seconds=_as_int(idle_ms) / 1000,
            **common,
        )
    if name == "delayed":
        return MessageState(state="delayed", due_at=_as_int(due_ms) / 1000, **common)
    if name == "dead":
        return MessageState(
            state="dead",
            dead_reason=_as_str(reason),
            dead_at=_as_int(dead_ms) / 1000,
            **common,
        )
    if name == "ready":
        return MessageState(state="ready", waiting=_flow_wait(row[8:]), **common)
    raise BackendError(f"unexpected lookup state {name!r}")


def _flow_wait(values: Sequence[Any]) -> FlowWait | None:
    """Why a waiting message is not admitted, from the last five values of its row."""
    key, reason, holders, until_ms, rate_key = values
    if key is None:
        return None
    why = _as_str(reason)
    if why == "slot":
        return FlowWait(
            key=_as_str(key), reason="slot", holders=tuple(_as_str(h) for h in holders or ())
        )
    if why == "rate":
        # The server's clock is wall-clock time (TIME), in ms here.
        return FlowWait(
            key=_as_str(key),
            reason="rate",
            until=float(_as_str(until_ms)) / 1000,
            rate_key=_as_str(rate_key),
        )
    return FlowWait(key=_as_str(key), reason="turn")
