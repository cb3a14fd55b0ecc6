"""`PostgresLookup`: the state of messages by id, from the rows the backend keeps (internal).

A message id is its ``messages.id``: the row says ready, delayed or running (leased),
on the server's clock. A dead-lettered message is a ``dead_letters`` row found by its
``original_id`` (index ``dead_letters_by_original``). Acked, cancelled, purged and
retried messages have no row under their id, so no state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from taskrunner.queue import MessageState
from taskrunner_backends.checks import check_lookup_ids

from .db import Database
from .scheduling import parse_message_id

__all__ = ["PostgresLookup"]

# One statement for the batch. The rank puts a message row first, then the newest dead
# letter of an id (a retried and again dead-lettered message has one per death only if
# retry kept the dead row; the newest is the current one).
_LOOKUP = """
SELECT DISTINCT ON (x.id) x.id, x.state, x.delivery_count, x.body, x.added_at, x.due_at,
       x.consumer, x.idle_seconds, x.reason, x.dead_at
FROM (
    SELECT m.id, 0 AS rank, 0::bigint AS seq,
           CASE WHEN m.owner IS NOT NULL THEN 'running'
                WHEN m.available_at > clock_timestamp() THEN 'delayed'
                ELSE 'ready' END AS state,
           m.delivery_count, m.body,
           extract(epoch FROM m.added_at)::float8 AS added_at,
           extract(epoch FROM m.available_at)::float8 AS due_at,
           m.owner AS consumer,
           greatest(0, extract(epoch FROM (clock_timestamp() - m.leased_at)))::float8
               AS idle_seconds,
           NULL::bytea AS reason, NULL::float8 AS dead_at
    FROM {s}.messages m
    WHERE m.queue = %(q)s AND m.id = ANY(%(ids)s::bigint[])
    UNION ALL
    SELECT d.original_id, 1, d.id, 'dead', d.delivery_count, d.body,
           extract(epoch FROM d.added_at)::float8, NULL, NULL, NULL, d.reason,
           extract(epoch FROM d.dead_at)::float8
    FROM {s}.dead_letters d
    WHERE d.queue = %(q)s AND d.original_id = ANY(%(ids)s::bigint[])
) AS x
ORDER BY x.id, x.rank, x.seq DESC
"""


class PostgresLookup:
    """Message states of one queue (`taskrunner.queue.MessageLookup`).

    Guarantees (on top of the protocol's):

    * One statement per call, whatever the number of ids; nothing is written.
    * States are on the server's clock: ``delayed`` while ``available_at`` is ahead
      (``due_at`` is that instant), ``running`` while a consumer holds the row, with
      ``idle_seconds`` since its grant or last heartbeat; ``added_at`` and
      ``dead_at`` are the server's times of the add and the dead-lettering.
    * The body is returned in every state; a dead letter's reason is its stored
      UTF-8 text (undecodable bytes replaced, never an error).
    * An id that is not the backend's spelling of a row id (digits, no leading zero,
      within ``bigint``) is None without being sent.

    Args:
        db: The backend's `Database`.
        queue: The queue's name.
        check_open: Raises `QueueClosedError` once the queue handle is closed.
    """

    def __init__(self, db: Database, queue: str, *, check_open: Callable[[], None]) -> None:
        self._db = db
        self._queue = queue
        self._check_open = check_open
        self._lookup = db.sql(_LOOKUP)

    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, in order; None where the queue holds no such message.

        Raises:
            TypeError: `message_ids` is a single string.
        """
        self._check_open()
        ids = [parse_message_id(i) for i in check_lookup_ids(message_ids)]
        wanted = sorted({i for i in ids if i is not None})
        if not wanted:
            return [None] * len(ids)
        rows = await self._db.fetch("lookup", self._lookup, {"q": self._queue, "ids": wanted})
        states = {int(row[0]): _state(row) for row in rows}
        return [None if i is None else states.get(i) for i in ids]


def _state(row: Sequence[Any]) -> MessageState:
    message_id, state, count, body, added_at, due_at, consumer, idle, reason, dead_at = row
    common: dict[str, Any] = {
        "message_id": str(message_id),
        "delivery_count": int(count),
        "body": bytes(body),
        "added_at": None if added_at is None else float(added_at),
    }
    if state == "running":
        # leased_at is set with every grant; a row written otherwise has no idle time.
        return MessageState(
            state="running",
            consumer=str(consumer),
            idle_seconds=None if idle is None else float(idle),
            **common,
        )
    if state == "delayed":
        return MessageState(state="delayed", due_at=float(due_at), **common)
    if state == "dead":
        return MessageState(
            state="dead",
            dead_reason=bytes(reason).decode("utf-8", "replace"),
            dead_at=float(dead_at),
            **common,
        )
    return MessageState(state="ready", **common)
