"""`PostgresLeadership`: leader leases with fencing tokens, fire-once records (internal).

One ``leaders`` row per (queue, election) holds the current or last holder, the
election's latest token and the lease's expiry on the server's clock. The row outlives
its lease, so the token only grows: a new holder, or a retake after a lapse or a
resign, gets the row's token + 1. Resigning sets the expiry to now and empties the
holder (no holder name is empty), so the resigned lease can no longer be renewed or
resigned, while the token stays the election's latest (a fire under it still counts,
as the protocol allows). ``fires`` keeps the last fired instant of each schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from taskrunner.queue import FireRecord, LeaderLease
from taskrunner_backends.checks import check_body, check_instant, check_names, check_token

from .db import Database
from .scheduling import check_seconds, check_text
from .schema import notify_channel

__all__ = ["MAX_TOKEN", "PostgresLeadership"]

#: Tokens live in a ``bigint``.
_TOKEN_BITS = 63
MAX_TOKEN = 2**_TOKEN_BITS - 1

_REMAINING = "greatest(0, extract(epoch FROM (l.expires_at - clock_timestamp())))::float8"

_ACQUIRE = f"""
INSERT INTO {{s}}.leaders AS l (queue, name, holder, token, expires_at)
VALUES (%(q)s, %(name)s, %(holder)s, 1, clock_timestamp() + %(ttl)s * interval '1 second')
ON CONFLICT (queue, name) DO UPDATE SET
    holder = EXCLUDED.holder,
    token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > clock_timestamp()
                 THEN l.token ELSE l.token + 1 END,
    expires_at = clock_timestamp() + %(ttl)s * interval '1 second'
WHERE l.holder = EXCLUDED.holder OR l.holder = '' OR l.expires_at <= clock_timestamp()
RETURNING l.holder, l.token, {_REMAINING}
"""

_RENEW = f"""
UPDATE {{s}}.leaders AS l SET expires_at = clock_timestamp() + %(ttl)s * interval '1 second'
WHERE l.queue = %(q)s AND l.name = %(name)s AND l.holder = %(holder)s AND l.token = %(token)s
RETURNING l.holder, l.token, {_REMAINING}
"""

_RESIGN = """
UPDATE {s}.leaders SET expires_at = clock_timestamp(), holder = ''
WHERE queue = %s AND name = %s AND holder = %s AND token = %s
"""

_CURRENT = f"""
SELECT l.holder, l.token, {_REMAINING} FROM {{s}}.leaders AS l
WHERE l.queue = %s AND l.name = %s AND l.holder <> '' AND l.expires_at > clock_timestamp()
"""

# Statement one of `fire`: waits for the election's row (a concurrent acquire or fire
# finishes first) and serializes fires of the schedule across elections.
_FIRE_LOCK = """
SELECT pg_advisory_xact_lock(hashtextextended(%(lock)s, 0)),
       (SELECT 1 FROM {s}.leaders WHERE queue = %(q)s AND name = %(e)s FOR UPDATE)
"""

# Statement two, with a snapshot taken after the locks: it sees the latest token and
# the latest fire record.
_FIRE = """
WITH msg AS (
    INSERT INTO {s}.messages (queue, body)
    SELECT %(q)s, %(body)s
    WHERE EXISTS (SELECT 1 FROM {s}.leaders
                  WHERE queue = %(q)s AND name = %(e)s AND token = %(token)s)
      AND NOT EXISTS (SELECT 1 FROM {s}.fires
                      WHERE queue = %(q)s AND schedule = %(schedule)s AND instant >= %(i)s)
    RETURNING id
), rec AS (
    INSERT INTO {s}.fires AS f (queue, schedule, instant, message_id)
    SELECT %(q)s, %(schedule)s, %(i)s, id FROM msg
    ON CONFLICT (queue, schedule) DO UPDATE
        SET instant = EXCLUDED.instant, message_id = EXCLUDED.message_id
)
SELECT id, pg_notify(%(channel)s, %(q)s) FROM msg
"""

_RECORDS = """
SELECT schedule, instant, message_id FROM {s}.fires
WHERE queue = %s AND schedule = ANY(%s::text[])
"""


class PostgresLeadership:
    """Leader leases and fire-once records of one queue (`taskrunner.queue.Leadership`).

    Guarantees (on top of the protocol's):

    * Every time is the server's (``clock_timestamp()``): expiries, and the
      ``remaining_seconds`` of each returned lease (computed by the same statement).
    * acquire, renew, resign and current_leader are one statement each; fire is one
      transaction (one pipelined round trip) holding the election's row, so a
      concurrent acquire cannot slip between its token check and its add.
    * A fired message is a plain ready message, and its add notifies the queue's
      channel like any other add.

    Args:
        db: The backend's `Database`.
        queue: The queue's name.
        check_open: Raises `QueueClosedError` once the queue handle is closed.
    """

    def __init__(self, db: Database, queue: str, *, check_open: Callable[[], None]) -> None:
        self._db = db
        self._queue = queue
        self._check_open = check_open
        self._channel = notify_channel(db.schema)
        self._acquire = db.sql(_ACQUIRE)
        self._renew = db.sql(_RENEW)
        self._resign = db.sql(_RESIGN)
        self._current = db.sql(_CURRENT)
        self._fire_lock = db.sql(_FIRE_LOCK)
        self._fire = db.sql(_FIRE)
        self._records = db.sql(_RECORDS)

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Take the lease of election `name` for `holder` when it is free or lapsed.

        A live lease of `holder` is renewed and keeps its token; otherwise a free,
        resigned or lapsed lease is taken with the election's latest token + 1 (1 for
        a new election).

        Raises:
            TypeError: A name is no str, or `ttl_seconds` no number.
            ValueError: `ttl_seconds` <= 0 or not finite, or `name`/`holder` empty or
                holding NUL.
        """
        self._check_open()
        check_text("name", name)
        check_text("holder", holder)
        ttl = check_seconds("ttl_seconds", ttl_seconds, positive=True)
        rows = await self._db.fetch(
            "acquire leadership",
            self._acquire,
            {"q": self._queue, "name": name, "holder": holder, "ttl": ttl},
        )
        return _lease(name, rows)

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Extend the lease by `ttl_seconds` from now if `holder` holds it under `token`.

        A lapsed lease renews as long as nobody took it since (the row still names
        `holder` with `token`); a resigned one does not.
        """
        self._check_open()
        check_text("name", name)
        check_text("holder", holder)
        _check_token(token)
        ttl = check_seconds("ttl_seconds", ttl_seconds, positive=True)
        rows = await self._db.fetch(
            "renew leadership",
            self._renew,
            {"q": self._queue, "name": name, "holder": holder, "token": token, "ttl": ttl},
        )
        return _lease(name, rows)

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        """End the lease now if `holder` holds it under `token`; returns whether it did.

        The token stays the election's latest: the next holder gets a larger one.
        """
        self._check_open()
        check_text("name", name)
        check_text("holder", holder)
        _check_token(token)
        count = await self._db.execute(
            "resign leadership", self._resign, (self._queue, name, holder, token)
        )
        return count == 1

    async def current_leader(self, name: str) -> LeaderLease | None:
        """The live lease of election `name`, or None when nobody holds one."""
        self._check_open()
        check_text("name", name)
        rows = await self._db.fetch("current leader", self._current, (self._queue, name))
        return _lease(name, rows)

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        """Add `body` for `schedule`'s `instant` and record it fired, in one transaction.

        Nothing is added unless `token` is the election's latest token (its lease may
        have lapsed or been resigned) and `instant` is later than the schedule's
        recorded one.

        Raises:
            TypeError: `body` is not bytes, `instant` no number, `token` no int.
            ValueError: `instant` is not finite, `schedule`/`election` empty or
                holding NUL, or `token` negative.
        """
        self._check_open()
        check_text("election", election)
        check_text("schedule", schedule)
        _check_token(token)
        check_body(body)
        instant = check_instant("instant", instant)
        params: dict[str, Any] = {
            "q": self._queue,
            "e": election,
            "token": token,
            "schedule": schedule,
            "i": float(instant),
            "body": body,
            "channel": self._channel,
            "lock": f"taskrunner:fire:{self._db.schema}:{self._queue}:{schedule}",
        }
        async with self._db.connection("fire") as conn, conn.pipeline(), conn.transaction():
            await conn.execute(self._fire_lock, params)
            cursor = await conn.execute(self._fire, params)
            rows = await cursor.fetchall()
        return str(rows[0][0]) if rows else None

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        """The latest fire record of each named schedule that has one (one statement).

        Raises:
            TypeError: `schedules` is a single string, or a name is no str.
            ValueError: A name is empty or holds NUL.
        """
        self._check_open()
        names = list(dict.fromkeys(check_names("schedules", schedules, item="schedule", nul=False)))
        if not names:
            return {}
        rows = await self._db.fetch("fire records", self._records, (self._queue, names))
        found = {
            str(row[0]): FireRecord(
                schedule=str(row[0]), instant=float(row[1]), message_id=str(row[2])
            )
            for row in rows
        }
        return {name: found[name] for name in names if name in found}


def _check_token(token: int) -> None:
    check_token(token, bits=_TOKEN_BITS)


def _lease(name: str, rows: Sequence[tuple[Any, ...]]) -> LeaderLease | None:
    if not rows:
        return None
    holder, token, remaining = rows[0]
    return LeaderLease(
        name=name, holder=str(holder), token=int(token), remaining_seconds=float(remaining)
    )
