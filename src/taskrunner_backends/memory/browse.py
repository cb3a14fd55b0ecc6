"""Read-only views of a memory store: `MessageLookup`, `MessageBrowser`, `QueueNames`.

`lookup_messages` and `browse_messages` are the methods behind the queue's ``lookup``
and ``browse`` parts (`taskrunner.queue_parts.LookupOnSelf`, `BrowseOnSelf`). The
``queue_names`` part is an object of its own, `_Names`: it belongs to the named store
a handle was opened through, and a handle built directly has none.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from taskrunner.queue import (
    BrowsedMessage,
    BrowseState,
    MessageState,
    QueueNameList,
    check_browse,
    check_names_limit,
)

from ..checks import check_lookup_ids
from .flow import _FlowGate
from .store import _NAMED_STORES, _Handle, _Message

__all__ = ["_Browsing", "_Names", "_browsed"]


class _Browsing(_Handle):
    """The lookup and browse reads of `InMemoryQueue`, behind its ``lookup`` and ``browse``."""

    async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, in order; None where the store holds no such message.

        Ready: never delivered (delivery count 0) or released and due. Delayed: added
        with a delay, or released with one, not yet due, with ``due_at`` on the wall
        clock. Running: leased, with its holder, idle time and delivery count (also
        once the lease lapsed, until it is reclaimed). Dead: found by the message's
        original id, with reason, time and body. Acked, cancelled, purged, retried
        (the retry has a new id), unknown and malformed ids (a non-`str` one too) are
        None. Constant time per id.

        Raises:
            TypeError: `message_ids` is a single string.
            QueueClosedError: The handle is closed.
        """
        ids = check_lookup_ids(message_ids)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        wall = store.clock.time()
        states: list[MessageState | None] = []
        for message_id in ids:
            if message_id is None:
                states.append(None)
                continue
            message = store.messages.get(message_id)
            if message is not None:
                states.append(_state_of(message, now, wall, self._store.flow))
            else:
                states.append(self._dead_state(message_id))
        return states

    def _dead_state(self, original_id: str) -> MessageState | None:
        store = self._store
        dead_id = store.dead_by_original.get(original_id)
        if dead_id is None:
            return None
        letter = store.dead.get(dead_id)
        if letter is None or letter.original_id != original_id:
            # Defensive: an index entry outliving its letter must not report a state.
            del store.dead_by_original[original_id]
            return None
        return MessageState(
            message_id=original_id,
            state="dead",
            delivery_count=letter.delivery_count,
            body=letter.body,
            dead_reason=letter.reason,
            dead_at=letter.dead_at,
        )

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        """Up to `limit` messages in `state` with an id after `after`, in id order.

        Reads only: no lease, delivery count or queue order changes. ``waiting`` walks
        the records in id order (ready, and delayed ones whose due time passed, as
        `lookup` says); ``in_flight`` takes the `limit` smallest ids of the leased set.
        The cursor is the message id.

        Raises:
            ValueError: See `taskrunner.queue.MessageBrowser.browse`; `after` must be
                an id this backend issues (decimal digits).
            QueueClosedError: The handle is closed.
        """
        check_browse(state, limit)
        start = 0
        if after is not None:
            if not after.isascii() or not after.isdigit():
                raise ValueError(f"after must be a message id of this queue, got {after!r:.60}")
            start = int(after)
        self._check_open()
        store = self._store
        now = store.clock.monotonic()
        wall = store.clock.time()
        if state == "in_flight":
            held = heapq.nsmallest(
                limit,
                (m for m in store.in_flight.values() if int(m.id) > start),
                key=lambda m: int(m.id),
            )
            return [_browsed(m, now, wall) for m in held]
        page: list[BrowsedMessage] = []
        for message in store.messages.values():
            if len(page) >= limit:
                break
            if int(message.id) <= start:
                continue
            if message.state == "ready" or (message.state == "delayed" and message.due <= now):
                page.append(_browsed(message, now, wall))
        return page


class _Names:
    """`QueueNames` of the stores opened through one ``memory://NAME`` (see `InMemoryQueue`)."""

    __slots__ = ("_prefix", "_queue")

    def __init__(self, queue: _Handle, prefix: str) -> None:
        self._queue = queue
        self._prefix = prefix

    async def queue_names(self, *, after: str | None = None, limit: int = 1000) -> QueueNameList:
        """Up to `limit` names after `after`, ascending; always complete within the limit."""
        check_names_limit(limit)
        self._queue._check_open()
        cut = len(self._prefix)
        names = sorted(
            key[cut:]
            for key in _NAMED_STORES
            if key.startswith(self._prefix) and (after is None or key[cut:] > after)
        )
        return QueueNameList(names=tuple(names[:limit]), complete=len(names) <= limit)


def _browsed(message: _Message, now: float, wall: float) -> BrowsedMessage:
    leased = message.state == "in_flight"
    return BrowsedMessage(
        cursor=message.id,
        message_id=message.id,
        body=message.body,
        delivery_count=message.delivery_count,
        added_at=wall - (now - message.added_at),
        consumer=message.owner if leased else None,
        idle_seconds=now - message.touched_at if leased else None,
        lease_seconds=message.lease_seconds if leased else None,
    )


def _state_of(
    message: _Message, now: float, wall: float, gate: _FlowGate[_Message]
) -> MessageState:
    added_at = wall - (now - message.added_at)
    if message.state == "in_flight":
        return MessageState(
            message_id=message.id,
            state="running",
            delivery_count=message.delivery_count,
            body=message.body,
            added_at=added_at,
            consumer=message.owner,
            idle_seconds=now - message.touched_at,
        )
    # A delayed message past its due time is ready, whether or not a receive has
    # moved it to the ready deque yet.
    if message.state == "delayed" and message.due > now:
        return MessageState(
            message_id=message.id,
            state="delayed",
            delivery_count=message.delivery_count,
            body=message.body,
            added_at=added_at,
            due_at=wall + (message.due - now),
        )
    return MessageState(
        message_id=message.id,
        state="ready",
        delivery_count=message.delivery_count,
        body=message.body,
        added_at=added_at,
        waiting=gate.explain(message, now, wall) if message.waiting else None,
    )
