"""The outbox through the command line: ``taskrunner worker --outbox-url`` and ``taskrunner relay``.

Real processes: the worker relays its queue's outbox beside running tasks, and the
relay command moves rows alone and exits 0 on SIGTERM. Tasks report their runs into a
table of the test's schema (tests/postgres/proc_app.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from taskrunner import Producer, open_queue
from taskrunner_backends.postgres.outbox import OutboxWriter, create_outbox

from .proc_app import EVENTS_SCHEMA_ENV, EVENTS_URL_ENV, app, create_events_table, quick

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 30.0


@asynccontextmanager
async def command(
    argv: list[str], *, env: dict[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run ``python -m taskrunner ARGV``; killed at the end if still running."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TASKRUNNER_") or "TEST" in k}
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "taskrunner",
            *argv,
            cwd=REPO,
            env={**clean, **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def text_of(log: Path) -> str:
    return log.read_text(errors="replace")


async def terminate(process: asyncio.subprocess.Process, log: Path) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(process.wait(), DEADLINE)
    except TimeoutError:
        raise AssertionError(f"did not stop on SIGTERM; log:\n{text_of(log)}") from None


async def until(condition: Callable[[], Awaitable[bool]], what: str, log: Path) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not await condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} within {DEADLINE}s; log:\n{text_of(log)}")
        await asyncio.sleep(0.05)


def runs(pg: str, schema: str) -> list[str]:
    with psycopg.connect(pg, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT name FROM {}.test_events WHERE kind = 'run' ORDER BY seq").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    return [str(r[0]) for r in rows]


@pytest.fixture
def pg(postgres_url: str) -> str:
    return postgres_url.split("?", 1)[0]


@pytest.fixture
def schema(pg: str, postgres_schema: str) -> str:
    with psycopg.connect(pg, autocommit=True) as conn:
        create_outbox(conn, postgres_schema)
        create_events_table(conn, postgres_schema)
    return postgres_schema


async def dispatch_in_transaction(queue_url: str, pg: str, schema: str, count: int) -> None:
    async with open_queue(queue_url, app.queue) as queue:
        producer = Producer(queue, app, outbox=OutboxWriter(app.queue, schema=schema))
        with psycopg.connect(pg) as conn:
            await producer.dispatch_many(quick, list(range(count)), connection=conn)
            conn.commit()


async def test_the_worker_relays_its_outbox_and_runs_every_committed_task_once(
    redis_url: str, redis_namespace: str, pg: str, schema: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    queue_url = f"{redis_url}?namespace={redis_namespace}"
    argv = [
        "worker",
        "tests.postgres.proc_app:app",
        "--url",
        queue_url,
        "--outbox-url",
        f"{pg}?schema={schema}",
        "--block-seconds",
        "0.5",
    ]
    env = {EVENTS_URL_ENV: pg, EVENTS_SCHEMA_ENV: schema}
    async with command(argv, env=env, log=log) as worker:
        await dispatch_in_transaction(queue_url, pg, schema, 20)

        async def all_ran() -> bool:
            return len(runs(pg, schema)) >= 20

        await until(all_ran, "the worker did not run the 20 committed tasks", log)
        assert await terminate(worker, log) == 0
    assert sorted(runs(pg, schema), key=int) == [str(n) for n in range(20)]
    assert "relaying the outbox at" in text_of(log)


async def test_the_relay_command_moves_rows_and_stops_on_sigterm(
    redis_url: str, redis_namespace: str, pg: str, schema: str, tmp_path: Path
) -> None:
    log = tmp_path / "relay.log"
    queue_url = f"{redis_url}?namespace={redis_namespace}"
    argv = ["relay", app.queue, "--url", queue_url, "--outbox-url", f"{pg}?schema={schema}"]
    async with command(argv, env={}, log=log) as relay:
        await dispatch_in_transaction(queue_url, pg, schema, 7)
        async with open_queue(queue_url, app.queue) as reader:

            async def all_moved() -> bool:
                return (await reader.stats()).ready == 7

            await until(all_moved, "the relay did not move the 7 rows", log)
        assert await terminate(relay, log) == 0
    assert "relay stopped" in text_of(log)


async def test_the_relay_command_without_an_outbox_url_is_a_usage_error(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    async with command(["relay", "q"], env={}, log=log) as relay:
        assert await asyncio.wait_for(relay.wait(), DEADLINE) == 2
    assert "--outbox-url" in text_of(log)


# The secret in both URLs, in the forms libpq accepts with trust authentication (any
# password): the log lines that name the URLs must mask them.
_SECRET_HALVES = ("S3CR", "ET9X")


def _with_secret(url: str, form: str) -> str:
    scheme, rest = url.split("://", 1)
    if form == "userinfo":
        user, _, host = rest.partition("@")
        return f"{scheme}://{user}:S3CR%2FET9X@{host}"
    return f"{url}{'&' if '?' in url else '?'}password=S3CR-ET9X"


@pytest.mark.parametrize("form", ["userinfo", "option-password"])
async def test_relay_and_worker_logs_and_config_never_show_the_outbox_urls_secret(
    redis_url: str, redis_namespace: str, pg: str, schema: str, tmp_path: Path, form: str
) -> None:
    outbox_url = _with_secret(f"{pg}?schema={schema}", form)
    queue_url = f"{redis_url}?namespace={redis_namespace}"
    env = {EVENTS_URL_ENV: pg, EVENTS_SCHEMA_ENV: schema}
    runs_of = {
        "relay": ["relay", app.queue, "--url", queue_url, "--outbox-url", outbox_url],
        "worker": ["worker", "tests.postgres.proc_app:app", "--url", queue_url,
                   "--outbox-url", outbox_url, "--log-level", "debug"],
    }  # fmt: skip
    for name, argv in runs_of.items():
        log = tmp_path / f"{name}.log"
        async with command(argv, env=env, log=log) as process:

            async def started(log: Path = log) -> bool:
                return "relaying the outbox at" in text_of(log)

            await until(started, f"{name} never said it relays", log)
            before = len(runs(pg, schema))
            await dispatch_in_transaction(queue_url, pg, schema, 1)

            async def relayed(name: str = name, before: int = before) -> bool:
                if name == "worker":
                    return len(runs(pg, schema)) > before
                async with open_queue(queue_url, app.queue) as queue:
                    return (await queue.stats()).ready > 0

            await until(relayed, f"{name} never relayed the row", log)
            assert await terminate(process, log) == 0
        text = text_of(log)
        for half in _SECRET_HALVES:
            assert half not in text, f"{name}: {text}"
    log = tmp_path / "config.log"
    async with command(
        ["config", "--json"], env={"TASKRUNNER_OUTBOX_URL": outbox_url}, log=log
    ) as process:
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    text = text_of(log)
    assert "outbox_url" in text
    for half in _SECRET_HALVES:
        assert half not in text, text
