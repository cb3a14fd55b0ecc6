"""The transactional outbox: relay throughput and commit-to-stream latency.

Run: ``python bench/outbox.py`` (``nox -s bench-outbox``). Options: ``--redis`` (default
``TASKRUNNER_BENCH_REDIS_URL`` or redis://127.0.0.1:6379/0), ``--postgres`` (default
``TASKRUNNER_BENCH_POSTGRES_URL`` or postgresql://postgres@127.0.0.1:5432/test),
``-n`` rows for the throughput run (default 50000), ``--latency-count`` (default 500)
and ``--rate`` (default 200 commits/s), ``--runs`` (default 3).

* ``relay``: N committed rows are waiting; one `OutboxRelay` moves them (batches of
  500: SELECT ... FOR UPDATE SKIP LOCKED, one add script round trip, DELETE, COMMIT).
  Timed from its start to the last row moved: rows/s.
* ``baseline``: the same N bodies XADDed by raw redis-py in pipelines of 500, the
  floor of what moving them into the stream costs; ``ratio`` = relay rows/s /
  baseline rows/s (the relay also reads and deletes every row in PostgreSQL).
* ``latency``: a running relay (LISTEN/NOTIFY); one dispatch per transaction at a fixed
  rate; per message, from the return of COMMIT to the moment a blocking XREAD sees it
  in the stream: median, p99 and max in milliseconds.

A fresh Redis namespace and PostgreSQL schema per run, deleted afterwards; nothing
else on either server is touched. The last line is one JSON object with the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from typing import Any

import psycopg
import redis.asyncio as aioredis
from psycopg import sql

from taskrunner import App, Producer
from taskrunner.codec import decode_envelope
from taskrunner_backends.postgres.outbox import OutboxRelay, OutboxWriter, create_outbox
from taskrunner_backends.redis import RedisStreamsQueue

app = App("bench")


@app.task
async def job(n: int) -> None:
    return None


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--redis",
        default=os.environ.get("TASKRUNNER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "TASKRUNNER_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("-n", type=int, default=50_000)
    parser.add_argument("--latency-count", type=int, default=500)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--runs", type=int, default=3)
    return parser.parse_args()


async def _delete_namespace(client: aioredis.Redis, namespace: str) -> None:
    async for key in client.scan_iter(match=f"{namespace}*", count=1000):
        await client.delete(key)


def _drop(pg: str, schema: str) -> None:
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _one_run(args: argparse.Namespace) -> dict[str, float]:
    tag = uuid.uuid4().hex[:10]
    namespace, schema = f"trbench-{tag}", f"trbench_{tag}"
    client = aioredis.Redis.from_url(args.redis)
    queue = RedisStreamsQueue(client, queue_name=app.queue, namespace=namespace)
    with psycopg.connect(args.postgres, autocommit=True) as conn:
        create_outbox(conn, schema)
    producer = Producer(queue, app, outbox=OutboxWriter(app.queue, schema=schema))
    try:
        bodies = [producer.encode(job, n) for n in range(args.n)]
        # Baseline: raw XADD pipelines of the same bodies, into a stream of its own.
        raw_key = f"{namespace}:raw"
        start = time.perf_counter()
        for first in range(0, len(bodies), 500):
            pipe = client.pipeline(transaction=False)
            for body in bodies[first : first + 500]:
                pipe.xadd(raw_key, {"b": body})
            await pipe.execute()
        baseline = args.n / (time.perf_counter() - start)

        with psycopg.connect(args.postgres) as conn:
            await producer.dispatch_many(job, list(range(args.n)), connection=conn)
            conn.commit()
        relay = OutboxRelay(args.postgres, queue, app.queue, schema=schema)
        async with await psycopg.AsyncConnection.connect(args.postgres, autocommit=True) as conn:
            start = time.perf_counter()
            while await relay.relay_once(conn):
                pass
            seconds = time.perf_counter() - start
        assert relay.relayed == args.n, (relay.relayed, args.n)
        assert (await queue.stats()).ready == args.n
        await _delete_namespace(client, namespace)
        latencies = await _latency(args, queue, producer, client, schema)
    finally:
        await queue.aclose()
        await _delete_namespace(client, namespace)
        await client.aclose()
        _drop(args.postgres, schema)
    latencies.sort()
    return {
        "relay_rows_per_second": args.n / seconds,
        "baseline_rows_per_second": baseline,
        "ratio": (args.n / seconds) / baseline,
        "latency_median_ms": statistics.median(latencies) * 1000,
        "latency_p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
        "latency_max_ms": latencies[-1] * 1000,
    }


async def _latency(
    args: argparse.Namespace,
    queue: RedisStreamsQueue,
    producer: Producer,
    client: aioredis.Redis,
    schema: str,
) -> list[float]:
    relay = OutboxRelay(args.postgres, queue, app.queue, schema=schema)
    ready = asyncio.Event()
    relaying = asyncio.create_task(relay.run(ready))
    committed: dict[int, float] = {}
    seen: dict[int, float] = {}
    stream = queue.keys.stream
    reader = aioredis.Redis.from_url(args.redis)

    async def read() -> None:
        last = "$"
        while len(seen) < args.latency_count:
            reply: Any = await reader.xread({stream: last}, block=1000, count=100)
            now = time.perf_counter()
            for _, entries in reply:
                for entry_id, fields in entries:
                    last = entry_id
                    envelope = decode_envelope(fields[b"b"])
                    seen[int(bytes(envelope.payload))] = now

    try:
        await asyncio.wait_for(ready.wait(), 10)
        await queue.stats()  # the stream and group exist before the reader's "$"
        reading = asyncio.create_task(read())
        await asyncio.sleep(0.1)
        interval = 1.0 / args.rate
        async with await psycopg.AsyncConnection.connect(args.postgres) as conn:
            next_at = time.perf_counter()
            for n in range(args.latency_count):
                await producer.dispatch(job, n, connection=conn)
                await conn.commit()
                committed[n] = time.perf_counter()
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        await asyncio.wait_for(reading, 30)
    finally:
        relaying.cancel()
        await asyncio.gather(relaying, return_exceptions=True)
        await reader.aclose()
    return [seen[n] - committed[n] for n in range(args.latency_count)]


async def main() -> None:
    args = _arguments()
    results = []
    for run in range(args.runs):
        result = await _one_run(args)
        results.append(result)
        print(
            f"run {run + 1}: relay {result['relay_rows_per_second']:,.0f} rows/s, "
            f"raw XADD {result['baseline_rows_per_second']:,.0f}/s, ratio {result['ratio']:.2f}; "
            f"commit-to-stream median {result['latency_median_ms']:.1f} ms, "
            f"p99 {result['latency_p99_ms']:.1f} ms, max {result['latency_max_ms']:.1f} ms"
        )
    medians: dict[str, Any] = {
        key: round(statistics.median(r[key] for r in results), 3) for key in results[0]
    }
    medians.update(rows=args.n, latency_count=args.latency_count, rate=args.rate)
    print(json.dumps(medians))


if __name__ == "__main__":
    asyncio.run(main())
