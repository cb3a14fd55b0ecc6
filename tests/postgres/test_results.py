"""PostgresResults against a real server: TTL edges, batches, pruning, notification, waits.

Expiries are moved with UPDATEs on the server's clock instead of sleeping.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from taskrunner.clock import SystemClock
from taskrunner.errors import QueueClosedError
from taskrunner.queue import ResultWrite
from taskrunner.testing import FakeClock
from taskrunner_backends.postgres import results as results_module
from taskrunner_backends.postgres.db import Database
from taskrunner_backends.postgres.listener import Listener
from taskrunner_backends.postgres.results import PostgresResults, ResultWatch
from taskrunner_backends.postgres.schema import notify_channel

from .support import Migrated, database

pytestmark = pytest.mark.postgres

QUEUE = "jobs"


def part(
    db: Database,
    queue: str = QUEUE,
    *,
    listener: ResultWatch | None = None,
    clock: Any = None,
) -> PostgresResults:
    return PostgresResults(
        db,
        queue,
        check_open=lambda: None,
        listener=lambda: listener,
        clock=clock or SystemClock(),
    )


async def rows(db: Database, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return await db.fetch("test", db.sql(query), params)


async def expire_in(db: Database, message_id: str, interval: str) -> None:
    """Move the expiry of `message_id`'s result to now + `interval` on the server's clock."""
    await rows(
        db,
        "UPDATE {s}.results SET expires_at = clock_timestamp() + %s::interval"
        " WHERE message_id = %s RETURNING message_id",
        interval,
        message_id,
    )


async def until(condition: Callable[[], bool], limit: float = 5.0) -> None:
    """Bounded polling: wait until `condition()` holds, failing after `limit` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        assert loop.time() < deadline, f"condition still false after {limit}s"
        await asyncio.sleep(0.005)


def watching(watcher: Watcher, count: int) -> bool:
    return watcher.watched >= count


def put(message_id: str, body: bytes, ttl: float = 60.0) -> ResultWrite:
    return ResultWrite(message_id=message_id, body=body, ttl_seconds=ttl)


class Watcher:
    """A minimal `ResultWatch` on its own LISTEN connection (independent of listener.py)."""

    def __init__(self, schema: Migrated, queue: str) -> None:
        self._schema = schema
        self._queue = queue
        self._events: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.connected = False
        self.watched = 0

    async def __aenter__(self) -> Watcher:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._ready.wait(), 5.0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.wait([self._task])

    async def _run(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._schema.url, autocommit=True) as conn:
            await conn.execute(f'LISTEN "{notify_channel(self._schema.name)}.results"')
            self.connected = True
            self._ready.set()
            async for note in conn.notifies():
                queue, message_id = json.loads(note.payload)
                if queue == self._queue:
                    for event in self._events.get(message_id, ()):
                        event.set()

    def watch_result(self, message_id: str) -> asyncio.Event:
        self.watched += 1
        event = asyncio.Event()
        self._events.setdefault(message_id, set()).add(event)
        return event

    def unwatch_result(self, message_id: str, event: asyncio.Event) -> None:
        self._events[message_id].discard(event)
        if not self._events[message_id]:
            del self._events[message_id]


async def test_result_is_returned_byte_for_byte_until_its_ttl_and_not_after(
    schema: Migrated,
) -> None:
    async with database(schema) as db:
        p = part(db)
        bodies = {"a": b"", "b": bytes(range(256)), "c": b"\x00" * 1000, "d": b"x" * 1_000_000}
        await p.put_results([put(k, v) for k, v in bodies.items()])
        assert await p.get_results(list(bodies)) == list(bodies.values())
        ((left,),) = await rows(
            db,
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM {s}.results"
            " WHERE message_id = 'a'",
        )
        assert 59.5 < left <= 60.0
        await expire_in(db, "a", "300 ms")
        assert await p.get_results(["a"]) == [b""], "gone before its TTL"
        assert await p.wait_result("a", timeout_seconds=0) == b""
        await expire_in(db, "a", "-1 ms")
        assert await p.get_results(["a", "b"]) == [None, bodies["b"]], "returned after its TTL"
        assert await p.wait_result("a", timeout_seconds=0) is None
        assert await p.delete_results(["a", "b", "b", "zzz"]) == 1, "an expired one counted"
        assert await p.get_results(["b"]) == [None]


async def test_later_write_replaces_and_restarts_the_ttl_last_in_a_batch_wins(
    schema: Migrated,
) -> None:
    async with database(schema) as db, database(schema) as other:
        p = part(db)
        await p.put_results([put("m", b"old", 60.0)])
        await expire_in(db, "m", "100 ms")
        await part(other).put_results([put("m", b"new", 30.0)])
        assert await p.get_results(["m"]) == [b"new"]
        ((left,),) = await rows(
            db,
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM {s}.results",
        )
        assert 29.5 < left <= 30.0, "the rewrite did not restart the TTL"
        await p.put_results([put("n", b"1"), put("m", b"2"), put("n", b"3"), put("n", b"4", 5)])
        assert await p.get_results(["m", "n"]) == [b"2", b"4"]
        # An expired result is rewritten like any other.
        await expire_in(db, "m", "-1 s")
        await p.put_results([put("m", b"again")])
        assert await p.get_results(["m"]) == [b"again"]


async def test_results_are_per_id_and_per_queue(schema: Migrated) -> None:
    async with database(schema) as db:
        p, q = part(db), part(db, "other")
        await p.put_results([put("id", b"p"), put("ID", b"P"), put("id-2", b"p2")])
        await q.put_results([put("id", b"q")])
        assert await p.get_results(["id", "ID", "id-2", "i", "id ", "unknown"]) == [
            b"p",
            b"P",
            b"p2",
            None,
            None,
            None,
        ]
        assert await q.get_results(["id", "ID"]) == [b"q", None]
        assert await p.delete_results(["id"]) == 1
        assert await q.get_results(["id"]) == [b"q"]
        assert await p.get_results(["", "a\x00", "\udc80", "ID"]) == [None, None, None, b"P"]
        assert await p.delete_results(["", "a\x00", "\udc80"]) == 0
        assert await p.get_results([]) == []


async def test_put_results_prunes_a_bounded_number_of_expired_rows(schema: Migrated) -> None:
    async with database(schema) as db:
        await rows(
            db,
            "INSERT INTO {s}.results (queue, message_id, body, expires_at)"
            " SELECT 'old', 'r' || n, '', clock_timestamp() - interval '1 s'"
            " FROM generate_series(1, 150) n RETURNING 1",
        )
        p = part(db)
        await p.put_results([put("live", b"x")])
        ((left,),) = await rows(db, "SELECT count(*) FROM {s}.results WHERE queue = 'old'")
        assert left == 150 - results_module.PRUNE_LIMIT
        # An expired row being rewritten is replaced, not pruned, in the same statement.
        await expire_in(db, "live", "-1 s")
        await p.put_results([put("live", b"y")])
        assert await p.get_results(["live"]) == [b"y"]
        await p.put_results([put("live", b"z")])
        ((total,),) = await rows(db, "SELECT count(*) FROM {s}.results")
        assert total == 1


async def test_put_results_notifies_each_result_on_the_results_channel(schema: Migrated) -> None:
    connect = psycopg.AsyncConnection.connect(schema.url, autocommit=True)
    async with database(schema) as db, await connect as listen:
        channel = notify_channel(schema.name) + ".results"
        await listen.execute(f'LISTEN "{channel}"')
        await part(db).put_results([put("a", b"1"), put('b"\\', b"2"), put("a", b"3")])
        notes = [n async for n in listen.notifies(timeout=5.0, stop_after=2)]
        assert {n.channel for n in notes} == {channel}
        assert sorted(json.loads(n.payload) for n in notes) == [
            [QUEUE, "a"],
            [QUEUE, 'b"\\'],
        ]


async def test_wait_result_returns_a_stored_result_at_once_and_none_for_timeout_0(
    schema: Migrated,
) -> None:
    async with database(schema) as db:
        clock = FakeClock()
        p = part(db, clock=clock)
        await p.put_results([put("done", b"body")])
        # The fake clock never moves: an answer shows no wait happened.
        assert await asyncio.wait_for(p.wait_result("done", timeout_seconds=60.0), 5.0) == b"body"
        assert await asyncio.wait_for(p.wait_result("none", timeout_seconds=0), 5.0) is None
        assert await asyncio.wait_for(p.wait_result("n\x00", timeout_seconds=0), 5.0) is None


async def test_polling_wait_result_is_woken_by_another_handle_s_put(schema: Migrated) -> None:
    async with database(schema) as db, database(schema) as other:
        waiter = part(db)
        task = asyncio.create_task(waiter.wait_result("w", timeout_seconds=30.0))
        await asyncio.sleep(0.2)
        assert not task.done()
        await part(other).put_results([put("w-", b"decoy"), put("W", b"decoy")])
        await asyncio.sleep(0.2)
        assert not task.done(), "a look-alike id ended the wait"
        start = asyncio.get_running_loop().time()
        await part(other).put_results([put("w", b"found")])
        assert await asyncio.wait_for(task, 5.0) == b"found"
        assert asyncio.get_running_loop().time() - start < 1.0


async def test_notified_wait_result_is_woken_by_a_put_not_by_its_poll(
    schema: Migrated, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the safety poll out of reach, only the notification can end the wait soon.
    monkeypatch.setattr(results_module, "SAFETY_POLL_SECONDS", 60.0)
    async with database(schema) as db, database(schema) as other, Watcher(schema, QUEUE) as w:
        waiter = part(db, listener=w)
        for round_ in range(3):
            message_id = f"w{round_}"
            task = asyncio.create_task(waiter.wait_result(message_id, timeout_seconds=120.0))
            await until(functools.partial(watching, w, round_ + 1))
            await part(other, "other queue").put_results([put(message_id, b"elsewhere")])
            await asyncio.sleep(0.2)
            assert not task.done(), "another queue's result ended the wait"
            start = asyncio.get_running_loop().time()
            await part(other).put_results([put(message_id, b"found")])
            assert await asyncio.wait_for(task, 5.0) == b"found"
            assert asyncio.get_running_loop().time() - start < 1.0


class ManualWatch:
    """A connected `ResultWatch` whose events the test sets itself (a spurious wake)."""

    connected = True

    def __init__(self) -> None:
        self.events: list[asyncio.Event] = []

    def watch_result(self, message_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self.events.append(event)
        return event

    def unwatch_result(self, message_id: str, event: asyncio.Event) -> None:
        self.events.remove(event)


async def test_a_wake_without_a_result_costs_one_look_not_a_busy_loop(
    schema: Migrated, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results_module, "SAFETY_POLL_SECONDS", 60.0)
    async with database(schema) as db:
        looks = 0
        fetch = db.fetch

        async def counting(*args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
            nonlocal looks
            looks += 1
            return await fetch(*args, **kwargs)

        monkeypatch.setattr(db, "fetch", counting)
        watch = ManualWatch()
        task = asyncio.create_task(part(db, listener=watch).wait_result("x", timeout_seconds=60))
        await until(lambda: looks == 1 and bool(watch.events))
        await asyncio.sleep(0.2)
        assert looks == 1, "a connected wait looked again without a wake"
        watch.events[0].set()  # a reconnect, or a result deleted before the look
        await until(lambda: looks >= 2)
        await asyncio.sleep(0.3)
        assert looks == 2, f"one wake without a result made {looks - 1} looks"
        assert not task.done()
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
        assert watch.events == [], "a cancelled wait left its watch behind"


async def test_wait_result_times_out_on_the_injected_clock_not_before(schema: Migrated) -> None:
    async with database(schema) as db:
        clock = FakeClock()
        p = part(db, clock=clock)
        for message_id in ("never", "never\x00"):
            task = asyncio.create_task(p.wait_result(message_id, timeout_seconds=2.0))
            await asyncio.sleep(0.3)  # real time passes; the injected clock does not
            assert not task.done(), "timed out on real time"
            loop = asyncio.get_running_loop()
            limit = loop.time() + 10.0
            while clock.monotonic() < 1.9 and loop.time() < limit:
                await clock.advance(0.05)
                await asyncio.sleep(0.005)
            assert not task.done(), f"{message_id!r}: returned before its timeout"
            while not task.done() and loop.time() < limit:
                await clock.advance(0.05)
                await asyncio.sleep(0.005)
            assert task.done()
            assert task.result() is None
            assert clock.monotonic() >= 2.0
            clock = FakeClock()
            p = part(db, clock=clock)


async def test_close_ends_a_wait_with_queue_closed_error(schema: Migrated) -> None:
    async with database(schema) as db, Watcher(schema, QUEUE) as w:
        for listener in (None, w):
            p = part(db, listener=listener)
            survivor = part(db, listener=listener)
            task = asyncio.create_task(p.wait_result("x", timeout_seconds=60.0))
            other = asyncio.create_task(survivor.wait_result("x", timeout_seconds=60.0))
            await asyncio.sleep(0.2)
            p.close()
            with pytest.raises(QueueClosedError):
                await asyncio.wait_for(task, 2.0)
            assert not other.done(), "closing one handle ended another's wait"
            await survivor.put_results([put("x", b"after")])
            assert await asyncio.wait_for(other, 5.0) == b"after"
            await survivor.delete_results(["x"])
            with pytest.raises(QueueClosedError):
                await p.get_results(["x"])


async def test_a_closed_check_ends_a_wait_within_the_safety_poll(
    schema: Migrated, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results_module, "SAFETY_POLL_SECONDS", 0.2)
    closed = False

    def check_open() -> None:
        if closed:
            raise QueueClosedError("closed")

    async with database(schema) as db, Watcher(schema, QUEUE) as w:
        p = PostgresResults(
            db, QUEUE, check_open=check_open, listener=lambda: w, clock=SystemClock()
        )
        task = asyncio.create_task(p.wait_result("x", timeout_seconds=60.0))
        await asyncio.sleep(0.1)
        closed = True
        with pytest.raises(QueueClosedError):
            await asyncio.wait_for(task, 2.0)
        assert not w._events, "the wait left its watch behind"


async def test_invalid_arguments_raise_before_anything_changes(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        await p.put_results([put("kept", b"old")])
        good = [put("kept", b"replaced"), put("fresh", b"new")]
        type_errors: list[Any] = [
            b"body",
            None,
            ("bad", b"x", 1.0),
            ResultWrite(message_id="bad", body="text", ttl_seconds=1.0),  # type: ignore[arg-type]
            ResultWrite(message_id="bad", body=bytearray(b"x"), ttl_seconds=1.0),  # type: ignore[arg-type]
            ResultWrite(message_id=5, body=b"x", ttl_seconds=1.0),  # type: ignore[arg-type]
            ResultWrite(message_id="bad", body=b"x", ttl_seconds="1"),  # type: ignore[arg-type]
        ]
        value_errors: list[Any] = [
            put("bad", b"x", 0.0),
            put("bad", b"x", -1.0),
            put("bad", b"x", math.nan),
            put("bad", b"x", math.inf),
            put("", b"x"),
            put("a\x00b", b"x"),
            put("\udc80", b"x"),
        ]
        for errors, cases in ((TypeError, type_errors), (ValueError, value_errors)):
            for bad in cases:
                for batch in ([*good, bad], [bad, *good]):
                    with pytest.raises(errors):
                        await p.put_results(batch)
        with pytest.raises(TypeError):
            await p.put_results(put("kept", b"x"))  # type: ignore[arg-type]
        for timeout in (-1.0, math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match="timeout_seconds"):
                await asyncio.wait_for(p.wait_result("kept", timeout_seconds=timeout), 2.0)
        with pytest.raises(ValueError, match="message_id"):
            await p.wait_result("", timeout_seconds=1.0)
        with pytest.raises(TypeError):
            await p.wait_result(b"kept", timeout_seconds=1.0)  # type: ignore[arg-type]
        for call in (p.get_results, p.delete_results):
            for bad_ids in ("kept", [5], [b"kept"]):
                with pytest.raises(TypeError):
                    await call(bad_ids)  # type: ignore[arg-type]
        assert await p.get_results(["kept", "fresh", "bad"]) == [b"old", None, None]
        await p.put_results([])
        ((total,),) = await rows(db, "SELECT count(*) FROM {s}.results")
        assert total == 1


async def test_valid_edges_are_accepted(schema: Migrated) -> None:
    async with database(schema) as db:
        p = part(db)
        await p.put_results(
            [put("int", b"i", 1), put("tiny", b"t", 1e-3), put("huge", b"h", 1e300)]
        )
        assert await p.get_results(["huge"]) == [b"h"]
        assert await p.wait_result("huge", timeout_seconds=1) == b"h"


async def test_wait_result_with_the_backend_listener(schema: Migrated) -> None:
    listener = Listener(schema.url, schema.name, QUEUE)
    await listener.start()
    try:
        loop = asyncio.get_running_loop()
        await until(lambda: listener.connected)
        async with database(schema) as db, database(schema) as other:
            waiter = part(db, listener=listener)
            task = asyncio.create_task(waiter.wait_result("via-listener", timeout_seconds=60.0))
            await asyncio.sleep(0.2)
            assert not task.done()
            start = loop.time()
            await part(other).put_results([put("via-listener", b"woken")])
            assert await asyncio.wait_for(task, 5.0) == b"woken"
            assert loop.time() - start < 0.5
    finally:
        await listener.aclose()


async def test_a_closed_handle_refuses_every_call_first(schema: Migrated) -> None:
    def closed() -> None:
        raise QueueClosedError("closed")

    async with database(schema) as db:
        p = PostgresResults(
            db, QUEUE, check_open=closed, listener=lambda: None, clock=SystemClock()
        )
        for call in (
            lambda: p.put_results([]),
            lambda: p.put_results([put("x", b"x")]),
            lambda: p.get_results([]),
            lambda: p.get_results(["x"]),
            lambda: p.wait_result("x", timeout_seconds=0),
            lambda: p.wait_result("x", timeout_seconds=1),
            lambda: p.delete_results([]),
            lambda: p.delete_results(["x"]),
        ):
            with pytest.raises(QueueClosedError):
                await asyncio.wait_for(call(), 2.0)
