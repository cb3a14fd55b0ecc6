"""Cost of `SyncProducer.dispatch` on Redis, next to raw redis-py ``XADD`` in the same run.

Run: ``python bench/dispatch.py`` (or ``nox -s bench-dispatch``). Options: ``--url``
(default ``TASKRUNNER_BENCH_REDIS_URL``, else a private server is spawned on a free
loopback port, as bench/throughput.py does; ``--server`` chooses its binary), ``-n``
dispatches per measurement (default 5000), ``--threads`` (default 8), ``--runs``
(default 5).

Every run measures, interleaved, on the same server and with the same body (the
envelope of a no-op task):

The figures of one thread alternate in chunks of 100 calls, those of T threads in
rounds of N/5 calls, so a shared machine's changing load falls on all of them alike.

* ``raw_1``: one thread, a sync ``redis.Redis`` calling ``xadd`` N times (one round
  trip each). Microseconds per call.
* ``sync_1``: one thread, `SyncProducer.dispatch` N times (validation, envelope,
  one XADD from the calling thread). Microseconds per call.
* ``loop_1``: the same through the SyncProducer's loop thread (``delay=0``, which
  takes the loop path but adds a plain entry): what every other call costs.
* ``raw_8`` / ``sync_8``: T threads (default 8) released together by a barrier, each
  making N/T calls, sharing one ``redis.Redis`` (its pool) or one SyncProducer.
  Calls per second, from the release to the last thread's end.

``ratio_1`` = sync_1 / raw_1 (goal: <= 1.5); ``ratio_8`` = sync_8 / raw_8 (goal: >= 0.8);
``ratio_loop_1`` = loop_1 / raw_1 (for information). Ratios are computed per run; the
report gives the median of the runs. The last line is one JSON object.

A given server is never flushed: everything lives under a fresh namespace whose keys
are deleted (SCAN MATCH + UNLINK) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import delete_namespace, private_server, server_name

from taskrunner import App, SyncProducer
from taskrunner.producer import encode_message

app = App("bench-dispatch")


@app.task
async def noop() -> None:
    """Does nothing: the bench measures dispatch only."""


def per_call_us(
    calls: dict[str, Callable[[], object]], n: int, chunk: int = 100
) -> dict[str, float]:
    """Microseconds per call of each, measured in alternating chunks of `chunk` calls.

    Alternating keeps a shared machine's changing load out of the ratios: each figure
    gets its share of every slow and fast moment.
    """
    spent = dict.fromkeys(calls, 0.0)
    for _ in range(max(1, n // chunk)):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(chunk):
                call()
            spent[name] += time.perf_counter() - start
    return {name: seconds / (max(1, n // chunk) * chunk) * 1e6 for name, seconds in spent.items()}


def threaded_rates(
    calls: dict[str, Callable[[], object]], n: int, threads: int, rounds: int = 5
) -> dict[str, float]:
    """Calls per second of each with `threads` threads, in alternating rounds."""
    done = dict.fromkeys(calls, 0)
    spent = dict.fromkeys(calls, 0.0)
    for _ in range(rounds):
        for name, call in calls.items():
            count, seconds = threaded_run(call, n // rounds, threads)
            done[name] += count
            spent[name] += seconds
    return {name: done[name] / spent[name] for name in calls}


def threaded_run(call: Callable[[], object], n: int, threads: int) -> tuple[int, float]:
    each = max(1, n // threads)
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def work() -> None:
        barrier.wait()
        try:
            for _ in range(each):
                call()
        except BaseException as exc:  # reported below, so a failure is not a fast run
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return each * threads, elapsed


def one_run(url: str, namespace: str, n: int, threads: int) -> dict[str, float]:
    body = encode_message(app, noop, None)
    raw_stream = f"{namespace}:raw"
    client = redis.Redis.from_url(url)
    producer = SyncProducer(f"{url}?namespace={namespace}", app)
    try:
        producer.dispatch(noop)  # opens the connection: not timed
        client.xadd(raw_stream, {"b": body})
        figures = per_call_us(
            {
                "raw_1": lambda: client.xadd(raw_stream, {"b": body}),
                "sync_1": lambda: producer.dispatch(noop),
                "loop_1": lambda: producer.dispatch(noop, delay=0),
            },
            n,
        )
        rates = threaded_rates(
            {
                "raw_8": lambda: client.xadd(raw_stream, {"b": body}),
                "sync_8": lambda: producer.dispatch(noop),
            },
            n,
            threads,
        )
        figures.update(rates)
    finally:
        producer.close()
        client.close()
    figures["ratio_1"] = figures["sync_1"] / figures["raw_1"]
    figures["ratio_loop_1"] = figures["loop_1"] / figures["raw_1"]
    figures["ratio_8"] = figures["sync_8"] / figures["raw_8"]
    return figures


KEYS = ("raw_1", "sync_1", "loop_1", "raw_8", "sync_8", "ratio_1", "ratio_loop_1", "ratio_8")


def bench(url: str, n: int, threads: int, runs: int) -> dict[str, object]:
    namespace = f"taskrunner-bench-{uuid.uuid4().hex[:12]}"
    results: list[dict[str, float]] = []
    try:
        for run in range(runs):
            figures = one_run(url, namespace, n, threads)
            results.append(figures)
            print(
                f"run {run + 1}: raw_1 {figures['raw_1']:.0f} us, sync_1 {figures['sync_1']:.0f} "
                f"us (x{figures['ratio_1']:.2f}), loop_1 {figures['loop_1']:.0f} us "
                f"(x{figures['ratio_loop_1']:.2f}); {threads} threads: raw {figures['raw_8']:.0f}"
                f"/s, sync {figures['sync_8']:.0f}/s (x{figures['ratio_8']:.2f})",
                flush=True,
            )
    finally:
        asyncio.run(_cleanup(url, namespace))
    report: dict[str, object] = {
        key: round(statistics.median(r[key] for r in results), 3) for key in KEYS
    }
    report.update(n=n, threads=threads, runs=runs, server=asyncio.run(server_name(url)))
    return report


async def _cleanup(url: str, namespace: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        await delete_namespace(client, namespace)
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TASKRUNNER_BENCH_REDIS_URL"))
    parser.add_argument("--server", choices=("auto", "redis", "valkey"), default="auto")
    parser.add_argument("-n", type=int, default=5000, help="dispatches per measurement")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.url:
        report = bench(args.url, args.n, args.threads, args.runs)
    else:
        with private_server(args.server) as url:
            report = bench(url, args.n, args.threads, args.runs)
    print(
        f"median: ratio_1 {report['ratio_1']} (goal <= 1.5), ratio_8 {report['ratio_8']} "
        f"(goal >= 0.8), ratio_loop_1 {report['ratio_loop_1']}"
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
