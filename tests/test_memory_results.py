"""The in-memory backend's ResultStore part, on the fake clock, edge by edge."""

from __future__ import annotations

import asyncio
import math
import uuid

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import ResultWrite, results_of
from taskrunner.testing import FakeClock, settle
from taskrunner_backends.memory import InMemoryQueue, open_from_url

EPS = 1e-6


def make() -> tuple[InMemoryQueue, FakeClock]:
    clock = FakeClock()
    return InMemoryQueue(clock=clock), clock


def w(message_id: str, body: bytes, ttl: float = 10.0) -> ResultWrite:
    return ResultWrite(message_id=message_id, body=body, ttl_seconds=ttl)


async def get(queue: InMemoryQueue, message_id: str) -> bytes | None:
    [body] = await queue.get_results([message_id])
    return body


def waiters(queue: InMemoryQueue) -> int:
    # The store's own record of pending wait_result futures: a leak shows here.
    return sum(len(futures) for futures in queue._store.result_waiters.values())


def test_capabilities_and_part() -> None:
    queue = InMemoryQueue()
    caps = queue.capabilities
    assert (caps.results, caps.result_notify, caps.lookup) == (True, True, True)
    assert results_of(queue) is queue


# -- TTL ---------------------------------------------------------------------------------


async def test_result_returned_just_before_expiry_and_gone_at_and_after() -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"r", ttl=5.0)])
    await clock.advance(5.0 - EPS)
    assert await get(queue, "1") == b"r"
    await clock.advance(EPS)
    assert await get(queue, "1") is None
    await clock.advance(100.0)
    assert await get(queue, "1") is None


@pytest.mark.parametrize(
    "body",
    [b"", b"\x00", bytes(range(256)), b"\xff\xfe" * 3, b"x" * (4 << 20)],
    ids=["empty", "nul", "all-bytes", "not-utf8", "4MiB"],
)
async def test_bodies_are_returned_byte_for_byte(body: bytes) -> None:
    queue, _ = make()
    await queue.put_results([w("1", body)])
    got = await get(queue, "1")
    assert got == body
    assert type(got) is bytes


async def test_later_write_replaces_and_restarts_the_ttl() -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"old", ttl=10.0)])
    await clock.advance(8.0)
    await queue.put_results([w("1", b"new", ttl=10.0)])
    assert await get(queue, "1") == b"new"
    # Past the first write's expiry, within the second's.
    await clock.advance(10.0 - EPS)
    assert await get(queue, "1") == b"new"
    await clock.advance(EPS)
    assert await get(queue, "1") is None


async def test_later_write_with_a_shorter_ttl_shortens_it() -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"long", ttl=100.0)])
    await queue.put_results([w("1", b"short", ttl=1.0)])
    await clock.advance(1.0 - EPS)
    assert await get(queue, "1") == b"short"
    await clock.advance(EPS)
    assert await get(queue, "1") is None
    # The stale heap entry of the first write must not bring anything back.
    await clock.advance(100.0)
    assert await get(queue, "1") is None


async def test_expired_then_rewritten_is_returned_again() -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"a", ttl=1.0)])
    await clock.advance(2.0)
    assert await get(queue, "1") is None
    await queue.put_results([w("1", b"b", ttl=1.0)])
    assert await get(queue, "1") == b"b"


@pytest.mark.parametrize(("first_ttl", "second_ttl"), [(1.0, 10.0), (10.0, 1.0)])
async def test_two_writes_of_one_id_in_one_batch_the_later_wins(
    first_ttl: float, second_ttl: float
) -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"first", first_ttl), w("1", b"second", second_ttl)])
    assert await get(queue, "1") == b"second"
    await clock.advance(second_ttl - EPS)
    assert await get(queue, "1") == b"second"
    await clock.advance(EPS)
    assert await get(queue, "1") is None


async def test_ids_are_independent_and_unknown_ids_have_none() -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"one", ttl=1.0), w("2", b"two", ttl=5.0)])
    assert await queue.get_results(["2", "1", "3", "1"]) == [b"two", b"one", None, b"one"]
    await clock.advance(1.0)
    assert await queue.get_results(["1", "2"]) == [None, b"two"]
    assert await queue.delete_results(["2"]) == 1
    assert await queue.get_results(["1", "2"]) == [None, None]
    assert await queue.get_results([]) == []


@pytest.mark.parametrize(
    "message_id",
    ["\x00", " ", "x" * 100_000, "dead-1", "ключ", "🙂", "a\nb", "1" * 40],
    ids=["nul", "space", "100k", "dead-like", "cyrillic", "emoji", "newline", "digits"],
)
async def test_any_non_empty_text_is_an_id(message_id: str) -> None:
    queue, _ = make()
    await queue.put_results([w(message_id, b"v")])
    assert await queue.get_results([message_id, message_id + "x"]) == [b"v", None]


@pytest.mark.parametrize("message_id", ["", "\ud800", "x" * 100_000])
async def test_odd_ids_read_none_never_an_error(message_id: str) -> None:
    queue, _ = make()
    assert await queue.get_results([message_id]) == [None]
    assert await queue.delete_results([message_id]) == 0


# -- invalid arguments -----------------------------------------------------------------

BAD_WRITES: list[tuple[object, type[Exception]]] = [
    ("not a write", TypeError),
    ({"message_id": "1", "body": b"x", "ttl_seconds": 1.0}, TypeError),
    (ResultWrite(message_id="1", body="text", ttl_seconds=1.0), TypeError),  # type: ignore[arg-type]
    (ResultWrite(message_id="1", body=bytearray(b"x"), ttl_seconds=1.0), TypeError),  # type: ignore[arg-type]
    (ResultWrite(message_id="1", body=memoryview(b"x"), ttl_seconds=1.0), TypeError),  # type: ignore[arg-type]
    (ResultWrite(message_id="1", body=None, ttl_seconds=1.0), TypeError),  # type: ignore[arg-type]
    (ResultWrite(message_id=1, body=b"x", ttl_seconds=1.0), TypeError),  # type: ignore[arg-type]
    (ResultWrite(message_id="1", body=b"x", ttl_seconds="1"), TypeError),  # type: ignore[arg-type]
    (ResultWrite(message_id="1", body=b"x", ttl_seconds=True), TypeError),
    (ResultWrite(message_id="", body=b"x", ttl_seconds=1.0), ValueError),
    (ResultWrite(message_id="\ud800", body=b"x", ttl_seconds=1.0), ValueError),
    (ResultWrite(message_id="1", body=b"x", ttl_seconds=0), ValueError),
    (ResultWrite(message_id="1", body=b"x", ttl_seconds=0.0), ValueError),
    (ResultWrite(message_id="1", body=b"x", ttl_seconds=-1.0), ValueError),
    (ResultWrite(message_id="1", body=b"x", ttl_seconds=math.nan), ValueError),
    (ResultWrite(message_id="1", body=b"x", ttl_seconds=math.inf), ValueError),
    (ResultWrite(message_id="1", body=b"x", ttl_seconds=-math.inf), ValueError),
]


@pytest.mark.parametrize(("bad", "error"), BAD_WRITES)
async def test_invalid_batch_stores_nothing_and_wakes_nobody(
    bad: object, error: type[Exception]
) -> None:
    queue, clock = make()
    await queue.put_results([w("keep", b"before")])
    waiter = asyncio.ensure_future(queue.wait_result("new", timeout_seconds=60))
    await settle()
    with pytest.raises(error):
        await queue.put_results([w("new", b"v"), w("keep", b"after"), bad])  # type: ignore[list-item]
    assert await queue.get_results(["new", "keep"]) == [None, b"before"]
    await settle()
    assert not waiter.done()
    await clock.advance(60)
    assert await waiter is None


async def test_put_refuses_a_single_write() -> None:
    queue, _ = make()
    with pytest.raises(TypeError):
        await queue.put_results(w("1", b"x"))  # type: ignore[arg-type]
    assert await get(queue, "1") is None


@pytest.mark.parametrize("call", ["get", "delete"])
@pytest.mark.parametrize(("ids", "error"), [("1", TypeError), (b"1", TypeError), ([1], TypeError)])
async def test_get_and_delete_refuse_a_single_string_and_non_str_ids(
    call: str, ids: object, error: type[Exception]
) -> None:
    queue, _ = make()
    await queue.put_results([w("1", b"x")])
    method = queue.get_results if call == "get" else queue.delete_results
    with pytest.raises(error):
        await method(ids)  # type: ignore[arg-type]
    assert await get(queue, "1") == b"x"


@pytest.mark.parametrize(
    ("message_id", "seconds", "error"),
    [
        ("1", -1.0, ValueError),
        ("1", -EPS, ValueError),
        ("1", math.nan, ValueError),
        ("1", math.inf, ValueError),
        ("1", True, TypeError),
        ("1", "5", TypeError),
        ("", 1.0, ValueError),
        (1, 1.0, TypeError),
        (None, 1.0, TypeError),
    ],
)
async def test_wait_result_refuses_bad_arguments(
    message_id: object, seconds: object, error: type[Exception]
) -> None:
    queue, _ = make()
    with pytest.raises(error):
        await queue.wait_result(message_id, timeout_seconds=seconds)  # type: ignore[arg-type]
    assert waiters(queue) == 0


# -- wait_result -----------------------------------------------------------------------


async def test_wait_result_returns_at_once_when_stored() -> None:
    queue, _ = make()
    await queue.put_results([w("1", b"done")])
    # No clock step: a stored result needs no waiting.
    assert await queue.wait_result("1", timeout_seconds=30) == b"done"
    assert await queue.wait_result("1", timeout_seconds=0) == b"done"
    assert waiters(queue) == 0


async def test_wait_result_zero_timeout_without_a_result_is_none_at_once() -> None:
    queue, clock = make()
    assert await queue.wait_result("1", timeout_seconds=0) is None
    assert clock.monotonic() == 0.0
    assert waiters(queue) == 0


async def test_wait_result_is_woken_by_a_put_well_before_the_timeout() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=30))
    await clock.advance(1.0)
    assert not waiter.done()
    await queue.put_results([w("1", b"v")])
    await settle()
    # Woken with the clock still at 1 s: no poll interval, no timeout.
    assert waiter.done()
    assert waiter.result() == b"v"
    assert clock.monotonic() == 1.0
    assert waiters(queue) == 0


async def test_wait_result_times_out_just_at_the_timeout_not_before() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=5.0))
    await clock.advance(5.0 - EPS)
    assert not waiter.done()
    await clock.advance(EPS)
    assert waiter.done()
    assert waiter.result() is None
    assert waiters(queue) == 0


async def test_wait_result_put_just_before_the_timeout_is_returned() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=5.0))
    await clock.advance(5.0 - EPS)
    await queue.put_results([w("1", b"late")])
    await settle()
    assert waiter.result() == b"late"


async def test_wait_result_after_the_timeout_ignores_a_later_put() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=5.0))
    await clock.advance(5.0 + EPS)
    assert waiter.result() is None
    await queue.put_results([w("1", b"too late")])
    assert waiters(queue) == 0


async def test_wait_result_ignores_a_put_of_another_id() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=5.0))
    await settle()
    await queue.put_results([w("2", b"other")])
    await settle()
    assert not waiter.done()
    await clock.advance(5.0)
    assert waiter.result() is None


async def test_wait_result_does_not_return_an_expired_result() -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"stale", ttl=1.0)])
    await clock.advance(1.0)
    assert await queue.wait_result("1", timeout_seconds=0) is None
    waiter = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=5.0))
    await clock.advance(2.0)
    assert not waiter.done()
    await queue.put_results([w("1", b"fresh", ttl=1.0)])
    await settle()
    assert waiter.result() == b"fresh"


async def test_result_stored_and_deleted_before_the_waiter_runs_keeps_it_waiting() -> None:
    queue, clock = make()
    waiter = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=5.0))
    await settle()
    # No suspension point between the two calls: the waiter wakes to find nothing.
    await queue.put_results([w("1", b"gone")])
    await queue.delete_results(["1"])
    await settle()
    assert not waiter.done()
    await clock.advance(5.0 - EPS)
    assert not waiter.done()
    await clock.advance(EPS)
    assert waiter.result() is None
    assert waiters(queue) == 0


async def test_many_waiters_on_one_id_and_on_different_ids() -> None:
    queue, clock = make()
    on_a = [asyncio.ensure_future(queue.wait_result("a", timeout_seconds=30)) for _ in range(5)]
    on_b = [asyncio.ensure_future(queue.wait_result("b", timeout_seconds=30)) for _ in range(5)]
    await clock.advance(1.0)
    assert waiters(queue) == 10
    await queue.put_results([w("a", b"A")])
    await settle()
    assert [f.result() for f in on_a] == [b"A"] * 5
    assert not any(f.done() for f in on_b)
    assert waiters(queue) == 5
    await queue.put_results([w("b", b"B"), w("a", b"A2")])
    await settle()
    assert [f.result() for f in on_b] == [b"B"] * 5
    assert waiters(queue) == 0


async def test_cancelled_waiter_leaves_no_future_and_others_still_wake() -> None:
    queue, clock = make()
    doomed = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=30))
    kept = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=30))
    await clock.advance(1.0)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert waiters(queue) == 1
    await queue.put_results([w("1", b"v")])
    await settle()
    assert kept.result() == b"v"
    assert waiters(queue) == 0
    # The cancelled waiter's clock sleep is gone too.
    assert clock.next_deadline() is None


async def test_timed_out_waiters_leave_nothing_behind() -> None:
    queue, clock = make()
    futures = [
        asyncio.ensure_future(queue.wait_result(str(i), timeout_seconds=1.0)) for i in range(100)
    ]
    await clock.advance(1.0)
    assert [f.result() for f in futures] == [None] * 100
    assert queue._store.result_waiters == {}
    assert clock.next_deadline() is None


async def test_aclose_makes_this_handles_waiters_raise_and_leaves_others_waiting() -> None:
    queue, clock = make()
    other = queue.open_handle()
    mine = asyncio.ensure_future(queue.wait_result("1", timeout_seconds=30))
    theirs = asyncio.ensure_future(other.wait_result("1", timeout_seconds=30))
    await clock.advance(1.0)
    await queue.aclose()
    await settle()
    # Done with the clock unmoved: woken by the close, not by its timeout.
    assert mine.done()
    with pytest.raises(QueueClosedError):
        mine.result()
    assert not theirs.done()
    await other.put_results([w("1", b"v")])
    await settle()
    assert theirs.result() == b"v"
    assert waiters(queue) == 0


async def test_closed_handle_refuses_every_result_call() -> None:
    queue, _ = make()
    await queue.aclose()
    with pytest.raises(QueueClosedError):
        await queue.put_results([w("1", b"x")])
    with pytest.raises(QueueClosedError):
        await queue.get_results(["1"])
    with pytest.raises(QueueClosedError):
        await queue.wait_result("1", timeout_seconds=0)
    with pytest.raises(QueueClosedError):
        await queue.delete_results(["1"])
    await queue.aclose()


# -- sharing, deleting -------------------------------------------------------------------


async def test_two_handles_on_one_named_store_see_the_same_results() -> None:
    clock = FakeClock()
    url = f"memory://results-{uuid.uuid4().hex}"
    first = await open_from_url(url, queue_name="q", clock=clock)
    second = await open_from_url(url, queue_name="q")
    await first.put_results([w("1", b"shared", ttl=5.0)])
    assert await second.get_results(["1"]) == [b"shared"]
    waiter = asyncio.ensure_future(second.wait_result("2", timeout_seconds=30))
    await settle()
    await first.put_results([w("2", b"woken")])
    await settle()
    assert waiter.result() == b"woken"
    # Both read the one store's clock: the TTL lapses for both at once.
    await clock.advance(5.0)
    assert await first.get_results(["1"]) == [None]
    assert await second.get_results(["1"]) == [None]
    assert await second.delete_results(["2"]) == 1
    assert await first.get_results(["2"]) == [None]
    other_queue = await open_from_url(url, queue_name="other")
    assert await other_queue.get_results(["2"]) == [None]


async def test_delete_results_counts_those_that_existed() -> None:
    queue, clock = make()
    await queue.put_results([w("1", b"a"), w("2", b"b"), w("3", b"c", ttl=1.0)])
    await clock.advance(1.0)
    # "3" expired, "4" never existed, "1" named twice counts once.
    assert await queue.delete_results(["1", "3", "4", "1"]) == 1
    assert await queue.get_results(["1", "2", "3"]) == [None, b"b", None]
    assert await queue.delete_results([]) == 0
    assert await queue.delete_results(["1"]) == 0


async def test_delete_queue_forgets_results_and_purge_keeps_them() -> None:
    queue, _ = make()
    await queue.add([b"m"])
    await queue.put_results([w("1", b"r")])
    assert await queue.purge() == 1
    assert await get(queue, "1") == b"r"
    await queue.delete_queue()
    assert await get(queue, "1") is None
    assert queue.held_results() == 0
    assert queue._store.result_expiries == []
    await queue.put_results([w("1", b"again")])
    assert await get(queue, "1") == b"again"


# -- the sweep -------------------------------------------------------------------------


async def test_each_call_sweeps_a_bounded_number_of_expired_results() -> None:
    queue, clock = make()
    await queue.put_results([w(str(i), b"x", ttl=1.0) for i in range(10_000)])
    await clock.advance(1.0)
    assert queue.held_results() == 10_000
    await queue.get_results([])
    assert queue.held_results() == 10_000 - 256
    # A put of k writes sweeps k + 256 expired ones: it removes more than it adds.
    await queue.put_results([w(f"new-{i}", b"y", ttl=1.0) for i in range(10)])
    assert queue.held_results() == 10_000 - 256 - 266 + 10
    calls = 0
    while queue.held_results() > 10:
        await queue.delete_results([])
        calls += 1
    assert calls == math.ceil((10_000 - 256 - 266) / 256)
    assert await queue.get_results(["new-0"]) == [b"y"]


async def test_expired_results_not_yet_swept_are_never_returned_or_counted() -> None:
    queue, clock = make()
    ids = [f"r{i:04d}" for i in range(1_000)]
    await queue.put_results([w(i, b"x", ttl=1.0) for i in ids])
    await clock.advance(1.0)
    # Equal expiries pop in id order, so the last ids outlive several sweeps in the store.
    assert await queue.wait_result(ids[-1], timeout_seconds=0) is None
    assert await queue.get_results(ids[-3:-1]) == [None, None]
    assert 0 < queue.held_results() < 1_000
    assert await queue.delete_results(ids) == 0


async def test_a_long_run_of_expiring_results_stays_bounded() -> None:
    queue, clock = make()
    peak = 0
    for round_ in range(200):
        await queue.put_results([w(f"{round_}-{i}", b"x", ttl=1.0) for i in range(100)])
        peak = max(peak, queue.held_results())
        await clock.advance(2.0)
    # Every put sweeps the previous round's expired 100 after storing its own.
    assert peak == 100
    assert len(queue._store.result_expiries) == 100


async def test_overwrites_do_not_grow_the_expiry_heap_without_bound() -> None:
    queue, _ = make()
    for i in range(5_000):
        await queue.put_results([w("hot", str(i).encode(), ttl=3600.0)])
    assert await get(queue, "hot") == b"4999"
    assert queue.held_results() == 1
    assert len(queue._store.result_expiries) <= 2 * 1 + 1024 + 1


async def test_one_shot_iterables_are_checked_and_used_whole() -> None:
    queue, _ = make()
    await queue.put_results(w(str(i), b"%d" % i) for i in range(3))  # type: ignore[arg-type]
    assert await queue.get_results(str(i) for i in range(3)) == [b"0", b"1", b"2"]  # type: ignore[arg-type]
    assert await queue.delete_results(str(i) for i in range(3)) == 3  # type: ignore[arg-type]
    assert queue.held_results() == 0
