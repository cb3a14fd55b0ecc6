"""Throughput of taskrunner on PostgreSQL, next to what a raw psycopg loop gets from the server.

Run: ``python bench/throughput.py --url postgresql://postgres@127.0.0.1:5432/test`` (or
``nox -s bench -- --url ...``, or this file directly with the same options). Options:
``-n`` messages per measurement (default 20000), ``--runs`` (default 3), ``--configs``
(comma-separated names of `CONFIGS` the e2e rows run with; default all).

Every run uses a fresh schema ``tr_bench_<random>`` (migrated with ``schema.migrate``,
dropped with everything in it at the end, also after a failure), the same body size as
the Redis benchmark (a taskrunner envelope of a no-op task), and measures one after the
other on the same table:

* ``raw_produce``: psycopg inserts N rows into ``messages``, in batches of 100, one
  ``INSERT ... SELECT ... FROM unnest(%s::bytea[])`` statement (and one round trip, in
  autocommit) per batch. Timed: first INSERT to last reply.
* ``raw_consume``: psycopg drains those N rows with the classic minimal SKIP LOCKED
  queue: ``DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE queue = %s
  ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id, body``, one statement per
  batch, until all N are gone. No lease, no redelivery after a crash: the floor a
  consumer of this table cannot go under. Timed: first DELETE to last reply.
* ``sql_cycle``: N rows inserted again (untimed), then drained by the backend's own
  receive and fenced ack statements (its module's SQL), 100 at a time, back to back on
  one connection: no runner, no task. The ceiling of that pair of statements in
  sequence; ``ratio_sql`` = sql_cycle / raw_consume (not part of ``ratio_e2e``).
* ``dispatch``: ``Producer.dispatch_many`` of N no-op tasks through `PostgresQueue`.
  Timed: the call.
* ``e2e``: one worker *process* (this file with ``--worker``), started after the
  dispatch, runs ``Runner.run(burst=True)`` over the N tasks. Timed: from the worker's
  own CLOCK_MONOTONIC timestamp taken immediately before ``Runner.run`` (interpreter
  start, imports and opening the queue are not timed) to the first moment the benchmark
  sees no row of the queue left (``SELECT EXISTS`` polled every 5 ms on its own
  connection): every task received, run, acked and deleted.
* ``e2e_incr``: the same for N tasks that each run one ``UPDATE counters SET n = n + 1
  WHERE id = <one of 64>`` through the worker's own psycopg pool (one connection per 10
  worker slots, opened before the clock starts): the INCR-style job. The counters must
  add up to N.

The e2e figures are measured once per entry of `CONFIGS` (``defaults``: RunnerConfig()
and the URL's default pool; ``tuned`` and others: fetchers, workers, batch size, pool
size). Between measurements (untimed) the table is vacuumed, so each starts from the same
state instead of inheriting the previous phase's dead rows.

Each figure is messages per second; ``ratio_e2e`` = e2e / raw_consume and
``ratio_dispatch`` = dispatch / raw_produce, per run and per config. The report gives the
median of the runs, and the last line of output is one JSON object (keys ``raw_produce``,
``raw_consume``, ``dispatch``, ``e2e`` and ``e2e_incr`` per config, the ratios, ``n``,
``runs``, ``server``, ``cpus``).

The worker process also reports its own CPU (``getrusage`` over ``Runner.run``) and the
benchmark the server's (the sum of ``/proc/<pid>/stat`` utime + stime of every backend of
the cluster, which needs the server on this machine; otherwise it is left out), as
µs per job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import psycopg_pool
from psycopg import sql

import taskrunner
from taskrunner_backends.postgres import queue as pg_queue
from taskrunner_backends.postgres.db import Database
from taskrunner_backends.postgres.queue import open_from_url
from taskrunner_backends.postgres.schema import migrate

QUEUE_NAME = "bench"
RAW_BATCH = 100
POLL_SECONDS = 0.005
WORKER_TIMEOUT_SECONDS = 600.0
INCR_KEYS = 64
INCR_SLOTS_PER_CONNECTION = 10

#: Worker settings the e2e rows compare: RunnerConfig fields, plus ``pool_max`` (the
#: queue URL's pool size; absent = the backend's default).
CONFIGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    # Like the Redis bench's worker: one reader asking for 100 at a time, twice as many
    # workers so a whole batch of capacity is free when the previous batch's acks return.
    "tuned": {
        "num_fetchers": 1,
        "num_workers": 200,
        "batch_size": 100,
        "block_seconds": 1.0,
    },
    "tuned_f2": {
        "num_fetchers": 2,
        "num_workers": 400,
        "batch_size": 100,
        "block_seconds": 1.0,
        "pool_max": 20,
    },
}

app = taskrunner.App(QUEUE_NAME)


class _Incr:
    """The incr task's pool and schema, set by the worker process before the clock starts."""

    pool: psycopg_pool.AsyncConnectionPool[Any] | None = None
    query: sql.Composed | None = None


@app.task(name="noop")
async def noop() -> None:
    """The benchmark's task: nothing at all."""


@app.task(name="incr")
async def incr(slot: int) -> None:
    """One UPDATE of one of `INCR_KEYS` counter rows: a round trip of real server work."""
    if _Incr.pool is None or _Incr.query is None:
        raise RuntimeError("the incr task runs only in a --worker process")
    async with _Incr.pool.connection() as conn:
        await conn.execute(_Incr.query, (slot,))


def queue_url(url: str, schema: str, pool_max: int | None = None) -> str:
    """`url` with the bench's schema, tag (and pool size) added to its query."""
    extra = f"schema={schema}&application_name={schema}"
    if pool_max:
        extra += f"&pool_max={pool_max}"
    return f"{url}?{extra}"


def libpq_url(url: str, tag: str | None = None) -> str:
    """`url` for psycopg itself, tagged with `application_name` when `tag` is given."""
    return f"{url}?application_name={tag}" if tag else url


# -- server CPU ------------------------------------------------------------------------


def _server_cpu_seconds(pids: list[int]) -> float | None:
    """utime + stime of the given server processes, or None if they are not readable."""
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


class ServerCpu:
    """CPU of the server processes serving this benchmark, from ``pg_stat_activity`` and /proc.

    Counted: the backends whose ``application_name`` is the run's tag (every connection
    the worker process opens: the queue's pool, its listener, the incr pool) and the
    server's own background processes (WAL writer, checkpointer, autovacuum, ...), which
    the load keeps busy. Other clients of the same server are not counted.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any], tag: str) -> None:
        self._conn = conn
        self._tag = tag

    async def read(self, tag: str | None = None) -> float | None:
        """The CPU seconds so far of the backends tagged `tag` (default: the worker's)."""
        cursor = await self._conn.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE application_name = %s OR backend_type <> 'client backend'",
            (tag or self._tag,),
        )
        return _server_cpu_seconds([int(row[0]) for row in await cursor.fetchall()])


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / ticks, sum(fields[:8]) / ticks


# -- measurements ----------------------------------------------------------------------


async def raw_produce(
    conn: psycopg.AsyncConnection[Any], schema: str, body: bytes, n: int
) -> float:
    query = sql.SQL(
        "INSERT INTO {s}.messages (queue, body) SELECT %s, b FROM unnest(%s::bytea[]) AS b"
    ).format(s=sql.Identifier(schema))
    batches = [[body] * min(RAW_BATCH, n - start) for start in range(0, n, RAW_BATCH)]
    started = time.perf_counter()
    for batch in batches:
        await conn.execute(query, ("raw", batch))
    return n / (time.perf_counter() - started)


async def raw_consume(conn: psycopg.AsyncConnection[Any], schema: str, n: int) -> float:
    query = sql.SQL(
        "DELETE FROM {s}.messages WHERE id IN (SELECT id FROM {s}.messages WHERE queue = %s"
        " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id, body"
    ).format(s=sql.Identifier(schema))
    done = 0
    started = time.perf_counter()
    while done < n:
        cursor = await conn.execute(query, ("raw", RAW_BATCH))
        rows = await cursor.fetchall()
        if not rows:
            raise SystemExit(f"raw_consume found the table empty after {done} of {n}")
        done += len(rows)
    return n / (time.perf_counter() - started)


async def sql_cycle(conn: psycopg.AsyncConnection[Any], schema: str, n: int) -> float:
    """The backend's own receive and fenced ack statements, back to back, 100 at a time.

    No runner, no task, one connection: the ceiling of those two statements in sequence
    (the SQL is the backend's, read from its module, so the figure follows its changes).
    """
    receive = sql.SQL(pg_queue._RECEIVE).format(s=sql.Identifier(schema))
    ack = sql.SQL(pg_queue._ACK).format(s=sql.Identifier(schema))
    done = 0
    started = time.perf_counter()
    while done < n:
        cursor = await conn.execute(
            receive, {"queue": "raw", "consumer": "c", "lease": 60.0, "limit": RAW_BATCH}
        )
        rows = await cursor.fetchall()
        if not rows:
            raise SystemExit(f"sql_cycle found the table empty after {done} of {n}")
        await conn.execute(
            ack,
            {
                "ids": [row[0] for row in rows],
                "owners": ["c"] * len(rows),
                "counts": [row[2] for row in rows],
                "queue": "raw",
            },
        )
        done += len(rows)
    return n / (time.perf_counter() - started)


async def vacuum(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Untimed, between phases: each measurement starts without the last one's dead rows."""
    await conn.execute(sql.SQL("VACUUM (ANALYZE) {s}.messages").format(s=sql.Identifier(schema)))


async def e2e(
    conn: psycopg.AsyncConnection[Any],
    url: str,
    schema: str,
    config: str,
    job: str,
    n: int,
    cpu: ServerCpu,
) -> dict[str, Any]:
    """Start a worker process over the N queued tasks; time it until the queue is empty."""
    exists = sql.SQL("SELECT EXISTS (SELECT 1 FROM {s}.messages WHERE queue = %s)").format(
        s=sql.Identifier(schema)
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--worker",
        "--url",
        url,
        "--schema",
        schema,
        "--config",
        config,
        "--job",
        job,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), WORKER_TIMEOUT_SECONDS)
        if not line.startswith(b"start "):
            raise SystemExit(f"worker did not start: {line!r}")
        server_before = await cpu.read()
        busy_before, total_before = machine_busy_seconds()
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        started = float(line.split()[1])
        deadline = time.monotonic() + WORKER_TIMEOUT_SECONDS
        while True:
            row = await (await conn.execute(exists, (QUEUE_NAME,))).fetchone()
            if row is None or not row[0]:
                break
            if process.returncode is not None:
                raise SystemExit(
                    f"the worker exited ({process.returncode}) before the queue was empty"
                )
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not empty the queue in time")
            await asyncio.sleep(POLL_SECONDS)
        finished = time.monotonic()
        server_after = await cpu.read()
        busy_after, total_after = machine_busy_seconds()
        own_after = resource.getrusage(resource.RUSAGE_SELF)
        rest = await asyncio.wait_for(process.stdout.read(), WORKER_TIMEOUT_SECONDS)
        if await asyncio.wait_for(process.wait(), WORKER_TIMEOUT_SECONDS):
            raise SystemExit(f"worker failed with exit code {process.returncode}")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    report: dict[str, Any] = json.loads(rest.decode().strip().splitlines()[-1])
    if report["succeeded"] < n:
        raise SystemExit(f"only {report['succeeded']} of {n} tasks succeeded: {report}")
    elapsed = finished - started
    busy = (busy_after - busy_before) / (total_after - total_before) * (os.cpu_count() or 1)
    print(f"    {job}[{config}]: {statements_line(report['statements'], n)}", flush=True)
    result: dict[str, Any] = {
        "rate": n / elapsed,
        "worker_us_per_job": report["cpu"] / n * 1e6,
        "machine_busy_cores": busy,
    }
    if server_before is not None and server_after is not None:
        result["server_us_per_job"] = (server_after - server_before) / n * 1e6
        own = own_after.ru_utime + own_after.ru_stime - own_before.ru_utime - own_before.ru_stime
        # What else kept the machine busy (other clients, other work): figures taken with
        # a high one are noisy.
        result["other_cores"] = max(
            0.0, busy - (report["cpu"] + server_after - server_before + own) / elapsed
        )
    return result


async def one_run(url: str, n: int, configs: list[str]) -> dict[str, float]:
    schema = f"tr_bench_{uuid.uuid4().hex[:12]}"
    ident = sql.Identifier(schema)
    conn = await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True)
    try:
        await migrate(conn, schema)
        await conn.execute(
            sql.SQL("CREATE TABLE {s}.counters (id integer PRIMARY KEY, n bigint NOT NULL)").format(
                s=ident
            )
        )
        cpu = ServerCpu(conn, schema)
        result: dict[str, float] = {}
        queue = await open_from_url(queue_url(url, schema), queue_name=QUEUE_NAME)
        try:
            producer = taskrunner.Producer(queue, app)
            body = producer.encode(noop, None)
            # The raw loops run on a connection of their own, tagged, so the server's
            # CPU for them is counted like the worker's.
            raw_tag = f"{schema}_raw"
            raw = await psycopg.AsyncConnection.connect(libpq_url(url, raw_tag), autocommit=True)
            try:
                before = await cpu.read(raw_tag)
                result["raw_produce"] = await raw_produce(raw, schema, body, n)
                middle = await cpu.read(raw_tag)
                await vacuum(conn, schema)
                middle2 = await cpu.read(raw_tag)
                result["raw_consume"] = await raw_consume(raw, schema, n)
                after = await cpu.read(raw_tag)
                await raw_produce(raw, schema, body, n)
                await vacuum(conn, schema)
                result["sql_cycle"] = await sql_cycle(raw, schema, n)
            finally:
                await raw.close()
            if before is not None and middle is not None:
                result["server_us[raw_produce]"] = (middle - before) / n * 1e6
            if middle2 is not None and after is not None:
                result["server_us[raw_consume]"] = (after - middle2) / n * 1e6
            await vacuum(conn, schema)
            for config in configs:
                started = time.perf_counter()
                await producer.dispatch_many(noop, [None] * n)
                rate = n / (time.perf_counter() - started)
                if config == configs[0]:
                    result["dispatch"] = rate
                await vacuum(conn, schema)
                got = await e2e(conn, url, schema, config, "noop", n, cpu)
                result[f"e2e[{config}]"] = got["rate"]
                result[f"worker_us[{config}]"] = got["worker_us_per_job"]
                result[f"busy[{config}]"] = got["machine_busy_cores"]
                if "server_us_per_job" in got:
                    result[f"server_us[{config}]"] = got["server_us_per_job"]
                    result[f"other[{config}]"] = got["other_cores"]
                await vacuum(conn, schema)

                await conn.execute(sql.SQL("TRUNCATE {s}.counters").format(s=ident))
                await conn.execute(
                    sql.SQL(
                        "INSERT INTO {s}.counters SELECT i, 0 FROM generate_series(0, %s) i"
                    ).format(s=ident),
                    (INCR_KEYS - 1,),
                )
                for start in range(0, n, 2000):
                    await producer.dispatch_many(
                        incr, [i % INCR_KEYS for i in range(start, min(n, start + 2000))]
                    )
                await vacuum(conn, schema)
                got = await e2e(conn, url, schema, config, "incr", n, cpu)
                counted = await (
                    await conn.execute(
                        sql.SQL("SELECT coalesce(sum(n), 0) FROM {s}.counters").format(s=ident)
                    )
                ).fetchone()
                if counted is None or int(counted[0]) != n:
                    raise SystemExit(f"the counters add up to {counted}, not {n}")
                result[f"e2e_incr[{config}]"] = got["rate"]
                result[f"worker_us_incr[{config}]"] = got["worker_us_per_job"]
                result[f"busy_incr[{config}]"] = got["machine_busy_cores"]
                if "server_us_per_job" in got:
                    result[f"server_us_incr[{config}]"] = got["server_us_per_job"]
                    result[f"other_incr[{config}]"] = got["other_cores"]
                await vacuum(conn, schema)
            first = configs[0]
            result["e2e"] = result[f"e2e[{first}]"]
            result["e2e_incr"] = result[f"e2e_incr[{first}]"]
            for config in configs:
                result[f"ratio_e2e[{config}]"] = result[f"e2e[{config}]"] / result["raw_consume"]
            result["ratio_e2e"] = result[f"ratio_e2e[{first}]"]
            result["ratio_dispatch"] = result["dispatch"] / result["raw_produce"]
            result["ratio_sql"] = result["sql_cycle"] / result["raw_consume"]
            return result
        finally:
            await queue.aclose()
    finally:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {s} CASCADE").format(s=ident))
        await conn.close()


async def server_name(url: str) -> str:
    async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
        row = await (await conn.execute("SHOW server_version")).fetchone()
        sync = await (await conn.execute("SHOW synchronous_commit")).fetchone()
    version = row[0] if row else "?"
    return f"PostgreSQL {version} (synchronous_commit={sync[0] if sync else '?'})"


async def bench(url: str, n: int, runs: int, configs: list[str]) -> dict[str, Any]:
    server = await server_name(url)
    print(
        f"server: {server}; n = {n}; runs = {runs}; cpus = {os.cpu_count()}; "
        f"configs: { {name: CONFIGS[name] for name in configs} }",
        flush=True,
    )
    results = []
    for index in range(runs):
        result = await one_run(url, n, configs)
        results.append(result)
        figures = ", ".join(
            f"{k} {v:,.0f}/s"
            for k, v in result.items()
            if not k.startswith(("ratio", "worker", "server", "busy", "other"))
        )
        print(f"run {index + 1}: {figures}; ratio_e2e {result['ratio_e2e']:.2f}", flush=True)
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(f"median of {runs} run(s), messages per second:")
    rows = [
        ("raw_produce", "raw INSERT ... unnest, batches of 100"),
        ("dispatch", "Producer.dispatch_many"),
    ]
    rows.append(("raw_consume", "raw DELETE ... SKIP LOCKED LIMIT 100"))
    rows.append(("sql_cycle", "the backend's receive + ack SQL of 100, back to back"))
    for key, label in rows:
        if f"server_us[{key}]" in median:
            label += f" (server {median[f'server_us[{key}]']:.1f} µs/job)"
        print(f"  {key:<28} {median[key]:>10,.0f}   {label}")
    for config in configs:
        for job in ("e2e", "e2e_incr"):
            key = f"{job}[{config}]"
            suffix = "_incr" if job == "e2e_incr" else ""
            cpu = f"worker {median[f'worker_us{suffix}[{config}]']:.0f} µs/job"
            if f"server_us{suffix}[{config}]" in median:
                cpu += f", server {median[f'server_us{suffix}[{config}]']:.0f} µs/job"
            cpu += f", machine busy {median[f'busy{suffix}[{config}]']:.2f} cores"
            if f"other{suffix}[{config}]" in median:
                cpu += f" (other load {median[f'other{suffix}[{config}]']:.2f})"
            print(f"  {key:<28} {median[key]:>10,.0f}   ({cpu})")
    for config in configs:
        key = f"ratio_e2e[{config}]"
        print(f"  {key:<28} {median[key]:>10.2f}   (e2e / raw_consume)")
    print(f"  {'ratio_dispatch':<28} {median['ratio_dispatch']:>10.2f}   (dispatch / raw_produce)")
    print(f"  {'ratio_sql':<28} {median['ratio_sql']:>10.2f}   (sql_cycle / raw_consume)")
    report: dict[str, Any] = {
        key: round(
            value, 3 if key.startswith(("ratio", "worker", "server", "busy", "other")) else 0
        )
        for key, value in median.items()
    }
    report.update(n=n, runs=runs, server=server, cpus=os.cpu_count())
    return report


# -- the worker process ----------------------------------------------------------------


class StatementLog:
    """Counts and times the worker's statements by action (wraps `Database.fetch`/`execute`).

    One ``perf_counter`` pair per statement (well under a microsecond per job at batch
    sizes of 50 or more): the round trips per job and their latency, without a profiler.
    """

    calls: ClassVar[dict[str, list[float]]] = {}  # action -> [count, seconds, rows]

    @classmethod
    def install(cls) -> None:
        fetch, execute = Database.fetch, Database.execute

        async def timed_fetch(
            self: Database, action: str, query: Any, params: Any = None, **options: Any
        ) -> list[tuple[Any, ...]]:
            started = time.perf_counter()
            try:
                rows = await fetch(self, action, query, params, **options)
            finally:
                cls._note(action, time.perf_counter() - started)
            cls.calls[action][2] += len(rows)
            return rows

        async def timed_execute(self: Database, action: str, query: Any, params: Any = None) -> int:
            started = time.perf_counter()
            try:
                return await execute(self, action, query, params)
            finally:
                cls._note(action, time.perf_counter() - started)

        Database.fetch = timed_fetch  # type: ignore[method-assign]
        Database.execute = timed_execute  # type: ignore[method-assign]

    @classmethod
    def _note(cls, action: str, seconds: float) -> None:
        entry = cls.calls.setdefault(action, [0, 0.0, 0])
        entry[0] += 1
        entry[1] += seconds

    @classmethod
    def reset(cls) -> None:
        cls.calls.clear()


def statements_line(calls: dict[str, list[float]], n: int) -> str:
    """``action: count (rows/call, mean ms)`` for the worker's statements over N jobs."""
    parts = []
    for action, (count, seconds, rows) in sorted(calls.items(), key=lambda kv: -kv[1][0]):
        parts.append(
            f"{action} {count:.0f} ({rows / count:.0f} rows, {seconds / count * 1e3:.2f} ms)"
        )
    return f"{sum(c[0] for c in calls.values()) / n * 100:.1f} statements per 100 jobs: " + (
        ", ".join(parts)
    )


async def worker(url: str, schema: str, config: str, job: str) -> None:
    StatementLog.install()
    settings = dict(CONFIGS[config])
    pool_max = settings.pop("pool_max", None)
    queue = await open_from_url(queue_url(url, schema, pool_max), queue_name=QUEUE_NAME)
    try:
        runner_config = taskrunner.RunnerConfig(**settings)
        if job == "incr":
            size = max(1, runner_config.num_workers // INCR_SLOTS_PER_CONNECTION)
            _Incr.pool = psycopg_pool.AsyncConnectionPool(
                libpq_url(url, schema),
                min_size=size,
                max_size=size,
                kwargs={"autocommit": True},
                open=False,
            )
            await _Incr.pool.open(wait=True)
            _Incr.query = sql.SQL("UPDATE {s}.counters SET n = n + 1 WHERE id = %s").format(
                s=sql.Identifier(schema)
            )
        runner = taskrunner.Runner(queue, app, runner_config)
        StatementLog.reset()
        before = resource.getrusage(resource.RUSAGE_SELF)
        print(f"start {time.monotonic()!r}", flush=True)
        await runner.run(burst=True)
        after = resource.getrusage(resource.RUSAGE_SELF)
        stats = runner.stats()
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        print(
            json.dumps(
                {
                    "cpu": cpu,
                    "succeeded": stats.succeeded,
                    "failed": stats.failed,
                    "lease_lost": stats.lease_lost,
                    "statements": StatementLog.calls,
                }
            ),
            flush=True,
        )
    finally:
        if _Incr.pool is not None:
            await _Incr.pool.close()
        await queue.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="postgresql://... (no query options)")
    parser.add_argument("-n", type=int, default=20000, help="messages per measurement")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="e2e worker settings")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(worker(args.url, args.schema, args.config, args.job))
        return
    configs = [name for name in args.configs.split(",") if name]
    unknown = [name for name in configs if name not in CONFIGS]
    if unknown or not configs:
        parser.error(f"--configs: unknown {unknown}; known: {', '.join(CONFIGS)}")
    if args.n < RAW_BATCH or args.runs < 1:
        parser.error(f"-n must be >= {RAW_BATCH} and --runs >= 1")
    if "?" in args.url:
        parser.error("--url takes no query options (the bench adds its own schema)")
    print(json.dumps(asyncio.run(bench(args.url, args.n, args.runs, configs))))


if __name__ == "__main__":
    main()
