"""Arguments: invalid ones are rejected before anything changes, valid edges accepted (P30, X25).

The contract: "Invalid arguments raise ValueError or TypeError before anything
changes", and "Durations are finite numbers of seconds: NaN, infinities and negative
values (zero too, for leases) are invalid arguments". A value of the right type out of
range must raise ValueError (the methods' Raises sections say so); a value of the
wrong type may raise either. After every rejected call the suite checks that nothing
changed: `len` and `stats` are as before, nothing was leased, and a delivery held
before the call is still current (its holder can heartbeat it) and was neither
released nor completed.

`bool` is an `int` to the type checker, so ``max_messages=True`` may be taken as 1 or
refused; ``False`` is 0 and must be refused either way.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from taskrunner.queue import Delivery, Receipt

from ..scenario import ConformanceBase, Scenario, conformance
from .fencing import OPS, Op, QueueState, lease_op, queue_state

__all__ = ["ArgumentCases"]

NAN, INF = math.nan, math.inf

# Durations of the right type that are out of range: ValueError.
BAD_DURATIONS: tuple[float, ...] = (NAN, INF, -INF, -1.0, -1e-9)
# Leases must also be above zero.
BAD_LEASES: tuple[float, ...] = (*BAD_DURATIONS, 0.0, -0.0, 0)
# Not numbers at all: ValueError or TypeError.
NOT_NUMBERS: tuple[object, ...] = (None, "1", b"1")
# Batch sizes: ints below 1 (ValueError), and things that are not ints (either).
BAD_COUNTS: tuple[int, ...] = (0, -1)
NOT_COUNTS: tuple[object, ...] = (False, 1.0, "1", None)

# A tiny positive duration: valid for leases, waits and delays alike.
TINY = 0.001

Call = Callable[[], Awaitable[object]]


def _later(function: Callable[..., Awaitable[object]], *args: Any, **kwargs: Any) -> Call:
    """`function` with these arguments, to call later (arguments of any type, on purpose)."""
    return lambda: function(*args, **kwargs)


async def _rejected(
    s: Scenario, name: str, call: Call, errors: tuple[type[Exception], ...], before: QueueState
) -> None:
    """Check that `call` raises one of `errors` and leaves the queue as `before`."""
    try:
        result = await call()
    except errors:
        pass
    else:
        expected = " or ".join(e.__name__ for e in errors)
        raise AssertionError(f"{name} returned {result!r} instead of raising {expected}")
    after = await queue_state(s.queue)
    assert after == before, f"the rejected {name} changed the queue: {before} -> {after}"
    s.boundary()  # one invalid value, refused before anything changed


def _value_or_type(
    value: object, *, kinds: tuple[type, ...] = (int, float)
) -> tuple[type[Exception], ...]:
    """ValueError for a value of one of `kinds` out of range, ValueError or TypeError else."""
    right_type = isinstance(value, kinds) and not isinstance(value, bool)
    return (ValueError,) if right_type else (ValueError, TypeError)


class ArgumentCases(ConformanceBase):
    """P30 (invalid arguments, state unchanged) and X25 (valid edges accepted)."""

    @conformance("P30")
    async def test_receive_rejects_invalid_arguments_before_leasing_anything(
        self, s: Scenario
    ) -> None:
        """Bad max_messages, wait_seconds and lease_seconds lease nothing, then count 1 comes."""
        (message_id,) = await s.add([b"not to be leased by a rejected receive"])
        consumer = s.consumer("a")
        before = await queue_state(s.queue)

        def receive(**bad: object) -> Call:
            arguments: dict[str, Any] = {
                "max_messages": 1,
                "wait_seconds": 0,
                "lease_seconds": s.lease,
                **bad,
            }
            return lambda: s.queue.receive(consumer, **arguments)

        cases: list[tuple[str, object]] = [
            *(("max_messages", v) for v in (*BAD_COUNTS, *NOT_COUNTS)),
            *(("wait_seconds", v) for v in (*BAD_DURATIONS, *NOT_NUMBERS)),
            *(("lease_seconds", v) for v in (*BAD_LEASES, *NOT_NUMBERS)),
        ]
        for argument, value in cases:
            kinds = (int,) if argument == "max_messages" else (int, float)
            await _rejected(
                s,
                f"receive({argument}={value!r})",
                receive(**{argument: value}),
                _value_or_type(value, kinds=kinds),
                before,
            )

        (delivery,) = await s.receive_n(s.queue, consumer, 1)
        assert delivery.message_id == message_id
        assert delivery.delivery_count == 1, (
            f"after rejected receives the message came with count {delivery.delivery_count}: "
            "a rejected receive leased it"
        )
        assert await s.queue.ack([delivery]) == []

    @conformance("P30")
    async def test_reclaim_rejects_invalid_arguments_before_taking_anything(
        self, s: Scenario
    ) -> None:
        """Bad lease_seconds and max_messages take nothing; a valid reclaim then gets count 2."""
        (message_id,) = await s.add([b"not to be taken by a rejected reclaim"])
        holder = s.consumer("holder")
        (held,) = await s.receive_n(s.queue, holder, 1)
        if s.requires_heartbeat:
            await s.lapse(s.queue, [held])
        before = await queue_state(s.queue)
        reclaimer = s.consumer("reclaimer")

        def reclaim(**bad: object) -> Call:
            arguments: dict[str, Any] = {"lease_seconds": s.lease, "max_messages": 10, **bad}
            return lambda: s.queue.reclaim(reclaimer, **arguments)

        cases: list[tuple[str, object]] = [
            *(("lease_seconds", v) for v in (*BAD_LEASES, *NOT_NUMBERS)),
            *(("max_messages", v) for v in (*BAD_COUNTS, *NOT_COUNTS)),
        ]
        for argument, value in cases:
            kinds = (int,) if argument == "max_messages" else (int, float)
            await _rejected(
                s,
                f"reclaim({argument}={value!r})",
                reclaim(**{argument: value}),
                _value_or_type(value, kinds=kinds),
                before,
            )

        if not s.requires_heartbeat:
            assert await s.queue.heartbeat([held]) == [], "a rejected reclaim took the lease"
            assert await s.queue.ack([held]) == []
            return
        (taken,) = await s.reclaim_ids(s.queue, reclaimer, {message_id})
        assert taken.delivery_count == 2, (
            f"after rejected reclaims the lapsed message came with count "
            f"{taken.delivery_count}, not 2: a rejected reclaim took it"
        )
        assert await s.queue.heartbeat([held]) == [held]
        assert await s.queue.ack([taken]) == []

    @conformance("P30")
    async def test_release_rejects_invalid_delays_and_the_lease_stays_as_it_was(
        self, s: Scenario
    ) -> None:
        """NaN, infinite, negative and non-numeric delays release nothing, empty batch too."""
        (message_id,) = await s.add([b"not to be released by a rejected release"])
        consumer = s.consumer("a")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        before = await queue_state(s.queue)

        for value in (*BAD_DURATIONS, *NOT_NUMBERS):
            for batch in ([held], []):
                await _rejected(
                    s,
                    f"release({'[held]' if batch else '[]'}, delay_seconds={value!r})",
                    _later(s.queue.release, batch, delay_seconds=value),
                    _value_or_type(value),
                    before,
                )
            assert await s.queue.heartbeat([held]) == [], (
                f"release(delay_seconds={value!r}) was rejected but took the lease"
            )

        other = await s.open()
        await s.nothing_for(other, s.consumer("b"), {message_id})
        assert await s.queue.release([held]) == []
        (again,) = await s.receive_n(other, s.consumer("b"), 1)
        assert again.delivery_count == 2, (
            f"released once after rejected releases, it came back with count {again.delivery_count}"
        )
        assert await other.ack([again]) == []

    @conformance("P30")
    async def test_add_rejects_a_batch_with_any_body_that_is_not_bytes_and_adds_none_of_it(
        self, s: Scenario
    ) -> None:
        """str, bytearray, memoryview, None and int bodies, first or last; a bare bytes object."""
        before = await queue_state(s.queue)
        batches: dict[str, object] = {
            "[b'ok', 'text']": [b"ok", "text"],
            "['text', b'ok']": ["text", b"ok"],
            "[b'ok', bytearray]": [b"ok", bytearray(b"mutable")],
            "[b'ok', memoryview]": [b"ok", memoryview(b"view")],
            "[b'ok', None]": [b"ok", None],
            "[b'ok', 7]": [b"ok", 7],
            "b'bare bytes' (not a list of bodies)": b"bare bytes",
        }
        for label, batch in batches.items():
            await _rejected(
                s,
                f"add({label})",
                _later(s.queue.add, batch),
                (TypeError,),
                before,
            )
        got = await s.queue.receive(
            s.consumer("a"), max_messages=10, wait_seconds=0, lease_seconds=s.lease
        )
        assert got == [], f"rejected adds left {len(got)} message(s) to receive"
        (message_id,) = await s.add([b"valid after all"])
        (delivery,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        assert (delivery.message_id, delivery.body) == (message_id, b"valid after all")
        assert await s.queue.ack([delivery]) == []

    @conformance("P30")
    async def test_lease_operations_reject_a_batch_holding_something_that_is_not_a_delivery(
        self, s: Scenario
    ) -> None:
        """heartbeat, ack, release and dead_letter of [held, junk] raise and leave held as it was.

        The junk comes last, so a backend that acts on each delivery before looking at
        the next one has already acted on the valid one when it fails.
        """
        (message_id,) = await s.add([b"held while junk is passed"])
        (held,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        before = await queue_state(s.queue)
        junk: dict[str, object] = {
            "None": None,
            "a message id": message_id,
            "a Receipt": held.receipt,
        }
        for op in OPS:
            for label, item in junk.items():
                batch: list[Any] = [held, item]
                await _rejected(
                    s,
                    f"{op}([held, {label}])",
                    _later(lease_op, s.queue, op, batch),
                    (ValueError, TypeError),
                    before,
                )
                assert await s.queue.heartbeat([held]) == [], (
                    f"the rejected {op}([held, {label}]) took or completed the held delivery"
                )
        assert await s.queue.ack([held]) == []

    @conformance("P30")
    async def test_dead_letter_rejects_a_reason_that_is_not_a_string(self, s: Scenario) -> None:
        """None, int and bytes reasons raise; so does a str UTF-8 cannot encode (ValueError).

        A lone surrogate (U+DCFF, what ``str()`` of an error about an undecodable
        file name holds) is not text a backend can store; it must be refused before
        anything changes, not fail halfway. The delivery is still held, nothing is dead.
        """
        await s.add([b"not dead yet"])
        (held,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        before = await queue_state(s.queue)
        cases: tuple[tuple[object, tuple[type[Exception], ...]], ...] = (
            (None, (ValueError, TypeError)),
            (7, (ValueError, TypeError)),
            (b"bytes", (ValueError, TypeError)),
            ("file \udcff.txt", (ValueError,)),
            ("\ud800", (ValueError,)),
        )
        for reason, errors in cases:
            await _rejected(
                s,
                f"dead_letter([held], reason={reason!r})",
                _later(s.queue.dead_letter, [held], reason=reason),
                errors,
                before,
            )
            assert await s.queue.heartbeat([held]) == [], (
                f"dead_letter(reason={reason!r}) was rejected but took the delivery"
            )
        assert await s.queue.ack([held]) == []

    @conformance("P11", "P30")
    async def test_batch_with_a_malformed_message_id_is_reported_or_rejected_as_a_whole(
        self, s: Scenario
    ) -> None:
        """A never-issued id beside a current delivery: reported, or the whole call refused.

        Either the bogus delivery is returned and the current one acted on, or the
        call raises ValueError/TypeError and nothing changes. Ids: 30 nines (too
        large for a 64-bit integer column), empty, negative, hex; the bogus delivery
        first and last.
        """
        for op in OPS:
            for bogus_id in ("9" * 30, "", "-1", "0x1f"):
                for bogus_first in (True, False):
                    await _malformed_in_batch(s, op, bogus_id, bogus_first=bogus_first)

    @conformance("X25")
    async def test_valid_edge_arguments_are_accepted(self, s: Scenario) -> None:
        """Wait 0 and tiny waits, tiny and whole-number leases, delay 0 and a tiny delay.

        Also max_messages 1 and reclaim with a tiny lease. A tiny positive duration is
        as valid as any other; a backend that rejects leases shorter than a second,
        or integer durations, refuses calls the contract allows.
        """
        queue = s.queue
        consumer = s.consumer("edge")
        ids = set(await s.add([b"edge 1", b"edge 2", b"edge 3"]))
        whole_lease = max(1, math.ceil(s.lease))
        held: list[Delivery] = []
        for wait, lease in ((0, TINY), (0.0, whole_lease), (TINY, s.lease)):
            try:
                got = await queue.receive(
                    consumer, max_messages=1, wait_seconds=wait, lease_seconds=lease
                )
            except (ValueError, TypeError) as exc:
                raise AssertionError(
                    f"receive(max_messages=1, wait_seconds={wait!r}, lease_seconds={lease!r}) "
                    f"was rejected: {exc!r}"
                ) from exc
            assert len(got) == 1, (
                f"receive(max_messages=1, wait_seconds={wait!r}, lease_seconds={lease!r}) "
                f"returned {len(got)} deliveries with messages ready"
            )
            held.extend(got)
        try:
            reclaimed = await queue.reclaim(consumer, lease_seconds=TINY, max_messages=1)
        except (ValueError, TypeError) as exc:
            raise AssertionError(f"reclaim(lease_seconds={TINY}) was rejected: {exc!r}") from exc
        assert len(reclaimed) <= 1
        # On real time the tiny lease has lapsed and may have been reclaimed just now.
        current = {d.message_id: d for d in held}
        current.update({d.message_id: d for d in reclaimed})
        tiny, whole, waited = (current[d.message_id] for d in held)
        # Before any time passes: once it does, the tiny lease is anybody's to reclaim.
        assert await queue.ack([tiny]) == [], "a lapsed, unclaimed tiny lease could not ack"
        for delay in (0, TINY):
            try:
                reported = await queue.release(
                    [whole if delay == 0 else waited], delay_seconds=delay
                )
            except (ValueError, TypeError) as exc:
                raise AssertionError(
                    f"release(delay_seconds={delay!r}) was rejected: {exc!r}"
                ) from exc
            assert reported == [], f"release(delay_seconds={delay!r}) reported {reported}"
        await s.advance(TINY + s.margin)
        back = await s.collect(queue, s.consumer("later"), {whole.message_id, waited.message_id})
        assert await queue.ack(back) == []
        assert await queue.len() == 0, f"messages {sorted(ids)} were not all completed"


async def _malformed_in_batch(s: Scenario, op: Op, bogus_id: str, *, bogus_first: bool) -> None:
    (message_id,) = await s.add([b"beside a malformed id"])
    (held,) = await s.receive_n(s.queue, s.consumer("a"), 1)
    bogus = Delivery(
        message_id=bogus_id,
        body=b"",
        delivery_count=held.delivery_count,
        receipt=Receipt(
            consumer=held.receipt.consumer,
            delivery_count=held.receipt.delivery_count,
            token=held.receipt.token,
        ),
    )
    batch: Sequence[Delivery] = [bogus, held] if bogus_first else [held, bogus]
    name = f"{op}({'[bogus, held]' if bogus_first else '[held, bogus]'}) with id {bogus_id!r}"
    before = await queue_state(s.queue)
    try:
        reported = await lease_op(s.queue, op, batch)
    except (ValueError, TypeError):
        after = await queue_state(s.queue)
        assert after == before, f"the rejected {name} changed the queue: {before} -> {after}"
        assert await s.queue.heartbeat([held]) == [], f"the rejected {name} took the lease"
        assert await s.queue.ack([held]) == []
        return
    assert reported == [bogus], f"{name} returned {reported}; expected exactly the bogus one"
    after = await queue_state(s.queue)
    if op == "heartbeat":
        expected = before
    elif op == "release":
        expected = before._replace(ready=before.ready + 1, in_flight=before.in_flight - 1)
    else:
        expected = before._replace(length=before.length - 1, in_flight=before.in_flight - 1)
        if op == "dead_letter":
            expected = expected._replace(dead=before.dead + 1, dead_letters=after.dead_letters)
    assert after == expected, f"{name} did not act on the held delivery alone: {after}"
    if op == "heartbeat":
        assert await s.queue.ack([held]) == []
    elif op == "release":
        (again,) = await s.receive_n(s.queue, s.consumer("b"), 1)
        assert again.message_id == message_id
        assert await s.queue.ack([again]) == []
