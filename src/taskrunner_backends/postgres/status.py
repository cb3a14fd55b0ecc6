"""What ``taskrunner db status`` reports about a PostgreSQL schema: version and counts.

`status_from_url` is the backend's hook for `taskrunner.backends.schema_status`. It
reads and changes nothing: one connection of its own (no pool, so a refused
connection's own error is what the caller sees), `schema_state`, the migrations still
to apply, each table's size and live and dead rows (the statistics collector's
figures, which lag by up to a few seconds), and when the schema is at the version this
taskrunner writes, one statement counting the rows of every queue.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Literal

import psycopg
from psycopg import sql

from taskrunner.errors import BackendUnavailableError
from taskrunner.redaction import mask_secrets

from .errors import translate_errors
from .schema import MIGRATIONS, schema_state
from .url import parse_url

__all__ = ["UP_TO_DATE", "NEEDS_MIGRATE", "NEWER", "status_from_url"]

#: The schema is at the version this taskrunner writes.
UP_TO_DATE = "up-to-date"
#: The schema does not exist yet, or is older: ``taskrunner db migrate`` brings it up.
NEEDS_MIGRATE = "needs-migrate"
#: A newer taskrunner wrote it: this one refuses to open it.
NEWER = "newer"

State = Literal["up-to-date", "needs-migrate", "newer"]

# One pass over each table: the counts of every queue, on the server's clock, the
# queues of either table (a queue may hold only dead letters).
_COUNTS = """
WITH m AS (
    SELECT queue,
           count(*) FILTER (
               WHERE owner IS NULL AND available_at <= statement_timestamp()) AS ready,
           count(*) FILTER (
               WHERE owner IS NULL AND available_at > statement_timestamp()) AS delayed,
           count(*) FILTER (WHERE owner IS NOT NULL) AS in_flight
    FROM {s}.messages GROUP BY queue
), d AS (
    SELECT queue, count(*) AS dead FROM {s}.dead_letters GROUP BY queue
)
SELECT coalesce(m.queue, d.queue), coalesce(m.ready, 0), coalesce(m.delayed, 0),
       coalesce(m.in_flight, 0), coalesce(d.dead, 0)
FROM m FULL JOIN d ON d.queue = m.queue
ORDER BY 1
"""


# Every table of the schema: its size on disk with indexes and TOAST, and the
# statistics collector's live and dead row estimates (dead rows wait for vacuum).
_TABLES = """
SELECT c.relname, pg_total_relation_size(c.oid),
       coalesce(t.n_live_tup, 0), coalesce(t.n_dead_tup, 0)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables t ON t.relid = c.oid
WHERE n.nspname = %s AND c.relkind IN ('r', 'p')
ORDER BY c.relname
"""


def _state(version: int, latest: int) -> State:
    if version == latest:
        return "up-to-date"
    return "needs-migrate" if version < latest else "newer"


async def status_from_url(url: str) -> dict[str, Any]:
    """The schema `url` names: its version against this taskrunner's, and queue counts.

    Returns a JSON-ready mapping: ``schema``, ``version`` (0: never migrated),
    ``latest`` (the version this taskrunner writes), ``state`` (`UP_TO_DATE`,
    `NEEDS_MIGRATE` or `NEWER`), ``pending`` (the migrations ``db migrate`` would apply,
    ``{"version", "description"}`` in order), ``tables`` (``{"table", "bytes",
    "live_rows", "dead_rows"}`` of every table of the schema, by name; empty when the
    schema does not exist) and ``queues``: a list of ``{"queue", "ready",
    "delayed", "in_flight", "dead"}`` sorted by name, or None when the schema is not at
    this taskrunner's version (its tables are missing, or their layout unknown here).
    Nothing is written; the counts are one scan of ``messages`` and ``dead_letters``.

    Raises:
        ConfigurationError: A bad URL.
        BackendUnavailableError: The server could not be reached within the URL's
            ``pool_timeout`` (the message keeps libpq's reason: refused, host, port).
        BackendError: The server refused (credentials, privileges).
    """
    parsed = parse_url(url)
    seconds = parsed.pool_timeout
    action = f"connect to {parsed.display}"
    try:
        with translate_errors(action, parsed.secrets):
            async with asyncio.timeout(seconds):
                try:
                    conn = await psycopg.AsyncConnection.connect(
                        parsed.conninfo,
                        autocommit=True,
                        connect_timeout=max(2, math.ceil(seconds)),
                    )
                except psycopg.OperationalError as exc:
                    # libpq's reason (refused, host, port) on one line: it adds a hint
                    # on a second, indented one.
                    reason = " ".join(mask_secrets(str(exc), parsed.secrets).split())
                    raise BackendUnavailableError(f"{action}: {reason}") from exc
    except TimeoutError:
        raise BackendUnavailableError(
            f"{action}: no answer within {seconds:g} s (pool_timeout)"
        ) from None
    try:
        with translate_errors(f"status of schema {parsed.schema!r}", parsed.secrets):
            state = await schema_state(conn, parsed.schema)
            cursor = await conn.execute(_TABLES, (parsed.schema,))
            tables = [
                {
                    "table": str(name),
                    "bytes": int(size),
                    "live_rows": int(live),
                    "dead_rows": int(dead),
                }
                for name, size, live, dead in await cursor.fetchall()
            ]
            queues: list[dict[str, Any]] | None = None
            if state.current:
                cursor = await conn.execute(
                    sql.SQL(_COUNTS).format(s=sql.Identifier(parsed.schema))
                )
                queues = [
                    {
                        "queue": str(queue),
                        "ready": int(ready),
                        "delayed": int(delayed),
                        "in_flight": int(in_flight),
                        "dead": int(dead),
                    }
                    for queue, ready, delayed, in_flight, dead in await cursor.fetchall()
                ]
    finally:
        with translate_errors("close", parsed.secrets):
            await conn.close()
    return {
        "schema": parsed.schema,
        "version": state.version,
        "latest": state.latest,
        "state": _state(state.version, state.latest),
        "pending": [
            {"version": m.version, "description": m.description}
            for m in MIGRATIONS
            if m.version > state.version
        ],
        "tables": tables,
        "queues": queues,
    }
