"""Scheduling on Redis: a burst of delayed messages due at once, and unique-key dispatch cost.

Run: ``python bench/scheduling.py``. Options: ``--url`` (default
``TASKRUNNER_BENCH_REDIS_URL``, else a private server is spawned as by
``bench/throughput.py``, ``--server`` chooses), ``--delayed`` messages in the burst
(default 100000), ``-n`` requests per dispatch measurement (default 20000),
``--receivers`` concurrent receive loops (default 4), ``--runs`` (default 3).

Every run measures, one after the other, on the same server and namespace scheme:

* ``plain_drain``: the baseline. N plain messages are added first; then the receivers
  (each a loop of ``receive(max_messages=100)`` and ``ack``) drain them. Timed: from
  the receivers' start to the last delivery (server clock).
* ``delayed_drain``: N messages added with ``add_requests`` and one ``due_at`` for all,
  far enough ahead for the adds to finish; the receivers are started (blocking) before
  it. Timed on the server's clock: from the due instant to the moment the last
  message was delivered (``due_to_last_seconds``), and to the first
  (``due_to_first_seconds``). ``ratio_delayed`` = plain drain seconds / delayed
  drain seconds (1.0: promoting the parked messages costs nothing extra).
* ``dispatch_plain`` and ``dispatch_unique``: ``add_requests`` of N requests in
  batches of 100 (as ``Producer.dispatch_many`` chunks), without and with a distinct
  ``unique_key`` each; ``dispatch_add`` is ``Queue.add`` of the same bodies, for
  reference. ``ratio_unique`` = dispatch_unique / dispatch_plain.

The report gives the median of the runs for every figure; the last line of output is
one JSON object with them. A given server is never flushed: each run lives under a
fresh namespace whose keys are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import delete_namespace, private_server, server_name

from taskrunner.queue import AddRequest
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url

QUEUE_NAME = "bench-scheduling"
BODY = b"x" * 200  # about a taskrunner envelope of a small task
BATCH = 100


async def server_seconds(queue: RedisStreamsQueue) -> float:
    seconds, micros = await queue._raw.call("time", "TIME")
    return int(seconds) + int(micros) / 1e6


async def drain(queue: RedisStreamsQueue, n: int, receivers: int) -> tuple[float, float]:
    """Run `receivers` receive+ack loops until `n` messages were acked.

    Returns the server time of the first and of the last delivery.
    """
    done = 0
    first: float | None = None
    last = 0.0

    async def loop(index: int) -> None:
        nonlocal done, first, last
        while done < n:
            got = await queue.receive(
                f"r{index}", max_messages=BATCH, wait_seconds=0.5, lease_seconds=60
            )
            if not got:
                continue
            stamp = await server_seconds(queue)
            first = stamp if first is None else min(first, stamp)
            last = max(last, stamp)
            done += len(got)
            await queue.ack(got)

    await asyncio.gather(*(loop(i) for i in range(receivers)))
    assert first is not None
    return first, last


async def plain_drain(queue: RedisStreamsQueue, n: int, receivers: int) -> float:
    for start in range(0, n, 10_000):
        await queue.add([BODY] * min(10_000, n - start))
    started = await server_seconds(queue)
    _, last = await drain(queue, n, receivers)
    # To the last delivery, not to the end of the loops (idle receives wind down after).
    return last - started


async def delayed_drain(
    queue: RedisStreamsQueue, n: int, receivers: int
) -> tuple[float, float, float]:
    """(due to first, due to last delivery, seconds the adds took), server clock."""
    # Enough time for the adds (measured at ~100k/s and up), plus a margin.
    lead = 2.0 + n / 20_000
    due = await server_seconds(queue) + lead
    started = time.perf_counter()
    for start in range(0, n, 10_000):
        count = min(10_000, n - start)
        await queue.add_requests([AddRequest(body=BODY, due_at=due)] * count)
    adding = time.perf_counter() - started
    if await server_seconds(queue) >= due:
        raise SystemExit(f"adding {n} delayed messages took {adding:.1f} s, past the due time")
    stats = await queue.stats()
    assert stats.delayed == n, stats
    first, last = await drain(queue, n, receivers)
    return first - due, last - due, adding


async def dispatch(queue: RedisStreamsQueue, n: int, *, unique: bool) -> float:
    tag = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    for start in range(0, n, BATCH):
        requests = [
            AddRequest(body=BODY, unique_key=f"{tag}-{i}" if unique else None)
            for i in range(start, min(start + BATCH, n))
        ]
        added = await queue.add_requests(requests)
        assert all(a.added for a in added)
    return n / (time.perf_counter() - started)


async def dispatch_add(queue: RedisStreamsQueue, n: int) -> float:
    started = time.perf_counter()
    for start in range(0, n, BATCH):
        await queue.add([BODY] * min(BATCH, n - start))
    return n / (time.perf_counter() - started)


async def one_run(url: str, delayed: int, n: int, receivers: int) -> dict[str, float]:
    namespace = f"taskrunner-bench-{uuid.uuid4().hex[:12]}"
    client = aioredis.Redis.from_url(url)
    queue = await open_from_url(f"{url}?namespace={namespace}", queue_name=QUEUE_NAME)
    try:
        result: dict[str, float] = {}
        result["plain_drain_seconds"] = await plain_drain(queue, delayed, receivers)
        first, last, adding = await delayed_drain(queue, delayed, receivers)
        result["due_to_first_seconds"] = first
        result["due_to_last_seconds"] = last
        result["delayed_add_per_second"] = delayed / adding
        result["ratio_delayed"] = result["plain_drain_seconds"] / max(last, 1e-9)
        await queue.purge()
        result["dispatch_add"] = await dispatch_add(queue, n)
        await queue.purge()
        result["dispatch_plain"] = await dispatch(queue, n, unique=False)
        await queue.purge()
        result["dispatch_unique"] = await dispatch(queue, n, unique=True)
        result["ratio_unique"] = result["dispatch_unique"] / result["dispatch_plain"]
        await queue.purge()
        return result
    finally:
        await queue.aclose()
        await delete_namespace(client, namespace)
        await client.aclose()


async def bench(url: str, delayed: int, n: int, receivers: int, runs: int) -> dict[str, Any]:
    server = await server_name(url)
    print(
        f"server: {server}; delayed burst {delayed}; dispatch n = {n}; "
        f"receivers {receivers}; runs {runs}",
        flush=True,
    )
    results = []
    for index in range(runs):
        result = await one_run(url, delayed, n, receivers)
        results.append(result)
        print(
            f"run {index + 1}: "
            + ", ".join(
                f"{k} {v:,.3f}" if "seconds" in k or k.startswith("ratio") else f"{k} {v:,.0f}/s"
                for k, v in result.items()
            ),
            flush=True,
        )
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(f"median of {runs} run(s):")
    for key, value in median.items():
        unit = "" if key.startswith("ratio") else (" s" if "seconds" in key else " msg/s")
        print(f"  {key:<24} {value:>12,.3f}{unit}")
    report: dict[str, Any] = {k: round(v, 3) for k, v in median.items()}
    report.update(delayed=delayed, n=n, receivers=receivers, runs=runs, server=server)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TASKRUNNER_BENCH_REDIS_URL"))
    parser.add_argument("--server", choices=("auto", "redis", "valkey"), default="auto")
    parser.add_argument("--delayed", type=int, default=100_000, help="messages in the burst")
    parser.add_argument("-n", type=int, default=20_000, help="requests per dispatch figure")
    parser.add_argument("--receivers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.url:
        report = asyncio.run(bench(args.url, args.delayed, args.n, args.receivers, args.runs))
    else:
        with private_server(args.server) as url:
            report = asyncio.run(bench(url, args.delayed, args.n, args.receivers, args.runs))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
