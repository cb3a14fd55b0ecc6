"""Hostile message bodies: each is acked or dead-lettered within one lease, never looped on.

A body that makes decoding raise anything (not only a decode error: msgspec raises
`RecursionError` on deep nesting, a payload type's ``__post_init__`` may raise
anything) must be dead-lettered at once with the reason. A worker that crashes is
the one outcome that loops: the message comes back every lease, forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings, strategies as st

from taskrunner import App, Producer, Runner, TaskFailure, current_task
from taskrunner.testing import FakeClock, run_until_idle
from taskrunner_backends.memory import InMemoryQueue

from .support import LEASE, config, make, run_burst

# Deep enough to exhaust the interpreter's recursion limit whatever the stack depth.
DEEP = 5000


class Order(msgspec.Struct):
    sku: str
    quantity: int


@dataclass
class Checked:
    n: int

    def __post_init__(self) -> None:
        # A validator that raises something msgspec does not turn into a ValidationError.
        if self.n < 0:
            raise KeyError("n must not be negative")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _recorded_logs() -> Iterator[list[logging.LogRecord]]:
    handler = _Records()
    logger = logging.getLogger("taskrunner")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


def _crashes(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if "crashed" in r.getMessage()]


def _envelope(task: str, payload: bytes) -> bytes:
    return b'{"v":1,"id":"1","task":"%s","payload":%s,"enqueued_at":0}' % (task.encode(), payload)


def _poison_app() -> tuple[App, list[str]]:
    app = App("tests")
    ran: list[str] = []

    @app.task(name="order", max_retries=2)
    async def order(o: Order) -> None:
        assert current_task().delivery_count == 1
        ran.append("order")

    @app.task(name="count")
    async def count(n: int) -> None:
        ran.append("count")

    @app.task(name="anything")
    async def anything(value: Any) -> None:
        ran.append("anything")

    @app.task(name="checked")
    async def checked(c: Checked) -> None:
        ran.append("checked")

    @app.task(name="nothing")
    async def nothing() -> None:
        ran.append("nothing")

    return app, ran


async def _run_bodies(bodies: list[bytes]) -> tuple[InMemoryQueue, Runner, list[str], list[str]]:
    """Run `bodies` through one runner; returns the queue, runner, tasks run, crash logs."""
    clock = FakeClock()
    app, ran = _poison_app()
    queue = InMemoryQueue(clock=clock)
    await queue.add(bodies)
    runner = Runner(queue, app, config(), clock=clock)
    with _recorded_logs() as records:
        # Within one lease: nothing may wait for a lease to lapse and come back.
        await run_burst(runner, clock, limit=LEASE / 2)
    return queue, runner, ran, _crashes(records)


def _nested(opener: bytes, depth: int) -> bytes:
    closer = b"]" if opener == b"[" else b"}"
    return opener * depth + b"1" + closer * depth


async def test_deeply_nested_payload_is_dead_lettered_at_once_not_crashing_the_worker() -> None:
    # The reported body: about 2 KB of nested arrays in the payload field.
    body = _envelope("order", _nested(b"[", 1000))
    assert len(body) < 2100

    queue, runner, ran, crashes = await _run_bodies([body])

    assert crashes == []
    assert ran == []
    (dead,) = queue.dead_letters()
    assert dead.delivery_count == 1
    assert dead.body == body
    assert "nested too deeply" in dead.reason
    assert runner.stats().reclaimed == 0
    assert await queue.len() == 0


async def test_deeply_nested_objects_anywhere_in_the_body_are_dead_lettered() -> None:
    bodies = [
        _nested(b'{"k":', DEEP),
        b'{"v":1,"extra":' + _nested(b"[", DEEP) + b"}",
        _envelope("anything", _nested(b'{"k":', DEEP)),
    ]

    queue, _, ran, crashes = await _run_bodies(bodies)

    assert crashes == []
    assert ran == []
    assert len(queue.dead_letters()) == 3
    assert all(dead.delivery_count == 1 for dead in queue.dead_letters())


async def test_payload_validator_raising_any_exception_is_dead_lettered_with_the_reason() -> None:
    queue, _, ran, crashes = await _run_bodies([_envelope("checked", b'{"n":-1}')])

    assert crashes == []
    assert ran == []
    (dead,) = queue.dead_letters()
    assert dead.reason.startswith("task 'checked': payload does not match Checked: KeyError")
    assert "n must not be negative" in dead.reason


async def test_reason_for_a_huge_unknown_task_name_is_cut_short() -> None:
    queue, _, _, crashes = await _run_bodies([_envelope("x" * 100_000, b"null")])

    assert crashes == []
    (dead,) = queue.dead_letters()
    assert dead.reason.startswith("unknown task 'xxx")
    assert dead.reason.endswith("...")
    assert len(dead.reason) < 2100


async def test_delivery_count_over_every_tasks_allowance_is_given_up_before_decoding() -> None:
    # A body whose decoding kills the worker outright (not an exception: the process
    # dies) comes back after each lease; only a check *before* decoding can stop it.
    clock = FakeClock()
    app, queue = make(clock)
    failures: list[TaskFailure] = []

    @app.task(max_retries=2)
    async def generous() -> None:
        pass

    @app.task(max_retries=0)
    async def strict() -> None:
        pass

    await Producer(queue, app, clock=clock).dispatch(strict)
    # Four deliveries never finished: their workers died while decoding.
    for consumer in ("dead-1", "dead-2", "dead-3", "dead-4"):
        await clock.advance(LEASE + 1)
        got = await queue.reclaim(
            consumer, lease_seconds=LEASE, max_messages=1
        ) or await queue.receive(consumer, max_messages=1, wait_seconds=0, lease_seconds=LEASE)
        assert len(got) == 1
    await clock.advance(LEASE + 1)

    def on_failure(failure: TaskFailure) -> None:
        failures.append(failure)

    runner = Runner(queue, app, config(max_retries=1, failed_task_handler=on_failure), clock=clock)
    await run_burst(runner, clock)

    (failure,) = failures
    assert failure.envelope is None  # not decoded
    assert failure.delivery.delivery_count == 5
    assert failure.reason.startswith(
        "delivered 5 times, more than any task of this app allows (3 attempt(s)"
    )
    assert await queue.len() == 0


async def test_delivery_count_within_the_runner_wide_cap_is_still_decoded() -> None:
    # The runner-wide cap is the largest allowance; the task's own cap still applies after.
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    runs: list[int] = []

    @app.task(max_retries=3)
    async def generous() -> None:
        runs.append(current_task().delivery_count)

    @app.task(max_retries=0)
    async def strict() -> None:
        runs.append(current_task().delivery_count)

    producer = Producer(queue, app, clock=clock)
    await producer.dispatch(generous)
    await producer.dispatch(strict)
    for consumer in ("dead-1", "dead-2"):
        await clock.advance(LEASE + 1)
        got = await queue.reclaim(
            consumer, lease_seconds=LEASE, max_messages=2
        ) or await queue.receive(consumer, max_messages=2, wait_seconds=0, lease_seconds=LEASE)
        assert len(got) == 2
    await clock.advance(LEASE + 1)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config(max_retries=0))

    assert runs == [3]  # generous ran its third delivery; strict was given up
    (dead,) = queue.dead_letters()
    assert dead.reason.startswith("delivered 3 times but task")
    assert "allows 1 attempt(s) (max_retries=0)" in dead.reason


# -- fuzzing -------------------------------------------------------------------------

_GOOD_FIELDS: dict[str, bytes] = {
    "v": b"1",
    "id": b'"abc"',
    "task": b'"order"',
    "payload": b'{"sku":"a","quantity":1}',
    "enqueued_at": b"0",
    "headers": b'{"trace":"x"}',
}

_HUGE_NUMBERS = [
    b"9" * 400,
    b"-" + b"9" * 400,
    b"1e99999",
    b"-1e400",
    b"18446744073709551616",
    b"1" + b"0" * 5000,
    b"0." + b"0" * 3000 + b"1",
]

_BAD_UTF8 = [b'"\xff\xfe"', b'"\xed\xa0\x80"', b'"\xc3"', b'"a\x00b"', b'"\\ud800"']

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=10,
).map(msgspec.json.encode)


@st.composite
def _fragments(draw: st.DrawFn) -> bytes:
    """A JSON-ish value: valid of any type, deeply nested, a huge number or bad UTF-8."""
    kind = draw(st.sampled_from(["json", "nested", "huge", "utf8"]))
    if kind == "json":
        return draw(_json_values)
    if kind == "nested":
        depth = draw(st.integers(min_value=1, max_value=DEEP))
        return _nested(draw(st.sampled_from([b"[", b'{"k":'])), depth)
    if kind == "huge":
        return draw(st.sampled_from(_HUGE_NUMBERS))
    return draw(st.sampled_from(_BAD_UTF8))


@st.composite
def _envelopes(draw: st.DrawFn) -> bytes:
    """An envelope with some fields replaced by hostile values, dropped or duplicated."""
    fields = dict(_GOOD_FIELDS)
    fields["task"] = b'"%s"' % draw(
        st.sampled_from([b"order", b"count", b"anything", b"checked", b"nothing", b"nope"])
    )
    fields["payload"] = draw(
        st.sampled_from([b'{"sku":"a","quantity":1}', b"3", b'{"n":-2}', b'{"n":2}', b"null"])
        | _fragments()
    )
    for name in draw(st.lists(st.sampled_from(sorted(_GOOD_FIELDS)), max_size=3, unique=True)):
        if draw(st.booleans()):
            fields[name] = draw(_fragments())
        else:
            del fields[name]
    parts = [b'"%s":%s' % (name.encode(), value) for name, value in fields.items()]
    if draw(st.booleans()):
        parts.append(draw(st.sampled_from(parts or [b'"v":1'])))  # a duplicated key
    return b"{" + b",".join(parts) + b"}"


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["bytes", "fragment", "envelope", "truncated"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "fragment":
        return draw(_fragments())
    body = draw(_envelopes())
    if kind == "truncated":
        return body[: draw(st.integers(min_value=0, max_value=max(0, len(body) - 1)))]
    return body


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(_bodies(), min_size=1, max_size=8))
def test_every_hostile_body_is_acked_or_dead_lettered_once_within_one_lease(
    bodies: list[bytes],
) -> None:
    queue, runner, ran, crashes = asyncio.run(_run_bodies(bodies))

    assert crashes == []
    dead = queue.dead_letters()
    assert all(letter.delivery_count == 1 for letter in dead)
    assert len(ran) + len(dead) == len(bodies)
    stats = runner.stats()
    assert stats.reclaimed == 0
    assert stats.received == len(bodies)
    assert stats.retried == 0
    assert queue.in_flight() == {}
    assert queue.ready_bodies() == []
