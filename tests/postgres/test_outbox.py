"""The transactional outbox: rows in the application's PostgreSQL, messages in Redis.

Each test has its own outbox schema on the session's PostgreSQL and its own Redis
namespace. The exactly-once edges: a relay that added a batch and died before its
DELETE committed (the next relay adds nothing for those rows), two relays on one
outbox (every row once), and the rollback and refusal paths of the writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from taskrunner import App, Producer, SyncProducer, UnsupportedFeatureError
from taskrunner.queue import Added, AddRequest
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_backends.postgres.outbox import OutboxRelay, OutboxWriter, create_outbox
from taskrunner_backends.postgres.transactional import TransactionError
from taskrunner_backends.redis import RedisStreamsQueue

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

app = App("q")


@app.task
async def send(n: int) -> None:
    return None


@app.task(unique_for=60.0)
async def digest(day: str) -> None:
    return None


@pytest.fixture
def pg(postgres_url: str) -> str:
    return postgres_url.split("?", 1)[0]


@pytest.fixture
def outbox(pg: str, postgres_schema: str) -> str:
    """The test's outbox schema, created (dropped by ``postgres_schema``)."""
    with psycopg.connect(pg, autocommit=True) as conn:
        create_outbox(conn, postgres_schema)
    return postgres_schema


def outbox_rows(pg: str, schema: str) -> int:
    with psycopg.connect(pg, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".outbox').fetchone()
        assert row is not None
        return int(row[0])


@asynccontextmanager
async def relay_connection(pg: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg, autocommit=True) as conn:
        yield conn


async def ready(queue: RedisStreamsQueue) -> int:
    return (await queue.stats()).ready


async def test_committed_rows_are_relayed_once_and_deleted(
    redis_queue: RedisStreamsQueue, pg: str, outbox: str
) -> None:
    producer = Producer(redis_queue, app, outbox=OutboxWriter("q", schema=outbox))
    with psycopg.connect(pg) as conn:
        dispatched = await producer.dispatch_many(send, [1, 2, 3], connection=conn)
        conn.commit()
    assert all(i.startswith("outbox-") for i in dispatched)
    relay = OutboxRelay(pg, redis_queue, "q", schema=outbox)
    async with relay_connection(pg) as conn:
        assert await relay.relay_once(conn) == 3
        assert await relay.relay_once(conn) == 0
    assert await ready(redis_queue) == 3
    assert outbox_rows(pg, outbox) == 0


async def test_rolled_back_dispatches_never_reach_the_outbox(
    redis_queue: RedisStreamsQueue, pg: str, outbox: str
) -> None:
    producer = Producer(redis_queue, app, outbox=OutboxWriter("q", schema=outbox))
    with psycopg.connect(pg) as conn:
        await producer.dispatch(send, 1, connection=conn)
        assert outbox_rows(pg, outbox) == 0, "another session saw an uncommitted row"
        conn.rollback()
    assert outbox_rows(pg, outbox) == 0


class _DiesAfterAdding:
    """A sink that adds, then fails as a relay killed before its DELETE committed."""

    def __init__(self, queue: RedisStreamsQueue) -> None:
        self._queue = queue

    async def add_relayed(
        self, requests: Sequence[AddRequest], relay_ids: Sequence[str], *, record_seconds: float
    ) -> list[Added]:
        await self._queue.add_relayed(requests, relay_ids, record_seconds=record_seconds)
        raise ConnectionResetError("killed between the add and the delete (test)")


async def test_a_relay_dying_between_its_add_and_its_delete_duplicates_nothing(
    redis_queue: RedisStreamsQueue, pg: str, outbox: str
) -> None:
    producer = Producer(redis_queue, app, outbox=OutboxWriter("q", schema=outbox))
    with psycopg.connect(pg) as conn:
        await producer.dispatch_many(send, list(range(5)), connection=conn)
        conn.commit()
    dying = OutboxRelay(pg, _DiesAfterAdding(redis_queue), "q", schema=outbox)
    async with relay_connection(pg) as conn:
        with pytest.raises(ConnectionResetError):
            await dying.relay_once(conn)
    assert outbox_rows(pg, outbox) == 5, "the rows left with the dead relay's transaction"
    assert await ready(redis_queue) == 5
    healthy = OutboxRelay(pg, redis_queue, "q", schema=outbox)
    async with relay_connection(pg) as conn:
        assert await healthy.relay_once(conn) == 5
    assert await ready(redis_queue) == 5, "a resent row was added a second time"
    assert outbox_rows(pg, outbox) == 0


async def test_two_relays_on_one_outbox_move_every_row_exactly_once(
    redis_queue: RedisStreamsQueue, pg: str, outbox: str
) -> None:
    producer = Producer(redis_queue, app, outbox=OutboxWriter("q", schema=outbox))
    with psycopg.connect(pg) as conn:
        await producer.dispatch_many(send, list(range(1000)), connection=conn)
        conn.commit()
    relays = [OutboxRelay(pg, redis_queue, "q", schema=outbox, batch=37) for _ in range(2)]

    async def drain(relay: OutboxRelay) -> None:
        async with relay_connection(pg) as conn:
            while await relay.relay_once(conn):
                pass

    await asyncio.gather(*(drain(r) for r in relays))
    assert sum(r.relayed for r in relays) == 1000
    assert await ready(redis_queue) == 1000
    assert outbox_rows(pg, outbox) == 0


async def test_delays_and_unique_keys_survive_the_outbox(
    redis_queue: RedisStreamsQueue, pg: str, outbox: str
) -> None:
    producer = Producer(redis_queue, app, outbox=OutboxWriter("q", schema=outbox))
    with psycopg.connect(pg) as conn:
        await producer.dispatch(send, 1, delay=timedelta(hours=1), connection=conn)
        await producer.dispatch(digest, "mon", connection=conn)
        await producer.dispatch(digest, "mon", connection=conn)
        conn.commit()
    relay = OutboxRelay(pg, redis_queue, "q", schema=outbox)
    async with relay_connection(pg) as conn:
        assert await relay.relay_once(conn) == 3
    stats = await redis_queue.stats()
    assert (stats.ready, stats.delayed) == (1, 1), "the unique key or the delay was lost"


async def test_the_running_relay_moves_a_commit_without_waiting_for_its_poll(
    redis_queue: RedisStreamsQueue, pg: str, outbox: str
) -> None:
    producer = Producer(redis_queue, app, outbox=OutboxWriter("q", schema=outbox))
    relay = OutboxRelay(pg, redis_queue, "q", schema=outbox)
    started = asyncio.Event()
    task = asyncio.create_task(relay.run(started))
    try:
        await asyncio.wait_for(started.wait(), 10)
        async with await psycopg.AsyncConnection.connect(pg) as conn:
            await producer.dispatch(send, 1, connection=conn)
            await conn.commit()
        loop = asyncio.get_running_loop()
        committed = loop.time()
        while relay.relayed == 0:
            assert loop.time() - committed < 10, "the relay never moved the row"
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await ready(redis_queue) == 1


async def test_a_database_without_the_outbox_table_is_refused(
    redis_queue: RedisStreamsQueue, pg: str, postgres_schema: str
) -> None:
    producer = Producer(redis_queue, app, outbox=OutboxWriter("q", schema=postgres_schema))
    with psycopg.connect(pg) as conn:
        with pytest.raises(TransactionError, match="no outbox table"):
            await producer.dispatch(send, 1, connection=conn)
        assert conn.execute("SELECT 1").fetchone() == (1,)


async def test_a_redis_queue_without_an_outbox_says_what_to_configure(
    redis_queue: RedisStreamsQueue,
) -> None:
    with pytest.raises(UnsupportedFeatureError, match="outbox"):
        await Producer(redis_queue, app).dispatch(send, 1, connection=object())


def test_an_outbox_for_another_queue_is_refused() -> None:
    with pytest.raises(ValueError, match="'other'"):
        Producer(InMemoryQueue(), app, outbox=OutboxWriter("other"))


@pytest.mark.parametrize(
    ("ids", "error"),
    [(["1"], ValueError), ([""], ValueError), ([1, 2], ValueError), ("12", TypeError)],
    ids=["too-few", "empty", "not-str", "one-string"],
)
async def test_add_relayed_checks_its_ids(
    redis_queue: RedisStreamsQueue, ids: Any, error: type[Exception]
) -> None:
    requests = [AddRequest(body=b"a"), AddRequest(body=b"b")]
    with pytest.raises(error):
        await redis_queue.add_relayed(requests, ids, record_seconds=60)
    assert await ready(redis_queue) == 0


async def test_a_relay_record_returns_the_first_message_id(redis_queue: RedisStreamsQueue) -> None:
    [first] = await redis_queue.add_relayed([AddRequest(body=b"a")], ["7"], record_seconds=60)
    [again] = await redis_queue.add_relayed([AddRequest(body=b"a")], ["7"], record_seconds=60)
    [other] = await redis_queue.add_relayed([AddRequest(body=b"a")], ["8"], record_seconds=60)
    assert first.added
    assert (again.message_id, again.added) == (first.message_id, False)
    assert other.added
    assert other.message_id != first.message_id


def test_a_sync_producer_writes_into_the_outbox_in_the_callers_transaction(
    redis_url: str, redis_namespace: str, pg: str, outbox: str
) -> None:
    url = f"{redis_url}?namespace={redis_namespace}"
    writer = OutboxWriter("q", schema=outbox)
    with SyncProducer(url, app, outbox=writer) as producer, psycopg.connect(pg) as conn:
        rolled_back = producer.dispatch(send, 1, connection=conn)
        conn.rollback()
        kept = producer.dispatch_many(send, [2, 3], connection=conn)
        assert outbox_rows(pg, outbox) == 0, "another session saw an uncommitted row"
        conn.commit()
    assert rolled_back.startswith("outbox-")
    assert len(kept) == 2
    assert outbox_rows(pg, outbox) == 2


def test_a_sync_producer_refuses_an_outbox_for_another_queue(redis_url: str) -> None:
    with pytest.raises(ValueError, match="'other'"):
        SyncProducer(redis_url, app, outbox=OutboxWriter("other"))


async def test_a_relay_record_expires_after_record_seconds(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.add_relayed([AddRequest(body=b"a")], ["9"], record_seconds=30)
    client: Any = redis_queue._client
    ttl_ms = await client.pttl(redis_queue.keys.relay_prefix + "9")
    assert 0 < ttl_ms <= 30_000, f"the relay record's PTTL is {ttl_ms} ms, not within 30 s"
    with pytest.raises(ValueError, match="record_seconds"):
        await redis_queue.add_relayed([AddRequest(body=b"b")], ["10"], record_seconds=0)
