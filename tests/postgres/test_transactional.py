"""Transactional dispatch on PostgreSQL: the message exists if and only if the caller commits.

Every path the backend takes a connection by (psycopg sync and async, SQLAlchemy
Connection/Session sync and async, Django) is run against the same edges: committed is
delivered, rolled back never existed, a worker polling while the transaction is open
sees nothing, and every connection that cannot take part is refused with nothing
written. The SIGKILL cases run the dispatching process as a child and kill it before
and after its COMMIT.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from taskrunner import App, ConfigurationError, Producer, UnsupportedFeatureError
from taskrunner.codec import decode_envelope
from taskrunner.queue import AddRequest
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_backends.postgres import PostgresQueue, open_from_url
from taskrunner_backends.postgres.testing import with_options
from taskrunner_backends.postgres.transactional import PostgresTransactionalAdd, TransactionError
from tests.django_support import django_database

from .support import Migrated, database

pytestmark = pytest.mark.postgres

app = App("tx")


@app.task
async def charge(amount: int) -> int:
    return amount


@app.task(unique_for=60.0)
async def nightly(day: str) -> None:
    return None


@pytest.fixture
def url(postgres_url: str, postgres_schema: str) -> str:
    return with_options(postgres_url, schema=postgres_schema)


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[PostgresQueue]:
    queue = await open_from_url(url, queue_name="tx")
    try:
        yield queue
    finally:
        await queue.aclose()


def libpq(url: str) -> str:
    """The URL without taskrunner's own options (libpq refuses ``schema=``)."""
    return url.split("?", 1)[0]


async def waiting(queue: PostgresQueue) -> int:
    return (await queue.stats()).ready


def amount(body: bytes) -> int:
    return int(bytes(decode_envelope(body).payload))


async def received(queue: PostgresQueue) -> list[bytes]:
    got = await queue.receive("w", max_messages=100, wait_seconds=0, lease_seconds=30)
    return [d.body for d in got]


# -- psycopg 3 ---------------------------------------------------------------------------


async def test_a_committed_dispatch_is_delivered_and_invisible_before_the_commit(
    url: str,
) -> None:
    async with opened(url) as queue:
        producer = Producer(queue, app)
        with psycopg.connect(libpq(url)) as conn:
            message_id = await producer.dispatch(charge, 5, connection=conn)
            assert await received(queue) == [], "a worker saw an uncommitted message"
            assert await waiting(queue) == 0
            conn.commit()
        [delivery] = await queue.receive("w", max_messages=5, wait_seconds=2, lease_seconds=30)
        assert delivery.message_id == message_id


async def test_a_rolled_back_dispatch_never_existed(url: str) -> None:
    async with opened(url) as queue:
        producer = Producer(queue, app)
        with psycopg.connect(libpq(url)) as conn:
            await producer.dispatch_many(charge, [1, 2, 3], connection=conn)
            conn.rollback()
        assert await queue.receive("w", max_messages=5, wait_seconds=0, lease_seconds=30) == []
        assert await waiting(queue) == 0


async def test_the_commit_wakes_a_blocked_receive(url: str) -> None:
    async with opened(url) as queue:
        await queue.start()
        producer = Producer(queue, app)
        blocked = asyncio.create_task(
            queue.receive("w", max_messages=1, wait_seconds=5, lease_seconds=30)
        )
        async with await psycopg.AsyncConnection.connect(libpq(url)) as conn:
            await producer.dispatch(charge, 1, connection=conn)
            await asyncio.sleep(0)
            assert not blocked.done()
            await conn.commit()
        got = await asyncio.wait_for(blocked, 4)
        assert len(got) == 1


async def test_delay_and_unique_keys_work_inside_the_transaction(url: str) -> None:
    async with opened(url) as queue:
        producer = Producer(queue, app)
        async with await psycopg.AsyncConnection.connect(libpq(url)) as conn:
            first = await producer.dispatch(nightly, "mon", connection=conn)
            again = await producer.dispatch(nightly, "mon", connection=conn)
            later = await producer.dispatch(charge, 9, delay=timedelta(hours=1), connection=conn)
            await conn.commit()
        assert first.added
        assert not again.added
        assert again == first
        stats = await queue.stats()
        assert (stats.ready, stats.delayed) == (1, 1)
        [delivery] = await queue.receive("w", max_messages=5, wait_seconds=0, lease_seconds=30)
        assert delivery.message_id == first != later


async def test_a_unique_key_held_by_a_rolled_back_transaction_is_free_again(url: str) -> None:
    async with opened(url) as queue:
        producer = Producer(queue, app)
        with psycopg.connect(libpq(url)) as conn:
            assert (await producer.dispatch(nightly, "tue", connection=conn)).added
            conn.rollback()
            assert (await producer.dispatch(nightly, "tue", connection=conn)).added
            conn.commit()
        assert await waiting(queue) == 1


async def test_a_worker_polling_during_an_open_transaction_never_gets_the_message(url: str) -> None:
    async with opened(url) as queue, opened(url) as worker_handle:
        producer = Producer(queue, app)
        with psycopg.connect(libpq(url)) as conn:
            await producer.dispatch(charge, 1, connection=conn)
            for _ in range(5):
                assert await received(worker_handle) == []
            conn.rollback()
        assert await received(worker_handle) == []


# -- connections that cannot take part -------------------------------------------------


async def assert_refused(
    queue: PostgresQueue, conn: object, match: str, error: type[Exception] = TransactionError
) -> None:
    before = await waiting(queue)
    with pytest.raises(error, match=match):
        await Producer(queue, app).dispatch(charge, 1, connection=conn)
    assert await waiting(queue) == before, "a refused dispatch wrote a message"


async def test_an_autocommit_connection_outside_a_transaction_is_refused(url: str) -> None:
    async with opened(url) as queue:
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            await assert_refused(queue, conn, "autocommit")
            with conn.transaction():  # inside an explicit transaction it is taken
                await Producer(queue, app).dispatch(charge, 1, connection=conn)
        assert await waiting(queue) == 1


async def test_a_closed_connection_is_refused(url: str) -> None:
    async with opened(url) as queue:
        conn = psycopg.connect(libpq(url))
        conn.close()
        await assert_refused(queue, conn, "closed")


async def test_a_failed_transaction_is_refused_and_left_as_it_was(url: str) -> None:
    async with opened(url) as queue:
        with psycopg.connect(libpq(url)) as conn:
            with pytest.raises(psycopg.errors.DivisionByZero):
                conn.execute("SELECT 1/0")
            await assert_refused(queue, conn, "failed")
            conn.rollback()


async def test_a_connection_to_another_database_is_refused(url: str, postgres_url: str) -> None:
    other = f"tr_tx_other_{os.getpid()}"
    with psycopg.connect(libpq(postgres_url), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{other}"')
        admin.execute(f'CREATE DATABASE "{other}"')
    try:
        async with opened(url) as queue:
            base = libpq(postgres_url).rsplit("/", 1)[0]
            with psycopg.connect(f"{base}/{other}") as conn:
                await assert_refused(queue, conn, "database")
    finally:
        with psycopg.connect(libpq(postgres_url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)')


async def test_a_database_without_the_queues_schema_is_refused(postgres_url: str) -> None:
    async with database(Migrated(postgres_url, "tr_tx_absent")) as db:
        part = PostgresTransactionalAdd(db, "tx", conninfo=postgres_url, channel="c")
        with psycopg.connect(libpq(postgres_url)) as conn:
            with pytest.raises(TransactionError, match=r"no table .*tr_tx_absent"):
                part.add_sync(conn, [AddRequest(body=b"x")])
            # The caller's transaction is not broken by the refusal.
            assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize(
    "given", [object(), "postgresql://x", 42], ids=["object", "url-string", "int"]
)
async def test_something_that_is_no_connection_is_a_type_error(url: str, given: object) -> None:
    async with opened(url) as queue:
        await assert_refused(queue, given, "connection= takes", TypeError)


async def test_a_backend_without_transactions_says_what_to_use() -> None:
    queue = InMemoryQueue()
    with pytest.raises(UnsupportedFeatureError, match="PostgreSQL") as caught:
        await Producer(queue, app).dispatch(charge, 1, connection=object())
    assert caught.value.capability == "transactional"
    assert (await queue.stats()).ready == 0


def test_a_transaction_error_is_a_configuration_error() -> None:
    assert issubclass(TransactionError, ConfigurationError)


# -- SQLAlchemy ----------------------------------------------------------------------------


def sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + libpq(url).split("://", 1)[1]


async def test_sqlalchemy_connection_and_session_commit_and_roll_back(url: str) -> None:
    import sqlalchemy
    from sqlalchemy.orm import Session

    engine = sqlalchemy.create_engine(sqlalchemy_url(url))
    try:
        async with opened(url) as queue:
            producer = Producer(queue, app)
            with engine.connect() as conn:
                await producer.dispatch(charge, 1, connection=conn)
                conn.rollback()
            with engine.begin() as conn:
                await producer.dispatch(charge, 2, connection=conn)
                assert await received(queue) == []
            with Session(engine) as session:
                await producer.dispatch(charge, 3, connection=session)
                session.commit()
            with Session(engine) as session:
                await producer.dispatch(charge, 4, connection=session)
                session.rollback()
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                await assert_refused(queue, conn, "AUTOCOMMIT")
            bodies = await received(queue)
            assert [amount(b) for b in bodies] == [2, 3]
    finally:
        engine.dispose()


async def test_sqlalchemy_async_connection_and_session(url: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(sqlalchemy_url(url))
    try:
        async with opened(url) as queue:
            producer = Producer(queue, app)
            async with engine.begin() as conn:
                await producer.dispatch(charge, 1, connection=conn)
            async with AsyncSession(engine) as session:
                await producer.dispatch(charge, 2, connection=session)
                await session.rollback()
            async with AsyncSession(engine) as session:
                await producer.dispatch(charge, 3, connection=session)
                await session.commit()
            bodies = await received(queue)
            assert [amount(b) for b in bodies] == [1, 3]
    finally:
        await engine.dispose()


# -- the dispatching process killed ------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    import psycopg
    from taskrunner import Producer
    from taskrunner_backends.postgres import open_from_url
    from tests.postgres.test_transactional import app, charge

    url, libpq_url, commit = sys.argv[1], sys.argv[2], sys.argv[3] == "commit"

    async def main() -> None:
        queue = await open_from_url(url, queue_name="tx")
        conn = psycopg.connect(libpq_url)
        await Producer(queue, app).dispatch(charge, 7, connection=conn)
        if commit:
            conn.commit()
        print("committed" if commit else "dispatched", conn.info.backend_pid, flush=True)
        time.sleep(600)  # until SIGKILLed

    asyncio.run(main())
    """
)


def _dispatch_and_get_killed(url: str, *, commit: bool) -> int:
    """Run `_CHILD`, SIGKILL it once it dispatched (or committed); its server session's pid."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    argv = [sys.executable, "-c", _CHILD, url, libpq(url), "commit" if commit else "hold"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, cwd=root) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()  # the child prints or dies; pytest-timeout bounds it
            said, session = line.split()
            assert said == (b"committed" if commit else b"dispatched")
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait(10)
        return int(session)


@pytest.mark.parametrize("commit", [False, True], ids=["before-commit", "after-commit"])
async def test_the_dispatching_process_killed_before_or_after_commit(
    url: str, commit: bool
) -> None:
    session = await asyncio.to_thread(_dispatch_and_get_killed, url, commit=commit)
    async with opened(url) as queue:
        if commit:
            [delivery] = await queue.receive("w", max_messages=5, wait_seconds=2, lease_seconds=30)
            assert amount(delivery.body) == 7
        else:
            # The server rolls the killed session's transaction back once it sees the
            # socket close; until then the row is uncommitted and invisible anyway.
            assert await received(queue) == []
            await _until_session_gone(url, session)
            assert await received(queue) == []
            assert await waiting(queue) == 0


async def _until_session_gone(url: str, session: int) -> None:
    """Bounded wait until the killed child's server session (and its transaction) is gone."""
    async with await psycopg.AsyncConnection.connect(libpq(url), autocommit=True) as conn:
        for _ in range(200):
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (session,)
            )
            row = await cursor.fetchone()
            if row is not None and row[0] == 0:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"session {session} of the killed process is still open after 10 s")


# -- Django --------------------------------------------------------------------------------


def test_django_atomic_block_commits_and_rolls_back_with_the_message(
    url: str, postgres_schema: str
) -> None:
    from django.db import transaction

    async def open_part() -> Any:
        queue = await open_from_url(url, queue_name="tx")
        await queue.aclose()  # the part renders its statements at open; it needs no pool
        return queue.transactional

    part = asyncio.run(open_part())
    request = [AddRequest(body=b"django")]
    with django_database(libpq(url), postgres_schema + "_django") as connection:
        with pytest.raises(TransactionError, match="atomic"):
            part.add_sync(connection, request)
        with transaction.atomic():
            part.add_sync(connection, request)

        def add_then_fail() -> None:
            with transaction.atomic():
                part.add_sync(connection, request)
                raise RuntimeError("undo")

        with pytest.raises(RuntimeError, match="undo"):
            add_then_fail()

    async def count() -> int:
        async with opened(url) as queue:
            return await waiting(queue)

    assert asyncio.run(count()) == 1
