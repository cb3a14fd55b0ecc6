"""PostgresLeadership against a real server: lease edges, fencing tokens, fire-once.

Lapses are made with UPDATEs of ``expires_at`` on the server's clock, not by sleeping.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import psycopg
import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import FireRecord, LeaderLease
from taskrunner_backends.postgres.db import Database
from taskrunner_backends.postgres.leadership import PostgresLeadership
from taskrunner_backends.postgres.schema import notify_channel

from .support import Migrated, database

pytestmark = pytest.mark.postgres

QUEUE = "jobs"


def part(db: Database, queue: str = QUEUE) -> PostgresLeadership:
    return PostgresLeadership(db, queue, check_open=lambda: None)


async def rows(db: Database, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return await db.fetch("test", db.sql(query), params)


async def expire_in(db: Database, name: str, interval: str) -> None:
    """Move election `name`'s expiry to now + `interval` on the server's clock."""
    await rows(
        db,
        "UPDATE {s}.leaders SET expires_at = clock_timestamp() + %s::interval"
        " WHERE name = %s RETURNING name",
        interval,
        name,
    )


async def messages(db: Database) -> list[tuple[str, bytes]]:
    found = await rows(db, "SELECT id, body FROM {s}.messages ORDER BY id")
    return [(str(r[0]), bytes(r[1])) for r in found]


async def acquire(p: PostgresLeadership, name: str, holder: str, ttl: float = 30.0) -> LeaderLease:
    lease = await p.acquire_leadership(name, holder, ttl_seconds=ttl)
    assert lease is not None, f"{holder} could not take {name}"
    return lease


async def test_a_live_lease_excludes_others_until_just_after_its_expiry(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        lease = await acquire(p, "e", "a", ttl=30.0)
        assert (lease.name, lease.holder, lease.token) == ("e", "a", 1)
        assert 29.9 < lease.remaining_seconds <= 30.0
        assert await p.acquire_leadership("e", "b", ttl_seconds=30.0) is None
        await expire_in(db, "e", "300 ms")
        assert await p.acquire_leadership("e", "b", ttl_seconds=30.0) is None, "taken early"
        current = await p.current_leader("e")
        assert current is not None
        assert current.holder == "a"
        assert 0.0 < current.remaining_seconds <= 0.3
        await expire_in(db, "e", "-1 ms")
        assert await p.current_leader("e") is None, "a lapsed lease is current"
        taken = await acquire(p, "e", "b")
        assert taken.token == 2
        # Elections are per queue.
        assert (await acquire(part(db, "other"), "e", "c")).token == 1


async def test_remaining_seconds_is_read_on_the_server_clock(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        await acquire(p, "e", "a", ttl=1.0)
        await expire_in(db, "e", "100 s")
        current = await p.current_leader("e")
        assert current is not None
        assert 99.9 < current.remaining_seconds <= 100.0


async def test_tokens_grow_on_each_change_of_holder_and_retake_never_on_renewal(
    schema: Migrated,
) -> None:
    async with database(schema) as db:
        p = part(db)
        first = await acquire(p, "e", "a")
        again = await acquire(p, "e", "a", ttl=60.0)
        assert again.token == first.token
        assert again.remaining_seconds > 59.0
        renewed = await p.renew_leadership("e", "a", first.token, ttl_seconds=90.0)
        assert renewed is not None
        assert renewed.token == first.token
        assert renewed.remaining_seconds > 89.0
        # Lapsed, nobody took it: renew still works and keeps the token.
        await expire_in(db, "e", "-1 s")
        renewed = await p.renew_leadership("e", "a", first.token, ttl_seconds=30.0)
        assert renewed is not None
        assert renewed.token == first.token
        # Lapsed and re-acquired by the same holder: a retake, a new token.
        await expire_in(db, "e", "-1 s")
        retake = await acquire(p, "e", "a")
        assert retake.token == first.token + 1
        # Resigned: the token stays in the row; the next holder gets a larger one.
        assert await p.resign_leadership("e", "a", retake.token) is True
        assert await p.current_leader("e") is None
        ((token,),) = await rows(db, "SELECT token FROM {s}.leaders WHERE name = 'e'")
        assert token == retake.token
        assert await p.resign_leadership("e", "a", retake.token) is False, "resigned twice"
        assert await p.renew_leadership("e", "a", retake.token, ttl_seconds=5.0) is None
        after = await acquire(part(db), "e", "a")
        assert after.token == retake.token + 1
        other = await acquire(p, "e2", "a")
        assert other.token == 1, "tokens are per election"


async def test_stale_renew_and_resign_change_nothing(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        old = await acquire(p, "e", "a")
        await expire_in(db, "e", "-1 ms")
        current = await acquire(p, "e", "b")
        before = await rows(db, "SELECT holder, token, expires_at FROM {s}.leaders")
        assert await p.renew_leadership("e", "a", old.token, ttl_seconds=60.0) is None
        assert await p.renew_leadership("e", "b", old.token, ttl_seconds=60.0) is None
        assert await p.renew_leadership("e", "a", current.token, ttl_seconds=60.0) is None
        assert await p.resign_leadership("e", "a", old.token) is False
        assert await p.resign_leadership("e", "b", old.token) is False
        assert await p.resign_leadership("e", "a", current.token) is False
        assert await p.renew_leadership("nobody", "a", 1, ttl_seconds=60.0) is None
        assert await rows(db, "SELECT holder, token, expires_at FROM {s}.leaders") == before


async def test_concurrent_acquires_from_several_connections_elect_one(schema: Migrated) -> None:
    async with database(schema) as a, database(schema) as b, database(schema) as c:
        parts = [part(x) for x in (a, b, c)] * 3
        for round_ in range(5):
            name = f"race-{round_}"
            got = await asyncio.gather(
                *(
                    x.acquire_leadership(name, f"h{i}", ttl_seconds=30.0)
                    for i, x in enumerate(parts)
                )
            )
            winners = [lease for lease in got if lease is not None]
            assert len(winners) == 1, got
            assert winners[0].token == 1


async def test_an_instant_fires_once_and_only_under_the_latest_token(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        lease = await acquire(p, "e", "a")
        fired = await p.fire(
            election="e", token=lease.token, schedule="s", instant=100.0, body=b"1"
        )
        assert fired is not None
        assert await p.fire_records(["s", "unknown"]) == {
            "s": FireRecord(schedule="s", instant=100.0, message_id=fired)
        }
        for instant in (100.0, 99.5):
            again = await p.fire(
                election="e", token=lease.token, schedule="s", instant=instant, body=b"x"
            )
            assert again is None, f"instant {instant} fired after 100"
        later = await p.fire(
            election="e", token=lease.token, schedule="s", instant=100.25, body=b"2"
        )
        assert later is not None
        # Lapsed, nobody took it: the token is still the latest.
        await expire_in(db, "e", "-1 ms")
        lapsed = await p.fire(election="e", token=lease.token, schedule="s", instant=101, body=b"3")
        assert lapsed is not None
        # Taken by another: the old token fires nothing, the new one does.
        taken = await acquire(p, "e", "b")
        stale = await p.fire(election="e", token=lease.token, schedule="s", instant=200, body=b"x")
        assert stale is None
        unknown = await p.fire(election="nobody", token=1, schedule="s", instant=300, body=b"x")
        assert unknown is None
        assert [m[1] for m in await messages(db)] == [b"1", b"2", b"3"]
        records = await p.fire_records(["s"])
        assert records["s"].instant == 101.0
        assert records["s"].message_id == lapsed
        # Resigned: the resigned token still fires until somebody takes the election.
        assert await p.resign_leadership("e", "b", taken.token)
        after = await p.fire(election="e", token=taken.token, schedule="s", instant=102, body=b"4")
        assert after is not None
        await acquire(p, "e", "c")
        none = await p.fire(election="e", token=taken.token, schedule="s", instant=103, body=b"x")
        assert none is None
        assert [m[1] for m in await messages(db)] == [b"1", b"2", b"3", b"4"]


async def test_concurrent_fires_of_one_instant_add_one_message(schema: Migrated) -> None:
    async with database(schema) as a, database(schema) as b, database(schema) as c:
        lease = await acquire(part(a), "e", "a")
        parts = [part(x) for x in (a, b, c)] * 3
        for instant in (1.0, 2.0, 3.0):
            got = await asyncio.gather(
                *(
                    x.fire(
                        election="e", token=lease.token, schedule="s", instant=instant, body=b"f"
                    )
                    for x in parts
                )
            )
            assert len([g for g in got if g is not None]) == 1, got
        assert len(await messages(a)) == 3


async def test_a_fire_notifies_the_queue_channel_and_adds_a_ready_message(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        lease = await acquire(p, "e", "a")
        async with await psycopg.AsyncConnection.connect(schema.url, autocommit=True) as listen:
            await listen.execute(f'LISTEN "{notify_channel(schema.name)}"')
            fired = await p.fire(
                election="e", token=lease.token, schedule="s", instant=1.0, body=b"\x00f"
            )
            notes = [n async for n in listen.notifies(timeout=5.0, stop_after=1)]
            assert [n.payload for n in notes] == [QUEUE]
        ready = await rows(
            db,
            "SELECT id, body, delivery_count FROM {s}.messages WHERE owner IS NULL"
            " AND available_at <= clock_timestamp()",
        )
        assert [(str(r[0]), bytes(r[1]), r[2]) for r in ready] == [(fired, b"\x00f", 0)]


async def test_invalid_arguments_raise_and_change_nothing(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        good = await acquire(p, "held", "a")
        before = await rows(db, "SELECT * FROM {s}.leaders")
        calls: list[tuple[type[Exception], Any]] = []
        for ttl in (0.0, -1.0, math.nan, math.inf):
            calls.append((ValueError, lambda t=ttl: p.acquire_leadership("e", "a", ttl_seconds=t)))
            calls.append(
                (
                    ValueError,
                    lambda t=ttl: p.renew_leadership("held", "a", good.token, ttl_seconds=t),
                )
            )
        for name, holder in (("", "a"), ("e", ""), ("e\x00", "a"), ("e", "a\x00")):
            calls.append(
                (ValueError, lambda n=name, h=holder: p.acquire_leadership(n, h, ttl_seconds=1.0))
            )
        calls += [
            (TypeError, lambda: p.acquire_leadership("e", "a", ttl_seconds="1")),  # type: ignore[arg-type]
            (TypeError, lambda: p.renew_leadership("held", "a", "1", ttl_seconds=1.0)),  # type: ignore[arg-type]
            (TypeError, lambda: p.resign_leadership("held", "a", True)),
            (ValueError, lambda: p.resign_leadership("held", "a", -1)),
            (ValueError, lambda: p.resign_leadership("held", "a", 2**63)),
            (ValueError, lambda: p.current_leader("")),
            (TypeError, lambda: p.fire_records("s")),
            (ValueError, lambda: p.fire_records(["s", ""])),
        ]

        def fire(**change: Any) -> Any:
            arguments: dict[str, Any] = {
                "election": "held",
                "token": good.token,
                "schedule": "s",
                "instant": 1.0,
                "body": b"x",
            }
            arguments.update(change)
            return lambda: p.fire(**arguments)

        calls += [
            (TypeError, fire(body="x")),
            (TypeError, fire(body=bytearray(b"x"))),
            (TypeError, fire(instant="1")),
            (ValueError, fire(instant=math.nan)),
            (ValueError, fire(instant=-math.inf)),
            (ValueError, fire(schedule="")),
            (ValueError, fire(schedule="s\x00")),
            (ValueError, fire(election="")),
        ]
        for expected, call in calls:
            with pytest.raises(expected):
                await call()
        assert await rows(db, "SELECT * FROM {s}.leaders") == before
        assert await p.fire_records(["s"]) == {}
        assert await messages(db) == []


async def test_a_closed_handle_refuses_every_call_first(schema: Migrated) -> None:
    def closed() -> None:
        raise QueueClosedError("closed")

    async with database(schema) as db:
        p = PostgresLeadership(db, QUEUE, check_open=closed)
        for call in (
            lambda: p.acquire_leadership("e", "a", ttl_seconds=1.0),
            lambda: p.acquire_leadership("", "", ttl_seconds=-1.0),
            lambda: p.renew_leadership("e", "a", 1, ttl_seconds=1.0),
            lambda: p.resign_leadership("e", "a", 1),
            lambda: p.current_leader("e"),
            lambda: p.fire(election="e", token=1, schedule="s", instant=1.0, body=b"x"),
            lambda: p.fire_records([]),
        ):
            with pytest.raises(QueueClosedError):
                await call()
