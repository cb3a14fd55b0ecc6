"""Integration: worker *processes* (tests/redis/proc_worker.py) on a real server.

Each worker runs `tests.redis.proc_app`; tasks report starts, ends and runs through
Redis keys in the test's namespace, and the tests wait for those reports with bounded
polling. Workers are stopped by pid (SIGTERM, or SIGKILL where the test kills one).
Leases are short (1.5 s) so takeovers happen within seconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from taskrunner import Producer
from taskrunner.queue import DeadLetter
from taskrunner_backends.redis import RedisStreamsQueue
from taskrunner_backends.redis.testing import inject_raw, remove_payload

from .helpers import eventually, open_queue
from .proc_app import Hold, app, hold, key, quick

pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]

# Starting a worker means a fresh interpreter and imports: slow on a loaded machine.
START_SECONDS = 30.0
STOP_SECONDS = 20.0


class Worker:
    """One worker process."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log
        self.stats: dict[str, Any] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        if self.process.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    async def stop(self) -> dict[str, Any]:
        """SIGTERM, wait for the graceful exit, return the runner's final stats."""
        if self.process.returncode is None:
            os.kill(self.pid, signal.SIGTERM)
        assert self.process.stdout is not None
        try:
            out = await asyncio.wait_for(self.process.stdout.read(), STOP_SECONDS)
            await asyncio.wait_for(self.process.wait(), STOP_SECONDS)
        except TimeoutError:
            self.kill()
            await self.process.wait()
            raise AssertionError(f"worker {self.pid} did not stop; log:\n{self._tail()}") from None
        assert self.process.returncode == 0, f"worker {self.pid} failed; log:\n{self._tail()}"
        self.stats = msgspec.json.decode(out.strip().splitlines()[-1])
        return self.stats

    def _tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@asynccontextmanager
async def workers_on(
    redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """A factory of worker processes; any still running at the end are killed."""
    started: list[Worker] = []

    async def start(*, workers: int = 4, lease: float = 1.5) -> Worker:
        log = tmp_path / f"worker-{len(started)}.log"
        with log.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.redis.proc_worker",
                "--url",
                redis_url,
                "--namespace",
                namespace,
                "--workers",
                str(workers),
                "--lease",
                str(lease),
                cwd=REPO,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
            )
        worker = Worker(process, log)
        started.append(worker)
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), START_SECONDS)
        except TimeoutError:
            line = b""
        assert line == b"ready\n", f"worker did not start; log:\n{worker._tail()}"
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()
            await worker.process.wait()


async def _events(client: aioredis.Redis, namespace: str, name: str) -> list[list[str]]:
    raw = await client.lrange(key(namespace, name), 0, -1)
    return [_text(entry).split() for entry in raw]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def _runs(client: aioredis.Redis, namespace: str) -> dict[int, int]:
    raw = await client.hgetall(key(namespace, "runs"))
    return {int(_text(n)): int(_text(count)) for n, count in raw.items()}


@asynccontextmanager
async def observing(redis_url: str, namespace: str) -> AsyncIterator[tuple[Any, Any]]:
    client = aioredis.Redis.from_url(redis_url)
    queue = open_queue(redis_url, namespace)
    try:
        yield client, queue
    finally:
        await queue.aclose()
        await client.aclose()


async def test_a_task_of_a_killed_worker_is_completed_by_the_other_after_the_lease(
    redis_url: str, redis_namespace: str, tmp_path: Path
) -> None:
    ns = redis_namespace
    async with (
        observing(redis_url, ns) as (client, queue),
        workers_on(redis_url, ns, tmp_path) as start,
    ):
        producer = Producer(queue, app)
        # One worker slot: while the victim task runs, this process holds nothing else.
        doomed = await start(workers=1)
        await producer.dispatch(hold, Hold(name="victim", seconds=0, hang_first=True))
        await eventually(
            lambda: _events(client, ns, "started"),
            lambda events: len(events) == 1,
            what="the victim task started",
        )
        survivor = await start(workers=4)
        await producer.dispatch_many(quick, range(100))

        doomed.kill()  # SIGKILL in the middle of the victim task

        finished = await eventually(
            lambda: _events(client, ns, "finished"),
            lambda events: len(events) == 1,
            what="the survivor finishes the victim task after its lease",
        )
        runs = await eventually(
            lambda: _runs(client, ns), lambda runs: len(runs) == 100, what="every quick task ran"
        )
        await eventually(queue.len, lambda n: n == 0, what="the queue is empty")
        stats = await survivor.stop()

    started = await _events_after(redis_url, ns, "started")
    assert [(e[0], int(e[1]), e[2]) for e in started] == [
        ("victim", doomed.pid, "1"),
        ("victim", survivor.pid, "2"),
    ]
    assert [(e[0], int(e[1]), e[2]) for e in finished] == [("victim", survivor.pid, "2")]
    assert runs == dict.fromkeys(range(100), 1)
    assert stats["reclaimed"] >= 1
    assert stats["succeeded"] == 101
    assert stats["lease_lost"] == 0
    assert (await _dead_letters(redis_url, ns)) == []


async def test_a_heartbeating_task_of_five_leases_runs_once_among_three_workers(
    redis_url: str, redis_namespace: str, tmp_path: Path
) -> None:
    ns = redis_namespace
    lease = 1.5
    async with (
        observing(redis_url, ns) as (client, queue),
        workers_on(redis_url, ns, tmp_path) as start,
    ):
        workers = [await start(workers=2, lease=lease) for _ in range(3)]
        producer = Producer(queue, app)
        await producer.dispatch(hold, Hold(name="long", seconds=5 * lease))
        await producer.dispatch_many(quick, range(30))

        finished = await eventually(
            lambda: _events(client, ns, "finished"),
            lambda events: len(events) == 1,
            what="the long task finished",
        )
        await eventually(queue.len, lambda n: n == 0, what="the queue is empty")
        runs = await _runs(client, ns)
        started = await _events(client, ns, "started")
        stats = [await worker.stop() for worker in workers]

    assert len(started) == 1
    assert started == finished
    assert started[0][2] == "1"  # first delivery, never reclaimed
    assert runs == dict.fromkeys(range(30), 1)
    assert sum(s["succeeded"] for s in stats) == 31
    assert sum(s["reclaimed"] for s in stats) == 0
    assert sum(s["lease_lost"] for s in stats) == 0


async def test_removed_payload_and_foreign_entries_are_dead_lettered_while_the_rest_flows(
    redis_url: str, redis_namespace: str, tmp_path: Path
) -> None:
    ns = redis_namespace
    async with (
        observing(redis_url, ns) as (client, queue),
        workers_on(redis_url, ns, tmp_path) as start,
    ):
        worker = await start(workers=4, lease=1.5)
        producer = Producer(queue, app)
        await producer.dispatch(hold, Hold(name="doomed"))
        [started] = await eventually(
            lambda: _events(client, ns, "started"),
            lambda events: len(events) == 1,
            what="the doomed task started",
        )

        assert await remove_payload(queue, started[3])  # as trimming or a stray XDEL would
        await inject_raw(queue, {"x": "y"})
        await inject_raw(queue, {"b": b"not an envelope"})
        await producer.dispatch_many(quick, range(50))

        letters = await eventually(
            lambda: _dead_letters(redis_url, ns),
            lambda letters: len(letters) == 3,
            what="three dead letters",
        )
        runs = await eventually(
            lambda: _runs(client, ns), lambda runs: len(runs) == 50, what="every quick task ran"
        )
        await client.set(key(ns, "go:doomed"), 1)
        await eventually(
            lambda: _events(client, ns, "finished"),
            lambda events: len(events) == 1,
            what="the doomed task returned",
        )
        await eventually(queue.len, lambda n: n == 0, what="the queue is empty")
        stats = await worker.stop()

    reasons = sorted(letter.reason for letter in letters)
    assert reasons[0].startswith("malformed message")
    assert reasons[1] == "not a taskrunner message: no body field 'b' (fields: 'x')"
    assert reasons[2] == "payload removed from the stream while pending"
    gone = next(letter for letter in letters if letter.reason.startswith("payload removed"))
    assert gone.original_id == started[3]
    assert runs == dict.fromkeys(range(50), 1)
    # The heartbeat found the payload gone: the doomed task's result was not acked.
    assert stats["lease_lost"] == 1
    assert stats["dead_lettered"] == 1  # the undecodable body; the backend buried the rest


async def _events_after(redis_url: str, namespace: str, name: str) -> list[list[str]]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await _events(client, namespace, name)
    finally:
        await client.aclose()


async def _dead_letters(redis_url: str, namespace: str) -> list[DeadLetter]:
    queue: RedisStreamsQueue = open_queue(redis_url, namespace)
    try:
        return await queue.list_dead_letters()
    finally:
        await queue.aclose()
