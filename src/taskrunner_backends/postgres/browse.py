"""`PostgresBrowser` and `PostgresQueueNames`: read-only listings of rows and queues (internal).

Waiting rows are listed in the order receive takes them, ``(available_at, id)``, which
is the ``messages_ready`` index ``(queue, available_at, id) WHERE owner IS NULL``: a
page is one index range scan of ``limit`` entries from the cursor, however long the
queue. The cursor is ``<available_at in microseconds since the epoch>.<id>``, exact
integers both (no float rounding of a timestamp). A released message gets a new
``available_at``, so it is listed at the back, as receive would take it.

In-flight rows are listed by id (their ``expires_at`` moves with every heartbeat, so
it would make an unstable cursor); the cursor is the id. A page reads the queue's
leased rows through ``messages_leased`` and sorts them: its cost is the number in
flight, which the workers' pool sizes bound.

Queue names are read by a loose index scan (a recursive query that asks each index for
the next queue name after the last one): one index probe per name, through the
indexes that lead with ``queue`` (``messages_ready``, ``messages_leased``,
``dead_letters_by_queue``), never a scan of the rows. So listing the names of 10,000
queues costs about 30,000 probes however many messages they hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from taskrunner.queue import (
    BrowsedMessage,
    BrowseState,
    QueueNameList,
    check_browse,
    check_names_limit,
)

from .db import Database
from .scheduling import parse_message_id

__all__ = ["PostgresBrowser", "PostgresQueueNames"]

# The body cut on the server (substring of a TOASTed bytea reads only the slices it
# needs) and its whole length (octet_length reads the stored length, not the value).
_COLUMNS = """
    m.id,
    (extract(epoch FROM m.available_at) * 1000000)::bigint AS at_us,
    substring(m.body FROM 1 FOR %(cut)s::int) AS body, m.delivery_count,
    extract(epoch FROM m.added_at)::float8 AS added_at,
    m.owner,
    greatest(0, extract(epoch FROM (clock_timestamp() - m.leased_at)))::float8 AS idle,
    m.lease_seconds,
    octet_length(m.body) AS size
FROM {s}.messages m
"""
# A cut no bytea reaches (at most 1 GB): the whole body.
_WHOLE = 2**31 - 1

_WAITING_FIRST = (
    "SELECT"
    + _COLUMNS
    + """WHERE m.queue = %(q)s AND m.owner IS NULL AND m.available_at <= clock_timestamp()
ORDER BY m.available_at, m.id
LIMIT %(limit)s
"""
)

_WAITING_AFTER = (
    "SELECT"
    + _COLUMNS
    + """WHERE m.queue = %(q)s AND m.owner IS NULL AND m.available_at <= clock_timestamp()
  AND (m.available_at, m.id)
      > (timestamptz 'epoch' + %(at_us)s * interval '1 microsecond', %(id)s::bigint)
ORDER BY m.available_at, m.id
LIMIT %(limit)s
"""
)

_IN_FLIGHT = (
    "SELECT"
    + _COLUMNS
    + """WHERE m.queue = %(q)s AND m.owner IS NOT NULL AND m.id > %(id)s::bigint
ORDER BY m.id
LIMIT %(limit)s
"""
)

# The next name after %(after)s in one partial index: {where} matches the index's
# predicate so the planner answers min() from it.
_NEXT_NAMES = """
WITH RECURSIVE
ready(q) AS (
    SELECT (SELECT min(queue) FROM {s}.messages WHERE owner IS NULL AND queue > %(after)s)
    UNION ALL
    SELECT (SELECT min(queue) FROM {s}.messages WHERE owner IS NULL AND queue > ready.q)
    FROM ready WHERE ready.q IS NOT NULL
),
leased(q) AS (
    SELECT (SELECT min(queue) FROM {s}.messages WHERE owner IS NOT NULL AND queue > %(after)s)
    UNION ALL
    SELECT (SELECT min(queue) FROM {s}.messages WHERE owner IS NOT NULL AND queue > leased.q)
    FROM leased WHERE leased.q IS NOT NULL
),
dead(q) AS (
    SELECT (SELECT min(queue) FROM {s}.dead_letters WHERE queue > %(after)s)
    UNION ALL
    SELECT (SELECT min(queue) FROM {s}.dead_letters WHERE queue > dead.q)
    FROM dead WHERE dead.q IS NOT NULL
)
SELECT q FROM (
    (SELECT q FROM ready WHERE q IS NOT NULL LIMIT %(limit)s)
    UNION
    (SELECT q FROM leased WHERE q IS NOT NULL LIMIT %(limit)s)
    UNION
    (SELECT q FROM dead WHERE q IS NOT NULL LIMIT %(limit)s)
) AS names
ORDER BY q
LIMIT %(limit)s
"""

# <microseconds since the epoch, maybe negative>.<row id>
_WAITING_CURSOR = re.compile(r"(-?[0-9]{1,19})\.([0-9]{1,19})")


class PostgresBrowser:
    """Pages of one queue's waiting and in-flight rows (`taskrunner.queue.MessageBrowser`).

    Guarantees (on top of the protocol's):

    * One ``SELECT`` per call, without locks: nothing is written, no row is locked,
      so a receive running at the same time is neither blocked nor changed.
    * Waiting means what receive takes: not leased and ``available_at`` passed on the
      server's clock (a delayed message is listed from its due time on).
    * ``delivery_count`` counts grants; ``idle_seconds`` is the time since the grant or
      last heartbeat and ``lease_seconds`` the lease granted, on the server's clock.

    Args:
        db: The backend's `Database`.
        queue: The queue's name.
        check_open: Raises `QueueClosedError` once the queue handle is closed.
    """

    def __init__(self, db: Database, queue: str, *, check_open: Callable[[], None]) -> None:
        self._db = db
        self._queue = queue
        self._check_open = check_open
        self._waiting_first = db.sql(_WAITING_FIRST)
        self._waiting_after = db.sql(_WAITING_AFTER)
        self._in_flight = db.sql(_IN_FLIGHT)

    async def browse(
        self,
        state: BrowseState,
        *,
        after: str | None = None,
        limit: int = 100,
        body_bytes: int | None = None,
    ) -> list[BrowsedMessage]:
        """Up to `limit` rows in `state` after cursor `after`, in cursor order.

        With `body_bytes`, the query returns each body's first `body_bytes` bytes
        (``substring``) and its length (``octet_length``): the rest is neither read
        from the table's out-of-line storage beyond the slices needed nor sent.

        Raises:
            ValueError: See `taskrunner.queue.MessageBrowser.browse`; `after` must be a
                cursor of this backend (``<us>.<id>`` waiting, a message id in flight).
        """
        check_browse(state, limit, body_bytes)
        cut = _WHOLE if body_bytes is None else min(body_bytes, _WHOLE)
        params: dict[str, Any] = {"q": self._queue, "limit": limit, "cut": cut}
        if state == "in_flight":
            query = self._in_flight
            params["id"] = 0
            if after is not None:
                row_id = parse_message_id(after)
                if row_id is None:
                    raise ValueError(f"after must be a message id of this queue, got {after!r:.60}")
                params["id"] = row_id
        elif after is None:
            query = self._waiting_first
        else:
            found = _WAITING_CURSOR.fullmatch(after)
            row_id = None if found is None else parse_message_id(found.group(2))
            if found is None or row_id is None:
                raise ValueError(
                    f"after must be a waiting cursor of this queue (<us>.<id>), got {after!r:.60}"
                )
            query = self._waiting_after
            params["at_us"], params["id"] = int(found.group(1)), row_id
        self._check_open()
        rows = await self._db.fetch("browse", query, params, binary=True)
        return [_browsed(state, row) for row in rows]


def _browsed(state: BrowseState, row: Sequence[Any]) -> BrowsedMessage:
    row_id, at_us, body, count, added_at, owner, idle, lease, size = row
    leased = state == "in_flight"
    body = bytes(body)
    return BrowsedMessage(
        cursor=str(row_id) if leased else f"{int(at_us)}.{row_id}",
        message_id=str(row_id),
        body=body,
        # Set only when cut, as the contract reads (None: the body is whole).
        body_size=int(size) if int(size) > len(body) else None,
        delivery_count=int(count),
        added_at=None if added_at is None else float(added_at),
        consumer=str(owner) if leased else None,
        idle_seconds=None if not leased or idle is None else float(idle),
        lease_seconds=None if not leased or lease is None else float(lease),
    )


class PostgresQueueNames:
    """The queues of the schema with a message or dead-letter row (`taskrunner.queue.QueueNames`).

    One statement per call (a loose index scan, see the module docstring), reading
    at most `limit` + 1 names from each of three indexes; nothing is written. Names
    are in the order of the ``queue`` column's collation (the database's default),
    the order ``after`` is compared in, so pages never skip or repeat a name;
    ``complete`` is exact (one more name is read to know).

    Args:
        db: The backend's `Database`.
        check_open: Raises `QueueClosedError` once the queue handle is closed.
    """

    def __init__(self, db: Database, *, check_open: Callable[[], None]) -> None:
        self._db = db
        self._check_open = check_open
        self._names = db.sql(_NEXT_NAMES)

    async def queue_names(self, *, after: str | None = None, limit: int = 1000) -> QueueNameList:
        """Up to `limit` names after `after`, ascending.

        Raises:
            ValueError: `limit` is below 1 or above `taskrunner.queue.QUEUE_NAMES_LIMIT`.
        """
        check_names_limit(limit)
        self._check_open()
        rows = await self._db.fetch(
            "queue names", self._names, {"after": after or "", "limit": limit + 1}
        )
        names = [str(row[0]) for row in rows]
        return QueueNameList(names=tuple(names[:limit]), complete=len(names) <= limit)
