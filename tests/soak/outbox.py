"""The outbox soak: relays SIGKILLed over and over, Redis killed and restarted from its AOF.

``python -m tests.soak.outbox`` (or ``nox -s soak-outbox``); ``--help`` lists the knobs.

1. Starts a private ``redis-server`` (``--appendonly yes --appendfsync always``) and
   uses the PostgreSQL at ``--postgres`` (default: a private throwaway server, as the
   tests start it), a fresh schema for the outbox.
2. Runs `relays` ``taskrunner relay`` processes, SIGKILLs a random one every 1-4 s and
   starts another in its place; SIGKILLs Redis every 6-12 s and restarts it after
   0.5-3 s.
3. Meanwhile dispatches `rows` messages, each with a distinct payload number, through
   the outbox in transactions of 1-20 dispatches; a tenth of the transactions roll back.
4. Stops the faults, waits until the outbox is empty, stops the relays, and reads every
   message of the stream.

Verdict (exit status 0 when it holds, 1 when not): every committed payload is in the
stream exactly once (0 lost, 0 duplicated) and no rolled-back payload is.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import redis.asyncio as aioredis

from taskrunner import App, Producer
from taskrunner.codec import decode_envelope
from taskrunner.errors import BackendUnavailableError
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_backends.postgres.local_server import LocalPostgres
from taskrunner_backends.postgres.outbox import OutboxWriter, create_outbox
from taskrunner_backends.redis import open_from_url
from tests.servers import RedisServer, find_server_binary, free_port
from tests.soak.driver import say

app = App("soak")

REPO = Path(__file__).resolve().parents[2]


@app.task
async def numbered(n: int) -> None:
    return None


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.outbox", description=__doc__)
    parser.add_argument("--rows", type=int, default=30_000, help="messages dispatched")
    parser.add_argument("--relays", type=int, default=3, help="relay processes at a time")
    parser.add_argument("--rate", type=float, default=500.0, help="dispatches per second")
    parser.add_argument("--postgres", default=None, help="libpq URL (default: private server)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--server", choices=("redis", "valkey", "auto"), default="auto")
    return parser.parse_args(argv)


class Relays:
    """The relay processes; each SIGKILLed and replaced at random."""

    def __init__(self, count: int, queue_url: str, outbox_url: str, directory: Path) -> None:
        self._count = count
        self._argv = [
            sys.executable, "-m", "taskrunner", "relay", app.queue,
            "--url", queue_url, "--outbox-url", outbox_url, "--log-level", "warning",
        ]  # fmt: skip
        self._directory = directory
        self._started = 0
        self.running: list[asyncio.subprocess.Process] = []
        self.kills = 0

    async def start_one(self) -> None:
        self._started += 1
        log = (self._directory / f"relay-{self._started}.log").open("wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKRUNNER_")}
        process = await asyncio.create_subprocess_exec(
            *self._argv, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        self.running.append(process)

    async def start(self) -> None:
        for _ in range(self._count):
            await self.start_one()

    async def kill_one(self, rng: random.Random) -> None:
        victim = self.running.pop(rng.randrange(len(self.running)))
        if victim.returncode is None:
            os.kill(victim.pid, signal.SIGKILL)
        await victim.wait()
        self.kills += 1
        await self.start_one()

    async def stop(self) -> None:
        for process in self.running:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in self.running:
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _produce(
    args: argparse.Namespace, rng: random.Random, outbox_url_libpq: str, schema: str
) -> tuple[set[int], set[int]]:
    """Dispatch the numbered rows; (committed, rolled back) payload numbers."""
    committed: set[int] = set()
    rolled_back: set[int] = set()
    # The producer's queue is never written to (every dispatch goes to the outbox).
    producer = Producer(InMemoryQueue(), app, outbox=OutboxWriter(app.queue, schema=schema))
    n = 0
    start = time.monotonic()
    async with await psycopg.AsyncConnection.connect(outbox_url_libpq) as conn:
        while n < args.rows:
            size = min(rng.randint(1, 20), args.rows - n)
            batch = list(range(n, n + size))
            n += size
            for number in batch:
                await producer.dispatch(numbered, number, connection=conn)
            if rng.random() < 0.1:
                await conn.rollback()
                rolled_back.update(batch)
            else:
                await conn.commit()
                committed.update(batch)
            ahead = n / args.rate - (time.monotonic() - start)
            if ahead > 0:
                await asyncio.sleep(ahead)
    return committed, rolled_back


async def _faults(
    stop: asyncio.Event, rng: random.Random, relays: Relays, server: RedisServer
) -> int:
    """Kill relays every 1-4 s and Redis every 6-12 s until `stop`; Redis kills."""
    redis_kills = 0
    next_redis = time.monotonic() + rng.uniform(6, 12)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), rng.uniform(1, 4))
            break
        except TimeoutError:
            pass
        await relays.kill_one(rng)
        if time.monotonic() >= next_redis:
            await asyncio.to_thread(server.stop, kill=True)
            redis_kills += 1
            await asyncio.sleep(rng.uniform(0.5, 3))
            await asyncio.to_thread(server.start)
            next_redis = time.monotonic() + rng.uniform(6, 12)
    return redis_kills


def _outbox_count(libpq: str, schema: str) -> int:
    with psycopg.connect(libpq, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".outbox').fetchone()
        return int(row[0]) if row else -1


async def _stream_payloads(queue_url: str) -> Counter[int]:
    queue = await open_from_url(queue_url, queue_name=app.queue)
    seen: Counter[int] = Counter()
    client: Any = aioredis.Redis.from_url(queue_url.split("?", 1)[0])
    try:
        last = "-"
        while True:
            entries = await client.xrange(queue.keys.stream, min=last, count=5000)
            if last != "-":
                entries = entries[1:]
            if not entries:
                break
            for entry_id, fields in entries:
                seen[int(bytes(decode_envelope(fields[b"b"]).payload))] += 1
                last = entry_id
    finally:
        await client.aclose()
        await queue.aclose()
    return seen


async def soak(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    directory = Path(tempfile.mkdtemp(prefix="taskrunner-outbox-soak-"))
    server = RedisServer(
        find_server_binary(args.server),
        port=free_port(), appendonly=True, appendfsync="always", directory=directory / "redis",
    )  # fmt: skip
    (directory / "redis").mkdir()
    postgres: LocalPostgres | None = None
    libpq = args.postgres
    if libpq is None:
        postgres = LocalPostgres()
        await asyncio.to_thread(postgres.start)
        libpq = postgres.url()
    schema = f"tr_outbox_soak_{uuid.uuid4().hex[:8]}"
    namespace = f"soak-{uuid.uuid4().hex[:8]}"
    began = time.monotonic()
    try:
        await asyncio.to_thread(server.start)
        with psycopg.connect(libpq, autocommit=True) as conn:
            create_outbox(conn, schema)
        queue_url = f"{server.url}?namespace={namespace}"
        relays = Relays(args.relays, queue_url, f"{libpq}?schema={schema}", directory)
        await relays.start()
        say(
            f"outbox soak: {args.rows} rows at {args.rate:g}/s, {args.relays} relays, "
            f"redis on port {server.port}, run dir {directory}"
        )
        stop = asyncio.Event()
        faults = asyncio.create_task(_faults(stop, rng, relays, server))
        committed, rolled_back = await _produce(args, rng, libpq, schema)
        stop.set()
        redis_kills = await faults
        deadline = time.monotonic() + 120
        while (left := await asyncio.to_thread(_outbox_count, libpq, schema)) > 0:
            if time.monotonic() > deadline:
                say(f"outbox soak: {left} rows still in the outbox after 120 s")
                return 1
            await asyncio.sleep(0.2)
        await relays.stop()
        seen = await _stream_payloads(queue_url)
    except BackendUnavailableError as exc:
        say(f"outbox soak: could not be judged: {exc}")
        return 3
    finally:
        await asyncio.to_thread(server.cleanup)
        if postgres is not None:
            await asyncio.to_thread(postgres.cleanup)
        else:
            with psycopg.connect(libpq, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    lost = committed - set(seen)
    duplicated = {n for n, count in seen.items() if count > 1}
    ghosts = rolled_back & set(seen)
    say(
        f"outbox soak: {len(committed)} committed, {len(rolled_back)} rolled back; "
        f"{relays.kills} relay SIGKILLs, {redis_kills} Redis SIGKILLs; "
        f"{time.monotonic() - began:.0f} s"
    )
    say(
        f"verdict: lost {len(lost)}, duplicated {len(duplicated)}, "
        f"rolled back but delivered {len(ghosts)}"
    )
    if lost or duplicated or ghosts:
        say(f"run directory kept: {directory}")
        return 1
    shutil.rmtree(directory, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(soak(_arguments(argv)))


if __name__ == "__main__":
    sys.exit(main())
