"""The App run by ``taskrunner worker`` subprocesses in tests/postgres/test_faults.py.

Tasks report what they do to the test through the table ``test_events`` in the test's
schema (they run in other processes), one row per event: ``kind`` (``started``,
``finished`` or ``run``), ``name``, ``pid``, ``delivery_count``, ``message_id`` and
``at`` (the server's clock).
Where that table is comes from the environment: ``TR_TEST_EVENTS_URL`` (a libpq URL)
and ``TR_TEST_EVENTS_SCHEMA``. `create_events_table` makes it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import msgspec
import psycopg
from psycopg import sql

import taskrunner

app = taskrunner.App("q")

EVENTS_URL_ENV = "TR_TEST_EVENTS_URL"
EVENTS_SCHEMA_ENV = "TR_TEST_EVENTS_SCHEMA"


class Hold(msgspec.Struct, frozen=True):
    """What a `hold` task does.

    Attributes:
        name: Its name in the events.
        hang_first: On its first delivery, never finish (the test kills the worker).
    """

    name: str
    hang_first: bool = False


def create_events_table(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create ``<schema>.test_events`` (the schema must exist)."""
    conn.execute(
        sql.SQL(
            "CREATE TABLE {}.test_events (seq bigint GENERATED ALWAYS AS IDENTITY, "
            "kind text, name text, pid int, delivery_count int, message_id text, "
            "at timestamptz NOT NULL DEFAULT clock_timestamp())"
        ).format(sql.Identifier(schema))
    )


class _State:
    conn: psycopg.AsyncConnection[Any] | None = None
    lock: asyncio.Lock | None = None


async def _record(kind: str, name: str) -> None:
    # One autocommit connection per worker process, opened at the first event.
    if _State.lock is None:
        _State.lock = asyncio.Lock()
    async with _State.lock:
        if _State.conn is None:
            _State.conn = await psycopg.AsyncConnection.connect(
                os.environ[EVENTS_URL_ENV], autocommit=True
            )
        ctx = taskrunner.current_task()
        await _State.conn.execute(
            sql.SQL(
                "INSERT INTO {}.test_events (kind, name, pid, delivery_count, message_id) "
                "VALUES (%s, %s, %s, %s, %s)"
            ).format(sql.Identifier(os.environ[EVENTS_SCHEMA_ENV])),
            (kind, name, os.getpid(), ctx.delivery_count, ctx.message_id),
        )


@app.task(name="quick")
async def quick(n: int) -> None:
    """Record one run of task number `n`."""
    await _record("run", str(n))


@app.task(name="hold", max_retries=5)
async def hold(spec: Hold) -> None:
    """Record the start; hang on the first delivery if told to; record the end."""
    await _record("started", spec.name)
    if spec.hang_first and taskrunner.current_task().delivery_count == 1:
        await asyncio.Event().wait()  # until the worker is killed
    await _record("finished", spec.name)
