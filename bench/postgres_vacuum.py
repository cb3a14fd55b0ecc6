"""Dead tuples and table growth of the PostgreSQL backend under sustained load.

Run: ``python bench/postgres_vacuum.py --url postgresql://postgres@127.0.0.1:5432/test``.
Run time: ``--seconds`` of load (default 90) plus about 5 s of set-up and drain, so about
95 s with the defaults.

In a fresh schema ``tr_vac_<random>`` (migrated with ``schema.migrate``, dropped at the
end), a producer adds ``--rate`` jobs per second (default 1000, in a batch every 50 ms,
on an absolute schedule) while one `Runner` in the same process (300 workers, batches of
50, ``--lease`` 2 s, so heartbeats every 0.5 s) runs them: most jobs do nothing, a
``--long-fraction`` (default 0.1) sleeps ``--long-seconds`` (default 1.5), long enough to
be heartbeated about three times. So every message row sees the full cycle: INSERT
(add), UPDATE (receive), UPDATEs (heartbeats, for the long ones), DELETE (ack).

Every ``--sample`` seconds (default 5) it prints, for ``messages``, from
``pg_stat_user_tables``: live and dead tuples, the insert/update/HOT-update/delete
counters, autovacuum runs, and ``pg_relation_size`` / ``pg_indexes_size``. The summary
gives dead tuples made per job ((updates + deletes) / jobs: each UPDATE and DELETE
leaves one dead row version), the share of updates that were HOT, the peak of
``n_dead_tup``, the table's and indexes' growth, and how many times autovacuum ran
with the server's settings (printed: ``autovacuum_naptime``,
``autovacuum_vacuum_scale_factor``, ``autovacuum_vacuum_threshold``, cost delay/limit).

``--private`` starts a throwaway server (the machine's PostgreSQL 15 binaries, initdb's
stock settings, so autovacuum on) instead of ``--url``, and ``--server-setting
name=value`` (repeatable) changes one of its settings, e.g. ``autovacuum_naptime=10s``.
``--backlog N`` first adds N rows due in a day (live all along: a big queue, as far as
autovacuum's thresholds go); ``--hold-snapshot`` keeps another session's transaction
open through the load (an idle-in-transaction client).
``--table-settings 'autovacuum_vacuum_scale_factor=0,autovacuum_vacuum_threshold=1000'``
(for example) applies per-table storage parameters to ``messages`` before the load, to
compare; ``fillfactor=N`` is one too. The last line is a JSON object with the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import taskrunner
from taskrunner_backends.postgres.queue import open_from_url
from taskrunner_backends.postgres.schema import migrate

QUEUE_NAME = "vacuum"
TICK_SECONDS = 0.05

app = taskrunner.App(QUEUE_NAME)


@app.task(name="job")
async def job(seconds: float) -> None:
    """Sleep `seconds` (0 for most jobs): long ones hold their lease across heartbeats."""
    if seconds > 0:
        await asyncio.sleep(seconds)


PG_BIN = Path(os.environ.get("TASKRUNNER_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_server(settings: list[str]) -> Iterator[str]:
    """A throwaway PostgreSQL with the stock settings (autovacuum on), on a loopback port.

    initdb's defaults except ``listen_addresses``, ``port`` and `settings` (``name=value``
    each, given to the server as ``-c``); run as the ``postgres``
    user when this process is root (the server refuses root). Stopped (``pg_ctl stop -m
    fast``, then SIGKILL of its pid) and deleted afterwards.
    """
    directory = Path(tempfile.mkdtemp(prefix="taskrunner-vacuum-"))
    data = directory / "data"
    prefix: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(directory, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run(
        [*prefix, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -k {directory}"
    for setting in settings:
        options += f" -c {setting}"
    subprocess.run(
        [*prefix, str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-w", "start"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        pid_file = data / "postmaster.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), 9)
        shutil.rmtree(directory, ignore_errors=True)


_STATS = """
SELECT n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
       autovacuum_count, vacuum_count, last_autovacuum,
       pg_relation_size(relid), pg_indexes_size(relid)
FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'messages'
"""

_FIELDS = (
    "live",
    "dead",
    "ins",
    "upd",
    "hot_upd",
    "del",
    "autovacuum_count",
    "vacuum_count",
    "last_autovacuum",
    "table_bytes",
    "index_bytes",
)

_SETTINGS = (
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "synchronous_commit",
    "server_version",
)


async def sample(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, Any]:
    row = await (await conn.execute(_STATS, (schema,))).fetchone()
    if row is None:
        raise SystemExit("no pg_stat_user_tables row for the messages table")
    return dict(zip(_FIELDS, row, strict=True))


async def index_sizes(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, int]:
    cursor = await conn.execute(
        "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
        " WHERE schemaname = %s AND relname = 'messages' ORDER BY indexrelname",
        (schema,),
    )
    return {str(name): int(size) for name, size in await cursor.fetchall()}


async def produce(
    queue: Any, rate: float, seconds: float, long_fraction: float, long_seconds: float
) -> int:
    """Add `rate` jobs per second for `seconds`, on an absolute schedule; returns how many."""
    producer = taskrunner.Producer(queue, app)
    rng = random.Random(14)
    started = time.monotonic()
    added = 0
    tick = 0
    while True:
        tick += 1
        due = started + tick * TICK_SECONDS
        if due - started > seconds:
            return added
        target = round(rate * tick * TICK_SECONDS)
        payloads = [
            long_seconds if rng.random() < long_fraction else 0.0 for _ in range(target - added)
        ]
        if payloads:
            await producer.dispatch_many(job, payloads)
            added += len(payloads)
        await asyncio.sleep(max(0.0, due - time.monotonic()))


def _mib(value: int) -> str:
    return f"{value / 1048576:.2f}"


def _row(t: float, s: dict[str, Any], base: dict[str, Any]) -> str:
    return (
        f"| {t:5.0f} | {s['live']:>7} | {s['dead']:>7} | {s['ins'] - base['ins']:>8} "
        f"| {s['upd'] - base['upd']:>8} | {s['hot_upd'] - base['hot_upd']:>7} "
        f"| {s['del'] - base['del']:>8} | {s['autovacuum_count'] - base['autovacuum_count']:>3} "
        f"| {_mib(s['table_bytes']):>7} | {_mib(s['index_bytes']):>7} |"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    schema = f"tr_vac_{uuid.uuid4().hex[:12]}"
    ident = sql.Identifier(schema)
    conn = await psycopg.AsyncConnection.connect(args.url, autocommit=True)
    try:
        settings = {}
        for name in _SETTINGS:
            row = await (
                await conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name)))
            ).fetchone()
            settings[name] = row[0] if row else "?"
        print(f"server settings: {settings}", flush=True)
        await migrate(conn, schema)
        if args.table_settings:
            await conn.execute(
                sql.SQL("ALTER TABLE {s}.messages SET ({})").format(
                    sql.SQL(args.table_settings), s=ident
                )
            )
        url = f"{args.url}?schema={schema}"
        producer_queue = await open_from_url(url, queue_name=QUEUE_NAME)
        worker_queue = await open_from_url(url, queue_name=QUEUE_NAME)
        config = taskrunner.RunnerConfig(
            num_workers=300, batch_size=50, lease_seconds=args.lease, block_seconds=1.0
        )
        runner = taskrunner.Runner(worker_queue, app, config)
        holder: psycopg.AsyncConnection[Any] | None = None
        try:
            if args.backlog:
                # Rows due in a day: live the whole run, never received (the receive's
                # index scan stops at the first row not yet due).
                await conn.execute(
                    sql.SQL(
                        "INSERT INTO {s}.messages (queue, body, available_at)"
                        " SELECT %s, %s, clock_timestamp() + interval '1 day'"
                        " FROM generate_series(1, %s)"
                    ).format(s=ident),
                    (QUEUE_NAME, b"x" * 120, args.backlog),
                )
                await conn.execute(sql.SQL("ANALYZE {s}.messages").format(s=ident))
                # Statistics are flushed lazily: the backlog's inserts must be in `base`.
                try:
                    await conn.execute("SELECT pg_stat_force_next_flush()")
                    await conn.execute("SELECT 1")
                except psycopg.errors.UndefinedFunction:  # before PostgreSQL 15
                    await asyncio.sleep(1.5)
            if args.hold_snapshot:
                # Another session's open snapshot: vacuum may remove nothing newer.
                holder = await psycopg.AsyncConnection.connect(args.url)
                await holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                await holder.execute("SELECT 1")
            base = await sample(conn, schema)
            indexes_before = await index_sizes(conn, schema)
            print(
                f"load: {args.rate:.0f} jobs/s for {args.seconds:.0f} s, "
                f"{args.long_fraction:.0%} of them {args.long_seconds} s long, "
                f"lease {args.lease} s; table settings: {args.table_settings or 'none'}; "
                f"backlog {args.backlog}; snapshot held: {args.hold_snapshot}",
                flush=True,
            )
            print(
                "|   t s |    live |    dead |  inserts |  updates |     HOT |  deletes "
                "|  av | table MiB | index MiB |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|")
            worker_task = asyncio.create_task(runner.run())
            started = time.monotonic()
            producer_task = asyncio.create_task(
                produce(
                    producer_queue, args.rate, args.seconds, args.long_fraction, args.long_seconds
                )
            )
            samples = []
            peak_dead = 0
            while not producer_task.done():
                await asyncio.wait({producer_task}, timeout=args.sample)
                now = await sample(conn, schema)
                samples.append(now)
                peak_dead = max(peak_dead, int(now["dead"]))
                print(_row(time.monotonic() - started, now, base), flush=True)
            added = producer_task.result()
            # Let the worker finish what was added (bounded), then stop it.
            deadline = time.monotonic() + args.long_seconds + 30
            while True:
                if await producer_queue.len() <= args.backlog or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            left = await producer_queue.len() - args.backlog
            runner.stop()
            await worker_task
            elapsed = time.monotonic() - started
            # The statistics are flushed by the backends at most about once a second.
            await asyncio.sleep(1.5)
            end = await sample(conn, schema)
            peak_dead = max(peak_dead, int(end["dead"]))
            print(_row(elapsed, end, base), flush=True)
            indexes_after = await index_sizes(conn, schema)
            stats = runner.stats()
        finally:
            if holder is not None:
                await holder.close()
            await producer_queue.aclose()
            await worker_queue.aclose()
        updates = end["upd"] - base["upd"]
        deletes = end["del"] - base["del"]
        summary: dict[str, Any] = {
            "jobs_added": added,
            "jobs_succeeded": stats.succeeded,
            "left_in_queue": left,
            "elapsed_s": round(elapsed, 1),
            "inserts": end["ins"] - base["ins"],
            "updates": updates,
            "hot_updates": end["hot_upd"] - base["hot_upd"],
            "deletes": deletes,
            "updates_per_job": round(updates / max(added, 1), 3),
            "dead_tuples_per_job": round((updates + deletes) / max(added, 1), 3),
            "hot_share": round((end["hot_upd"] - base["hot_upd"]) / max(updates, 1), 3),
            "peak_n_dead_tup": peak_dead,
            "autovacuum_runs": end["autovacuum_count"] - base["autovacuum_count"],
            "table_bytes_before": base["table_bytes"],
            "table_bytes_after": end["table_bytes"],
            "index_bytes_before": base["index_bytes"],
            "index_bytes_after": end["index_bytes"],
            "indexes_after": indexes_after,
            "indexes_before": indexes_before,
            "rate": args.rate,
            "seconds": args.seconds,
            "long_fraction": args.long_fraction,
            "lease_seconds": args.lease,
            "table_settings": args.table_settings,
            "backlog": args.backlog,
            "hold_snapshot": args.hold_snapshot,
            "server_settings": settings,
        }
        print(
            f"\n{added} jobs in {elapsed:.0f} s; per job: {summary['updates_per_job']} updates, "
            f"{summary['dead_tuples_per_job']} dead tuples; HOT updates "
            f"{summary['hot_share']:.0%}; peak n_dead_tup {peak_dead}; autovacuum ran "
            f"{summary['autovacuum_runs']} times; table {_mib(base['table_bytes'])} -> "
            f"{_mib(end['table_bytes'])} MiB, indexes {_mib(base['index_bytes'])} -> "
            f"{_mib(end['index_bytes'])} MiB ({indexes_after})"
        )
        return summary
    finally:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {s} CASCADE").format(s=ident))
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="postgresql://... (no query options)")
    parser.add_argument(
        "--private",
        action="store_true",
        help="start a throwaway server with stock settings instead of --url",
    )
    parser.add_argument(
        "--server-setting",
        action="append",
        default=[],
        help="name=value for the --private server (repeatable), e.g. autovacuum_naptime=10s",
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="jobs per second")
    parser.add_argument("--seconds", type=float, default=90.0, help="length of the load")
    parser.add_argument("--long-fraction", type=float, default=0.1)
    parser.add_argument("--long-seconds", type=float, default=1.5)
    parser.add_argument("--lease", type=float, default=2.0, help="lease_seconds")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--table-settings", default="", help="storage parameters of messages")
    parser.add_argument(
        "--backlog", type=int, default=0, help="rows due in a day, added before the load"
    )
    parser.add_argument(
        "--hold-snapshot",
        action="store_true",
        help="another session holds a transaction open through the load",
    )
    args = parser.parse_args()
    if bool(args.url) == args.private:
        parser.error("give exactly one of --url and --private")
    for setting in args.server_setting:
        if not args.private or not re.fullmatch(r"[a-z_]+=[0-9a-z.]+", setting):
            parser.error("--server-setting: name=value, with --private only")
    if args.url and "?" in args.url:
        parser.error("--url takes no query options (the bench adds its own schema)")
    # Spliced into ALTER TABLE as SQL: only name=number pairs get there.
    if args.table_settings and not re.fullmatch(
        r"[a-z_]+=[0-9.]+(,[a-z_]+=[0-9.]+)*", args.table_settings
    ):
        parser.error("--table-settings: name=number pairs separated by commas")
    if args.private:
        with private_server(args.server_setting) as url:
            args.url = url
            print(json.dumps(asyncio.run(run(args)), default=str))
        return
    print(json.dumps(asyncio.run(run(args)), default=str))


if __name__ == "__main__":
    main()
