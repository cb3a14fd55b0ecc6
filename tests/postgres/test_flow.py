"""Flow control and priorities on PostgreSQL, at the edges the conformance suite does not probe.

Concurrent receivers on separate connections never admit more than a key's
concurrency; a schema at version 2 migrates forward with its messages intact; each way
a slot frees (ack, dead letter, release, purge) lets the next message in, cancel of a
waiting message too, and a leased one keeps its slot; GCRA is judged on the server's
clock just before and just after the next allowed admission; a thousand slot- or
rate-blocked keys are out of the ring; aging is probed on the server's clock with
backdated rows; transactional adds refuse flows and priorities naming the capability.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from taskrunner.queue import AddRequest, Delivery, Flow
from taskrunner_backends.postgres import PostgresQueue, migrate_from_url, open_from_url
from taskrunner_backends.postgres.queue import PRIORITY_AGING_SECONDS
from taskrunner_backends.postgres.schema import MIGRATIONS, migrate
from taskrunner_backends.postgres.testing import age_lease, with_options

pytestmark = pytest.mark.postgres

LEASE = 30.0


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


async def _add(queue: PostgresQueue, bodies: list[bytes], flow: Flow) -> list[str]:
    added = await queue.scheduling.add_requests([AddRequest(body=b, flow=flow) for b in bodies])
    return [a.message_id for a in added]


async def _receive(queue: PostgresQueue, consumer: str = "c", n: int = 10) -> list[Delivery]:
    return await queue.receive(consumer, max_messages=n, wait_seconds=0, lease_seconds=LEASE)


async def _query(queue: PostgresQueue, text: str, params: Any = None) -> list[tuple[Any, ...]]:
    return await queue.database.fetch("test", queue.database.sql(text), params)


async def _db_now(queue: PostgresQueue) -> float:
    rows = await _query(queue, "SELECT extract(epoch FROM clock_timestamp())::float8")
    return float(rows[0][0])


async def test_concurrent_receivers_on_separate_connections_never_over_admit(url: str) -> None:
    """6 handles x 3 receivers race over 4 keys of concurrency 2: never a 3rd slot, all once."""
    keys, per_key, limit = 4, 25, 2
    async with AsyncExitStack() as stack:
        handles = [await stack.enter_async_context(opened(url)) for _ in range(6)]
        owner = handles[0]
        ids: dict[str, str] = {}
        for k in range(keys):
            flow = Flow(key=f"k{k}", concurrency=limit)
            for mid in await _add(owner, [b"%d" % i for i in range(per_key)], flow):
                ids[mid] = f"k{k}"
        held: Counter[str] = Counter()
        worst: Counter[str] = Counter()
        seen: list[str] = []
        db_worst = 0
        done = asyncio.Event()

        async def receiver(queue: PostgresQueue, name: str) -> None:
            while not done.is_set():
                got = await queue.receive(
                    name, max_messages=3, wait_seconds=0.2, lease_seconds=LEASE
                )
                for d in got:
                    key = ids[d.message_id]
                    held[key] += 1
                    worst[key] = max(worst[key], held[key])
                    seen.append(d.message_id)
                # Hand the slots to the other connections' receives for a moment.
                await asyncio.sleep(0)
                for d in got:
                    # Counted down before the ack commits: the next admission of the key
                    # can only follow the commit, so an over-admission would show here.
                    held[ids[d.message_id]] -= 1
                if got:
                    assert await queue.ack(got) == []
                if len(seen) >= len(ids):
                    done.set()

        async def watch() -> None:
            nonlocal db_worst
            while not done.is_set():
                rows = await _query(
                    owner,
                    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM {s}.messages"
                    " WHERE queue = 'jobs' AND flow_key IS NOT NULL AND NOT waiting"
                    " GROUP BY flow_key) AS c",
                )
                db_worst = max(db_worst, int(rows[0][0]))
                await asyncio.sleep(0.005)

        tasks = [
            receiver(handle, f"r{i}-{j}") for i, handle in enumerate(handles) for j in range(3)
        ]
        await asyncio.wait_for(asyncio.gather(watch(), *tasks), 60)
    assert sorted(seen) == sorted(ids), "a message was delivered twice or not at all"
    assert max(worst.values()) <= limit, f"in-process count of held slots reached {worst}"
    assert 1 <= db_worst <= limit, f"the table showed {db_worst} admitted rows of one key"


async def test_a_version_2_schema_migrates_forward_and_keeps_its_messages(
    url: str, postgres_url: str, postgres_schema: str
) -> None:
    """Ready, delayed, leased rows and a dead letter written at version 2 work at version 3."""
    s = sql.Identifier(postgres_schema)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        assert [
            m.version for m in await migrate(conn, postgres_schema, migrations=MIGRATIONS[:2])
        ] == [
            1,
            2,
        ]
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.messages (queue, body) VALUES ('jobs', 'a'), ('jobs', 'b')"
            ).format(s)
        )
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.messages (queue, body, available_at) VALUES"
                " ('jobs', 'later', clock_timestamp() + interval '1 hour')"
            ).format(s)
        )
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.messages (queue, body, owner, delivery_count, leased_at,"
                " lease_seconds, expires_at) VALUES ('jobs', 'held', 'old-worker', 1,"
                " clock_timestamp(), 3600, clock_timestamp() + interval '1 hour')"
            ).format(s)
        )
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.dead_letters (queue, original_id, body, reason, delivery_count)"
                " VALUES ('jobs', 99, 'dead', 'why', 3)"
            ).format(s)
        )

    assert await migrate_from_url(url) == [f"{m.version}: {m.description}" for m in MIGRATIONS[2:]]

    async with opened(with_options(url, migrate="never")) as queue:
        stats = await queue.stats()
        assert (stats.ready, stats.delayed, stats.in_flight, stats.dead) == (2, 1, 1, 1)
        got = await _receive(queue)
        assert [d.body for d in got] == [b"a", b"b"], "old rows lost their FIFO order"
        [letter] = await queue.list_dead_letters()
        [retried] = await queue.retry_dead_letters([letter.message_id])
        again = await _receive(queue)
        assert [(d.message_id, d.body) for d in again] == [(retried, b"dead")]
        # New rows with options sit beside the old ones.
        (high,) = [
            a.message_id
            for a in await queue.scheduling.add_requests([AddRequest(body=b"hi", priority=9)])
        ]
        (flowed,) = await _add(queue, [b"f"], Flow(key="k", concurrency=1))
        got = await _receive(queue)
        assert [d.message_id for d in got] == [high, flowed]


async def test_each_outcome_of_an_admitted_message_frees_its_slot(url: str) -> None:
    """Concurrency 1: ack, dead letter, release and purge let the next in; a lease does not."""
    async with opened(url) as queue:
        for outcome in ("ack", "dead_letter", "release", "lapse"):
            flow = Flow(key=f"k-{outcome}", concurrency=1)
            first, second = await _add(queue, [b"1", b"2"], flow)
            (held,) = await _receive(queue)
            assert held.message_id == first
            assert await _receive(queue) == [], f"{outcome}: a second slot before the outcome"
            if outcome == "ack":
                assert await queue.ack([held]) == []
            elif outcome == "dead_letter":
                assert await queue.dead_letter([held], reason="r") == []
            elif outcome == "release":
                assert await queue.release([held], delay_seconds=0) == []
            else:
                # A lapsed lease keeps its slot: the reclaimer gets the same message.
                assert await age_lease(queue, held, 2 * LEASE)
                assert await _receive(queue) == [], "a lapsed lease gave up its slot"
                [taken] = await queue.reclaim("r", lease_seconds=LEASE, max_messages=5)
                assert taken.message_id == first
                assert await _receive(queue) == [], "a reclaim freed the slot"
                assert await queue.ack([taken]) == []
            got = await _receive(queue)
            assert [d.message_id for d in got] == [second], f"{outcome} did not free the slot"
            assert await queue.ack(got) == []
            if outcome == "release":
                (again,) = await _receive(queue)
                assert (again.message_id, again.delivery_count) == (first, 2)
                assert await queue.ack([again]) == []

        # Cancel: a leased (admitted) message is not cancelled and keeps its slot; a
        # waiting one is removed, and the one behind it comes next.
        flow = Flow(key="k-cancel", concurrency=1)
        first, second, third = await _add(queue, [b"1", b"2", b"3"], flow)
        (held,) = await _receive(queue)
        assert await queue.scheduling.cancel([first, second]) == [False, True]
        assert await _receive(queue) == []
        assert await queue.ack([held]) == []
        assert [d.message_id for d in await _receive(queue)] == [third]

        # Purge forgets keys, rates and slots.
        await _add(queue, [b"1", b"2"], Flow(key="k-purge", concurrency=1, rate=0.001))
        assert len(await _receive(queue)) == 1
        await queue.purge()
        (fresh,) = await _add(queue, [b"3"], Flow(key="k-purge", concurrency=1, rate=0.001))
        assert [d.message_id for d in await _receive(queue)] == [fresh]


async def test_gcra_on_the_server_clock_just_before_and_just_after_the_next_admission(
    url: str,
) -> None:
    """Rate 1/s, burst 3: blocked while tat - 2 s is ahead of the server's clock, then admitted."""
    async with opened(url) as queue:
        flow = Flow(key="k", rate=1.0, burst=3, rate_key="shared")
        (first,) = await _add(queue, [b"1"], flow)
        # The next allowed admission, as GCRA computes it (tat - (burst - 1) / rate),
        # 0.4 s ahead of the server's clock.
        ahead = 0.4
        [(initial,)] = await _query(
            queue, "SELECT tat FROM {s}.flow_rates WHERE rate_key = 'shared'"
        )
        assert initial == 0, "the add did not create its rate key's row, free to admit"
        await _query(
            queue,
            "UPDATE {s}.flow_rates SET tat = extract(epoch FROM clock_timestamp()) + 2 + %s"
            " WHERE queue = 'jobs' AND rate_key = 'shared'",
            (ahead,),
        )
        [(tat,)] = await _query(queue, "SELECT tat FROM {s}.flow_rates WHERE rate_key = 'shared'")
        allowed = tat - 2.0
        got = await _receive(queue)
        if await _db_now(queue) < allowed:  # the probe ran before the edge (it should)
            assert got == [], "admitted before GCRA's next allowed instant"
            [state] = await queue.lookup.lookup([first])
            assert state is not None
            assert state.waiting is not None
            assert state.waiting.reason == "rate"
            assert state.waiting.rate_key == "shared"
            assert state.waiting.until == pytest.approx(allowed, abs=1e-5)
        # A blocked receive wakes at the allowed instant, not at the safety poll.
        got = got or await queue.receive("c", max_messages=5, wait_seconds=3, lease_seconds=LEASE)
        after = await _db_now(queue)
        assert [d.message_id for d in got] == [first]
        assert after >= allowed - 0.05, f"admitted {allowed - after:.3f}s before the edge"
        assert after < allowed + 0.5, f"admitted {after - allowed:.3f}s after the edge"
        [(tat_after,)] = await _query(
            queue, "SELECT tat FROM {s}.flow_rates WHERE rate_key = 'shared'"
        )
        assert tat_after == pytest.approx(tat + 1.0), "the admission did not spend one interval"

        # Just after the edge: tat - 2 s a little behind the server's clock admits at once.
        (second,) = await _add(queue, [b"2"], flow)
        await _query(
            queue,
            "UPDATE {s}.flow_rates SET tat = extract(epoch FROM clock_timestamp()) + 2 - 0.01"
            " WHERE rate_key = 'shared'",
        )
        assert [d.message_id for d in await _receive(queue)] == [second]


@pytest.mark.parametrize("limit", ["slot", "rate"])
async def test_a_thousand_blocked_keys_are_set_aside_not_scanned(url: str, limit: str) -> None:
    """1,000 keys with their one slot held (or their rate spent): out of the ring."""
    async with opened(url) as queue:
        blocked = 1000
        flows = [
            Flow(key=f"b{i}", concurrency=1) if limit == "slot" else Flow(key=f"b{i}", rate=1e-3)
            for i in range(blocked)
        ]
        requests = [AddRequest(body=b"%d" % i, flow=flows[i]) for i in range(blocked) for _ in "12"]
        await queue.scheduling.add_requests(requests)
        held: list[Delivery] = []
        while len(held) < blocked:
            got = await _receive(queue, n=200)
            assert got, f"only {len(held)} of {blocked} keys admitted their first message"
            held += got
        assert await _receive(queue, n=200) == []
        flag = "slot_blocked" if limit == "slot" else "time_blocked"
        [(count,)] = await _query(
            queue, f"SELECT count(*) FROM {{s}}.flow_keys WHERE queue = 'jobs' AND {flag}"
        )
        assert count == blocked
        [(ring,)] = await _query(
            queue,
            "SELECT count(*) FROM {s}.flow_keys"
            " WHERE queue = 'jobs' AND NOT slot_blocked AND NOT time_blocked",
        )
        assert ring == 0, f"{ring} blocked keys left in the ring"
        (plain,) = await queue.add([b"plain"])
        got = await _receive(queue, n=10)
        assert [d.message_id for d in got] == [plain]
        assert await _receive(queue, n=10) == []
        if limit == "slot":
            # One ack frees one key, which the next receive admits.
            assert await queue.ack(held[:1]) == []
            again = await _receive(queue, n=10)
            assert len(again) == 1
            assert again[0].body == held[0].body


async def test_transactional_adds_refuse_flows_and_priorities_naming_the_capability(
    url: str,
) -> None:
    async with opened(url) as queue:
        transactional = queue.transactional
        async with await psycopg.AsyncConnection.connect(url.split("?")[0]) as conn:
            for request, capability in (
                (AddRequest(body=b"x", flow=Flow(key="k")), "flow_control"),
                (AddRequest(body=b"x", priority=3), "priorities"),
            ):
                with pytest.raises(ValueError, match=capability):
                    await transactional.add(conn, [request])
                with pytest.raises(ValueError, match=capability):
                    transactional.add_sync(conn, [request])
        assert await queue.len() == 0


async def _backdate(queue: PostgresQueue, message_id: str, seconds: float) -> None:
    """Make `message_id` look ready for `seconds` already (its ready time moved back)."""
    await _query(
        queue,
        "UPDATE {s}.messages SET available_at = clock_timestamp() - %s * interval '1 second'"
        " WHERE id = %s",
        (seconds, int(message_id)),
    )


@pytest.mark.parametrize(
    ("ready_for", "first"),
    [(6 * PRIORITY_AGING_SECONDS - 1.0, "fresh"), (6 * PRIORITY_AGING_SECONDS + 1.0, "old")],
)
async def test_a_priority_0_message_rises_one_level_per_aging_period_on_the_server_clock(
    url: str, ready_for: float, first: str
) -> None:
    """Ready 6 agings less a second: ranked 5, it loses the tie to a fresh 5; plus one: wins."""
    async with opened(url) as queue:
        part = queue.scheduling
        (old,) = [a.message_id for a in await part.add_requests([AddRequest(body=b"old")])]
        await _backdate(queue, old, ready_for)
        (fresh,) = [
            a.message_id for a in await part.add_requests([AddRequest(body=b"new", priority=5)])
        ]
        got = await _receive(queue, n=1)
        assert [d.message_id for d in got] == [old if first == "old" else fresh]
        # In one batch too: the same ranking, then the other one.
        assert await queue.release(got) == []
        await _backdate(queue, old, ready_for)
        await _backdate(queue, fresh, 0.0)
        batch = await _receive(queue, n=5)
        expected = [old, fresh] if first == "old" else [fresh, old]
        assert [d.message_id for d in batch] == expected


async def test_a_delayed_message_with_a_flow_starts_waiting_when_it_falls_due(url: str) -> None:
    """Not admitted before its due time; a receive blocked on it wakes at that time."""
    async with opened(url) as queue:
        flow = Flow(key="k", concurrency=1)
        request = AddRequest(body=b"late", flow=flow, delay_seconds=0.4)
        (late,) = [a.message_id for a in await queue.scheduling.add_requests([request])]
        [(due,)] = await _query(
            queue,
            "SELECT extract(epoch FROM available_at)::float8 FROM {s}.messages WHERE id = %s",
            (int(late),),
        )
        got = await _receive(queue)
        if await _db_now(queue) < due:
            assert got == [], "a delayed message with a flow was admitted before its due time"
            [state] = await queue.lookup.lookup([late])
            assert state is not None
            assert state.state == "delayed"
        got = got or await queue.receive("c", max_messages=5, wait_seconds=3, lease_seconds=LEASE)
        assert [d.message_id for d in got] == [late]
        after = await _db_now(queue)
        assert due - 0.05 <= after < due + 0.5


async def test_a_unique_request_with_a_flow_waits_under_it_and_lookup_says_its_turn(
    url: str,
) -> None:
    """A keyed add with a flow waits (turn), the holder's id comes back, admission is FIFO."""
    async with opened(url) as queue:
        part = queue.scheduling
        flow = Flow(key="k", concurrency=1)
        requests = [
            AddRequest(body=b"1", flow=flow, unique_key="u1"),
            AddRequest(body=b"1 again", flow=flow, unique_key="u1"),
            AddRequest(body=b"2", flow=flow),
        ]
        first, again, second = await part.add_requests(requests)
        assert (again.message_id, again.added) == (first.message_id, False)
        states = await queue.lookup.lookup([first.message_id, second.message_id])
        assert [s.waiting.reason if s and s.waiting else None for s in states] == ["turn", "turn"]
        (held,) = await _receive(queue)
        assert held.message_id == first.message_id
        [state] = await queue.lookup.lookup([second.message_id])
        assert state is not None
        assert state.waiting is not None
        assert (state.waiting.reason, state.waiting.holders) == ("slot", (first.message_id,))
        assert await queue.ack([held]) == []
        assert [d.message_id for d in await _receive(queue)] == [second.message_id]


async def test_concurrent_receivers_share_one_rate_key_without_exceeding_it(url: str) -> None:
    """4 keys on one rate key (5/s, burst 3), 6 handles racing: burst + rate x time at most."""
    rate, burst = 5.0, 3
    async with AsyncExitStack() as stack:
        handles = [await stack.enter_async_context(opened(url)) for _ in range(6)]
        for k in range(4):
            flow = Flow(key=f"k{k}", rate=rate, burst=burst, rate_key="shared")
            await _add(handles[0], [b"%d" % i for i in range(20)], flow)
        start = await _db_now(handles[0])
        admitted: list[Delivery] = []

        async def receiver(queue: PostgresQueue, name: str) -> None:
            while await _db_now(queue) < start + 1.2:
                admitted.extend(
                    await queue.receive(name, max_messages=4, wait_seconds=0.1, lease_seconds=LEASE)
                )

        await asyncio.wait_for(
            asyncio.gather(*(receiver(h, f"r{i}") for i, h in enumerate(handles))), 30
        )
        elapsed = await _db_now(handles[0]) - start
    bound = burst + rate * elapsed
    assert len(admitted) <= bound + 1e-6, f"{len(admitted)} admitted in {elapsed:.2f}s (<= {bound})"
    # A blocked receive wakes at each allowed instant: most of the allowance is used.
    assert len(admitted) >= burst + rate * 1.2 * 0.5, f"only {len(admitted)} in {elapsed:.2f}s"
    assert len({d.message_id for d in admitted}) == len(admitted)
