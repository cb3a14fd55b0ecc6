"""PostgresQueue at the edges users rely on that the conformance suite does not probe.

Ids nobody could have issued, NUL in names, how fast a blocked receive wakes (on a
notification from another handle, and at a delayed message's due time, both well
before the 1 s safety poll), what open does with the schema's version and the server's
durability setting, and what it says when the server is down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from taskrunner.errors import BackendUnavailableError, ConfigurationError, QueueClosedError
from taskrunner.queue import Delivery, Receipt, WorkerInfo
from taskrunner_backends.postgres import PostgresQueue, migrate_from_url, open_from_url
from taskrunner_backends.postgres.queue import SAFETY_POLL_SECONDS
from taskrunner_backends.postgres.schema import LATEST_VERSION, MIGRATIONS, migrate
from taskrunner_backends.postgres.testing import age_lease, with_options

from .support import Migrated, database

pytestmark = pytest.mark.postgres

# Wakes must come from a notification or a due time, so well under the safety poll.
WAKE_BOUND = 0.3
assert WAKE_BOUND < SAFETY_POLL_SECONDS / 2


@pytest.fixture
def url(postgres_url: str, postgres_schema: str) -> str:
    """A URL on the test's own (not yet created) schema."""
    return with_options(postgres_url, schema=postgres_schema)


@asynccontextmanager
async def opened(url: str, queue_name: str = "jobs") -> AsyncIterator[PostgresQueue]:
    queue = await open_from_url(url, queue_name=queue_name)
    try:
        yield queue
    finally:
        await queue.aclose()


def _delivery(message_id: str, consumer: str = "c", count: int = 1) -> Delivery:
    return Delivery(
        message_id=message_id,
        body=b"",
        delivery_count=count,
        receipt=Receipt(consumer=consumer, delivery_count=count),
    )


async def test_ids_nobody_issued_are_lost_not_errors(url: str) -> None:
    async with opened(url) as queue:
        [real] = await queue.add([b"x"])
        [held] = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=30)
        bogus = [
            _delivery(str(2**63)),  # one past bigint
            _delivery("9" * 40),
            _delivery("-1"),
            _delivery("01"),
            _delivery(" 1"),
            _delivery("abc"),
            _delivery(""),
            _delivery("\uff11"),  # a full-width digit: isdigit() but not ASCII
            _delivery(real, consumer="c\x00"),  # an owner text cannot hold
            _delivery(real, count=2**40),  # a count int4 cannot hold
        ]
        assert await queue.heartbeat(bogus) == bogus
        assert await queue.release(bogus) == bogus
        assert await queue.dead_letter(bogus, reason="r") == bogus
        assert await queue.ack(bogus) == bogus
        # The real lease was untouched by all of that.
        assert await queue.ack([held]) == []
        assert await queue.len() == 0
        assert await queue.retry_dead_letters([str(2**63), "x", "-3"]) == []
        assert await queue.purge_dead_letters([str(2**63), "x"]) == 0


async def test_nul_in_names_is_a_value_error_before_anything_changes(url: str) -> None:
    with pytest.raises(ValueError, match="queue_name"):
        await open_from_url(url, queue_name="jo\x00bs")
    async with opened(url) as queue:
        await queue.add([b"x"])
        with pytest.raises(ValueError, match="consumer"):
            await queue.receive("c\x00", max_messages=1, wait_seconds=0, lease_seconds=1)
        with pytest.raises(ValueError, match="consumer"):
            await queue.reclaim("c\x00", max_messages=1, lease_seconds=1)
        with pytest.raises(ValueError, match="instance"):
            await queue.publish_worker(
                WorkerInfo(instance="i\x00", workers=1, busy=0, average_seconds=None, seen_at=0),
                ttl_seconds=5,
            )
        with pytest.raises(ValueError, match="surrogate"):
            await queue.dead_letter([], reason="\udcff")
        stats = await queue.stats()
        assert (stats.ready, stats.in_flight, stats.dead) == (1, 0, 0)
        assert await queue.live_workers() == []


@pytest.mark.parametrize("name", [".", ".."])
async def test_a_path_step_is_refused_as_a_queue_name_built_or_opened(
    url: str, schema: Migrated, name: str
) -> None:
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        await open_from_url(url, queue_name=name)
    async with database(schema) as db:
        with pytest.raises(ConfigurationError, match="are steps of a path"):
            PostgresQueue(db, queue_name=name, conninfo=schema.url)


async def test_blocked_receive_wakes_on_an_add_from_another_handle(url: str) -> None:
    async with opened(url) as waiter, opened(url) as adder:
        await _listening(waiter)
        task = asyncio.create_task(
            waiter.receive("w", max_messages=1, wait_seconds=5, lease_seconds=30)
        )
        await _looking(waiter)
        assert not task.done()
        started = time.monotonic()
        [message_id] = await adder.add([b"wake"])
        got = await asyncio.wait_for(task, 5)
        woke = time.monotonic() - started
        assert [d.message_id for d in got] == [message_id]
        assert woke < WAKE_BOUND, f"woke {woke:.3f} s after the add"


async def test_released_message_wakes_a_waiting_receive_at_its_due_time(url: str) -> None:
    async with opened(url) as queue, opened(url) as other:
        await _listening(other)
        await queue.add([b"later"])
        [held] = await queue.receive("a", max_messages=1, wait_seconds=0, lease_seconds=30)
        delay = 0.6
        started = time.monotonic()
        assert await queue.release([held], delay_seconds=delay) == []
        got = await other.receive("b", max_messages=1, wait_seconds=5, lease_seconds=30)
        took = time.monotonic() - started
        assert [d.delivery_count for d in got] == [2]
        assert delay - 0.05 <= took < delay + WAKE_BOUND, f"delivered after {took:.3f} s"


async def test_delayed_add_wakes_a_waiting_receive_at_its_due_time(url: str) -> None:
    from taskrunner.queue import AddRequest

    async with opened(url) as queue:
        await _listening(queue)
        delay = 0.6
        started = time.monotonic()
        await queue.scheduling.add_requests([AddRequest(body=b"d", delay_seconds=delay)])
        got = await queue.receive("b", max_messages=1, wait_seconds=5, lease_seconds=30)
        took = time.monotonic() - started
        assert [d.body for d in got] == [b"d"]
        assert delay - 0.05 <= took < delay + WAKE_BOUND, f"delivered after {took:.3f} s"


async def test_aclose_wakes_a_blocked_receive_with_queue_closed(url: str) -> None:
    queue = await open_from_url(url, queue_name="jobs")
    await _listening(queue)
    task = asyncio.create_task(queue.receive("w", max_messages=1, wait_seconds=30, lease_seconds=1))
    await _looking(queue)
    started = time.monotonic()
    await queue.aclose()
    with pytest.raises(QueueClosedError):
        await asyncio.wait_for(task, 5)
    assert time.monotonic() - started < 2
    await queue.aclose()  # idempotent
    with pytest.raises(QueueClosedError):
        await queue.len()


async def test_cancelling_a_waiting_receive_propagates_and_leaves_no_task(url: str) -> None:
    async with opened(url) as queue:
        await _listening(queue)
        before = asyncio.all_tasks()
        task = asyncio.create_task(
            queue.receive("w", max_messages=1, wait_seconds=30, lease_seconds=1)
        )
        await _looking(queue)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert asyncio.all_tasks() - before == set()
        assert await queue.len() == 0  # the handle still works


async def test_migrate_never_refuses_an_unmigrated_schema(url: str) -> None:
    with pytest.raises(ConfigurationError, match="taskrunner db migrate"):
        await open_from_url(with_options(url, migrate="never"), queue_name="jobs")
    assert await migrate_from_url(url) == [f"{m.version}: {m.description}" for m in MIGRATIONS]
    assert await migrate_from_url(url) == []
    async with opened(with_options(url, migrate="never")) as queue:
        assert await queue.len() == 0


async def test_a_version_1_schema_is_upgraded_in_place_and_keeps_its_rows(
    url: str, postgres_url: str, postgres_schema: str
) -> None:
    """Version 2 adds the workers' counts; a row written at version 1 reads as unpublished."""
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        assert [
            m.version for m in await migrate(conn, postgres_schema, migrations=MIGRATIONS[:1])
        ] == [1]
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.workers (queue, instance, workers, busy, average_seconds,"
                " seen_at, expires_at) VALUES ('jobs', 'old', 3, 1, NULL, 0,"
                " clock_timestamp() + interval '1 hour')"
            ).format(sql.Identifier(postgres_schema))
        )

    assert await migrate_from_url(url) == [f"{m.version}: {m.description}" for m in MIGRATIONS[1:]]

    async with opened(with_options(url, migrate="never")) as queue:
        [old] = await queue.live_workers()
        assert (old.instance, old.workers, old.succeeded, old.failed) == ("old", 3, None, None)
        new = WorkerInfo(
            instance="new",
            workers=2,
            busy=0,
            average_seconds=0.5,
            seen_at=1.0,
            succeeded=2**40,
            failed=0,
        )
        await queue.publish_worker(new, ttl_seconds=60)
        listed = {w.instance: w for w in await queue.live_workers()}
        assert listed["new"] == new


async def test_a_schema_of_a_newer_taskrunner_is_refused(url: str, postgres_schema: str) -> None:
    await migrate_from_url(url)
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_migrations (version, description) VALUES (%s, 'x')"
            ).format(sql.Identifier(postgres_schema)),
            (LATEST_VERSION + 1,),
        )
    for mode in ("auto", "never"):
        with pytest.raises(ConfigurationError, match="newer"):
            await open_from_url(with_options(url, migrate=mode), queue_name="jobs")
    with pytest.raises(ConfigurationError, match="newer"):
        await migrate_from_url(url)


async def test_synchronous_commit_off_drops_the_durable_enqueue_claim(url: str) -> None:
    async with opened(url) as queue:
        assert queue.capabilities.durable_enqueue
    off = url + "&options=-c%20synchronous_commit%3Doff"
    async with opened(off) as queue:
        assert not queue.capabilities.durable_enqueue
        assert queue.capabilities.persistent


async def test_server_down_is_unavailable_naming_the_masked_url() -> None:
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    url = "postgresql://bob:hunter2@127.0.0.1:1/db?pool_timeout=0.5&connect_timeout=1"
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as info:
        await open_from_url(url, queue_name="jobs")
    message = str(info.value)
    assert "postgresql://bob:***@127.0.0.1:1/db" in message
    assert "hunter2" not in message
    assert time.monotonic() - started < 5


async def _listening(queue: PostgresQueue) -> None:
    """Wait (bounded) until the queue's LISTEN connection is up."""
    deadline = time.monotonic() + 5
    while not queue.listener.connected:
        assert time.monotonic() < deadline, "the LISTEN connection never came up"
        await asyncio.sleep(0.01)


async def _looking(queue: PostgresQueue) -> None:
    """Wait (bounded) until a receive on `queue` cleared the wake event to look.

    From then on an add either lands before its look or notifies its wait.
    """
    event = queue.listener.messages_event()
    deadline = time.monotonic() + 5
    while event.is_set():
        assert time.monotonic() < deadline, "the receive never started looking"
        await asyncio.sleep(0.005)


async def test_a_heartbeat_racing_a_reclaim_on_a_lapsed_lease_never_lets_both_win(
    url: str,
) -> None:
    """Exactly one wins each race: the holder keeps the lease, or the reclaimer takes it.

    The lease has lapsed but nobody has reclaimed it yet, so either statement may take
    the row first; the loser must see the winner's change (the row lock and the re-check
    of the fence), never its own stale snapshot. Both handles have their own pools, so
    the statements meet on the server, in both orders of sending.
    """
    async with opened(url) as holder, opened(url) as rival:
        for race in range(40):
            [message_id] = await holder.add([b"x"])
            [delivery] = await holder.receive(
                "holder", max_messages=1, wait_seconds=0, lease_seconds=30
            )
            assert await age_lease(holder, delivery, 60)
            beat = holder.heartbeat([delivery])
            take = rival.reclaim("rival", lease_seconds=30, max_messages=10)
            if race % 2:
                lost, taken = await asyncio.gather(beat, take)
            else:
                taken, lost = await asyncio.gather(take, beat)
            if taken:
                assert [d.message_id for d in taken] == [message_id]
                assert taken[0].delivery_count == 2
                assert lost == [delivery], "the holder kept a lease the rival took"
                assert await rival.ack(taken) == []
            else:
                assert lost == [], "neither the holder nor the rival has the message"
                assert await holder.ack([delivery]) == []


HOSTILE_CONSUMERS = [
    'a"b',
    "a\\b",
    'a\\"b',
    "a,b",
    "{a}",
    "a b",
    " ",
    "NULL",
    "''",
    "é🙂",
    "x" * 1000,
]


@pytest.mark.parametrize("consumer", HOSTILE_CONSUMERS)
async def test_fenced_calls_match_consumers_with_array_syntax_in_their_names(
    url: str, consumer: str
) -> None:
    """Owners travel as an array literal: quotes, backslashes, commas and braces in a
    consumer's name must reach the server as they are, and a look-alike must not match."""
    async with opened(url) as queue:
        await queue.add([b"a", b"b"])
        first, second = await queue.receive(
            consumer, max_messages=2, wait_seconds=0, lease_seconds=30
        )
        assert first.receipt.consumer == consumer
        assert await queue.heartbeat([first, second]) == []
        look_alikes = {consumer.replace("\\", "\\\\"), consumer.replace('"', '\\"'), consumer + " "}
        look_alikes.discard(consumer)
        strangers = [_delivery(second.message_id, name) for name in sorted(look_alikes)]
        assert await queue.ack(strangers) == strangers
        assert await queue.ack([first, second]) == []
        assert (await queue.stats()).in_flight == 0


async def test_a_ready_row_locked_elsewhere_is_skipped_now_and_taken_soon_after_the_lock_goes(
    url: str, postgres_url: str, postgres_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SKIP LOCKED edges: receive(wait 0) returns [] while the only ready row is locked by
    another transaction; a waiting receive takes it within the locked-row poll after the
    lock goes, though no NOTIFY announces a lock's end (the 1 s safety poll is too late)."""
    async with opened(url) as queue:
        await _listening(queue)
        [message_id] = await queue.add([b"x"])
        db = queue.database
        fetch = db.fetch
        answered: list[str] = []

        async def counted(action: str, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
            rows = await fetch(action, *args, **kwargs)
            answered.append(action)
            return rows

        monkeypatch.setattr(db, "fetch", counted)
        locker = await psycopg.AsyncConnection.connect(postgres_url)  # a transaction: locks last
        try:
            await locker.execute(
                sql.SQL("SELECT id FROM {}.messages WHERE id = %s FOR UPDATE").format(
                    sql.Identifier(postgres_schema)
                ),
                (int(message_id),),
            )
            assert await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=30) == []
            answered.clear()
            task = asyncio.create_task(
                queue.receive("c", max_messages=1, wait_seconds=5, lease_seconds=30)
            )
            # Its look (skipping the row) and its question "when is the next row due?"
            # have both been answered: from here on it waits.
            deadline = time.monotonic() + 5
            while answered.count("receive") < 2:
                assert time.monotonic() < deadline, "the receive never looked"
                await asyncio.sleep(0.005)
            assert not task.done()
            started = time.monotonic()
        finally:
            await locker.rollback()
            await locker.close()
        got = await asyncio.wait_for(task, 5)
        took = time.monotonic() - started
        assert [d.message_id for d in got] == [message_id]
        assert took < WAKE_BOUND, f"taken {took:.3f} s after the lock went"
