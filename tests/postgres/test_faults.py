"""Faults on a private PostgreSQL: killed workers, server restarts and crashes, a full pool,
row locks held by someone else.

Each test has a throwaway `LocalPostgres` of its own (fsync off, so a kill loses nothing
the OS already has; a real crash is a machine fault these tests do not simulate).
Waits are bounded polls against a deadline, never sleeps standing in for an event.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from taskrunner import App, Producer, Runner, RunnerConfig
from taskrunner.errors import BackendUnavailableError
from taskrunner.queue import QueueStats
from taskrunner_backends.postgres import PostgresQueue, migrate_from_url, open_from_url
from taskrunner_backends.postgres.local_server import LocalPostgres

from .proc_app import (
    EVENTS_SCHEMA_ENV,
    EVENTS_URL_ENV,
    Hold,
    app as proc_app,
    create_events_table,
    hold,
    quick,
)

pytestmark = pytest.mark.postgres

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "tr_faults"
# Generous for a loaded 2-core machine; the polls end as soon as the condition holds.
DEADLINE = 30.0
START_SECONDS = 30.0


async def eventually(
    attempt: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool],
    *,
    what: str,
    within: float = DEADLINE,
    interval: float = 0.02,
) -> T:
    """Call `attempt` until `accept(result)`; fail naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = await attempt()
        if accept(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not true after {within} s (last: {result!r})")
        await asyncio.sleep(interval)


async def _now(value: T) -> T:
    return value


def _url(server: LocalPostgres, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": SCHEMA, **options}.items())
    return f"{server.url()}?{query}"


@asynccontextmanager
async def opened(url: str, queue_name: str = "q") -> AsyncIterator[PostgresQueue]:
    queue = await open_from_url(url, queue_name=queue_name)
    try:
        yield queue
    finally:
        await queue.aclose()


async def _stats_or_none(queue: PostgresQueue) -> QueueStats | None:
    try:
        return await queue.stats()
    except BackendUnavailableError:
        # A pooled connection from before the restart fails once; the next is fresh.
        return None


# -- (a) a worker process killed in the middle of a task -------------------------------------


class WorkerProcess:
    """One ``taskrunner worker`` process (the real command line), stopped by its pid."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        if self.process.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    async def stop(self) -> int:
        """SIGTERM, wait for the graceful exit; returns the exit code."""
        if self.process.returncode is None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), DEADLINE)
        except TimeoutError:
            self.kill()
            await self.process.wait()
            raise AssertionError(f"worker {self.pid} did not stop; log:\n{self.tail()}") from None

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@asynccontextmanager
async def worker_processes(
    url: str, events_url: str, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[WorkerProcess]]]:
    """A factory of worker processes; any still running at the end are killed."""
    started: list[WorkerProcess] = []
    env = {**os.environ, EVENTS_URL_ENV: events_url, EVENTS_SCHEMA_ENV: SCHEMA}
    env = {k: v for k, v in env.items() if not k.startswith("TASKRUNNER_") or "TEST" in k}

    async def start(*, workers: int, lease: float) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        with log.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "taskrunner",
                "worker",
                "tests.postgres.proc_app:app",
                "--url",
                url,
                "--num-workers",
                str(workers),
                "--batch-size",
                str(workers),
                "--lease-seconds",
                str(lease),
                "--heartbeat-interval-seconds",
                str(lease / 3),
                "--reclaim-interval-seconds",
                str(lease / 3),
                "--block-seconds",
                "0.5",
                "--log-level",
                "info",
                cwd=REPO,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
        worker = WorkerProcess(process, log)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()
            await worker.process.wait()


def _events(events_url: str) -> Callable[[], Awaitable[list[tuple[Any, ...]]]]:
    async def read() -> list[tuple[Any, ...]]:
        async with await psycopg.AsyncConnection.connect(events_url, autocommit=True) as conn:
            cursor = await conn.execute(
                sql.SQL(
                    "SELECT kind, name, pid, delivery_count, message_id, "
                    "extract(epoch FROM at)::float8 "
                    "FROM {}.test_events ORDER BY seq"
                ).format(sql.Identifier(SCHEMA))
            )
            return await cursor.fetchall()

    return read


async def test_a_worker_process_killed_mid_task_loses_nothing_and_its_task_runs_once_more(
    private_postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = _url(private_postgres)
    events_url = private_postgres.url()
    await migrate_from_url(url)
    with psycopg.connect(events_url, autocommit=True) as conn:
        create_events_table(conn, SCHEMA)
    read_events = _events(events_url)
    lease = 1.5
    async with opened(url) as queue, worker_processes(url, events_url, tmp_path) as start:
        producer = Producer(queue, proc_app)
        # One slot: while the victim hangs, this process can take nothing else.
        doomed = await start(workers=1, lease=lease)
        victim_id = await producer.dispatch(hold, Hold(name="victim", hang_first=True))
        await eventually(
            read_events,
            lambda events: [e[0] for e in events] == ["started"],
            what=f"the victim started in the first worker (log:\n{doomed.tail()})",
            within=START_SECONDS,
        )
        survivor = await start(workers=4, lease=lease)
        await producer.dispatch_many(quick, range(50))

        doomed.kill()  # SIGKILL while the victim task runs: its lease is never released
        await doomed.process.wait()
        killed_at = time.monotonic()

        events = await eventually(
            read_events,
            lambda events: (
                [e[0] for e in events].count("finished") == 1
                and [e[0] for e in events].count("run") >= 50
            ),
            what=f"the survivor ran everything (log:\n{survivor.tail()})",
            within=START_SECONDS + DEADLINE,
        )
        stats = await eventually(
            queue.stats,
            lambda s: s.ready == 0 and s.in_flight == 0 and s.delayed == 0,
            what="the queue is empty",
        )
        assert await survivor.stop() == 0, survivor.tail()

    held = [(e[0], e[2], e[3], e[4]) for e in events if e[1] == "victim"]
    assert held == [
        ("started", doomed.pid, 1, victim_id),
        ("started", survivor.pid, 2, victim_id),
        ("finished", survivor.pid, 2, victim_id),
    ]
    runs = Counter(int(e[1]) for e in events if e[0] == "run")
    assert runs == dict.fromkeys(range(50), 1)
    assert {e[2] for e in events if e[0] == "run"} == {survivor.pid}
    assert stats.dead == 0
    # Taken over only once the lease lapsed: it was heartbeated until the kill, so the
    # second start comes a whole lease after the first at least (server clock).
    first_start, second_start = (e[5] for e in events if e[:2] == ("started", "victim"))
    assert second_start - first_start >= lease - 0.05
    assert time.monotonic() - killed_at < DEADLINE


# -- (b) the server restarted or crashed under a running Runner ------------------------------

TASKS = 300


def _failing_loops(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name.startswith("taskrunner.") and record.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize("outage", ["restart", "kill"])
async def test_the_server_going_away_mid_run_loses_nothing_and_runs_nothing_twice(
    private_postgres: LocalPostgres, caplog: pytest.LogCaptureFixture, outage: str
) -> None:
    caplog.set_level(logging.WARNING, logger="taskrunner")
    url = _url(private_postgres, pool_timeout="2")
    app = App("q")
    runs: Counter[int] = Counter()

    @app.task(name="work")
    async def work(n: int) -> None:
        runs[n] += 1
        await asyncio.sleep(0.01)  # the task's own work, not a wait for anything

    # Heartbeats every 0.5 s of a 10 s lease: the outage stays far shorter than a lease,
    # so nothing may be reclaimed while its first worker still holds it.
    config = RunnerConfig(
        num_workers=10,
        batch_size=10,
        lease_seconds=10.0,
        heartbeat_interval_seconds=0.5,
        block_seconds=0.5,
    )
    async with opened(url) as producer_queue, opened(url) as worker_queue:
        runner = Runner(worker_queue, app, config)
        gate = runner._gate
        assert gate is not None
        try:
            await Producer(producer_queue, app).dispatch_many(work, range(TASKS))
            run = asyncio.create_task(runner.run())
            await eventually(
                lambda: _now(len(runs)), lambda n: n >= TASKS // 4, what="a quarter ran"
            )
            outage_started = time.monotonic()
            if outage == "restart":
                await asyncio.to_thread(private_postgres.stop)
            else:
                await asyncio.to_thread(private_postgres.kill)
            # Down until the runner noticed and failed again while backing off: each
            # failure closes the gate (it opens again once every lease held was
            # heartbeated, at once when none is held, so it may be open here).
            await eventually(
                lambda: _now(gate.failures),
                lambda n: n >= 5,
                what="the runner's loops fail repeatedly and close the reconnect gate",
            )
            await asyncio.to_thread(private_postgres.start)
            outage_seconds = time.monotonic() - outage_started

            await eventually(lambda: _now(len(runs)), lambda n: n == TASKS, what="every task ran")
            stats = await eventually(
                lambda: _stats_or_none(producer_queue),
                lambda s: s is not None and s.ready == 0 and s.in_flight == 0,
                what="every task acked",
            )
            await eventually(lambda: _now(gate.is_open), bool, what="the gate opens again")
            assert not run.done(), "the runner stopped on an outage"
            runner.stop()
            await run
        finally:
            runner.stop()

    assert outage_seconds < config.lease_seconds, "the outage outlasted a lease: test invalid"
    assert sorted(runs) == list(range(TASKS))
    assert [n for n, count in runs.items() if count > 1] == []
    assert stats is not None
    assert stats.dead == 0
    assert runner.stats().succeeded == TASKS
    assert runner.stats().dead_lettered == 0
    warnings = _failing_loops(caplog)
    assert warnings, "no loop logged the outage"
    # Logged as the backend being unavailable, not as a crash of some loop.
    assert not [r for r in warnings if r.levelno >= logging.ERROR], [
        r.getMessage() for r in warnings
    ]
    assert any("unavailable" in r.getMessage() for r in warnings), [
        r.getMessage() for r in warnings
    ]


# -- (c) every connection of the pool in use --------------------------------------------------


async def test_a_full_pool_is_unavailable_naming_the_pool_then_works_once_released(
    private_postgres: LocalPostgres,
) -> None:
    url = _url(private_postgres, pool_min="1", pool_max="1", pool_timeout="0.5")
    async with opened(url) as queue:
        await queue.add([b"before"])
        async with queue.database.transaction("hold the only connection"):
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError, match="no free connection in the pool"):
                await queue.add([b"while full"])
            waited = time.monotonic() - started
            with pytest.raises(BackendUnavailableError, match="pool_max"):
                await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=5)
        assert 0.4 <= waited < 5.0, waited
        # Released: the same handle works again, nothing was added meanwhile.
        assert await queue.len() == 1
        [delivery] = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=5)
        assert delivery.body == b"before"
        assert await queue.ack([delivery]) == []


async def test_a_pool_timeout_says_in_use_or_unreachable_as_it_was_and_quotes_the_refusal(
    private_postgres: LocalPostgres,
) -> None:
    url = _url(private_postgres, pool_min="1", pool_max="1", pool_timeout="0.5")
    port = urlsplit(private_postgres.url()).port
    async with opened(url) as queue:
        await queue.add([b"before"])
        async with queue.database.transaction("hold the only connection"):
            with pytest.raises(BackendUnavailableError) as busy:
                await queue.len()
        assert "every connection is in use; raise pool_max or pool_timeout" in str(busy.value)
        assert "unreachable" not in str(busy.value)

        private_postgres.stop()

        async def attempt() -> str:
            try:
                await queue.len()
            except BackendUnavailableError as exc:
                return str(exc)
            return "no error"

        # The first calls may fail on the pool's broken connections instead; once the
        # pool has tried to reconnect, its timeout is explained.
        message = await eventually(
            attempt, lambda text: "no free connection in the pool" in text, what="a pool timeout"
        )
        assert "the server may be unreachable" in message, message
        assert "refused" in message.lower(), message
        assert f"port {port}" in message, message
        assert "in use" not in message, message


async def test_a_pool_timeout_after_failed_attempts_says_so_when_the_server_is_back(
    private_postgres: LocalPostgres,
) -> None:
    # pool_timeout 3 s: the pool's reconnect attempts (bounded by it) find the restarted
    # server before the hold below gives up waiting for a connection.
    url = _url(private_postgres, pool_min="1", pool_max="1", pool_timeout="3")
    async with opened(url) as queue:
        await queue.add([b"before"])
        private_postgres.stop()
        with pytest.raises(BackendUnavailableError, match="server unavailable"):
            await queue.len()  # on the broken connection, which the pool then replaces

        async def connect_errors() -> int:
            return int(queue.database.pool.get_stats().get("connections_errors", 0))

        await eventually(connect_errors, lambda n: n > 0, what="a failed reconnection")
        private_postgres.start()
        async with queue.database.transaction("hold the only connection"):
            with pytest.raises(BackendUnavailableError) as held:
                await queue.len()
        message = str(held.value)
        assert "connection attempts failed meanwhile" in message, message
        assert "a fresh connection succeeds now" in message, message
        # The failures are accounted for: the next timeout of a held pool is "in use".
        async with queue.database.transaction("hold the only connection"):
            with pytest.raises(BackendUnavailableError) as again:
                await queue.len()
        assert "every connection is in use; raise pool_max" in str(again.value)
        assert await queue.len() == 1


# -- (d) a row lock held by another transaction -----------------------------------------------


@contextmanager
def row_locked(url: str, message_id: str) -> Iterator[int]:
    """Hold ``FOR UPDATE`` on one message row in an open transaction; yields its backend pid."""
    with psycopg.connect(url) as conn:  # not autocommit: the lock lasts until we leave
        conn.execute(
            sql.SQL("SELECT id FROM {}.messages WHERE id = %s FOR UPDATE").format(
                sql.Identifier(SCHEMA)
            ),
            (int(message_id),),
        )
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        try:
            yield int(row[0])
        finally:
            conn.rollback()


async def _blocked_by(url: str, pid: int) -> list[int]:
    """Backends whose current statement waits for a lock `pid` holds."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
        )
        return [int(r[0]) for r in await cursor.fetchall()]


async def test_a_row_locked_elsewhere_is_skipped_by_receive_and_reclaim_and_an_ack_waits(
    private_postgres: LocalPostgres,
) -> None:
    url = _url(private_postgres)
    plain = private_postgres.url()
    async with opened(url) as queue:
        [locked_id, other_id] = await queue.add([b"locked", b"other"])
        with row_locked(plain, locked_id) as locker:
            # Ready and locked: receive takes the next one at once, no stall.
            started = time.monotonic()
            got = await queue.receive("c1", max_messages=2, wait_seconds=0, lease_seconds=0.2)
            assert [d.message_id for d in got] == [other_id]
            assert time.monotonic() - started < 2.0
        # Now lease the locked one too, and let both leases lapse.
        [first] = await queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=0.2)
        assert first.message_id == locked_id
        await eventually(
            lambda: queue.database.fetch(
                "lapsed",
                queue.database.sql(
                    "SELECT count(*) FROM {s}.messages WHERE expires_at < clock_timestamp()"
                ),
            ),
            lambda rows: rows[0][0] == 2,
            what="both leases lapsed",
        )
        with row_locked(plain, locked_id) as locker:
            started = time.monotonic()
            taken = await queue.reclaim("c2", max_messages=5, lease_seconds=30)
            assert [d.message_id for d in taken] == [other_id]
            assert time.monotonic() - started < 2.0
            # c1 still holds the locked one (lapsed but not reclaimed): its ack is fenced
            # on (owner, delivery_count), which still match, but it must wait for the lock.
            ack = asyncio.create_task(queue.ack([first]))
            blocked = await eventually(
                lambda: _blocked_by(plain, locker),
                lambda pids: len(pids) == 1,
                what="the ack waits for the row lock",
            )
            assert blocked
            assert not ack.done()
        # The lock is gone (rolled back): the ack completes, nothing lost.
        assert await asyncio.wait_for(ack, DEADLINE) == []
        stats = await queue.stats()
        # Only c2's reclaimed `other` is left, in flight.
        assert (stats.ready, stats.delayed, stats.in_flight) == (0, 0, 1)


async def test_a_lock_timeout_in_the_url_bounds_an_ack_waiting_for_a_row_lock(
    private_postgres: LocalPostgres,
) -> None:
    # libpq's ``options`` pass through the URL: a session lock_timeout of 200 ms.
    url = _url(private_postgres, options="-c%20lock_timeout%3D200")
    async with opened(url) as queue:
        [message_id] = await queue.add([b"locked"])
        [delivery] = await queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=30)
        with row_locked(private_postgres.url(), message_id):
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError, match="lock timeout"):
                await queue.ack([delivery])
            waited = time.monotonic() - started
        assert 0.15 <= waited < 5.0, waited
        # The lock gone, the same ack (nothing changed meanwhile) goes through.
        assert await queue.ack([delivery]) == []
        assert await queue.len() == 0
