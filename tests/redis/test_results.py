"""ResultStore on a real server: TTL edges on the server clock, last write wins, hostile
ids, one round trip per call, and waits woken by the shared listener (latency, 1000
waiters on a few connections, aclose, a killed listener connection).
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from taskrunner.errors import BackendError, QueueClosedError
from taskrunner.queue import ResultWrite, results_of
from taskrunner_backends.redis import RedisStreamsQueue, results as results_module
from taskrunner_backends.redis.results import CHECK_CONCURRENCY, ResultListener

from .helpers import DEADLINE_SECONDS, count_round_trips, eventually, open_queue

pytestmark = pytest.mark.redis

_log = logging.getLogger(__name__)

P = 0.05  # the backend's lease_precision_seconds


def write(message_id: str, body: bytes, ttl: float = 60.0) -> ResultWrite:
    return ResultWrite(message_id=message_id, body=body, ttl_seconds=ttl)


async def server_ms(queue: RedisStreamsQueue) -> int:
    seconds, micros = await queue._raw.call("time", "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def until(condition: Callable[[], bool], what: str) -> None:
    """Bounded polling of local state (no server round trip)."""

    async def check() -> bool:
        return condition()

    await eventually(check, bool, what=what, interval=0.002)


def listener_of(queue: RedisStreamsQueue) -> ResultListener:
    listener = queue.result_listener
    assert listener is not None
    return listener


def parked(queue: RedisStreamsQueue) -> int:
    """Waits of `queue` that looked at their key and wait for a notification."""
    listener = queue.result_listener
    return 0 if listener is None else listener.parked


@asynccontextmanager
async def named_queue(url: str, namespace: str, name: str) -> AsyncIterator[RedisStreamsQueue]:
    """A handle whose pool connections carry `name` in CLIENT LIST (to count them)."""
    queue = RedisStreamsQueue(
        aioredis.Redis.from_url(url, client_name=name),
        queue_name="q",
        namespace=namespace,
        owns_client=True,
    )
    try:
        await queue.initialize()
        yield queue
    finally:
        await queue.aclose()


async def clients(queue: RedisStreamsQueue) -> list[dict[str, str]]:
    raw = await queue._raw.call("client list", "CLIENT", "LIST")
    listed = []
    for line in raw.decode().splitlines():
        fields = dict(part.split("=", 1) for part in line.split(" ") if "=" in part)
        listed.append(fields)
    return listed


# -- put / get ------------------------------------------------------------------------------


async def test_the_queue_claims_and_returns_the_result_store(
    redis_queue: RedisStreamsQueue,
) -> None:
    caps = redis_queue.capabilities
    assert (caps.results, caps.result_notify, caps.lookup) == (True, True, True)
    assert results_of(redis_queue) is redis_queue


@pytest.mark.parametrize(
    "body",
    [b"", bytes(range(256)) * 4, b"\x00\r\n$-1\r\n*3\r\n", b"\xff" * (1024 * 1024)],
    ids=["empty", "every-byte", "resp-lookalike", "1MiB"],
)
async def test_bodies_come_back_byte_for_byte(redis_queue: RedisStreamsQueue, body: bytes) -> None:
    await redis_queue.put_results([write("1-1", body)])

    assert await redis_queue.get_results(["1-1"]) == [body]
    assert await redis_queue.wait_result("1-1", timeout_seconds=1) == body


async def test_unknown_ids_are_none_in_order(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.put_results([write("a", b"A"), write("c", b"C")])

    assert await redis_queue.get_results(["c", "b", "a", "", "c"]) == [b"C", None, b"A", None, b"C"]
    assert await redis_queue.get_results([]) == []


async def test_a_result_lives_until_its_ttl_on_the_server_clock_and_not_after(
    redis_queue: RedisStreamsQueue,
) -> None:
    ttl_ms = 300
    before = await server_ms(redis_queue)
    await redis_queue.put_results([write("t", b"x", ttl_ms / 1000)])
    after = await server_ms(redis_queue)
    # The put ran between `before` and `after`; so did the start of its TTL.
    seen_after_expiry = []
    seen_before_expiry = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        # TIME, GET, TIME in one write: the server runs them in order, so the GET
        # happened between the two readings.
        start, reply, end = await redis_queue._raw.pipeline(
            "probe", [("TIME",), ("GET", redis_queue.keys.result("t")), ("TIME",)]
        )
        start_ms = int(start[0]) * 1000 + int(start[1]) // 1000
        end_ms = int(end[0]) * 1000 + int(end[1]) // 1000
        if end_ms < before + ttl_ms:
            seen_before_expiry.append(reply)
        if start_ms > after + ttl_ms + 1:
            seen_after_expiry.append(reply)
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)

    assert seen_before_expiry
    assert all(r == b"x" for r in seen_before_expiry)
    assert seen_after_expiry == [None]
    assert await redis_queue.get_results(["t"]) == [None]


async def test_a_later_write_replaces_the_body_and_restarts_the_ttl(
    redis_queue: RedisStreamsQueue,
) -> None:
    key = redis_queue.keys.result("m")
    await redis_queue.put_results([write("m", b"first", 0.5)])
    await redis_queue.put_results([write("m", b"second", 60)])

    assert await redis_queue.get_results(["m"]) == [b"second"]
    assert 59_000 < await redis_queue._raw.call("pttl", "PTTL", key) <= 60_000

    # Restarted, not extended: a shorter TTL written later is the one that counts.
    await redis_queue.put_results([write("m", b"third", 0.5)])
    assert 0 < await redis_queue._raw.call("pttl", "PTTL", key) <= 500


async def test_within_one_batch_the_later_write_of_an_id_wins(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.put_results(
        [write("d", b"early", 60), write("other", b"o"), write("d", b"late", 0.5)]
    )

    assert await redis_queue.get_results(["d", "other"]) == [b"late", b"o"]
    assert 0 < await redis_queue._raw.call("pttl", "PTTL", redis_queue.keys.result("d")) <= 500


HOSTILE = [
    "}{",
    "{other}",
    "x}{y",
    "0-1",
    "not a stream id\r\nDEL *",
    "*",
    "é🙂",
    "\x00",
    "k" * 100_000,
]


async def test_hostile_ids_are_stored_normally_in_the_queues_slot(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.put_results([write(i, i.encode()[:10]) for i in HOSTILE])

    assert await redis_queue.get_results(HOSTILE) == [i.encode()[:10] for i in HOSTILE]
    slot = key_slot(redis_queue.keys.stream.encode())
    for message_id in HOSTILE:
        key = redis_queue.keys.result(message_id)
        assert key.startswith(f"{redis_queue.keys.namespace}:{{q}}:r:")
        assert key_slot(key.encode()) == slot
    # Another queue of the namespace sees none of them.
    other = open_queue_named(redis_queue, "q2")
    try:
        assert await other.get_results(HOSTILE) == [None] * len(HOSTILE)
    finally:
        await other.aclose()
    assert await redis_queue.delete_results(HOSTILE) == len(HOSTILE)


def open_queue_named(queue: RedisStreamsQueue, name: str) -> RedisStreamsQueue:
    return RedisStreamsQueue(
        aioredis.Redis(connection_pool=queue._client.connection_pool),
        queue_name=name,
        namespace=queue.keys.namespace,
    )


async def test_unknown_hostile_ids_are_just_unknown(redis_queue: RedisStreamsQueue) -> None:
    ids = [*HOSTILE, "\ud800 lone surrogate", "k" * 1_000_000]

    assert await redis_queue.get_results(ids) == [None] * len(ids)
    assert await redis_queue.delete_results(ids) == 0
    assert await redis_queue.wait_result("}{", timeout_seconds=0) is None


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (write("x", b"b", 0), ValueError),
        (write("x", b"b", -1), ValueError),
        (write("x", b"b", math.nan), ValueError),
        (write("x", b"b", math.inf), ValueError),
        (ResultWrite(message_id="x", body=b"b", ttl_seconds=True), TypeError),
        (ResultWrite(message_id="x", body=b"b", ttl_seconds="1"), TypeError),  # type: ignore[arg-type]
        (ResultWrite(message_id="x", body="text", ttl_seconds=1), TypeError),  # type: ignore[arg-type]
        (ResultWrite(message_id="x", body=bytearray(b"b"), ttl_seconds=1), TypeError),  # type: ignore[arg-type]
        (write("", b"b"), ValueError),
        (write("\ud800", b"b"), ValueError),
        (ResultWrite(message_id=7, body=b"b", ttl_seconds=1), TypeError),  # type: ignore[arg-type]
        ("not a write", TypeError),
    ],
)
async def test_an_invalid_item_fails_the_whole_batch_before_anything_is_sent(
    redis_queue: RedisStreamsQueue, bad: Any, error: type[Exception]
) -> None:
    trips = count_round_trips(redis_queue)
    with pytest.raises(error):
        await redis_queue.put_results([write("fine", b"f"), bad])

    assert trips["put results"] == 0
    assert await redis_queue.get_results(["fine", "x"]) == [None, None]


async def test_a_single_write_or_id_string_is_refused(redis_queue: RedisStreamsQueue) -> None:
    with pytest.raises(TypeError):
        await redis_queue.put_results(write("x", b"b"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await redis_queue.get_results("x")
    with pytest.raises(TypeError):
        await redis_queue.delete_results("x")
    with pytest.raises(TypeError):
        await redis_queue.get_results([b"x"])  # type: ignore[list-item]


async def test_wait_result_refuses_bad_arguments(redis_queue: RedisStreamsQueue) -> None:
    for timeout in (-0.001, math.nan, math.inf):
        with pytest.raises(ValueError, match="timeout_seconds"):
            await redis_queue.wait_result("x", timeout_seconds=timeout)
    with pytest.raises(ValueError, match="message_id"):
        await redis_queue.wait_result("", timeout_seconds=1)
    with pytest.raises(TypeError):
        await redis_queue.wait_result(None, timeout_seconds=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await redis_queue.wait_result("x", timeout_seconds="1")  # type: ignore[arg-type]


# -- round trips and cost ------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 100, 1200])
async def test_every_call_is_one_round_trip_whatever_the_batch(
    redis_queue: RedisStreamsQueue, size: int
) -> None:
    await redis_queue.initialize()
    ids = [f"{n}-0" for n in range(size)]
    trips = count_round_trips(redis_queue)

    await redis_queue.put_results([write(i, i.encode()) for i in ids])
    assert await redis_queue.get_results(ids) == [i.encode() for i in ids]
    assert await redis_queue.delete_results([*ids, ids[0]]) == size

    assert dict(trips) == {"put results": 1, "get results": 1, "delete results": 1}


async def test_the_index_forgets_expired_results_at_the_next_put(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.put_results([write(f"old{n}", b"x", 0.05) for n in range(50)])
    index = redis_queue.keys.results
    assert await redis_queue._raw.call("zcard", "ZCARD", index) == 50

    async def after_a_put() -> int:
        await redis_queue.put_results([write("new", b"y")])
        count: int = await redis_queue._raw.call("zcard", "ZCARD", index)
        return count

    await eventually(after_a_put, lambda n: n == 1, what="expired entries pruned")


async def test_notifications_stay_capped(redis_queue: RedisStreamsQueue) -> None:
    for n in range(3 * results_module.NOTIFY_CAP):
        await redis_queue.put_results([write(f"{n}", b"x")])

    length = await redis_queue._raw.call("xlen", "XLEN", redis_queue.keys.done)
    # MAXLEN ~ trims whole nodes: at least the cap, at most a node (100 entries) over.
    assert results_module.NOTIFY_CAP <= length <= results_module.NOTIFY_CAP + 100


# -- delete ----------------------------------------------------------------------------------


async def test_delete_results_counts_what_existed_and_removes_it(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.put_results([write("a", b"1"), write("b", b"2")])

    assert await redis_queue.delete_results(["a", "a", "missing"]) == 1
    assert await redis_queue.get_results(["a", "b"]) == [None, b"2"]
    assert await redis_queue.delete_results(["a"]) == 0
    assert await redis_queue.delete_results([]) == 0
    assert await redis_queue._raw.call("zscore", "ZSCORE", redis_queue.keys.results, "a") is None


async def test_delete_queue_deletes_the_results_their_index_and_notifications(
    redis_queue: RedisStreamsQueue,
) -> None:
    ids = [f"r{n}" for n in range(1200)]
    await redis_queue.put_results([write(i, b"x") for i in ids])
    await redis_queue.add([b"m"])

    await redis_queue.delete_queue()

    assert await redis_queue.get_results(ids) == [None] * len(ids)
    for key in (redis_queue.keys.results, redis_queue.keys.done):
        assert await redis_queue._raw.call("exists", "EXISTS", key) == 0
    leftovers = [
        k async for k in redis_queue._client.scan_iter(match=f"{redis_queue.keys.namespace}:*")
    ]
    assert leftovers == []


async def test_purge_leaves_results_alone(redis_queue: RedisStreamsQueue) -> None:
    [message_id] = await redis_queue.add([b"m"])
    await redis_queue.put_results([write(message_id, b"result")])

    assert await redis_queue.purge() == 1
    assert await redis_queue.get_results([message_id]) == [b"result"]


# -- wait_result ---------------------------------------------------------------------------


async def test_a_stored_result_is_returned_at_once_without_a_listener(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.put_results([write("s", b"stored")])

    assert await redis_queue.wait_result("s", timeout_seconds=0) == b"stored"
    assert await redis_queue.wait_result("missing", timeout_seconds=0) is None
    assert redis_queue.result_listener is None
    assert await redis_queue.wait_result("s", timeout_seconds=30) == b"stored"


async def test_a_waiter_is_woken_by_a_put_from_another_handle(
    redis_queue: RedisStreamsQueue, redis_url: str, redis_namespace: str
) -> None:
    other = open_queue(redis_url, redis_namespace)
    try:
        waiter = asyncio.create_task(redis_queue.wait_result("w", timeout_seconds=DEADLINE_SECONDS))
        await until(lambda: parked(redis_queue) == 1, "waiter parked")
        started = time.monotonic()
        await other.put_results([write("w", b"woken")])

        assert await waiter == b"woken"
        assert time.monotonic() - started < 1.0
    finally:
        await other.aclose()


async def test_wake_latency_median_over_200_results(redis_queue: RedisStreamsQueue) -> None:
    """The number quoted in docs/redis.md: put returned -> waiter resumed, one at a time."""
    putter = open_queue_named(redis_queue, "q")
    latencies = []
    try:
        for n in range(200):
            message_id = f"lat{n}"
            woken = asyncio.Event()
            done_at: list[float] = []

            async def wait(
                message_id: str = message_id,
                woken: asyncio.Event = woken,
                done_at: list[float] = done_at,
            ) -> None:
                assert await redis_queue.wait_result(message_id, timeout_seconds=10) == b"x"
                done_at.append(time.perf_counter())
                woken.set()

            task = asyncio.create_task(wait())
            await until(lambda: parked(redis_queue) == 1, "waiter parked")
            start = time.perf_counter()
            await putter.put_results([write(message_id, b"x")])
            await woken.wait()
            await task
            latencies.append(done_at[0] - start)
    finally:
        await putter.aclose()
    median = statistics.median(latencies)
    _log.info(
        f"\nwake latency over 200: median {median * 1000:.2f} ms, "
        f"p90 {sorted(latencies)[179] * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms"
    )
    assert median < 0.05


async def test_a_timeout_returns_none_not_before_it_and_within_the_precision(
    redis_queue: RedisStreamsQueue,
) -> None:
    for timeout in (0.05, 0.3):
        started = time.monotonic()
        assert await redis_queue.wait_result("never", timeout_seconds=timeout) is None
        elapsed = time.monotonic() - started
        assert timeout <= elapsed < timeout + P + 0.2  # slack for a loaded 2-core machine


async def test_a_result_stored_just_before_the_timeout_is_returned(
    redis_queue: RedisStreamsQueue,
) -> None:
    timeout = 0.5
    waiter = asyncio.create_task(redis_queue.wait_result("edge", timeout_seconds=timeout))
    started = time.monotonic()
    await until(lambda: parked(redis_queue) == 1, "waiter parked")
    await asyncio.sleep(max(0.0, timeout - 0.15 - (time.monotonic() - started)))
    await redis_queue.put_results([write("edge", b"just in time")])

    assert await waiter == b"just in time"


async def test_waiters_of_one_id_all_wake_and_a_cancelled_one_leaves_no_trace(
    redis_queue: RedisStreamsQueue,
) -> None:
    waiters = [
        asyncio.create_task(redis_queue.wait_result("same", timeout_seconds=DEADLINE_SECONDS))
        for _ in range(3)
    ]
    await until(lambda: parked(redis_queue) == 3, "waiters parked")
    waiters[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiters[0]
    assert listener_of(redis_queue).waiting == 2

    await redis_queue.put_results([write("same", b"all")])

    assert await asyncio.gather(*waiters[1:]) == [b"all", b"all"]
    assert listener_of(redis_queue).waiting == 0


async def test_a_put_of_another_id_does_not_wake_a_waiter(redis_queue: RedisStreamsQueue) -> None:
    waiter = asyncio.create_task(redis_queue.wait_result("mine", timeout_seconds=DEADLINE_SECONDS))
    await until(lambda: parked(redis_queue) == 1, "waiter parked")
    long_id = "L" * 500  # named by its SHA1 in the notification
    await redis_queue.put_results([write("theirs", b"t"), write(long_id, b"long")])
    long_waiter = asyncio.create_task(redis_queue.wait_result(long_id, timeout_seconds=5))

    assert await long_waiter == b"long"
    assert not waiter.done()
    await redis_queue.put_results([write("mine", b"m")])
    assert await waiter == b"m"


async def test_a_deleted_result_does_not_wake_a_waiter_with_nothing(
    redis_queue: RedisStreamsQueue,
) -> None:
    """A notification is 'look again': an id deleted before the listener looks keeps waiting."""
    waiter = asyncio.create_task(redis_queue.wait_result("gone", timeout_seconds=0.5))
    await until(lambda: parked(redis_queue) == 1, "waiter parked")
    # Put and delete in one write: the listener can only look after both.
    await redis_queue._raw.pipeline(
        "put then delete",
        [
            ("SET", redis_queue.keys.result("gone"), b"x", "PX", 60000),
            ("XADD", redis_queue.keys.done, "*", "i", "gone"),
            ("DEL", redis_queue.keys.result("gone")),
        ],
    )

    assert await waiter is None


async def test_the_idle_listener_ends_and_the_next_wait_starts_another(
    redis_queue: RedisStreamsQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results_module, "LISTEN_BLOCK_SECONDS", 0.05)
    assert await redis_queue.wait_result("a", timeout_seconds=0.05) is None
    listener = listener_of(redis_queue)
    await until(lambda: not listener.running, "idle listener ended")

    waiter = asyncio.create_task(redis_queue.wait_result("b", timeout_seconds=DEADLINE_SECONDS))
    await until(lambda: listener.parked == 1, "waiter parked")
    assert listener.running
    await redis_queue.put_results([write("b", b"B")])
    assert await waiter == b"B"


async def test_1000_waiters_on_one_handle_share_a_bounded_number_of_connections(
    redis_url: str, redis_namespace: str
) -> None:
    name = f"{redis_namespace}-conn"
    async with named_queue(redis_url, redis_namespace, name) as queue:
        ids = [f"w{n}" for n in range(1000)]
        waiters = [
            asyncio.create_task(queue.wait_result(i, timeout_seconds=DEADLINE_SECONDS * 2))
            for i in ids
        ]
        await until(lambda: parked(queue) == 1000, "1000 waiters parked")
        listener_name = f"taskrunner-results:{redis_namespace}:q"

        async def connections() -> list[dict[str, str]]:
            return [c for c in await clients(queue) if c.get("name") in (name, listener_name)]

        # Polled: between two blocking reads the listener's connection briefly is not in
        # XREAD (it re-issues the read every LISTEN_BLOCK_SECONDS).
        mine = await eventually(
            connections,
            lambda found: [c["name"] for c in found if c.get("cmd") == "xread"] == [listener_name],
            what="the one listener blocked in XREAD",
        )
        _log.info("1000 waiters: %d connections of the handle", len(mine))

        # One blocking listener, the first looks of the waiters, and CLIENT LIST's own.
        assert 2 <= len(mine) <= CHECK_CONCURRENCY + 2

        await queue.put_results([write(i, i.encode()) for i in ids])
        assert await asyncio.gather(*waiters) == [i.encode() for i in ids]
        assert listener_of(queue).waiting == 0


async def test_aclose_stops_the_listener_and_fails_pending_waits(
    redis_url: str, redis_namespace: str
) -> None:
    name = f"{redis_namespace}-close"
    observer = open_queue(redis_url, redis_namespace)
    try:
        async with named_queue(redis_url, redis_namespace, name) as queue:
            waiters = [
                asyncio.create_task(queue.wait_result(f"p{n}", timeout_seconds=DEADLINE_SECONDS))
                for n in range(5)
            ]
            await until(lambda: parked(queue) == 5, "waiters parked")
            listener = listener_of(queue)
            task = listener._task
            assert task is not None

            await queue.aclose()

            assert task.cancelled()
            assert not listener.running
            for waiter in waiters:
                with pytest.raises(QueueClosedError):
                    await waiter
            with pytest.raises(QueueClosedError):
                await queue.wait_result("late", timeout_seconds=1)
        current = asyncio.current_task()
        assert [t for t in asyncio.all_tasks() if t is not current] == []

        async def connections() -> int:
            return len([c for c in await clients(observer) if c.get("name") == name])

        await eventually(connections, lambda n: n == 0, what="connections of the closed handle")
    finally:
        await observer.aclose()


async def test_aclose_while_waiters_are_still_starting(redis_queue: RedisStreamsQueue) -> None:
    waiters = [
        asyncio.create_task(redis_queue.wait_result(f"s{n}", timeout_seconds=DEADLINE_SECONDS))
        for n in range(50)
    ]
    await asyncio.sleep(0)  # they registered; the listener has not read its position yet
    await redis_queue.aclose()

    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(o, QueueClosedError) for o in outcomes), outcomes


async def kill_listener(queue: RedisStreamsQueue, killer: RedisStreamsQueue) -> int:
    name = f"taskrunner-results:{queue.keys.namespace}:{queue.keys.queue_name}"

    async def find() -> list[dict[str, str]]:
        return [
            c for c in await clients(killer) if c.get("name") == name and c.get("cmd") == "xread"
        ]

    [listener] = await eventually(find, lambda found: len(found) == 1, what="listener connection")
    killed: int = await killer._raw.call("kill", "CLIENT", "KILL", "ID", listener["id"])
    return killed


@pytest.mark.parametrize(
    "put_while_down", [True, False], ids=["put-at-once", "put-after-reconnect"]
)
async def test_a_killed_listener_connection_reconnects_and_still_wakes_the_waiter(
    redis_queue: RedisStreamsQueue, redis_url: str, redis_namespace: str, put_while_down: bool
) -> None:
    killer = open_queue(redis_url, redis_namespace)
    try:
        waiter = asyncio.create_task(redis_queue.wait_result("k", timeout_seconds=DEADLINE_SECONDS))
        await until(lambda: parked(redis_queue) == 1, "waiter parked")
        listener = listener_of(redis_queue)
        assert await kill_listener(redis_queue, killer) == 1
        if not put_while_down:
            await until(lambda: listener.failures >= 1, "listener saw the kill")
            await until(lambda: listener.rechecks >= 1, "listener reconnected")
        await killer.put_results([write("k", b"after the kill")])

        assert await waiter == b"after the kill"
        await until(lambda: listener.failures >= 1, "listener saw the kill")
    finally:
        await killer.aclose()


async def test_cancelling_a_waiter_mid_wait_never_cancels_the_listener(
    redis_queue: RedisStreamsQueue,
) -> None:
    stays = asyncio.create_task(redis_queue.wait_result("x", timeout_seconds=DEADLINE_SECONDS))
    goes = asyncio.create_task(redis_queue.wait_result("y", timeout_seconds=DEADLINE_SECONDS))
    await until(lambda: parked(redis_queue) == 2, "waiters parked")
    goes.cancel()
    await asyncio.gather(goes, return_exceptions=True)

    assert listener_of(redis_queue).running
    await redis_queue.put_results([write("x", b"still")])
    assert await stays == b"still"


async def test_a_listener_bug_fails_the_waiters_instead_of_leaving_them_to_time_out(
    redis_queue: RedisStreamsQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiter = asyncio.create_task(redis_queue.wait_result("b", timeout_seconds=DEADLINE_SECONDS))
    await until(lambda: parked(redis_queue) == 1, "waiter parked")
    listener = listener_of(redis_queue)

    def broken(entries: list[tuple[str, object]]) -> list[str]:
        raise RuntimeError("bug in the listener")

    monkeypatch.setattr(listener, "_named", broken)
    await redis_queue.put_results([write("b", b"x")])

    with pytest.raises(BackendError, match="bug in the listener"):
        await waiter
    await until(lambda: not listener.running, "listener ended")
    # The next wait starts a new listener.
    monkeypatch.undo()
    again = asyncio.create_task(redis_queue.wait_result("c", timeout_seconds=DEADLINE_SECONDS))
    await until(lambda: parked(redis_queue) == 1, "second waiter parked")
    assert listener.running
    await redis_queue.put_results([write("c", b"y")])
    assert await again == b"y"
