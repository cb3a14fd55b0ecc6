"""Acceptance test of issue 13 item 4: ``taskrunner worker --processes 2`` on a real server.

The supervisor and its children are real processes (``python -m taskrunner worker
tests.redis.supervisor_app:app --processes 2``); every task records its run and its
pid in Redis (tests/redis/supervisor_app.py), and the tests wait for those records
with bounded polling. Child pids are read from the supervisor's log.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from taskrunner import Producer

from .helpers import eventually, open_queue
from .supervisor_app import app, count, key

pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]
TASKS = 200
# A fresh interpreter per process and imports: slow on a loaded machine.
EXIT_SECONDS = 20.0

_STARTED = re.compile(r"worker process (\d+) started: pid (\d+)")


class Supervised:
    """One ``taskrunner worker --processes`` command, its log in a file."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def children(self) -> list[tuple[int, int]]:
        """(slot, pid) of every child started so far, in order."""
        return [(int(m[1]), int(m[2])) for m in _STARTED.finditer(self.text())]

    async def exit_code(self) -> int:
        try:
            return await asyncio.wait_for(self.process.wait(), EXIT_SECONDS)
        except TimeoutError:
            raise AssertionError(
                f"supervisor {self.pid} still running after {EXIT_SECONDS}s; log:\n{self.text()}"
            ) from None

    def kill_all(self) -> None:
        for pid in [self.pid, *(pid for _, pid in self.children())]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue


@asynccontextmanager
async def supervisors(
    redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Supervised]]]:
    """A factory of supervisor commands; whatever still runs at the end is killed by pid."""
    started: list[Supervised] = []
    separator = "&" if "?" in redis_url else "?"
    url = f"{redis_url}{separator}namespace={namespace}"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TASKRUNNER_") or k.startswith("TASKRUNNER_TEST_")
    }
    env |= {"SUPERVISOR_TEST_REDIS_URL": redis_url, "SUPERVISOR_TEST_NAMESPACE": namespace}

    async def start(*extra: str) -> Supervised:
        log = tmp_path / f"supervisor-{len(started)}.log"
        with log.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "taskrunner",
                "worker",
                "tests.redis.supervisor_app:app",
                "--url",
                url,
                "--processes",
                "2",
                "--lease-seconds",
                "2",
                *extra,
                cwd=REPO,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
            )
        supervised = Supervised(process, log)
        started.append(supervised)
        return supervised

    try:
        yield start
    finally:
        for supervised in started:
            supervised.kill_all()
            await supervised.process.wait()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def _hash(client: aioredis.Redis, namespace: str, name: str) -> dict[int, int]:
    raw = await client.hgetall(key(namespace, name))
    return {int(_text(k)): int(_text(v)) for k, v in raw.items()}


@asynccontextmanager
async def observing(redis_url: str, namespace: str) -> AsyncIterator[tuple[Any, Any]]:
    client = aioredis.Redis.from_url(redis_url)
    queue = open_queue(redis_url, namespace, queue_name=app.queue)
    try:
        yield client, queue
    finally:
        await queue.aclose()
        await client.aclose()


async def test_sigterm_drains_both_processes_and_every_task_runs_exactly_once(
    redis_url: str, redis_namespace: str, tmp_path: Path
) -> None:
    ns = redis_namespace
    async with (
        observing(redis_url, ns) as (client, queue),
        supervisors(redis_url, ns, tmp_path) as start,
    ):
        await Producer(queue, app).dispatch_many(count, range(TASKS))
        first = await start("--num-workers", "2")
        await eventually(
            lambda: _hash(client, ns, "pids"),
            lambda pids: len(pids) == 2 and sum(pids.values()) >= 20,
            what="both children ran tasks",
        )

        os.kill(first.pid, signal.SIGTERM)

        assert await first.exit_code() == 0, first.text()
        runs_before = await _hash(client, ns, "runs")
        pids_before = await _hash(client, ns, "pids")
        stats = await queue.stats()
        second = await start("--num-workers", "4", "--burst")
        assert await second.exit_code() == 0, second.text()  # --burst: exits once empty
        runs = await _hash(client, ns, "runs")
        stats_after = await queue.stats()

    first_log = first.text()
    children = first.children()
    assert sorted(slot for slot, _ in children) == [0, 1]  # none died, none restarted
    assert set(pids_before) == {pid for _, pid in children}  # both children ran tasks
    assert first.pid not in pids_before  # the supervisor itself runs none
    assert 0 < len(runs_before) < TASKS
    assert set(runs_before.values()) == {1}
    assert (stats.in_flight, stats.ready) == (0, TASKS - len(runs_before))  # drained, acked
    assert "SIGTERM received: forwarding it to 2 worker process(es)" in first_log
    assert first_log.count("SIGTERM received: stopping") == 2  # each child drained once
    assert "all 2 worker processes exited cleanly" in first_log
    assert "exited 0 on its own" in second.text()
    assert runs == dict.fromkeys(range(TASKS), 1)
    assert (stats_after.ready, stats_after.in_flight) == (0, 0)


async def test_a_sigkilled_child_is_restarted_and_no_task_is_lost(
    redis_url: str, redis_namespace: str, tmp_path: Path
) -> None:
    ns = redis_namespace
    async with (
        observing(redis_url, ns) as (client, queue),
        supervisors(redis_url, ns, tmp_path) as start,
    ):
        await Producer(queue, app).dispatch_many(count, range(TASKS))
        supervised = await start("--num-workers", "2")
        await eventually(
            lambda: _hash(client, ns, "pids"),
            lambda pids: len(pids) == 2 and sum(pids.values()) >= 20,
            what="both children ran tasks",
        )
        [(_, victim), (_, survivor)] = supervised.children()

        os.kill(victim, signal.SIGKILL)

        async def restarted() -> list[tuple[int, int]]:
            return supervised.children()

        children = await eventually(
            restarted, lambda c: len(c) == 3, what="the supervisor restarted the child"
        )
        replacement = children[2][1]
        await eventually(
            lambda: _hash(client, ns, "pids"),
            lambda pids: pids.get(replacement, 0) > 0,
            what="the new child runs tasks",
        )
        runs = await eventually(
            lambda: _hash(client, ns, "runs"),
            lambda runs: len(runs) == TASKS,
            what="every task ran (the victim's after its lease lapsed)",
        )
        await eventually(
            queue.stats,
            lambda s: (s.ready, s.in_flight) == (0, 0),
            what="every message was acked",
        )
        os.kill(supervised.pid, signal.SIGTERM)
        code = await supervised.exit_code()

    log = supervised.text()
    assert code == 0, log
    assert children[2][0] == children[0][0]  # the victim's slot
    assert replacement not in (victim, survivor)
    assert f"(pid {victim}) died: killed by SIGKILL" in log
    assert "restarting it in 0.5s" in log
    assert set(runs) == set(range(TASKS))
    # Only the tasks the victim was running (two workers) may have run a second time.
    assert all(n >= 1 for n in runs.values())
    assert sum(n - 1 for n in runs.values()) <= 2, runs


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_children_of_a_sigkilled_supervisor_drain_and_exit(
    redis_url: str, redis_namespace: str, tmp_path: Path
) -> None:
    ns = redis_namespace
    async with (
        observing(redis_url, ns) as (client, queue),
        supervisors(redis_url, ns, tmp_path) as start,
    ):
        await Producer(queue, app).dispatch_many(count, range(TASKS))
        supervised = await start("--num-workers", "2")
        await eventually(
            lambda: _hash(client, ns, "pids"),
            lambda pids: len(pids) == 2 and sum(pids.values()) >= 20,
            what="both children ran tasks",
        )
        pids = [pid for _, pid in supervised.children()]

        os.kill(supervised.pid, signal.SIGKILL)
        await supervised.process.wait()

        async def alive() -> list[int]:
            return [pid for pid in pids if not _gone(pid)]

        await eventually(alive, lambda running: running == [], what="both children exited")
        runs = await _hash(client, ns, "runs")
        stats = await queue.stats()

    log = supervised.text()
    assert log.count(f"the supervisor (pid {supervised.pid}) is gone: stopping") == 2, log
    assert log.count("SIGHUP received: stopping") == 2  # a drain, not a cancel
    assert log.count("worker stopped") == 2
    assert "received again" not in log
    assert 0 < len(runs) < TASKS
    assert set(runs.values()) == {1}
    assert (stats.in_flight, stats.ready) == (0, TASKS - len(runs))  # drained and acked
