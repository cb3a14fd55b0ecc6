"""Pure-SQL comparison of lease designs for the PostgreSQL backend (issue 14, item 4).

Run: ``python bench/pg_lease_designs.py --url postgresql://postgres@127.0.0.1:5432/test``
(options: ``-n`` jobs per measurement, default 20000; ``--reps``, default 5;
``--designs`` comma-separated names of `DESIGNS`, default all; ``--loops`` concurrent
consumer loops, each on its own connection, default 1).

No runner and no Python task: each design is a receive statement and an ack
statement, run back to back in batches of 100 on one connection (or ``--loops`` of
them at once), over N rows inserted beforehand (untimed, then ``VACUUM (ANALYZE)``).
Everything lives in a fresh schema ``tr_designs_<random>``, dropped at the end (also
after a failure). Designs:

* ``raw``: the classic minimal SKIP LOCKED queue (the baseline of ``ratio_e2e``): one
  ``DELETE ... WHERE id IN (SELECT ... ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED)
  RETURNING id, body`` per batch, on the backend's own table (schema version 1). No
  lease: a crashed consumer loses its batch.
* ``current``: the backend's receive (``UPDATE ... FROM picked``, the lease columns set)
  and fenced ack (``DELETE ... USING unnest(...)``), the SQL read from its module, with
  the array literals and binary results it uses.
* ``current_async``: the same on a session with ``synchronous_commit = off``: the lease
  grant and the ack do not wait for the WAL flush (an add still would).
* ``combined``: the current schema, but one statement per cycle: the fenced ack of the
  previous batch and the receive of the next (``WITH acked AS (DELETE ...), picked AS
  (...) UPDATE ...``): one round trip and one commit per batch instead of two.
* ``combined_unprepared``: the same, never prepared (each run planned afresh), to tell
  a plan-caching effect from the statement's own cost.
* ``two_table``: ``ready`` (indexes: pkey, ``(queue, available_at, id)``) and ``leased``
  (pkey, ``(queue, expires_at)``); receive moves rows in one statement (``WITH moved AS
  (DELETE FROM ready ... SKIP LOCKED ... RETURNING *) INSERT INTO leased ... RETURNING``),
  ack is the fenced ``DELETE FROM leased``.
* ``two_table_async``: the same with ``synchronous_commit = off``.
* ``hot``: one table whose only indexes are the pkey and ``(queue, available_at, id)``
  without a predicate, ``fillfactor = 50``: no index covers a lease column, so the
  receive's UPDATE can be HOT (a new row version on the same page, no index entries).
  Receive filters ``owner IS NULL`` on the heap; reclaim (not measured) would have to
  scan the queue's range of that index.
* ``hot_async``: the same with ``synchronous_commit = off``.
* ``raw_async``: ``raw`` with ``synchronous_commit = off`` (how much of the baseline's
  time is the commit's flush).
* ``unlogged``: ``current`` on an ``UNLOGGED`` copy of the table (no WAL at all). Not a
  candidate: a crash empties an unlogged table. It bounds what WAL costs the current
  statements.

Per design: jobs/s (first statement to last reply), ratio to ``raw`` of the same
repetition, client CPU (this process, ``time.process_time``), server CPU (the loops'
backends plus the server's background processes, from /proc: needs the server on this
machine), WAL bytes and HOT updates per job. Designs run in a rotated order in each
repetition; the report gives medians. The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from taskrunner_backends.postgres import queue as pg_queue
from taskrunner_backends.postgres.schema import migrate

BATCH = 100
QUEUE = "q"
# A no-op task's envelope, byte for byte as long (109) as the Producer encodes one.
BODY = (
    b'{"v":1,"id":"'
    + b"0" * 32
    + b'","task":"noop","payload":null,"enqueued_at":1796278652.6718693}'
)

Loop = Callable[[psycopg.AsyncConnection[Any], int], Awaitable[None]]


@dataclass
class Design:
    """How to create a design's tables, fill them, and run one consumer loop."""

    setup: list[str]  # DDL, {s} = schema (run once, before the first measurement)
    table: str  # the table N rows are inserted into
    make_loop: Callable[[str], Loop]  # schema -> loop(conn, jobs)
    session: tuple[str, ...] = ()  # statements run on each loop's connection first
    prepare: bool = True  # psycopg prepares a statement after 5 runs; False: never


def _q(template: str, schema: str) -> sql.Composed:
    return sql.SQL(template).format(s=sql.Identifier(schema))


def _int_array(values: list[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _text_array(values: list[str]) -> str:
    return "{" + ",".join('"' + v + '"' for v in values) + "}"


async def _all(conn: psycopg.AsyncConnection[Any], query: Any, params: Any) -> list[Any]:
    cursor = conn.cursor(binary=True)
    await cursor.execute(query, params)
    return await cursor.fetchall()


# -- raw --------------------------------------------------------------------------------

_RAW = """
DELETE FROM {s}.messages WHERE id IN (
    SELECT id FROM {s}.messages WHERE queue = %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
) RETURNING id, body
"""


def raw_loop(schema: str) -> Loop:
    query = _q(_RAW, schema)

    async def loop(conn: psycopg.AsyncConnection[Any], jobs: int) -> None:
        done = 0
        while done < jobs:
            rows = await _all(conn, query, (QUEUE, BATCH))
            if not rows:
                return
            done += len(rows)

    return loop


# -- current ----------------------------------------------------------------------------


def _ack_params(consumer: str, rows: list[Any]) -> dict[str, Any]:
    return {
        "ids": _int_array([row[0] for row in rows]),
        "owners": _text_array([consumer] * len(rows)),
        "counts": _int_array([row[2] for row in rows]),
        "queue": QUEUE,
    }


def current_loop(schema: str) -> Loop:
    receive = _q(pg_queue._RECEIVE, schema)
    ack = _q(pg_queue._ACK, schema)

    async def loop(conn: psycopg.AsyncConnection[Any], jobs: int) -> None:
        consumer = f"c{id(conn)}"
        params = {"queue": QUEUE, "consumer": consumer, "lease": 60.0, "limit": BATCH}
        done = 0
        while done < jobs:
            rows = await _all(conn, receive, params)
            if not rows:
                return
            acked = await _all(conn, ack, _ack_params(consumer, rows))
            if len(acked) != len(rows):
                raise SystemExit(f"current: acked {len(acked)} of {len(rows)}")
            done += len(rows)

    return loop


# One statement per cycle: the previous batch's fenced ack and the next receive. The
# CTEs share one snapshot; the receive picks only rows with owner IS NULL, so it can
# never pick a row the ack deletes.
_COMBINED = (
    """
WITH acked AS (
    DELETE FROM {s}.messages m USING"""
    + pg_queue._FENCE.replace("FROM", "", 1)
    + """RETURNING m.id
), picked AS (
    SELECT id FROM {s}.messages
    WHERE queue = %(queue)s AND owner IS NULL AND available_at <= clock_timestamp()
    ORDER BY available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE {s}.messages m SET"""
    + pg_queue._LEASE_SET
    + """
    FROM picked WHERE m.id = picked.id
    RETURNING m.id, m.body, m.delivery_count, m.available_at
)
SELECT id, body, delivery_count, false FROM leased
UNION ALL SELECT id, NULL, NULL, true FROM acked
"""
)


def combined_loop(schema: str) -> Loop:
    query = _q(_COMBINED, schema)
    ack = _q(pg_queue._ACK, schema)

    async def loop(conn: psycopg.AsyncConnection[Any], jobs: int) -> None:
        consumer = f"c{id(conn)}"
        base = {"consumer": consumer, "lease": 60.0, "limit": BATCH}
        previous: list[Any] = []
        done = 0
        while True:
            rows = await _all(conn, query, {**base, **_ack_params(consumer, previous)})
            leased = [row for row in rows if not row[3]]
            acked = len(rows) - len(leased)
            if acked != len(previous):
                raise SystemExit(f"combined: acked {acked} of {len(previous)}")
            done += acked
            previous = leased
            if not leased:
                return
            if done + len(leased) >= jobs:
                # Last batch: its ack alone.
                await _all(conn, ack, _ack_params(consumer, leased))
                return

    return loop


# -- two tables -------------------------------------------------------------------------

_TWO_TABLE_SETUP = [
    """CREATE TABLE {s}.ready (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        body bytea NOT NULL,
        added_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        available_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        delivery_count integer NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX ready_due ON {s}.ready (queue, available_at, id)",
    """CREATE TABLE {s}.leased (
        id bigint PRIMARY KEY,
        queue text NOT NULL,
        body bytea NOT NULL,
        added_at timestamptz NOT NULL,
        available_at timestamptz NOT NULL,
        owner text NOT NULL,
        delivery_count integer NOT NULL,
        leased_at timestamptz NOT NULL,
        lease_seconds double precision NOT NULL,
        expires_at timestamptz NOT NULL
    )""",
    "CREATE INDEX leased_expiry ON {s}.leased (queue, expires_at)",
]

_TWO_TABLE_RECEIVE = """
WITH moved AS (
    DELETE FROM {s}.ready WHERE id IN (
        SELECT id FROM {s}.ready
        WHERE queue = %(queue)s AND available_at <= clock_timestamp()
        ORDER BY available_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    ) RETURNING *
)
INSERT INTO {s}.leased
    (id, queue, body, added_at, available_at, owner, delivery_count, leased_at,
     lease_seconds, expires_at)
SELECT id, queue, body, added_at, available_at, %(consumer)s, delivery_count + 1,
       clock_timestamp(), %(lease)s, clock_timestamp() + %(lease)s * interval '1 second'
FROM moved
RETURNING id, body, delivery_count, available_at
"""

_TWO_TABLE_ACK = """
DELETE FROM {s}.leased m
USING unnest(%(ids)s::bigint[], %(owners)s::text[], %(counts)s::int[]) AS d(id, owner, dc)
WHERE m.id = d.id AND m.queue = %(queue)s AND m.owner = d.owner AND m.delivery_count = d.dc
RETURNING m.id
"""


def two_table_loop(schema: str) -> Loop:
    receive = _q(_TWO_TABLE_RECEIVE, schema)
    ack = _q(_TWO_TABLE_ACK, schema)

    async def loop(conn: psycopg.AsyncConnection[Any], jobs: int) -> None:
        consumer = f"c{id(conn)}"
        params = {"queue": QUEUE, "consumer": consumer, "lease": 60.0, "limit": BATCH}
        done = 0
        while done < jobs:
            rows = await _all(conn, receive, params)
            if not rows:
                return
            acked = await _all(conn, ack, _ack_params(consumer, rows))
            if len(acked) != len(rows):
                raise SystemExit(f"two_table: acked {len(acked)} of {len(rows)}")
            done += len(rows)

    return loop


# -- HOT updates ------------------------------------------------------------------------

_HOT_SETUP = [
    """CREATE TABLE {s}.hot (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        body bytea NOT NULL,
        added_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        available_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        owner text,
        delivery_count integer NOT NULL DEFAULT 0,
        leased_at timestamptz,
        lease_seconds double precision,
        expires_at timestamptz
    ) WITH (fillfactor = 50)""",
    # No predicate and no lease column: an UPDATE of the lease columns stays HOT.
    "CREATE INDEX hot_due ON {s}.hot (queue, available_at, id)",
]


def hot_loop(schema: str) -> Loop:
    receive = _q(pg_queue._RECEIVE.replace("{s}.messages", "{s}.hot"), schema)
    ack = _q(_TWO_TABLE_ACK.replace("{s}.leased", "{s}.hot"), schema)

    async def loop(conn: psycopg.AsyncConnection[Any], jobs: int) -> None:
        consumer = f"c{id(conn)}"
        params = {"queue": QUEUE, "consumer": consumer, "lease": 60.0, "limit": BATCH}
        done = 0
        while done < jobs:
            rows = await _all(conn, receive, params)
            if not rows:
                return
            acked = await _all(conn, ack, _ack_params(consumer, rows))
            if len(acked) != len(rows):
                raise SystemExit(f"hot: acked {len(acked)} of {len(rows)}")
            done += len(rows)

    return loop


def unlogged_loop(schema: str) -> Loop:
    receive = _q(pg_queue._RECEIVE.replace("{s}.messages", "{s}.ulog"), schema)
    ack = _q(pg_queue._ACK.replace("{s}.messages", "{s}.ulog"), schema)

    async def loop(conn: psycopg.AsyncConnection[Any], jobs: int) -> None:
        consumer = f"c{id(conn)}"
        params = {"queue": QUEUE, "consumer": consumer, "lease": 60.0, "limit": BATCH}
        done = 0
        while done < jobs:
            rows = await _all(conn, receive, params)
            if not rows:
                return
            acked = await _all(conn, ack, _ack_params(consumer, rows))
            if len(acked) != len(rows):
                raise SystemExit(f"unlogged: acked {len(acked)} of {len(rows)}")
            done += len(rows)

    return loop


_ASYNC = ("SET synchronous_commit = off",)

DESIGNS: dict[str, Design] = {
    "raw": Design([], "messages", raw_loop),
    "raw_async": Design([], "messages", raw_loop, _ASYNC),
    "current": Design([], "messages", current_loop),
    "current_async": Design([], "messages", current_loop, _ASYNC),
    "combined": Design([], "messages", combined_loop),
    "combined_unprepared": Design([], "messages", combined_loop, prepare=False),
    "two_table": Design(_TWO_TABLE_SETUP, "ready", two_table_loop),
    "two_table_async": Design([], "ready", two_table_loop, _ASYNC),
    "hot": Design(_HOT_SETUP, "hot", hot_loop),
    "hot_async": Design([], "hot", hot_loop, _ASYNC),
    # Not a candidate (an unlogged table is emptied by a crash: no durable_enqueue), the
    # bound on what WAL costs the current statements.
    "unlogged": Design(
        ["CREATE UNLOGGED TABLE {s}.ulog (LIKE {s}.messages INCLUDING ALL)"],
        "ulog",
        unlogged_loop,
    ),
}


# -- measuring --------------------------------------------------------------------------


def _cpu_seconds(pids: list[int]) -> float | None:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        for pid in pids:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
    except PermissionError:
        return None
    return total / ticks


async def _background_pids(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    cursor = await conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'"
    )
    return [int(row[0]) for row in await cursor.fetchall()]


async def _wal_lsn(conn: psycopg.AsyncConnection[Any]) -> str:
    row = await (await conn.execute("SELECT pg_current_wal_insert_lsn()::text")).fetchone()
    assert row is not None
    return str(row[0])


async def _flush_stats(loops: list[psycopg.AsyncConnection[Any]]) -> None:
    # A backend sends its table statistics at most once a second, when idle; this makes
    # each loop's next transaction end send them at once.
    for conn in loops:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await conn.execute("SELECT 1")


async def _hot_updates(conn: psycopg.AsyncConnection[Any], schema: str, table: str) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await (
        await conn.execute(
            "SELECT coalesce(n_tup_hot_upd, 0) FROM pg_stat_user_tables"
            " WHERE schemaname = %s AND relname = %s",
            (schema, table),
        )
    ).fetchone()
    return int(row[0]) if row else 0


async def fill(conn: psycopg.AsyncConnection[Any], schema: str, table: str, n: int) -> None:
    query = _q(
        "INSERT INTO {s}." + table + " (queue, body) SELECT %s, b FROM unnest(%s::bytea[]) b",
        schema,
    )
    for start in range(0, n, 1000):
        await conn.execute(query, (QUEUE, [BODY] * min(1000, n - start)))
    await conn.execute(_q("VACUUM (ANALYZE) {s}." + table, schema))


async def measure(
    admin: psycopg.AsyncConnection[Any],
    loops: list[psycopg.AsyncConnection[Any]],
    schema: str,
    name: str,
    n: int,
) -> dict[str, float]:
    design = DESIGNS[name]
    await fill(admin, schema, design.table, n)
    for conn in loops:
        conn.prepare_threshold = 5 if design.prepare else None
        await conn.execute("RESET synchronous_commit")
        for statement in design.session:
            await conn.execute(statement)
    pids = [conn.info.backend_pid for conn in loops] + await _background_pids(admin)
    run = design.make_loop(schema)
    per_loop = n // len(loops)
    await _flush_stats(loops)
    hot_before = await _hot_updates(admin, schema, design.table)
    wal_before = await _wal_lsn(admin)
    server_before = _cpu_seconds(pids)
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(run(conn, per_loop) for conn in loops))
    elapsed = time.perf_counter() - started
    client = time.process_time() - client_before
    server_after = _cpu_seconds(pids)
    wal_after = await _wal_lsn(admin)
    await _flush_stats(loops)
    hot_after = await _hot_updates(admin, schema, design.table)
    row = await (
        await admin.execute(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (wal_after, wal_before)
        )
    ).fetchone()
    assert row is not None
    left = await (
        await admin.execute(_q("SELECT count(*) FROM {s}." + design.table, schema))
    ).fetchone()
    done = n - int(left[0]) if left else n
    if name.startswith("two_table"):
        await admin.execute(_q("TRUNCATE {s}.ready, {s}.leased", schema))
    else:
        await admin.execute(_q("TRUNCATE {s}." + design.table, schema))
    result = {
        "rate": done / elapsed,
        "client_us": client / done * 1e6,
        "wal_bytes": float(row[0]) / done,
        "hot_per_job": (hot_after - hot_before) / done,
    }
    if server_before is not None and server_after is not None:
        result["server_us"] = (server_after - server_before) / done * 1e6
    return result


async def bench(url: str, n: int, reps: int, names: list[str], loops: int) -> dict[str, Any]:
    schema = f"tr_designs_{uuid.uuid4().hex[:12]}"
    admin = await psycopg.AsyncConnection.connect(url, autocommit=True)
    conns: list[psycopg.AsyncConnection[Any]] = []
    try:
        version = await (await admin.execute("SHOW server_version")).fetchone()
        sync = await (await admin.execute("SHOW synchronous_commit")).fetchone()
        print(
            f"PostgreSQL {version[0] if version else '?'} (synchronous_commit="
            f"{sync[0] if sync else '?'}); n = {n}; reps = {reps}; loops = {loops}; "
            f"batch = {BATCH}; cpus = {os.cpu_count()}",
            flush=True,
        )
        await migrate(admin, schema)
        for name in names:
            for statement in DESIGNS[name].setup:
                await admin.execute(_q(statement, schema))
        conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(loops)]
        results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for rep in range(reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            got = {name: await measure(admin, conns, schema, name, n) for name in order}
            for name in names:
                results[name].append(got[name])
            base = got.get("raw")
            line = ", ".join(
                f"{name} {got[name]['rate']:,.0f}"
                + (f" ({got[name]['rate'] / base['rate']:.2f})" if base else "")
                for name in names
            )
            print(f"rep {rep + 1}: {line}", flush=True)
    finally:
        for conn in conns:
            await conn.close()
        await admin.execute(_q("DROP SCHEMA IF EXISTS {s} CASCADE", schema))
        await admin.close()
    report: dict[str, Any] = {}
    print(f"\nmedians of {reps} (jobs/s; ratio = rate / raw's in the same rep):")
    print(
        "| design | jobs/s | ratio to raw | client µs/job | server µs/job | WAL bytes/job"
        " | HOT/job |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        runs = results[name]
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        if "raw" in results:
            med["ratio"] = statistics.median(
                r["rate"] / b["rate"] for r, b in zip(runs, results["raw"], strict=True)
            )
        report[name] = {key: round(value, 3) for key, value in med.items()}
        print(
            f"| {name} | {med['rate']:,.0f} | {med.get('ratio', float('nan')):.2f} | "
            f"{med['client_us']:.1f} | {med.get('server_us', float('nan')):.1f} | "
            f"{med['wal_bytes']:.0f} | {med['hot_per_job']:.2f} |"
        )
    report.update(n=n, reps=reps, loops=loops, batch=BATCH)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--loops", type=int, default=1)
    args = parser.parse_args()
    names = [name.strip() for name in args.designs.split(",") if name.strip()]
    unknown = [name for name in names if name not in DESIGNS]
    if unknown:
        parser.error(f"unknown designs {unknown}; known: {', '.join(DESIGNS)}")
    # A design's "_async" twin shares its tables: create them once, with the first.
    needed = {name.removesuffix("_async") for name in names}
    for base in needed:
        if base not in names and DESIGNS[base].setup:
            DESIGNS[f"{base}_async"].setup = DESIGNS[base].setup
    print(json.dumps(asyncio.run(bench(args.url, args.n, args.reps, names, args.loops))))


if __name__ == "__main__":
    main()
