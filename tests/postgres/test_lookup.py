"""PostgresLookup against a real server: each state from the rows, at its time edges.

Leases, releases and dead letters are written as the schema documents them (the
receive path is another module's); times are moved with UPDATEs on the server's clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import AddRequest, MessageState
from taskrunner_backends.postgres.db import Database
from taskrunner_backends.postgres.lookup import PostgresLookup
from taskrunner_backends.postgres.scheduling import PostgresScheduling

from .support import Migrated, database

pytestmark = pytest.mark.postgres

QUEUE = "jobs"


def part(db: Database, queue: str = QUEUE) -> PostgresLookup:
    return PostgresLookup(db, queue, check_open=lambda: None)


async def rows(db: Database, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return await db.fetch("test", db.sql(query), params)


async def server_now(db: Database) -> float:
    ((now,),) = await rows(db, "SELECT extract(epoch FROM clock_timestamp())::float8")
    return float(now)


async def add(db: Database, *requests: AddRequest, queue: str = QUEUE) -> list[str]:
    added = await PostgresScheduling(db, queue, check_open=lambda: None).add_requests(requests)
    return [a.message_id for a in added]


async def lease(db: Database, message_id: str, consumer: str, idle: str = "0 s") -> None:
    """Grant a lease as receive does, `idle` ago."""
    await rows(
        db,
        "UPDATE {s}.messages SET owner = %s, delivery_count = delivery_count + 1,"
        " leased_at = clock_timestamp() - %s::interval, lease_seconds = 30,"
        " expires_at = clock_timestamp() - %s::interval + interval '30 s'"
        " WHERE id = %s RETURNING id",
        consumer,
        idle,
        idle,
        int(message_id),
    )


async def release(db: Database, message_id: str, delay: str = "0 s") -> None:
    await rows(
        db,
        "UPDATE {s}.messages SET owner = NULL, expires_at = NULL,"
        " available_at = clock_timestamp() + %s::interval WHERE id = %s RETURNING id",
        delay,
        int(message_id),
    )


async def dead_letter(db: Database, message_id: str, reason: bytes) -> None:
    await rows(
        db,
        "WITH gone AS (DELETE FROM {s}.messages WHERE id = %s"
        " RETURNING queue, id, body, delivery_count, added_at)"
        " INSERT INTO {s}.dead_letters (queue, original_id, body, reason, delivery_count,"
        " added_at) SELECT queue, id, body, %s, delivery_count, added_at FROM gone RETURNING id",
        int(message_id),
        reason,
    )


async def one(db: Database, message_id: str) -> MessageState | None:
    (state,) = await part(db).lookup([message_id])
    return state


async def test_a_message_not_yet_delivered_is_ready_with_count_0(schema: Migrated) -> None:
    async with database(schema) as db:
        before = await server_now(db)
        bodies = [b"", b"plain", bytes(range(256))]
        ids = await add(db, *(AddRequest(body=b) for b in bodies))
        after = await server_now(db)
        states = await part(db).lookup(ids)
        for message_id, body, state in zip(ids, bodies, states, strict=True):
            assert state is not None
            assert (state.message_id, state.state, state.delivery_count, state.body) == (
                message_id,
                "ready",
                0,
                body,
            )
            assert state.added_at is not None
            assert before <= state.added_at <= after
            assert state.due_at is None
            assert state.consumer is None
            assert state.idle_seconds is None
            assert state.dead_reason is None


async def test_a_delayed_message_is_delayed_until_due_then_ready(schema: Migrated) -> None:
    async with database(schema) as db:
        now = await server_now(db)
        by_delay, by_due = await add(
            db,
            AddRequest(body=b"d", delay_seconds=100.0),
            AddRequest(body=b"a", due_at=now + 200.0),
        )
        first, second = await part(db).lookup([by_delay, by_due])
        assert first is not None
        assert first.state == "delayed"
        assert first.delivery_count == 0
        assert first.due_at is not None
        assert first.added_at is not None
        assert abs(first.due_at - (first.added_at + 100.0)) < 1e-5
        assert second is not None
        assert second.state == "delayed"
        assert second.due_at is not None
        assert abs(second.due_at - (now + 200.0)) < 1e-5
        await rows(
            db,
            "UPDATE {s}.messages SET available_at = clock_timestamp() + interval '300 ms'"
            " WHERE id = %s RETURNING id",
            int(by_delay),
        )
        state = await one(db, by_delay)
        assert state is not None
        assert state.state == "delayed", "ready before its due time"
        await rows(
            db,
            "UPDATE {s}.messages SET available_at = clock_timestamp() - interval '1 ms'"
            " WHERE id = %s RETURNING id",
            int(by_delay),
        )
        state = await one(db, by_delay)
        assert state is not None
        assert state.state == "ready"
        assert state.due_at is None


async def test_a_leased_message_is_running_with_holder_count_and_idle_time(
    schema: Migrated,
) -> None:
    async with database(schema) as db:
        a, b = await add(db, AddRequest(body=b"a"), AddRequest(body=b"b"))
        await lease(db, a, "first", "2 s")
        await lease(db, b, "second")
        first, second = await part(db).lookup([a, b])
        assert first is not None
        assert (first.state, first.consumer, first.delivery_count) == (
            "running",
            "first",
            1,
        )
        assert first.idle_seconds is not None
        assert 2.0 <= first.idle_seconds < 2.5
        assert first.body == b"a"
        assert second is not None
        assert (second.state, second.consumer) == ("running", "second")
        assert second.idle_seconds is not None
        assert 0.0 <= second.idle_seconds < 0.5
        # Lapsed and reclaimed by another consumer: its holder and a higher count.
        await lease(db, a, "second", "0 s")
        state = await one(db, a)
        assert state is not None
        assert (state.consumer, state.delivery_count) == ("second", 2)


async def test_a_released_message_is_delayed_or_ready_with_its_count(schema: Migrated) -> None:
    async with database(schema) as db:
        a, b = await add(db, AddRequest(body=b"a"), AddRequest(body=b"b"))
        for message_id in (a, b):
            await lease(db, message_id, "c")
        await release(db, a)
        await release(db, b, "100 s")
        ready, delayed = await part(db).lookup([a, b])
        assert ready is not None
        assert (ready.state, ready.delivery_count) == ("ready", 1)
        assert ready.consumer is None
        assert ready.idle_seconds is None
        assert delayed is not None
        assert (delayed.state, delayed.delivery_count) == ("delayed", 1)
        assert delayed.due_at is not None
        assert delayed.due_at > await server_now(db) + 99.0


async def test_a_dead_lettered_message_is_dead_under_its_original_id(schema: Migrated) -> None:
    async with database(schema) as db:
        a, b = await add(db, AddRequest(body=b"\x00body"), AddRequest(body=b"b"))
        await lease(db, a, "c")
        before = await server_now(db)
        await dead_letter(db, a, "too many tries: ü\x00".encode())
        await dead_letter(db, b, b"\xff not utf-8")
        after = await server_now(db)
        dead, odd = await part(db).lookup([a, b])
        assert dead is not None
        assert (dead.message_id, dead.state, dead.delivery_count, dead.body) == (
            a,
            "dead",
            1,
            b"\x00body",
        )
        assert dead.dead_reason == "too many tries: ü\x00"
        assert dead.dead_at is not None
        assert before <= dead.dead_at <= after
        assert dead.added_at is not None
        assert dead.added_at <= before
        assert odd is not None
        assert odd.state == "dead"
        assert odd.dead_reason is not None
        assert odd.dead_reason.endswith(" not utf-8")


async def test_acked_cancelled_unknown_and_foreign_ids_have_no_state(schema: Migrated) -> None:
    async with database(schema) as db:
        acked, cancelled, kept = await add(
            db, AddRequest(body=b"1"), AddRequest(body=b"2"), AddRequest(body=b"3")
        )
        (foreign,) = await add(db, AddRequest(body=b"o"), queue="other")
        await rows(db, "DELETE FROM {s}.messages WHERE id = %s RETURNING id", int(acked))
        cancel = PostgresScheduling(db, QUEUE, check_open=lambda: None).cancel
        assert await cancel([cancelled]) == [True]
        malformed = [
            "",
            " ",
            "0",
            "-1",
            "+" + kept,
            "0" + kept,
            kept + " ",
            kept + ".0",
            "1-1",
            str(2**63),
            "9" * 40,
            "\x00",
            "ü",
            "\u0661",  # ARABIC-INDIC DIGIT ONE: isdigit() but not ASCII
            "x" * 10_000,
        ]
        states = await part(db).lookup([acked, cancelled, foreign, *malformed, kept, kept])
        assert states[:-2] == [None] * (3 + len(malformed))
        assert [s.state if s else None for s in states[-2:]] == ["ready", "ready"]
        assert await part(db).lookup([]) == []
        with pytest.raises(TypeError):
            await part(db).lookup(kept)


async def test_a_closed_handle_refuses_lookup_first(schema: Migrated) -> None:
    def closed() -> None:
        raise QueueClosedError("closed")

    async with database(schema) as db:
        lookup = PostgresLookup(db, QUEUE, check_open=closed)
        for ids in ([], ["1"], "1"):
            with pytest.raises(QueueClosedError):
                await asyncio.wait_for(lookup.lookup(ids), 2.0)
