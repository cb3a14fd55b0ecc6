"""PostgresScheduling against a real server: due times, unique keys and cancel at their edges.

Times are moved with UPDATEs on the server's clock instead of sleeping. Leases are
granted the way the schema documents them (``owner`` set), since the receive path is
another module's.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import psycopg
import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import Added, AddRequest
from taskrunner_backends.postgres.db import Database
from taskrunner_backends.postgres.scheduling import PostgresScheduling
from taskrunner_backends.postgres.schema import notify_channel

from .support import Migrated, database

pytestmark = pytest.mark.postgres

QUEUE = "jobs"


def part(db: Database, queue: str = QUEUE) -> PostgresScheduling:
    return PostgresScheduling(db, queue, check_open=lambda: None)


async def rows(db: Database, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return await db.fetch("test", db.sql(query), params)


async def ready_ids(db: Database, queue: str = QUEUE) -> list[str]:
    """Ids receive would hand out now, in its order (the design's ready predicate)."""
    found = await rows(
        db,
        "SELECT id FROM {s}.messages WHERE queue = %s AND owner IS NULL"
        " AND available_at <= clock_timestamp() ORDER BY available_at, id",
        queue,
    )
    return [str(r[0]) for r in found]


async def count(db: Database) -> int:
    return int((await rows(db, "SELECT count(*) FROM {s}.messages"))[0][0])


async def test_plain_batch_is_added_in_order_and_ready(schema: Migrated) -> None:
    async with database(schema) as db:
        bodies = [b"", b"one", bytes(range(256)), b"\x00nul"]
        added = await part(db).add_requests([AddRequest(body=b) for b in bodies])
        assert all(a.added for a in added)
        ids = [a.message_id for a in added]
        assert [int(i) for i in ids] == sorted(int(i) for i in ids), "ids not in request order"
        assert await ready_ids(db) == ids
        got = await rows(db, "SELECT id, body FROM {s}.messages ORDER BY id")
        assert [bytes(r[1]) for r in got] == bodies
        assert await part(db).add_requests([]) == []


async def test_delay_counts_from_the_server_clock_and_ends_at_due_time(schema: Migrated) -> None:
    async with database(schema) as db:
        (added,) = await part(db).add_requests([AddRequest(body=b"d", delay_seconds=30.0)])
        ((gap,),) = await rows(
            db,
            "SELECT extract(epoch FROM available_at - added_at)::float8 FROM {s}.messages"
            " WHERE id = %s",
            int(added.message_id),
        )
        assert 30.0 <= gap < 30.05, gap
        assert await ready_ids(db) == []
        # Just before the due time: still delayed.
        await rows(
            db,
            "UPDATE {s}.messages SET available_at = clock_timestamp() + interval '200 ms'"
            " WHERE id = %s RETURNING id",
            int(added.message_id),
        )
        assert await ready_ids(db) == []
        # Just after it: ready.
        await rows(
            db,
            "UPDATE {s}.messages SET available_at = clock_timestamp() - interval '1 ms'"
            " WHERE id = %s RETURNING id",
            int(added.message_id),
        )
        assert await ready_ids(db) == [added.message_id]


async def test_due_at_is_the_server_instant_and_a_past_one_keeps_fifo(schema: Migrated) -> None:
    async with database(schema) as db:
        ((now,),) = await rows(db, "SELECT extract(epoch FROM clock_timestamp())::float8")
        first, due, past, ancient = await part(db).add_requests(
            [
                AddRequest(body=b"first"),
                AddRequest(body=b"due", due_at=now + 3600.5, delay_seconds=5.0),
                AddRequest(body=b"past", due_at=now - 100.0),
                AddRequest(body=b"ancient", due_at=-1e300),
            ]
        )
        ((at,),) = await rows(
            db,
            "SELECT extract(epoch FROM available_at)::float8 FROM {s}.messages WHERE id = %s",
            int(due.message_id),
        )
        assert math.isclose(at, now + 3600.5, abs_tol=1e-5), (at, now)
        # A due time in the past is ready at once, after messages added before it.
        assert await ready_ids(db) == [first.message_id, past.message_id, ancient.message_id]
        (far,) = await part(db).add_requests([AddRequest(body=b"far", due_at=1e300)])
        assert far.message_id not in await ready_ids(db)


async def test_every_add_notifies_the_queue_channel(schema: Migrated) -> None:
    connect = psycopg.AsyncConnection.connect(schema.url, autocommit=True)
    async with database(schema) as db, await connect as listen:
        await listen.execute(f'LISTEN "{notify_channel(schema.name)}"')
        scheduling = part(db)
        await scheduling.add_requests([AddRequest(body=b"plain")])
        await scheduling.add_requests([AddRequest(body=b"keyed", unique_key="k")])
        payloads = []
        gen = listen.notifies(timeout=5.0, stop_after=2)
        async for note in gen:
            payloads.append((note.channel, note.payload))
        assert payloads == [(notify_channel(schema.name), QUEUE)] * 2


async def test_held_unique_key_adds_nothing_and_returns_the_holder(schema: Migrated) -> None:
    async with database(schema) as db:
        scheduling = part(db)
        first, plain, second = await scheduling.add_requests(
            [
                AddRequest(body=b"1", unique_key="k"),
                AddRequest(body=b"plain"),
                AddRequest(body=b"2", unique_key="k"),
            ]
        )
        assert first.added
        assert plain.added
        assert second == Added(message_id=first.message_id, added=False)
        (third,) = await scheduling.add_requests([AddRequest(body=b"3", unique_key="k")])
        assert third == Added(message_id=first.message_id, added=False)
        # Keys are per queue.
        (other,) = await part(db, "other").add_requests([AddRequest(body=b"o", unique_key="k")])
        assert other.added
        assert await count(db) == 3


async def test_concurrent_unique_adds_from_several_connections_add_exactly_one(
    schema: Migrated,
) -> None:
    async with (
        database(schema) as a,
        database(schema) as b,
        database(schema) as c,
        database(schema) as d,
    ):
        parts = [part(x) for x in (a, b, c, d)] * 3
        for round_ in range(5):
            key = f"race-{round_}"
            results = await asyncio.gather(
                *(p.add_requests([AddRequest(body=b"x", unique_key=key)]) for p in parts)
            )
            winners = [r[0] for r in results if r[0].added]
            assert len(winners) == 1, results
            assert {r[0].message_id for r in results} == {winners[0].message_id}
        assert await count(a) == 5


async def test_batches_naming_keys_in_opposite_orders_do_not_deadlock(schema: Migrated) -> None:
    async with database(schema) as a, database(schema) as b:
        keys = [f"k{i}" for i in range(20)]
        forward = [AddRequest(body=k.encode(), unique_key=k) for k in keys]
        backward = list(reversed(forward))
        for _ in range(3):
            one, two = await asyncio.gather(
                part(a).add_requests(forward), part(b).add_requests(backward)
            )
            by_key = {k: x.message_id for k, x in zip(keys, one, strict=True)}
            assert {k: x.message_id for k, x in zip(reversed(keys), two, strict=True)} == by_key
        assert await count(a) == 20


async def test_unique_key_is_held_through_a_release_until_the_row_goes(schema: Migrated) -> None:
    async with database(schema) as db:
        scheduling = part(db)
        (first,) = await scheduling.add_requests([AddRequest(body=b"1", unique_key="k")])
        mid = int(first.message_id)
        # Leased, then released with a delay: the row and its key stay.
        await rows(
            db,
            "UPDATE {s}.messages SET owner = 'c', delivery_count = 1,"
            " leased_at = clock_timestamp() WHERE id = %s RETURNING id",
            mid,
        )
        (held,) = await scheduling.add_requests([AddRequest(body=b"2", unique_key="k")])
        assert held == Added(message_id=first.message_id, added=False)
        await rows(
            db,
            "UPDATE {s}.messages SET owner = NULL, available_at = clock_timestamp() + interval"
            " '1 hour' WHERE id = %s RETURNING id",
            mid,
        )
        (held,) = await scheduling.add_requests([AddRequest(body=b"2", unique_key="k")])
        assert held == Added(message_id=first.message_id, added=False)
        # Acked (the row deleted): the key is free.
        await rows(db, "DELETE FROM {s}.messages WHERE id = %s RETURNING id", mid)
        (fresh,) = await scheduling.add_requests([AddRequest(body=b"3", unique_key="k")])
        assert fresh.added
        assert fresh.message_id != first.message_id


async def test_unique_key_is_freed_after_unique_seconds_never_before(schema: Migrated) -> None:
    async with database(schema) as db:
        scheduling = part(db)
        (first,) = await scheduling.add_requests(
            [AddRequest(body=b"1", unique_key="k", unique_seconds=60.0)]
        )
        ((hold,),) = await rows(
            db,
            "SELECT extract(epoch FROM unique_until - added_at)::float8 FROM {s}.messages"
            " WHERE id = %s",
            int(first.message_id),
        )
        assert 60.0 <= hold < 60.05, hold
        await rows(
            db,
            "UPDATE {s}.messages SET unique_until = clock_timestamp() + interval '300 ms'"
            " RETURNING id",
        )
        (held,) = await scheduling.add_requests([AddRequest(body=b"2", unique_key="k")])
        assert held == Added(message_id=first.message_id, added=False), "freed before"
        await rows(
            db,
            "UPDATE {s}.messages SET unique_until = clock_timestamp() - interval '1 ms'"
            " RETURNING id",
        )
        (fresh,) = await scheduling.add_requests([AddRequest(body=b"3", unique_key="k")])
        assert fresh.added, "not freed after unique_seconds"
        # The old message stays queued, without the key.
        assert await ready_ids(db) == [first.message_id, fresh.message_id]
        (again,) = await scheduling.add_requests([AddRequest(body=b"4", unique_key="k")])
        assert again == Added(message_id=fresh.message_id, added=False)


async def test_unique_seconds_zero_holds_the_key_not_at_all(schema: Migrated) -> None:
    async with database(schema) as db:
        first, second = await part(db).add_requests(
            [
                AddRequest(body=b"1", unique_key="z", unique_seconds=0.0),
                AddRequest(body=b"2", unique_key="z"),
            ]
        )
        assert first.added
        assert second.added


async def test_cancel_removes_only_unleased_rows_and_frees_their_keys(schema: Migrated) -> None:
    async with database(schema) as db:
        scheduling = part(db)
        ready, delayed, leased, keyed = await scheduling.add_requests(
            [
                AddRequest(body=b"r"),
                AddRequest(body=b"d", delay_seconds=100.0),
                AddRequest(body=b"l"),
                AddRequest(body=b"k", unique_key="k"),
            ]
        )
        await rows(
            db,
            "UPDATE {s}.messages SET owner = 'c', delivery_count = 1,"
            " leased_at = clock_timestamp() WHERE id = %s RETURNING id",
            int(leased.message_id),
        )
        (elsewhere,) = await part(db, "other").add_requests([AddRequest(body=b"o")])
        ids = [
            ready.message_id,
            delayed.message_id,
            leased.message_id,
            keyed.message_id,
            ready.message_id,
            elsewhere.message_id,
            "0" + ready.message_id,
            "",
            "x",
            "-1",
            str(2**63),
            "99999999",
        ]
        assert await scheduling.cancel(ids) == [True, True, False, True] + [False] * 8
        assert await scheduling.cancel([ready.message_id, leased.message_id]) == [False, False]
        assert await ready_ids(db, "other") == [elsewhere.message_id]
        (fresh,) = await scheduling.add_requests([AddRequest(body=b"k2", unique_key="k")])
        assert fresh.added
        assert await scheduling.cancel([]) == []


async def test_invalid_requests_raise_and_add_nothing(schema: Migrated) -> None:
    async with database(schema) as db:
        scheduling = part(db)
        good = AddRequest(body=b"good")
        type_errors: list[Any] = [
            b"body",
            None,
            AddRequest(body="text"),  # type: ignore[arg-type]
            AddRequest(body=bytearray(b"x")),  # type: ignore[arg-type]
            AddRequest(body=b"x", delay_seconds="1"),  # type: ignore[arg-type]
            AddRequest(body=b"x", due_at="1"),  # type: ignore[arg-type]
            AddRequest(body=b"x", unique_key=5),  # type: ignore[arg-type]
        ]
        value_errors: list[Any] = [
            AddRequest(body=b"x", delay_seconds=-1.0),
            AddRequest(body=b"x", delay_seconds=math.nan),
            AddRequest(body=b"x", delay_seconds=math.inf),
            AddRequest(body=b"x", due_at=math.nan),
            AddRequest(body=b"x", unique_key=""),
            AddRequest(body=b"x", unique_key="a\x00b"),
            AddRequest(body=b"x", unique_key="\udc80"),
            AddRequest(body=b"x", unique_key="k", unique_seconds=-1.0),
            AddRequest(body=b"x", unique_key="k", unique_seconds=math.nan),
        ]
        for errors, cases in ((TypeError, type_errors), (ValueError, value_errors)):
            for bad in cases:
                for batch in ([good, bad], [bad, good]):
                    with pytest.raises(errors):
                        await scheduling.add_requests(batch)
        with pytest.raises(TypeError):
            await scheduling.add_requests(good)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await scheduling.cancel("1")
        assert await count(db) == 0


async def test_a_closed_handle_refuses_every_call_first(schema: Migrated) -> None:
    def closed() -> None:
        raise QueueClosedError("closed")

    async with database(schema) as db:
        scheduling = PostgresScheduling(db, QUEUE, check_open=closed)
        for call in (
            lambda: scheduling.add_requests([]),
            lambda: scheduling.add_requests([AddRequest(body="bad")]),  # type: ignore[arg-type]
            lambda: scheduling.cancel([]),
            lambda: scheduling.cancel(["1"]),
        ):
            with pytest.raises(QueueClosedError):
                await call()
