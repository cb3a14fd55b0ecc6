"""The conformance harness for ``postgresql://`` URLs, and hooks for tests.

None of this is for production code: the hooks reach under the contract on purpose.

* `age_lease` moves a lease's last grant or heartbeat into the past, so it looks
  expired without waiting (owner and delivery count stay).

`PostgresHarness` runs the suite with one command::

    python -m taskrunner_conformance taskrunner_backends.postgres.testing:postgres_harness

on the server at ``TASKRUNNER_TEST_POSTGRES_URL`` or, without it, on a private
throwaway server (`local_server`), where it also restarts, stops and kills the server
for the outage properties (`RestartablePostgresHarness`; `postgres_outage_harness`
always does, on a private server). Every harness of a process shares one fresh schema
per server (``tr_conformance_<hex>``, dropped at exit); each test's namespace is its
queue name.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
from psycopg import sql

from taskrunner.queue import Delivery, Queue

from .local_server import LocalPostgres
from .queue import PostgresQueue, open_from_url
from .scheduling import parse_message_id
from .url import parse_url, postgres_url

__all__ = [
    "PostgresHarness",
    "RestartablePostgresHarness",
    "age_lease",
    "postgres_harness",
    "postgres_outage_harness",
    "with_options",
]


def with_options(url: str, **options: str) -> str:
    """`url` with query `options` set (replacing any of the same name), as ``postgresql://``."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(options)
    return postgres_url(parts.netloc, parts.path, urlencode(query))


async def age_lease(queue: PostgresQueue, delivery: Delivery | str, seconds: float) -> bool:
    """Make the message's current lease look `seconds` older, whoever holds it.

    Returns:
        True when the message was leased (and is now aged), False otherwise.
    """
    message_id = delivery if isinstance(delivery, str) else delivery.message_id
    row = parse_message_id(message_id)
    if row is None:
        return False
    changed = await queue.database.execute(
        "age lease",
        queue.database.sql(
            "UPDATE {s}.messages SET leased_at = leased_at - %s * interval '1 second',"
            " expires_at = expires_at - %s * interval '1 second'"
            " WHERE id = %s AND queue = %s AND owner IS NOT NULL"
        ),
        (seconds, seconds, row, queue.queue_name),
    )
    return changed > 0


_TABLES = ("messages", "dead_letters", "workers", "leaders", "fires", "results")


class PostgresHarness:
    """The conformance harness for `PostgresQueue` on a real PostgreSQL.

    Args:
        url: A ``postgresql://`` URL whose ``schema`` option names the schema to use
            (created by the first open; dropped by `drop_schema`).

    Hooks: `age_lease` and `storage_size`; dead letters are read through `QueueAdmin`.
    The outage hooks are on `RestartablePostgresHarness` (a private server).
    """

    #: The lease the suite grants (seconds, before the suite's time scale).
    lease_seconds = 1.0

    def __init__(self, url: str) -> None:
        self.url = url

    async def open_queue(self, namespace: str) -> Queue:
        """A new handle on the queue named `namespace` (its own pool)."""
        return await open_from_url(self.url, queue_name=namespace)

    async def advance(self, seconds: float) -> None:
        """Real time passes: the server measures leases on its own clock."""
        await asyncio.sleep(seconds)

    async def cleanup(self, namespace: str) -> None:
        """Delete the queue's rows in every table (one plain connection: no pool, no LISTEN)."""
        parsed = parse_url(self.url)
        connect = psycopg.AsyncConnection.connect(parsed.conninfo, autocommit=True)
        async with await connect as conn, conn.transaction():
            for table in _TABLES:
                await conn.execute(
                    sql.SQL("DELETE FROM {}.{} WHERE queue = %s").format(
                        sql.Identifier(parsed.schema), sql.Identifier(table)
                    ),
                    (namespace,),
                )

    async def age_lease(self, queue: Queue, delivery: Delivery, seconds: float) -> None:
        """Move the lease's grant or last heartbeat `seconds` into the past."""
        assert isinstance(queue, PostgresQueue)
        await age_lease(queue, delivery, seconds)

    async def storage_size(self, queue: Queue) -> int:
        """Rows the queue has in every table."""
        assert isinstance(queue, PostgresQueue)
        db = queue.database
        counts = " + ".join(
            f"(SELECT count(*) FROM {{s}}.{table} WHERE queue = %(q)s)" for table in _TABLES
        )
        rows = await db.fetch("storage size", db.sql(f"SELECT {counts}"), {"q": queue.queue_name})
        return int(rows[0][0])


class RestartablePostgresHarness(PostgresHarness):
    """`PostgresHarness` on a private `LocalPostgres` it may restart, stop or kill.

    Args:
        url: As for `PostgresHarness`, on `server`.
        server: The private server (nobody else's data lives there).
    """

    def __init__(self, url: str, server: LocalPostgres) -> None:
        super().__init__(url)
        self._server = server

    async def restart_backend(self) -> None:
        """A clean shutdown and start (``pg_ctl stop -m fast``, then start)."""
        await asyncio.to_thread(self._server.restart)

    async def stop_backend(self) -> None:
        """Stop the server; connections break and new ones are refused."""
        await asyncio.to_thread(self._server.stop)

    async def start_backend(self) -> None:
        """Start it again on the same port."""
        await asyncio.to_thread(self._server.start)

    async def crash_backend(self) -> None:
        """``kill -9`` the postmaster and its children, then start again (crash recovery)."""
        await asyncio.to_thread(self._server.kill)
        await asyncio.to_thread(self._server.start)


_SHARED: dict[str, Any] = {}


def _drop_schema(url: str, schema: str) -> None:
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.Error:
        # At exit, with the server perhaps already gone: a leftover schema is harmless.
        pass


def postgres_harness() -> PostgresHarness:
    """A harness on ``TASKRUNNER_TEST_POSTGRES_URL``, else on a private throwaway server.

    On the private server (nobody else's) it is a `RestartablePostgresHarness`, so the
    suite also checks restarts, crashes and outages; on a given URL it never stops the
    server. The private server and the schema are made once per process and removed
    at exit.
    """
    given = os.environ.get("TASKRUNNER_TEST_POSTGRES_URL")
    if given:
        if "url" not in _SHARED:
            _SHARED["url"] = _fresh_schema(given)
        return PostgresHarness(str(_SHARED["url"]))
    return postgres_outage_harness()


def postgres_outage_harness() -> RestartablePostgresHarness:
    """A harness on a private throwaway server of its own, with the outage hooks.

    Always private (never ``TASKRUNNER_TEST_POSTGRES_URL``: it stops and kills the
    server); started once per process and removed at exit.
    """
    server = _private_server()
    if "outage_url" not in _SHARED:
        _SHARED["outage_url"] = _fresh_schema(server.url())
    return RestartablePostgresHarness(str(_SHARED["outage_url"]), server)


def _private_server() -> LocalPostgres:
    if "server" not in _SHARED:
        server = LocalPostgres()
        server.start()
        atexit.register(server.cleanup)
        _SHARED["server"] = server
    found: LocalPostgres = _SHARED["server"]
    return found


def _fresh_schema(base: str) -> str:
    """`base` with a new ``tr_conformance_<hex>`` schema, dropped at exit."""
    schema = f"tr_conformance_{secrets.token_hex(4)}"
    parts = urlsplit(base)
    plain = postgres_url(parts.netloc, parts.path, "")
    atexit.register(_drop_schema, plain, schema)
    return with_options(base, schema=schema)
